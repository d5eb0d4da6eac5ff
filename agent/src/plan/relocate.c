// SPDX-License-Identifier: Apache-2.0
/*
 * Re-basing emitted code: a plan's code is laid out at plan->base, but an
 * installer learns where the code really goes only when it has memory near
 * the text (a process's code heap, the kernel module's). References inside
 * the group are relative to each other and move with the code; every
 * reference out of it is a relocation (the offset of a 32-bit relative
 * field and the absolute address it reaches), whose field shifts by the
 * distance the code moved; an absolute one (a promoted call's compare
 * slot, 8 bytes) gets the address itself. A label table's entry (8 bytes)
 * holds an address in the code, which moves with it. A bias moves the targets too: a model read from
 * a position-independent file on disk has file addresses, the process runs
 * it at file address + load bias.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"

int hp_plan_relocate(const struct hp_plan *p, uint64_t new_base, int64_t bias, uint8_t *out, char *err, size_t errlen)
{
	int64_t shift = (int64_t)(p->base - new_base) + bias;

	if (!p->code || !p->code_len) {
		snprintf(err, errlen, "the plan has no emitted code");
		return -EINVAL;
	}
	memcpy(out, p->code, p->code_len);
	for (size_t i = 0; i < p->nrelocs; i++) {
		const struct hp_reloc *r = &p->relocs[i];
		int32_t field;
		int64_t v;

		if ((uint64_t)r->offset + (r->kind == HP_RELOC_REL32 ? 4 : 8) > p->code_len) {
			snprintf(err, errlen, "relocation %zu at +0x%x lies outside the code", i, r->offset);
			return -EINVAL;
		}
		if (r->kind == HP_RELOC_CODE64) {
			uint64_t a = r->target - p->base + new_base;
			if (r->target < p->base || r->target - p->base >= p->code_len) {
				snprintf(err, errlen, "relocation %zu at +0x%x names 0x%" PRIx64 ", not in the code", i,
					 r->offset, r->target);
				return -EINVAL;
			}
			memcpy(out + r->offset, &a, 8);
			continue;
		}
		if (r->kind == HP_RELOC_ABS64) {
			uint64_t a = r->target + (uint64_t)bias;
			memcpy(out + r->offset, &a, 8);
			continue;
		}
		memcpy(&field, out + r->offset, 4);
		v = (int64_t)field + shift;
		/* The distance as integers, not modulo 2^64: no reaching across
		 * the top of the address space. */
		__int128 d = (__int128)(r->target + (uint64_t)bias) - ((__int128)new_base + r->offset);
		if (v < INT32_MIN || v > INT32_MAX || d < -((__int128)1 << 31) - 16 || d > ((__int128)1 << 31) + 16 ||
		    new_base + p->code_len < new_base) {
			snprintf(err, errlen,
				 "the code at 0x%" PRIx64 " cannot reach 0x%" PRIx64
				 " (relocation at +0x%x): more than "
				 "2 GiB away",
				 new_base, r->target + (uint64_t)bias, r->offset);
			return -ERANGE;
		}
		field = (int32_t)v;
		memcpy(out + r->offset, &field, 4);
	}
	return 0;
}
