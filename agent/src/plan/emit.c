// SPDX-License-Identifier: Apache-2.0
/*
 * The emitter: lays the group out at plan->base (every member's hot chunk
 * in order, then every cold chunk) and encodes it with the ISA layer.
 * Block bodies are the original instructions, re-encoded where they have a
 * relative operand (rip-relative data keeps its address; calls to members
 * go to their copies); each block's ending is rebuilt for its new
 * neighbour: a jcc whose likely side now follows is inverted, a jump to the
 * next block disappears, a fallthrough that no longer falls through gets a
 * jump. Branches start short and are relaxed to near until every one
 * reaches (lengths only grow, so this ends). Chain heads reached by jumps
 * are aligned to the fetch block when that saves a fetch block and the
 * padding is small. Switch tables are emitted after the instructions: for
 * each resolved table (4-byte offsets from its base, as gcc and clang emit
 * them for position-independent code), a new table of offsets from itself
 * to the copies of its targets, and the lea naming the table in the jump's
 * block (for a table whose lea is hoisted out of that block, every lea of
 * its address: the model proved they are what the jump reads) is retargeted
 * to it; the bound check before the jump stays as it was. A label table (a
 * computed goto's 8-byte label addresses, read through a register a lea of
 * the table set) is emitted the same way with the copies' addresses
 * themselves, each relocated with the code; jumps that read one table share
 * its copy. (hp_plan_kept_rule keeps functions whose tables are not of these
 * kinds.) A kernel jump-label site ending a block becomes a read of its
 * static key and a jcc (static_keys.h), laid out like any jcc; a kernel
 * static call site becomes a call of its trampoline, a tail-call site a
 * jump to it (static_calls.h), of the same 5 bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "isa/isa.h"
#include "model/jumptable.h"
#include "plan/instrument.h"
#include "plan/pass.h"
#include "plan/plan.h"
#include "plan/static_calls.h"
#include "plan/static_keys.h"

enum term { T_NONE, T_FALL, T_JCC, T_JMP };

struct dest {
	int32_t eb;   /* placed block, or -1 */
	uint64_t ext; /* absolute address when eb < 0 */
};

struct eblock {
	uint32_t member, bi;
	uint64_t orig; /* original address */
	uint32_t orig_size;
	uint32_t pre;      /* a counter increment before the body (instrument.h) */
	uint32_t body_len; /* original bytes of the body */
	uint32_t extra;    /* bytes promoted indirect calls add to it (icall_values.c) */
	uint8_t term;
	int8_t cond;
	uint64_t key; /* a jump-label site's static key, read before the jcc (static_keys.h); 0 if none */
	struct dest taken, fall;
	uint8_t w1, w2; /* widths of the first and second branch */
	bool align;
	bool unreachable; /* a near branch that cannot reach its target */
	uint32_t pad;
	uint64_t addr;
	uint32_t size;
};

struct emitter {
	struct hp_model *m;
	struct hp_plan *p;
	struct eblock *eb;
	size_t n;
	int32_t **index; /* per member: block index -> eblock */
	uint8_t **code;  /* per member: original bytes */
	uint64_t **tab;  /* per member: the new address of each of its tables */
};

static struct dest resolve(const struct emitter *E, uint32_t member, uint64_t a)
{
	const struct hp_plan_member *mb = &E->p->members[member];
	const struct hp_function *f = mb->fn;

	if (a >= f->addr && a < f->addr + f->size) {
		const struct hp_block *b = hp_function_block_at(mb->mod, f, a);
		if (b && f->addr + b->offset == a)
			return (struct dest){ E->index[member][b - &mb->mod->blocks[f->block_start]], 0 };
	}
	for (size_t k = 0; k < E->p->nmembers; k++)
		if (E->p->members[k].fn->addr == a)
			return (struct dest){ E->index[k][0], 0 };
	return (struct dest){ -1, a };
}

/* New address of a call target: a member's copy, or where it was. */
static uint64_t call_target(const struct emitter *E, uint64_t a)
{
	for (size_t k = 0; k < E->p->nmembers; k++)
		if (E->p->members[k].fn->addr == a)
			return E->eb[E->index[k][0]].addr;
	return a;
}

static uint64_t dest_addr(const struct emitter *E, struct dest d)
{
	return d.eb >= 0 ? E->eb[d.eb].addr : d.ext;
}

/* The table of member i whose base the instruction at off names, or -1. */
static int table_based_at(const struct emitter *E, size_t i, uint32_t off)
{
	const struct hp_plan_member *mb = &E->p->members[i];

	return hp_jt_base_of(mb->mod, mb->fn, E->code[i], off);
}

static int put_reloc_kind(struct hp_plan *p, size_t *cap, uint32_t off, uint64_t target, uint8_t kind)
{
	if (HP_GROW(p->relocs, *cap, p->nrelocs + 1))
		return -ENOMEM;
	p->relocs[p->nrelocs++] = (struct hp_reloc){ off, target, kind };
	return 0;
}

/* The first of member i's tables at the same address as its table t: one
 * copy serves every jump of a table (a label table's dispatch is repeated
 * at the end of each handler; the model allows that only when they all
 * read the same entries). */
static uint32_t first_of_table(const struct hp_plan_member *mb, uint32_t t)
{
	const struct hp_jump_table *jt = mb->mod->jtables + mb->fn->jt_start;

	for (uint32_t u = 0; u < t; u++)
		if (jt[u].table_addr == jt[t].table_addr)
			return u;
	return t;
}

/* Place the members' tables after the instructions (text_len set): 8-aligned, in
 * member order. Returns the bytes of code with them, or 0 when out of memory. */
static size_t place_tables(struct emitter *E)
{
	struct hp_plan *p = E->p;
	size_t at = (p->text_len + 7) & ~(size_t)7, n = 0;

	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		if (!(E->tab[i] = calloc(mb->fn->njt + 1, sizeof(uint64_t))))
			return 0;
		for (uint32_t t = 0; t < mb->fn->njt; t++, n++) {
			const struct hp_jump_table *jt = &mb->mod->jtables[mb->fn->jt_start + t];
			uint32_t u = first_of_table(mb, t);
			if (u != t) {
				E->tab[i][t] = E->tab[i][u];
				continue;
			}
			at = (at + jt->entry_size - 1) & ~(size_t)(jt->entry_size - 1);
			E->tab[i][t] = p->base + at;
			at += (size_t)jt->nentries * (jt->label ? 8 : 4);
		}
	}
	return n ? at : p->text_len;
}

/* Fill the tables: in a switch table each entry the offset from its table
 * to the copy of the original entry's target; in a label table the copy's
 * address itself, relocated with the code (HP_RELOC_CODE64). */
static int write_tables(struct emitter *E, size_t *rcap, char *err, size_t errlen)
{
	struct hp_plan *p = E->p;

	memset(p->code + p->text_len, 0xcc, p->code_len - p->text_len);
	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		for (uint32_t t = 0; t < mb->fn->njt; t++) {
			const struct hp_jump_table *jt = &mb->mod->jtables[mb->fn->jt_start + t];
			if (first_of_table(mb, t) != t)
				continue;
			for (uint32_t k = 0; k < jt->nentries; k++) {
				struct dest d = resolve(E, (uint32_t)i, mb->mod->jt_targets[jt->target_start + k]);
				if (d.eb < 0) {
					snprintf(err, errlen, "%s: entry %u of the table at 0x%" PRIx64 " is no block",
						 mb->fn->name, k, jt->table_addr);
					return -EINVAL;
				}
				if (jt->label) {
					uint64_t a = E->eb[d.eb].addr, at = E->tab[i][t] - p->base + 8 * (uint64_t)k;
					memcpy(p->code + at, &a, 8);
					if (put_reloc_kind(p, rcap, (uint32_t)at, a, HP_RELOC_CODE64) < 0)
						return -ENOMEM;
					continue;
				}
				int32_t v = (int32_t)(int64_t)(E->eb[d.eb].addr - E->tab[i][t]);
				memcpy(p->code + (E->tab[i][t] - p->base) + 4 * k, &v, 4);
			}
		}
	}
	return 0;
}

/* Classify block ending; fills body_len, term, cond, taken, fall. */
static int classify(struct emitter *E, struct eblock *e, char *err, size_t errlen)
{
	const struct hp_plan_member *mb = &E->p->members[e->member];
	const struct hp_module *mod = mb->mod;
	const struct hp_function *f = mb->fn;
	const struct hp_block *bl = &mod->blocks[f->block_start + e->bi];
	const uint8_t *code = E->code[e->member];
	uint32_t off = bl->offset, last = off;
	struct hp_isa_insn in = { 0 };

	while (off < bl->offset + bl->size) {
		if (hp_isa_decode(code + off, f->size - off, f->addr + off, &in) < 0) {
			snprintf(err, errlen, "%s+0x%x does not decode", f->name, off);
			return -EINVAL;
		}
		last = off;
		off += in.len;
	}
	bool falls = false;
	for (uint16_t s = 0; s < bl->nsucc; s++) {
		const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
		falls |= sc->kind == HP_SUCC_FALLTHROUGH ||
			 (sc->kind == HP_SUCC_TAIL_CALL && sc->target == f->addr + bl->offset + bl->size);
	}
	e->fall = resolve(E, e->member, f->addr + bl->offset + bl->size);
	const struct hp_static_branch *ks =
		in.cls == HP_IC_JMP && in.has_target ? hp_key_site(E->m, f->addr + last) : NULL;
	if (in.cls == HP_IC_JMP && hp_call_site(E->m, f->addr + last)) {
		/* A static tail call: its jump is the body's, to the trampoline. */
		e->term = T_NONE;
		e->body_len = bl->size;
	} else if (ks) {
		/* A jump-label site: a read of its key, then a jcc to its target. */
		e->term = T_JCC;
		e->cond = (int8_t)hp_key_site_cond(ks);
		e->key = ks->key;
		e->taken = resolve(E, e->member, ks->target);
		e->body_len = last - bl->offset;
	} else if (in.cls == HP_IC_JCC && in.has_target) {
		e->cond = (int8_t)hp_isa_jcc_condition(code + last, f->size - last);
		if (e->cond < 0) {
			snprintf(err, errlen, "%s+0x%x: branch without an inverse", f->name, last);
			return -EINVAL;
		}
		e->term = T_JCC;
		e->taken = resolve(E, e->member, in.target);
		e->body_len = last - bl->offset;
	} else if (in.cls == HP_IC_JMP && in.has_target) {
		e->term = T_JMP;
		e->taken = resolve(E, e->member, in.target);
		e->body_len = last - bl->offset;
	} else {
		e->term = falls ? T_FALL : T_NONE;
		e->body_len = bl->size;
	}
	return 0;
}

static bool fits(uint64_t at, int len, uint64_t target, uint8_t w)
{
	int64_t rel = (int64_t)(target - (at + (uint64_t)len));
	return w == HP_W_SHORT ? rel >= -128 && rel <= 127 : rel >= INT32_MIN && rel <= INT32_MAX;
}

/* A branch that does not reach: near if it was short, else out of reach. */
static void widen(struct eblock *e, uint8_t *w, bool *grew)
{
	if (*w == HP_W_NEAR) {
		e->unreachable = true;
		return;
	}
	*w = HP_W_NEAR;
	*grew = true;
}

/* Bytes of e's ending given the block placed after it (next, or -1), and
 * whether each branch reaches with its width. */
static uint32_t term_size(const struct emitter *E, struct eblock *e, int32_t next, bool check, bool *grew)
{
	uint32_t kl = e->key ? HP_KEY_READ_LEN : 0;
	uint64_t at = e->addr + e->pre + e->body_len + e->extra + kl;
	uint32_t n = 0;

	switch (e->term) {
	case T_FALL:
		if (e->fall.eb >= 0 && e->fall.eb == next)
			return 0;
		if (e->fall.eb < 0)
			e->w1 = HP_W_NEAR;
		if (check && !fits(at, hp_isa_branch_length(-1, e->w1), dest_addr(E, e->fall), e->w1))
			widen(e, &e->w1, grew);
		return (uint32_t)hp_isa_branch_length(-1, e->w1);
	case T_JMP:
		if (e->taken.eb >= 0 && e->taken.eb == next)
			return 0;
		if (e->taken.eb < 0)
			e->w1 = HP_W_NEAR;
		if (check && !fits(at, hp_isa_branch_length(-1, e->w1), dest_addr(E, e->taken), e->w1))
			widen(e, &e->w1, grew);
		return (uint32_t)hp_isa_branch_length(-1, e->w1);
	case T_JCC: {
		struct dest first = e->taken, second = e->fall;
		int cond = e->cond;
		bool need_second = true;

		if (e->fall.eb >= 0 && e->fall.eb == next) {
			need_second = false;
		} else if (e->taken.eb >= 0 && e->taken.eb == next) {
			first = e->fall;
			cond ^= 1;
			need_second = false;
		}
		if (first.eb < 0)
			e->w1 = HP_W_NEAR;
		n = (uint32_t)hp_isa_branch_length(cond, e->w1);
		if (check && !fits(at, (int)n, dest_addr(E, first), e->w1)) {
			widen(e, &e->w1, grew);
			n = (uint32_t)hp_isa_branch_length(cond, e->w1);
		}
		if (need_second) {
			if (second.eb < 0)
				e->w2 = HP_W_NEAR;
			uint32_t n2 = (uint32_t)hp_isa_branch_length(-1, e->w2);
			if (check && !fits(at + n, (int)n2, dest_addr(E, second), e->w2)) {
				widen(e, &e->w2, grew);
				n2 = (uint32_t)hp_isa_branch_length(-1, e->w2);
			}
			n += n2;
		}
		return n + kl;
	}
	default:
		return 0;
	}
}

/* Assign addresses from the current branch widths, then check every
 * branch against them; returns true when some branch had to grow. */
static bool lay_out(struct emitter *E, bool check)
{
	uint64_t at = E->p->base;
	uint32_t F = E->p->opts.fetch_block ? E->p->opts.fetch_block : 16;
	bool grew = false;

	for (size_t i = 0; i < E->n; i++) {
		struct eblock *e = &E->eb[i];
		e->pad = e->align ? (uint32_t)((F - at % F) % F) : 0;
		at += e->pad;
		e->addr = at;
		e->size = e->pre + e->body_len + e->extra +
			  term_size(E, e, i + 1 < E->n ? (int32_t)i + 1 : -1, false, &grew);
		at += e->size;
	}
	if (check)
		for (size_t i = 0; i < E->n; i++) {
			E->eb[i].unreachable = false;
			term_size(E, &E->eb[i], i + 1 < E->n ? (int32_t)i + 1 : -1, true, &grew);
		}
	return grew;
}

/* A function of the target in [lo, hi), or NULL: the copy may not cover
 * code. */
static const struct hp_function *overlapped(const struct hp_model *m, uint64_t lo, uint64_t hi)
{
	for (size_t k = 0; k < m->nmods; k++) {
		const struct hp_module *mod = &m->mods[k];
		size_t a = 0, b = mod->nfuncs;
		while (a < b) { /* the first function ending after lo */
			size_t mid = (a + b) / 2;
			if (mod->funcs[mid].addr + mod->funcs[mid].size <= lo)
				a = mid + 1;
			else
				b = mid;
		}
		if (a < mod->nfuncs && mod->funcs[a].addr < hi)
			return &mod->funcs[a];
	}
	return NULL;
}

/* Control reaches block ei from the block before it without a branch:
 * an alignment pad there would be executed. */
static bool falls_into(const struct emitter *E, size_t ei)
{
	const struct eblock *b = ei ? &E->eb[ei - 1] : NULL;
	int32_t x = (int32_t)ei;

	return b && ((b->term == T_FALL && b->fall.eb == x) || (b->term == T_JMP && b->taken.eb == x) ||
		     (b->term == T_JCC && (b->fall.eb == x || b->taken.eb == x)));
}

/* A block of size bytes at `at` spans fewer fetch blocks once pad bytes
 * move it to the next fetch-block boundary. */
static bool saves_fetch_block(uint64_t at, uint32_t pad, uint32_t size, uint32_t F)
{
	uint64_t before = (at % F + size + F - 1) / F, after = (size + F - 1) / F;
	return pad && (at + pad) % F == 0 && after < before;
}

static int put_reloc(struct hp_plan *p, size_t *cap, uint32_t off, uint64_t target)
{
	return put_reloc_kind(p, cap, off, target, HP_RELOC_REL32);
}

/* The member whose function is f, or -1. */
static int member_index(const struct hp_plan *p, const struct hp_function *f)
{
	for (size_t k = 0; k < p->nmembers; k++)
		if (p->members[k].fn == f)
			return (int)k;
	return -1;
}

/* The promoted call of member i at offset off (icall_values.c), or NULL. */
static struct hp_plan_icall *promoted_at(struct hp_plan *p, size_t i, uint32_t off)
{
	for (size_t k = 0; p->npromoted && k < p->nicalls; k++)
		if (p->icalls[k].promoted && p->icalls[k].fn == p->members[i].fn && p->icalls[k].site == off)
			return &p->icalls[k];
	return NULL;
}

/* Each promoted call's compare slot after the tables, 8-aligned; the
 * code's new length. */
static size_t place_slots(struct hp_plan *p, size_t code_len)
{
	size_t at = (code_len + 7) & ~(size_t)7;

	if (!p->npromoted)
		return code_len;
	for (size_t k = 0; k < p->nicalls; k++)
		if (p->icalls[k].promoted) {
			p->icalls[k].slot = p->base + at;
			at += 8;
		}
	return at;
}

/* Fill the slots with the original entries' addresses (relocated as they are). */
static int write_slots(struct hp_plan *p, size_t *rcap)
{
	for (size_t k = 0; p->npromoted && k < p->nicalls; k++) {
		const struct hp_plan_icall *ic = &p->icalls[k];
		if (!ic->promoted)
			continue;
		uint64_t v = ic->promoted->addr;
		memcpy(p->code + (ic->slot - p->base), &v, 8);
		if (put_reloc_kind(p, rcap, (uint32_t)(ic->slot - p->base), v, HP_RELOC_ABS64) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int encode_branch(struct emitter *E, int cond, uint64_t at, struct dest d, uint8_t w, size_t *rcap)
{
	struct hp_plan *p = E->p;
	uint64_t t = dest_addr(E, d);
	int n = hp_isa_encode_branch(cond, at, t, (enum hp_isa_width)w, p->code + (at - p->base), 16);

	if (n < 0)
		return -ERANGE;
	if (d.eb < 0 && put_reloc(p, rcap, (uint32_t)(at - p->base) + (uint32_t)n - 4, t) < 0)
		return -ENOMEM;
	return n;
}

int hp_plan_emit(struct hp_model *m, struct hp_plan *p, char *err, size_t errlen)
{
	struct emitter E = { m, p };
	size_t total = 0, k = 0, rcap = 0;
	int r = -ENOMEM;

	E.index = calloc(p->nmembers + 1, sizeof(*E.index));
	E.code = calloc(p->nmembers + 1, sizeof(*E.code));
	E.tab = calloc(p->nmembers + 1, sizeof(*E.tab));
	if (!E.index || !E.code || !E.tab)
		goto out;
	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_function *f = p->members[i].fn;
		total += p->members[i].nblocks;
		E.index[i] = malloc((f->nblocks + 1) * sizeof(int32_t));
		E.code[i] = malloc(f->size + 16);
		if (!E.index[i] || !E.code[i])
			goto out;
		memset(E.code[i] + f->size, 0, 16);
		if ((r = m->read(m, f->addr, E.code[i], f->size)) < 0) {
			snprintf(err, errlen, "reading %s: %s", f->name, strerror(-r));
			goto out;
		}
		r = -ENOMEM;
	}
	if (!p->base)
		p->base = p->opts.base;
	if (!p->base && m->kind == HP_TARGET_KERNEL) {
		/* 2 MiB past the end of the highest function of any loaded module:
		 * a page past the root's module can be another module's code. The
		 * install re-bases it to the heap hotpath.ko gives (module_alloc,
		 * module space, within rel32 reach of kernel text). */
		uint64_t end = 0;
		for (size_t i = 0; i < m->nmods; i++)
			for (size_t k = 0; k < m->mods[i].nfuncs; k++) {
				const struct hp_function *g = &m->mods[i].funcs[k];
				if (g->addr + g->size > end)
					end = g->addr + g->size;
			}
		p->base = (end + 0x200000) & ~(uint64_t)0xfff;
	}
	if (!p->base) {
		/* A page after the end of the root's module text: within reach of
		 * rel32 for every call and data reference of the group. */
		const struct hp_module *mod = p->members[0].mod;
		const struct hp_function *last = &mod->funcs[mod->nfuncs - 1];
		p->base = (last->addr + last->size + 0xffff) & ~(uint64_t)0xfff;
	}
	uint32_t nstubs = p->instrument ? p->instrument->nstubs : 0;
	E.eb = calloc(total + nstubs + 1, sizeof(*E.eb));
	if (!E.eb)
		goto out;
	/* Hot chunks of every member, then cold chunks. */
	for (int cold = 0; cold < 2; cold++)
		for (size_t i = 0; i < p->nmembers; i++) {
			struct hp_plan_member *mb = &p->members[i];
			for (uint32_t j = cold ? mb->nhot : 0; j < (cold ? mb->nblocks : mb->nhot); j++) {
				const struct hp_block *bl = &mb->mod->blocks[mb->fn->block_start + mb->blocks[j].index];
				E.eb[k] = (struct eblock){ .member = (uint32_t)i,
							   .bi = mb->blocks[j].index,
							   .orig = mb->fn->addr + bl->offset,
							   .orig_size = bl->size,
							   .pre = hp_instrument_prefix_len(p, (uint32_t)i,
											   mb->blocks[j].index),
							   .w1 = HP_W_SHORT,
							   .w2 = HP_W_SHORT };
				E.index[i][mb->blocks[j].index] = (int32_t)k++;
			}
		}
	E.n = k;
	for (size_t i = 0; i < E.n; i++) {
		struct eblock *e = &E.eb[i];
		if ((r = classify(&E, e, err, errlen)) < 0)
			goto out;
		uint32_t from = (uint32_t)(e->orig - p->members[e->member].fn->addr);
		e->extra = hp_plan_promoted_bytes(p, p->members[e->member].fn, from, from + e->body_len);
	}
	/* Counter stubs (instrument.h) after the blocks: the jcc's side goes through its stub. */
	for (uint32_t s = 0; s < nstubs; s++) {
		const struct hp_counter_stub *st = &p->instrument->stubs[s];
		uint32_t bi = p->instrument->nblocks + s;
		struct eblock *u = &E.eb[E.index[0][st->from]];
		E.eb[E.n] = (struct eblock){ .bi = bi,
					     .orig = p->members[0].fn->addr,
					     .pre = hp_instrument_prefix_len(p, 0, bi),
					     .term = T_JMP,
					     .cond = -1,
					     .taken = { E.index[0][st->to], 0 },
					     .w1 = HP_W_SHORT,
					     .w2 = HP_W_SHORT };
		if (u->term != T_JCC || (st->taken ? u->taken.eb : u->fall.eb) != E.index[0][st->to]) {
			snprintf(err, errlen, "a counter stub's edge is not its block's branch");
			r = -EINVAL;
			goto out;
		}
		if (st->taken)
			u->taken = (struct dest){ (int32_t)E.n, 0 };
		else
			u->fall = (struct dest){ (int32_t)E.n, 0 };
		E.n++;
	}
	/* Alignment of hot chain heads reached by a jump (Gorton's rule): only
	 * where it saves a fetch block, within the padding bounds. Decided in
	 * layout order with the padding chosen so far; then, once branches are
	 * relaxed, a block whose padding grew past the bound or no longer
	 * saves a fetch block loses its alignment and the layout is redone. */
	lay_out(&E, false);
	uint64_t hot_bytes = 0, pad_total = 0, shift = 0;
	uint32_t F = p->opts.fetch_block ? p->opts.fetch_block : 16;
	for (size_t i = 0; i < p->nmembers; i++) {
		struct hp_plan_member *mb = &p->members[i];
		hot_bytes += mb->hot_bytes;
		for (uint32_t c = 0; !p->opts.no_align && c < mb->nchains; c++)
			E.eb[E.index[i][mb->blocks[mb->chains[c].first].index]].align = true; /* a candidate */
	}
	for (size_t ei = 0; ei < E.n; ei++) {
		struct eblock *e = &E.eb[ei];
		if (!e->align)
			continue;
		uint64_t at = e->addr + shift;
		uint32_t pad = (uint32_t)((F - at % F) % F);
		e->align = !falls_into(&E, ei) && pad && pad <= p->opts.max_pad &&
			   saves_fetch_block(at, pad, e->size, F) &&
			   (double)(pad_total + pad) <= p->opts.max_pad_share * (double)hot_bytes;
		if (e->align) {
			pad_total += pad;
			shift += pad;
		}
	}
	for (bool changed = true; changed;) {
		/* Widths only grow, so this ends; the last pass must change nothing. */
		bool grew = true;
		for (int round = 0; round < 256 && grew; round++)
			grew = lay_out(&E, true);
		for (size_t ei = 0; ei < E.n; ei++)
			if (E.eb[ei].unreachable) {
				snprintf(err, errlen,
					 "%s: the branch ending the block at 0x%" PRIx64
					 " cannot reach its target from 0x%" PRIx64 " (more than 2 GiB)",
					 p->members[E.eb[ei].member].fn->name, E.eb[ei].orig, E.eb[ei].addr);
				r = -ERANGE;
				goto out;
			}
		if (grew) {
			snprintf(err, errlen, "branch relaxation did not settle");
			r = -ERANGE;
			goto out;
		}
		changed = false;
		uint64_t total = 0;
		size_t widest = 0;
		for (size_t ei = 0; ei < E.n; ei++) {
			struct eblock *e = &E.eb[ei];
			if (e->align && (e->pad > p->opts.max_pad || falls_into(&E, ei) ||
					 !saves_fetch_block(e->addr - e->pad, e->pad, e->size, F))) {
				e->align = false;
				changed = true;
			}
			total += e->align ? e->pad : 0;
			if (e->align && e->pad > E.eb[widest].pad * E.eb[widest].align)
				widest = ei;
		}
		if (!changed && (double)total > p->opts.max_pad_share * (double)hot_bytes) {
			E.eb[widest].align = false; /* the bound on all padding: drop the widest */
			changed = true;
		}
	}
	p->text_len = E.n ? E.eb[E.n - 1].addr + E.eb[E.n - 1].size - p->base : 0;
	if (!(p->code_len = place_tables(&E)) && p->text_len)
		goto out;
	p->code_len = place_slots(p, p->code_len);
	const struct hp_function *under = overlapped(m, p->base, p->base + p->code_len);
	if (under || p->base + p->code_len < p->base) {
		snprintf(err, errlen, "the code cannot be laid out at 0x%" PRIx64 ": it would cover %s", p->base,
			 under ? under->name : "the end of the address space");
		r = -ERANGE;
		goto out;
	}
	p->code = malloc(p->code_len + 64);
	if (!p->code)
		goto out;
	/* Encode. */
	size_t enc_at = 0;
	for (size_t i = 0; i < E.n; i++) {
		enc_at = i;
		struct eblock *e = &E.eb[i];
		const struct hp_plan_member *mb = &p->members[e->member];
		const struct hp_function *f = mb->fn;
		uint64_t at = e->addr;
		uint32_t off = (uint32_t)(e->orig - f->addr), end = off + e->body_len;
		int32_t next = i + 1 < E.n ? (int32_t)i + 1 : -1;

		if (e->pad && hp_isa_nop_fill(p->code + (at - e->pad - p->base), e->pad) < 0)
			goto enc_fail;
		p->pad_bytes += e->pad;
		if (e->pre) {
			if (hp_instrument_write(p, e->member, e->bi, at, p->code + (at - p->base)) != (int)e->pre)
				goto enc_fail;
			at += e->pre;
		}
		while (off < end) {
			struct hp_isa_insn in;
			uint8_t rel = 0;
			const uint8_t *src = E.code[e->member] + off;
			if (hp_isa_decode(src, f->size - off, f->addr + off, &in) < 0) {
				snprintf(err, errlen, "%s+0x%x does not decode", f->name, off);
				r = -EINVAL;
				goto out;
			}
			struct hp_plan_icall *pc = promoted_at(p, e->member, off);
			if (pc) {
				/* A promoted indirect call (icall_values.c). */
				struct hp_isa_promoted q = { 0 };
				int t = member_index(p, pc->promoted);
				int n = t < 0 ? -1 :
						hp_isa_encode_promoted_call(src, in.len, f->addr + off, at, pc->slot,
									    E.eb[E.index[t][0]].addr,
									    p->code + (at - p->base), 64, &q);
				if (n != (int)in.len + pc->grow) {
					snprintf(err, errlen,
						 "%s+0x%x: the promoted call cannot be encoded at 0x%" PRIx64, f->name,
						 off, at);
					r = -ERANGE;
					goto out;
				}
				if (q.rel_offset &&
				    put_reloc(p, &rcap, (uint32_t)(at - p->base) + q.rel_offset, q.rel_target) < 0)
					goto out;
				pc->new_addr = at;
				pc->new_len = (uint32_t)n;
				at += (uint64_t)n;
				off += in.len;
				continue;
			}
			uint64_t nt =
				in.has_target ? (in.cls == HP_IC_CALL ? call_target(&E, in.target) : in.target) : 0;
			/* A static call site calls (or jumps to) its trampoline. */
			const struct hp_static_call *sc =
				in.has_target && (in.cls == HP_IC_CALL || in.cls == HP_IC_JMP) ?
					hp_call_site(m, f->addr + off) :
					NULL;
			if (sc) {
				if (!hp_call_site_movable(m, f->addr + off)) {
					snprintf(err, errlen,
						 "%s+0x%x: a static call site whose trampoline is not known", f->name,
						 off);
					r = -EINVAL;
					goto out;
				}
				nt = sc->tramp;
				p->trampoline_calls++;
			}
			int n = hp_isa_relocate(src, in.len, f->addr + off, at, nt, p->code + (at - p->base), 16, &rel);
			if (n < 0) {
				snprintf(
					err, errlen,
					"%s+0x%x cannot be encoded at 0x%" PRIx64
					": what it references is out of rel32 reach from there, or the encoder has no form "
					"for it",
					f->name, off, at);
				r = -ERANGE;
				goto out;
			}
			if (n != in.len) {
				snprintf(err, errlen, "%s+0x%x: re-encoding changed its length (%d, was %u)", f->name,
					 off, n, in.len);
				r = -ERANGE;
				goto out;
			}
			int tab = table_based_at(&E, e->member, off);
			if (tab >= 0) {
				/* The lea of a table: to the copy's table, inside the code. */
				int32_t d = (int32_t)(int64_t)(E.tab[e->member][tab] - (at + (uint64_t)n));
				if (!rel) {
					snprintf(err, errlen, "%s+0x%x: the table's base is not rip-relative", f->name,
						 off);
					r = -EINVAL;
					goto out;
				}
				memcpy(p->code + (at - p->base) + rel, &d, 4);
			} else if (rel) {
				uint64_t t;
				int32_t d;
				memcpy(&d, p->code + (at - p->base) + rel, 4);
				t = at + (uint64_t)n + (uint64_t)(int64_t)d;
				/* Everything but a call to a member's copy is outside the
				 * group, wherever its address falls. */
				if ((sc || !(in.cls == HP_IC_CALL && nt != in.target)) &&
				    put_reloc(p, &rcap, (uint32_t)(at - p->base) + rel, t) < 0)
					goto out;
			}
			at += (uint64_t)n;
			off += in.len;
		}
		int n;
		switch (e->term) {
		case T_FALL:
			if (e->fall.eb == next && next >= 0)
				break;
			if ((n = encode_branch(&E, -1, at, e->fall, e->w1, &rcap)) < 0)
				goto enc_fail;
			p->added_jumps++;
			at += (uint64_t)n;
			break;
		case T_JMP:
			if (e->taken.eb == next && next >= 0) {
				p->removed_jumps++;
				break;
			}
			if ((n = encode_branch(&E, -1, at, e->taken, e->w1, &rcap)) < 0)
				goto enc_fail;
			at += (uint64_t)n;
			break;
		case T_JCC:
			if (e->key) {
				uint32_t disp_at;
				n = hp_isa_encode_key_read(at, e->key, p->code + (at - p->base), 16, &disp_at);
				if (n != HP_KEY_READ_LEN) {
					snprintf(err, errlen,
						 "%s: the key read for the jump label ending the block at 0x%" PRIx64
						 " cannot reach its key at 0x%" PRIx64,
						 f->name, e->orig, e->key);
					r = -ERANGE;
					goto out;
				}
				if (put_reloc(p, &rcap, (uint32_t)(at - p->base) + disp_at, e->key) < 0)
					goto out;
				p->key_reads++;
				at += (uint64_t)n;
			}
			if (e->fall.eb == next && next >= 0) {
				if ((n = encode_branch(&E, e->cond, at, e->taken, e->w1, &rcap)) < 0)
					goto enc_fail;
			} else if (e->taken.eb == next && next >= 0) {
				if ((n = encode_branch(&E, e->cond ^ 1, at, e->fall, e->w1, &rcap)) < 0)
					goto enc_fail;
				p->inverted++;
			} else {
				if ((n = encode_branch(&E, e->cond, at, e->taken, e->w1, &rcap)) < 0)
					goto enc_fail;
				at += (uint64_t)n;
				if ((n = encode_branch(&E, -1, at, e->fall, e->w2, &rcap)) < 0)
					goto enc_fail;
				p->added_jumps++;
			}
			at += (uint64_t)n;
			break;
		default:
			break;
		}
		if (at != e->addr + e->size) {
			snprintf(err, errlen, "%s: block at 0x%" PRIx64 " encoded to %" PRIu64 " bytes, laid out as %u",
				 f->name, e->orig, at - e->addr, e->size);
			r = -ERANGE;
			goto out;
		}
	}
	if ((r = write_tables(&E, &rcap, err, errlen)) < 0)
		goto out;
	r = -ENOMEM;
	if (write_slots(p, &rcap) < 0)
		goto out;
	/* Record the layout in the plan. */
	for (size_t i = 0; i < p->nmembers; i++) {
		struct hp_plan_member *mb = &p->members[i];
		mb->new_entry = E.eb[E.index[i][0]].addr;
		for (uint32_t j = 0; j < mb->nblocks; j++) {
			struct eblock *e = &E.eb[E.index[i][mb->blocks[j].index]];
			mb->blocks[j].new_addr = e->addr;
			mb->blocks[j].new_size = e->size;
			mb->blocks[j].pad = e->pad;
			if (mb->blocks[j].hot)
				mb->new_hot_bytes += e->size + e->pad;
			else
				mb->new_cold_bytes += e->size + e->pad;
		}
		mb->hot_addr = mb->nhot ? mb->blocks[0].new_addr : 0;
		mb->cold_addr = mb->nblocks > mb->nhot ? mb->blocks[mb->nhot].new_addr : 0;
	}
	/* Hot pieces before (original addresses) and after. */
	size_t nh = 0;
	for (size_t i = 0; i < p->nmembers; i++)
		nh += p->members[i].nhot;
	p->before.pieces = calloc(nh + 1, sizeof(struct hp_hot_piece));
	p->after.pieces = calloc(nh + 1, sizeof(struct hp_hot_piece));
	if (!p->before.pieces || !p->after.pieces)
		goto out;
	for (size_t i = 0; i < p->nmembers; i++) {
		struct hp_plan_member *mb = &p->members[i];
		for (uint32_t j = 0; j < mb->nhot; j++) {
			const struct hp_block *bl = &mb->mod->blocks[mb->fn->block_start + mb->blocks[j].index];
			p->before.pieces[p->before.npieces++] =
				(struct hp_hot_piece){ (uint32_t)i, mb->blocks[j].index, mb->fn->addr + bl->offset,
						       bl->size };
			p->after.pieces[p->after.npieces++] =
				(struct hp_hot_piece){ (uint32_t)i, mb->blocks[j].index, mb->blocks[j].new_addr,
						       mb->blocks[j].new_size };
		}
	}
	r = 0;
	goto out;
enc_fail:
	snprintf(err, errlen, "encoding the group failed at 0x%" PRIx64 " (a branch out of reach)", E.eb[enc_at].orig);
	r = -ERANGE;
out:
	for (size_t i = 0; E.index && i < p->nmembers; i++) {
		free(E.index[i]);
		free(E.code[i]);
		if (E.tab)
			free(E.tab[i]);
	}
	free(E.tab);
	free(E.index);
	free(E.code);
	free(E.eb);
	return r;
}

static int emit_pass(struct hp_plan_ctx *c)
{
	return hp_plan_emit(c->m, c->p, c->err, sizeof(c->err));
}

const struct hp_plan_pass hp_pass_emit = { "emit", emit_pass };
