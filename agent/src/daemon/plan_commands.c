// SPDX-License-Identifier: Apache-2.0
/*
 * The plan commands (see plans.h), run on the command worker's thread:
 *
 *   MakePlan      root by (catalog digest, function index) in the target's
 *                 model -> profile (a measurement of this agent, or block
 *                 counts measured now: in a process, exact counts of the
 *                 root and its direct callees by inline counters, uprobes
 *                 in the same window for those that cannot be counted
 *                 inline; exact kprobe counts of the same in the kernel
 *                 where kprobes work, else PC samples, an estimate) ->
 *                 plan -> its JSON as `hotpathd plan --json` writes it
 *                 (plan/plan_json.h). With hot_set, a process's whole hot
 *                 set instead: no root, its threads' PCs sampled now (as
 *                 `hotpathd plan pid PID --hot-set --sample S`) choose the
 *                 members of the module the digest names (or, with no
 *                 digest, the hottest), those are counted inline for as
 *                 long, and the hot set is planned from those counts (as
 *                 bench/replace_sqlite's pipeline).
 *   InstallPlan   the approved hash must be the one recomputed from the
 *                 plan's code; the target must be the plan's process -> the
 *                 replace layer's install, named by the plan's id. A kernel
 *                 plan goes through the kernel target (hotpath.ko) where the
 *                 host allows code replacement: this process holds
 *                 /dev/hotpath from its first kernel install to its exit, so
 *                 the module undoes everything if the agent dies; refused
 *                 with the reason otherwise.
 *   RevertPlan    that install out (call sites first, then the entry).
 *   ListInstalled the journals.
 * And, when no command has come for HP_PLANS_IDLE_MS, the heaps reverts
 * kept mapped asked again (hp_plans_idle).
 *
 * Each phase sends Progress; a cancel is honoured between phases (and, for
 * an install, up to the moment before anything is written, through the
 * install's approval hook).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/agent.h"
#include "daemon/log.h"
#include "daemon/measurements.h"
#include "daemon/plan_commands.h"
#include "daemon/targets.h"
#include "daemon/worker.h"
#include "measure/measure.h"
#include "measure/moved.h"
#include "measure/sampler.h"
#include "plan/plan.h"
#include "plan/plan_json.h"
#include "plan/profile.h"
#include "plan/profile_measured.h"
#include "replace/counted_window.h"
#include "replace/counters.h"
#include "replace/install.h"
#include "replace/install_json.h"

#define PLAN_JSON_MAX    HP_PLAN_JSON_MAX
#define DEFAULT_SECONDS  10
#define MAX_SECONDS      3600
#define STRETCH          8 /* a window with no call of the root doubles up to this many times its length */
/* Direct callees measured with the root at most (the plan's group bound). */
#define MAX_CALLEES      63
#define KERNEL_TARGET_ID "kernel"

static bool cancelled(struct agent *ag, struct hp_job *job)
{
	if (!hp_job_cancelled(job))
		return false;
	hp_job_fail(ag, job, "cancelled");
	return true;
}

static bool is_kernel_id(const char *id)
{
	return !id || !*id || !strcmp(id, KERNEL_TARGET_ID);
}

/* ---- MakePlan ------------------------------------------------------------------------------ */

/* The addresses of the root and its direct callees (calls and tail calls
 * to function entries of the same target, PLT stubs left out: their callee
 * is in another object and stays where it is). */
static size_t callee_addresses(const struct hp_model *m, const struct hp_module *mod, const struct hp_function *root,
			       uint64_t seen[MAX_CALLEES + 1])
{
	size_t n = 0;

	seen[n++] = root->addr;
	for (uint32_t pass = 0; pass < 2; pass++) {
		uint32_t lim = pass ? root->nblocks : root->ncalls;
		for (uint32_t i = 0; i < lim && n <= MAX_CALLEES; i++) {
			uint64_t tgt[8];
			size_t nt = 0;
			if (!pass) {
				tgt[nt++] = mod->calls[root->call_start + i].target;
			} else {
				const struct hp_block *b = &mod->blocks[root->block_start + i];
				for (uint16_t s = 0; s < b->nsucc && nt < 8; s++)
					if (mod->succs[b->succ_start + s].kind == HP_SUCC_TAIL_CALL)
						tgt[nt++] = mod->succs[b->succ_start + s].target;
			}
			for (size_t k = 0; k < nt && n <= MAX_CALLEES; k++) {
				const struct hp_function *g = hp_model_lookup(m, tgt[k], NULL);
				size_t j;
				if (!g || g->addr != tgt[k] || (g->flags & HP_FN_PLT))
					continue;
				for (j = 0; j < n && seen[j] != g->addr; j++)
					;
				if (j < n)
					continue;
				seen[n++] = g->addr;
			}
		}
	}
	return n;
}

/* Wait seconds in one-second steps with progress between from and to;
 * false when cancelled (or, wait_fn returning 1, when the target ended). */
struct waiting {
	struct agent *ag;
	struct hp_job *job;
	struct hp_measure *h; /* process measurements: returns when the process exits */
};

static int wait_seconds(struct waiting *w, unsigned seconds, double from, double to, const char *what)
{
	char msg[160];
	for (unsigned s = 0; s < seconds; s++) {
		if (hp_job_cancelled(w->job))
			return -ECANCELED;
		snprintf(msg, sizeof(msg), "%s: %u of %u s", what, s, seconds);
		hp_job_progress(w->ag, w->job, from + (to - from) * s / seconds, msg);
		if (w->h) {
			int r = hp_measure_wait(w->h, 1000);
			if (r == 1)
				return -ESRCH;
		} else {
			sleep(1);
		}
	}
	return 0;
}

/* How many times the profile saw the function at addr entered (its first block's count). */
static double entries(const struct hp_profile *p, uint64_t addr)
{
	const struct hp_prof_fn *f = hp_profile_find(p, addr);
	for (size_t k = 0; f && k < f->nblocks; k++)
		if (f->blocks[k].offset == 0)
			return f->blocks[k].count;
	return 0;
}

/* Probes (uprobes in a process, kprobes in the kernel) counting the blocks
 * of the functions at addrs[0..n) of target t exactly, opened into *h. */
static int open_probes(struct agent *ag, struct hp_target *t, bool kernel, struct hp_model *m, const uint64_t *addrs,
		       size_t n, const struct hp_moved_code *moved, size_t nmoved, const struct hp_byte_patch *bp,
		       size_t nbp, struct hp_measure **h, char *err, size_t errlen)
{
	struct hp_resource_spec res[MAX_CALLEES + 1];

	memset(res, 0, sizeof(res));
	for (size_t i = 0; i < n && i <= MAX_CALLEES; i++) {
		res[i].is_address = true;
		res[i].address = addrs[i];
	}
	struct hp_measure_spec spec = {
		.target = kernel ? HP_MEASURE_KERNEL : HP_MEASURE_PID,
		.pid = kernel ? 0 : t->pid,
		.resource_specs = res,
		.nresources = n,
		.metrics = HP_METRIC_BIT(HP_METRIC_COUNT),
		.blocks = true,
		.allow_partial = true,
	};
	struct hp_measure_env env = { .kernel = ag->model,
				      .process = kernel ? NULL : m,
				      .caps = &ag->caps,
				      .moved = moved,
				      .nmoved = nmoved,
				      .overlay = bp,
				      .noverlay = nbp };
	return hp_measure_open(&spec, &env, h, err, errlen) < 0 ? -EINVAL : 0;
}

/* The block counts the probes of h counted so far, into out (emptied first). */
static int probed_counts(struct hp_measure *h, struct hp_profile *out, char *err, size_t errlen)
{
	struct hp_measure_reading rd;
	size_t nblocks = 0;

	if (hp_measure_total(h, &rd) < 0) {
		snprintf(err, errlen, "out of memory reading the counts");
		return -ENOMEM;
	}
	hp_profile_free(out);
	out->weight = 1;
	int r = hp_profile_from_reading(h, &rd, out, &nblocks, err, errlen);
	hp_measure_reading_free(&rd);
	return r;
}

/* Block counts of the root and its direct callees (addrs[0..n), the root
 * first) in target t, counted exactly by probes for `seconds`: by uprobes
 * in a process, by kprobes in the kernel (kernel set; blocks the kernel
 * refuses to probe are sampled, and the profile says it is estimated
 * then). */
static int measure_exact(struct agent *ag, struct hp_job *job, struct hp_target *t, bool kernel, struct hp_model *m,
			 const uint64_t *addrs, size_t n, const char *root_name, unsigned seconds,
			 const struct hp_moved_code *moved, size_t nmoved, const struct hp_byte_patch *bp, size_t nbp,
			 struct hp_profile *out, char *err, size_t errlen)
{
	const char *probes = kernel ? "kprobes" : "uprobes";
	struct hp_measure *h = NULL;
	char msg[200];

	snprintf(msg, sizeof(msg), "probing the blocks of %s and %zu direct callee(s)", root_name, n - 1);
	hp_job_progress(ag, job, 0.1, msg);
	if (open_probes(ag, t, kernel, m, addrs, n, moved, nmoved, bp, nbp, &h, err, errlen) < 0)
		return -EINVAL;
	struct waiting w = { ag, job, kernel ? NULL : h };
	snprintf(msg, sizeof(msg), "counting %s's blocks exactly (%s)", root_name, probes);
	/* A window in which the root was never entered plans nothing. Under probes every block traps, so a
	 * function whose calls are long (a B-tree insert under a query driver) may not be entered in the
	 * asked window on a loaded host: the window then doubles, up to STRETCH times its length. */
	unsigned waited = 0, step = seconds;
	int r;
	for (;;) {
		r = wait_seconds(&w, step, waited ? 0.7 : 0.15, 0.7, msg);
		waited += step;
		if (r == -ESRCH) {
			snprintf(err, errlen, "process %d exited while its blocks were counted", t->pid);
			break;
		}
		if (r < 0)
			break;
		r = probed_counts(h, out, err, errlen);
		if (kernel)
			snprintf(out->source, sizeof(out->source), "%u s of exact block counts (kprobes) in the kernel",
				 waited);
		else
			snprintf(out->source, sizeof(out->source), "%u s of exact block counts (uprobes) in process %d",
				 waited, t->pid);
		if (r < 0 || entries(out, addrs[0]) > 0 || waited >= seconds * STRETCH || waited * 2 > MAX_SECONDS)
			break;
		step = waited;
		snprintf(msg, sizeof(msg), "no call of %s in %u s; counting %u s more (%s)", root_name, waited, step,
			 probes);
	}
	hp_measure_close(h);
	return r;
}

/* Whether function fn of mod can be counted inline in process pid; why
 * not into why. Not: code that runs in an installed copy now (its blocks
 * are counted where they moved, by uprobes), code under a running
 * measurement's probes, and code the counted copy cannot be made of (the
 * copy carries its own unwind data, so a function that calls others is
 * counted inline too: a backtrace through its frame unwinds as through the
 * original's). */
static bool countable_inline(struct hp_model *m, const struct hp_module *mod, const struct hp_function *fn, int pid,
			     const struct hp_moved_code *moved, size_t nmoved, const struct hp_byte_patch *probes,
			     size_t nprobes, char *why, size_t len)
{
	if (nmoved && hp_moved_run_address(moved, nmoved, pid, fn->addr, 1) != fn->addr) {
		snprintf(why, len, "its calls run in an installed copy");
		return false;
	}
	for (size_t i = 0; i < nprobes; i++)
		if (probes[i].addr >= fn->addr && probes[i].addr < fn->addr + fn->size) {
			snprintf(why, len, "a running measurement probes it");
			return false;
		}
	return hp_counted_check(m, mod, fn, why, len) == 0;
}

/* Functions counted by uprobes in the inline counters' window (those that
 * cannot be counted inline), opened once the counted copies are installed
 * and closed before they are reverted, so the probes never see a call site
 * the copies redirect half-written. */
struct probed_side {
	struct agent *ag;
	struct hp_target *t;
	struct hp_model *m;
	const uint64_t *addrs;
	size_t n;
	bool root; /* addrs[0] is the root the window waits for */
	const struct hp_moved_code *moved;
	size_t nmoved;
	const struct hp_byte_patch *bp;
	size_t nbp;
	struct hp_measure *h;
};

/* The inline counting window's end and progress (hp_counted_window's tick). */
struct count_tick {
	struct agent *ag;
	struct hp_job *job;
	const char *root_name; /* the window is stretched while the root was not entered; NULL: not */
	uint64_t root_addr;
	struct probed_side *probed; /* NULL: none; with root set, the root's entries are counted there */
	unsigned seconds, until, shown;
	double from, to;
	uint64_t *root_counts;
	char what[200];
};

/* Whether the root was entered in the window so far. */
static bool root_entered(struct count_tick *ct, const struct hp_counted *c)
{
	char e[256];
	if (ct->probed && ct->probed->root) {
		struct hp_profile p = { 0 };
		bool yes = probed_counts(ct->probed->h, &p, e, sizeof(e)) < 0 || entries(&p, ct->root_addr) > 0;
		hp_profile_free(&p);
		return yes;
	}
	return hp_counted_read(c, 0, ct->root_counts, NULL, e, sizeof(e)) < 0 || ct->root_counts[0] > 0;
}

static int count_tick(void *ctx, const struct hp_counted *c, double elapsed)
{
	struct count_tick *ct = ctx;
	unsigned s = (unsigned)elapsed;
	char msg[300];

	if (hp_job_cancelled(ct->job))
		return -ECANCELED;
	if (s >= ct->until) {
		if (!ct->root_name || root_entered(ct, c) || ct->until >= ct->seconds * STRETCH ||
		    ct->until * 2 > MAX_SECONDS)
			return 1;
		snprintf(ct->what, sizeof(ct->what), "no call of %s in %u s; counting %u s more (inline counters)",
			 ct->root_name, ct->until, ct->until);
		ct->until *= 2;
	}
	if (s >= ct->shown) {
		ct->shown = s + 1;
		snprintf(msg, sizeof(msg), "%s: %u of %u s", ct->what, s, ct->until);
		double f = s >= ct->seconds ? 1 : (double)s / ct->seconds;
		hp_job_progress(ct->ag, ct->job, ct->from + (ct->to - ct->from) * f, msg);
	}
	return 0;
}

/*
 * Block counts of fns[0..n) in process pid counted exactly by inline
 * counters (replace/counters.h) for `seconds` (with root_name, longer while
 * the root was not entered, as measure_exact's window): counted copies
 * installed through the journal, read live, and reverted on every way out
 * (the end, an error, a cancel, the process's exit). With probed, its
 * functions are counted by uprobes in the same window. Added to out;
 * *waited gets the window's length in whole seconds, how the increments
 * used.
 */
static int count_inline(struct agent *ag, struct hp_job *job, int pid, struct hp_model *m,
			const struct hp_function *const *fns, const struct hp_module *const *mods, size_t n,
			const char *root_name, uint64_t root_addr, struct probed_side *probed, unsigned seconds,
			double from, double to, struct hp_profile *out, unsigned *waited, char *how, size_t howlen,
			char *err, size_t errlen)
{
	struct hp_counted c;
	struct hp_counted_counts *v = NULL;
	char msg[300], e2[512];
	double secs = 0;

	snprintf(msg, sizeof(msg), "installing counted copies of %zu function(s) (inline counters)", n);
	hp_job_progress(ag, job, from, msg);
	int r = hp_counted_begin(pid, m, ag->state_dir, fns, mods, n, HP_COUNT_AUTO, false, &c, err, errlen);
	if (r < 0)
		return r;
	struct count_tick ct = { .ag = ag,
				 .job = job,
				 .root_name = root_name,
				 .root_addr = root_addr,
				 .probed = probed,
				 .seconds = seconds,
				 .until = seconds,
				 .from = from,
				 .to = to,
				 .root_counts = calloc(fns[0]->nblocks + 1, sizeof(uint64_t)) };
	snprintf(ct.what, sizeof(ct.what), "counting %zu functions' blocks exactly (inline counters%s)",
		 n + (probed ? probed->n : 0), probed ? ", uprobes for the rest" : "");
	if (!ct.root_counts) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
	} else if (probed && probed->n) {
		hp_job_progress(ag, job, from, "probing the functions that cannot be counted inline (uprobes)");
		r = open_probes(ag, probed->t, false, m, probed->addrs, probed->n, probed->moved, probed->nmoved,
				probed->bp, probed->nbp, &probed->h, err, errlen);
	}
	if (r == 0)
		r = hp_counted_window(&c, count_tick, &ct, &secs, &v, err, errlen);
	if (r == 0 && hp_counted_profile(&c, v, out) < 0) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
	}
	if (probed && probed->h) { /* its counts, then its probes out, before the copies are */
		struct hp_profile pp = { 0 };
		if (r == 0 && (r = probed_counts(probed->h, &pp, err, errlen)) == 0) {
			for (size_t i = 0; r == 0 && i < pp.nfns; i++) {
				const struct hp_prof_fn *pf = &pp.fns[i];
				const struct hp_module *fm;
				const struct hp_function *f = hp_model_lookup(m, pf->addr, &fm);
				for (size_t k = 0; f && r == 0 && k < pf->nblocks; k++)
					r = hp_profile_add(out, fm, f, pf->blocks[k].offset, pf->blocks[k].count);
				for (size_t k = 0; f && r == 0 && k < pf->nedges; k++)
					r = hp_profile_add_edge(out, fm, f, pf->edges[k].from, pf->edges[k].to,
								pf->edges[k].count);
			}
			out->estimated |= pp.estimated;
			if (r < 0)
				snprintf(err, errlen, "out of memory");
		}
		hp_profile_free(&pp);
		hp_measure_close(probed->h);
		probed->h = NULL;
	}
	snprintf(how, howlen, "%s", c.how);
	hp_counted_counts_free(v, n);
	free(ct.root_counts);
	/* Always reverted: call sites, entries, heaps (nothing left when the process exited). */
	int rr = hp_counted_revert(&c, e2, sizeof(e2));
	if (r == -ESRCH) {
		snprintf(err, errlen, "process %d exited while its blocks were counted (inline counters)", pid);
	} else if (rr < 0) {
		size_t l = r < 0 ? strlen(err) : 0;
		snprintf(err + l, errlen - l, "%s%s", l ? "; " : "", e2);
		if (r == 0)
			r = rr;
	}
	/* The model's overlay goes back to the patches of what stays installed (the counting set it to the
	 * counted copies' as it installed them). */
	struct hp_byte_patch *bp = NULL;
	size_t nbp = 0;
	hp_installed_patches(ag->state_dir, pid, &bp, &nbp);
	hp_model_set_overlay(m, bp, nbp);
	free(bp);
	*waited = ct.until;
	hp_log(true, "counted %zu function(s) of process %d inline for %.1f s (%s): %s", n, pid, secs, how,
	       r == 0 ? "counts read, copies reverted" : err);
	return r;
}

/* Append "NAME (WHY)" (the first) or ", NAME" to list: the functions that
 * could not be counted inline. */
static void note_uncounted(char *list, size_t len, size_t k, const char *name, const char *why)
{
	size_t l = strlen(list);
	if (!k)
		snprintf(list, len, "%.50s (%.140s)", name, why);
	else
		snprintf(list + l, len - l, ", %s", name);
}

/* Block counts of the root and its direct callees in process t, exactly,
 * in one window: by inline counters for every function that can be
 * counted so, by uprobes (as before inline counters) for those that
 * cannot. The source says which. */
static int count_root_group(struct agent *ag, struct hp_job *job, struct hp_target *t, struct hp_model *m,
			    const struct hp_module *mod, const struct hp_function *root, unsigned seconds,
			    const struct hp_moved_code *moved, size_t nmoved, const struct hp_byte_patch *bp,
			    size_t nbp, size_t nprobes, struct hp_profile *out, char *err, size_t errlen)
{
	uint64_t addrs[MAX_CALLEES + 1], left[MAX_CALLEES + 1];
	const struct hp_function *fns[MAX_CALLEES + 1];
	const struct hp_module *mods[MAX_CALLEES + 1];
	size_t n = callee_addresses(m, mod, root, addrs), nin = 0, nleft = 0;
	char why[300], list[200] = "", how[400] = "";
	const struct hp_byte_patch *probes = bp + nbp;
	int r;

	for (size_t i = 0; i < n; i++) {
		const struct hp_module *fm;
		const struct hp_function *f = hp_model_lookup(m, addrs[i], &fm);
		if (f && countable_inline(m, fm, f, t->pid, moved, nmoved, probes, nprobes, why, sizeof(why))) {
			fns[nin] = f;
			mods[nin++] = fm;
			continue;
		}
		if (!f)
			snprintf(why, sizeof(why), "not in the model");
		note_uncounted(list, sizeof(list), nleft, f ? f->name : "?", why);
		left[nleft++] = addrs[i];
		hp_log(true, "plan of %s in process %d: %s is counted by uprobes, not inline: %s", root->name, t->pid,
		       f ? f->name : "?", why);
	}
	if (!nin) { /* nothing inline: the group by uprobes */
		r = measure_exact(ag, job, t, false, m, addrs, n, root->name, seconds, moved, nmoved, bp, nbp + nprobes,
				  out, err, errlen);
		size_t l = strlen(out->source);
		snprintf(out->source + l, sizeof(out->source) - l, "; none can be counted inline: %s", list);
		return r;
	}
	struct probed_side ps = { .ag = ag,
				  .t = t,
				  .m = m,
				  .addrs = left,
				  .n = nleft,
				  .root = nleft && left[0] == root->addr,
				  .moved = moved,
				  .nmoved = nmoved,
				  .bp = bp,
				  .nbp = nbp + nprobes };
	unsigned waited = 0;
	out->weight = 1;
	r = count_inline(ag, job, t->pid, m, fns, mods, nin, root->name, root->addr, nleft ? &ps : NULL, seconds, 0.15,
			 0.7, out, &waited, how, sizeof(how), err, errlen);
	if (r < 0)
		return r;
	snprintf(out->source, sizeof(out->source), "%u s of exact block counts (inline counters) in process %d%s%s",
		 waited, t->pid, nleft ? "; uprobes in the same window for " : "", list);
	if (strstr(how, "not exact"))
		snprintf(out->source + strlen(out->source), sizeof(out->source) - strlen(out->source), "; %s", how);
	return 0;
}

/* PC samples taken for seconds (hp_profile_sample), with progress. */
struct sample_wait {
	struct waiting w;
	const char *what;
	double from, to;
};

static int sample_wait(void *ctx, unsigned secs)
{
	struct sample_wait *sw = ctx;
	return wait_seconds(&sw->w, secs, sw->from, sw->to, sw->what);
}

/* Estimated block counts from PC samples for `seconds`: of the kernel (pid
 * 0, m the kernel's model) or of process pid's threads; progress from
 * `from` to `to`. */
static int sample_now(struct agent *ag, struct hp_job *job, const struct hp_model *m, int pid, unsigned seconds,
		      double from, double to, struct hp_profile *out, char *err, size_t errlen)
{
	char what[160];
	if (pid)
		snprintf(what, sizeof(what), "sampling process %d's PCs at %u Hz (estimated block counts)", pid,
			 HP_PROCESS_SAMPLE_HZ);
	else
		snprintf(what, sizeof(what), "sampling kernel PCs (estimated block counts)");
	struct sample_wait sw = { { ag, job, NULL }, what, from, to };
	return hp_profile_sample(m, pid, seconds, pid ? HP_PROCESS_SAMPLE_HZ : 0, sample_wait, &sw, out, err, errlen);
}

/*
 * A process's hot set counted exactly (the bench's pipeline, `hotpathd plan
 * --hot-set --sample`, then `measure --blocks --inline` of its members,
 * then `plan --hot-set --profile --share 1 --resident`): its threads' PCs
 * sampled for `seconds` choose the members (a plan from the samples), every
 * member that can be counted inline is counted for `seconds`, and out gets
 * those counts; the sampled profile goes to *sampled (the caller's
 * o->resident: where the copy starts) and o->hot_module names the module
 * planned. A member that cannot be counted inline keeps its sampled counts,
 * scaled by the counted members' counts per sample (an estimate, said in
 * the source). When the samples plan nothing, out is the sampled profile.
 */
static int count_hot_set(struct agent *ag, struct hp_job *job, struct hp_target *t, struct hp_model *m,
			 const struct hp_module *mod, struct hp_plan_opts *o, unsigned seconds,
			 const struct hp_moved_code *moved, size_t nmoved, const struct hp_byte_patch *probes,
			 size_t nprobes, struct hp_profile *sampled, struct hp_profile *out, char *err, size_t errlen)
{
	struct hp_plan first = { 0 };
	char why[300], list[200] = "", how[400] = "", msg[200];
	int r = sample_now(ag, job, m, t->pid, seconds, 0.1, 0.4, sampled, err, errlen);
	if (r < 0)
		return r;
	snprintf(msg, sizeof(msg), "choosing process %d's hot set from its samples", t->pid);
	hp_job_progress(ag, job, 0.42, msg);
	if ((r = hp_plan_make(m, NULL, mod, sampled, o, &first, err, errlen)) < 0)
		return r;
	if (first.status != HP_PLAN_OK || !first.nmembers) { /* the plan says why: made again from the samples */
		hp_plan_free(&first);
		return hp_profile_copy(sampled, out);
	}
	size_t n = first.nmembers, nin = 0, nleft = 0;
	const struct hp_function **fns = calloc(n + 1, sizeof(*fns)), **left = calloc(n + 1, sizeof(*left));
	const struct hp_module **mods = calloc(n + 1, sizeof(*mods)), **lmods = calloc(n + 1, sizeof(*lmods));
	if (!fns || !left || !mods || !lmods) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
		goto done;
	}
	o->hot_module = first.members[0].mod->name; /* the module the samples chose */
	for (size_t i = 0; i < n; i++) {
		const struct hp_plan_member *mb = &first.members[i];
		if (countable_inline(m, mb->mod, mb->fn, t->pid, moved, nmoved, probes, nprobes, why, sizeof(why))) {
			fns[nin] = mb->fn;
			mods[nin++] = mb->mod;
		} else {
			note_uncounted(list, sizeof(list), nleft, mb->fn->name, why);
			hp_log(true, "hot set of process %d: %s keeps its sampled counts, not counted inline: %s",
			       t->pid, mb->fn->name, why);
			left[nleft] = mb->fn;
			lmods[nleft++] = mb->mod;
		}
	}
	unsigned waited = seconds;
	out->weight = 1;
	if (nin && (r = count_inline(ag, job, t->pid, m, fns, mods, nin, NULL, 0, NULL, seconds, 0.45, 0.7, out,
				     &waited, how, sizeof(how), err, errlen)) < 0)
		goto done;
	/* The uncounted members' samples, scaled by the counted ones' counts per sample. */
	double counted = 0, samples = 0;
	for (size_t i = 0; i < nin; i++) {
		const struct hp_prof_fn *pe = hp_profile_find(out, fns[i]->addr),
					*ps = hp_profile_find(sampled, fns[i]->addr);
		for (size_t k = 0; pe && ps && k < ps->nblocks; k++)
			for (size_t j = 0; j < pe->nblocks; j++)
				if (pe->blocks[j].offset == ps->blocks[k].offset) {
					counted += pe->blocks[j].count;
					samples += ps->blocks[k].count;
				}
	}
	double scale = samples > 0 ? counted / samples : 1;
	for (size_t i = 0; i < nleft && r == 0; i++) {
		const struct hp_prof_fn *ps = hp_profile_find(sampled, left[i]->addr);
		for (size_t k = 0; ps && r == 0 && k < ps->nblocks; k++)
			r = hp_profile_add(out, lmods[i], left[i], ps->blocks[k].offset, ps->blocks[k].count * scale);
	}
	if (r < 0) {
		snprintf(err, errlen, "out of memory");
		goto done;
	}
	out->estimated |= nleft > 0;
	if (nin)
		snprintf(out->source, sizeof(out->source),
			 "%u s of exact block counts (inline counters) in process %d, of the %zu members %u s of PC "
			 "samples chose%s%s",
			 waited, t->pid, n, seconds, nleft ? "; PC samples (scaled, an estimate) for " : "", list);
	else
		snprintf(out->source, sizeof(out->source),
			 "%u s of PC samples of process %d: no member can be counted inline: %s", seconds, t->pid,
			 list);
	if (strstr(how, "not exact"))
		snprintf(out->source + strlen(out->source), sizeof(out->source) - strlen(out->source), "; %s", how);
done:
	free(fns);
	free(left);
	free(mods);
	free(lmods);
	hp_plan_free(&first);
	return r;
}

/* Whether the kernel's blocks can be counted exactly here (kprobes). */
static bool kprobes_available(struct agent *ag)
{
	const struct hp_cap *cap = hp_caps_find(&ag->caps, "kprobes");
	return cap && cap->available;
}

static int plan_options(const Hotpath__V1__MakePlan *c, struct hp_plan_opts *o, char *err, size_t errlen)
{
	hp_plan_opts_default(o);
	if (c->join_fraction < 0 || c->join_fraction > 1 || c->stall_threshold < 0 || c->stall_threshold > 1) {
		snprintf(err, errlen, "join_fraction and stall_threshold are fractions from 0 to 1");
		return -EINVAL;
	}
	if (c->max_functions > 4096) {
		snprintf(err, errlen, "max_functions is at most 4096");
		return -EINVAL;
	}
	if (c->join_fraction > 0)
		o->join_fraction = c->join_fraction;
	if (c->stall_threshold > 0)
		o->stall_threshold = c->stall_threshold;
	if (c->max_functions)
		o->max_functions = c->max_functions;
	else if (c->hot_set)
		o->max_functions = HP_HOT_SET_MAX_FUNCTIONS;
	o->hot_set = c->hot_set;
	if (c->hot_set && c->measurement_id && *c->measurement_id) {
		snprintf(err, errlen, "a hot-set plan samples the process now: it takes no measurement_id");
		return -EINVAL;
	}
	return 0;
}

static void make_plan(struct agent *ag, struct hp_job *job, const Hotpath__V1__MakePlan *c)
{
	char err[1024] = "", msg[300];
	struct hp_plan_opts o;
	struct hp_profile prof = { 0 }, resident = { 0 };
	struct hp_plan plan = { 0 };
	struct hp_model *own = NULL; /* a process modelled under its installs' patches */
	struct hp_moved_code *moved = NULL;
	struct hp_byte_patch *bp = NULL;
	size_t nmoved = 0, nbp = 0, nprobes = 0, mi = 0, len = 0;
	char *json = NULL;
	unsigned seconds = c->seconds ? c->seconds : DEFAULT_SECONDS;

	if (!hp_install_id_valid(c->plan_id)) {
		snprintf(err, sizeof(err), "a plan id is 1 to %d letters, digits, '-' or '_'", HP_INSTALL_ID_MAX);
		hp_job_fail(ag, job, err);
		return;
	}
	if (seconds > MAX_SECONDS || plan_options(c, &o, err, sizeof(err)) < 0) {
		if (!err[0])
			snprintf(err, sizeof(err), "seconds is at most %d", MAX_SECONDS);
		hp_job_fail(ag, job, err);
		return;
	}
	if (c->hot_set && is_kernel_id(c->target)) {
		hp_job_fail(ag, job, "a hot-set plan is of a process: the kernel's hot set is not planned yet");
		return;
	}
	/* A hot set's digest names its module; none: the module with the most samples. */
	bool whole = c->hot_set && !(c->digest && *c->digest);
	hp_job_progress(ag, job, 0.02,
			c->hot_set ? "finding the process in the agent's targets" :
				     "finding the root in the target's model");
	const char *want = is_kernel_id(c->target) ? KERNEL_TARGET_ID : c->target;
	struct hp_target *t = whole ? hp_targets_get(&ag->targets, want) :
				      hp_targets_by_digest(&ag->targets, c->digest ? c->digest : "", want, &mi);
	if (!t || strcmp(t->id, want)) {
		struct hp_target *named = hp_targets_get(&ag->targets, want);
		if (!named || strcmp(named->id, want))
			snprintf(err, sizeof(err), "no target %.60s (attach the process first)", want);
		else if (named->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED)
			snprintf(err, sizeof(err), "target %s has ended: %s", named->id, named->detail);
		else
			snprintf(err, sizeof(err), "target %.60s has no module with catalog %.64s", want,
				 c->digest ? c->digest : "");
		hp_targets_release(&ag->targets, named);
		hp_targets_release(&ag->targets, t);
		hp_job_fail(ag, job, err);
		return;
	}
	bool kernel = t->kind == HOTPATH__V1__TARGET_KIND__TARGET_KIND_KERNEL;
	struct hp_model *m = kernel ? ag->model : t->model;
	if (!m || (!kernel && t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED)) {
		snprintf(err, sizeof(err), "target %s has ended: %s", t->id, t->detail);
		goto fail;
	}
	const struct hp_module *mod = whole ? NULL : &m->mods[mi];
	if (c->hot_set)
		o.hot_module = mod ? mod->name : NULL;
	else if (c->function_index >= mod->nfuncs) {
		snprintf(err, sizeof(err), "function index %u out of range: module %s has %zu functions",
			 c->function_index, mod->name, mod->nfuncs);
		goto fail;
	}
	const struct hp_function *root = c->hot_set ? NULL : &mod->funcs[c->function_index];
	if (!kernel) {
		/* Copies installed in the process: plan its code as it was before
		 * their patches, and count blocks that moved in their copies. The
		 * breakpoints of running measurements are read as the bytes under
		 * them too. */
		struct hp_byte_patch *pb = NULL;
		size_t npb = 0, nall;
		hp_installed_patches(ag->state_dir, t->pid, &bp, &nbp);
		if (nbp)
			hp_moved_code_of(ag->state_dir, t->pid, &moved, &nmoved, err, sizeof(err));
		hp_measurements_probe_bytes(ag, t->id, &pb, &npb);
		nall = nbp;
		if (npb) {
			struct hp_byte_patch *v = realloc(bp, (nbp + npb) * sizeof(*v));
			if (v) {
				memcpy(v + nbp, pb, npb * sizeof(*v));
				bp = v;
				nall += npb;
				nprobes = npb; /* bp[nbp..nbp + nprobes): running measurements' probes */
			}
		}
		free(pb);
		if (nall) {
			struct hp_open_opts oo = { .quiet = true, .overlay = bp, .noverlay = nall };
			char e2[512];
			hp_job_progress(ag, job, 0.05, "reading the process's code under its installed copies");
			if (hp_model_open_pid(t->pid, &oo, &own, e2, sizeof(e2)) < 0) {
				snprintf(err, sizeof(err), "cannot read process %d's code: %s", t->pid, e2);
				goto fail;
			}
			m = own;
			if (root && !(root = hp_model_lookup(own, root->addr, &mod))) {
				snprintf(err, sizeof(err), "the root is no longer in process %d's code", t->pid);
				goto fail;
			}
		}
	}
	if (cancelled(ag, job))
		goto out;
	int r;
	if (c->measurement_id && *c->measurement_id) {
		snprintf(msg, sizeof(msg), "reading the block counts of measurement %.64s", c->measurement_id);
		hp_job_progress(ag, job, 0.1, msg);
		r = hp_measurements_profile(ag, c->measurement_id, t->id, &prof, err, sizeof(err));
	} else if (c->hot_set) {
		r = count_hot_set(ag, job, t, m, mod, &o, seconds, moved, nmoved, bp + nbp, nprobes, &resident, &prof,
				  err, sizeof(err));
		o.resident = &resident;
	} else if (kernel && !kprobes_available(ag)) {
		r = sample_now(ag, job, m, 0, seconds, 0.1, 0.7, &prof, err, sizeof(err));
	} else if (kernel) {
		uint64_t addrs[MAX_CALLEES + 1];
		size_t n = callee_addresses(m, mod, root, addrs);
		r = measure_exact(ag, job, t, true, m, addrs, n, root->name, seconds, NULL, 0, NULL, 0, &prof, err,
				  sizeof(err));
	} else {
		r = count_root_group(ag, job, t, m, mod, root, seconds, moved, nmoved, bp, nbp, nprobes, &prof, err,
				     sizeof(err));
	}
	if (r == -ECANCELED) {
		hp_job_fail(ag, job, "cancelled");
		goto out;
	}
	if (r < 0)
		goto fail;
	if (cancelled(ag, job))
		goto out;
	if (root)
		snprintf(msg, sizeof(msg), "planning %s: group, chains, layout, emitted code verified", root->name);
	else
		snprintf(msg, sizeof(msg),
			 "planning process %d's hot set: members, chains, C3 order, emitted code verified", t->pid);
	hp_job_progress(ag, job, 0.75, msg);
	if ((r = hp_plan_make(m, root, mod, &prof, &o, &plan, err, sizeof(err))) < 0)
		goto fail;
	if (c->hot_set && plan.nmembers) {
		root = plan.members[0].fn; /* the first laid out names the plan */
		mod = plan.members[0].mod;
	}
	hp_job_progress(ag, job, 0.95, "writing the plan");
	if (hp_plan_json(m, &plan, root, kernel ? 0 : t->pid, &json, &len) < 0) {
		snprintf(err, sizeof(err), "out of memory writing the plan");
		goto fail;
	}
	if (len > PLAN_JSON_MAX) {
		snprintf(err, sizeof(err),
			 "the plan's JSON is %zu bytes, more than the %u MiB a plan result carries: plan a smaller "
			 "group (max_functions)",
			 len, PLAN_JSON_MAX >> 20);
		goto fail;
	}
	char hash[65] = "", bid[65] = "";
	hp_plan_code_sha256(&plan, hash);
	if (root)
		hp_plan_module_build_id(m, mod, kernel ? 0 : t->pid, root->addr, bid);
	Hotpath__V1__PlanResult pr = HOTPATH__V1__PLAN_RESULT__INIT;
	pr.plan_id = c->plan_id;
	pr.plan_json = json;
	pr.code_sha256 = hash;
	pr.build_id = bid;
	Hotpath__V1__CommandResult res = HOTPATH__V1__COMMAND_RESULT__INIT;
	res.ok = plan.status == HP_PLAN_OK;
	res.error = res.ok ? "" : plan.status == HP_PLAN_REFUSED ? plan.verify_error : plan.message;
	res.kind_case = HOTPATH__V1__COMMAND_RESULT__KIND_PLAN;
	res.plan = &pr;
	hp_job_result(ag, job, &res);
	/* Without a plan, the log says why (the reason the backend shows too). */
	hp_log(true, "plan %s of %s%s on %s: %s%s (%zu functions, %zu code bytes)", c->plan_id,
	       c->hot_set ? "the hot set from " : "", root ? root->name : "nothing hot", t->id,
	       res.ok ? "verified" : "no plan: ", res.ok ? "" : res.error, plan.nmembers, plan.code_len);
	goto out;
fail:
	hp_job_fail(ag, job, err[0] ? err : "out of memory");
out:
	free(json);
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	hp_profile_free(&resident);
	hp_model_free(own);
	hp_moved_code_free(moved, nmoved);
	free(bp);
	hp_targets_release(&ag->targets, t);
}

/* ---- InstallPlan, RevertPlan, ListInstalled ------------------------------------------------- */

/* An InstallResult, its detail written by fn into a string. */
static void install_result(struct agent *ag, struct hp_job *job, bool ok, const char *error, const char *plan_id,
			   const char *status, char *detail)
{
	Hotpath__V1__InstallResult ir = HOTPATH__V1__INSTALL_RESULT__INIT;
	ir.plan_id = (char *)(plan_id ? plan_id : "");
	ir.status = (char *)status;
	ir.detail_json = detail ? detail : "";
	Hotpath__V1__CommandResult r = HOTPATH__V1__COMMAND_RESULT__INIT;
	r.ok = ok;
	r.error = (char *)(ok ? "" : error);
	r.cancelled = !ok && hp_job_cancelled(job);
	r.kind_case = HOTPATH__V1__COMMAND_RESULT__KIND_INSTALL;
	r.install = &ir;
	hp_job_result(ag, job, &r);
}

static void refuse(struct agent *ag, struct hp_job *job, const char *plan_id, const char *root, const char *why)
{
	char *detail = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&detail, &len);
	if (fp) {
		hp_install_json_refused(fp, root, why);
		fclose(fp);
	}
	install_result(ag, job, false, why, plan_id, "refused", detail);
	hp_log(true, "install of plan %s refused: %s", plan_id ? plan_id : "", why);
	free(detail);
}

/* Install and revert steps as Progress. A test may make the agent die at
 * a step (HOTPATH_TEST_KILL_AT, as for `hotpathd install`). */
struct step_ctx {
	struct agent *ag;
	struct hp_job *job;
	const char *kill_at;
};

static void on_step(void *ctx, enum hp_install_step s, const char *detail)
{
	struct step_ctx *sc = ctx;
	char msg[400];
	double f = s <= HP_STEP_INSTALLED ?
			   0.1 + 0.85 * (s - 1) / (HP_STEP_INSTALLED - 1) :
			   0.1 + 0.85 * (s - HP_STEP_REVERT_CALLS) / (HP_STEP_REVERTED - HP_STEP_REVERT_CALLS);
	snprintf(msg, sizeof(msg), "%s%s%.300s", hp_install_step_name(s), detail && detail[0] ? ": " : "",
		 detail ? detail : "");
	hp_job_progress(sc->ag, sc->job, f, msg);
	if (sc->kill_at && !strcmp(sc->kill_at, hp_install_step_name(s)))
		kill(getpid(), SIGKILL);
}

/* The last gate before anything is written: a cancel stops the install here. */
static int not_cancelled(void *ctx, const struct hp_iplan *p, char *err, size_t errlen)
{
	struct step_ctx *sc = ctx;
	if (hp_job_cancelled(sc->job)) {
		snprintf(err, errlen, "cancelled before anything was written");
		return -ECANCELED;
	}
	return 0;
}

static bool hex64(const char *s)
{
	if (!s || strlen(s) != 64)
		return false;
	for (int i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* Why the kernel cannot take a plan here, from what the agent probed:
 * false with the reason, or true (the kernel target then says whether
 * hotpath.ko is loaded and free: /dev/hotpath). */
static bool kernel_replaceable(struct agent *ag, char *out, size_t len)
{
	const struct hp_cap *cap = hp_caps_find(&ag->caps, "kernel_code_replacement");
	if (!cap)
		snprintf(out, len, "kernel code replacement was not probed on this host: refused");
	else if (!cap->available)
		snprintf(out, len, "kernel code replacement is unavailable on this host: %s", cap->detail);
	return cap && cap->available;
}

/* Whether an install's error is a refusal (nothing was written, the
 * request or the host's state is why) rather than a failure. */
static bool refusal(int r)
{
	return r == -ESTALE || r == -EBADMSG || r == -EACCES || r == -EPERM || r == -EEXIST || r == -ESRCH ||
	       r == -ECANCELED || r == -EOPNOTSUPP || r == -EINVAL;
}

/* hp_install of plan with the command's approved hash, its cancellation and its
 * progress (patch_calls and m as hp_install_opts has them); the install's JSON,
 * installed (with holder as its process) or refused, into *detail. */
static int install_with_detail(struct agent *ag, struct hp_job *job, const Hotpath__V1__InstallPlan *c,
			       struct hp_iplan *plan, bool patch_calls, const struct hp_model *m, int holder,
			       struct hp_install_result *res, char **detail, char *err, size_t errlen)
{
	size_t dlen = 0;
	struct step_ctx sc = { ag, job, getenv("HOTPATH_TEST_KILL_AT") };
	struct hp_install_opts o = { .state_dir = ag->state_dir,
				     .patch_calls = patch_calls,
				     .m = m,
				     .approved_hash = c->approved_code_sha256,
				     .approve = not_cancelled,
				     .approve_ctx = &sc,
				     .id = c->plan_id,
				     .progress = on_step,
				     .progress_ctx = &sc };
	int r = hp_install(plan, &o, res, err, errlen);
	FILE *fp = open_memstream(detail, &dlen);
	if (fp) {
		if (r < 0)
			hp_install_json_refused(fp, plan->root, err);
		else
			hp_install_json_installed(fp, plan, holder, res);
		fclose(fp);
	}
	return r;
}

/* An approved kernel plan (its hash checked) through the kernel target:
 * this process opens /dev/hotpath at its first kernel install and holds it
 * to its exit, so the install lasts until a RevertPlan, and hotpath.ko
 * undoes it if the agent dies. The daemon does not patch the members'
 * call sites in the kernel yet (`hotpathd install` does): the entry's ftrace
 * redirect carries every call. */
/* The sampler counts kernel samples in installed copies at their originals
 * (hp_sampler_set_kernel_copies): told after every kernel install or revert,
 * whichever way it went. */
static void kernel_copies_to_sampler(struct agent *ag)
{
	struct hp_moved_code *mc = NULL;
	struct hp_moved_block *b = NULL;
	size_t n = 0, nb = 0;
	char err[256] = "";

	if (!ag->sampler)
		return;
	if (hp_moved_kernel_code(ag->state_dir, &mc, &n, err, sizeof(err)) < 0 || hp_moved_copies(mc, n, &b, &nb) < 0 ||
	    hp_sampler_set_kernel_copies(ag->sampler, b, nb) < 0)
		hp_log(true, "samples in the kernel's installed copies are not mapped to their originals: %s",
		       err[0] ? err : "out of memory");
	free(b);
	hp_moved_code_free(mc, n);
}

static void kernel_install(struct agent *ag, struct hp_job *job, const Hotpath__V1__InstallPlan *c,
			   struct hp_iplan *plan)
{
	char err[1024] = "", *detail = NULL;

	if (strcmp(plan->kind, "kernel")) {
		snprintf(err, sizeof(err), "the plan is of a %s target, not of the kernel: refused", plan->kind);
		refuse(ag, job, c->plan_id, plan->root, err);
		return;
	}
	if (cancelled(ag, job))
		return;
	struct hp_install_result res;
	int r = install_with_detail(ag, job, c, plan, false, NULL, getpid(), &res, &detail, err, sizeof(err));
	if (r < 0) {
		/* No /dev/hotpath (module not loaded), another holder, another ABI: refusals too. */
		bool refused = refusal(r) || r == -ENOENT || r == -EBUSY || r == -EPROTO;
		install_result(ag, job, false, err, c->plan_id, refused ? "refused" : "failed", detail);
		hp_log(true, "install of plan %s into the kernel %s: %s", c->plan_id, refused ? "refused" : "failed",
		       err);
		free(detail);
		return;
	}
	hp_log(true, "plan %s installed into the kernel: %s's copy at 0x%" PRIx64 " (this agent holds /dev/hotpath)",
	       c->plan_id, plan->root, res.heap);
	install_result(ag, job, true, "", c->plan_id, "installed", detail);
	free(detail);
}

static void install_plan(struct agent *ag, struct hp_job *job, const Hotpath__V1__InstallPlan *c)
{
	char err[1024] = "";
	struct hp_iplan plan;
	bool parsed = false;
	struct hp_model *own = NULL;
	struct hp_target *t = NULL;
	char *detail = NULL;

	if (!hp_install_id_valid(c->plan_id)) {
		snprintf(err, sizeof(err), "a plan id is 1 to %d letters, digits, '-' or '_'", HP_INSTALL_ID_MAX);
		refuse(ag, job, c->plan_id, NULL, err);
		return;
	}
	if (!c->approved_code_sha256 || !*c->approved_code_sha256) {
		refuse(ag, job, c->plan_id, NULL, "no approved code hash: only an approved plan is installed");
		return;
	}
	if (!hex64(c->approved_code_sha256)) {
		refuse(ag, job, c->plan_id, NULL, "the approved code hash is not 64 lowercase hex digits");
		return;
	}
	bool kernel = is_kernel_id(c->target);
	if (kernel && !kernel_replaceable(ag, err, sizeof(err))) {
		refuse(ag, job, c->plan_id, NULL, err);
		return;
	}
	size_t plen = c->plan_json ? strlen(c->plan_json) : 0;
	if (!plen || plen > PLAN_JSON_MAX) {
		snprintf(err, sizeof(err), "the plan's JSON is %s", plen ? "larger than 16 MiB" : "empty");
		refuse(ag, job, c->plan_id, NULL, err);
		return;
	}
	hp_job_progress(ag, job, 0.02, "checking the plan's code hash against the approval");
	if (hp_iplan_parse(c->plan_json, plen, &plan, err, sizeof(err)) < 0) {
		refuse(ag, job, c->plan_id, NULL, err);
		return;
	}
	parsed = true;
	if (strcmp(plan.computed, c->approved_code_sha256)) {
		snprintf(err, sizeof(err),
			 "the plan's code hashes to %s, not to the approved %s: not the approved plan, nothing changed",
			 plan.computed, c->approved_code_sha256);
		refuse(ag, job, c->plan_id, plan.root, err);
		goto out;
	}
	if (kernel) {
		kernel_install(ag, job, c, &plan);
		kernel_copies_to_sampler(ag);
		goto out;
	}
	t = hp_targets_get(&ag->targets, c->target);
	if (!t || strcmp(t->id, c->target)) {
		snprintf(err, sizeof(err), "no target %.60s", c->target);
		refuse(ag, job, c->plan_id, plan.root, err);
		goto out;
	}
	if (t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED) {
		snprintf(err, sizeof(err), "target %s has ended: %s", t->id, t->detail);
		refuse(ag, job, c->plan_id, plan.root, err);
		goto out;
	}
	if (strcmp(plan.kind, "pid") || plan.pid != t->pid || plan.start_time != (uint64_t)t->start_ticks) {
		snprintf(err, sizeof(err),
			 "the plan was made for process %d (started at tick %" PRIu64
			 "), target %s is process %d "
			 "(started at tick %llu): refused",
			 plan.pid, plan.start_time, t->id, t->pid, t->start_ticks);
		refuse(ag, job, c->plan_id, plan.root, err);
		goto out;
	}
	if (cancelled(ag, job))
		goto out;
	/* The process's model for the root's call sites, read under the
	 * patches of what is installed there already. */
	const struct hp_model *m = NULL;
	if (!c->entry_only) {
		struct hp_byte_patch *bp = NULL;
		size_t nbp = 0;
		hp_installed_patches(ag->state_dir, t->pid, &bp, &nbp);
		if (nbp) {
			struct hp_open_opts oo = { .quiet = true, .overlay = bp, .noverlay = nbp };
			char e2[256];
			if (hp_model_open_pid(t->pid, &oo, &own, e2, sizeof(e2)) < 0)
				hp_log(true, "plan %s: no model of process %d (%s): the entry only", c->plan_id, t->pid,
				       e2);
			m = own;
		} else {
			m = t->model;
		}
		free(bp);
	}
	struct hp_install_result res;
	int r = install_with_detail(ag, job, c, &plan, !c->entry_only, m, t->pid, &res, &detail, err, sizeof(err));
	if (r < 0) {
		bool refused = refusal(r);
		install_result(ag, job, false, err, c->plan_id, refused ? "refused" : "failed", detail);
		hp_log(true, "install of plan %s into %s %s: %s", c->plan_id, t->id, refused ? "refused" : "failed",
		       err);
		goto out;
	}
	hp_log(true, "plan %s installed into %s: %s's copy at 0x%" PRIx64, c->plan_id, t->id, plan.root, res.heap);
	/* Probes follow the code into the copy: the calls run there now. */
	hp_measurements_rearm(ag, t->id);
	install_result(ag, job, true, "", c->plan_id, "installed", detail);
out:
	free(detail);
	if (parsed)
		hp_iplan_free(&plan);
	hp_model_free(own);
	hp_targets_release(&ag->targets, t);
}

static void revert_plan(struct agent *ag, struct hp_job *job, const Hotpath__V1__RevertPlan *c)
{
	char err[1024] = "", *detail = NULL;
	size_t dlen = 0;
	int pid = 0;
	struct hp_install_result res;

	if (!hp_install_id_valid(c->plan_id)) {
		snprintf(err, sizeof(err), "a plan id is 1 to %d letters, digits, '-' or '_'", HP_INSTALL_ID_MAX);
		hp_job_fail(ag, job, err);
		return;
	}
	bool kernel = is_kernel_id(c->target);
	/* The install must be of the named target: the kernel's (held by this
	 * agent), or the target's process (when it still runs). */
	struct hp_installed *ins = NULL;
	size_t n = 0;
	struct hp_target *t = kernel ? NULL : hp_targets_get(&ag->targets, c->target);
	hp_installed_list(ag->state_dir, &ins, &n, err, sizeof(err));
	for (size_t i = 0; i < n; i++)
		if (!strcmp(ins[i].id, c->plan_id) &&
		    (kernel ? strcmp(ins[i].target, "kernel") != 0 :
			      !strcmp(ins[i].target, "kernel") ||
				      (t && !strcmp(t->id, c->target) &&
				       (ins[i].pid != t->pid || ins[i].start_time != (uint64_t)t->start_ticks)))) {
			if (!strcmp(ins[i].target, "kernel"))
				snprintf(err, sizeof(err), "plan %s is installed in the kernel, not in target %s",
					 c->plan_id, c->target);
			else
				snprintf(err, sizeof(err), "plan %s is installed in process %d, not in target %s",
					 c->plan_id, ins[i].pid, c->target ? c->target : "kernel");
			free(ins);
			hp_targets_release(&ag->targets, t);
			hp_job_fail(ag, job, err);
			return;
		}
	free(ins);
	hp_targets_release(&ag->targets, t);
	if (cancelled(ag, job))
		return;
	struct step_ctx sc = { ag, job, getenv("HOTPATH_TEST_KILL_AT") };
	hp_job_progress(ag, job, 0.05, "reading the install's journal");
	err[0] = 0;
	int r = hp_revert_id(ag->state_dir, c->plan_id, &pid, &res, on_step, &sc, err, sizeof(err));
	if (r == 0 && !kernel)
		hp_measurements_rearm(ag, c->target); /* the probes go back to the original with the calls */
	if (kernel)
		kernel_copies_to_sampler(ag);
	FILE *fp = open_memstream(&detail, &dlen);
	if (fp) {
		hp_revert_json(fp, r, pid, &res, err);
		fclose(fp);
	}
	install_result(ag, job, r == 0, err, c->plan_id, hp_revert_status(r, &res), detail);
	hp_log(true, "revert of plan %s: %s%s%s", c->plan_id, hp_revert_status(r, &res), r < 0 ? ": " : "",
	       r < 0 ? err : "");
	free(detail);
}

static void list_installed(struct agent *ag, struct hp_job *job)
{
	char err[512] = "", *detail = NULL;
	size_t dlen = 0, n = 0;
	struct hp_installed *ins = NULL;

	if (hp_installed_list(ag->state_dir, &ins, &n, err, sizeof(err)) < 0) {
		hp_job_fail(ag, job, err);
		return;
	}
	FILE *fp = open_memstream(&detail, &dlen);
	if (fp) {
		hp_installed_json(fp, ag->state_dir, ins, n, 0);
		fclose(fp);
	}
	install_result(ag, job, true, "", "", "listed", detail);
	free(detail);
	free(ins);
}

void hp_run_plan_command(struct agent *ag, struct hp_job *job)
{
	const Hotpath__V1__Command *c = job->cmd;
	if (!ag->state_dir) {
		hp_job_fail(ag, job, "the agent runs without a state folder: nothing can be journaled");
		return;
	}
	switch (c->kind_case) {
	case HOTPATH__V1__COMMAND__KIND_MAKE_PLAN:
		make_plan(ag, job, c->make_plan);
		break;
	case HOTPATH__V1__COMMAND__KIND_INSTALL_PLAN:
		install_plan(ag, job, c->install_plan);
		break;
	case HOTPATH__V1__COMMAND__KIND_REVERT_PLAN:
		revert_plan(ag, job, c->revert_plan);
		break;
	case HOTPATH__V1__COMMAND__KIND_LIST_INSTALLED:
		list_installed(ag, job);
		break;
	default:
		hp_job_fail(ag, job, "unsupported command");
		break;
	}
}

static void recovered(void *ctx, const struct hp_installed *h, int r, const char *err)
{
	if (r < 0)
		hp_log(false, "install %s of %s in process %d (%s) could not be brought to a clean state: %s", h->id,
		       h->root, h->pid, h->state, err);
	else if (!strcmp(h->state, "process_gone"))
		hp_log(true, "install %s of %s: process %d exited; its journal is removed", h->id, h->root, h->pid);
	else
		hp_log(true, "install %s of %s in process %d (%s) reverted from its journal%s%s", h->id, h->root,
		       h->pid, h->state, err && err[0] ? "; " : "", err ? err : "");
}

void hp_plans_idle(struct agent *ag)
{
	size_t released = 0, waiting = 0;
	if (ag->state_dir && hp_release_kept(ag->state_dir, 0, NULL, &released, &waiting) == 0 && released)
		hp_log(true, "released %zu code heap(s) a revert had kept mapped (%zu still waiting)", released,
		       waiting);
}

int hp_plans_recover(struct agent *ag)
{
	return ag->state_dir ? hp_replace_recover(ag->state_dir, recovered, ag) : 0;
}

int hp_plans_hello(struct agent *ag, Hotpath__V1__InstalledPlan ***out, size_t *n)
{
	char err[512];
	struct hp_installed *ins = NULL;
	size_t k = 0;
	*out = NULL;
	*n = 0;
	if (!ag->state_dir)
		return 0;
	if (hp_installed_list(ag->state_dir, &ins, &k, err, sizeof(err)) < 0) {
		hp_log(false, "Hello lists no installs: %s", err);
		return 0;
	}
	if (!k) {
		free(ins);
		return 1;
	}
	/* One block: the pointers, then the messages; strings point into ins,
	 * which the block keeps after them. */
	size_t size =
		k * (sizeof(Hotpath__V1__InstalledPlan *) + sizeof(Hotpath__V1__InstalledPlan)) + k * sizeof(*ins);
	char *mem = calloc(1, size);
	if (!mem) {
		free(ins);
		return -ENOMEM;
	}
	Hotpath__V1__InstalledPlan **v = (Hotpath__V1__InstalledPlan **)mem;
	Hotpath__V1__InstalledPlan *p = (Hotpath__V1__InstalledPlan *)(mem + k * sizeof(*v));
	struct hp_installed *kept = (struct hp_installed *)(p + k);
	memcpy(kept, ins, k * sizeof(*ins));
	free(ins);
	for (size_t i = 0; i < k; i++) {
		hotpath__v1__installed_plan__init(&p[i]);
		p[i].plan_id = kept[i].id;
		p[i].state = kept[i].state;
		p[i].pid = (uint32_t)kept[i].pid;
		p[i].start_time = kept[i].start_time;
		p[i].root = kept[i].root;
		p[i].code_sha256 = kept[i].hash;
		p[i].heap = kept[i].heap;
		p[i].heap_len = kept[i].heap_len;
		v[i] = &p[i];
	}
	*out = v;
	*n = k;
	return 1;
}

void hp_plans_hello_free(Hotpath__V1__InstalledPlan **v, size_t n)
{
	(void)n;
	free(v); /* one block (hp_plans_hello) */
}
