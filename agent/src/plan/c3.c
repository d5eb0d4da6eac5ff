// SPDX-License-Identifier: Apache-2.0
/*
 * C3 function ordering (c3.h), and the hot-set plan's order pass over its
 * members: work is a member's counts times its blocks' instructions, size
 * its hot bytes (the blocks that ran, the entry always), a call's count the
 * counts of the caller's blocks that call or tail-call the callee. Then
 * the place pass: where in its page the copy starts (hp_place_offset).
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
			if (hp_plan_block_hot(mb->count[b], p->cold_below, b))
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

uint32_t hp_place_offset(const uint32_t *resident, uint32_t sets, uint32_t ways, uint32_t line, uint64_t hot_bytes)
{
	uint64_t nl = (hot_bytes + line - 1) / line, full = nl / sets, part = nl % sets;
	uint64_t best_over = UINT64_MAX, best_shared = UINT64_MAX;
	uint32_t best = 0;

	for (uint32_t o = 0; o < sets; o++) {
		uint64_t over = 0, shared = 0;
		for (uint32_t s = 0; s < sets; s++) {
			uint64_t mine = full + ((s + sets - o) % sets < part), with = mine + resident[s];
			/* The lines beyond the set's ways that this code adds. */
			over += (with > ways ? with - ways : 0) - (resident[s] > ways ? resident[s] - ways : 0);
			shared += mine * resident[s];
		}
		if (over < best_over || (over == best_over && shared < best_shared)) {
			best_over = over;
			best_shared = shared;
			best = o;
		}
	}
	return best * line;
}

/* The place pass of a hot-set plan: the copy's start within its page, so
 * that its hot part (the members' hot chunks, laid out first and
 * contiguous) avoids the L1i sets the hot code that stays in place fills:
 * the profile's functions that are not members (those kept in place, hot
 * callers outside, other modules), and those of opts.resident. A base given
 * (--base, or a second pass's saved one) stays. The hot part's size is its
 * blocks' original bytes: emission adds jumps and alignment, so this is an
 * estimate; the icache pass reports the result. */
static int place(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	const struct hp_cache_geometry *g = &p->opts.l1i;
	uint32_t sets = g->line_bytes && g->ways ? g->size_bytes / (g->line_bytes * g->ways) : 0;
	const struct hp_profile *src[2] = { c->prof, p->opts.resident };
	uint64_t hot = 0;

	if (p->opts.base || !sets || !p->nmembers || c->m->kind == HP_TARGET_KERNEL)
		return HP_PASS_NEXT;
	uint32_t *resident = calloc(sets, sizeof(*resident));
	if (!resident)
		return -ENOMEM;
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; src[k] && i < src[k]->nfns; i++) {
			const struct hp_prof_fn *pf = &src[k]->fns[i];
			bool member = false;
			for (size_t j = 0; j < p->nmembers && !member; j++)
				member = p->members[j].fn->addr == pf->addr;
			const struct hp_module *mod;
			const struct hp_function *f = hp_model_lookup(c->m, pf->addr, &mod);
			if (member || !f || f->addr != pf->addr)
				continue;
			/* Lines, not blocks: count each hot line once. */
			uint64_t prev = UINT64_MAX;
			for (size_t b = 0; b < pf->nblocks; b++) {
				const struct hp_block *bl =
					hp_function_block_at(mod, f, f->addr + pf->blocks[b].offset);
				if (!bl || !(pf->blocks[b].count > 0) || !bl->size)
					continue;
				uint64_t a = f->addr + bl->offset;
				for (uint64_t l = a / g->line_bytes; l <= (a + bl->size - 1) / g->line_bytes; l++)
					if (l != prev) {
						resident[l % sets]++;
						prev = l;
					}
			}
		}
	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		for (uint32_t j = 0; j < mb->nhot; j++)
			hot += mb->mod->blocks[mb->fn->block_start + mb->blocks[j].index].size;
	}
	uint32_t off = hp_place_offset(resident, sets, g->ways, g->line_bytes, hot);
	free(resident);
	/* Where emit would lay it out (a page after the end of the first
	 * member's module text), moved by off within that page. */
	const struct hp_module *mod = p->members[0].mod;
	const struct hp_function *last = &mod->funcs[mod->nfuncs - 1];
	p->base = ((last->addr + last->size + 0xffff) & ~(uint64_t)0xfff) + off;
	return HP_PASS_NEXT;
}

const struct hp_plan_pass hp_pass_place = { "place", place };
