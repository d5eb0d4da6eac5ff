// SPDX-License-Identifier: Apache-2.0
/*
 * Ext-TSP block layout (ext_tsp.h). Each round looks at every pair of
 * chains an edge connects and merges the pair whose best merge gains the
 * most; a pair's best merge is kept between rounds until either chain
 * changes (each chain has a version, the cache entry the two versions it
 * was computed for), in a table emptied when half full. A candidate is scored by laying its blocks out back
 * to back and summing the edges inside it, so a merge costs the edges of
 * its two chains, for each of the split points tried.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "plan/ext_tsp.h"

#define FORWARD_BYTES  1024.0
#define BACKWARD_BYTES 640.0
#define JUMP_WEIGHT    0.1
#define SPLIT_MAX      128u /* longer chains are only concatenated (LLVM's ChainSplitThreshold) */

struct chain {
	uint32_t *blk;
	uint32_t len;
	size_t cap;
	double score, count;
	uint64_t bytes;
	uint32_t version;
	bool alive;
};

/* The best merge of a pair of chains, for the versions it was computed at. */
struct cached {
	uint32_t x, y; /* x < y; x == UINT32_MAX: empty */
	uint32_t vx, vy;
	double gain;
	uint32_t first, type, split; /* first: which of x, y is split or goes first */
};

struct ctx {
	const struct hp_chain_block *b;
	size_t n;
	uint32_t entry;
	uint32_t *out_start; /* edges by source: out[out_start[u] .. out_start[u + 1]) */
	struct hp_chain_edge *out;
	size_t nout;
	uint32_t *cid; /* chain of each hot block */
	uint64_t *addr;
	uint32_t *mark, stamp;
	uint32_t *seq;
	struct chain *c;
	struct cached *cache;
	size_t ncache, nused; /* a power of two; slots taken */
};

/* One edge's contribution, from its source's end to its target's start. */
static double edge_score(double count, uint64_t src_end, uint64_t dst)
{
	if (dst == src_end)
		return count;
	if (dst > src_end) {
		double d = (double)(dst - src_end);
		return d <= FORWARD_BYTES ? count * JUMP_WEIGHT * (1 - d / FORWARD_BYTES) : 0;
	}
	double d = (double)(src_end - dst);
	return d <= BACKWARD_BYTES ? count * JUMP_WEIGHT * (1 - d / BACKWARD_BYTES) : 0;
}

/* The score of seq[0..k) laid out back to back, counting the edges inside it. */
static double seq_score(struct ctx *x, const uint32_t *seq, size_t k)
{
	uint64_t at = 0;
	double s = 0;

	if (++x->stamp == 0) {
		memset(x->mark, 0, x->n * sizeof(*x->mark));
		x->stamp = 1;
	}
	for (size_t i = 0; i < k; i++) {
		x->mark[seq[i]] = x->stamp;
		x->addr[seq[i]] = at;
		at += x->b[seq[i]].size;
	}
	for (size_t i = 0; i < k; i++) {
		uint32_t u = seq[i];
		for (uint32_t j = x->out_start[u]; j < x->out_start[u + 1]; j++)
			if (x->mark[x->out[j].to] == x->stamp)
				s += edge_score(x->out[j].count, x->addr[u] + x->b[u].size, x->addr[x->out[j].to]);
	}
	return s;
}

/* The sequence of merge type t of chains a (split at s) and b into x->seq;
 * its length. 0: A B; 1: A1 B A2; 2: B A2 A1; 3: A2 A1 B. */
static size_t merged(struct ctx *x, const struct chain *a, const struct chain *b, uint32_t t, uint32_t s)
{
	size_t k = 0;
	const uint32_t *a1 = a->blk, *a2 = a->blk + s;
	uint32_t n1 = s, n2 = a->len - s;

#define PUT(p, m)                                                \
	do {                                                     \
		memcpy(x->seq + k, (p), (m) * sizeof(uint32_t)); \
		k += (m);                                        \
	} while (0)
	switch (t) {
	case 0:
		PUT(a->blk, a->len);
		PUT(b->blk, b->len);
		break;
	case 1:
		PUT(a1, n1);
		PUT(b->blk, b->len);
		PUT(a2, n2);
		break;
	case 2:
		PUT(b->blk, b->len);
		PUT(a2, n2);
		PUT(a1, n1);
		break;
	default:
		PUT(a2, n2);
		PUT(a1, n1);
		PUT(b->blk, b->len);
		break;
	}
#undef PUT
	return k;
}

/* May chain a be split before its block s (the block before it does not
 * run into it without a branch)? */
static bool splittable(const struct ctx *x, const struct chain *a, uint32_t s)
{
	return x->b[a->blk[s - 1]].falls_to != (int32_t)a->blk[s];
}

/* The best merge of chains ia and ib into *m (gain and shape). */
static void best_merge(struct ctx *x, uint32_t ia, uint32_t ib, struct cached *m)
{
	m->gain = -1;
	for (int o = 0; o < 2; o++) {
		uint32_t ifirst = o ? ib : ia;
		const struct chain *a = &x->c[o ? ib : ia], *b = &x->c[o ? ia : ib];
		double base = a->score + b->score;
		for (uint32_t t = 0; t < 4; t++)
			for (uint32_t s = t ? 1 : 0; t ? s < a->len && a->len <= SPLIT_MAX : s == 0; s++) {
				if (t && !splittable(x, a, s))
					continue;
				size_t k = merged(x, a, b, t, s);
				/* The entry stays first. */
				if ((a->blk[0] == x->entry || b->blk[0] == x->entry) && x->seq[0] != x->entry)
					continue;
				double g = seq_score(x, x->seq, k) - base;
				if (g > m->gain) {
					m->gain = g;
					m->first = ifirst;
					m->type = t;
					m->split = s;
				}
			}
	}
}

static struct cached *slot_of(struct ctx *x, uint32_t a, uint32_t b)
{
	uint32_t lo = a < b ? a : b, hi = a < b ? b : a;
	size_t h = ((size_t)lo * 0x9e3779b1u ^ (size_t)hi * 0x85ebca6bu) & (x->ncache - 1);

	while (x->cache[h].x != UINT32_MAX && (x->cache[h].x != lo || x->cache[h].y != hi))
		h = (h + 1) & (x->ncache - 1);
	if (x->cache[h].x != UINT32_MAX)
		return &x->cache[h];
	/* A new pair. Merged chains keep making new pairs, so the table is
	 * emptied when half full (it only saves recomputing merges): a probe
	 * then always ends at an empty slot. */
	if (++x->nused > x->ncache / 2) {
		for (size_t i = 0; i < x->ncache; i++)
			x->cache[i].x = UINT32_MAX;
		x->nused = 1;
		h = ((size_t)lo * 0x9e3779b1u ^ (size_t)hi * 0x85ebca6bu) & (x->ncache - 1);
	}
	x->cache[h] = (struct cached){ .x = lo, .y = hi }; /* its versions match no chain's */
	return &x->cache[h];
}

/* Merge the pair m describes into the chain it names first. 0, or -1 when
 * out of memory. */
static int apply(struct ctx *x, const struct cached *m)
{
	uint32_t ia = m->first, ib = m->first == m->x ? m->y : m->x;
	struct chain *a = &x->c[ia], *b = &x->c[ib];
	size_t k = merged(x, a, b, m->type, m->split);

	if (HP_GROW(a->blk, a->cap, k))
		return -1;
	memcpy(a->blk, x->seq, k * sizeof(uint32_t));
	a->len = (uint32_t)k;
	a->score = seq_score(x, a->blk, k);
	a->count += b->count;
	a->bytes += b->bytes;
	a->version++;
	for (uint32_t i = 0; i < b->len; i++)
		x->cid[b->blk[i]] = ia;
	b->alive = false;
	b->version++;
	return 0;
}

static int cmp_src(const void *p, const void *q)
{
	const struct hp_chain_edge *a = p, *b = q;

	return a->from != b->from ? (a->from < b->from ? -1 : 1) : (a->to < b->to ? -1 : a->to > b->to);
}

/* Chains to lay out after the entry's: densest first, then by first block. */
struct by_density {
	double density;
	uint32_t first, id;
};

static int cmp_density(const void *p, const void *q)
{
	const struct by_density *a = p, *b = q;

	if (a->density != b->density)
		return a->density > b->density ? -1 : 1;
	return a->first < b->first ? -1 : a->first > b->first;
}

int hp_ext_tsp_build(const struct hp_chain_block *b, size_t n, const struct hp_chain_edge *e, size_t ne, uint32_t entry,
		     uint32_t *order, int32_t *chain_of, uint32_t *nchains)
{
	struct ctx x = { .b = b, .n = n, .entry = entry };
	struct by_density *ids = NULL;
	int placed = -1;

	x.out_start = calloc(n + 2, sizeof(*x.out_start));
	x.out = malloc((ne + 1) * sizeof(*x.out));
	x.cid = malloc((n + 1) * sizeof(*x.cid));
	x.addr = malloc((n + 1) * sizeof(*x.addr));
	x.mark = calloc(n + 1, sizeof(*x.mark));
	x.seq = malloc((n + 1) * sizeof(*x.seq));
	x.c = calloc(n + 1, sizeof(*x.c));
	ids = malloc((n + 1) * sizeof(*ids));
	for (x.ncache = 64; x.ncache < 4 * ne + 4; x.ncache *= 2)
		;
	x.cache = malloc(x.ncache * sizeof(*x.cache));
	if (!x.out_start || !x.out || !x.cid || !x.addr || !x.mark || !x.seq || !x.c || !ids || !x.cache)
		goto out;
	for (size_t i = 0; i < x.ncache; i++)
		x.cache[i].x = UINT32_MAX;
	/* Edges between distinct hot blocks that ran, by source. */
	for (size_t i = 0; i < ne; i++)
		if (e[i].from < n && e[i].to < n && e[i].from != e[i].to && b[e[i].from].hot && b[e[i].to].hot &&
		    e[i].count > 0)
			x.out[x.nout++] = e[i];
	qsort(x.out, x.nout, sizeof(*x.out), cmp_src);
	for (size_t i = 0; i < x.nout; i++)
		x.out_start[x.out[i].from + 1]++;
	for (size_t u = 0; u < n; u++)
		x.out_start[u + 1] += x.out_start[u];
	/* One chain per hot block; a block that runs into the next without a
	 * branch keeps it right after it. */
	for (uint32_t i = 0; i < n; i++) {
		chain_of[i] = -1;
		x.cid[i] = UINT32_MAX;
		if (!b[i].hot)
			continue;
		struct chain *c = &x.c[i];
		if (!(c->blk = malloc(sizeof(uint32_t))))
			goto out;
		c->blk[0] = i;
		c->len = c->cap = 1;
		c->count = b[i].count;
		c->bytes = b[i].size;
		c->alive = true;
		x.cid[i] = i;
	}
	for (uint32_t i = 0; i < n; i++) {
		int32_t y = b[i].falls_to;
		if (!b[i].hot || y < 0 || (size_t)y >= n || !b[y].hot || (uint32_t)y == entry || x.cid[i] == x.cid[y])
			continue;
		struct chain *a = &x.c[x.cid[i]], *c = &x.c[x.cid[y]];
		if (a->blk[a->len - 1] != i || c->blk[0] != (uint32_t)y)
			continue;
		struct cached m = { .x = x.cid[i], .y = x.cid[y], .first = x.cid[i], .type = 0 };
		if (apply(&x, &m) < 0)
			goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (x.c[i].alive)
			x.c[i].score = seq_score(&x, x.c[i].blk, x.c[i].len);
	/* Merge the best pair while a merge gains anything. */
	for (;;) {
		struct cached best = { .gain = 0 };
		for (size_t i = 0; i < x.nout; i++) {
			uint32_t ca = x.cid[x.out[i].from], cb = x.cid[x.out[i].to];
			if (ca == cb)
				continue;
			struct cached *s = slot_of(&x, ca, cb);
			if (s->vx != x.c[s->x].version + 1 || s->vy != x.c[s->y].version + 1) {
				best_merge(&x, s->x, s->y, s);
				s->vx = x.c[s->x].version + 1; /* + 1: a fresh slot's 0 never matches */
				s->vy = x.c[s->y].version + 1;
			}
			if (s->gain > 1e-9 && s->gain > best.gain)
				best = *s; /* a copy: a later slot_of may empty the table */
		}
		if (!(best.gain > 1e-9))
			break;
		if (apply(&x, &best) < 0)
			goto out;
	}
	/* Entry's chain first, then the others densest first. */
	uint32_t nids = 0, k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (x.c[i].alive && x.c[i].blk[0] != entry)
			ids[nids++] = (struct by_density){ x.c[i].count / (double)(x.c[i].bytes ? x.c[i].bytes : 1),
							   x.c[i].blk[0], i };
	qsort(ids, nids, sizeof(*ids), cmp_density);
	uint32_t nc = 0;
	if (entry < n && b[entry].hot && x.cid[entry] != UINT32_MAX) {
		const struct chain *c = &x.c[x.cid[entry]];
		for (uint32_t j = 0; j < c->len; j++) {
			order[k++] = c->blk[j];
			chain_of[c->blk[j]] = (int32_t)nc;
		}
		nc++;
	}
	for (uint32_t i = 0; i < nids; i++, nc++)
		for (uint32_t j = 0; j < x.c[ids[i].id].len; j++) {
			order[k++] = x.c[ids[i].id].blk[j];
			chain_of[x.c[ids[i].id].blk[j]] = (int32_t)nc;
		}
	*nchains = nc;
	placed = (int)k;
out:
	for (size_t i = 0; x.c && i < n; i++)
		free(x.c[i].blk);
	free(x.c);
	free(x.out_start);
	free(x.out);
	free(x.cid);
	free(x.addr);
	free(x.mark);
	free(x.seq);
	free(x.cache);
	free(ids);
	return placed;
}

double hp_ext_tsp_score(const struct hp_chain_block *b, size_t n, const struct hp_chain_edge *e, size_t ne,
			const uint32_t *order, size_t k)
{
	uint64_t *addr = malloc((n + 1) * sizeof(*addr)), at = 0;
	uint8_t *in = calloc(n + 1, 1);
	double s = 0;

	if (!addr || !in) {
		free(addr);
		free(in);
		return -1;
	}
	for (size_t i = 0; i < k; i++) {
		if (order[i] >= n)
			continue;
		in[order[i]] = 1;
		addr[order[i]] = at;
		at += b[order[i]].size;
	}
	for (size_t i = 0; i < ne; i++)
		if (e[i].from < n && e[i].to < n && in[e[i].from] && in[e[i].to] && e[i].count > 0)
			s += edge_score(e[i].count, addr[e[i].from] + b[e[i].from].size, addr[e[i].to]);
	free(addr);
	free(in);
	return s;
}

double hp_layout_taken(size_t n, const struct hp_chain_edge *e, size_t ne, const uint32_t *order, size_t k, size_t brk)
{
	int64_t *after = malloc((n + 1) * sizeof(*after));
	double t = 0;

	if (!after)
		return -1;
	for (size_t i = 0; i < n; i++)
		after[i] = -1;
	for (size_t i = 0; i + 1 < k; i++)
		if (i + 1 != brk && order[i] < n)
			after[order[i]] = order[i + 1];
	for (size_t i = 0; i < ne; i++)
		if (e[i].from < n && e[i].count > 0 && after[e[i].from] != (int64_t)e[i].to)
			t += e[i].count;
	free(after);
	return t;
}
