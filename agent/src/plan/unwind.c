// SPDX-License-Identifier: Apache-2.0
/*
 * Unwind data for moved code. A process's unwinder (C++ exceptions, thread
 * cancellation, backtraces) finds a frame's rules by its return address in
 * .eh_frame; the copy has none of its own, so the plan reproduces them.
 * Every body instruction of an emitted block is the original instruction
 * with the original length, so the unwind row in effect at each byte of a
 * body is the original's at the same distance from the block start; the
 * branches the layout added after a body run in the row after the body.
 * A promoted indirect call (icall_values.c) is the one exception: its
 * sequence replaces the call, runs in the call's row (it moves no stack
 * pointer) and shifts what follows it in its block by the bytes it adds.
 * The rows are read from the original with libdw (target/unwind.h) and
 * written as one .eh_frame: one CIE (no initial rules, code and data
 * alignment 1, pc-relative FDE pointers) and an FDE per member's hot and
 * cold chunk, each row given in full at an FDE's start and as changes after
 * that. It is placed right after the code (pc-relative pointers stay right
 * wherever the two are installed together) and then read back through
 * libdw, and every emitted instruction's row compared with its original's.
 * Rules beyond register + offset forms are not reproduced: the function
 * stays in place (hp_plan_unwind_rule).
 * An instrumented copy (instrument.h) puts a counter increment before a
 * block's body and in stubs after the blocks: it runs in the row of the
 * block it counts (its start; a stub's, the block it jumps to), except
 * that while it keeps the flags below rsp a frame address computed from
 * rsp is that much further up (prefix_rows).
 */
#include <dwarf.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "isa/isa.h"
#include "plan/instrument.h"
#include "plan/pass.h"
#include "plan/plan.h"
#include "target/unwind.h"

#define DWARF_RSP 7

/* The DW_CFA instruction for a rule, if it has one: its opcode and offset. */
static bool rule_form(const struct hp_cfi_rule *r, uint8_t *op, int64_t *off)
{
	const struct hp_cfi_op *o = r->op;

	if (r->kind != HP_CFI_EXPR) {
		*op = r->kind == HP_CFI_SAME ? DW_CFA_same_value : DW_CFA_undefined;
		*off = 0;
		return true;
	}
	if (!r->nops || o[0].atom != DW_OP_call_frame_cfa)
		return false;
	size_t k = 1;
	*off = 0;
	if (k < r->nops && o[k].atom == DW_OP_plus_uconst)
		*off = (int64_t)o[k++].number;
	*op = DW_CFA_offset_extended_sf;
	if (k < r->nops && o[k].atom == DW_OP_stack_value) {
		*op = DW_CFA_val_offset_sf;
		k++;
	}
	return k == r->nops;
}

static bool row_encodable(const struct hp_cfi_row *row, char *why, size_t len)
{
	uint8_t op;
	int64_t off;

	if (row->ncfa != 1 || row->cfa[0].atom != DW_OP_bregx) {
		snprintf(why, len, "its frame address is an expression");
		return false;
	}
	for (int k = 0; k < HP_CFI_REGS; k++)
		if (!rule_form(&row->reg[k], &op, &off)) {
			snprintf(why, len, "register %d's rule is an expression", k);
			return false;
		}
	return true;
}

/* The row at a (a model address) of mod's table; -ENOENT, -EOPNOTSUPP. */
static int row_at(const struct hp_module *mod, uint64_t a, struct hp_cfi_row *row)
{
	int r = hp_cfi_row(mod->cfi, a - mod->cfi_bias, row);

	row->start += mod->cfi_bias;
	row->end += mod->cfi_bias;
	return r;
}

const char *hp_plan_unwind_rule(const struct hp_module *mod, const struct hp_function *f, char *detail, size_t dlen)
{
	struct hp_cfi_row row;
	char why[96];

	if (!mod->cfi || row_at(mod, f->addr, &row) == -ENOENT)
		return NULL; /* no unwind data to lose */
	for (uint64_t a = f->addr; a < f->addr + f->size;) {
		int r = row_at(mod, a, &row);
		if (r == -ENOENT) {
			snprintf(detail, dlen, "none at +0x%" PRIx64, a - f->addr);
			return "unwind data covers only part of it: the copy's cannot be made";
		}
		if (r < 0 || !row_encodable(&row, why, sizeof(why))) {
			snprintf(detail, dlen, "at +0x%" PRIx64 ": %s", a - f->addr, r < 0 ? "a long expression" : why);
			return "unwind data that the copy's .eh_frame cannot reproduce";
		}
		a = row.end > a ? row.end : a + 1;
	}
	return NULL;
}

/* A growable byte buffer with the encodings .eh_frame needs. */
struct buf {
	uint8_t *b;
	size_t n, cap;
	bool oom;
};

static void put(struct buf *o, const void *p, size_t n)
{
	if (HP_GROW(o->b, o->cap, o->n + n)) {
		o->oom = true;
		return;
	}
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

static void put8(struct buf *o, uint8_t v)
{
	put(o, &v, 1);
}

static void put32(struct buf *o, uint32_t v)
{
	put(o, &v, 4);
}

static void uleb(struct buf *o, uint64_t v)
{
	do {
		uint8_t b = v & 0x7f;
		v >>= 7;
		put8(o, b | (v ? 0x80 : 0));
	} while (v);
}

static void sleb(struct buf *o, int64_t v)
{
	for (bool more = true; more;) {
		uint8_t b = v & 0x7f;
		v = v < 0 ? ~(~v >> 7) : v >> 7; /* arithmetic shift without shifting a negative value */
		more = !((v == 0 && !(b & 0x40)) || (v == -1 && (b & 0x40)));
		put8(o, b | (more ? 0x80 : 0));
	}
}

/* Pad the entry that starts at `from` (its length field) to 8 bytes and
 * fill in its length. */
static void close_entry(struct buf *o, size_t from)
{
	while ((o->n - from) % 8)
		put8(o, DW_CFA_nop);
	if (!o->oom) {
		uint32_t len = (uint32_t)(o->n - from - 4);
		memcpy(o->b + from, &len, 4);
	}
}

static bool same_rule(const struct hp_cfi_rule *a, const struct hp_cfi_rule *b)
{
	if (a->kind != b->kind || a->nops != b->nops)
		return false;
	for (uint8_t i = 0; i < a->nops; i++)
		if (a->op[i].atom != b->op[i].atom || a->op[i].number != b->op[i].number ||
		    a->op[i].number2 != b->op[i].number2)
			return false;
	return true;
}

/* The rules that change from cur to row; all of them when full. */
static void put_row(struct buf *o, const struct hp_cfi_row *row, struct hp_cfi_row *cur, bool full)
{
	uint8_t op = 0;
	int64_t off = 0;

	if (full || !cur->ncfa || cur->cfa[0].number != row->cfa[0].number ||
	    cur->cfa[0].number2 != row->cfa[0].number2) {
		int64_t cfa_off = (int64_t)row->cfa[0].number2;
		put8(o, cfa_off >= 0 ? DW_CFA_def_cfa : DW_CFA_def_cfa_sf);
		uleb(o, row->cfa[0].number);
		if (cfa_off >= 0)
			uleb(o, (uint64_t)cfa_off);
		else
			sleb(o, cfa_off);
	}
	for (int k = 0; k < HP_CFI_REGS; k++) {
		if (!full && same_rule(&cur->reg[k], &row->reg[k]))
			continue;
		rule_form(&row->reg[k], &op, &off);
		put8(o, op);
		uleb(o, (uint64_t)k);
		if (op == DW_CFA_offset_extended_sf || op == DW_CFA_val_offset_sf)
			sleb(o, off);
	}
	*cur = *row;
}

static void advance(struct buf *o, uint64_t *loc, uint64_t to)
{
	uint64_t d = to - *loc;

	if (!d)
		return;
	if (d < 64) {
		put8(o, (uint8_t)(DW_CFA_advance_loc | d));
	} else if (d < 256) {
		put8(o, DW_CFA_advance_loc1);
		put8(o, (uint8_t)d);
	} else if (d < 65536) {
		uint16_t v = (uint16_t)d;
		put8(o, DW_CFA_advance_loc2);
		put(o, &v, 2);
	} else {
		put8(o, DW_CFA_advance_loc4);
		put32(o, (uint32_t)d);
	}
	*loc = to;
}

/* Bytes of block bl's body (the original bytes before a final direct
 * branch, which the layout rebuilds). */
uint32_t hp_plan_block_body(struct hp_model *m, const struct hp_function *f, const struct hp_block *bl)
{
	uint8_t code[32];
	uint32_t off = bl->offset, last = off;
	struct hp_isa_insn in = { 0 };

	while (off < bl->offset + bl->size) {
		uint32_t n = bl->offset + bl->size - off < sizeof(code) ? bl->offset + bl->size - off : sizeof(code);
		if (m->read(m, f->addr + off, code, n) < 0 || hp_isa_decode(code, n, f->addr + off, &in) < 0)
			return bl->size;
		last = off;
		off += in.len;
	}
	return (in.cls == HP_IC_JCC || in.cls == HP_IC_JMP) && in.has_target ? last - bl->offset : bl->size;
}

/* The row after block bl's body: before its final branch, else where it
 * falls through (the same point of execution), else its last row. */
static int row_after(const struct hp_module *mod, const struct hp_function *f, const struct hp_block *bl, uint32_t body,
		     struct hp_cfi_row *row)
{
	uint64_t a = f->addr + bl->offset + body;

	if (body < bl->size || (a < f->addr + f->size && row_at(mod, a, row) == 0))
		return row_at(mod, a, row);
	return row_at(mod, a - 1, row);
}

typedef int (*row_fn)(void *arg, uint64_t at, const struct hp_cfi_row *row);

/* Walk the counter increment of pre bytes at a in p's code, which runs
 * where the original's row is base: fn gets every instruction's address
 * and row, base with a frame address computed from rsp moved up by the
 * bytes the increment keeps below rsp there. A non-zero return of fn ends
 * the walk with it; -EOPNOTSUPP when an instruction does not decode, moves
 * rsp in a way not reproduced, or the increment does not restore rsp. */
static int prefix_rows(const struct hp_plan *p, uint64_t a, uint32_t pre, const struct hp_cfi_row *base, row_fn fn,
		       void *arg)
{
	int64_t below = 0;

	for (uint32_t d = 0; d < pre;) {
		const uint8_t *c = p->code + (a + d - p->base);
		struct hp_isa_insn in;
		int64_t delta;
		if (hp_isa_decode(c, pre - d, a + d, &in) < 0 || hp_isa_rsp_delta(c, pre - d, &delta) < 0)
			return -EOPNOTSUPP;
		struct hp_cfi_row row = *base;
		if (row.ncfa == 1 && row.cfa[0].atom == DW_OP_bregx && row.cfa[0].number == DWARF_RSP)
			row.cfa[0].number2 = (uint64_t)((int64_t)row.cfa[0].number2 + below);
		int r = fn(arg, a + d, &row);
		if (r)
			return r;
		below -= delta;
		d += in.len;
	}
	return below ? -EOPNOTSUPP : 0;
}

/* Rows being written into one FDE. */
struct fde_rows {
	struct buf *o;
	uint64_t loc;
	struct hp_cfi_row cur;
	bool first;
};

static int put_row_at(void *arg, uint64_t at, const struct hp_cfi_row *row)
{
	struct fde_rows *w = arg;

	advance(w->o, &w->loc, at);
	put_row(w->o, row, &w->cur, w->first);
	w->first = false;
	return 0;
}

/* Start an FDE for [lo, hi) at o's end; close it with close_entry. */
static size_t open_fde(struct buf *o, uint64_t lo, uint64_t hi, uint64_t eh_addr)
{
	size_t start = o->n;

	put32(o, 0); /* length, filled in by close_entry */
	put32(o, (uint32_t)(o->n - 0));
	int32_t begin = (int32_t)(int64_t)(lo - (eh_addr + o->n));
	put(o, &begin, 4);
	put32(o, (uint32_t)(hi - lo));
	uleb(o, 0); /* no augmentation data */
	return start;
}

/* The row of the original at block bi's start of member 0 (a counter stub
 * runs on the way into that block). */
static int block_row(const struct hp_plan *p, uint32_t bi, struct hp_cfi_row *row)
{
	const struct hp_plan_member *mb = &p->members[0];
	return row_at(mb->mod, mb->fn->addr + mb->mod->blocks[mb->fn->block_start + bi].offset, row);
}

/* One FDE for an instrumented copy's counter stubs (contiguous after its
 * blocks, each a counter and a jump). */
static int put_stubs_fde(struct hp_plan *p, struct buf *o, uint64_t eh_addr)
{
	const struct hp_instrument *ins = p->instrument;
	struct fde_rows w = { .o = o, .first = true };
	struct hp_cfi_row row;

	if (!ins || !ins->nstubs)
		return 0;
	w.loc = ins->stubs[0].addr;
	size_t start = open_fde(o, w.loc, hp_plan_text_end(p), eh_addr);
	for (uint32_t s = 0; s < ins->nstubs; s++) {
		uint32_t pre = hp_instrument_prefix_len(p, 0, ins->nblocks + s);
		int r;
		if (block_row(p, ins->stubs[s].to, &row) < 0)
			return -EOPNOTSUPP;
		if ((r = prefix_rows(p, ins->stubs[s].addr, pre, &row, put_row_at, &w)) < 0)
			return r;
		put_row_at(&w, ins->stubs[s].addr + pre, &row); /* the jump */
	}
	close_entry(o, start);
	p->unwind_fdes++;
	return 0;
}

/* One FDE for member mb's blocks [j0, j1) laid out contiguously. */
static int put_fde(struct hp_model *m, struct hp_plan *p, const struct hp_plan_member *mb, uint32_t j0, uint32_t j1,
		   struct buf *o, uint64_t eh_addr)
{
	const struct hp_module *mod = mb->mod;
	const struct hp_function *f = mb->fn;
	uint64_t lo = mb->blocks[j0].new_addr - mb->blocks[j0].pad, hi = lo;
	struct fde_rows w = { .o = o, .loc = lo, .first = true };
	struct hp_cfi_row row;

	for (uint32_t j = j0; j < j1; j++)
		if (mb->blocks[j].new_addr + mb->blocks[j].new_size > hi)
			hi = mb->blocks[j].new_addr + mb->blocks[j].new_size;
	size_t start = open_fde(o, lo, hi, eh_addr);
	for (uint32_t j = j0; j < j1; j++) {
		const struct hp_plan_block *pb = &mb->blocks[j];
		const struct hp_block *bl = &mod->blocks[f->block_start + pb->index];
		uint32_t body = hp_plan_block_body(m, f, bl);
		uint32_t extra = hp_plan_promoted_bytes(p, f, bl->offset, bl->offset + body);
		uint32_t pre = hp_instrument_prefix_len(p, (uint32_t)(mb - p->members), pb->index);
		uint64_t oa = f->addr + bl->offset, at = pb->new_addr + pre; /* the body's start */
		if (!pb->new_size)
			continue;
		if (pre && (row_at(mod, oa, &row) < 0 || prefix_rows(p, pb->new_addr, pre, &row, put_row_at, &w) < 0))
			return -EOPNOTSUPP;
		for (uint64_t a = oa; a < oa + body;) {
			if (row_at(mod, a, &row) < 0)
				return -EOPNOTSUPP;
			put_row_at(&w,
				   at + (a - oa) + hp_plan_promoted_bytes(p, f, bl->offset, (uint32_t)(a - f->addr)),
				   &row);
			a = row.end < oa + body && row.end > a ? row.end : oa + body;
		}
		if (pb->new_size > pre + body + extra) {
			if (row_after(mod, f, bl, body, &row) < 0)
				return -EOPNOTSUPP;
			put_row_at(&w, at + body + extra, &row);
		}
	}
	close_entry(o, start);
	p->unwind_fdes++;
	return 0;
}

int hp_plan_unwind(struct hp_model *m, struct hp_plan *p, char *err, size_t errlen)
{
	struct buf o = { 0 };
	struct hp_cfi_row row;
	uint64_t eh_addr;
	int r = 0;

	free(p->unwind);
	p->unwind = NULL;
	p->unwind_len = p->unwind_fdes = 0;
	p->unwind_off = (uint32_t)((p->code_len + 7) & ~(size_t)7);
	if (m->kind == HP_TARGET_KERNEL)
		return hp_plan_kernel_map(m, p, err, errlen); /* ORC: the module builds it from a map */
	eh_addr = p->base + p->unwind_off;
	/* The CIE: "zR", code and data alignment 1, return address in 16,
	 * FDE pointers pc-relative 4-byte signed, no initial rules. */
	put32(&o, 0);
	put32(&o, 0);
	put8(&o, 1);
	put(&o, "zR", 3);
	uleb(&o, 1);
	sleb(&o, 1);
	put8(&o, 16);
	uleb(&o, 1);
	put8(&o, DW_EH_PE_pcrel | DW_EH_PE_sdata4);
	close_entry(&o, 0);
	for (size_t i = 0; i < p->nmembers && !r; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		if (!mb->mod->cfi || row_at(mb->mod, mb->fn->addr, &row) < 0)
			continue; /* the original has no unwind data either */
		if (mb->nhot)
			r = put_fde(m, p, mb, 0, mb->nhot, &o, eh_addr);
		if (!r && mb->nblocks > mb->nhot)
			r = put_fde(m, p, mb, mb->nhot, mb->nblocks, &o, eh_addr);
		if (!r && i == 0)
			r = put_stubs_fde(p, &o, eh_addr);
		if (r)
			snprintf(err, errlen, "%s: its unwind rows cannot be reproduced", mb->fn->name);
	}
	put32(&o, 0); /* the end of .eh_frame */
	if (o.oom) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
	}
	if (r || !p->unwind_fdes) {
		free(o.b);
		p->unwind_fdes = 0;
		return r;
	}
	p->unwind = o.b;
	p->unwind_len = o.n;
	return 0;
}

/* Whether the generated table (arg) has row want at at: 0 yes, 1 no. */
static int check_row_at(void *arg, uint64_t at, const struct hp_cfi_row *want)
{
	struct hp_cfi_row copy;

	return hp_cfi_row(arg, at, &copy) < 0 || !hp_cfi_same(want, &copy) ? 1 : 0;
}

/* Every emitted instruction's row (read back from the generated .eh_frame)
 * must be its original's; the added branches must run in the row after
 * the body; a counter's, in its block's start row as prefix_rows moves it. */
bool hp_plan_verify_unwind(struct hp_model *m, struct hp_plan *p)
{
	struct hp_cfi *c;
	bool ok = false;

	if (!p->unwind)
		return true;
	if (m->kind == HP_TARGET_KERNEL)
		return hp_plan_verify_kernel_map(m, p);
	if (!(c = hp_cfi_open_blob(p->base + p->unwind_off, p->unwind, p->unwind_len))) {
		snprintf(p->verify_error, sizeof(p->verify_error),
			 "unwind: the generated .eh_frame does not read back");
		return false;
	}
	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		const struct hp_function *f = mb->fn;
		struct hp_cfi_row orig, copy;
		if (!mb->mod->cfi || row_at(mb->mod, f->addr, &orig) < 0)
			continue;
		for (uint32_t j = 0; j < mb->nblocks; j++) {
			const struct hp_plan_block *pb = &mb->blocks[j];
			const struct hp_block *bl = &mb->mod->blocks[f->block_start + pb->index];
			uint64_t oa = f->addr + bl->offset;
			uint32_t body = hp_plan_block_body(m, f, bl);
			uint32_t extra = hp_plan_promoted_bytes(p, f, bl->offset, bl->offset + body);
			uint32_t pre = hp_instrument_prefix_len(p, (uint32_t)i, pb->index);
			uint64_t at = pb->new_addr + pre; /* the body's start */
			uint8_t code[16];
			struct hp_isa_insn in;
			if (!pb->new_size)
				continue;
			if (pre && (row_at(mb->mod, oa, &orig) < 0 ||
				    prefix_rows(p, pb->new_addr, pre, &orig, check_row_at, c))) {
				snprintf(p->verify_error, sizeof(p->verify_error),
					 "unwind: the counter before %s+0x%x at 0x%" PRIx64
					 " does not unwind as the block's start does",
					 f->name, bl->offset, pb->new_addr);
				goto out;
			}
			for (uint32_t d = 0; d < body; d += in.len) {
				uint32_t n = body - d < sizeof(code) ? body - d : sizeof(code);
				uint64_t na = at + d + hp_plan_promoted_bytes(p, f, bl->offset, bl->offset + d);
				const struct hp_plan_icall *ic = hp_plan_promotion(p, f, bl->offset + d);
				/* A promoted call's whole sequence runs in the call's row. */
				if (m->read(m, oa + d, code, n) < 0 || hp_isa_decode(code, n, oa + d, &in) < 0 ||
				    row_at(mb->mod, oa + d, &orig) < 0 || hp_cfi_row(c, na, &copy) < 0 ||
				    !hp_cfi_same(&orig, &copy) ||
				    (ic && (hp_cfi_row(c, na + ic->orig_len + ic->grow - 1, &copy) < 0 ||
					    !hp_cfi_same(&orig, &copy)))) {
					snprintf(p->verify_error, sizeof(p->verify_error),
						 "unwind: %s+0x%x moved to 0x%" PRIx64 " does not unwind as it did",
						 f->name, bl->offset + d, na);
					goto out;
				}
			}
			if (pb->new_size > pre + body + extra &&
			    (row_after(mb->mod, f, bl, body, &orig) < 0 ||
			     hp_cfi_row(c, at + body + extra, &copy) < 0 || !hp_cfi_same(&orig, &copy) ||
			     hp_cfi_row(c, pb->new_addr + pb->new_size - 1, &copy) < 0 || !hp_cfi_same(&orig, &copy))) {
				snprintf(
					p->verify_error, sizeof(p->verify_error),
					"unwind: the branches after %s+0x%x's body do not unwind as the body's end does",
					f->name, bl->offset);
				goto out;
			}
		}
	}
	const struct hp_instrument *ins = p->instrument;
	struct hp_cfi_row row;
	bool stub_rows = ins && p->members[0].mod->cfi && row_at(p->members[0].mod, p->members[0].fn->addr, &row) == 0;
	for (uint32_t s = 0; stub_rows && s < ins->nstubs; s++) {
		const struct hp_counter_stub *st = &ins->stubs[s];
		uint32_t pre = hp_instrument_prefix_len(p, 0, ins->nblocks + s);
		if (block_row(p, st->to, &row) < 0 || prefix_rows(p, st->addr, pre, &row, check_row_at, c) ||
		    check_row_at(c, st->addr + pre, &row)) {
			snprintf(p->verify_error, sizeof(p->verify_error),
				 "unwind: the counter stub at 0x%" PRIx64
				 " does not unwind as the block it enters does",
				 st->addr);
			goto out;
		}
	}
	ok = true;
out:
	hp_cfi_close(c);
	return ok;
}

static int unwind_pass(struct hp_plan_ctx *c)
{
	return hp_plan_unwind(c->m, c->p, c->err, sizeof(c->err));
}

const struct hp_plan_pass hp_pass_unwind = { "unwind", unwind_pass };
