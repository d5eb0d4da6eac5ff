// SPDX-License-Identifier: Apache-2.0
/*
 * Chain formation (see chains.h). Chains are doubly linked lists of blocks
 * (next/prev); a union-find-free representation is enough because a link
 * is made only between a chain's tail and another chain's head, and the
 * head of a chain is found by walking prev links (chains are short).
 */
#include <stdlib.h>
#include <string.h>

#include "plan/chains.h"

static int cmp_edge_desc(const void *a, const void *b)
{
	const struct hp_chain_edge *x = a, *y = b;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	if (x->from != y->from)
		return x->from < y->from ? -1 : 1;
	return x->to < y->to ? -1 : x->to > y->to;
}

static uint32_t head_of(const int32_t *prev, uint32_t x)
{
	while (prev[x] >= 0)
		x = (uint32_t)prev[x];
	return x;
}

int hp_chains_build(const struct hp_chain_block *b, size_t n, const struct hp_chain_edge *e_in, size_t ne,
		    uint32_t entry, uint32_t small_bytes, uint32_t *order, int32_t *chain_of, uint32_t *nchains)
{
	int32_t *next = malloc((n + 1) * sizeof(*next)), *prev = malloc((n + 1) * sizeof(*prev));
	int32_t *best_succ = malloc((n + 1) * sizeof(*best_succ)), *best_pred = malloc((n + 1) * sizeof(*best_pred));
	uint32_t *outdeg = calloc(n + 1, sizeof(*outdeg)), *only_succ = calloc(n + 1, sizeof(*only_succ));
	double *bs = calloc(n + 1, sizeof(*bs)), *bp = calloc(n + 1, sizeof(*bp));
	struct hp_chain_edge *e = malloc((ne + 1) * sizeof(*e));
	uint8_t *placed = calloc(n + 1, 1);
	size_t i;
	int placed_n = -1;

	if (!next || !prev || !best_succ || !best_pred || !outdeg || !only_succ || !bs || !bp || !e || !placed)
		goto out;
	for (i = 0; i < n; i++) {
		next[i] = prev[i] = best_succ[i] = best_pred[i] = -1;
		chain_of[i] = -1;
	}
	/* Only edges between distinct hot blocks matter. */
	size_t m = 0;
	for (i = 0; i < ne; i++) {
		const struct hp_chain_edge *x = &e_in[i];
		if (x->from >= n || x->to >= n || x->from == x->to)
			continue;
		outdeg[x->from]++;
		only_succ[x->from] = x->to;
		if (!b[x->from].hot || !b[x->to].hot || x->count <= 0)
			continue;
		e[m++] = *x;
		if (x->count > bs[x->from] || (x->count == bs[x->from] && (int32_t)x->to < best_succ[x->from])) {
			bs[x->from] = x->count;
			best_succ[x->from] = (int32_t)x->to;
		}
		if (x->count > bp[x->to] || (x->count == bp[x->to] && (int32_t)x->from < best_pred[x->to])) {
			bp[x->to] = x->count;
			best_pred[x->to] = (int32_t)x->from;
		}
	}
	qsort(e, m, sizeof(*e), cmp_edge_desc);

	/* ShouldFollow: a hot block that ends without a branch keeps its hot
	 * successor after it; placing it elsewhere would add a jump. */
	for (i = 0; i < n; i++) {
		int32_t y = b[i].falls_to;
		if (!b[i].hot || y < 0 || (size_t)y >= n || !b[y].hot || (uint32_t)y == entry || prev[y] >= 0 ||
		    next[i] >= 0 || head_of(prev, (uint32_t)i) == (uint32_t)y)
			continue;
		next[i] = y;
		prev[y] = (int32_t)i;
	}
	/* Heaviest edges first, each joining a tail to a head. */
	for (i = 0; i < m; i++) {
		uint32_t x = e[i].from, y = e[i].to;

		if (y == entry || next[x] >= 0 || prev[y] >= 0 || head_of(prev, x) == y)
			continue;
		/* Perfect partner: x's heaviest successor is y and y's heaviest
		 * predecessor is x. */
		if (best_succ[x] != (int32_t)y || best_pred[y] != (int32_t)x)
			continue;
		/* An isolated small predecessor of y (its only successor is y,
		 * it is in no chain yet) takes y instead: it would otherwise need
		 * a jump of its own. */
		int32_t iso = -1;
		for (size_t k = 0; k < m && iso < 0; k++) {
			uint32_t p = e[k].from;
			if (e[k].to == y && p != x && p != entry && outdeg[p] == 1 && only_succ[p] == y &&
			    b[p].size <= small_bytes && next[p] < 0 && prev[p] < 0)
				iso = (int32_t)p;
		}
		if (iso >= 0) {
			next[iso] = (int32_t)y;
			prev[y] = iso;
			continue;
		}
		next[x] = (int32_t)y;
		prev[y] = (int32_t)x;
	}

	/* Order the chains: the entry's first; then the chain whose head gets
	 * the heaviest edge from a block already placed; else the heaviest
	 * remaining chain (by its hottest block). */
	uint32_t nc = 0, k = 0;
	uint32_t cur = head_of(prev, entry);
	for (;;) {
		if (!b[cur].hot || placed[cur])
			break;
		for (int32_t x = (int32_t)cur; x >= 0; x = next[x]) {
			placed[x] = 1;
			chain_of[x] = (int32_t)nc;
			order[k++] = (uint32_t)x;
		}
		nc++;
		int32_t pick = -1;
		double w = -1;
		for (i = 0; i < m; i++)
			if (placed[e[i].from] && !placed[e[i].to] && prev[e[i].to] < 0 && e[i].count > w) {
				w = e[i].count;
				pick = (int32_t)e[i].to;
			}
		if (pick < 0)
			for (i = 0; i < n; i++)
				if (b[i].hot && !placed[i] && prev[i] < 0 && b[i].count > w) {
					w = b[i].count;
					pick = (int32_t)i;
				}
		if (pick < 0)
			break;
		cur = (uint32_t)pick;
	}
	*nchains = nc;
	placed_n = (int)k;
out:
	free(next);
	free(prev);
	free(best_succ);
	free(best_pred);
	free(outdeg);
	free(only_succ);
	free(bs);
	free(bp);
	free(e);
	free(placed);
	return placed_n;
}
