// SPDX-License-Identifier: Apache-2.0
/*
 * The emitted code as a listing: every instruction of the group's copy in
 * address order, with the original instruction it came from. The emitter
 * re-encodes a block's body instruction for instruction at the same lengths
 * (emit.c), so a body instruction's original is at the same distance from
 * its block's start; what follows the body is the block's rebuilt ending:
 * its first branch comes from the original's closing jcc or jmp (inverted
 * or relaxed as the layout needed), any further branch, and any branch of a
 * block whose original fell through, was added by the layout. Alignment
 * padding before a block is listed as padding. A promoted indirect call's
 * sequence (icall_values.c) stands for its call: each of its instructions
 * is listed as from that call, and what follows is shifted by the bytes it
 * adds. Decoding and the Intel text
 * come from the ISA layer (Zydis).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "isa/isa.h"
#include "plan/plan.h"

struct placed {
	uint32_t member, k; /* member, and the block's position in its layout */
	uint64_t addr;
};

static int by_addr(const void *a, const void *b)
{
	const struct placed *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Bytes of the original block before its closing direct jcc or jmp (the
 * body the emitter copies), from its original bytes. */
static uint32_t body_len(const uint8_t *fcode, const struct hp_function *f, const struct hp_block *bl)
{
	uint32_t off = bl->offset, last = off;
	struct hp_isa_insn in = { 0 };

	while (off < bl->offset + bl->size) {
		if (hp_isa_decode(fcode + off, f->size - off, f->addr + off, &in) < 0)
			return bl->size;
		last = off;
		off += in.len;
	}
	if ((in.cls == HP_IC_JCC || in.cls == HP_IC_JMP) && in.has_target)
		return last - bl->offset;
	return bl->size;
}

static int push(struct hp_listing *l, const struct hp_listing_insn *in)
{
	if (HP_GROW(l->insns, l->cap, l->n + 1))
		return -ENOMEM;
	l->insns[l->n++] = *in;
	return 0;
}

/* List [at, end) of the code; origin from the rule in the file comment. */
static int list_range(struct hp_listing *l, const struct hp_plan *p, uint64_t block_addr, uint64_t at, uint64_t end,
		      int32_t member, uint32_t orig_off, uint32_t body, bool closes_with_branch, bool padding)
{
	bool branch_taken = false;
	const struct hp_function *f = member >= 0 && !padding ? p->members[member].fn : NULL;
	uint32_t extra = f ? hp_plan_promoted_bytes(p, f, orig_off, orig_off + body) : 0, o = orig_off;
	uint64_t seq_end = 0;  /* the end of the promoted sequence being listed */
	uint32_t seq_orig = 0; /* the bytes of the call it stands for */

	while (at < end) {
		struct hp_isa_insn in;
		const uint8_t *c = p->code + (at - p->base);
		struct hp_listing_insn li = { .addr = at, .member = member };

		if (hp_isa_decode(c, end - at, at, &in) < 0)
			return -EINVAL;
		li.len = in.len;
		if (padding)
			li.origin = HP_LISTING_PADDING;
		else if (at - block_addr < body + extra) {
			const struct hp_plan_icall *ic = extra && !seq_end ? hp_plan_promotion(p, f, o) : NULL;
			li.origin = HP_LISTING_ORIGINAL;
			li.offset = o;
			if (ic) {
				seq_end = at + ic->orig_len + ic->grow;
				seq_orig = ic->orig_len;
			}
			if (!seq_end) {
				o += in.len;
			} else if (at + in.len >= seq_end) {
				o += seq_orig;
				seq_end = 0;
			}
		} else if (closes_with_branch && !branch_taken) {
			li.origin = HP_LISTING_ORIGINAL;
			li.offset = orig_off + body;
			branch_taken = true;
		} else
			li.origin = HP_LISTING_ADDED;
		if (push(l, &li) < 0)
			return -ENOMEM;
		at += in.len;
	}
	return 0;
}

int hp_plan_listing(struct hp_model *m, const struct hp_plan *p, struct hp_listing *out, char *err, size_t errlen)
{
	struct placed *pl = NULL;
	uint8_t **orig = NULL;
	size_t npl = 0, total = 0;
	int r = -ENOMEM;

	memset(out, 0, sizeof(*out));
	if (!p->code || !p->code_len)
		return 0;
	for (size_t i = 0; i < p->nmembers; i++)
		total += p->members[i].nblocks;
	pl = calloc(total ? total : 1, sizeof(*pl));
	orig = calloc(p->nmembers ? p->nmembers : 1, sizeof(*orig));
	if (!pl || !orig)
		goto out;
	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		if (!(orig[i] = malloc(mb->fn->size + 16)))
			goto out;
		memset(orig[i] + mb->fn->size, 0, 16);
		if ((r = m->read(m, mb->fn->addr, orig[i], mb->fn->size)) < 0) {
			snprintf(err, errlen, "cannot read %s's original bytes", mb->fn->name);
			goto out;
		}
		for (uint32_t k = 0; k < mb->nblocks; k++)
			if (mb->blocks[k].new_size || mb->blocks[k].pad)
				pl[npl++] = (struct placed){ (uint32_t)i, k, mb->blocks[k].new_addr };
	}
	qsort(pl, npl, sizeof(*pl), by_addr);
	r = -EINVAL;
	for (size_t q = 0; q < npl; q++) {
		const struct hp_plan_member *mb = &p->members[pl[q].member];
		const struct hp_plan_block *b = &mb->blocks[pl[q].k];
		const struct hp_block *bl = &mb->mod->blocks[mb->fn->block_start + b->index];
		uint32_t body = body_len(orig[pl[q].member], mb->fn, bl);

		if (b->new_addr < p->base + b->pad || b->new_addr + b->new_size > p->base + p->code_len) {
			snprintf(err, errlen, "%s+0x%x lies outside the emitted code", mb->fn->name, bl->offset);
			goto out;
		}
		if (b->pad && list_range(out, p, b->new_addr, b->new_addr - b->pad, b->new_addr, (int32_t)pl[q].member,
					 0, 0, false, true) < 0)
			goto bad;
		if (list_range(out, p, b->new_addr, b->new_addr, b->new_addr + b->new_size, (int32_t)pl[q].member,
			       bl->offset, body, body < bl->size, false) < 0)
			goto bad;
	}
	r = 0;
	goto out;
bad:
	snprintf(err, errlen, "the emitted code does not decode as laid out");
out:
	for (size_t i = 0; orig && i < p->nmembers; i++)
		free(orig[i]);
	free(orig);
	free(pl);
	if (r < 0)
		hp_listing_free(out);
	return r;
}

void hp_listing_free(struct hp_listing *l)
{
	free(l->insns);
	memset(l, 0, sizeof(*l));
}
