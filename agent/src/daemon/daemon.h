/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent daemon (`hotpathd run`): enrols if it has no credential yet,
 * parses the live kernel once, samples every CPU, serves the kernel and the
 * processes it is asked to attach as targets, runs the backend's commands
 * and measurements, and serves the backend over one mutual-TLS gRPC stream,
 * reconnecting when it ends. The CLI fills the options; everything else
 * happens here.
 */
#ifndef HOTPATH_DAEMON_H
#define HOTPATH_DAEMON_H

#include <stdbool.h>

#include <stddef.h>

struct hp_agent_config;

struct hp_daemon_opts {
	const char *server;        /* backend gRPC address, "host:port" */
	const char *enroll_server; /* enrolment address; NULL = the server's host, port + 1 */
	const char *state_dir;     /* key, certificate, CA and spool */
	const char *token;         /* one-time enrolment token, used only to enrol; may be NULL */
	const char *ca_file;       /* CA to verify the backend with when enrolling; may be NULL */
	const char *host_id;       /* identity to report; NULL = /etc/machine-id */
	unsigned interval_ms;      /* metric interval */
	unsigned frequency;        /* samples per second per CPU */
	size_t buffer_bytes;       /* unacknowledged data kept in memory */
	size_t spool_bytes;        /* and on disk beyond that */
	bool quiet;                /* log only errors and ended connections */
	const char *const *attach; /* processes to attach at start: a pid or a command name each */
	size_t nattach;
	bool no_stacks;                       /* sample program counters only, no call chains */
	unsigned stack_depth;                 /* frames per call chain; 0 = the sampler's default (64) */
	const struct hp_agent_config *config; /* labels from the config file; may be NULL */
};

/* Run until SIGINT/SIGTERM: 0 after a requested stop, -1 if start-up failed
 * (the reason is logged). */
int hp_daemon_run(const struct hp_daemon_opts *o);

#endif
