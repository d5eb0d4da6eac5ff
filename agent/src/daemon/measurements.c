// SPDX-License-Identifier: Apache-2.0
/*
 * The daemon's measurements (see measurements.h): their lifecycle (start,
 * read every interval, stop, re-arm, restore after a restart); their batches
 * are measurement_batch.c's, their files measurement_store.c's, their
 * protocol messages measurement_proto.c's. A request names resources
 * by (catalog digest, function index, kind, offset); they become the measure
 * layer's parsed resources (measure/spec.h) as absolute addresses in the
 * target (an address for a function or an instruction, a function's address
 * and an offset for a block), so module names never matter. The armed rows are described once (MeasurementInfo);
 * batches then refer to them by position, with units and mechanisms interned
 * per batch. One thread reads every due measurement under the registry lock;
 * starting one (slow: probes are attached) happens outside it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/grow.h"
#include "daemon/agent.h"
#include "daemon/log.h"
#include "daemon/measurement_batch.h"
#include "daemon/measurement_proto.h"
#include "daemon/measurement_store.h"
#include "daemon/measurements.h"
#include "daemon/targets.h"
#include "daemon/worker.h"
#include "host/procmaps.h"
#include "measure/measure.h"
#include "plan/profile_measured.h"
#include "replace/install.h"

/* Rows one request may name (its functions then add their blocks, up to HP_MEASURE_MAX_ROWS). */
#define MAX_RESOURCE_REFS 65536
#define MIN_INTERVAL_MS   100
#define MAX_INTERVAL_MS   60000

struct hp_active {
	char id[HP_MEASUREMENT_ID_MAX + 1];
	char target_id[HP_TARGET_ID_LEN];
	struct hp_target *target;           /* referenced while the measurement runs */
	struct hp_measure *h;               /* NULL once it ended */
	Hotpath__V1__MeasurementInfo *info; /* unpacked, owned; state kept current */
	unsigned interval_ms;
	int64_t next_due_ms;
	/* Once ended: its block counts since it was armed, for MakePlan
	 * (NULL when it measured no block). */
	struct hp_profile *final;
};

static bool valid_id(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (!n || n > HP_MEASUREMENT_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
		      c == '_'))
			return false;
	}
	return true;
}

int hp_measurements_init(struct hp_measurements *ms, const char *state_dir)
{
	memset(ms, 0, sizeof(*ms));
	pthread_mutex_init(&ms->lock, NULL);
	ms->initialized = true;
	if (state_dir) {
		snprintf(ms->dir, sizeof(ms->dir), "%s/measurements", state_dir);
		if (mkdir(ms->dir, 0700) < 0 && errno != EEXIST) {
			hp_log(false, "cannot create %s: %s; measurements will not survive a restart", ms->dir,
			       strerror(errno));
			ms->dir[0] = '\0';
		}
	}
	return 0;
}

static void free_active(struct hp_active *a)
{
	hp_measure_close(a->h);
	if (a->final)
		hp_profile_free(a->final);
	free(a->final);
	if (a->info)
		hotpath__v1__measurement_info__free_unpacked(a->info, NULL);
	free(a);
}

/* End a measurement: its last interval (read now) carries the end state. Locked. */
static struct hp_active *find(struct hp_measurements *ms, const char *id);

/* The block counts of a running measurement since it was armed, as a profile. Locked. */
static int counts_of(struct hp_active *a, struct hp_profile *out, size_t *nblocks, char *err, size_t errlen)
{
	struct hp_measure_reading r;
	memset(out, 0, sizeof(*out));
	out->weight = 1;
	if (hp_measure_total(a->h, &r) < 0) {
		snprintf(err, errlen, "out of memory reading measurement %s", a->id);
		return -ENOMEM;
	}
	int rc = hp_profile_from_reading(a->h, &r, out, nblocks, err, errlen);
	hp_measure_reading_free(&r);
	if (rc < 0)
		hp_profile_free(out);
	return rc;
}

/* Before a measurement's handle closes: keep its block counts. Locked. */
static void keep_counts(struct hp_active *a)
{
	struct hp_profile p;
	size_t n = 0;
	char err[256];
	if (counts_of(a, &p, &n, err, sizeof(err)) < 0)
		return;
	if (!n || !(a->final = malloc(sizeof(*a->final)))) {
		hp_profile_free(&p);
		return;
	}
	*a->final = p;
}

int hp_measurements_profile(struct agent *ag, const char *id, const char *target_id, struct hp_profile *out, char *err,
			    size_t errlen)
{
	struct hp_measurements *ms = &ag->measurements;
	size_t n = 0;
	int r = 0;
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&ms->lock);
	struct hp_active *a = find(ms, id ? id : "");
	if (!a) {
		snprintf(err, errlen, "no measurement %.64s on this agent (or it ended before the agent restarted)",
			 id ? id : "");
		r = -ENOENT;
	} else if (strcmp(a->target_id, target_id)) {
		snprintf(err, errlen, "measurement %s measured target %s, not %s", a->id, a->target_id, target_id);
		r = -EINVAL;
	} else if (a->h) {
		r = counts_of(a, out, &n, err, errlen);
	} else if (a->final) {
		r = hp_profile_copy(a->final, out);
		n = 1;
	}
	if (r == 0 && !n) {
		hp_profile_free(out);
		snprintf(err, errlen, "measurement %s counted no basic block (measure with blocks for a plan)", a->id);
		r = -ENODATA;
	}
	if (r == 0)
		snprintf(out->source, sizeof(out->source), "measurement %s (%s counts)", a->id,
			 out->estimated ? "estimated" : "exact");
	pthread_mutex_unlock(&ms->lock);
	return r;
}

/* One byte of the file mapped at addr in process pid (-1 when it cannot be read). */
static int file_byte(int pid, uint64_t addr, char *path, size_t plen, int *fd)
{
	struct hp_code_location loc;
	uint8_t b;
	if (hp_code_location(pid, addr, &loc) < 0)
		return -1;
	if (*fd < 0 || strcmp(path, loc.path)) {
		if (*fd >= 0)
			close(*fd);
		snprintf(path, plen, "%s", loc.path);
		*fd = open(loc.path, O_RDONLY | O_CLOEXEC);
	}
	if (*fd < 0 || pread(*fd, &b, 1, (off_t)loc.file_offset) != 1)
		return -1;
	return b;
}

int hp_measurements_probe_bytes(struct agent *ag, const char *target_id, struct hp_byte_patch **out, size_t *n)
{
	struct hp_measurements *ms = &ag->measurements;
	size_t cap = 0;
	char path[128] = "";
	int fd = -1;
	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&ms->lock);
	for (size_t i = 0; i < ms->n; i++) {
		struct hp_active *a = ms->v[i];
		if (!a->h || !a->target || strcmp(a->target_id, target_id) ||
		    a->target->kind != HOTPATH__V1__TARGET_KIND__TARGET_KIND_PROCESS)
			continue;
		const struct hp_measure_row *rows = hp_measure_rows(a->h);
		for (size_t k = 0; k < hp_measure_nrows(a->h); k++) {
			uint64_t at = rows[k].kind == HP_ROW_BLOCK ? rows[k].block_address : rows[k].function_address;
			if (rows[k].run_address != at)
				continue; /* probed in an installed copy: the model does not read it */
			int b = file_byte(a->target->pid, at, path, sizeof(path), &fd);
			if (b < 0)
				continue;
			if (HP_GROW(*out, cap, *n + 1))
				goto out;
			(*out)[(*n)++] = (struct hp_byte_patch){ .addr = at, .len = 1, .bytes = { (uint8_t)b } };
		}
	}
out:
	pthread_mutex_unlock(&ms->lock);
	if (fd >= 0)
		close(fd);
	return 0;
}

static void end_active(struct agent *ag, struct hp_active *a, int state, const char *detail)
{
	if (a->h) {
		struct hp_measure_reading r;
		if (hp_measure_read(a->h, &r) == 0) {
			if (hp_measurement_queue_batch(&ag->outbox, a->id, a->h, &r, state, detail) < 0)
				hp_log(false, "measurement %s: out of memory keeping its last interval", a->id);
			hp_measure_reading_free(&r);
		}
		keep_counts(a);
		hp_measure_close(a->h);
		a->h = NULL;
	}
	a->info->state = (Hotpath__V1__MeasurementState)state;
	hp_measurement_info_set_detail(a->info, detail);
	a->info->ended_unix_ns = hp_unix_ns();
	hp_targets_release(&ag->targets, a->target);
	a->target = NULL;
	hp_measurement_unsave(ag->measurements.dir, a->id);
	hp_log(true, "measurement %s ended: %s", a->id, detail ? detail : "");
}

/* Read every measurement that is due. Locked. */
static void tick(struct agent *ag, int64_t now_ms)
{
	struct hp_measurements *ms = &ag->measurements;
	for (size_t i = 0; i < ms->n; i++) {
		struct hp_active *a = ms->v[i];
		if (!a->h || now_ms < a->next_due_ms)
			continue;
		a->next_due_ms += a->interval_ms;
		if (a->next_due_ms <= now_ms)
			a->next_due_ms = now_ms + a->interval_ms; /* fell behind: skip, do not burst */
		char detail[512] = "";
		enum hp_measure_state s = hp_measure_state(a->h, detail, sizeof(detail));
		if (s >= HP_MEASURE_TARGET_EXITED) {
			end_active(ag, a, hp_measurement_state_proto(s), detail);
			continue;
		}
		struct hp_measure_reading r;
		if (hp_measure_read(a->h, &r) < 0) {
			hp_log(false, "measurement %s: out of memory reading an interval", a->id);
			continue;
		}
		int st = hp_measurement_state_proto(r.state);
		a->info->state = (Hotpath__V1__MeasurementState)st;
		if (hp_measurement_queue_batch(&ag->outbox, a->id, a->h, &r, st, "") < 0)
			hp_log(false, "measurement %s: out of memory keeping an interval", a->id);
		hp_measure_reading_free(&r);
	}
}

static void *thread_main(void *arg)
{
	struct agent *ag = arg;
	struct hp_measurements *ms = &ag->measurements;
	while (!ms->stop) {
		struct timespec ts = { 0, 20 * 1000000L };
		nanosleep(&ts, NULL);
		if (hp_targets_poll_exits(&ag->targets)) {
			uint8_t *buf;
			size_t len;
			if (hp_targets_pack_update(&ag->targets, &buf, &len) == 0) {
				Hotpath__V1__AgentMessage *m = hotpath__v1__agent_message__unpack(NULL, len, buf);
				if (m) {
					hp_replies_push(&ag->replies, m);
					hotpath__v1__agent_message__free_unpacked(m, NULL);
				}
				free(buf);
			}
		}
		pthread_mutex_lock(&ms->lock);
		tick(ag, hp_mono_ms());
		pthread_mutex_unlock(&ms->lock);
	}
	return NULL;
}

int hp_measurements_run(struct agent *ag)
{
	struct hp_measurements *ms = &ag->measurements;
	ms->stop = false;
	int r = pthread_create(&ms->thread, NULL, thread_main, ag);
	if (r)
		return -r;
	ms->thread_started = true;
	return 0;
}

void hp_measurements_free(struct hp_measurements *ms)
{
	if (!ms->initialized)
		return;
	if (ms->thread_started) {
		ms->stop = true;
		pthread_join(ms->thread, NULL);
		ms->thread_started = false;
	}
	for (size_t i = 0; i < ms->n; i++)
		free_active(ms->v[i]); /* still persisted: the next run arms them again */
	pthread_mutex_destroy(&ms->lock);
	memset(ms, 0, sizeof(*ms));
}

/* ---- starting ------------------------------------------------------------------------------- */

static int open_measurement(struct agent *ag, struct hp_target *t, const Hotpath__V1__StartMeasurement *req,
			    struct hp_measure **out, unsigned *interval_ms, char *err, size_t errlen)
{
	uint32_t mask = 0;
	for (size_t i = 0; i < req->n_metrics; i++) {
		uint32_t one = 0;
		if (hp_metrics_parse(req->metrics[i], &one, err, errlen) < 0)
			return -EINVAL;
		mask |= one;
	}
	if (!mask) {
		snprintf(err, errlen, "no metrics to measure");
		return -EINVAL;
	}
	if (!req->n_resources) {
		snprintf(err, errlen, "no resources to measure");
		return -EINVAL;
	}
	if (req->n_resources > MAX_RESOURCE_REFS) {
		snprintf(err, errlen, "%zu resources in one request; at most %d", req->n_resources, MAX_RESOURCE_REFS);
		return -E2BIG;
	}
	*interval_ms = req->interval_ms ? req->interval_ms : ag->interval_ms;
	if (*interval_ms < MIN_INTERVAL_MS || *interval_ms > MAX_INTERVAL_MS) {
		snprintf(err, errlen, "interval %u ms is out of range (%d..%d)", *interval_ms, MIN_INTERVAL_MS,
			 MAX_INTERVAL_MS);
		return -EINVAL;
	}
	struct hp_resource_spec *res = NULL;
	bool *blocks = NULL;
	int r = hp_measurement_request_resources(t->model, req, &res, &blocks, err, errlen);
	if (r < 0)
		return r;
	struct hp_measure_spec spec = {
		.target = t->kind == HOTPATH__V1__TARGET_KIND__TARGET_KIND_KERNEL ? HP_MEASURE_KERNEL : HP_MEASURE_PID,
		.pid = t->pid,
		.resource_specs = res,
		.nresources = req->n_resources,
		.metrics = mask,
		.resource_blocks = blocks,
		.where_pid = (int)req->where_pid,
		.where_comm = req->where_comm && *req->where_comm ? req->where_comm : NULL,
		.where_cgroup = req->where_cgroup && *req->where_cgroup ? req->where_cgroup : NULL,
		.allow_partial = req->allow_partial,
		.sample_hz = req->sample_hz,
	};
	struct hp_measure_env env = { .kernel = ag->model,
				      .caps = &ag->caps,
				      .process = spec.target == HP_MEASURE_PID ? t->model : NULL };
	/* Plans installed in the process: their functions are measured where they run now (the copy),
	 * the process's code modelled with the original bytes under the patches, as `hotpathd measure`
	 * does. Without this, calls that go straight to a copy would never reach a probe. */
	struct hp_moved_code *moved = NULL;
	struct hp_byte_patch *bp = NULL;
	size_t nmoved = 0, nbp = 0;
	if (spec.target == HP_MEASURE_PID && ag->state_dir) {
		char merr[256];
		if (hp_moved_code_of(ag->state_dir, t->pid, &moved, &nmoved, merr, sizeof(merr)) == 0) {
			env.moved = moved;
			env.nmoved = nmoved;
		}
		if (hp_installed_patches(ag->state_dir, t->pid, &bp, &nbp) == 0) {
			env.overlay = bp;
			env.noverlay = nbp;
		}
	}
	r = hp_measure_open(&spec, &env, out, err, errlen);
	hp_moved_code_free(moved, nmoved);
	free(bp);
	free(res);
	free(blocks);
	return r < 0 ? -EINVAL : 0;
}

/* Publish a running measurement; false when the registry is full of running ones. Locked. */
static bool publish(struct hp_measurements *ms, struct hp_active *a)
{
	if (ms->n == HP_MEASUREMENTS_MAX) {
		for (size_t i = 0; i < ms->n; i++) {
			if (!ms->v[i]->h) {
				free_active(ms->v[i]);
				memmove(ms->v + i, ms->v + i + 1, (ms->n - i - 1) * sizeof(*ms->v));
				ms->n--;
				break;
			}
		}
		if (ms->n == HP_MEASUREMENTS_MAX)
			return false;
	}
	ms->v[ms->n++] = a;
	return true;
}

static struct hp_active *find(struct hp_measurements *ms, const char *id)
{
	for (size_t i = 0; i < ms->n; i++)
		if (strcmp(ms->v[i]->id, id) == 0)
			return ms->v[i];
	return NULL;
}

int hp_measurements_start(struct agent *ag, struct hp_job *job, const Hotpath__V1__StartMeasurement *req,
			  Hotpath__V1__MeasurementInfo **info, char *err, size_t errlen)
{
	struct hp_measurements *ms = &ag->measurements;
	*info = NULL;
	if (!valid_id(req->measurement_id)) {
		snprintf(err, errlen, "a measurement id is 1 to %d letters, digits, '-' or '_'", HP_MEASUREMENT_ID_MAX);
		return -EINVAL;
	}
	pthread_mutex_lock(&ms->lock);
	struct hp_active *have = find(ms, req->measurement_id);
	if (have)
		*info = hp_measurement_info_copy(have->info);
	pthread_mutex_unlock(&ms->lock);
	if (have)
		return *info ? 0 : -ENOMEM; /* started before: the same measurement */
	struct hp_target *t = hp_targets_get(&ag->targets, req->target);
	if (!t) {
		snprintf(err, errlen, "no target %.60s (attach the process first)", req->target ? req->target : "");
		return -ENOENT;
	}
	if (t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED || !t->model) {
		snprintf(err, errlen, "target %s has ended: %s", t->id, t->detail);
		hp_targets_release(&ag->targets, t);
		return -ESRCH;
	}
	hp_job_progress(ag, job, 0.1, "resolving resources and choosing mechanisms");
	struct hp_measure *h = NULL;
	unsigned interval_ms = 0;
	int r = open_measurement(ag, t, req, &h, &interval_ms, err, errlen);
	if (r < 0) {
		hp_targets_release(&ag->targets, t);
		return r;
	}
	if (hp_job_cancelled(job)) {
		hp_measure_close(h);
		hp_targets_release(&ag->targets, t);
		snprintf(err, errlen, "cancelled");
		return -ECANCELED;
	}
	hp_job_progress(ag, job, 0.9, "armed; describing the rows");
	struct hp_active *a = calloc(1, sizeof(*a));
	if (!a || !(a->info = hp_measurement_describe(h, t->model, t->id, req, interval_ms))) {
		free(a);
		hp_measure_close(h);
		hp_targets_release(&ag->targets, t);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	snprintf(a->id, sizeof(a->id), "%s", req->measurement_id);
	snprintf(a->target_id, sizeof(a->target_id), "%s", t->id);
	a->target = t;
	a->h = h;
	a->interval_ms = interval_ms;
	a->next_due_ms = hp_mono_ms() + interval_ms;
	pthread_mutex_lock(&ms->lock);
	bool ok = publish(ms, a);
	if (ok) {
		hp_measurement_save(ms->dir, a->id, a->info);
		*info = hp_measurement_info_copy(a->info);
	}
	pthread_mutex_unlock(&ms->lock);
	if (!ok) {
		free_active(a);
		hp_targets_release(&ag->targets, t);
		snprintf(err, errlen, "the agent runs %d measurements already; stop some first", HP_MEASUREMENTS_MAX);
		return -E2BIG;
	}
	hp_log(true, "measurement %s armed on %s: %zu row(s) every %u ms", a->id, t->id, a->info->n_resources,
	       interval_ms);
	return *info ? 0 : -ENOMEM;
}

int hp_measurements_stop(struct agent *ag, const char *id, Hotpath__V1__MeasurementInfo **info, char *err,
			 size_t errlen)
{
	struct hp_measurements *ms = &ag->measurements;
	*info = NULL;
	pthread_mutex_lock(&ms->lock);
	struct hp_active *a = find(ms, id ? id : "");
	if (a && a->h)
		end_active(ag, a, HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_STOPPED, "stopped on request");
	if (a)
		*info = hp_measurement_info_copy(a->info);
	pthread_mutex_unlock(&ms->lock);
	if (!a) {
		snprintf(err, errlen, "no measurement %.64s on this agent", id ? id : "");
		return -ENOENT;
	}
	return *info ? 0 : -ENOMEM;
}

void hp_measurements_stop_target(struct agent *ag, const char *target_id, const char *why)
{
	struct hp_measurements *ms = &ag->measurements;
	pthread_mutex_lock(&ms->lock);
	for (size_t i = 0; i < ms->n; i++)
		if (ms->v[i]->h && strcmp(ms->v[i]->target_id, target_id) == 0)
			end_active(ag, ms->v[i], HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_STOPPED, why);
	pthread_mutex_unlock(&ms->lock);
}

int hp_measurements_rearm(struct agent *ag, const char *target_id)
{
	struct hp_measurements *ms = &ag->measurements;
	static char ids[HP_MEASUREMENTS_MAX][HP_MEASUREMENT_ID_MAX + 1];
	static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER; /* ids is shared: one re-arm at a time */
	size_t n = 0;
	int moved = 0;

	pthread_mutex_lock(&one);
	pthread_mutex_lock(&ms->lock);
	for (size_t i = 0; i < ms->n; i++) {
		struct hp_active *a = ms->v[i];
		if (a->h && a->target && !strcmp(a->target_id, target_id) &&
		    a->target->kind == HOTPATH__V1__TARGET_KIND__TARGET_KIND_PROCESS)
			snprintf(ids[n++], sizeof(ids[0]), "%s", a->id);
	}
	pthread_mutex_unlock(&ms->lock);
	for (size_t i = 0; i < n; i++) {
		char err[1024] = "";
		uint8_t *req = NULL;
		size_t len = 0;
		/* The request, copied: the measurement may end while the new probes are armed. */
		pthread_mutex_lock(&ms->lock);
		struct hp_active *a = find(ms, ids[i]);
		if (a && a->h && a->info->request) {
			len = hotpath__v1__start_measurement__get_packed_size(a->info->request);
			if ((req = malloc(len ? len : 1)))
				hotpath__v1__start_measurement__pack(a->info->request, req);
		}
		pthread_mutex_unlock(&ms->lock);
		if (!req)
			continue;
		Hotpath__V1__StartMeasurement *rq = hotpath__v1__start_measurement__unpack(NULL, len, req);
		free(req);
		struct hp_target *t = rq ? hp_targets_get(&ag->targets, target_id) : NULL;
		struct hp_measure *h = NULL, *old = NULL;
		unsigned interval_ms = 0;
		Hotpath__V1__MeasurementInfo *now = NULL;
		if (t && t->state == HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED && t->model &&
		    open_measurement(ag, t, rq, &h, &interval_ms, err, sizeof(err)) == 0)
			now = hp_measurement_describe(h, t->model, t->id, rq, interval_ms);
		pthread_mutex_lock(&ms->lock);
		a = find(ms, ids[i]);
		if (a && a->h && now && hp_measurement_same_rows(now, a->info)) {
			/* The old probes' last interval, then the new ones count on. */
			struct hp_measure_reading r;
			if (hp_measure_read(a->h, &r) == 0) {
				if (hp_measurement_queue_batch(&ag->outbox, a->id, a->h, &r,
							       hp_measurement_state_proto(r.state), "") < 0)
					hp_log(false, "measurement %s: out of memory keeping an interval", a->id);
				hp_measure_reading_free(&r);
			}
			old = a->h;
			a->h = h;
			h = NULL;
			moved++;
		} else if (a && a->h) {
			hp_log(false,
			       "measurement %s: not armed on %s's changed code (%s); its probes stay where they were",
			       ids[i], target_id, err[0] ? err : "its rows differ now");
		}
		pthread_mutex_unlock(&ms->lock);
		if (old)
			hp_log(true, "measurement %s armed again on %s's code as it runs now", ids[i], target_id);
		hp_measure_close(old); /* after the new probes are attached: no hit falls between */
		hp_measure_close(h);
		if (now)
			hotpath__v1__measurement_info__free_unpacked(now, NULL);
		hp_targets_release(&ag->targets, t);
		if (rq)
			hotpath__v1__start_measurement__free_unpacked(rq, NULL);
	}
	pthread_mutex_unlock(&one);
	return moved;
}

int hp_measurements_infos(struct hp_measurements *ms, Hotpath__V1__MeasurementInfo ***out, size_t *n)
{
	pthread_mutex_lock(&ms->lock);
	Hotpath__V1__MeasurementInfo **v = calloc(ms->n ? ms->n : 1, sizeof(*v));
	size_t k = 0;
	for (size_t i = 0; v && i < ms->n; i++)
		if ((v[k] = hp_measurement_info_copy(ms->v[i]->info)))
			k++;
	pthread_mutex_unlock(&ms->lock);
	*out = v;
	*n = k;
	return v ? 0 : -ENOMEM;
}

void hp_measurements_infos_free(Hotpath__V1__MeasurementInfo **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		hotpath__v1__measurement_info__free_unpacked(v[i], NULL);
	free(v);
}

/* ---- restoring after a restart -------------------------------------------------------------- */

/* Keep an ended measurement to report in Hello. Locked by the caller. */
static void keep_ended(struct hp_measurements *ms, Hotpath__V1__MeasurementInfo *info, const char *detail, int state)
{
	struct hp_active *a = calloc(1, sizeof(*a));
	if (!a) {
		hotpath__v1__measurement_info__free_unpacked(info, NULL);
		return;
	}
	snprintf(a->id, sizeof(a->id), "%s", info->measurement_id);
	snprintf(a->target_id, sizeof(a->target_id), "%s", info->target);
	a->info = info;
	info->state = (Hotpath__V1__MeasurementState)state;
	hp_measurement_info_set_detail(info, detail);
	info->ended_unix_ns = hp_unix_ns();
	if (!publish(ms, a))
		free_active(a);
}

static void restore_one(struct agent *ag, const char *path)
{
	struct hp_measurements *ms = &ag->measurements;
	FILE *f = fopen(path, "re");
	uint8_t *buf = malloc(16 << 20);
	size_t len = f && buf ? fread(buf, 1, 16 << 20, f) : 0;
	if (f)
		fclose(f);
	Hotpath__V1__MeasurementInfo *saved = len ? hotpath__v1__measurement_info__unpack(NULL, len, buf) : NULL;
	free(buf);
	unlink(path); /* saved again below if it runs */
	if (!saved || !saved->request || !valid_id(saved->measurement_id)) {
		if (saved)
			hotpath__v1__measurement_info__free_unpacked(saved, NULL);
		hp_log(false, "ignored %s: not a measurement of this agent", path);
		return;
	}
	char err[1024] = "";
	const char *id = saved->measurement_id;
	struct hp_target *t = hp_targets_get(&ag->targets, saved->target);
	if (!t || t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED || !t->model) {
		hp_targets_release(&ag->targets, t);
		hp_log(true, "measurement %s: its target %s is gone", id, saved->target);
		pthread_mutex_lock(&ms->lock);
		keep_ended(ms, saved, "the process exited while the agent was not running; its data until then is kept",
			   HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_TARGET_EXITED);
		pthread_mutex_unlock(&ms->lock);
		return;
	}
	struct hp_measure *h = NULL;
	unsigned interval_ms = 0;
	Hotpath__V1__MeasurementInfo *now = NULL;
	if (open_measurement(ag, t, saved->request, &h, &interval_ms, err, sizeof(err)) < 0 ||
	    !(now = hp_measurement_describe(h, t->model, t->id, saved->request, interval_ms)) ||
	    !hp_measurement_same_rows(now, saved)) {
		if (!err[0])
			snprintf(err, sizeof(err), "the code changed since it started: its rows differ now");
		hp_log(false, "measurement %s cannot be armed again: %s", id, err);
		char detail[1100];
		snprintf(detail, sizeof(detail), "not armed again after the agent restarted: %s", err);
		hp_measure_close(h);
		hp_targets_release(&ag->targets, t);
		if (now)
			hotpath__v1__measurement_info__free_unpacked(now, NULL);
		pthread_mutex_lock(&ms->lock);
		keep_ended(ms, saved, detail, HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_FAILED);
		pthread_mutex_unlock(&ms->lock);
		return;
	}
	now->started_unix_ns = saved->started_unix_ns; /* the same measurement, continued */
	hotpath__v1__measurement_info__free_unpacked(saved, NULL);
	struct hp_active *a = calloc(1, sizeof(*a));
	if (!a) {
		hp_measure_close(h);
		hp_targets_release(&ag->targets, t);
		hotpath__v1__measurement_info__free_unpacked(now, NULL);
		return;
	}
	snprintf(a->id, sizeof(a->id), "%s", now->measurement_id);
	snprintf(a->target_id, sizeof(a->target_id), "%s", t->id);
	a->target = t;
	a->h = h;
	a->info = now;
	a->interval_ms = interval_ms;
	a->next_due_ms = hp_mono_ms() + interval_ms;
	pthread_mutex_lock(&ms->lock);
	if (publish(ms, a))
		hp_measurement_save(ms->dir, a->id, a->info);
	else
		free_active(a);
	pthread_mutex_unlock(&ms->lock);
	hp_log(true, "measurement %s armed again on %s after a restart", now->measurement_id, t->id);
}

int hp_measurements_restore(struct agent *ag)
{
	struct hp_measurements *ms = &ag->measurements;
	if (!ms->dir[0])
		return 0;
	DIR *d = opendir(ms->dir);
	if (!d)
		return 0;
	char(*paths)[4400] = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (de->d_name[0] == '.' || l < 4 || strcmp(de->d_name + l - 3, ".pb") != 0)
			continue;
		if (HP_GROW(paths, cap, n + 1))
			break;
		snprintf(paths[n++], sizeof(*paths), "%s/%s", ms->dir, de->d_name);
	}
	closedir(d);
	for (size_t i = 0; i < n; i++)
		restore_one(ag, paths[i]);
	free(paths);
	int running = 0;
	pthread_mutex_lock(&ms->lock);
	for (size_t i = 0; i < ms->n; i++)
		running += ms->v[i]->h != NULL;
	pthread_mutex_unlock(&ms->lock);
	return running;
}
