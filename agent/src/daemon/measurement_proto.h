/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The daemon's measurements in the protocol's terms (agent.proto): a
 * StartMeasurement's resources, (catalog digest, function index, kind,
 * offset), as the measure layer's parsed resources; an armed handle
 * described as MeasurementInfo; states and metrics mapped between the two.
 */
#ifndef HOTPATH_DAEMON_MEASUREMENT_PROTO_H
#define HOTPATH_DAEMON_MEASUREMENT_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "measure/measure.h"
#include "model/model.h"
#include "hotpath/v1/agent.pb-c.h"

/* Now, in ns since the epoch (MeasurementInfo's started and ended times). */
int64_t hp_unix_ns(void);

Hotpath__V1__MeasurementState hp_measurement_state_proto(enum hp_measure_state s);
/* The proto's metric for a measure-layer metric (enum hp_metric). */
Hotpath__V1__Metric hp_metric_proto(int m);
/* Replace info's detail with a copy of s. */
void hp_measurement_info_set_detail(Hotpath__V1__MeasurementInfo *info, const char *s);

/* A request's resources as the measure layer's, in the target's model m:
 * *res_out and *blocks_out (whether to add a function's blocks) are
 * malloc'd, req->n_resources long. 0, or a negative errno with the reason. */
int hp_measurement_request_resources(const struct hp_model *m, const Hotpath__V1__StartMeasurement *req,
				     struct hp_resource_spec **res_out, bool **blocks_out, char *err, size_t errlen);
/* The armed measurement described as MeasurementInfo (unpacked and owned),
 * or NULL when out of memory. */
Hotpath__V1__MeasurementInfo *hp_measurement_describe(struct hp_measure *h, const struct hp_model *m,
						      const char *target_id, const Hotpath__V1__StartMeasurement *req,
						      unsigned interval_ms);
/* Whether two descriptions measure the same rows. */
bool hp_measurement_same_rows(const Hotpath__V1__MeasurementInfo *a, const Hotpath__V1__MeasurementInfo *b);
/* An owned copy (unpacked), or NULL. */
Hotpath__V1__MeasurementInfo *hp_measurement_info_copy(const Hotpath__V1__MeasurementInfo *info);

#endif
