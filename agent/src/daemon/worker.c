// SPDX-License-Identifier: Apache-2.0
/*
 * The command worker (see worker.h): a FIFO of jobs under a mutex and a
 * condition variable, one thread taking them in order and handing each to
 * the handler it was started with (the daemon's commands, daemon/commands.c). Results are packed once, remembered by id in a ring,
 * and queued for the stream loop (daemon/replies.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/agent.h"
#include "daemon/log.h"
#include "daemon/result_store.h"
#include "daemon/worker.h"

static void free_job(struct hp_job *job)
{
	if (!job)
		return;
	if (job->cmd)
		hotpath__v1__command__free_unpacked(job->cmd, NULL);
	free(job);
}

/* Commands whose results are kept on disk as well (daemon/result_store.h). */
static bool changes_a_process(const Hotpath__V1__Command *c)
{
	return c && (c->kind_case == HOTPATH__V1__COMMAND__KIND_INSTALL_PLAN ||
		     c->kind_case == HOTPATH__V1__COMMAND__KIND_REVERT_PLAN);
}

/* Commands whose results wait for the data kept before them (replies.h): a
 * stopped measurement's last interval reaches the backend before its end. */
static bool ends_a_measurement(const Hotpath__V1__Command *c)
{
	return c && c->kind_case == HOTPATH__V1__COMMAND__KIND_STOP_MEASUREMENT;
}

static void push_result(struct agent *ag, const char *id, Hotpath__V1__CommandResult *r, bool remember, bool durable,
			uint64_t after)
{
	struct hp_worker *w = &ag->worker;
	r->command_id = (char *)id;
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_RESULT;
	msg.result = r;
	if (remember) {
		size_t len = hotpath__v1__agent_message__get_packed_size(&msg);
		uint8_t *buf = malloc(len ? len : 1);
		if (buf) {
			hotpath__v1__agent_message__pack(&msg, buf);
			int e = durable && ag->state_dir ? hp_result_store_put(ag->state_dir, id, buf, len) : 0;
			if (e < 0)
				hp_log(false, "could not keep the result of command %s in the state folder: %s", id,
				       strerror(-e));
			pthread_mutex_lock(&w->lock);
			size_t at = w->next_result++ % HP_WORKER_RESULTS;
			free(w->results[at].buf);
			snprintf(w->results[at].id, sizeof(w->results[at].id), "%s", id);
			w->results[at].buf = buf;
			w->results[at].len = len;
			pthread_mutex_unlock(&w->lock);
		}
	}
	if (hp_replies_push_after(&ag->replies, &msg, after) < 0)
		hp_log(false, "could not queue the result of command %s", id);
}

bool hp_job_cancelled(const struct hp_job *job)
{
	return job && job->cancelled;
}

void hp_job_progress(struct agent *ag, const struct hp_job *job, double fraction, const char *message)
{
	if (!job)
		return;
	Hotpath__V1__Progress p = HOTPATH__V1__PROGRESS__INIT;
	p.command_id = (char *)job->id;
	p.fraction = fraction < 0 ? 0 : fraction > 1 ? 1 : fraction;
	p.message = (char *)(message ? message : "");
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_PROGRESS;
	msg.progress = &p;
	hp_replies_push(&ag->replies, &msg);
}

void hp_job_result(struct agent *ag, const struct hp_job *job, Hotpath__V1__CommandResult *r)
{
	push_result(ag, job->id, r, true, changes_a_process(job->cmd),
		    ends_a_measurement(job->cmd) ? hp_outbox_mark(&ag->outbox) : 0);
}

void hp_job_fail(struct agent *ag, const struct hp_job *job, const char *error)
{
	Hotpath__V1__CommandResult r = HOTPATH__V1__COMMAND_RESULT__INIT;
	r.ok = false;
	r.cancelled = hp_job_cancelled(job);
	r.error = (char *)error;
	hp_job_result(ag, job, &r);
}

static void simple_result(struct agent *ag, const char *id, bool ok, bool cancelled, const char *error, bool remember)
{
	Hotpath__V1__CommandResult r = HOTPATH__V1__COMMAND_RESULT__INIT;
	r.ok = ok;
	r.cancelled = cancelled;
	r.error = (char *)(error ? error : "");
	push_result(ag, id, &r, remember, false, 0);
}

static void *worker_main(void *arg)
{
	struct agent *ag = arg;
	struct hp_worker *w = &ag->worker;
	for (;;) {
		pthread_mutex_lock(&w->lock);
		while (!w->stop && !w->n) {
			if (!w->idle) {
				pthread_cond_wait(&w->wake, &w->lock);
				continue;
			}
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += w->idle_ms / 1000;
			until.tv_nsec += (long)(w->idle_ms % 1000) * 1000000;
			if (until.tv_nsec >= 1000000000) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000;
			}
			if (pthread_cond_timedwait(&w->wake, &w->lock, &until) == ETIMEDOUT && !w->stop && !w->n) {
				pthread_mutex_unlock(&w->lock);
				w->idle(ag);
				pthread_mutex_lock(&w->lock);
			}
		}
		if (w->stop) {
			pthread_mutex_unlock(&w->lock);
			return NULL;
		}
		struct hp_job *job = w->queue[w->head];
		w->head = (w->head + 1) % HP_WORKER_QUEUE;
		w->n--;
		w->running = job;
		pthread_mutex_unlock(&w->lock);

		w->run(ag, job);

		pthread_mutex_lock(&w->lock);
		w->running = NULL;
		pthread_mutex_unlock(&w->lock);
		free_job(job);
	}
}

int hp_worker_start(struct agent *ag, hp_job_handler run, hp_idle_handler idle, int idle_ms)
{
	struct hp_worker *w = &ag->worker;
	memset(w, 0, sizeof(*w));
	w->run = run;
	w->idle = idle_ms > 0 ? idle : NULL;
	w->idle_ms = idle_ms;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->wake, NULL);
	int r = pthread_create(&w->thread, NULL, worker_main, ag);
	if (r)
		return -r;
	w->started = true;
	return 0;
}

void hp_worker_stop(struct agent *ag)
{
	struct hp_worker *w = &ag->worker;
	if (!w->started)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	if (w->running)
		w->running->cancelled = true;
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	for (size_t i = 0; i < w->n; i++)
		free_job(w->queue[(w->head + i) % HP_WORKER_QUEUE]);
	for (size_t i = 0; i < HP_WORKER_RESULTS; i++)
		free(w->results[i].buf);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->lock);
	memset(w, 0, sizeof(*w));
}

/* Cancel command target_id: answer the cancel, and the cancelled command when it was queued. */
static void cancel(struct agent *ag, const char *id, const char *target_id)
{
	struct hp_worker *w = &ag->worker;
	struct hp_job *dropped = NULL;
	bool running = false;
	pthread_mutex_lock(&w->lock);
	if (w->running && strcmp(w->running->id, target_id) == 0) {
		w->running->cancelled = true;
		running = true;
	}
	for (size_t i = 0; !running && i < w->n; i++) {
		size_t at = (w->head + i) % HP_WORKER_QUEUE;
		if (strcmp(w->queue[at]->id, target_id) != 0)
			continue;
		dropped = w->queue[at];
		for (size_t k = i; k + 1 < w->n; k++)
			w->queue[(w->head + k) % HP_WORKER_QUEUE] = w->queue[(w->head + k + 1) % HP_WORKER_QUEUE];
		w->n--;
		break;
	}
	pthread_mutex_unlock(&w->lock);
	if (dropped) {
		simple_result(ag, dropped->id, false, true, "cancelled before it ran", true);
		free_job(dropped);
		simple_result(ag, id, true, false, "", true);
	} else if (running) {
		simple_result(ag, id, true, false, "", true);
	} else {
		char err[256];
		snprintf(err, sizeof(err), "command %.100s is neither queued nor running", target_id);
		simple_result(ag, id, false, false, err, true);
	}
}

void hp_worker_submit(struct agent *ag, const Hotpath__V1__Command *c)
{
	struct hp_worker *w = &ag->worker;
	const char *id = c->id ? c->id : "";
	if (!*id || strlen(id) >= HP_COMMAND_ID_MAX) {
		hp_log(false, "ignored a command without a usable id");
		return;
	}
	/* Seen before: send its result again, or let it finish. */
	pthread_mutex_lock(&w->lock);
	bool busy = w->running && strcmp(w->running->id, id) == 0;
	for (size_t i = 0; !busy && i < w->n; i++)
		busy = strcmp(w->queue[(w->head + i) % HP_WORKER_QUEUE]->id, id) == 0;
	uint8_t *again = NULL;
	size_t again_len = 0;
	for (size_t i = 0; !busy && !again && i < HP_WORKER_RESULTS; i++) {
		if (w->results[i].buf && strcmp(w->results[i].id, id) == 0 &&
		    (again = malloc(w->results[i].len ? w->results[i].len : 1))) {
			memcpy(again, w->results[i].buf, w->results[i].len);
			again_len = w->results[i].len;
		}
	}
	pthread_mutex_unlock(&w->lock);
	if (busy)
		return;
	/* An install or revert an earlier run of the agent answered: its kept
	 * result, and nothing runs again. */
	if (!again && changes_a_process(c) && ag->state_dir &&
	    hp_result_store_get(ag->state_dir, id, &again, &again_len) == 0)
		hp_log(true, "command %s was answered before this run: its kept result is sent again", id);
	if (again) {
		Hotpath__V1__AgentMessage *m = hotpath__v1__agent_message__unpack(NULL, again_len, again);
		if (m) {
			hp_replies_push(&ag->replies, m);
			hotpath__v1__agent_message__free_unpacked(m, NULL);
		}
		free(again);
		return;
	}
	if (c->kind_case == HOTPATH__V1__COMMAND__KIND_CANCEL) {
		cancel(ag, id, c->cancel->command_id ? c->cancel->command_id : "");
		return;
	}
	/* Copy the command: the stream frees its message when this returns. */
	struct hp_job *job = calloc(1, sizeof(*job));
	size_t len = hotpath__v1__command__get_packed_size(c);
	uint8_t *buf = malloc(len ? len : 1);
	if (job && buf) {
		hotpath__v1__command__pack(c, buf);
		job->cmd = hotpath__v1__command__unpack(NULL, len, buf);
	}
	free(buf);
	if (!job || !job->cmd) {
		free_job(job);
		simple_result(ag, id, false, false, "the agent is out of memory", false);
		return;
	}
	snprintf(job->id, sizeof(job->id), "%s", id);
	pthread_mutex_lock(&w->lock);
	bool full = w->n == HP_WORKER_QUEUE;
	if (!full) {
		w->queue[(w->head + w->n) % HP_WORKER_QUEUE] = job;
		w->n++;
		pthread_cond_signal(&w->wake);
	}
	pthread_mutex_unlock(&w->lock);
	if (full) {
		free_job(job);
		simple_result(ag, id, false, false, "the agent's command queue is full; try again", false);
	}
}
