// SPDX-License-Identifier: Apache-2.0
/*
 * Switch-table recognition (see jumptable.h): a backward walk over at most a
 * dozen instructions before an indirect jump, following the jump's register
 * to the load of the table entry, the entry's base to its lea, and the index
 * to the nearest "cmp index, limit" that guards the jump with ja/jae.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "isa/isa.h"
#include "model/jumptable.h"
#include "model/model.h"

#define WINDOW 16

/* Does "cmp r, imm" at d[c] bound the index register at the jump (before
 * position end)? When r is the index itself, unless something writes it
 * after the check and before the entry's load; or when the index is a copy
 * of r made there (mov or movzx, as "movzx ecx, dl" in SQLite's VDBE loop). */
static bool index_bounded(const struct hp_isa_detail *d, size_t c, size_t end, uint16_t index)
{
	uint16_t r = d[c].op[0].reg;
	bool bounded = r == index;

	for (size_t i = c + 2; i < end; i++) {
		const struct hp_isa_detail *x = &d[i];
		if (x->nops == 2 && x->op[1].kind == HP_OP_MEM && x->op[1].index == index)
			break; /* the entry's load: what follows is past the index */
		if (x->nops < 1 || x->op[0].kind != HP_OP_REG || x->op[0].reg != index)
			continue;
		bounded = (x->mnem == HP_MN_MOV || x->mnem == HP_MN_MOVZX) && x->nops == 2 &&
			  x->op[1].kind == HP_OP_REG && x->op[1].reg == r;
	}
	return bounded;
}

/* The bound: the last "cmp r, imm" directly followed by ja or jae before
 * position end, where r is the index register (or any register when the
 * index was copied, e.g. "mov eax, edi"). */
static bool find_bound(const struct hp_isa_detail *d, size_t end, uint16_t index, uint32_t *n, bool *exact)
{
	for (size_t i = end; i-- > 0;) {
		if (d[i].mnem != HP_MN_CMP || i + 1 >= end || d[i].nops != 2 || d[i].op[0].kind != HP_OP_REG ||
		    d[i].op[1].kind != HP_OP_IMM)
			continue;
		if (d[i + 1].mnem != HP_MN_JA && d[i + 1].mnem != HP_MN_JAE)
			continue;
		*exact = index_bounded(d, i, end, index);
		/* ja/jae compare unsigned: the immediate as an operand-size unsigned value
		 * ("cmp dl, 0xb8" holds -72 sign-extended). */
		int64_t lim = d[i].op[1].imm;
		if (d[i].op[0].bytes && d[i].op[0].bytes < 8)
			lim &= (int64_t)((1ull << (8 * d[i].op[0].bytes)) - 1);
		uint64_t cnt = d[i + 1].mnem == HP_MN_JA ? (uint64_t)lim + 1 : (uint64_t)lim;
		if (lim < 0 || cnt == 0 || cnt > HP_JT_MAX_ENTRIES)
			return false;
		*n = (uint32_t)cnt;
		return true;
	}
	return false;
}

/* A label table read at d[at] through base (jumptable.h): the lea setting
 * base in the window before it names the table, or (none writes it there)
 * the base is hoisted and found over the CFG; anything else setting base in
 * the window is not this pattern. */
static bool label_base(const uint8_t *code, uint32_t size, const uint32_t *offs, size_t first,
		       const struct hp_isa_detail *d, size_t at, uint16_t base, uint16_t idx, struct hp_jt_match *out,
		       uint16_t *index)
{
	out->entry_size = 8;
	out->label = true;
	out->base_reg = base;
	*index = idx;
	for (size_t j = at; j-- > 0;) {
		const struct hp_isa_detail *y = &d[j];
		int w = hp_isa_writes_reg(code + offs[first + j], size - offs[first + j], base);
		if (w == 0)
			continue;
		if (w < 0 || y->mnem != HP_MN_LEA || y->op[0].kind != HP_OP_REG || y->op[0].reg != base ||
		    y->op[0].bytes != 8 || y->op[1].kind != HP_OP_MEM || !y->op[1].rip)
			return false;
		out->table = (uint64_t)y->op[1].disp;
		out->base_at = (uint32_t)(first + j);
		return true;
	}
	out->hoisted = true;
	out->base_at = (uint32_t)(first + at);
	return true;
}

/* "qword [base + idx*8]", no displacement: a label table's entry. */
static bool label_operand(const struct hp_isa_operand *o)
{
	return o->kind == HP_OP_MEM && !o->rip && o->base && o->index && o->base != o->index && o->scale == 8 &&
	       o->disp == 0;
}

/* The table's shape; *index gets the index register and *k the window's
 * length (the jump is d[*k - 1]). */
static bool shape(const uint8_t *code, uint32_t size, uint64_t faddr, const uint32_t *offs, size_t n,
		  struct hp_jt_match *out, struct hp_isa_detail *d, size_t *kk, uint16_t *index)
{
	size_t first = n > WINDOW ? n - WINDOW : 0, k = 0, i;

	if (n == 0)
		return false;
	for (i = first; i < n; i++, k++)
		if (hp_isa_decode_detail(code + offs[i], size - offs[i], faddr + offs[i], &d[k]) < 0)
			return false;
	*kk = k;
	const struct hp_isa_detail *jmp = &d[k - 1];
	if (jmp->mnem != HP_MN_JMP || jmp->nops != 1)
		return false;
	memset(out, 0, sizeof(*out));

	/* jmp qword [idx*8 + T] */
	if (jmp->op[0].kind == HP_OP_MEM && !jmp->op[0].rip && !jmp->op[0].base && jmp->op[0].index &&
	    jmp->op[0].scale == 8 && jmp->op[0].disp > 0) {
		out->table = (uint64_t)jmp->op[0].disp;
		out->entry_size = 8;
		out->base_at = (uint32_t)(first + k - 1);
		*index = jmp->op[0].index;
		return true;
	}
	/* jmp qword [base + idx*8]: a label table */
	if (label_operand(&jmp->op[0]))
		return label_base(code, size, offs, first, d, k - 1, jmp->op[0].base, jmp->op[0].index, out, index);
	if (jmp->op[0].kind != HP_OP_REG)
		return false;
	uint16_t r = jmp->op[0].reg;

	for (i = k - 1; i-- > 0;) {
		const struct hp_isa_detail *x = &d[i];

		/* mov r, qword [base + idx*8]; jmp r, with nothing writing r or
		 * base between them: a label table */
		if (x->mnem == HP_MN_MOV && x->nops == 2 && x->op[0].kind == HP_OP_REG && x->op[0].reg == r &&
		    x->op[0].bytes == 8 && label_operand(&x->op[1]) && x->op[1].base != r) {
			for (size_t j = i + 1; j + 1 < k; j++)
				if (hp_isa_writes_reg(code + offs[first + j], size - offs[first + j], r) != 0 ||
				    hp_isa_writes_reg(code + offs[first + j], size - offs[first + j], x->op[1].base) !=
					    0)
					return false;
			return label_base(code, size, offs, first, d, i, x->op[1].base, x->op[1].index, out, index);
		}

		/* mov r, qword [idx*8 + T] */
		if (x->mnem == HP_MN_MOV && x->nops == 2 && x->op[0].kind == HP_OP_REG && x->op[0].reg == r &&
		    x->op[1].kind == HP_OP_MEM && !x->op[1].rip && !x->op[1].base && x->op[1].index &&
		    x->op[1].scale == 8 && x->op[1].disp > 0) {
			out->table = (uint64_t)x->op[1].disp;
			out->entry_size = 8;
			out->base_at = (uint32_t)(first + i);
			*index = x->op[1].index;
			return true;
		}
		/* add r, base */
		if (x->mnem == HP_MN_ADD && x->nops == 2 && x->op[0].kind == HP_OP_REG && x->op[1].kind == HP_OP_REG &&
		    x->op[0].reg == r) {
			uint16_t base = x->op[1].reg, idx = 0;
			bool loaded = false;

			for (size_t j = i; j-- > 0;) {
				const struct hp_isa_detail *y = &d[j];

				/* Base set between its load and the add: not this pattern. */
				if (!loaded &&
				    hp_isa_writes_reg(code + offs[first + j], size - offs[first + j], base) != 0 &&
				    !(y->mnem == HP_MN_MOVSXD && y->op[0].kind == HP_OP_REG && y->op[0].reg == r))
					return false;
				/* movsxd r, dword [base + idx*4] */
				if (!loaded && y->mnem == HP_MN_MOVSXD && y->op[0].kind == HP_OP_REG &&
				    y->op[0].reg == r && y->op[1].kind == HP_OP_MEM && y->op[1].base == base &&
				    y->op[1].scale == 4 && y->op[1].disp == 0) {
					loaded = true;
					idx = y->op[1].index;
					continue;
				}
				/* lea base, [rip + T] */
				if (loaded && y->mnem == HP_MN_LEA && y->op[0].kind == HP_OP_REG &&
				    y->op[0].reg == base && y->op[1].kind == HP_OP_MEM && y->op[1].rip) {
					out->table = (uint64_t)y->op[1].disp;
					out->entry_size = 4;
					out->relative = true;
					out->base_at = (uint32_t)(first + j);
					out->base_reg = base;
					*index = idx;
					return true;
				}
				/* Anything else setting base before its load: the lea that
				 * matters is not in the window (or not a lea at all). */
				if (loaded &&
				    hp_isa_writes_reg(code + offs[first + j], size - offs[first + j], base) != 0)
					break;
			}
			/* The base is set before the window: hoisted (found over the CFG). */
			if (!loaded || base == r)
				return false;
			out->entry_size = 4;
			out->relative = true;
			out->hoisted = true;
			out->base_at = (uint32_t)(first + i);
			out->base_reg = base;
			*index = idx;
			return true;
		}
	}
	return false;
}

bool hp_jt_recognize_shape(const uint8_t *code, uint32_t size, uint64_t faddr, const uint32_t *offs, size_t n,
			   struct hp_jt_match *out)
{
	struct hp_isa_detail d[WINDOW];
	size_t k;
	uint16_t index;

	return shape(code, size, faddr, offs, n, out, d, &k, &index);
}

bool hp_jt_recognize(const uint8_t *code, uint32_t size, uint64_t faddr, const uint32_t *offs, size_t n,
		     struct hp_jt_match *out)
{
	struct hp_isa_detail d[WINDOW];
	size_t k;
	uint16_t index;

	if (!shape(code, size, faddr, offs, n, out, d, &k, &index))
		return false;
	/* A label table has no bound check: its size comes from the data. */
	return out->label || find_bound(d, k - 1, index, &out->nentries, &out->exact);
}

/* The block of g holding address a, or g->nblocks (blocks in address order). */
static size_t block_holding(const struct hp_jt_graph *g, uint64_t a)
{
	size_t lo = 0, hi = g->nblocks;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (g->end[mid] <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < g->nblocks && a >= g->start[lo] ? lo : g->nblocks;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* How control from elsewhere comes into block t at address a: at its start
 * (1), or in its middle (2: nothing in the block says what base holds there). */
static uint8_t entry_kind(const struct hp_jt_graph *g, size_t t, uint64_t a)
{
	return g->entry[t] == 2 || a != g->start[t] ? 2 : 1;
}

int hp_jt_foreign(const struct hp_module *mod, uint64_t **out, size_t *n)
{
	size_t k = 0, cap = mod->ncalls + 1;

	for (size_t i = 0; i < mod->nsuccs; i++)
		cap += mod->succs[i].kind == HP_SUCC_TAIL_CALL;
	if (!(*out = malloc(cap * sizeof(**out))))
		return -ENOMEM;
	for (size_t i = 0; i < mod->nsuccs; i++)
		if (mod->succs[i].kind == HP_SUCC_TAIL_CALL)
			(*out)[k++] = mod->succs[i].target;
	for (size_t i = 0; i < mod->ncalls; i++)
		(*out)[k++] = mod->calls[i].target;
	qsort(*out, k, sizeof(**out), cmp_u64);
	*n = k;
	return 0;
}

int hp_jt_graph_of(const struct hp_module *mod, const struct hp_function *f, const uint64_t *foreign, size_t nforeign,
		   struct hp_jt_graph *g)
{
	size_t n = f->nblocks, np = 0;
	uint32_t *fill = NULL;

	memset(g, 0, sizeof(*g));
	g->nblocks = n;
	g->complete = true;
	g->start = malloc((n + 1) * sizeof(*g->start));
	g->end = malloc((n + 1) * sizeof(*g->end));
	g->pred_start = calloc(n + 1, sizeof(*g->pred_start));
	g->entry = calloc(n + 1, 1);
	fill = calloc(n + 1, sizeof(*fill));
	if (!g->start || !g->end || !g->pred_start || !g->entry || !fill)
		goto nomem;
	for (size_t b = 0; b < n; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		g->start[b] = f->addr + bl->offset;
		g->end[b] = g->start[b] + bl->size;
	}
	/* Two passes over the successors: count, then place. */
	for (int pass = 0; pass < 2; pass++) {
		for (size_t b = 0; b < n; b++) {
			const struct hp_block *bl = &mod->blocks[f->block_start + b];
			for (uint16_t s = 0; s < bl->nsucc; s++) {
				const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
				size_t t;
				if (sc->kind == HP_SUCC_INDIRECT) {
					g->complete = false;
					continue;
				}
				if (sc->kind == HP_SUCC_TAIL_CALL) {
					/* Into the middle of f (of an instruction): an entry. */
					if (pass == 0 && sc->target > f->addr && sc->target < f->addr + f->size &&
					    (t = block_holding(g, sc->target)) < n)
						g->entry[t] = entry_kind(g, t, sc->target);
					continue;
				}
				if (sc->kind != HP_SUCC_TAKEN && sc->kind != HP_SUCC_FALLTHROUGH)
					continue;
				if ((t = block_holding(g, f->addr + sc->target)) >= n)
					continue;
				if (pass == 0)
					g->pred_start[t + 1]++, np++;
				else
					g->pred[g->pred_start[t] + fill[t]++] = (uint32_t)b;
			}
		}
		if (pass == 0) {
			for (size_t b = 0; b < n; b++)
				g->pred_start[b + 1] += g->pred_start[b];
			if (!(g->pred = malloc((np + 1) * sizeof(*g->pred))))
				goto nomem;
		}
	}
	if (n)
		g->entry[0] = 1;
	/* Jumps and calls of other functions (its .cold part) into f. */
	if (foreign) {
		size_t lo = 0, hi = nforeign;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (foreign[mid] <= f->addr)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (size_t t; lo < nforeign && foreign[lo] < f->addr + f->size; lo++)
			if ((t = block_holding(g, foreign[lo])) < n)
				g->entry[t] = entry_kind(g, t, foreign[lo]);
	}
	for (size_t k = 0; !foreign && k < mod->nfuncs; k++) {
		const struct hp_function *o = &mod->funcs[k];
		if (o == f)
			continue;
		for (uint32_t b = 0; b < o->nblocks; b++) {
			const struct hp_block *bl = &mod->blocks[o->block_start + b];
			for (uint16_t s = 0; s < bl->nsucc; s++) {
				const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
				size_t t;
				if (sc->kind == HP_SUCC_TAIL_CALL && (t = block_holding(g, sc->target)) < n)
					g->entry[t] = entry_kind(g, t, sc->target);
			}
		}
		for (uint32_t c = 0; c < o->ncalls; c++) {
			uint64_t to = mod->calls[o->call_start + c].target;
			size_t t = block_holding(g, to);
			if (t < n && to != f->addr)
				g->entry[t] = entry_kind(g, t, to);
		}
	}
	free(fill);
	return 0;
nomem:
	free(fill);
	hp_jt_graph_free(g);
	return -ENOMEM;
}

void hp_jt_graph_free(struct hp_jt_graph *g)
{
	free(g->start);
	free(g->end);
	free(g->pred_start);
	free(g->pred);
	free(g->entry);
	memset(g, 0, sizeof(*g));
}

enum { W_NONE, W_LEA, W_OTHER };

/* The last write to base in [from, to) of g's code: none, a "lea base,
 * [rip + T]" (*t, *at), or anything else (or bytes that do not decode). */
static int last_write(const struct hp_jt_graph *g, uint64_t from, uint64_t to, uint16_t base, uint64_t *t, uint64_t *at)
{
	int last = W_NONE;

	while (from < to) {
		const uint8_t *c = g->code + (from - g->addr);
		size_t room = g->addr + g->len - from;
		struct hp_isa_detail d;
		int w = hp_isa_writes_reg(c, room, base);

		if (w < 0 || hp_isa_decode_detail(c, room, from, &d) < 0)
			return W_OTHER;
		if (w) {
			last = W_OTHER;
			if (d.mnem == HP_MN_LEA && d.nops == 2 && d.op[0].kind == HP_OP_REG && d.op[0].bytes == 8 &&
			    d.op[1].kind == HP_OP_MEM && d.op[1].rip && d.has_rip_ref) {
				last = W_LEA;
				*t = d.rip_target;
				*at = from;
			}
		}
		from += d.len;
	}
	return last;
}

bool hp_jt_base_reaches(const struct hp_jt_graph *g, size_t b, uint64_t use, uint16_t base, uint64_t *table,
			uint64_t *lea)
{
	return hp_jt_base_walk(g, b, use, base, table, lea) == 1;
}

int hp_jt_base_walk(const struct hp_jt_graph *g, size_t b, uint64_t use, uint16_t base, uint64_t *table, uint64_t *lea)
{
	uint8_t *seen = calloc(g->nblocks + 1, 1);
	uint32_t *stack = malloc((g->nblocks + 1) * sizeof(*stack));
	size_t sp = 0;
	uint64_t t = 0, at = 0;
	bool ok = seen && stack && b < g->nblocks && base, found = false;

	*table = *lea = 0;
	/* The use's own block up to the use, then whole predecessors. */
	for (bool first = true; ok; first = false) {
		int w = last_write(g, g->start[b], first ? use : g->end[b], base, &t, &at);
		if (w == W_OTHER || (w == W_LEA && found && t != *table) || g->entry[b] == 2) {
			ok = false;
			break;
		}
		if (w == W_LEA) {
			if (!found || at < *lea)
				*lea = at;
			*table = t;
			found = true;
		} else if (g->entry[b]) {
			ok = false; /* reached from outside with base unknown */
			break;
		} else {
			for (uint32_t p = g->pred_start[b]; p < g->pred_start[b + 1]; p++)
				if (!seen[g->pred[p]]) {
					seen[g->pred[p]] = 1;
					stack[sp++] = g->pred[p];
				}
		}
		if (!sp)
			break;
		b = stack[--sp];
	}
	free(seen);
	free(stack);
	return !ok ? -1 : found;
}

int hp_jt_base_of(const struct hp_module *mod, const struct hp_function *f, const uint8_t *code, uint32_t off)
{
	struct hp_isa_detail d;
	bool decoded = false;

	for (uint32_t t = 0; t < f->njt; t++) {
		const struct hp_jump_table *jt = &mod->jtables[f->jt_start + t];
		if (jt->base_site == off)
			return (int)t;
		if (!jt->hoisted)
			continue;
		if (!decoded && hp_isa_decode_detail(code + off, f->size - off, f->addr + off, &d) < 0)
			return -1;
		decoded = true;
		if (d.mnem == HP_MN_LEA && d.nops == 2 && d.op[0].kind == HP_OP_REG && d.op[0].bytes == 8 &&
		    d.has_rip_ref && d.op[1].kind == HP_OP_MEM && d.op[1].rip && d.rip_target == jt->table_addr)
			return (int)t;
	}
	return -1;
}
