/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Running measurements kept in the state folder, so a restarted agent arms
 * them again: DIR/ID.pb is the measurement's MeasurementInfo as armed,
 * written whole to a temporary file then renamed. An empty dir keeps
 * nothing.
 */
#ifndef HOTPATH_DAEMON_MEASUREMENT_STORE_H
#define HOTPATH_DAEMON_MEASUREMENT_STORE_H

#include "hotpath/v1/agent.pb-c.h"

/* Keep (or replace) measurement id; a failure is logged. */
void hp_measurement_save(const char *dir, const char *id, const Hotpath__V1__MeasurementInfo *info);
/* Forget measurement id. */
void hp_measurement_unsave(const char *dir, const char *id);

#endif
