// SPDX-License-Identifier: Apache-2.0
/*
 * The I-cache footprint of hot code (KernInst Figure 2): for a set-
 * associative L1i of the host's geometry, the distinct hot lines mapping to
 * each set (a set holding more than its ways conflicts), the total of hot
 * lines, and the minimum any layout could reach: hot bytes / line size.
 */
#include <errno.h>
#include <stdlib.h>

#include "plan/pass.h"
#include "plan/plan.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int hp_icache_compute(struct hp_icache *ic, const struct hp_cache_geometry *g)
{
	size_t nlines = 0, k = 0;
	uint64_t *lines;

	ic->line = g->line_bytes;
	ic->ways = g->ways;
	ic->sets = g->size_bytes / (g->line_bytes * g->ways);
	if (!ic->sets)
		return -EINVAL;
	ic->hot_bytes = 0;
	for (size_t i = 0; i < ic->npieces; i++) {
		ic->hot_bytes += ic->pieces[i].size;
		if (ic->pieces[i].size)
			nlines += (ic->pieces[i].addr + ic->pieces[i].size - 1) / ic->line -
				  ic->pieces[i].addr / ic->line + 1;
	}
	lines = malloc((nlines + 1) * sizeof(*lines));
	free(ic->lines_per_set);
	ic->lines_per_set = calloc(ic->sets, sizeof(*ic->lines_per_set));
	if (!lines || !ic->lines_per_set) {
		free(lines);
		return -ENOMEM;
	}
	for (size_t i = 0; i < ic->npieces; i++)
		for (uint64_t l = ic->pieces[i].addr / ic->line;
		     ic->pieces[i].size && l <= (ic->pieces[i].addr + ic->pieces[i].size - 1) / ic->line; l++)
			lines[k++] = l;
	qsort(lines, k, sizeof(*lines), cmp_u64);
	ic->hot_lines = ic->conflict_sets = ic->max_per_set = 0;
	for (size_t i = 0; i < k; i++) {
		if (i && lines[i] == lines[i - 1])
			continue;
		ic->hot_lines++;
		uint32_t s = (uint32_t)(lines[i] % ic->sets);
		if (++ic->lines_per_set[s] == ic->ways + 1)
			ic->conflict_sets++;
		if (ic->lines_per_set[s] > ic->max_per_set)
			ic->max_per_set = ic->lines_per_set[s];
	}
	ic->minimum = (uint32_t)((ic->hot_bytes + ic->line - 1) / ic->line);
	free(lines);
	return 0;
}

void hp_icache_free(struct hp_icache *ic)
{
	free(ic->lines_per_set);
	free(ic->pieces);
	ic->lines_per_set = NULL;
	ic->pieces = NULL;
}

/* The footprint before and after for the plan's L1i. */
static int icache_pass(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	int r;

	if ((r = hp_icache_compute(&p->before, &p->opts.l1i)) < 0 ||
	    (r = hp_icache_compute(&p->after, &p->opts.l1i)) < 0)
		return r;
	/* One limit for both: the original hot bytes in as few lines as they
	 * fill. Jumps and padding the layout adds count against it. */
	p->after.minimum = p->before.minimum;
	return HP_PASS_NEXT;
}

const struct hp_plan_pass hp_pass_icache = { "icache", icache_pass };
