/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One interval of a measurement as a numbered MeasurementBatch in the
 * outbox: the rows' values (rows whose values are all zero left out), units
 * and mechanisms interned per batch, and the edges of the functions measured
 * with their blocks (measure/edges.h).
 */
#ifndef HOTPATH_DAEMON_MEASUREMENT_BATCH_H
#define HOTPATH_DAEMON_MEASUREMENT_BATCH_H

#include "daemon/outbox.h"
#include "measure/measure.h"

/* Queue reading r of measurement id (handle h) with state (a
 * Hotpath__V1__MeasurementState) and detail. 0 or a negative errno. */
int hp_measurement_queue_batch(struct hp_outbox *outbox, const char *id, struct hp_measure *h,
			       const struct hp_measure_reading *r, int state, const char *detail);

#endif
