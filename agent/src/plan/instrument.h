/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Instrumented copies (KernInst's inline counters): a function emitted by
 * the plan emitter in its original block order, every block prefixed by an
 * increment of its own 64-bit counter in a counter area that the install
 * maps writable right after the copy (RIP-relative, so the code and the
 * area move together and need no relocation). Where the status flags are
 * live at a block's start (computed from the model's CFG), the increment is
 * wrapped in pushfq/popfq below the red zone; elsewhere it is one
 * instruction. The increments carry a lock prefix unless the caller asks
 * for plain ones (see docs/decisions.md: exact with any number of threads
 * only when locked). The copy has its own unwind data (plan/unwind.c, the
 * counters' rows included), placed after the code, and the counter area
 * after that, so a backtrace, an exception or a thread cancellation that
 * walks through a counted frame unwinds as through the original.
 */
#ifndef HOTPATH_PLAN_INSTRUMENT_H
#define HOTPATH_PLAN_INSTRUMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "plan/plan.h"

/* Counting edges (issue 17's spanning-tree placement, Knuth / Ball-Larus):
 * the function's CFG plus one node for the outside (entries, exits,
 * indirect arrivals); the edges of a maximum spanning tree (weighted by
 * estimated frequency, loop back edges first) carry no counter, every other
 * edge has one, and the tree edges' counts follow by flow conservation. */
#define HP_COUNTER_OUTSIDE UINT32_MAX

struct hp_counter_edge {
	uint32_t from, to; /* block indices, or HP_COUNTER_OUTSIDE */
	int32_t slot;      /* its counter, or -1: derived */
	/* A block's edge to itself (a one-block loop) whose counter is the
	 * block's: slot counts every arrival at the block, and the edge is that
	 * less the block's other arrivals. No stub, so the loop runs with one
	 * increment and its own jump per iteration, not two jumps through a
	 * stub. */
	bool whole_block;
};

/* A counter on an edge that neither end can hold: the jcc ending block
 * from branches (taken side, or falls through) to the stub, which counts
 * and jumps to block to. Stubs are laid out after the blocks. */
struct hp_counter_stub {
	uint32_t from, to;
	bool taken;
	uint32_t slot;
	uint64_t addr; /* where the emitter put it */
};

struct hp_instrument {
	bool lock;
	bool edges;          /* counters on a spanning tree's complement (else one per block) */
	uint32_t red_zone;   /* bytes below rsp left alone (128 in user code) */
	uint32_t nblocks;    /* of the member */
	uint32_t nslots;     /* counters, 8 bytes each in the area */
	unsigned *live;      /* per block: status flags live at its start (HP_ISA_STATUS_FLAGS bits) */
	uint32_t kept_flags; /* counters that preserve the flags */
	int32_t *block_slot; /* per block: the counter before it, or -1 */
	struct hp_counter_edge *cedges;
	uint32_t ncedges;
	struct hp_counter_stub *stubs;
	uint32_t nstubs;
	uint64_t area_off; /* the counter area's offset from plan->base (page aligned) */
	uint32_t *disp;    /* per slot: code offset of its increment's displacement */
};

/*
 * Status flags live at the start of each of f's blocks (live[nblocks]),
 * from the instructions' flag reads and writes and the CFG: a return or a
 * tail call leaves them dead (the ABI preserves none), a call kills them,
 * an unresolved indirect jump keeps all of them live. code holds f's bytes.
 */
int hp_flags_live_in(const struct hp_module *mod, const struct hp_function *f, const uint8_t *code, unsigned *live);

/*
 * Make p: an instrumented copy of f (in mod of m), laid out at base (below
 * 4096: after f's module, that many bytes into its page), emitted and
 * verified; its counter area starts at the first page boundary after it. every_block: a counter before
 * every block; else counters on a spanning tree's complement (falling back
 * to every block when a counter cannot be placed: an edge of a jump table
 * between blocks with other edges). Returns 0 (p->status says
 * whether it is OK: HP_PLAN_ROOT_KEPT with the rule when f cannot move,
 * HP_PLAN_REFUSED when verification failed), or a negative errno with err
 * filled. Free with hp_instrument_plan_free.
 */
int hp_instrument_plan(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f, bool lock,
		       bool every_block, uint64_t base, struct hp_plan *p, char *err, size_t errlen);
/* Where the copy after p starts when copies are combined: p's end, 16-byte aligned. */
uint64_t hp_instrument_next_base(const struct hp_plan *p);
/*
 * Combine counted copies ps[0..n) into one plan out (instrument_set.c), to be
 * installed as one hot set: one heap, one quiesce, one journal, one unwinder
 * registration, one revert. Each ps[k] is an OK, verified hp_instrument_plan
 * laid out at hp_instrument_next_base(&ps[k - 1]) (ps[0] anywhere), of
 * functions of one module. out gets every copy's member, code (int3 between
 * copies) and relocations, one .eh_frame after the code (their CIE once, every
 * FDE pointing at the same code as before), and no instrument; the counter
 * area, *area_len bytes at *area_off from out->base (page aligned in the
 * running heap), holds every copy's counters, each copy's from a 64-byte line:
 * ps[k]'s increments and instrument->area_off are moved there and ps[k]
 * verified again, so ps[k].base + ps[k].instrument->area_off is where its
 * counters are. 0, or a negative errno with err filled (-EPERM: a copy failed
 * verification). out shares the copies' members: free it with
 * hp_instrument_combined_free before them.
 */
int hp_instrument_combine(struct hp_model *m, struct hp_plan *const *ps, size_t n, struct hp_plan *out,
			  uint64_t *area_off, size_t *area_len, char *err, size_t errlen);
void hp_instrument_combined_free(struct hp_plan *out);
/* Block counts (blocks[nblocks]) and, if edge_counts is not NULL, the count
 * of every counting edge (edge_counts[ncedges], in cedges' order) from the
 * counters' values (slots[nslots]). 0, or -EINVAL when the equations do not
 * close (they always do for a spanning tree). A count that conservation
 * makes negative (executions in flight at the reading) is 0. */
int hp_instrument_counts(const struct hp_instrument *ins, const uint64_t *slots, uint64_t *blocks,
			 uint64_t *edge_counts);
void hp_instrument_plan_free(struct hp_plan *p);
/* Move p's counter area to new_off from its base: every emitted
 * increment's displacement moves with it (its length does not change).
 * 0, or -ERANGE (nothing changed) when one would leave a rel32's reach. */
int hp_instrument_move_area(struct hp_plan *p, uint64_t new_off);
/* Bytes of the counter area of p (page aligned), 0 for plans without counters. */
size_t hp_instrument_area_len(const struct hp_plan *p);

/* Emitter and verifier hooks (emit.c, verify.c). Block index bi of a
 * member stands for stub bi - nblocks when it is nblocks or more. The
 * prefix's length before block bi of member; write it at address at (out
 * points there); check the bytes at at are that prefix (its length, or
 * -1). */
uint32_t hp_instrument_prefix_len(const struct hp_plan *p, uint32_t member, uint32_t bi);
int hp_instrument_write(struct hp_plan *p, uint32_t member, uint32_t bi, uint64_t at, uint8_t *out);
int hp_instrument_check(const struct hp_plan *p, uint32_t member, uint32_t bi, uint64_t at);
/* Where the blocks end (the first stub, or the code's end). */
uint64_t hp_instrument_blocks_end(const struct hp_plan *p);
/* Check the stubs tile [blocks end, code end), each its counter and a jump
 * to its block's copy; false with why filled. */
bool hp_instrument_verify_stubs(const struct hp_plan *p, char *why, size_t wlen);
/* Where a branch of block from_bi to a really goes: through the stub at a
 * if that is a stub of from_bi's edges, else a itself. */
uint64_t hp_instrument_through_stub(const struct hp_plan *p, uint32_t from_bi, uint64_t a);

#endif
