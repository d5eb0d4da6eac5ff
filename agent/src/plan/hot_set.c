// SPDX-License-Identifier: Apache-2.0
/*
 * The hot-set pass: a plan of a whole program's hot code, not of one root
 * (BOLT re-lays every function a profile shows hot). A function's work is
 * its blocks' counts times their instructions (samples, for sampled
 * counts; instructions executed, for counted ones). The members are the
 * smallest set of the hottest functions covering hot_share of the
 * work of one module, hot_module or the one the profile shows hottest (one module: the copy is
 * one heap within rel32 reach of what it references), at most
 * max_functions; a function of that set that
 * cannot move (hp_plan_kept_rule) is kept in place with its rule and still
 * counts toward the share. Shared callees are members like any other: the
 * install redirects every member's entry, so callers outside the set reach
 * the copy through the entry jump. A member's parent is the member calling
 * it most, or itself when no member calls it. The order pass (c3.c) makes
 * the first member laid out the plan's root, which names the plan.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pass.h"
#include "plan/plan.h"

struct candidate {
	const struct hp_prof_fn *pf;
	const struct hp_function *f;
	const struct hp_module *mod;
	double work;
};

static int by_work(const void *a, const void *b)
{
	const struct candidate *x = a, *y = b;
	if (x->work != y->work)
		return x->work < y->work ? 1 : -1;
	return x->f->addr < y->f->addr ? -1 : x->f->addr > y->f->addr; /* ties: by address, stable plans */
}

/* The profile's work in f: its blocks' counts times their instructions. */
static double fn_work(const struct hp_module *mod, const struct hp_function *f, const struct hp_prof_fn *pf)
{
	double w = 0;
	for (size_t i = 0; i < pf->nblocks; i++) {
		const struct hp_block *b = hp_function_block_at(mod, f, f->addr + pf->blocks[i].offset);
		if (b && pf->blocks[i].count > 0)
			w += pf->blocks[i].count * (b->ninsn ? b->ninsn : 1);
	}
	return w;
}

/* Whether mod is the module name names: its path, or the path's end after a '/'. */
static bool module_is(const struct hp_module *mod, const char *name)
{
	size_t a = strlen(mod->name), b = strlen(name);
	return a >= b && !strcmp(mod->name + a - b, name) && (a == b || name[0] == '/' || mod->name[a - b - 1] == '/');
}

/* Why f's entry cannot take the 5-byte jump to its copy that installs a
 * hot set (every member's entry is spliced), or NULL. Kernel plans splice
 * no entries this way. */
static const char *entry_rule(const struct hp_model *m, const struct hp_module *mod, const struct hp_function *f)
{
	if (m->kind == HP_TARGET_KERNEL)
		return NULL;
	if (f->size < 5)
		return "shorter than the 5-byte jump to its copy: its entry cannot be redirected";
	for (uint32_t b = 1; b < f->nblocks; b++) {
		uint32_t off = mod->blocks[f->block_start + b].offset;
		if (off > 0 && off < 5)
			return "a block starts inside the 5 bytes its entry jump would cover: its entry cannot be "
			       "redirected";
	}
	return NULL;
}

static int hot_set(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	const struct hp_profile *prof = c->prof;
	struct candidate *v;
	size_t n = 0;
	double total = 0, covered = 0;
	char detail[160];
	int r = 0;

	if (!prof || !prof->nfns) {
		p->status = HP_PLAN_NO_COUNTS;
		snprintf(p->message, sizeof(p->message),
			 "no block counts: sample the process (--sample) or give --profile for its hot set");
		return HP_PASS_DONE;
	}
	if (!(v = calloc(prof->nfns, sizeof(*v))))
		return -ENOMEM;
	for (size_t i = 0; i < prof->nfns; i++) {
		const struct hp_module *mod;
		const struct hp_function *f = hp_model_lookup(c->m, prof->fns[i].addr, &mod);
		if (!f || f->addr != prof->fns[i].addr)
			continue;
		double w = fn_work(mod, f, &prof->fns[i]);
		if (w <= 0)
			continue;
		v[n++] = (struct candidate){ &prof->fns[i], f, mod, w };
		total += w;
	}
	if (!n) {
		free(v);
		p->status = HP_PLAN_NOT_HOT;
		snprintf(p->message, sizeof(p->message), "nothing ran in the profile (%s): nothing to optimize",
			 prof->source);
		return HP_PASS_DONE;
	}
	/* One module's: the copy is one heap within rel32 reach of everything
	 * it references, as BOLT rewrites one binary. The module with the most
	 * work; the share is of its work. */
	const struct hp_module *best = NULL;
	double best_w = 0, *mod_w = calloc(c->m->nmods + 1, sizeof(*mod_w));
	if (!mod_w) {
		free(v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		if (!p->opts.hot_module || module_is(v[i].mod, p->opts.hot_module))
			mod_w[v[i].mod - c->m->mods] += v[i].work;
	for (size_t i = 0; i < c->m->nmods; i++)
		if (mod_w[i] > best_w) {
			best_w = mod_w[i];
			best = &c->m->mods[i];
		}
	free(mod_w);
	if (!best) {
		free(v);
		p->status = HP_PLAN_NOT_HOT;
		snprintf(p->message, sizeof(p->message), "no code of %s ran in the profile (%s): nothing to optimize",
			 p->opts.hot_module, prof->source);
		return HP_PASS_DONE;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i].mod == best)
			v[k++] = v[i];
	n = k;
	total = best_w;
	/* Blocks that run this rarely for the work are cold: a line touched once
	 * in many L1i's worth of instructions misses wherever it is. */
	p->cold_below = p->opts.cold_rate * total / 1e9;
	qsort(v, n, sizeof(*v), by_work);
	for (size_t i = 0; i < n && covered < p->opts.hot_share * total; i++) {
		const char *rule = hp_plan_kept_rule(c->m, v[i].mod, v[i].f, detail, sizeof(detail));
		covered += v[i].work;
		if (!rule && (rule = entry_rule(c->m, v[i].mod, v[i].f)))
			detail[0] = 0;
		if (!rule && p->nmembers >= p->opts.max_functions)
			rule = "the hot set is full (--max-functions)";
		if (rule)
			r = hp_plan_keep(c, v[i].f, rule, detail);
		else
			r = hp_plan_add_member(c, v[i].mod, v[i].f, NULL, v[i].pf);
		if (r < 0)
			break;
	}
	free(v);
	if (r < 0)
		return r;
	if (!p->nmembers) {
		p->status = HP_PLAN_ROOT_KEPT;
		snprintf(p->message, sizeof(p->message), "no function of the hot set can move (%zu kept in place: %s)",
			 p->nkept, p->kept[0].rule);
		return HP_PASS_DONE;
	}
	c->root = p->members[0].fn;
	c->root_mod = p->members[0].mod;
	c->root_calls = p->members[0].calls;
	for (size_t i = 0; i < p->nmembers; i++) {
		double best = 0;
		p->members[i].parent = i ? p->members[i].fn : NULL;
		for (size_t j = 0; j < p->nmembers; j++) {
			double w = j == i ? 0 : hp_plan_calls_to(&p->members[j], p->members[i].fn->addr);
			if (i && w > best) {
				best = w;
				p->members[i].parent = p->members[j].fn;
			}
		}
		if ((r = hp_plan_member_icalls(c, i)) < 0)
			return r;
	}
	return HP_PASS_NEXT;
}

const struct hp_plan_pass hp_pass_hot_set = { "hot-set", hot_set };
