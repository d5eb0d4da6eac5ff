// SPDX-License-Identifier: Apache-2.0
/*
 * The measurement handle (see measure.h): checks the request, opens the
 * target (the live kernel's model, or the model of a process found by pid or
 * by command name), resolves the resources into rows, plans and arms the
 * probes (arm.c), and then serves reads (readout.c), waits and state under
 * one lock. A process target is watched through pidfds: its exit freezes the
 * values at that moment, detaches the probes and ends the measurement.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>

#include "host/caps_cache.h"
#include "host/processes.h"
#include "measure/measure_internal.h"
#include "target/target.h"

const char *hp_measure_state_name(enum hp_measure_state s)
{
	switch (s) {
	case HP_MEASURE_ARMED:
		return "armed";
	case HP_MEASURE_RUNNING:
		return "running";
	case HP_MEASURE_TARGET_EXITED:
		return "target_exited";
	default:
		return "failed";
	}
}

static int check_spec(const struct hp_measure_spec *s, char *err, size_t errlen)
{
	if (!s->nresources || (!s->resources == !s->resource_specs)) {
		snprintf(err, errlen, "no resources to measure (a function name, function+0xOFF or an address)");
		return -HP_MEASURE_E_USAGE;
	}
	if (!(s->metrics & ((1u << HP_METRIC_N) - 1))) {
		snprintf(err, errlen, "no metrics to measure");
		return -HP_MEASURE_E_USAGE;
	}
	if (s->target == HP_MEASURE_PID && s->pid <= 0) {
		snprintf(err, errlen, "invalid process id %d", s->pid);
		return -HP_MEASURE_E_USAGE;
	}
	if (s->target == HP_MEASURE_COMM && (!s->comm || !*s->comm || strlen(s->comm) >= HP_COMM_LEN)) {
		snprintf(err, errlen, "a command name has 1 to %d characters", HP_COMM_LEN - 1);
		return -HP_MEASURE_E_USAGE;
	}
	if (s->where_comm && (!*s->where_comm || strlen(s->where_comm) >= HP_COMM_LEN)) {
		snprintf(err, errlen, "--comm takes a command name of 1 to %d characters", HP_COMM_LEN - 1);
		return -HP_MEASURE_E_USAGE;
	}
	if (s->where_pid < 0) {
		snprintf(err, errlen, "invalid process id %d in the predicate", s->where_pid);
		return -HP_MEASURE_E_USAGE;
	}
	return 0;
}

/* The kernel functions a measurement's resources name: their words parsed
 * (a bad word adds nothing: resolve_rows reports it), names and addresses
 * for hp_open_opts. */
struct kernel_only {
	struct hp_resource_spec *specs; /* the words parsed, when given as words */
	const char **names;
	uint64_t *addrs;
};

static void kernel_only_free(struct kernel_only *k)
{
	free(k->specs);
	free(k->names);
	free(k->addrs);
	memset(k, 0, sizeof(*k));
}

/* Ask oo to parse just the functions s's resources name or hold. 0 or -ENOMEM. */
static int kernel_only(const struct hp_measure_spec *s, struct hp_open_opts *oo, struct kernel_only *k)
{
	const struct hp_resource_spec *v = s->resource_specs;
	size_t n = s->nresources;
	char perr[256];

	memset(k, 0, sizeof(*k));
	if (!v) {
		if (!(k->specs = calloc(n, sizeof(*k->specs))))
			return -ENOMEM;
		for (size_t i = 0; i < n; i++)
			if (!s->resources[i] ||
			    hp_resource_parse(s->resources[i], &k->specs[i], perr, sizeof(perr)) < 0)
				memset(&k->specs[i], 0, sizeof(k->specs[i]));
		v = k->specs;
	}
	k->names = calloc(n, sizeof(*k->names));
	k->addrs = calloc(n, sizeof(*k->addrs));
	if (!k->names || !k->addrs) {
		kernel_only_free(k);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (v[i].is_address)
			k->addrs[oo->nonly_addresses++] = v[i].address;
		else if (v[i].name[0])
			k->names[oo->nonly_functions++] = v[i].name;
	}
	oo->only_functions = k->names;
	oo->only_addresses = k->addrs;
	return 0;
}

static int open_target(struct hp_measure *h, const struct hp_measure_spec *s, const struct hp_measure_env *env,
		       char *err, size_t errlen)
{
	char oerr[512];
	struct hp_open_opts oo = { .quiet = true };
	struct kernel_only only = { 0 };
	int r;
	if (env && s->target == HP_MEASURE_PID) {
		oo.overlay = env->overlay; /* the code as it was under the agent's own patches */
		oo.noverlay = env->noverlay;
	}
	if (s->target == HP_MEASURE_KERNEL) {
		/* No model to share (the CLI): parse just the resources'
		 * functions and what decides their blocks (hp_cfg_parse_module),
		 * not the tens of thousands of the whole kernel: the measurement
		 * reads the blocks of its rows' functions only, and those are the
		 * whole parse's (see tests/target/test_kernel.c); every function
		 * stays indexed. */
		if (!(env && env->kernel) && (r = kernel_only(s, &oo, &only)) < 0) {
			snprintf(err, errlen, "out of memory");
			return -HP_MEASURE_E_SYSTEM;
		}
		if (env && env->kernel) {
			h->model = env->kernel;
		} else if (hp_model_open_kernel(&oo, &h->model, oerr, sizeof(oerr)) < 0) {
			kernel_only_free(&only);
			snprintf(err, errlen, "cannot read the live kernel: %s", oerr);
			return -HP_MEASURE_E_SYSTEM;
		} else {
			h->own_model = true;
		}
		kernel_only_free(&only);
		snprintf(h->target_desc, sizeof(h->target_desc), "kernel %s", h->model->release);
		return 0;
	}
	int found[HP_MEASURE_MAX_PIDS];
	size_t n = 1;
	found[0] = s->pid;
	if (s->target == HP_MEASURE_COMM) {
		r = hp_pids_by_comm(s->comm, found, HP_MEASURE_MAX_PIDS);
		if (r < 0) {
			snprintf(err, errlen, "cannot list processes: %s", strerror(-r));
			return -HP_MEASURE_E_SYSTEM;
		}
		if (r == 0) {
			snprintf(err, errlen, "no running process is named '%s'", s->comm);
			return -HP_MEASURE_E_NOT_FOUND;
		}
		if (r > HP_MEASURE_MAX_PIDS) {
			snprintf(err, errlen,
				 "%d processes are named '%s'; at most %d can be measured at once: pick one by pid", r,
				 s->comm, HP_MEASURE_MAX_PIDS);
			return -HP_MEASURE_E_LIMIT;
		}
		n = (size_t)r;
	}
	h->pids = calloc(n, sizeof(int));
	h->pidfds = calloc(n, sizeof(int));
	h->pid_gone = calloc(n, sizeof(bool));
	if (!h->pids || !h->pidfds || !h->pid_gone) {
		snprintf(err, errlen, "out of memory");
		return -HP_MEASURE_E_SYSTEM;
	}
	for (size_t i = 0; i < n; i++)
		h->pidfds[i] = -1;
	for (size_t i = 0; i < n; i++) {
		h->pids[i] = found[i];
		/* Open the pidfd before the model so an exit during the parse is seen. */
		if ((h->pidfds[i] = hp_pidfd_open(found[i])) < 0) {
			int e = -h->pidfds[i];
			snprintf(err, errlen, e == ESRCH ? "no process %d" : "cannot watch process %d: %s", found[i],
				 strerror(e));
			return e == ESRCH ? -HP_MEASURE_E_NOT_FOUND : -HP_MEASURE_E_SYSTEM;
		}
		h->npids++;
	}
	if (s->target == HP_MEASURE_PID && env && env->process) {
		h->model = env->process;
	} else if ((r = hp_model_open_pid(h->pids[0], &oo, &h->model, oerr, sizeof(oerr))) < 0) {
		snprintf(err, errlen, "%s", oerr);
		return r == -ESRCH ? -HP_MEASURE_E_NOT_FOUND : -HP_MEASURE_E_SYSTEM;
	} else {
		h->own_model = true;
	}
	char comm[HP_COMM_LEN] = "?";
	hp_process_comm(h->pids[0], comm);
	if (s->target == HP_MEASURE_PID)
		snprintf(h->target_desc, sizeof(h->target_desc), "process %d (%s)", h->pids[0], comm);
	else
		snprintf(h->target_desc, sizeof(h->target_desc), "%zu process%s named %s", n, n == 1 ? "" : "es", comm);
	return 0;
}

static int predicates(struct hp_measure *h, const struct hp_measure_spec *s, struct hp_probe_config *c, char *err,
		      size_t errlen)
{
	if (s->where_pid) {
		c->tgid_on = true;
		c->tgid = (uint32_t)s->where_pid;
	}
	if (s->where_comm) {
		c->comm_on = true;
		snprintf(c->comm, sizeof(c->comm), "%s", s->where_comm);
	}
	if (s->where_cgroup) {
		if (!h->mech.cgroup_v2) {
			snprintf(err, errlen, "cgroup predicates unavailable: %s", h->mech.why_no_cgroup);
			return -HP_MEASURE_E_UNAVAILABLE;
		}
		int r = hp_cgroup_id(s->where_cgroup, &c->cgroup_id, err, errlen);
		if (r < 0)
			return r == -ENOENT ? -HP_MEASURE_E_NOT_FOUND : -HP_MEASURE_E_USAGE;
		c->cgroup_on = true;
	}
	if (h->npids) {
		c->target_tgids = h->pids;
		c->ntarget_tgids = h->npids;
	}
	return 0;
}

/* The request's words parsed (spec.h): all of them, or *nparsed up to the
 * first malformed one, whose reason is in perr. NULL when out of memory. */
static struct hp_resource_spec *parse_words(const struct hp_measure *h, size_t *nparsed, char *perr, size_t perrlen)
{
	struct hp_resource_spec *v = calloc(h->nresources ? h->nresources : 1, sizeof(*v));
	*nparsed = 0;
	while (v && *nparsed < h->nresources &&
	       hp_resource_parse(h->resources[*nparsed], &v[*nparsed], perr, perrlen) == 0)
		(*nparsed)++;
	return v;
}

/* The rows of the request's resources: given parsed, or its words parsed now. */
static int resolve_rows(struct hp_measure *h, const struct hp_resource_spec *given, char *err, size_t errlen)
{
	int why = 0;
	char perr[256] = "";
	size_t nres = h->nresources;
	struct hp_resource_spec *parsed = given ? NULL : parse_words(h, &nres, perr, sizeof(perr));
	if (!given && !parsed) {
		snprintf(err, errlen, "out of memory");
		return -HP_MEASURE_E_SYSTEM;
	}
	/* Resources before a malformed word are looked up first, so the first
	 * bad resource of the request is the one reported. */
	int r = hp_resolve(h->model, given ? given : parsed, (const char *const *)h->resources, nres,
			   h->word_blocks ? false : h->blocks, h->word_blocks, HP_MEASURE_MAX_ROWS, &h->rows, &h->nrows,
			   &why, err, errlen);
	free(parsed);
	if (r == -ENOMEM) {
		snprintf(err, errlen, "out of memory");
		return -HP_MEASURE_E_SYSTEM;
	}
	if (r < 0)
		return why == HP_RESOLVE_TOO_MANY ? -HP_MEASURE_E_LIMIT : -HP_MEASURE_E_NOT_FOUND;
	if (nres < h->nresources) {
		snprintf(err, errlen, "%s", perr);
		return -HP_MEASURE_E_USAGE;
	}
	size_t n = h->nrows ? h->nrows : 1;
	h->pub = calloc(n, sizeof(*h->pub));
	h->sampled_row = calloc(n, sizeof(*h->sampled_row));
	h->row_entry = calloc(n, 1);
	h->row_exit = calloc(n, 1);
	h->samples = calloc(n, sizeof(*h->samples));
	h->dead_wall = calloc(n, sizeof(double));
	h->dead_vtime = calloc(n, sizeof(double));
	h->last = calloc(n, sizeof(*h->last));
	if (!h->pub || !h->sampled_row || !h->row_entry || !h->row_exit || !h->samples || !h->dead_wall ||
	    !h->dead_vtime || !h->last) {
		snprintf(err, errlen, "out of memory");
		return -HP_MEASURE_E_SYSTEM;
	}
	return 0;
}

/* The request's resources as words, kept by the handle (rows and messages
 * name them): its words, or its parsed resources written canonically.
 * 0 or -HP_MEASURE_E_SYSTEM. */
static int copy_resources(struct hp_measure *h, const struct hp_measure_spec *s)
{
	h->resources = calloc(s->nresources, sizeof(char *));
	if (!h->resources)
		return -HP_MEASURE_E_SYSTEM;
	for (size_t i = 0; i < s->nresources; i++, h->nresources++) {
		char w[HP_RESOURCE_MAX + 24] = "";
		const char *word = s->resources && s->resources[i] ? s->resources[i] : "";
		if (s->resource_specs) {
			hp_resource_format(&s->resource_specs[i], w, sizeof(w));
			word = w;
		}
		if (!(h->resources[i] = strdup(word)))
			return -HP_MEASURE_E_SYSTEM;
	}
	return 0;
}

int hp_measure_open(const struct hp_measure_spec *s, const struct hp_measure_env *env, struct hp_measure **out,
		    char *err, size_t errlen)
{
	struct hp_probe_config base = { 0 };
	int r;
	*out = NULL;
	if ((r = check_spec(s, err, errlen)) < 0)
		return r;
	struct hp_measure *h = calloc(1, sizeof(*h));
	if (!h) {
		snprintf(err, errlen, "out of memory");
		return -HP_MEASURE_E_SYSTEM;
	}
	pthread_mutex_init(&h->lock, NULL);
	h->target = s->target;
	h->blocks = s->blocks;
	if (s->resource_blocks) {
		h->word_blocks = calloc(s->nresources ? s->nresources : 1, sizeof(bool));
		if (!h->word_blocks) {
			snprintf(err, errlen, "out of memory");
			r = -HP_MEASURE_E_SYSTEM;
			goto fail;
		}
		for (size_t i = 0; i < s->nresources; i++)
			h->blocks |= h->word_blocks[i] = s->resource_blocks[i];
	}
	h->metrics = h->requested_metrics = s->metrics & ((1u << HP_METRIC_N) - 1);
	if (h->metrics & HP_METRICS_TIMERS)
		h->metrics |= HP_METRIC_BIT(HP_METRIC_COUNT); /* per-call values need the calls */
	if ((r = copy_resources(h, s)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	/* HOTPATH_TIMING=1 prints where arming spends its time (the model's own
	 * open prints its phases too). */
	bool timing = getenv("HOTPATH_TIMING") != NULL;
	double tp = hp_now();
#define PHASE(what)                                                                       \
	do {                                                                              \
		if (timing)                                                               \
			fprintf(stderr, "  measure %-12s %.3f s\n", what, hp_now() - tp); \
		tp = hp_now();                                                            \
	} while (0)
	if ((r = open_target(h, s, env, err, errlen)) < 0)
		goto fail;
	PHASE("model");
	if (env && env->nmoved && s->target == HP_MEASURE_PID) {
		h->moved = calloc(env->nmoved, sizeof(*h->moved));
		for (size_t i = 0; h->moved && i < env->nmoved; i++) {
			const struct hp_moved_code *mc = &env->moved[i];
			h->moved[i] = *mc;
			h->moved[i].blocks = malloc((mc->nblocks + 1) * sizeof(*mc->blocks));
			h->moved[i].fns = malloc((mc->nfns + 1) * sizeof(*mc->fns));
			if (h->moved[i].blocks)
				memcpy(h->moved[i].blocks, mc->blocks, mc->nblocks * sizeof(*mc->blocks));
			if (h->moved[i].fns)
				memcpy(h->moved[i].fns, mc->fns, mc->nfns * sizeof(*mc->fns));
			h->nmoved = i + 1;
		}
	}
	/* Unknown resources are refused before the (slower) capability probes. */
	if ((r = resolve_rows(h, s->resource_specs, err, errlen)) < 0)
		goto fail;
	PHASE("resolve");
	if (env && env->caps) {
		h->caps = *env->caps;
	} else {
		char note[512];
		enum hp_caps_source from =
			hp_caps_get(&h->caps, s->target == HP_MEASURE_KERNEL,
				    s->target == HP_MEASURE_KERNEL ? "kernel text read through BPF for the code model" :
								     "not needed for a process target",
				    env ? env->caps_cache_dir : NULL, false, note, sizeof(note));
		if (note[0])
			fprintf(stderr, "hotpathd: %s\n", note);
		if (timing)
			fprintf(stderr, "  measure caps from %s\n",
				from == HP_CAPS_CACHED ? "the boot's cache" : "probes");
	}
	hp_mechanisms_choose(&h->caps, &h->mech);
	PHASE("caps");
	if ((r = predicates(h, s, &base, err, errlen)) < 0)
		goto fail;
	if ((r = hp_measure_plan_rows(h, s->allow_partial, err, errlen)) < 0)
		goto fail;
	PHASE("plan rows");
	if ((r = hp_measure_arm(h, &base, s->sample_hz, s->allow_partial, err, errlen)) < 0)
		goto fail;
	PHASE("arm");
#undef PHASE
	h->t_open = h->t_last = hp_mono_now();
	h->unix_open = h->unix_last = hp_unix_now();
	h->state = HP_MEASURE_ARMED;
	*out = h;
	return 0;
fail:
	hp_measure_close(h);
	return r;
}

size_t hp_measure_nrows(const struct hp_measure *h)
{
	return h->nrows;
}

const struct hp_measure_row *hp_measure_rows(const struct hp_measure *h)
{
	return h->pub;
}

size_t hp_measure_pids(const struct hp_measure *h, int *pids, size_t max)
{
	for (size_t i = 0; i < h->npids && i < max; i++)
		pids[i] = h->pids[i];
	return h->npids;
}

const char *hp_measure_target_desc(const struct hp_measure *h)
{
	return h->target_desc;
}

const struct hp_model *hp_measure_model(const struct hp_measure *h)
{
	return h->model;
}

/* Called with the lock held: notice exited processes; freeze when all are gone. */
static void check_exit(struct hp_measure *h)
{
	if (!h->npids || h->state == HP_MEASURE_TARGET_EXITED || h->state == HP_MEASURE_FAILED)
		return;
	size_t gone = 0;
	for (size_t i = 0; i < h->npids; i++) {
		if (!h->pid_gone[i]) {
			struct pollfd p = { .fd = h->pidfds[i], .events = POLLIN };
			if (poll(&p, 1, 0) == 1) {
				h->pid_gone[i] = true;
				if (h->probes)
					hp_probes_forget_tgid(h->probes, h->pids[i]);
			}
		}
		gone += h->pid_gone[i];
	}
	if (gone < h->npids)
		return;
	struct hp_cum *fin = calloc(h->nrows ? h->nrows : 1, sizeof(*fin));
	double t;
	int64_t u;
	if (!fin || hp_measure_cumulative(h, fin, &t, &u) < 0) {
		free(fin);
		h->state = HP_MEASURE_FAILED;
		snprintf(h->detail, sizeof(h->detail), "the target exited and its final counts could not be read");
		return;
	}
	h->final = fin;
	h->t_final = t;
	h->unix_final = u;
	if (h->probes)
		hp_probes_detach(h->probes);
	h->state = HP_MEASURE_TARGET_EXITED;
	if (h->npids == 1)
		snprintf(h->detail, sizeof(h->detail), "process %d exited; its counts until then are kept", h->pids[0]);
	else
		snprintf(h->detail, sizeof(h->detail), "all %zu processes exited; their counts until then are kept",
			 h->npids);
}

static void note_running(struct hp_measure *h, const struct hp_cum *c)
{
	if (h->state != HP_MEASURE_ARMED)
		return;
	for (size_t i = 0; i < h->nrows; i++)
		if (c[i].count || c[i].samples) {
			h->state = HP_MEASURE_RUNNING;
			return;
		}
}

static int reading(struct hp_measure *h, bool interval, struct hp_measure_reading *out)
{
	struct hp_cum *now = calloc(h->nrows ? h->nrows : 1, sizeof(*now)), *zero = NULL;
	double t;
	int64_t u;
	int r = -ENOMEM;
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&h->lock);
	if (!now)
		goto out;
	check_exit(h);
	if ((r = hp_measure_cumulative(h, now, &t, &u)) < 0) {
		if (h->state != HP_MEASURE_TARGET_EXITED) {
			h->state = HP_MEASURE_FAILED;
			snprintf(h->detail, sizeof(h->detail), "reading the counters failed: %s", strerror(-r));
		}
		goto out;
	}
	note_running(h, now);
	if (interval) {
		r = hp_measure_fill_reading(h, h->last, now, h->t_last, t, h->unix_last, u, out);
		memcpy(h->last, now, h->nrows * sizeof(*now));
		h->t_last = t;
		h->unix_last = u;
	} else if ((zero = calloc(h->nrows ? h->nrows : 1, sizeof(*zero)))) {
		r = hp_measure_fill_reading(h, zero, now, h->t_open, t, h->unix_open, u, out);
	}
out:
	pthread_mutex_unlock(&h->lock);
	free(now);
	free(zero);
	return r;
}

int hp_measure_read(struct hp_measure *h, struct hp_measure_reading *out)
{
	return reading(h, true, out);
}

int hp_measure_total(struct hp_measure *h, struct hp_measure_reading *out)
{
	return reading(h, false, out);
}

int hp_measure_wait(struct hp_measure *h, int timeout_ms)
{
	struct pollfd p[HP_MEASURE_MAX_PIDS];
	nfds_t n = 0;
	pthread_mutex_lock(&h->lock);
	enum hp_measure_state before = h->state;
	bool done = before == HP_MEASURE_TARGET_EXITED || before == HP_MEASURE_FAILED;
	for (size_t i = 0; !done && i < h->npids; i++)
		if (!h->pid_gone[i])
			p[n++] = (struct pollfd){ .fd = h->pidfds[i], .events = POLLIN };
	pthread_mutex_unlock(&h->lock);
	if (done)
		return 0;
	if (n) {
		if (poll(p, n, timeout_ms) < 0)
			return -errno;
	} else {
		struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L };
		if (nanosleep(&ts, NULL) < 0)
			return -errno;
	}
	pthread_mutex_lock(&h->lock);
	check_exit(h);
	bool exited = before != HP_MEASURE_TARGET_EXITED && h->state == HP_MEASURE_TARGET_EXITED;
	pthread_mutex_unlock(&h->lock);
	return exited ? 1 : 0;
}

enum hp_measure_state hp_measure_state(struct hp_measure *h, char *detail, size_t len)
{
	pthread_mutex_lock(&h->lock);
	check_exit(h);
	enum hp_measure_state s = h->state;
	if (detail && len)
		snprintf(detail, len, "%s", h->detail);
	pthread_mutex_unlock(&h->lock);
	return s;
}

void hp_measure_close(struct hp_measure *h)
{
	if (h)
		hp_moved_code_free(h->moved, h->nmoved);
	if (!h)
		return;
	hp_sampler_close(h->sampler);
	hp_probes_close(h->probes);
	for (size_t i = 0; i < h->npids; i++)
		if (h->pidfds[i] >= 0)
			close(h->pidfds[i]);
	free(h->pids);
	free(h->pidfds);
	free(h->pid_gone);
	if (h->own_model)
		hp_model_free(h->model);
	for (size_t i = 0; i < h->nresources; i++)
		free(h->resources[i]);
	free(h->resources);
	free(h->word_blocks);
	free(h->rows);
	free(h->pub);
	free(h->sampled_row);
	free(h->row_entry);
	free(h->row_exit);
	for (size_t i = 0; i < h->ninterned; i++)
		free(h->interned[i]);
	free(h->interned);
	free(h->samples);
	free(h->sample_keys);
	free(h->sample_rows);
	free(h->dead_wall);
	free(h->dead_vtime);
	free(h->frames);
	free(h->last);
	free(h->final);
	pthread_mutex_destroy(&h->lock);
	free(h);
}
