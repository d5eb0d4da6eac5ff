/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The daemon's state, shared by its parts: the kernel's model and sampler
 * that live across connections, the targets (kernel and attached processes),
 * the measurements and their thread, the command worker and the replies it
 * queues for the stream, the outbox of unacknowledged data, the host's
 * credentials, and the catalog pieces still to send on the current stream.
 * Only the daemon's own files include this.
 *
 * Threads: the main thread drives the stream (and the sampler's intervals);
 * the command worker runs commands; the measurement thread reads
 * measurements and notices exited processes. They share the outbox, the
 * replies, the targets and the measurements, each of which has its own lock.
 */
#ifndef HOTPATH_DAEMON_AGENT_H
#define HOTPATH_DAEMON_AGENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/catalog.h"
#include "daemon/credentials.h"
#include "daemon/measurements.h"
#include "daemon/outbox.h"
#include "daemon/replies.h"
#include "daemon/targets.h"
#include "daemon/worker.h"
#include "daemon/stack_defs.h"
#include "host/caps.h"
#include "host/hostinfo.h"
#include "measure/sampler.h"
#include "model/model.h"
#include "hotpath/v1/agent.pb-c.h"

#define HP_AGENT_VERSION "0.1.0"

struct hp_stream;

struct agent {
	struct hp_model *model;
	struct hp_sampler *sampler;
	struct hp_hostinfo host;
	struct hp_caps caps;
	uint32_t *block_counts; /* per module */
	unsigned interval_ms, frequency;
	double parse_seconds;
	/* Catalog pieces still to send on the current stream: digests, and the
	 * target whose module is being cut into chunks (referenced). */
	char (*catalog_queue)[65];
	size_t ncatalog, catalog_pos, cap_catalog;
	struct hp_catalog_iter catalog_it;
	struct hp_target *catalog_target;
	bool catalog_active;
	/* What the agent serves and runs. */
	struct hp_targets targets;
	struct hp_measurements measurements;
	struct hp_worker worker;
	struct hp_replies replies;
	/* Data messages until the backend acknowledges them. */
	struct hp_outbox outbox;
	/* Stack definitions the backend has (or is being sent) on this stream. */
	struct hp_stack_defs stack_defs;
	bool stacks;          /* sample call chains */
	unsigned stack_depth; /* frames per chain; 0 = the sampler's default */
	/* Who this agent is to the backend. */
	struct hp_credentials id;
	/* The state folder (journals of installed plans under replace/). */
	const char *state_dir;
	/* The config file's labels, reported in Hello; may be NULL. */
	const struct hp_agent_config *config;
};

/* Set by SIGINT/SIGTERM; read by every thread (lock-free, so a signal
 * handler may set it). */
extern _Atomic bool hp_stop_requested;

#endif
