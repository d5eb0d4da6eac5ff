// SPDX-License-Identifier: Apache-2.0
/*
 * Counted copies of several functions as one plan (instrument.h,
 * hp_instrument_combine): each copy is made and verified on its own at the
 * address it takes in the combined code, then their code and relocations
 * are put side by side, their unwind data become one .eh_frame after the
 * code (one CIE, every copy's FDEs, their pc-relative pointers kept on the
 * same code), and one counter area follows at the next page boundary,
 * every copy's increments moved to their part of it and the copy verified
 * again. The install engine installs the result as a hot set: one heap,
 * one quiesce, one journal, one unwinder registration, one revert.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/instrument.h"

#define AREA_ALIGN 4096u
#define COPY_ALIGN 16u /* where each copy starts, as a compiler aligns functions */
#define SLOT_ALIGN 8u  /* each copy's counters start on a 64-byte line */

uint64_t hp_instrument_next_base(const struct hp_plan *p)
{
	return (p->base + p->code_len + COPY_ALIGN - 1) / COPY_ALIGN * COPY_ALIGN;
}

static uint32_t get32(const uint8_t *b)
{
	uint32_t v;
	memcpy(&v, b, 4);
	return v;
}

static void set32(uint8_t *b, uint32_t v)
{
	memcpy(b, &v, 4);
}

/* Append the FDEs of p's .eh_frame (unwind.c's form: one CIE first, 4-byte
 * lengths, pc-relative sdata4 pointers) to eh (at address eh_addr, *len
 * bytes so far, the CIE at 0), each pointer kept on the same code address;
 * every range must lie in p's code. 0, or -EINVAL with err filled. */
static int append_fdes(const struct hp_plan *p, uint8_t *eh, size_t *len, uint64_t eh_addr, char *err, size_t errlen)
{
	uint64_t from = p->base + p->unwind_off;
	size_t at = 0;

	while (at + 4 <= p->unwind_len) {
		uint32_t rl = get32(p->unwind + at);
		if (!rl)
			return 0; /* the terminator */
		if (rl < 16 || at + 4 + rl > p->unwind_len) {
			snprintf(err, errlen, "%s: an unwind record at +%zu of %u bytes overruns its .eh_frame",
				 p->members[0].fn->name, at, rl);
			return -EINVAL;
		}
		if (get32(p->unwind + at + 4)) { /* an FDE (a CIE's id is 0) */
			int32_t begin = (int32_t)get32(p->unwind + at + 8);
			uint64_t lo = from + at + 8 + (uint64_t)(int64_t)begin, n = get32(p->unwind + at + 12);
			if (lo < p->base || lo + n > p->base + p->code_len) {
				snprintf(err, errlen, "%s: an FDE of 0x%" PRIx64 "..0x%" PRIx64 " outside its copy",
					 p->members[0].fn->name, lo, lo + n);
				return -EINVAL;
			}
			memcpy(eh + *len, p->unwind + at, 4 + rl);
			set32(eh + *len + 4, (uint32_t)(*len + 4)); /* back to the one CIE, at 0 */
			set32(eh + *len + 8, (uint32_t)(int32_t)(int64_t)(lo - (eh_addr + *len + 8)));
			*len += 4 + rl;
		}
		at += 4 + rl;
	}
	snprintf(err, errlen, "%s: its .eh_frame has no terminator", p->members[0].fn->name);
	return -EINVAL;
}

/* The combined .eh_frame of ps[0..n) at out->base + out->unwind_off. */
static int combine_unwind(struct hp_plan *const *ps, size_t n, struct hp_plan *out, char *err, size_t errlen)
{
	size_t cap = 4, len = 0;
	const struct hp_plan *first = NULL;
	int r = 0;

	for (size_t k = 0; k < n; k++)
		if (ps[k]->unwind_len) {
			cap += ps[k]->unwind_len;
			first = first ? first : ps[k];
		}
	if (!first)
		return 0; /* no copy had unwind data: nor has the set */
	uint8_t *eh = calloc(1, cap);
	if (!eh) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* The CIE, as every copy's (unwind.c writes one form). */
	uint32_t cl = get32(first->unwind);
	if (cl < 8 || get32(first->unwind + 4) || 4 + (size_t)cl > first->unwind_len) {
		snprintf(err, errlen, "%s: its .eh_frame does not start with a CIE", first->members[0].fn->name);
		free(eh);
		return -EINVAL;
	}
	memcpy(eh, first->unwind, 4 + cl);
	len = 4 + cl;
	for (size_t k = 0; k < n && !r; k++) {
		if (!ps[k]->unwind_len)
			continue;
		if (get32(ps[k]->unwind) != cl || memcmp(ps[k]->unwind, first->unwind, 4 + cl)) {
			snprintf(err, errlen, "%s: its .eh_frame's CIE differs from %s's", ps[k]->members[0].fn->name,
				 first->members[0].fn->name);
			r = -EINVAL;
			break;
		}
		r = append_fdes(ps[k], eh, &len, out->base + out->unwind_off, err, errlen);
		out->unwind_fdes += ps[k]->unwind_fdes;
	}
	if (r < 0) {
		free(eh);
		return r;
	}
	set32(eh + len, 0); /* the end of .eh_frame */
	out->unwind = eh;
	out->unwind_len = len + 4;
	return 0;
}

/* Move copy p's counters to new_off from its base (its increments'
 * displacements with them: their lengths do not change) and verify it
 * again. 0, or -EPERM with err filled. */
static int move_area(struct hp_model *m, struct hp_plan *p, uint64_t new_off, char *err, size_t errlen)
{
	if (hp_instrument_move_area(p, new_off) < 0) {
		snprintf(err, errlen, "%s: its counters out of reach of its code", p->members[0].fn->name);
		return -ERANGE;
	}
	p->verified = hp_plan_verify(m, p);
	if (!p->verified) {
		snprintf(err, errlen, "%s: its copy with the counters moved failed verification: %s",
			 p->members[0].fn->name, p->verify_error);
		return -EPERM;
	}
	return 0;
}

int hp_instrument_combine(struct hp_model *m, struct hp_plan *const *ps, size_t n, struct hp_plan *out,
			  uint64_t *area_off, size_t *area_len, char *err, size_t errlen)
{
	int r = -ENOMEM;

	memset(out, 0, sizeof(*out));
	*area_off = 0;
	*area_len = 0;
	if (!n) {
		snprintf(err, errlen, "no counted copy to combine");
		return -EINVAL;
	}
	for (size_t k = 0; k < n; k++) {
		if (!ps[k]->instrument || ps[k]->nmembers != 1 || !ps[k]->verified || ps[k]->status != HP_PLAN_OK ||
		    (k && ps[k]->base != hp_instrument_next_base(ps[k - 1]))) {
			snprintf(err, errlen, "%s: not a verified counted copy laid out after the one before it",
				 ps[k]->nmembers ? ps[k]->members[0].fn->name : "?");
			return -EINVAL;
		}
	}
	hp_plan_opts_default(&out->opts);
	out->opts.no_align = true;
	out->opts.hot_set = true; /* every member's entry spliced, its call sites redirected */
	out->base = ps[0]->base;
	out->code_len = ps[n - 1]->base + ps[n - 1]->code_len - out->base;
	out->unwind_off = (uint32_t)((out->code_len + 7) & ~(size_t)7);
	size_t nrelocs = 0;
	for (size_t k = 0; k < n; k++)
		nrelocs += ps[k]->nrelocs;
	out->members = calloc(n, sizeof(*out->members));
	out->code = malloc(out->code_len);
	out->relocs = calloc(nrelocs + 1, sizeof(*out->relocs));
	if (!out->members || !out->code || !out->relocs) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	memset(out->code, 0xcc, out->code_len); /* between copies: int3 */
	if ((r = combine_unwind(ps, n, out, err, errlen)) < 0)
		goto fail;
	/* One counter area at the first page boundary after the unwind data,
	 * each copy's counters on a line of their own. */
	uint64_t lead = out->base % AREA_ALIGN;
	uint64_t end = out->unwind_len ? out->unwind_off + out->unwind_len : out->code_len;
	uint64_t area = (lead + end + AREA_ALIGN - 1) / AREA_ALIGN * AREA_ALIGN - lead, slot = 0;
	for (size_t k = 0; k < n; k++) {
		struct hp_plan *p = ps[k];
		uint64_t at = p->base - out->base;
		if ((r = move_area(m, p, out->base + area + 8 * slot - p->base, err, errlen)) < 0)
			goto fail;
		slot += (p->instrument->nslots + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
		memcpy(out->code + at, p->code, p->code_len);
		for (size_t i = 0; i < p->nrelocs; i++) {
			out->relocs[out->nrelocs] = p->relocs[i];
			out->relocs[out->nrelocs++].offset += (uint32_t)at;
		}
		out->members[k] = p->members[0]; /* shared with the copy: hp_instrument_combined_free */
		out->verified_blocks += p->verified_blocks;
		out->verified_edges += p->verified_edges;
		out->verified_insns += p->verified_insns;
	}
	out->nmembers = n;
	out->verified = true; /* every copy verified where it is, its counters where they are */
	out->status = HP_PLAN_OK;
	*area_off = area;
	*area_len = (8 * slot + AREA_ALIGN - 1) / AREA_ALIGN * AREA_ALIGN;
	return 0;
fail:
	hp_instrument_combined_free(out);
	return r;
}

void hp_instrument_combined_free(struct hp_plan *out)
{
	free(out->members);
	free(out->code);
	free(out->relocs);
	free(out->unwind);
	memset(out, 0, sizeof(*out));
}
