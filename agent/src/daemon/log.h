/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The daemon's log: one timestamped line per event on stderr. Informational
 * lines can be silenced (--quiet); errors and ended connections always show.
 */
#ifndef HOTPATH_DAEMON_LOG_H
#define HOTPATH_DAEMON_LOG_H

#include <stdbool.h>
#include <stdint.h>

/* Silence informational lines. */
void hp_log_set_quiet(bool quiet);
bool hp_log_quiet(void);
/* Log one line; info lines are skipped when quiet. */
void hp_log(bool info, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Milliseconds on the monotonic clock. */
int64_t hp_mono_ms(void);

#endif
