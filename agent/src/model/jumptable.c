// SPDX-License-Identifier: Apache-2.0
/*
 * Switch-table recognition (see jumptable.h): a backward walk over at most a
 * dozen instructions before an indirect jump, following the jump's register
 * to the load of the table entry, the entry's base to its lea, and the index
 * to the nearest "cmp index, limit" that guards the jump with ja/jae.
 */
#include <string.h>

#include "isa/isa.h"
#include "model/jumptable.h"

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
	if (jmp->op[0].kind != HP_OP_REG)
		return false;
	uint16_t r = jmp->op[0].reg;

	for (i = k - 1; i-- > 0;) {
		const struct hp_isa_detail *x = &d[i];

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
					*index = idx;
					return true;
				}
			}
			return false;
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

	return shape(code, size, faddr, offs, n, out, d, &k, &index) &&
	       find_bound(d, k - 1, index, &out->nentries, &out->exact);
}
