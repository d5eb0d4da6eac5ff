// SPDX-License-Identifier: Apache-2.0
/*
 * The interleaved before/after of an installed plan (compare.h): the
 * alternation of reverts and installs, and the windows' counts. The
 * process runs uninstrumented throughout: each window opens a sampler on
 * its threads (PCs only, no model, no probes) that counts every sample and
 * those in the plan's code (every member's original range, and the copy's
 * heap while it is installed), and reads the process's CPU time before and
 * after. Pair i runs original then installed when i is even, installed
 * then original when odd (O I I O O I ...), so a toggle happens only where
 * the arm changes; the plan is installed again at the end. The plan is
 * reinstalled from the plan file its journal keeps, under the same id, with
 * call sites redirected when its install redirected them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "host/processes.h"
#include "measure/sampler.h"
#include "replace/compare.h"
#include "replace/install.h"
#include "target/target.h"

/* A comparison in progress. */
struct run {
	const struct hp_compare_opts *o;
	struct hp_compare *c;
	struct hp_iplan plan;
	struct hp_model *m; /* for the call sites of a reinstall; NULL: entries only */
	bool calls;
	uint64_t start_time;
	struct hp_pc_range *ranges; /* members' original ranges, then the heap */
	size_t nmembers;
	bool installed;
	double revert_ms, install_ms;
};

/* The install named id in the journals, as installed when one is. */
static int find_install(const char *state_dir, const char *id, struct hp_installed *out, char *err, size_t errlen)
{
	struct hp_installed *ins;
	size_t n;
	int r = -ENOENT;

	if (hp_installed_list(state_dir, &ins, &n, err, errlen) < 0)
		return -EIO;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(ins[i].id, id) && (r == -ENOENT || !strcmp(ins[i].state, "installed"))) {
			*out = ins[i];
			r = 0;
		}
	free(ins);
	if (r < 0)
		snprintf(err, errlen, "%s is not installed: no journal has that id (see `hotpathd installed`)", id);
	return r;
}

static bool alive(const struct run *x)
{
	return hp_process_running(x->c->pid, x->start_time) == 1;
}

/* The install's state after an error, as the journals say it. */
static void state_now(struct run *x)
{
	struct hp_installed h;
	char e[256];
	if (find_install(x->o->state_dir, x->o->id, &h, e, sizeof(e)) == 0)
		snprintf(x->c->state, sizeof(x->c->state), "%s", h.state);
	else
		snprintf(x->c->state, sizeof(x->c->state), "%s", "reverted");
	if (!alive(x))
		snprintf(x->c->state, sizeof(x->c->state), "%s", "process_gone");
}

static int gone(struct run *x, const char *when, char *err, size_t errlen)
{
	snprintf(err, errlen, "the process is gone: process %d exited %s; %zu window%s measured", x->c->pid, when,
		 x->c->nwindows, x->c->nwindows == 1 ? "" : "s");
	return -ESRCH;
}

static int revert(struct run *x, char *err, size_t errlen)
{
	struct hp_install_result res;
	int pid = 0;
	double t0 = hp_now();
	int r = hp_revert_id(x->o->state_dir, x->o->id, &pid, &res, NULL, NULL, err, errlen);
	if (r < 0)
		return !alive(x) ? gone(x, "while the plan was being reverted", err, errlen) : r;
	x->installed = false;
	x->revert_ms += (hp_now() - t0) * 1e3;
	x->c->reverts++;
	if (x->o->toggled)
		x->o->toggled(x->o->ctx, false);
	return 0;
}

static int install(struct run *x, char *err, size_t errlen)
{
	struct hp_install_opts io = {
		.state_dir = x->o->state_dir, .pid = x->c->pid, .patch_calls = x->calls, .m = x->m, .id = x->o->id
	};
	struct hp_install_result res;
	double t0 = hp_now();
	int r = hp_install(&x->plan, &io, &res, err, errlen);
	if (r < 0)
		return !alive(x) ? gone(x, "while the plan was being installed", err, errlen) : r;
	x->installed = true;
	x->ranges[x->nmembers] = (struct hp_pc_range){ res.heap, res.heap + res.heap_len };
	x->install_ms += (hp_now() - t0) * 1e3;
	x->c->installs++;
	if (x->o->toggled)
		x->o->toggled(x->o->ctx, true);
	return 0;
}

static void sleep_seconds(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* One window of pair i in the current arm. */
static int window(struct run *x, unsigned i, char *err, size_t errlen)
{
	struct hp_compare *c = x->c;
	struct hp_sampler_opts so = { .frequency = c->sample_hz,
				      .pid = c->pid,
				      .ranges = x->ranges,
				      .nranges = x->nmembers + (x->installed ? 1 : 0) };
	struct hp_compare_window *w = &c->windows[c->nwindows];
	uint64_t t0 = 0, t1 = 0;
	char e[512];

	if (hp_process_cpu_ticks(c->pid, &t0) < 0 || !alive(x))
		return gone(x, "between two windows", err, errlen);
	struct hp_sampler *s = hp_sampler_open(NULL, &so, e, sizeof(e));
	if (!s)
		return !alive(x) ? gone(x, "between two windows", err, errlen) :
				   (snprintf(err, errlen, "cannot sample process %d: %s", c->pid, e), -EIO);
	sleep_seconds(c->window_seconds);
	struct hp_sample_interval iv;
	int r = hp_sampler_take(s, &iv);
	hp_sampler_close(s);
	if (r < 0) {
		snprintf(err, errlen, "out of memory");
		return r;
	}
	bool still = hp_process_cpu_ticks(c->pid, &t1) == 0 && alive(x);
	*w = (struct hp_compare_window){ .pair = i,
					 .installed = x->installed,
					 .start_unix_ns = iv.start_unix_ns,
					 .seconds = (double)(iv.end_unix_ns - iv.start_unix_ns) / 1e9,
					 .samples = iv.total,
					 .samples_in_plan = iv.in_ranges,
					 .cpu_seconds = (double)(t1 - t0) / (double)sysconf(_SC_CLK_TCK) };
	hp_sample_interval_free(&iv);
	if (!still) {
		char when[64];
		snprintf(when, sizeof(when), "during pair %u's %s window", i + 1,
			 x->installed ? "installed" : "original");
		return gone(x, when, err, errlen);
	}
	c->nwindows++;
	return 0;
}

/* The install found, its plan read, the ranges and the model made. */
static int prepare(struct run *x, const struct hp_installed *h, char *err, size_t errlen)
{
	struct hp_compare *c = x->c;
	char e[512];
	int r = hp_iplan_read(h->plan_path, &x->plan, e, sizeof(e));
	if (r < 0) {
		snprintf(err, errlen, "install %s: %s", h->id, e);
		return r;
	}
	snprintf(c->root, sizeof(c->root), "%s", x->plan.root);
	c->members = x->nmembers = x->plan.nmembers;
	x->ranges = calloc(x->nmembers + 1, sizeof(*x->ranges));
	c->windows = calloc(2 * (size_t)c->pairs, sizeof(*c->windows));
	if (!x->ranges || !c->windows) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* Where the members run when reverted: their planned addresses moved as the root's entry. */
	int64_t delta = (int64_t)(h->entry - x->plan.members[0].addr);
	for (size_t k = 0; k < x->nmembers; k++) {
		uint64_t a = x->plan.members[k].addr + (uint64_t)delta;
		x->ranges[k] = (struct hp_pc_range){ a, a + x->plan.members[k].size };
	}
	x->ranges[x->nmembers] = (struct hp_pc_range){ h->heap, h->heap + h->heap_len };
	/* A reinstall redirects the call sites the install did, found in the
	 * process's model read under every install's patches. */
	x->calls = h->calls > 0;
	if (x->calls) {
		r = hp_model_open_pid_unpatched(x->o->state_dir, c->pid, NULL, &x->m, e, sizeof(e));
		if (r < 0) {
			if (!alive(x))
				return gone(x, "before the first window", err, errlen);
			snprintf(err, errlen,
				 "cannot read process %d's code for the call sites a reinstall redirects: %s", c->pid,
				 e);
			return r;
		}
	}
	return 0;
}

int hp_compare_run(const struct hp_compare_opts *o, struct hp_compare *c, char *err, size_t errlen)
{
	struct run x = { .o = o, .c = c, .installed = true };
	struct hp_installed h;
	int r;

	memset(c, 0, sizeof(*c));
	hp_compare_summarize(NULL, 0, &c->summary); /* "insufficient" until windows are measured */
	snprintf(c->state, sizeof(c->state), "%s", "installed");
	c->pairs = o->pairs ? o->pairs : HP_COMPARE_PAIRS_DEFAULT;
	c->window_seconds = o->window_seconds > 0 ? o->window_seconds : HP_COMPARE_WINDOW_DEFAULT;
	c->sample_hz = HP_COMPARE_HZ;
	if (c->pairs < HP_COMPARE_PAIRS_MIN || c->pairs > HP_COMPARE_PAIRS_MAX ||
	    c->window_seconds < HP_COMPARE_WINDOW_MIN || c->window_seconds > HP_COMPARE_WINDOW_MAX) {
		snprintf(err, errlen, "pairs are %d..%d and a window %.1f..%.0f seconds (not %u pairs of %g s)",
			 HP_COMPARE_PAIRS_MIN, HP_COMPARE_PAIRS_MAX, HP_COMPARE_WINDOW_MIN, HP_COMPARE_WINDOW_MAX,
			 c->pairs, c->window_seconds);
		return -EINVAL;
	}
	if (!hp_install_id_valid(o->id)) {
		snprintf(err, errlen, "an install id is 1 to %d letters, digits, '-' or '_'", HP_INSTALL_ID_MAX);
		return -EINVAL;
	}
	snprintf(c->id, sizeof(c->id), "%s", o->id);
	if ((r = find_install(o->state_dir, o->id, &h, err, errlen)) < 0) {
		snprintf(c->state, sizeof(c->state), "%s", "not_installed");
		return r;
	}
	c->pid = h.pid;
	x.start_time = h.start_time;
	snprintf(c->root, sizeof(c->root), "%s", h.root);
	if (!strcmp(h.state, "process_gone") || !alive(&x)) {
		snprintf(c->state, sizeof(c->state), "%s", "process_gone");
		snprintf(err, errlen, "the process is gone: process %d, where %s is installed, exited", h.pid, o->id);
		return -ESRCH;
	}
	if (strcmp(h.state, "installed")) {
		snprintf(c->state, sizeof(c->state), "%s", h.state);
		snprintf(err, errlen, "%s is not installed (its journal says %s: %s)", o->id, h.state, h.detail);
		return -ENOENT;
	}
	if ((r = prepare(&x, &h, err, errlen)) < 0)
		goto out;
	/* Pair i: original then installed when i is even, else installed then original. */
	for (unsigned i = 0; i < c->pairs && r == 0; i++)
		for (int half = 0; half < 2 && r == 0; half++) {
			bool want = (i % 2 == 0) == (half == 1);
			if (want != x.installed && (r = want ? install(&x, err, errlen) : revert(&x, err, errlen)) < 0)
				break;
			if ((r = window(&x, i, err, errlen)) < 0)
				break;
			if (o->window_done && o->window_done(o->ctx, c)) {
				snprintf(err, errlen, "cancelled after %zu of %u windows", c->nwindows, 2 * c->pairs);
				r = -ECANCELED;
			}
		}
	/* Installed again, as it was (also after a cancel or a failed window). */
	if (!x.installed && r != -ESRCH) {
		char e2[512];
		int r2 = install(&x, e2, sizeof(e2));
		if (r2 < 0 && r == 0) {
			r = r2;
			snprintf(err, errlen, "%s", e2);
		} else if (r2 < 0) {
			size_t n = strlen(err);
			snprintf(err + n, errlen - n, "; installing the plan again failed too: %s", e2);
		} else if (r == -ECANCELED) {
			size_t n = strlen(err);
			snprintf(err + n, errlen - n, "; the plan is installed again");
		}
	}
out:
	if (c->reverts)
		c->revert_ms = x.revert_ms / (double)c->reverts;
	if (c->installs)
		c->install_ms = x.install_ms / (double)c->installs;
	hp_compare_summarize(c->windows, c->nwindows, &c->summary);
	if (r < 0)
		state_now(&x);
	hp_model_free(x.m);
	if (x.plan.root)
		hp_iplan_free(&x.plan);
	free(x.ranges);
	return r;
}

void hp_compare_free(struct hp_compare *c)
{
	free(c->windows);
	c->windows = NULL;
	c->nwindows = 0;
}
