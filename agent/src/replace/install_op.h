/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An install or revert in progress, shared by the engine's two halves
 * (install_engine.c, revert.c): its target, journal, heap and the writes it made,
 * and undoing them (calls first, then the entry, then the heap), which both
 * a failed install and a revert do. Nothing outside replace/ includes this.
 */
#ifndef HOTPATH_REPLACE_INSTALL_OP_H
#define HOTPATH_REPLACE_INSTALL_OP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "replace/install.h"
#include "replace/journal.h"
#include "replace/journal_state.h"
#include "replace/patch_target.h"

/* An install or revert in progress. */
struct hp_op {
	const struct hp_iplan *p;
	const struct hp_install_opts *o;
	struct hp_patch_target t;
	bool have_target;
	struct hp_journal j;
	int64_t delta; /* running address - planned address */
	struct hp_heap heap;
	bool heap_mapped, unwind_intent, unwind_unknown;
	bool retry; /* a heap a revert kept, asked again: one look, no wait */
	uint8_t *image;
	size_t image_len;
	struct hp_undo scratch;
	bool scratch_applied;
	struct hp_undo *writes; /* entries first (the root's, then a hot set's others), then call sites */
	size_t nwrites, cap_writes;
	uint8_t entry_block[256]; /* the root's entry block as it was, for moving PCs */
	uint32_t entry_block_len;
	/* The other installs' writes in this process (hp_op_load_others). */
	struct hp_jwrite *others;
	size_t nothers, cap_others;
	struct hp_install_result *res;
	void (*progress)(void *ctx, enum hp_install_step s, const char *detail);
	void *pctx;
};

/* Open the target a plan or journal names into x->t: kind "kernel" (the
 * kernel target, which only the process holding the install, pid, started
 * at start, can change: -EBUSY from any other while it runs, -ESRCH once
 * it exited, since then the module undid it), otherwise process pid
 * (started at start; 0: not checked). */
int hp_op_open_target(struct hp_op *x, const char *kind, int pid, uint64_t start, char *err, size_t errlen);
/* Report step s to the caller's progress callback. */
void hp_op_step(struct hp_op *x, enum hp_install_step s, const char *detail);
/* Append rec (taken) to the journal, durably. 0 or a negative errno. */
int hp_op_record(struct hp_op *x, json_t *rec, char *err, size_t errlen);
/* The live bytes under u: 0 the original ones, 1 the ones written, 2
 * neither, 3 another install's (x->others), -1 unreadable. */
int hp_op_live_state(struct hp_op *x, const struct hp_undo *u);
/* Read the writes of the other installs in process pid (started at start)
 * from the journals in dir, all but the journal self (may be NULL):
 * hp_journal_writes. 0, -EIO or -ENOMEM. */
int hp_op_load_others(struct hp_op *x, const char *dir, int pid, uint64_t start, const char *self);
/* u about to be written: its original bytes are the ones under another
 * install's write of the same bytes (its orig), not that install's. 0, or
 * -EBUSY when u overlaps another install's write only in part (writing it
 * would leave neither whole). */
int hp_op_under_others(const struct hp_op *x, struct hp_undo *u);
/* Remember a write (entries first, then call sites). 0 or -ENOMEM. */
int hp_op_add_write(struct hp_op *x, const struct hp_undo *u);
/* Undo what x made, calls first, then the entry, then the heap. The target
 * is quiesced. Scratch bytes go back whatever happens. */
int hp_op_undo_all(struct hp_op *x, char *err, size_t errlen);
void hp_op_free(struct hp_op *x);

#endif
