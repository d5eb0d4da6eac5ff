/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recognizing the switch tables gcc emits for x86-64, from the instructions
 * before an indirect jump. Position-independent code loads a 32-bit offset
 * from a table addressed with lea and adds the table's address:
 *     cmp idx, N-1 ; ja default ; lea base, [rip+T] ;
 *     movsxd r, dword [base+idx*4] ; add r, base ; jmp r
 * Position-dependent code jumps through a table of absolute addresses:
 *     cmp idx, N-1 ; ja default ; jmp qword [idx*8+T]   (or mov r, [...]; jmp r)
 * A computed goto (gcc's "goto *table[i]", as interpreters dispatch) reads
 * a label table of absolute addresses through a base register, with no
 * bound check (the program's own index is in range by construction):
 *     lea base, [rip+T] ; ... ; jmp qword [base+idx*8]   (or mov r, [...]; jmp r)
 * Its size comes from the data, not the code: the caller reads entries
 * while they land in the function (cfg.c).
 * The caller reads and checks the entries (each must land on an instruction
 * of the function), so a wrong match is refused, never trusted.
 *
 * The lea may be hoisted out of the jump's block, e.g. before the loop the
 * switch is in (SQLite's record-header loop in sqlite3VdbeExec): the shape
 * is then recognized without it (hoisted), and hp_jt_base_reaches follows
 * the base register backwards over a CFG to every lea that sets it.
 */
#ifndef HOTPATH_JUMPTABLE_H
#define HOTPATH_JUMPTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hp_module;
struct hp_function;

struct hp_jt_match {
	uint64_t table;     /* absolute address */
	uint32_t nentries;  /* from the bound check */
	uint8_t entry_size; /* 4 or 8 */
	bool relative;      /* entries are offsets from table */
	uint32_t base_at;   /* index into offs of the instruction naming the table (the lea, or the load) */
	bool exact;         /* the bound check compares the index register itself */
	/* Relative tables: the register holding the table's address. hoisted:
	 * no lea sets it in the window (table 0), base_at is then the add that
	 * last reads it. */
	uint16_t base_reg;
	bool hoisted;
	/* A label table: absolute entries read through base_reg, no bound
	 * check (nentries 0: the caller counts them from the data). */
	bool label;
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

/* A CFG for following a register backwards: block b covers the bytes
 * [start[b], end[b]) of code (which holds [addr, addr + len)); its
 * predecessors are pred[pred_start[b] .. pred_start[b + 1]); entry[b] says
 * control may come into it from outside the graph (a function's entry, a
 * jump from another function or fragment): 1 at its start, 2 somewhere in
 * its middle (a path through it is then never proved). */
struct hp_jt_graph {
	const uint8_t *code;
	uint64_t addr;
	size_t len;
	size_t nblocks;
	uint64_t *start, *end;
	uint32_t *pred_start, *pred;
	uint8_t *entry;
	bool complete; /* every block's successors are known (no unresolved indirect jump) */
};

/* f's graph from the model (its blocks at their addresses; code left NULL
 * for the caller): predecessors from its successors inside f, entries its
 * first block and every block another function's jump or call lands in:
 * the sorted addresses in foreign (every jump and call target of the
 * module, hp_jt_foreign), or with foreign NULL found by a scan of the
 * module. 0, or -ENOMEM. */
int hp_jt_graph_of(const struct hp_module *mod, const struct hp_function *f, const uint64_t *foreign, size_t nforeign,
		   struct hp_jt_graph *g);
/* Every direct call's target and every jump's target outside its own
 * function's blocks, sorted: *out (malloc'd), *n. 0, or -ENOMEM. */
int hp_jt_foreign(const struct hp_module *mod, uint64_t **out, size_t *n);
void hp_jt_graph_free(struct hp_jt_graph *g);

/* Does every path that reaches the instruction at use (in block b) from an
 * entry of g pass a "lea base, [rip + T]" (64-bit) after which nothing
 * writes base (hp_isa_writes_reg), every such lea naming the same T? Then
 * *table = T, *lea the lowest such lea's address, and true. A path on which
 * anything else writes base, an entry reached with base unset, or bytes
 * that do not decode give false. */
bool hp_jt_base_reaches(const struct hp_jt_graph *g, size_t b, uint64_t use, uint16_t base, uint64_t *table,
			uint64_t *lea);

/* The same walk: 1 as hp_jt_base_reaches' true; 0 when nothing on the way
 * writes base but no path reaches a lea or an entry either (every path back
 * ends at blocks nothing in g reaches: a computed goto's handlers before its
 * table's edges are known, which the proof over the complete CFG then
 * settles); -1 otherwise. */
int hp_jt_base_walk(const struct hp_jt_graph *g, size_t b, uint64_t use, uint16_t base, uint64_t *table, uint64_t *lea);

/* Index (among f's tables) of the table whose base the instruction at offset
 * off of f (code: f's bytes) sets: its lea, or for a hoisted table any "lea
 * r64, [rip + T]" of its address. -1 if none. */
int hp_jt_base_of(const struct hp_module *mod, const struct hp_function *f, const uint8_t *code, uint32_t off);

#endif
