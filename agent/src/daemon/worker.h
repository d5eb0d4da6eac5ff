/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The command worker: one thread that runs the backend's commands in the
 * order they came, so a slow one (attaching a large process, arming ten
 * thousand probes) never stalls the stream loop, which keeps sending metric
 * intervals and acknowledgements meanwhile. Commands are idempotent by id:
 * an id that is queued or running is not queued again, and the result of one
 * that finished recently is sent again instead of running it twice.
 * CancelCommand is answered at once on the stream loop: a queued command is
 * dropped (its result says cancelled), a running one is flagged and stops at
 * its next step.
 */
#ifndef HOTPATH_DAEMON_WORKER_H
#define HOTPATH_DAEMON_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotpath/v1/agent.pb-c.h"

struct agent;

/* Commands waiting at most; results remembered for re-sending. */
#define HP_WORKER_QUEUE   256
#define HP_WORKER_RESULTS 256
#define HP_COMMAND_ID_MAX 128

/* One command while it waits or runs. */
struct hp_job {
	char id[HP_COMMAND_ID_MAX];
	Hotpath__V1__Command *cmd; /* unpacked, owned */
	_Atomic bool cancelled;    /* set by the stream loop, read by the worker */
};

/* What the worker does with each job, on its thread (daemon/commands.h's
 * hp_run_command in the daemon): it ends the job with one hp_job_result. */
typedef void (*hp_job_handler)(struct agent *ag, struct hp_job *job);

/* What the worker does when no command has come for a while (may be NULL). */
typedef void (*hp_idle_handler)(struct agent *ag);

struct hp_worker {
	hp_job_handler run;
	hp_idle_handler idle;
	int idle_ms;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	bool started, stop;
	struct hp_job *queue[HP_WORKER_QUEUE];
	size_t head, n;
	struct hp_job *running;
	struct {
		char id[HP_COMMAND_ID_MAX];
		uint8_t *buf; /* packed AgentMessage{result} */
		size_t len;
	} results[HP_WORKER_RESULTS];
	size_t next_result;
};

/* Start the thread, which hands each job to run, and calls idle (may be
 * NULL) after every idle_ms without a command. */
int hp_worker_start(struct agent *ag, hp_job_handler run, hp_idle_handler idle, int idle_ms);
/* Stop after the running command (queued ones are dropped) and free. */
void hp_worker_stop(struct agent *ag);
/* Take a command from the stream (copied); answers duplicates and cancels. */
void hp_worker_submit(struct agent *ag, const Hotpath__V1__Command *c);

/* For command implementations: whether the job was cancelled; report progress. */
bool hp_job_cancelled(const struct hp_job *job);
void hp_job_progress(struct agent *ag, const struct hp_job *job, double fraction, const char *message);
/* Send (and remember) the job's one result. r->command_id is filled in. */
void hp_job_result(struct agent *ag, const struct hp_job *job, Hotpath__V1__CommandResult *r);
/* The job's result as a failure with this error (cancelled if the job was). */
void hp_job_fail(struct agent *ag, const struct hp_job *job, const char *error);

#endif
