/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent daemon (`hotpathd run`): parses the live kernel once, samples
 * every CPU, and serves the backend over one gRPC stream, reconnecting when
 * it ends. The CLI fills the options; everything else happens here.
 */
#ifndef HOTPATH_DAEMON_H
#define HOTPATH_DAEMON_H

#include <stdbool.h>

struct hp_daemon_opts {
	const char *server;   /* backend gRPC address, "host:port" */
	const char *token;    /* agent bearer token */
	const char *host_id;  /* identity to report; NULL = /etc/machine-id */
	unsigned interval_ms; /* metric interval */
	unsigned frequency;   /* samples per second per CPU */
	bool quiet;           /* log only errors and ended connections */
};

/* Run until SIGINT/SIGTERM: 0 after a requested stop, -1 if start-up failed
 * (the reason is logged). */
int hp_daemon_run(const struct hp_daemon_opts *o);

#endif
