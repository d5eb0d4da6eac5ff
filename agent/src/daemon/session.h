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

/* Serve one connection: 1 if the backend accepted the agent (sent Welcome),
 * which resets the reconnect backoff; -2 if it refused the certificate
 * (UNAUTHENTICATED); 0 or -1 for other ends and failures to start. */
int hp_serve_stream(struct agent *ag, const char *server, int64_t *next_ms);
/* Take the sampler's interval into the outbox if it is due (*next_ms,
 * monotonic), connected or not. */
void hp_interval_tick(struct agent *ag, int64_t *next_ms);

#endif
