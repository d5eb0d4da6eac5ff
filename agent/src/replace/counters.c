// SPDX-License-Identifier: Apache-2.0
/*
 * Inline block counters (counters.h): instrumented copies through the
 * install engine, counters read with process_vm_readv.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "host/processes.h"
#include "plan/instrument.h"
#include "plan/plan_json.h"
#include "replace/counters.h"

/* The copies of fns[idx[0..n)] (one module), laid out one after another
 * from lead bytes into a page, combined (plan/instrument.h) and installed
 * as one hot set: install ix of c. */
static int install_group(struct hp_counted *c, struct hp_model *m, const size_t *idx, size_t n, size_t ix, bool plain,
			 bool every_block, uint32_t lead, const struct hp_byte_patch *orig, size_t norig, char *err,
			 size_t errlen)
{
	struct hp_plan **ps = calloc(n + 1, sizeof(*ps)), set = { 0 };
	struct hp_iplan ip = { 0 };
	uint64_t area_off = 0;
	size_t area_len = 0, len = 0;
	char *text = NULL, e[512];
	int r = -ENOMEM;

	if (!ps) {
		snprintf(err, errlen, "out of memory");
		return r;
	}
	/* Each copy planned (and verified) where it goes in the combined code. */
	for (size_t k = 0; k < n; k++) {
		struct hp_counted_fn *cf = &c->fns[idx[k]];
		uint64_t base = k ? hp_instrument_next_base(ps[k - 1]) : lead;
		if ((r = hp_instrument_plan(m, cf->mod, cf->fn, !plain, every_block, base, &cf->plan, e, sizeof(e))) <
		    0) {
			snprintf(err, errlen, "%s: %s", cf->fn->name, e);
			goto out;
		}
		if (cf->plan.status != HP_PLAN_OK) {
			snprintf(err, errlen, "%s: %s", cf->fn->name, cf->plan.message);
			r = -EPERM;
			goto out;
		}
		ps[k] = &cf->plan;
	}
	if ((r = hp_instrument_combine(m, ps, n, &set, &area_off, &area_len, err, errlen)) < 0)
		goto out;
	if ((r = hp_plan_json(m, &set, set.members[0].fn, c->pid, &text, &len)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if ((r = hp_iplan_parse(text, len, &ip, err, errlen)) < 0)
		goto out;
	uint64_t origin = set.base - set.base % 4096;
	ip.counters_off = set.base % 4096 + area_off; /* from the heap's page */
	ip.counters_len = area_len;
	struct hp_install_opts o = {
		.state_dir = c->state_dir, .pid = c->pid, .patch_calls = true, .m = m, .orig = orig, .norig = norig
	};
	struct hp_counted_install *in = &c->installs[ix];
	if ((r = hp_install(&ip, &o, &in->res, e, sizeof(e))) < 0) {
		snprintf(err, errlen, "the counted copies of %zu function(s) of %s, from %s: %s", n,
			 set.members[0].mod->name, set.members[0].fn->name, e);
		goto out;
	}
	in->installed = true;
	in->nfns = n;
	c->ninstalls = ix + 1;
	int64_t delta = (int64_t)(in->res.entry - set.members[0].fn->addr); /* model to running addresses */
	for (size_t k = 0; k < n; k++) {
		struct hp_counted_fn *cf = &c->fns[idx[k]];
		cf->install = ix;
		cf->installed = true;
		cf->entry = cf->fn->addr + (uint64_t)delta;
		cf->new_entry = in->res.heap + (cf->plan.members[0].new_entry - origin);
		cf->counters = in->res.heap + (cf->plan.base + cf->plan.instrument->area_off - origin);
	}
out:
	hp_iplan_free(&ip);
	free(text);
	hp_instrument_combined_free(&set);
	free(ps);
	return r;
}

int hp_counted_check(struct hp_model *m, const struct hp_module *mod, const struct hp_function *fn, char *why,
		     size_t len)
{
	struct hp_plan p = { 0 };
	/* The install's entry rule: the jump to the copy covers the first bytes. */
	if (fn->size < HP_COUNTED_ENTRY_JUMP) {
		snprintf(why, len, "%u bytes long: too short for the jump to its copy", (unsigned)fn->size);
		return -EPERM;
	}
	for (uint32_t b = 1; b < fn->nblocks; b++) {
		uint32_t off = mod->blocks[fn->block_start + b].offset;
		if (off > 0 && off < HP_COUNTED_ENTRY_JUMP) {
			snprintf(why, len, "a block at +%u, inside the %d bytes its entry jump would cover", off,
				 HP_COUNTED_ENTRY_JUMP);
			return -EPERM;
		}
	}
	int r = hp_instrument_plan(m, mod, fn, true, false, 0, &p, why, len);
	if (r == 0 && p.status != HP_PLAN_OK) {
		snprintf(why, len, "%s", p.message);
		r = -EPERM;
	}
	hp_instrument_plan_free(&p);
	return r;
}

/* Install ix: the copies of fns[idx[0..n)], made from the original code. */
static int install_one(struct hp_counted *c, struct hp_model *m, const size_t *idx, size_t n, size_t ix, bool plain,
		       bool every_block, uint32_t lead, char *err, size_t errlen)
{
	struct hp_byte_patch *orig = NULL;
	size_t norig = 0;
	int r;

	/* The copies are made from the original code: the installs before this
	 * one (another module's copies, a plan) redirected call sites, maybe in
	 * these functions. Read as they are, such a call would go straight to
	 * the other copy's heap (freed at its revert while this copy may still
	 * run), and where its rel32 holds a 0xcc byte the reader takes it for a
	 * probe's int3 and gives the file's byte: a call to an address in
	 * neither (the busy SQLite driver's crash with ~100 functions counted
	 * at once, one install each). */
	if (hp_installed_patches(c->state_dir, c->pid, &orig, &norig) < 0 || hp_model_set_overlay(m, orig, norig) < 0) {
		free(orig);
		snprintf(err, errlen, "cannot read the patches of the copies installed before it");
		return -EIO;
	}
	r = install_group(c, m, idx, n, ix, plain, every_block, lead, orig, norig, err, errlen);
	free(orig);
	return r;
}

/* The member whose entry function i's first bytes call (a call starting
 * where i's entry jump will go), or n. */
static size_t entry_callee(const struct hp_function *const *fns, const struct hp_module *const *mods, size_t n,
			   size_t i)
{
	const struct hp_function *f = fns[i];
	for (uint32_t c = 0; c < f->ncalls; c++) {
		const struct hp_call *call = &mods[i]->calls[f->call_start + c];
		if (call->site >= HP_COUNTED_ENTRY_JUMP)
			continue;
		for (size_t j = 0; j < n; j++)
			if (j != i && fns[j]->addr == call->target)
				return j;
	}
	return n;
}

void hp_counted_order(const struct hp_function *const *fns, const struct hp_module *const *mods, size_t n,
		      size_t *order)
{
	size_t *next = calloc(n + 1, sizeof(size_t)), *chain = calloc(n + 1, sizeof(size_t));
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	if (!next || !chain) {
		free(next);
		free(chain);
		return;
	}
	for (size_t i = 0; i < n; i++)
		next[i] = entry_callee(fns, mods, n, i);
	/* chain[i]: how many entries follow i's (a cycle stops at n steps). */
	for (size_t i = 0; i < n; i++)
		for (size_t j = next[i]; j < n && chain[i] < n; j = next[j])
			chain[i]++;
	/* Longest chains first, the given order otherwise (a stable insertion sort). */
	for (size_t i = 1; i < n; i++)
		for (size_t k = i; k > 0 && chain[order[k - 1]] < chain[order[k]]; k--) {
			size_t t = order[k];
			order[k] = order[k - 1];
			order[k - 1] = t;
		}
	free(next);
	free(chain);
}

int hp_counted_install(int pid, struct hp_model *m, const char *state_dir, const struct hp_function *const *fns,
		       const struct hp_module *const *mods, size_t n, bool plain, bool every_block,
		       struct hp_counted *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	out->pid = pid;
	snprintf(out->state_dir, sizeof(out->state_dir), "%s", state_dir);
	out->fns = calloc(n + 1, sizeof(*out->fns));
	if (!out->fns) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	out->n = n;
	out->plain = plain;
	out->exact = !plain;
	snprintf(out->how, sizeof(out->how), "%s",
		 plain ? "plain increments, one thread not proved" : "locked increments");
	size_t *order = calloc(n + 1, sizeof(size_t));
	if (!order) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	hp_counted_order(fns, mods, n, order);
	size_t *idx = calloc(n + 1, sizeof(size_t));
	bool *done = calloc(n + 1, sizeof(bool));
	out->installs = calloc(n + 1, sizeof(*out->installs));
	if (!idx || !done || !out->installs) {
		free(order);
		free(idx);
		free(done);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		out->fns[i].fn = fns[i];
		out->fns[i].mod = mods[i];
	}
	/* One install per module, its functions in that order; each heap starts
	 * in its page where the one before it ended (in 64-byte lines), so
	 * together they fill the cache sets as one stretch of code would. */
	uint32_t lead = 0;
	int r = 0;
	for (size_t k = 0; k < n && r == 0; k++) {
		if (done[order[k]])
			continue;
		size_t ng = 0;
		for (size_t j = k; j < n; j++)
			if (!done[order[j]] && mods[order[j]] == mods[order[k]]) {
				idx[ng++] = order[j];
				done[order[j]] = true;
			}
		char e[1024];
		r = install_one(out, m, idx, ng, out->ninstalls, plain, every_block, lead, e, sizeof(e));
		if (r == 0) {
			const struct hp_plan *last = &out->fns[idx[ng - 1]].plan;
			lead = (uint32_t)(((last->base + last->code_len) % 4096 + 63) / 64 * 64 % 4096);
		} else {
			snprintf(err, errlen, "%s", e);
			char e2[512];
			if (hp_counted_revert(out, e2, sizeof(e2)) < 0) {
				size_t l = strlen(err);
				snprintf(err + l, errlen - l, "; reverting the copies installed before it failed: %s",
					 e2);
			}
		}
	}
	free(order);
	free(idx);
	free(done);
	return r;
}

/* Function i's counters as they are in the process: a calloc'd array of
 * its nslots, or NULL with err filled and *r the negative errno. */
static uint64_t *read_slots(const struct hp_counted *c, size_t i, int *r, char *err, size_t errlen)
{
	const struct hp_counted_fn *cf = &c->fns[i];
	const struct hp_instrument *ins = cf->plan.instrument;
	size_t want = (size_t)ins->nslots * sizeof(uint64_t);
	uint64_t *slots = calloc(ins->nslots + 1, sizeof(uint64_t));

	*r = 0;
	if (!slots) {
		snprintf(err, errlen, "out of memory");
		*r = -ENOMEM;
		return NULL;
	}
	if (!cf->installed) {
		free(slots);
		snprintf(err, errlen, "%s has no counted copy installed", cf->fn->name);
		*r = -ENOENT;
		return NULL;
	}
	struct iovec local = { slots, want }, remote = { (void *)(uintptr_t)cf->counters, want };
	ssize_t got = process_vm_readv(c->pid, &local, 1, &remote, 1, 0);
	if (got != (ssize_t)want) {
		int e = got < 0 ? errno : EIO;
		free(slots);
		snprintf(err, errlen, "reading the counters of %s in process %d: %s", cf->fn->name, c->pid,
			 e == ESRCH ? "the process exited" : strerror(e));
		*r = e == ESRCH ? -ESRCH : -e;
		return NULL;
	}
	return slots;
}

/* Every thread of the process stopped (the install engine's quiesce), so
 * that reads one after another see one moment; 0, or a negative errno. */
static int hold_all(struct hp_counted *c, char *err, size_t errlen)
{
	int r;

	if (c->holding)
		return 0;
	if ((r = hp_patch_target_process(c->pid, 0, &c->held, err, errlen)) < 0)
		return r;
	if ((r = c->held.ops->quiesce(&c->held, err, errlen)) < 0) {
		c->held.ops->close(&c->held);
		return r;
	}
	c->holding = true;
	return 0;
}

static void release_all(struct hp_counted *c)
{
	if (!c->holding)
		return;
	c->held.ops->resume(&c->held);
	c->held.ops->close(&c->held);
	c->holding = false;
}

/* Every function's counters now, as the window's start (c->base). */
static int take_base(struct hp_counted *c, char *err, size_t errlen)
{
	uint64_t **base = calloc(c->n + 1, sizeof(*base));
	int r = 0;

	for (size_t i = 0; base && i < c->n && r == 0; i++)
		base[i] = read_slots(c, i, &r, err, errlen);
	if (base && r == 0) {
		c->base = base;
		return 0;
	}
	for (size_t i = 0; base && i < c->n; i++)
		free(base[i]);
	free(base);
	if (r == 0) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
	}
	return r;
}

static int begin(int pid, struct hp_model *m, const char *state_dir, const struct hp_function *const *fns,
		 const struct hp_module *const *mods, size_t n, enum hp_count_mode mode, bool every_block,
		 struct hp_counted *out, char *err, size_t errlen);

int hp_counted_begin(int pid, struct hp_model *m, const char *state_dir, const struct hp_function *const *fns,
		     const struct hp_module *const *mods, size_t n, enum hp_count_mode mode, bool every_block,
		     struct hp_counted *out, char *err, size_t errlen)
{
	int r = begin(pid, m, state_dir, fns, mods, n, mode, every_block, out, err, errlen);
	/* Unwatched (locked, or plain with other tasks), the window starts once
	 * every copy is in, read with every thread stopped, as its end is. The
	 * installs (one per module) go in one after another, each with the
	 * process stopped and resumed, and the copies run from their install's
	 * resume, so counters counted from their own install would cover
	 * different stretches of time (when every copy was its own install, a
	 * callee called on every call of its caller came out with a quarter of
	 * its calls). */
	if (r == 0 && !out->base) {
		if ((r = hold_all(out, err, errlen)) == 0)
			r = take_base(out, err, errlen);
		release_all(out);
		if (r < 0) {
			char e2[512];
			hp_counted_revert(out, e2, sizeof(e2));
		}
	}
	return r;
}

static int begin(int pid, struct hp_model *m, const char *state_dir, const struct hp_function *const *fns,
		 const struct hp_module *const *mods, size_t n, enum hp_count_mode mode, bool every_block,
		 struct hp_counted *out, char *err, size_t errlen)
{
	int tids[1024];
	int nt = mode == HP_COUNT_AUTO ? hp_process_threads(pid, tids, 1024) : 1;
	int r = hp_counted_install(pid, m, state_dir, fns, mods, n, mode != HP_COUNT_LOCKED && nt == 1, every_block,
				   out, err, errlen);
	if (r < 0 || mode == HP_COUNT_LOCKED)
		return r;
	if (nt != 1) { /* AUTO: more threads (or none listed) than a proof allows; no plain copy to undo */
		if (nt > 1)
			snprintf(out->how, sizeof(out->how), "locked increments: the process has %d%s threads", nt,
				 nt == 1024 ? " or more" : "");
		else
			snprintf(out->how, sizeof(out->how), "locked increments: its threads cannot be listed");
		return 0;
	}
	/* Plain: proved single-threaded from here, or not plain. */
	int w = hp_watch_start(&out->watch, pid);
	if (w == 1) {
		if ((r = take_base(out, err, errlen)) == 0) { /* the process stopped: a consistent start */
			out->watched = out->exact = true;
			snprintf(out->how, sizeof(out->how),
				 "plain increments: one thread, watched by ptrace (no other task sharing its memory "
				 "started during the window)");
			hp_watch_resume(&out->watch);
			return 0;
		}
		hp_watch_end(&out->watch);
		char e2[512];
		hp_counted_revert(out, e2, sizeof(e2));
		return r;
	}
	char why[sizeof(out->watch.why)];
	snprintf(why, sizeof(why), "%s", out->watch.why);
	if (w == -ESRCH) {
		char e2[512];
		hp_counted_revert(out, e2, sizeof(e2));
		snprintf(err, errlen, "process %d exited", pid);
		return -ESRCH;
	}
	if (mode == HP_COUNT_PLAIN) {
		snprintf(out->how, sizeof(out->how), "plain increments, not exact: %s", why);
		return 0;
	}
	/* AUTO: counted with locked increments instead. */
	if ((r = hp_counted_revert(out, err, errlen)) < 0)
		return r;
	if ((r = hp_counted_install(pid, m, state_dir, fns, mods, n, false, every_block, out, err, errlen)) < 0)
		return r;
	snprintf(out->how, sizeof(out->how), "locked increments: %s", why);
	return 0;
}

/* A new task ends the proof: say so once. */
static void note_watch(struct hp_counted *c)
{
	if (c->watched && c->exact && !c->watch.single) {
		c->exact = false;
		snprintf(c->how, sizeof(c->how), "plain increments, not exact: %s", c->watch.why);
	}
}

int hp_counted_poll(struct hp_counted *c)
{
	if (!c->watched)
		return 0;
	int alive = hp_watch_poll(&c->watch);
	note_watch(c);
	return alive ? 0 : -ESRCH;
}

void hp_counted_hold(struct hp_counted *c)
{
	if (!c->watched) {
		char e[256];
		hold_all(c, e, sizeof(e)); /* else read running: the process is gone, or a read fails and says so */
		return;
	}
	hp_watch_poll(&c->watch);
	hp_watch_hold(&c->watch);
	note_watch(c);
}

int hp_counted_read(const struct hp_counted *c, size_t i, uint64_t *counts, uint64_t *edge_counts, char *err,
		    size_t errlen)
{
	const struct hp_instrument *ins = c->fns[i].plan.instrument;
	int r;
	uint64_t *slots = read_slots(c, i, &r, err, errlen);
	if (!slots)
		return r;
	for (uint32_t k = 0; c->base && k < ins->nslots; k++)
		slots[k] -= c->base[i][k]; /* the window began once every copy was in */
	r = hp_instrument_counts(ins, slots, counts, ins->edges ? edge_counts : NULL);
	free(slots);
	if (r < 0)
		snprintf(err, errlen, "%s: the counted edges do not give every block's count", c->fns[i].fn->name);
	return r;
}

int hp_counted_revert(struct hp_counted *c, char *err, size_t errlen)
{
	int first = 0;

	release_all(c); /* the install engine's ptrace needs the process untraced */
	if (c->watched) {
		hp_watch_end(&c->watch);
		c->watched = false;
	}
	for (size_t k = 0; c->base && k < c->n; k++)
		free(c->base[k]);
	free(c->base);
	c->base = NULL;
	for (size_t g = c->ninstalls; g-- > 0;) {
		struct hp_counted_install *in = &c->installs[g];
		if (!in->installed)
			continue;
		struct hp_install_result rr;
		int pid = c->pid;
		char e[512];
		int r = hp_revert_id(c->state_dir, in->res.id, &pid, &rr, NULL, NULL, e, sizeof(e));
		if (r < 0 && !first) {
			first = r;
			snprintf(err, errlen, "reverting the counted copies of %zu function(s) (%s): %s", in->nfns,
				 in->res.id, e);
		}
		in->installed = r < 0;
	}
	for (size_t k = 0; k < c->n; k++) {
		struct hp_counted_fn *cf = &c->fns[k];
		cf->installed = cf->installed && c->installs && c->installs[cf->install].installed;
		hp_instrument_plan_free(&cf->plan);
	}
	free(c->installs);
	c->installs = NULL;
	c->ninstalls = 0;
	free(c->fns);
	c->fns = NULL;
	c->n = 0;
	return first;
}
