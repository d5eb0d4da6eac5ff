/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One stream session: Hello, Welcome, the catalog pump, metric intervals and
 * commands, until the call ends. Also the interval tick, which runs whether
 * or not a stream is up.
 */
#ifndef HOTPATH_DAEMON_SESSION_H
#define HOTPATH_DAEMON_SESSION_H

#include <stdbool.h>
#include <stdint.h>

struct agent;
struct hp_stream;

/* Serve one connection; returns true if the backend accepted the agent
 * (sent Welcome), which resets the reconnect backoff. */
bool hp_serve_stream(struct agent *ag, const char *server, const char *token, int64_t *next_ms);
/* Take the sampler's interval if it is due (*next_ms, monotonic) and send it
 * on st, or count it as dropped when st is NULL, not yet welcomed, or backed up. */
void hp_interval_tick(struct agent *ag, struct hp_stream *st, bool can_send, int64_t *next_ms);

#endif
