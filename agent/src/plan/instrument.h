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
 * only when locked).
 */
#ifndef HOTPATH_PLAN_INSTRUMENT_H
#define HOTPATH_PLAN_INSTRUMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "plan/plan.h"

struct hp_instrument {
	bool lock;
	uint32_t red_zone;   /* bytes below rsp left alone (128 in user code) */
	uint32_t nslots;     /* counters: one per block of the member, in block index order */
	unsigned *live;      /* per block: status flags live at its start (HP_ISA_STATUS_FLAGS bits) */
	uint32_t kept_flags; /* blocks whose increment preserves the flags */
	uint64_t area_off;   /* the counter area's offset from plan->base (page aligned) */
	uint32_t *disp;      /* per slot: code offset of its increment's displacement */
};

/*
 * Status flags live at the start of each of f's blocks (live[nblocks]),
 * from the instructions' flag reads and writes and the CFG: a return or a
 * tail call leaves them dead (the ABI preserves none), a call kills them,
 * an unresolved indirect jump keeps all of them live. code holds f's bytes.
 */
int hp_flags_live_in(const struct hp_module *mod, const struct hp_function *f, const uint8_t *code, unsigned *live);

/*
 * Make p: an instrumented copy of f (in mod of m), laid out at base (0:
 * after f's module), emitted and verified. Returns 0 (p->status says
 * whether it is OK: HP_PLAN_ROOT_KEPT with the rule when f cannot move,
 * HP_PLAN_REFUSED when verification failed), or a negative errno with err
 * filled. Free with hp_instrument_plan_free.
 */
int hp_instrument_plan(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f, bool lock,
		       uint64_t base, struct hp_plan *p, char *err, size_t errlen);
void hp_instrument_plan_free(struct hp_plan *p);
/* Bytes of the counter area of p (page aligned), 0 for plans without counters. */
size_t hp_instrument_area_len(const struct hp_plan *p);

/* Emitter and verifier hooks (emit.c, verify.c). The prefix's length
 * before block bi of member; write it at address at (out points there);
 * check the bytes at at are that prefix (its length, or -1). */
uint32_t hp_instrument_prefix_len(const struct hp_plan *p, uint32_t member, uint32_t bi);
int hp_instrument_write(struct hp_plan *p, uint32_t member, uint32_t bi, uint64_t at, uint8_t *out);
int hp_instrument_check(const struct hp_plan *p, uint32_t member, uint32_t bi, uint64_t at);

#endif
