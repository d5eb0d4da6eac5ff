// SPDX-License-Identifier: Apache-2.0
/*
 * KernInst §4 edge derivation. Builds the flow network of one function
 * (blocks, entry, exits, indirect arrivals), then:
 *  1. flow conservation to a fixed point: any block equation (in-flow or
 *     out-flow equals the block's count) with exactly one unknown edge
 *     determines it; repeat until nothing changes;
 *  2. equations with no unknown edge left are checked: a nonzero residual is
 *     a violation (counts that do not fit the CFG);
 *  3. bounded approximation: each remaining edge gets bounds from the
 *     unexplained flow at both ends ([low, high]); the edge with the tightest
 *     bounds gets the middle of them, conservation runs again (whatever it
 *     derives from an estimate is an estimate), until every edge has a count.
 * Functions are small (tens to thousands of blocks), so the equations are
 * rescanned rather than kept in a worklist.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "measure/edges.h"

const char *hp_edge_kind_name(enum hp_edge_kind k)
{
	static const char *const names[] = { "entry",    "fallthrough", "taken",        "tail_call",
					     "indirect", "return",      "no_successor", "indirect_in" };
	return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

struct net {
	const uint64_t *counts;
	const bool *measured; /* per block; NULL = every block */
	uint32_t nblocks;
	struct hp_edge *e;
	size_t ne, cap;
	bool *known;
	/* Edge indices per block and side, as [start[b], start[b+1]) ranges. */
	uint32_t *out_start, *out_idx, *in_start, *in_idx;
};

static int add_edge(struct net *n, uint32_t from, uint32_t to, uint8_t kind, uint64_t target)
{
	if (HP_GROW(n->e, n->cap, n->ne + 1))
		return -ENOMEM;
	n->e[n->ne++] = (struct hp_edge){ .from = from, .to = to, .kind = kind, .target = target };
	return 0;
}

/* Index of the block of f starting at offset off, or HP_EDGE_NO_BLOCK. */
static uint32_t block_index(const struct hp_module *mod, const struct hp_function *f, uint64_t off)
{
	uint32_t lo = 0, hi = f->nblocks;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		uint32_t o = mod->blocks[f->block_start + mid].offset;
		if (o == off)
			return mid;
		if (o < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return HP_EDGE_NO_BLOCK;
}

static int build(struct net *n, const struct hp_module *mod, const struct hp_function *f)
{
	if (add_edge(n, HP_EDGE_NO_BLOCK, 0, HP_EDGE_ENTRY, 0) < 0)
		return -ENOMEM;
	for (uint32_t b = 0; b < f->nblocks; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		if (!bl->nsucc && add_edge(n, b, HP_EDGE_NO_BLOCK, HP_EDGE_NO_SUCCESSOR, 0) < 0)
			return -ENOMEM;
		for (uint32_t k = 0; k < bl->nsucc; k++) {
			const struct hp_succ *s = &mod->succs[bl->succ_start + k];
			int r;
			if (s->kind == HP_SUCC_FALLTHROUGH || s->kind == HP_SUCC_TAKEN) {
				uint32_t to = block_index(mod, f, s->target);
				/* A target that is not a block start cannot happen in a
				 * well-formed CFG; count its flow as leaving. */
				r = to == HP_EDGE_NO_BLOCK ? add_edge(n, b, to, HP_EDGE_INDIRECT, 0) :
							     add_edge(n, b, to, s->kind, 0);
			} else {
				r = add_edge(n, b, HP_EDGE_NO_BLOCK, s->kind,
					     s->kind == HP_SUCC_TAIL_CALL ? s->target : 0);
			}
			if (r < 0)
				return -ENOMEM;
		}
	}
	/* Blocks nothing in the CFG reaches get their flow from indirect jumps. */
	bool *reached = calloc(f->nblocks ? f->nblocks : 1, 1);
	if (!reached)
		return -ENOMEM;
	for (size_t i = 0; i < n->ne; i++)
		if (n->e[i].to != HP_EDGE_NO_BLOCK)
			reached[n->e[i].to] = true;
	for (uint32_t b = 1; b < f->nblocks; b++)
		if (!reached[b] && add_edge(n, HP_EDGE_NO_BLOCK, b, HP_EDGE_INDIRECT_IN, 0) < 0) {
			free(reached);
			return -ENOMEM;
		}
	free(reached);
	return 0;
}

/* Per-block lists of out- and in-edges (CSR). */
static int index_edges(struct net *n)
{
	uint32_t nb = n->nblocks;
	n->out_start = calloc(nb + 2, sizeof(uint32_t));
	n->in_start = calloc(nb + 2, sizeof(uint32_t));
	n->out_idx = malloc((n->ne + 1) * sizeof(uint32_t));
	n->in_idx = malloc((n->ne + 1) * sizeof(uint32_t));
	n->known = calloc(n->ne + 1, sizeof(bool));
	if (!n->out_start || !n->in_start || !n->out_idx || !n->in_idx || !n->known)
		return -ENOMEM;
	for (size_t i = 0; i < n->ne; i++) {
		if (n->e[i].from != HP_EDGE_NO_BLOCK)
			n->out_start[n->e[i].from + 2]++;
		if (n->e[i].to != HP_EDGE_NO_BLOCK)
			n->in_start[n->e[i].to + 2]++;
	}
	for (uint32_t b = 0; b < nb; b++) {
		n->out_start[b + 2] += n->out_start[b + 1];
		n->in_start[b + 2] += n->in_start[b + 1];
	}
	for (size_t i = 0; i < n->ne; i++) {
		if (n->e[i].from != HP_EDGE_NO_BLOCK)
			n->out_idx[n->out_start[n->e[i].from + 1]++] = (uint32_t)i;
		if (n->e[i].to != HP_EDGE_NO_BLOCK)
			n->in_idx[n->in_start[n->e[i].to + 1]++] = (uint32_t)i;
	}
	return 0;
}

/* One side of block b: its edge indices in [*lo, *hi). */
static const uint32_t *side(const struct net *n, uint32_t b, bool out, uint32_t *cnt)
{
	const uint32_t *start = out ? n->out_start : n->in_start;
	*cnt = start[b + 1] - start[b];
	return (out ? n->out_idx : n->in_idx) + start[b];
}

static bool measured(const struct net *n, uint32_t b)
{
	return !n->measured || n->measured[b];
}

/* Flow conservation to a fixed point; derived edges get label how. */
static void conserve(struct net *n, uint8_t how)
{
	bool changed = true;
	while (changed) {
		changed = false;
		for (uint32_t b = 0; b < n->nblocks; b++) {
			if (!measured(n, b))
				continue;
			for (int s = 0; s < 2; s++) {
				uint32_t cnt, unknown = 0, last = 0;
				const uint32_t *idx = side(n, b, s, &cnt);
				uint64_t sum = 0;
				for (uint32_t k = 0; k < cnt; k++) {
					if (n->known[idx[k]]) {
						sum += n->e[idx[k]].count;
					} else {
						unknown++;
						last = idx[k];
					}
				}
				if (unknown != 1)
					continue;
				struct hp_edge *e = &n->e[last];
				e->count = n->counts[b] > sum ? n->counts[b] - sum : 0;
				e->how = how;
				if (how == HP_EDGE_EXACT)
					e->low = e->high = e->count;
				else if (e->count < e->low)
					e->count = e->low;
				else if (e->count > e->high)
					e->count = e->high;
				n->known[last] = true;
				changed = true;
			}
		}
	}
}

/* Flow of side s of block b not yet explained by known edges; UINT64_MAX
 * (no bound) for a block whose count is not known. */
static uint64_t residual(const struct net *n, uint32_t b, bool out)
{
	uint32_t cnt;
	if (!measured(n, b))
		return UINT64_MAX;
	const uint32_t *idx = side(n, b, out, &cnt);
	uint64_t sum = 0;
	for (uint32_t k = 0; k < cnt; k++)
		if (n->known[idx[k]])
			sum += n->e[idx[k]].count;
	return n->counts[b] > sum ? n->counts[b] - sum : 0;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Bounds of every unknown edge from the flow the exact edges leave unexplained
 * (high UINT64_MAX: no bound, both ends have unknown counts). */
static void bound(struct net *n)
{
	for (size_t i = 0; i < n->ne; i++) {
		struct hp_edge *e = &n->e[i];
		if (n->known[i])
			continue;
		uint64_t hi = UINT64_MAX;
		if (e->from != HP_EDGE_NO_BLOCK && residual(n, e->from, true) < hi)
			hi = residual(n, e->from, true);
		if (e->to != HP_EDGE_NO_BLOCK && residual(n, e->to, false) < hi)
			hi = residual(n, e->to, false);
		e->high = hi;
	}
	for (size_t i = 0; i < n->ne; i++) {
		struct hp_edge *e = &n->e[i];
		if (n->known[i])
			continue;
		uint64_t lo = 0;
		for (int s = 0; s < 2; s++) {
			uint32_t b = s ? e->from : e->to, cnt;
			if (b == HP_EDGE_NO_BLOCK || !measured(n, b))
				continue;
			const uint32_t *idx = side(n, b, s, &cnt);
			uint64_t others = 0;
			for (uint32_t k = 0; k < cnt; k++)
				if (idx[k] != i && !n->known[idx[k]])
					others = add_sat(others, n->e[idx[k]].high);
			uint64_t r = residual(n, b, s);
			if (r > others && r - others > lo)
				lo = r - others;
		}
		e->low = lo > e->high ? e->high : lo;
	}
}

int hp_edges_derive(const struct hp_module *mod, const struct hp_function *f, const uint64_t *block_counts,
		    const bool *block_measured, const uint64_t *entry_count, struct hp_edge_result *out)
{
	struct net n = { .counts = block_counts, .measured = block_measured, .nblocks = f->nblocks };
	int r = -ENOMEM;
	memset(out, 0, sizeof(*out));
	if (!f->nblocks)
		return 0;
	if (build(&n, mod, f) < 0 || index_edges(&n) < 0)
		goto done;
	if (entry_count) {
		n.e[0].count = n.e[0].low = n.e[0].high = *entry_count;
		n.known[0] = true;
	}
	conserve(&n, HP_EDGE_EXACT);
	for (uint32_t b = 0; b < n.nblocks; b++) {
		if (!measured(&n, b))
			continue;
		for (int s = 0; s < 2; s++) {
			uint32_t cnt;
			const uint32_t *idx = side(&n, b, s, &cnt);
			uint64_t sum = 0;
			bool all = true;
			for (uint32_t k = 0; k < cnt; k++) {
				all &= n.known[idx[k]];
				sum += n.e[idx[k]].count;
			}
			if (all && sum != block_counts[b]) {
				out->violations++;
				out->violation_flow +=
					sum > block_counts[b] ? sum - block_counts[b] : block_counts[b] - sum;
			}
		}
	}
	for (size_t i = 0; i < n.ne; i++)
		out->nexact += n.known[i];
	bound(&n);
	for (;;) {
		size_t pick = n.ne;
		for (size_t i = 0; i < n.ne; i++)
			if (!n.known[i] && (pick == n.ne || n.e[i].high - n.e[i].low < n.e[pick].high - n.e[pick].low))
				pick = i;
		if (pick == n.ne)
			break;
		struct hp_edge *e = &n.e[pick];
		e->count = e->high == UINT64_MAX ? e->low : e->low + (e->high - e->low) / 2;
		e->how = HP_EDGE_ESTIMATE;
		n.known[pick] = true;
		conserve(&n, HP_EDGE_ESTIMATE);
	}
	out->edges = n.e;
	out->nedges = n.ne;
	n.e = NULL;
	r = 0;
done:
	free(n.e);
	free(n.known);
	free(n.out_start);
	free(n.out_idx);
	free(n.in_start);
	free(n.in_idx);
	return r;
}

void hp_edge_result_free(struct hp_edge_result *r)
{
	free(r->edges);
	memset(r, 0, sizeof(*r));
}
