// SPDX-License-Identifier: Apache-2.0
/*
 * The daemon's targets (see targets.h): the kernel and attached processes in
 * one array under one lock. Attaching parses the process's ELF files outside
 * the lock (it takes a second for a large process) and then publishes the
 * target; its modules' catalog digests are computed like the kernel's, from
 * the module's own build id, so the same binary in two processes names the
 * same catalog piece. Remembered processes are empty files named after the
 * target in <state>/targets.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/catalog.h"
#include "daemon/log.h"
#include "daemon/targets.h"
#include "host/processes.h"
#include "replace/install.h"
#include "target/target.h"

static int64_t unix_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void target_path(const struct hp_targets *ts, const char *id, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", ts->dir, id);
}

static void remember(struct hp_targets *ts, const struct hp_target *t)
{
	if (!ts->dir[0])
		return;
	char path[4400];
	target_path(ts, t->id, path, sizeof(path));
	FILE *f = fopen(path, "we");
	if (f)
		fclose(f);
	else
		hp_log(false, "cannot remember target %s in %s: %s", t->id, ts->dir, strerror(errno));
}

static void forget(struct hp_targets *ts, const struct hp_target *t)
{
	if (!ts->dir[0])
		return;
	char path[4400];
	target_path(ts, t->id, path, sizeof(path));
	unlink(path);
}

static void free_target(struct hp_target *t)
{
	if (t->kind == HOTPATH__V1__TARGET_KIND__TARGET_KIND_PROCESS)
		hp_model_free(t->model);
	for (size_t i = 0; i < t->nmods; i++)
		free(t->mods[i].name);
	free(t->mods);
	if (t->pidfd >= 0)
		close(t->pidfd);
	free(t);
}

/* An ended process target's model goes as soon as nobody uses it. */
static void maybe_free_model(struct hp_target *t)
{
	if (t->kind == HOTPATH__V1__TARGET_KIND__TARGET_KIND_PROCESS &&
	    t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED && t->refs == 1 && t->model) {
		hp_model_free(t->model);
		t->model = NULL;
	}
}

int hp_targets_init(struct hp_targets *ts, struct hp_model *kernel, const char *state_dir)
{
	memset(ts, 0, sizeof(*ts));
	pthread_mutex_init(&ts->lock, NULL);
	struct hp_target *k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	snprintf(k->id, sizeof(k->id), "kernel");
	k->kind = HOTPATH__V1__TARGET_KIND__TARGET_KIND_KERNEL;
	k->model = kernel;
	k->pidfd = -1;
	k->state = HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED;
	k->attached_ns = unix_ns();
	k->refs = 1;
	ts->v[ts->n++] = k;
	if (state_dir) {
		snprintf(ts->dir, sizeof(ts->dir), "%s/targets", state_dir);
		snprintf(ts->state, sizeof(ts->state), "%s", state_dir);
		if (mkdir(ts->dir, 0700) < 0 && errno != EEXIST) {
			hp_log(false, "cannot create %s: %s; attached processes are not remembered", ts->dir,
			       strerror(errno));
			ts->dir[0] = '\0';
		}
	}
	return 0;
}

void hp_targets_free(struct hp_targets *ts)
{
	for (size_t i = 0; i < ts->n; i++)
		free_target(ts->v[i]);
	pthread_mutex_destroy(&ts->lock);
	memset(ts, 0, sizeof(*ts));
}

/* Room for one more target: forget the oldest ended one nobody uses. Locked. */
static bool make_room(struct hp_targets *ts)
{
	if (ts->n < HP_TARGETS_MAX)
		return true;
	for (size_t i = 1; i < ts->n; i++) {
		struct hp_target *t = ts->v[i];
		if (t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED && t->refs == 1) {
			free_target(t);
			memmove(ts->v + i, ts->v + i + 1, (ts->n - i - 1) * sizeof(*ts->v));
			ts->n--;
			return true;
		}
	}
	return false;
}

/* The attached target of (pid, start), with a reference; NULL if none. Locked. */
static struct hp_target *find_process(struct hp_targets *ts, int pid, unsigned long long start)
{
	for (size_t i = 1; i < ts->n; i++) {
		struct hp_target *t = ts->v[i];
		if (t->pid == pid && t->start_ticks == start &&
		    t->state == HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED) {
			t->refs++;
			return t;
		}
	}
	return NULL;
}

int hp_targets_attach_pid(struct hp_targets *ts, int pid, struct hp_target **out, char *err, size_t errlen)
{
	uint64_t start = 0;
	*out = NULL;
	if (pid <= 0) {
		snprintf(err, errlen, "invalid process id %d", pid);
		return -EINVAL;
	}
	if (pid == getpid()) {
		snprintf(err, errlen, "process %d is this agent: it cannot measure itself", pid);
		return -EINVAL;
	}
	if (hp_process_start_time(pid, &start) < 0) {
		snprintf(err, errlen, "no process %d", pid);
		return -ESRCH;
	}
	pthread_mutex_lock(&ts->lock);
	struct hp_target *have = find_process(ts, pid, start);
	pthread_mutex_unlock(&ts->lock);
	if (have) {
		*out = have;
		return 0;
	}
	struct hp_target *t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	t->kind = HOTPATH__V1__TARGET_KIND__TARGET_KIND_PROCESS;
	t->pid = pid;
	t->start_ticks = start;
	t->state = HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED;
	snprintf(t->id, sizeof(t->id), "p%d-%llu", pid, (unsigned long long)start);
	/* Watch for the exit first, so one during the parse is not missed. */
	t->pidfd = hp_pidfd_open(pid);
	if (t->pidfd < 0) {
		int e = -t->pidfd;
		snprintf(err, errlen, e == ESRCH ? "no process %d" : "cannot watch process %d: %s", pid, strerror(e));
		free(t);
		return e == ESRCH ? -ESRCH : -e;
	}
	hp_process_comm(pid, t->comm);
	if (hp_process_exe(pid, t->exe, sizeof(t->exe)) < 0)
		t->exe[0] = '\0';
	char oerr[512];
	/* The process's own code, as its binary has it: installs made into it
	 * (by this run or, from their journals, an earlier one) are read as the
	 * bytes they replaced, so its modules keep their catalogs. */
	int r = hp_model_open_pid_unpatched(ts->state, pid, NULL, &t->model, oerr, sizeof(oerr));
	if (r < 0) {
		snprintf(err, errlen, "%s", oerr);
		t->model = NULL;
		free_target(t);
		return r;
	}
	if ((r = hp_catalog_digest_all(t->model)) < 0 ||
	    !(t->mods = calloc(t->model->nmods ? t->model->nmods : 1, sizeof(*t->mods)))) {
		snprintf(err, errlen, "cannot compute catalog digests: out of memory");
		free_target(t);
		return -ENOMEM;
	}
	for (size_t i = 0; i < t->model->nmods; i++) {
		const struct hp_module *m = &t->model->mods[i];
		struct hp_target_module *tm = &t->mods[t->nmods++];
		tm->name = strdup(m->name);
		snprintf(tm->digest, sizeof(tm->digest), "%s", m->digest);
		snprintf(tm->build_id, sizeof(tm->build_id), "%s", m->build_id);
		tm->base = m->base;
		tm->nfuncs = (uint32_t)m->nfuncs;
		tm->nblocks = (uint32_t)hp_catalog_block_count(m);
		if (!tm->name) {
			snprintf(err, errlen, "out of memory");
			free_target(t);
			return -ENOMEM;
		}
	}
	t->attached_ns = unix_ns();
	t->refs = 2; /* the registry's and the caller's */
	pthread_mutex_lock(&ts->lock);
	have = find_process(ts, pid, start); /* attached meanwhile by someone else */
	if (have || !make_room(ts)) {
		pthread_mutex_unlock(&ts->lock);
		free_target(t);
		if (!have) {
			snprintf(err, errlen, "the agent serves %d targets already; detach some first", HP_TARGETS_MAX);
			return -E2BIG;
		}
		*out = have;
		return 0;
	}
	ts->v[ts->n++] = t;
	ts->changes++;
	remember(ts, t);
	pthread_mutex_unlock(&ts->lock);
	hp_log(true, "attached process %d (%s) as target %s: %zu module(s)", pid, t->comm, t->id, t->nmods);
	*out = t;
	return 0;
}

int hp_targets_attach_comm(struct hp_targets *ts, const char *comm, struct hp_target **out, size_t max, char *err,
			   size_t errlen)
{
	int pids[HP_ATTACH_MAX_BY_COMM];
	if (!comm || !*comm || strlen(comm) >= HP_COMM_LEN) {
		snprintf(err, errlen, "a command name has 1 to %d characters", HP_COMM_LEN - 1);
		return -EINVAL;
	}
	int n = hp_pids_by_comm(comm, pids, HP_ATTACH_MAX_BY_COMM);
	if (n < 0) {
		snprintf(err, errlen, "cannot list processes: %s", strerror(-n));
		return n;
	}
	if (n == 0) {
		snprintf(err, errlen, "no running process is named '%s'", comm);
		return -ESRCH;
	}
	if ((size_t)n > max || n > HP_ATTACH_MAX_BY_COMM) {
		snprintf(err, errlen, "%d processes are named '%s'; at most %d are attached by name: pick one by pid",
			 n, comm, HP_ATTACH_MAX_BY_COMM);
		return -E2BIG;
	}
	size_t got = 0;
	for (int i = 0; i < n; i++) {
		char e[512];
		struct hp_target *t;
		int r = hp_targets_attach_pid(ts, pids[i], &t, e, sizeof(e));
		if (r == -ESRCH)
			continue; /* exited since the scan */
		if (r < 0) {
			snprintf(err, errlen, "%s", e);
			for (size_t k = 0; k < got; k++)
				hp_targets_release(ts, out[k]);
			return r;
		}
		out[got++] = t;
	}
	if (!got) {
		snprintf(err, errlen, "every process named '%s' exited before it could be attached", comm);
		return -ESRCH;
	}
	return (int)got;
}

int hp_targets_restore(struct hp_targets *ts)
{
	if (!ts->dir[0])
		return 0;
	DIR *d = opendir(ts->dir);
	if (!d)
		return 0;
	int restored = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		int pid;
		unsigned long long start;
		uint64_t now_start;
		char path[4600], err[512];
		if (de->d_name[0] != 'p' || sscanf(de->d_name, "p%d-%llu", &pid, &start) != 2)
			continue;
		snprintf(path, sizeof(path), "%s/%s", ts->dir, de->d_name);
		if (hp_process_start_time(pid, &now_start) < 0 || now_start != start) {
			hp_log(true, "target %s: the process is gone", de->d_name);
			unlink(path);
			continue;
		}
		struct hp_target *t;
		if (hp_targets_attach_pid(ts, pid, &t, err, sizeof(err)) < 0) {
			hp_log(false, "cannot attach target %s again: %s", de->d_name, err);
			unlink(path);
			continue;
		}
		hp_targets_release(ts, t);
		restored++;
	}
	closedir(d);
	return restored;
}

struct hp_target *hp_targets_get(struct hp_targets *ts, const char *id)
{
	struct hp_target *found = NULL;
	if (!id || !*id)
		id = "kernel";
	pthread_mutex_lock(&ts->lock);
	for (size_t i = 0; i < ts->n && !found; i++)
		if (strcmp(ts->v[i]->id, id) == 0)
			found = ts->v[i];
	if (found)
		found->refs++;
	pthread_mutex_unlock(&ts->lock);
	return found;
}

struct hp_target *hp_targets_by_digest(struct hp_targets *ts, const char *digest, const char *prefer_id,
				       size_t *mod_idx)
{
	struct hp_target *found = NULL;
	size_t found_mod = 0;
	int found_rank = -1;
	pthread_mutex_lock(&ts->lock);
	for (size_t i = 0; i < ts->n; i++) {
		struct hp_target *t = ts->v[i];
		if (!t->model)
			continue;
		for (size_t m = 0; m < t->model->nmods; m++) {
			if (strcmp(t->model->mods[m].digest, digest) != 0)
				continue;
			int rank = (prefer_id && strcmp(prefer_id, t->id) == 0 ? 2 : 0) +
				   (t->state == HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED ? 1 : 0);
			if (rank > found_rank) {
				found = t;
				found_mod = m;
				found_rank = rank;
			}
			break;
		}
	}
	if (found) {
		found->refs++;
		*mod_idx = found_mod;
	}
	pthread_mutex_unlock(&ts->lock);
	return found;
}

void hp_targets_release(struct hp_targets *ts, struct hp_target *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&ts->lock);
	t->refs--;
	maybe_free_model(t);
	pthread_mutex_unlock(&ts->lock);
}

/* End a process target. Locked. */
static void end_target(struct hp_targets *ts, struct hp_target *t, int state, const char *detail)
{
	t->state = state;
	t->ended_ns = unix_ns();
	snprintf(t->detail, sizeof(t->detail), "%s", detail);
	if (t->pidfd >= 0) {
		close(t->pidfd);
		t->pidfd = -1;
	}
	forget(ts, t);
	ts->changes++;
	maybe_free_model(t);
}

int hp_targets_detach(struct hp_targets *ts, const char *id, char *err, size_t errlen)
{
	int r = -ENOENT;
	pthread_mutex_lock(&ts->lock);
	for (size_t i = 0; i < ts->n; i++) {
		struct hp_target *t = ts->v[i];
		if (strcmp(t->id, id) != 0)
			continue;
		if (t->kind == HOTPATH__V1__TARGET_KIND__TARGET_KIND_KERNEL) {
			snprintf(err, errlen, "the kernel target cannot be detached");
			r = -EINVAL;
		} else if (t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED) {
			r = 0; /* ended already */
		} else {
			char why[128];
			snprintf(why, sizeof(why), "detached on request");
			end_target(ts, t, HOTPATH__V1__TARGET_STATE__TARGET_STATE_DETACHED, why);
			r = 0;
		}
		break;
	}
	pthread_mutex_unlock(&ts->lock);
	if (r == -ENOENT)
		snprintf(err, errlen, "no target %.60s", id);
	return r;
}

bool hp_targets_poll_exits(struct hp_targets *ts)
{
	bool changed = false;
	pthread_mutex_lock(&ts->lock);
	for (size_t i = 1; i < ts->n; i++) {
		struct hp_target *t = ts->v[i];
		if (t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED || t->pidfd < 0)
			continue;
		struct pollfd p = { .fd = t->pidfd, .events = POLLIN };
		if (poll(&p, 1, 0) > 0) {
			char why[128];
			snprintf(why, sizeof(why), "process %d exited", t->pid);
			end_target(ts, t, HOTPATH__V1__TARGET_STATE__TARGET_STATE_EXITED, why);
			hp_log(true, "target %s: %s", t->id, why);
			changed = true;
		}
	}
	pthread_mutex_unlock(&ts->lock);
	return changed;
}

/* One allocation for a list's messages and strings. */
struct fill_mem {
	char *p, *end;
};

static void *take(struct fill_mem *m, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if ((size_t)(m->end - m->p) < n)
		return NULL;
	void *r = m->p;
	m->p += n;
	memset(r, 0, n);
	return r;
}

static char *copy_str(struct fill_mem *m, const char *s)
{
	size_t n = strlen(s ? s : "") + 1;
	char *r = take(m, n);
	if (r)
		memcpy(r, s ? s : "", n);
	return r;
}

static size_t target_bytes(const struct hp_target *t)
{
	size_t n = sizeof(Hotpath__V1__Target) + 1024 + sizeof(t->exe) + sizeof(t->detail);
	for (size_t i = 0; i < t->nmods; i++)
		n += sizeof(Hotpath__V1__ModuleRef) + sizeof(void *) + strlen(t->mods[i].name) + 200;
	return n;
}

int hp_targets_fill(struct hp_targets *ts, struct hp_target *const *only, size_t nonly, Hotpath__V1__TargetsUpdate *u,
		    void **mem)
{
	hotpath__v1__targets_update__init(u);
	*mem = NULL;
	pthread_mutex_lock(&ts->lock);
	size_t count = only ? nonly : ts->n, bytes = 64;
	for (size_t i = 0; i < count; i++)
		bytes += target_bytes(only ? only[i] : ts->v[i]);
	struct fill_mem m;
	m.p = malloc(bytes);
	m.end = m.p ? m.p + bytes : NULL;
	Hotpath__V1__Target **list = calloc(count ? count : 1, sizeof(*list));
	if (!m.p || !list) {
		pthread_mutex_unlock(&ts->lock);
		free(m.p);
		free(list);
		return -ENOMEM;
	}
	*mem = m.p;
	for (size_t i = 0; i < count; i++) {
		const struct hp_target *t = only ? only[i] : ts->v[i];
		Hotpath__V1__Target *pt = take(&m, sizeof(*pt));
		hotpath__v1__target__init(pt);
		pt->id = copy_str(&m, t->id);
		pt->kind = (Hotpath__V1__TargetKind)t->kind;
		pt->pid = (uint32_t)(t->pid > 0 ? t->pid : 0);
		pt->command = copy_str(&m, t->comm);
		pt->executable = copy_str(&m, t->exe);
		pt->state = (Hotpath__V1__TargetState)t->state;
		pt->detail = copy_str(&m, t->detail);
		pt->attached_unix_ns = t->attached_ns;
		pt->ended_unix_ns = t->ended_ns;
		if (t->nmods) {
			pt->modules = take(&m, t->nmods * sizeof(*pt->modules));
			for (size_t k = 0; pt->modules && k < t->nmods; k++) {
				const struct hp_target_module *tm = &t->mods[k];
				Hotpath__V1__ModuleRef *r = take(&m, sizeof(*r));
				hotpath__v1__module_ref__init(r);
				r->name = copy_str(&m, tm->name);
				r->digest = copy_str(&m, tm->digest);
				r->build_id = copy_str(&m, tm->build_id);
				r->base_address = tm->base;
				r->function_count = tm->nfuncs;
				r->block_count = tm->nblocks;
				pt->modules[pt->n_modules++] = r;
			}
		}
		list[i] = pt;
	}
	pthread_mutex_unlock(&ts->lock);
	u->n_targets = count;
	u->targets = list;
	return 0;
}

void hp_targets_fill_free(Hotpath__V1__TargetsUpdate *u, void *mem)
{
	free(u->targets);
	u->targets = NULL;
	u->n_targets = 0;
	free(mem);
}

int hp_targets_pack_update(struct hp_targets *ts, uint8_t **buf, size_t *len)
{
	Hotpath__V1__TargetsUpdate u;
	void *mem;
	if (hp_targets_fill(ts, NULL, 0, &u, &mem) < 0)
		return -ENOMEM;
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_TARGETS;
	msg.targets = &u;
	*len = hotpath__v1__agent_message__get_packed_size(&msg);
	*buf = malloc(*len ? *len : 1);
	if (*buf)
		hotpath__v1__agent_message__pack(&msg, *buf);
	hp_targets_fill_free(&u, mem);
	return *buf ? 0 : -ENOMEM;
}
