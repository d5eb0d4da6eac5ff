// SPDX-License-Identifier: Apache-2.0
/*
 * C3 function ordering (c3.h), and the hot-set plan's order pass over its
 * members: work is a member's counts times its blocks' instructions, size
 * its hot bytes (the blocks that ran, the entry always), a call's count the
 * counts of the caller's blocks that call or tail-call the callee.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan/c3.h"
#include "plan/pass.h"
#include "plan/plan.h"

#define PAGE 4096

struct cluster {
	uint32_t first, last; /* members as a list through next[] */
	double work;
	uint64_t size;
};

static int hotter(const void *a, const void *b, void *ctx)
{
	const struct hp_c3_fn *sort_fns = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	if (sort_fns[x].work != sort_fns[y].work)
		return sort_fns[x].work < sort_fns[y].work ? 1 : -1;
	return x < y ? -1 : x > y;
}

static double density(const struct cluster *c)
{
	return c->work / (double)(c->size ? c->size : 1);
}

static int denser(const void *a, const void *b, void *ctx)
{
	const struct cluster *sort_cl = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	double dx = density(&sort_cl[x]), dy = density(&sort_cl[y]);
	if (dx != dy)
		return dx < dy ? 1 : -1;
	return x < y ? -1 : x > y;
}

int hp_c3_order(const struct hp_c3_fn *f, size_t n, const struct hp_c3_call *calls, size_t ncalls, uint32_t page,
		uint32_t *order)
{
	uint32_t *by_heat = malloc((n + 1) * sizeof(*by_heat)), *cl_of = malloc((n + 1) * sizeof(*cl_of));
	uint32_t *next = malloc((n + 1) * sizeof(*next)), *caller = malloc((n + 1) * sizeof(*caller));
	double *caller_w = calloc(n + 1, sizeof(*caller_w));
	struct cluster *cl = malloc((n + 1) * sizeof(*cl));
	int r = -1;

	if (!by_heat || !cl_of || !next || !caller || !caller_w || !cl)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		by_heat[i] = i;
		cl_of[i] = i;
		next[i] = UINT32_MAX;
		caller[i] = UINT32_MAX;
		cl[i] = (struct cluster){ i, i, f[i].work, f[i].size };
	}
	/* Each function's heaviest caller (itself excluded; ties: lowest index). */
	for (size_t k = 0; k < ncalls; k++) {
		const struct hp_c3_call *c = &calls[k];
		if (c->caller >= n || c->callee >= n || c->caller == c->callee || !(c->count > 0))
			continue;
		double w = c->count;
		if (w > caller_w[c->callee] || (w == caller_w[c->callee] && c->caller < caller[c->callee])) {
			caller_w[c->callee] = w;
			caller[c->callee] = c->caller;
		}
	}
	qsort_r(by_heat, n, sizeof(*by_heat), hotter, (void *)f);
	for (size_t k = 0; k < n; k++) {
		uint32_t g = by_heat[k], p = caller[g];
		if (p == UINT32_MAX)
			continue;
		uint32_t a = cl_of[p], b = cl_of[g];
		if (a == b || cl[a].size + cl[b].size > page)
			continue;
		/* b's functions go after a's. */
		next[cl[a].last] = cl[b].first;
		cl[a].last = cl[b].last;
		cl[a].work += cl[b].work;
		cl[a].size += cl[b].size;
		for (uint32_t x = cl[b].first; x != UINT32_MAX; x = next[x])
			cl_of[x] = a;
	}
	/* The clusters left (each named by a member that heads one), densest first. */
	size_t nc = 0;
	for (uint32_t i = 0; i < n; i++)
		if (cl_of[i] == i)
			by_heat[nc++] = i;
	qsort_r(by_heat, nc, sizeof(*by_heat), denser, cl);
	size_t w = 0;
	for (size_t k = 0; k < nc; k++)
		for (uint32_t x = cl[by_heat[k]].first; x != UINT32_MAX; x = next[x])
			order[w++] = x;
	r = 0;
out:
	free(by_heat);
	free(cl_of);
	free(next);
	free(caller);
	free(caller_w);
	free(cl);
	return r;
}

/* The order pass of a hot-set plan: its members in C3 order; the first is
 * the plan's root. */
static int c3(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	size_t n = p->nmembers, nc = 0;
	struct hp_c3_fn *f = calloc(n + 1, sizeof(*f));
	struct hp_c3_call *calls = calloc(n * n + 1, sizeof(*calls));
	uint32_t *order = malloc((n + 1) * sizeof(*order));
	struct hp_plan_member *v = malloc((n + 1) * sizeof(*v));
	int r = -ENOMEM;

	if (!f || !calls || !order || !v)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		for (uint32_t b = 0; b < mb->fn->nblocks; b++) {
			const struct hp_block *bl = &mb->mod->blocks[mb->fn->block_start + b];
			f[i].work += mb->count[b] * (bl->ninsn ? bl->ninsn : 1);
			if (mb->count[b] > 0 || b == 0)
				f[i].size += bl->size;
		}
		for (size_t j = 0; j < n; j++) {
			double w = j == i ? 0 : hp_plan_calls_to(mb, p->members[j].fn->addr);
			if (w > 0)
				calls[nc++] = (struct hp_c3_call){ (uint32_t)i, (uint32_t)j, w };
		}
	}
	if (hp_c3_order(f, n, calls, nc, PAGE, order) < 0)
		goto out;
	for (size_t k = 0; k < n; k++)
		v[k] = p->members[order[k]];
	memcpy(p->members, v, n * sizeof(*v));
	hp_plan_renumber_icalls(p);
	c->root = p->members[0].fn;
	c->root_mod = p->members[0].mod;
	c->root_calls = p->members[0].calls;
	r = HP_PASS_NEXT;
out:
	free(f);
	free(calls);
	free(order);
	free(v);
	return r;
}

const struct hp_plan_pass hp_pass_c3 = { "c3", c3 };
