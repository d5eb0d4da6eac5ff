// SPDX-License-Identifier: Apache-2.0
/*
 * Instrumented copies (instrument.h): the plan of one function laid out in
 * its original block order with a counter increment before every block,
 * made by the same emitter and checked by the same verifier as a layout
 * plan, so the install engine installs and reverts it like any plan.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa/isa.h"
#include "plan/instrument.h"

#define AREA_ALIGN 4096u

int hp_flags_live_in(const struct hp_module *mod, const struct hp_function *f, const uint8_t *code, unsigned *live)
{
	uint32_t n = f->nblocks;
	unsigned *use = calloc(n + 1, sizeof(unsigned)), *def = calloc(n + 1, sizeof(unsigned));

	if (!use || !def) {
		free(use);
		free(def);
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < n; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		for (uint32_t off = bl->offset; off < bl->offset + bl->size;) {
			struct hp_isa_insn in;
			unsigned rd, wr;
			if (hp_isa_decode(code + off, f->size - off, f->addr + off, &in) < 0 ||
			    hp_isa_flags(code + off, f->size - off, &rd, &wr) < 0) {
				use[b] |= HP_ISA_STATUS_FLAGS & ~def[b]; /* unknown: assume it reads them all */
				break;
			}
			use[b] |= rd & ~def[b];
			def[b] |= wr;
			if (in.cls == HP_IC_CALL || in.cls == HP_IC_CALL_IND)
				def[b] = HP_ISA_STATUS_FLAGS; /* no flag survives a call (SysV ABI) */
			off += in.len;
		}
		live[b] = use[b];
	}
	/* live_in(b) = use(b) | (live_out(b) & ~def(b)), to the fixed point. */
	for (bool changed = true; changed;) {
		changed = false;
		for (uint32_t b = n; b-- > 0;) {
			const struct hp_block *bl = &mod->blocks[f->block_start + b];
			unsigned out = 0;
			for (uint16_t s = 0; s < bl->nsucc; s++) {
				const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
				if (sc->kind == HP_SUCC_FALLTHROUGH || sc->kind == HP_SUCC_TAKEN) {
					const struct hp_block *t = hp_function_block_at(mod, f, f->addr + sc->target);
					out |= t ? live[t - &mod->blocks[f->block_start]] : HP_ISA_STATUS_FLAGS;
				} else if (sc->kind == HP_SUCC_INDIRECT) {
					out |= HP_ISA_STATUS_FLAGS;
				}
			}
			unsigned in = use[b] | (out & ~def[b]);
			if (in != live[b]) {
				live[b] = in;
				changed = true;
			}
		}
	}
	free(use);
	free(def);
	return 0;
}

static int counter_len(const struct hp_instrument *ins, bool keep)
{
	uint8_t buf[64];
	uint32_t d;
	return hp_isa_encode_counter(ins->lock, keep, ins->red_zone, 0x1000, 0x2000, buf, sizeof(buf), &d);
}

/* The counter before block bi (or stub bi - nblocks): its slot and whether
 * it keeps the flags; false when there is none. */
static bool counter_at(const struct hp_instrument *ins, uint32_t member, uint32_t bi, uint32_t *slot, bool *keep)
{
	if (!ins || member)
		return false;
	if (bi < ins->nblocks) {
		if (ins->block_slot[bi] < 0)
			return false;
		*slot = (uint32_t)ins->block_slot[bi];
		*keep = ins->live[bi] != 0;
		return true;
	}
	if (bi - ins->nblocks >= ins->nstubs)
		return false;
	const struct hp_counter_stub *st = &ins->stubs[bi - ins->nblocks];
	*slot = st->slot;
	*keep = ins->live[st->to] != 0; /* it runs on the way into its block */
	return true;
}

uint32_t hp_instrument_prefix_len(const struct hp_plan *p, uint32_t member, uint32_t bi)
{
	uint32_t slot;
	bool keep;
	if (!counter_at(p->instrument, member, bi, &slot, &keep))
		return 0;
	int n = counter_len(p->instrument, keep);
	return n > 0 ? (uint32_t)n : 0;
}

static uint64_t slot_addr(const struct hp_plan *p, uint32_t slot)
{
	return p->base + p->instrument->area_off + 8ull * slot;
}

int hp_instrument_write(struct hp_plan *p, uint32_t member, uint32_t bi, uint64_t at, uint8_t *out)
{
	struct hp_instrument *ins = p->instrument;
	uint32_t d, slot;
	bool keep;

	if (!counter_at(ins, member, bi, &slot, &keep))
		return 0;
	if (!ins->area_off) { /* the first page boundary after the code */
		uint64_t lead = p->base % AREA_ALIGN;
		ins->area_off = (lead + p->code_len + AREA_ALIGN - 1) / AREA_ALIGN * AREA_ALIGN - lead;
	}
	int n = hp_isa_encode_counter(ins->lock, keep, ins->red_zone, at, slot_addr(p, slot), out,
				      p->code_len + 16 - (at - p->base), &d);
	if (n < 0)
		return -ERANGE;
	ins->disp[slot] = (uint32_t)(at - p->base) + d;
	if (bi >= ins->nblocks)
		ins->stubs[bi - ins->nblocks].addr = at;
	return n;
}

int hp_instrument_check(const struct hp_plan *p, uint32_t member, uint32_t bi, uint64_t at)
{
	const struct hp_instrument *ins = p->instrument;
	uint8_t want[64];
	uint32_t d, slot;
	bool keep;

	if (!ins)
		return 0;
	if (member)
		return -1;
	if (!counter_at(ins, member, bi, &slot, &keep))
		return 0; /* no counter here: the original instructions must follow */
	int n = hp_isa_encode_counter(ins->lock, keep, ins->red_zone, at, slot_addr(p, slot), want, sizeof(want), &d);
	if (n < 0 || at < p->base || at + (uint64_t)n > p->base + p->code_len ||
	    memcmp(p->code + (at - p->base), want, (size_t)n))
		return -1;
	return n;
}

uint64_t hp_instrument_blocks_end(const struct hp_plan *p)
{
	const struct hp_instrument *ins = p->instrument;
	return ins && ins->nstubs ? ins->stubs[0].addr : hp_plan_text_end(p);
}

/* The jump ending the stub at a (after its counter): its target, or 0. */
static uint64_t stub_target(const struct hp_plan *p, uint32_t s, uint64_t a, uint64_t *end)
{
	const struct hp_instrument *ins = p->instrument;
	struct hp_isa_insn in;
	int n = hp_instrument_check(p, 0, ins->nblocks + s, a);

	if (n <= 0)
		return 0;
	a += (uint64_t)n;
	if (a >= p->base + p->code_len ||
	    hp_isa_decode(p->code + (a - p->base), p->base + p->code_len - a, a, &in) < 0 || in.cls != HP_IC_JMP ||
	    !in.has_target)
		return 0;
	*end = a + in.len;
	return in.target;
}

bool hp_instrument_verify_stubs(const struct hp_plan *p, char *why, size_t wlen)
{
	const struct hp_instrument *ins = p->instrument;
	uint64_t at = hp_instrument_blocks_end(p);

	for (uint32_t s = 0; ins && s < ins->nstubs; s++) {
		const struct hp_counter_stub *st = &ins->stubs[s];
		const struct hp_plan_member *mb = &p->members[0];
		uint64_t end = 0, t = st->addr == at ? stub_target(p, s, at, &end) : 0;
		if (!t || t != mb->blocks[st->to].new_addr) {
			snprintf(why, wlen,
				 "the stub counting the edge +0x%x -> +0x%x at 0x%" PRIx64
				 " is not its counter and a jump there",
				 mb->mod->blocks[mb->fn->block_start + st->from].offset,
				 mb->mod->blocks[mb->fn->block_start + st->to].offset, st->addr);
			return false;
		}
		at = end;
	}
	if (at != hp_plan_text_end(p)) {
		snprintf(why, wlen, "bytes after the stubs: the code ends at 0x%" PRIx64 ", the stubs at 0x%" PRIx64,
			 hp_plan_text_end(p), at);
		return false;
	}
	return true;
}

uint64_t hp_instrument_through_stub(const struct hp_plan *p, uint32_t from_bi, uint64_t a)
{
	const struct hp_instrument *ins = p->instrument;
	uint64_t end;

	for (uint32_t s = 0; ins && s < ins->nstubs; s++)
		if (ins->stubs[s].addr == a && ins->stubs[s].from == from_bi) {
			uint64_t t = stub_target(p, s, a, &end);
			return t ? t : a;
		}
	return a;
}

/* Union-find for the spanning tree. */
static uint32_t root_of(uint32_t *up, uint32_t x)
{
	while (up[x] != x)
		x = up[x] = up[up[x]];
	return x;
}

struct wedge {
	uint32_t e;
	bool fixed; /* no place for its counter: the tree takes it first */
	bool back;
	double w;
};

static int by_weight(const void *a, const void *b)
{
	const struct wedge *x = a, *y = b;
	if (x->fixed != y->fixed)
		return x->fixed ? -1 : 1;
	if (x->back != y->back)
		return x->back ? -1 : 1;
	if (x->w != y->w)
		return x->w > y->w ? -1 : 1;
	return x->e < y->e ? -1 : x->e > y->e;
}

/* The jcc ending block b (from its original bytes): its taken and
 * fallthrough targets as block indices; false when b does not end in one
 * with two distinct targets. */
static bool jcc_sides(const struct hp_module *mod, const struct hp_function *f, const uint8_t *code, uint32_t b,
		      uint32_t *taken, uint32_t *fall)
{
	const struct hp_block *bl = &mod->blocks[f->block_start + b];
	struct hp_isa_insn in = { 0 };
	uint32_t off = bl->offset;

	while (off < bl->offset + bl->size) {
		if (hp_isa_decode(code + off, f->size - off, f->addr + off, &in) < 0)
			return false;
		off += in.len;
	}
	if (in.cls != HP_IC_JCC || !in.has_target || hp_isa_jcc_condition(code + off - in.len, in.len) < 0)
		return false;
	const struct hp_block *t = hp_function_block_at(mod, f, in.target),
			      *n = hp_function_block_at(mod, f, f->addr + bl->offset + bl->size);
	if (!t || !n || f->addr + t->offset != in.target || t == n)
		return false;
	*taken = (uint32_t)(t - &mod->blocks[f->block_start]);
	*fall = (uint32_t)(n - &mod->blocks[f->block_start]);
	return true;
}

/* The counting edges of f and where their counters go (see instrument.h).
 * Returns 0, 1 when some counter cannot be placed (the caller counts every
 * block instead), or -ENOMEM. */
static int place_on_edges(struct hp_instrument *ins, const struct hp_module *mod, const struct hp_function *f,
			  const uint8_t *code)
{
	uint32_t n = f->nblocks, V = n, cap = 0, ne = 0, sc = 0;
	struct hp_counter_edge *e = NULL;
	uint32_t *indeg = calloc(n + 1, sizeof(uint32_t)), *outdeg = calloc(n + 1, sizeof(uint32_t));
	uint32_t *depth = calloc(n + 1, sizeof(uint32_t)), *up = calloc(n + 1, sizeof(uint32_t));
	uint32_t *state = calloc(n + 1, sizeof(uint32_t)), *stack = calloc(n + 1, sizeof(uint32_t));
	uint32_t *iter = calloc(n + 1, sizeof(uint32_t));
	struct wedge *w = NULL;
	int r = -ENOMEM;

	if (!indeg || !outdeg || !depth || !up || !state || !stack || !iter)
		goto out;
#define ADD_EDGE(a, b)                                                                     \
	do {                                                                               \
		bool dup_ = false;                                                         \
		for (uint32_t k_ = 0; k_ < ne; k_++)                                       \
			dup_ |= e[k_].from == (a) && e[k_].to == (b);                      \
		if (!dup_) {                                                               \
			if (ne == cap) {                                                   \
				cap = cap ? 2 * cap : 16;                                  \
				struct hp_counter_edge *x_ = realloc(e, cap * sizeof(*e)); \
				if (!x_)                                                   \
					goto out;                                          \
				e = x_;                                                    \
			}                                                                  \
			e[ne++] = (struct hp_counter_edge){ (a), (b), -1, false };         \
		}                                                                          \
	} while (0)
	ADD_EDGE(V, 0);
	for (uint32_t b = 0; b < n; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		bool out = bl->nsucc == 0;
		for (uint16_t s = 0; s < bl->nsucc; s++) {
			const struct hp_succ *su = &mod->succs[bl->succ_start + s];
			const struct hp_block *t = su->kind == HP_SUCC_FALLTHROUGH || su->kind == HP_SUCC_TAKEN ?
							   hp_function_block_at(mod, f, f->addr + su->target) :
							   NULL;
			if (t)
				ADD_EDGE(b, (uint32_t)(t - &mod->blocks[f->block_start]));
			else
				out = true;
		}
		if (out)
			ADD_EDGE(b, V);
	}
	for (uint32_t k = 0; k < ne; k++) {
		outdeg[e[k].from == V ? n : e[k].from]++;
		indeg[e[k].to == V ? n : e[k].to]++;
	}
	for (uint32_t b = 1; b < n; b++)
		if (!indeg[b]) { /* reached only indirectly (a jump table nothing resolved) */
			ADD_EDGE(V, b);
			indeg[b]++;
			outdeg[n]++;
		}
	/* Loop depth: back edges of a DFS from the entry, each loop's body the
	 * blocks that reach its tail without passing its head. */
	w = calloc(ne + 1, sizeof(*w));
	if (!w)
		goto out;
	uint32_t sp = 0;
	stack[sp++] = 0;
	state[0] = 1;
	while (sp) {
		uint32_t u = stack[sp - 1];
		bool pushed = false;
		while (iter[u] < ne && !pushed) {
			uint32_t k = iter[u]++;
			if (e[k].from != u || e[k].to == V)
				continue;
			uint32_t v = e[k].to;
			if (state[v] == 1) {
				w[k].back = true;
			} else if (!state[v]) {
				state[v] = 1;
				stack[sp++] = v;
				pushed = true;
			}
		}
		if (!pushed) {
			state[u] = 2;
			sp--;
		}
	}
	for (uint32_t k = 0; k < ne; k++) {
		if (!w[k].back)
			continue;
		uint32_t h = e[k].to, t = e[k].from, m = 0;
		memset(iter, 0, (n + 1) * sizeof(uint32_t)); /* here: in this loop's body */
		iter[h] = 1;
		depth[h]++;
		if (!iter[t]) {
			iter[t] = 1;
			depth[t]++;
			stack[m++] = t;
		}
		while (m) {
			uint32_t x = stack[--m];
			for (uint32_t j = 0; j < ne; j++)
				if (e[j].to == x && e[j].from != V && !iter[e[j].from]) {
					iter[e[j].from] = 1;
					depth[e[j].from]++;
					stack[m++] = e[j].from;
				}
		}
	}
	for (uint32_t k = 0; k < ne; k++) {
		uint32_t u = e[k].from == V ? n : e[k].from, tk, fl;
		double d = e[k].from == V ? 0 : depth[u] > 12 ? 12 : depth[u];
		/* An edge no end of which it alone enters or leaves, and no jcc's
		 * side (a jump table's, mostly), can have no counter: in the tree,
		 * it needs none, and the function is not counted at every block. */
		w[k].fixed = !(e[k].to != V && indeg[e[k].to] == 1) && !(e[k].from != V && outdeg[e[k].from] == 1) &&
			     !(e[k].from != V && e[k].to != V && jcc_sides(mod, f, code, e[k].from, &tk, &fl) &&
			       (e[k].to == tk || e[k].to == fl));
		w[k].e = k;
		w[k].w = 1;
		for (uint32_t i = 0; i < (uint32_t)d; i++)
			w[k].w *= 10;
		w[k].w /= outdeg[u] ? outdeg[u] : 1;
	}
	qsort(w, ne, sizeof(*w), by_weight);
	for (uint32_t x = 0; x <= n; x++)
		up[x] = x;
	/* Maximum spanning tree: the rest get counters. */
	for (uint32_t i = 0; i < ne; i++) {
		struct hp_counter_edge *c = &e[w[i].e];
		uint32_t a = root_of(up, c->from == V ? n : c->from), b = root_of(up, c->to == V ? n : c->to);
		if (a != b)
			up[a] = b;
		else
			c->slot = (int32_t)sc++;
	}
	ins->block_slot = malloc((n + 1) * sizeof(int32_t));
	ins->stubs = calloc(sc + 1, sizeof(*ins->stubs));
	if (!ins->block_slot || !ins->stubs)
		goto out;
	for (uint32_t b = 0; b < n; b++)
		ins->block_slot[b] = -1;
	r = 0;
	for (uint32_t k = 0; k < ne && !r; k++) {
		struct hp_counter_edge *c = &e[k];
		uint32_t tk, fl;
		if (c->slot < 0)
			continue;
		if (c->from == c->to && c->to != V && indeg[c->to] > 1 && outdeg[c->to] > 1 &&
		    ins->block_slot[c->to] < 0) { /* a one-block loop: its block's counter */
			ins->block_slot[c->to] = c->slot;
			c->whole_block = true;
		} else if (c->to != V && indeg[c->to] == 1 && ins->block_slot[c->to] < 0)
			ins->block_slot[c->to] = c->slot;
		else if (c->from != V && outdeg[c->from] == 1 && ins->block_slot[c->from] < 0)
			ins->block_slot[c->from] = c->slot;
		else if (c->from != V && c->to != V && jcc_sides(mod, f, code, c->from, &tk, &fl) &&
			 (c->to == tk || c->to == fl))
			ins->stubs[ins->nstubs++] =
				(struct hp_counter_stub){ c->from, c->to, c->to == tk, (uint32_t)c->slot, 0 };
		else
			r = 1;
	}
#undef ADD_EDGE
	if (!r) {
		ins->cedges = e;
		ins->ncedges = ne;
		ins->nslots = sc;
		e = NULL;
	}
out:
	free(e);
	free(indeg);
	free(outdeg);
	free(depth);
	free(up);
	free(state);
	free(stack);
	free(iter);
	free(w);
	return r;
}

int hp_instrument_counts(const struct hp_instrument *ins, const uint64_t *slots, uint64_t *blocks,
			 uint64_t *edge_counts)
{
	if (!ins->edges) {
		for (uint32_t b = 0; b < ins->nblocks; b++)
			blocks[b] = slots[ins->block_slot[b]];
		return 0;
	}
	uint32_t ne = ins->ncedges, n = ins->nblocks, left = 0;
	int64_t *c = calloc(ne + 1, sizeof(int64_t));
	bool *known = calloc(ne + 1, sizeof(bool));
	if (!c || !known) {
		free(c);
		free(known);
		return -ENOMEM;
	}
	for (uint32_t k = 0; k < ne; k++) {
		known[k] = ins->cedges[k].slot >= 0 && !ins->cedges[k].whole_block;
		c[k] = known[k] ? (int64_t)slots[ins->cedges[k].slot] : 0;
		left += !known[k];
	}
	/* Flow conservation at a node with one unknown edge, until none is left;
	 * a block's edge to itself enters and leaves it, so it is in no node's
	 * balance (a one-block loop's comes from its block's counter, below). */
	for (bool progress = true; left && progress;) {
		progress = false;
		for (uint32_t x = 0; x <= n; x++) {
			uint32_t node = x == n ? HP_COUNTER_OUTSIDE : x, unknown = 0, which = 0;
			int64_t in = 0, out = 0;
			for (uint32_t k = 0; k < ne; k++) {
				const struct hp_counter_edge *g = &ins->cedges[k];
				if ((g->from != node && g->to != node) || g->from == g->to)
					continue;
				if (!known[k]) {
					unknown++;
					which = k;
					continue;
				}
				if (g->to == node)
					in += c[k];
				if (g->from == node)
					out += c[k];
			}
			if (unknown != 1)
				continue;
			int64_t v = ins->cedges[which].to == node ? out - in : in - out;
			c[which] = v < 0 ? 0 : v;
			known[which] = true;
			left--;
			progress = true;
		}
	}
	/* A one-block loop's edge: its block's arrivals less the others. */
	for (uint32_t k = 0; k < ne && left; k++) {
		const struct hp_counter_edge *g = &ins->cedges[k];
		if (!g->whole_block)
			continue;
		int64_t v = (int64_t)slots[g->slot];
		bool all = true;
		for (uint32_t j = 0; j < ne; j++)
			if (j != k && ins->cedges[j].to == g->to) {
				all &= known[j];
				v -= c[j];
			}
		if (all) {
			c[k] = v < 0 ? 0 : v;
			known[k] = true;
			left--;
		}
	}
	int r = left ? -EINVAL : 0;
	for (uint32_t b = 0; b < n; b++) {
		blocks[b] = 0;
		for (uint32_t k = 0; k < ne; k++)
			if (ins->cedges[k].to == b)
				blocks[b] += (uint64_t)c[k];
	}
	for (uint32_t k = 0; edge_counts && k < ne; k++)
		edge_counts[k] = (uint64_t)c[k];
	free(c);
	free(known);
	return r;
}

size_t hp_instrument_area_len(const struct hp_plan *p)
{
	const struct hp_instrument *ins = p->instrument;
	if (!ins)
		return 0;
	return (8ull * ins->nslots + AREA_ALIGN - 1) / AREA_ALIGN * AREA_ALIGN;
}

void hp_instrument_plan_free(struct hp_plan *p)
{
	if (p->instrument) {
		free(p->instrument->live);
		free(p->instrument->disp);
		free(p->instrument->block_slot);
		free(p->instrument->cedges);
		free(p->instrument->stubs);
		free(p->instrument);
	}
	hp_plan_free(p);
}

int hp_instrument_move_area(struct hp_plan *p, uint64_t new_off)
{
	struct hp_instrument *ins = p->instrument;
	int64_t shift = (int64_t)(new_off - ins->area_off);
	int32_t d;

	for (int pass = 0; pass < 2; pass++) /* check every displacement, then write them */
		for (uint32_t s = 0; s < ins->nslots; s++) {
			if (!ins->disp[s]) /* no increment of this slot was emitted (none is at offset 0) */
				continue;
			memcpy(&d, p->code + ins->disp[s], 4);
			int64_t v = (int64_t)d + shift;
			if (v < INT32_MIN || v > INT32_MAX)
				return -ERANGE;
			d = (int32_t)v;
			if (pass)
				memcpy(p->code + ins->disp[s], &d, 4);
		}
	ins->area_off = new_off;
	return 0;
}

/* The install places the copy's unwind data right after its code (the
 * heap holds both; install_engine.c), so the counter area starts at the
 * first page boundary after the unwind data (a move of a few pages, always
 * within reach). */
static void area_after_unwind(struct hp_plan *p)
{
	struct hp_instrument *ins = p->instrument;
	uint64_t lead = p->base % AREA_ALIGN;

	if (!p->unwind_len || !ins->area_off)
		return;
	uint64_t want = (lead + p->unwind_off + p->unwind_len + AREA_ALIGN - 1) / AREA_ALIGN * AREA_ALIGN - lead;
	if (want > ins->area_off)
		hp_instrument_move_area(p, want);
}

int hp_instrument_plan(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f, bool lock,
		       bool every_block, uint64_t base, struct hp_plan *p, char *err, size_t errlen)
{
	struct hp_instrument *ins;
	struct hp_plan_member *mb;
	uint8_t *code = NULL;
	char detail[160] = "";
	int r = -ENOMEM;

	err[0] = '\0';
	memset(p, 0, sizeof(*p));
	hp_plan_opts_default(&p->opts);
	p->opts.no_align = true; /* the original order, no padding */
	if (base < AREA_ALIGN) {
		/* After the module (where the emitter lays out a plan without a
		 * base), base bytes into its page. */
		const struct hp_function *last = &mod->funcs[mod->nfuncs - 1];
		base += (last->addr + last->size + 0xffff) & ~(uint64_t)0xfff;
	}
	p->opts.base = base;
	const char *rule = hp_plan_kept_rule(m, mod, f, detail, sizeof(detail));
	if (rule) {
		p->status = HP_PLAN_ROOT_KEPT;
		snprintf(p->message, sizeof(p->message), "%s cannot move (%s%s%s): no instrumented copy is made",
			 f->name, rule, detail[0] ? ": " : "", detail);
		return 0;
	}
	if (!f->nblocks) {
		snprintf(err, errlen, "%s has no blocks in the model", f->name);
		return -EINVAL;
	}
	p->instrument = ins = calloc(1, sizeof(*ins));
	p->members = mb = calloc(1, sizeof(*mb));
	code = malloc(f->size + 16);
	if (!ins || !mb || !code)
		goto fail;
	p->nmembers = 1;
	ins->lock = lock;
	ins->red_zone = 128;
	ins->nblocks = f->nblocks;
	ins->live = calloc(f->nblocks, sizeof(unsigned));
	mb->count = calloc(f->nblocks, sizeof(double));
	mb->blocks = calloc(f->nblocks, sizeof(*mb->blocks));
	mb->chains = calloc(1, sizeof(*mb->chains));
	if (!ins->live || !mb->count || !mb->blocks || !mb->chains)
		goto fail;
	memset(code + f->size, 0, 16);
	if ((r = m->read(m, f->addr, code, f->size)) < 0) {
		snprintf(err, errlen, "reading %s: %s", f->name, strerror(-r));
		goto fail;
	}
	if ((r = hp_flags_live_in(mod, f, code, ins->live)) < 0)
		goto fail;
	ins->edges = !every_block;
	if (ins->edges && (r = place_on_edges(ins, mod, f, code)) != 0) {
		if (r < 0)
			goto fail;
		/* A counter no end of its edge can hold: one per block instead. */
		free(ins->block_slot);
		free(ins->stubs);
		ins->block_slot = NULL;
		ins->stubs = NULL;
		ins->nstubs = 0;
		ins->edges = false;
	}
	r = -ENOMEM;
	if (!ins->edges) {
		ins->nslots = f->nblocks;
		if (!(ins->block_slot = malloc(f->nblocks * sizeof(int32_t))))
			goto fail;
		for (uint32_t b = 0; b < f->nblocks; b++)
			ins->block_slot[b] = (int32_t)b;
	}
	if (!(ins->disp = calloc(ins->nslots + 1, sizeof(uint32_t))))
		goto fail;
	for (uint32_t b = 0; b < f->nblocks; b++)
		ins->kept_flags += ins->block_slot[b] >= 0 && ins->live[b] != 0;
	for (uint32_t s = 0; s < ins->nstubs; s++)
		ins->kept_flags += ins->live[ins->stubs[s].to] != 0;
	mb->mod = mod;
	mb->fn = mb->parent = f;
	mb->nblocks = mb->nhot = f->nblocks;
	for (uint32_t b = 0; b < f->nblocks; b++) {
		mb->blocks[b] = (struct hp_plan_block){ .index = b, .hot = true, .chain = 0 };
		mb->hot_bytes += mod->blocks[f->block_start + b].size;
	}
	mb->chains[0] = (struct hp_plan_chain){ 0, f->nblocks, 0, mb->hot_bytes };
	mb->nchains = 1;
	hp_cfg_signature(mod, f, mb->signature);
	if ((r = hp_plan_emit(m, p, err, errlen)) < 0 || (r = hp_plan_unwind(m, p, err, errlen)) < 0)
		goto fail;
	area_after_unwind(p);
	p->verified = hp_plan_verify(m, p) && hp_plan_verify_unwind(m, p);
	if (!p->verified) {
		p->status = HP_PLAN_REFUSED;
		snprintf(p->message, sizeof(p->message), "the instrumented copy failed verification: %s",
			 p->verify_error);
	}
	free(code);
	return 0;
fail:
	if (r == -ENOMEM && !err[0])
		snprintf(err, errlen, "out of memory");
	free(code);
	hp_instrument_plan_free(p);
	return r;
}
