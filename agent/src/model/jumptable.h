/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recognizing the switch tables gcc emits for x86-64, from the instructions
 * before an indirect jump. Position-independent code loads a 32-bit offset
 * from a table addressed with lea and adds the table's address:
 *     cmp idx, N-1 ; ja default ; lea base, [rip+T] ;
 *     movsxd r, dword [base+idx*4] ; add r, base ; jmp r
 * Position-dependent code jumps through a table of absolute addresses:
 *     cmp idx, N-1 ; ja default ; jmp qword [idx*8+T]   (or mov r, [...]; jmp r)
 * The caller reads and checks the entries (each must land on an instruction
 * of the function), so a wrong match is refused, never trusted.
 */
#ifndef HOTPATH_JUMPTABLE_H
#define HOTPATH_JUMPTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hp_jt_match {
	uint64_t table;     /* absolute address */
	uint32_t nentries;  /* from the bound check */
	uint8_t entry_size; /* 4 or 8 */
	bool relative;      /* entries are offsets from table */
	uint32_t base_at;   /* index into offs of the instruction naming the table (the lea, or the load) */
	bool exact;         /* the bound check compares the index register itself */
};

/* Tables larger than this are not believed. */
#define HP_JT_MAX_ENTRIES 4096u

/* code/faddr: the function's bytes and address; offs[0..n) the offsets of
 * the instructions before the jump in address order, the jump itself last.
 * Returns true and fills *out when the sequence is one of the patterns. */
bool hp_jt_recognize(const uint8_t *code, uint32_t size, uint64_t faddr, const uint32_t *offs, size_t n,
		     struct hp_jt_match *out);
/* The same without the bound check (nentries 0, exact false): how a copy
 * whose bound check lies in another block is recognized again. */
bool hp_jt_recognize_shape(const uint8_t *code, uint32_t size, uint64_t faddr, const uint32_t *offs, size_t n,
			   struct hp_jt_match *out);

#endif
