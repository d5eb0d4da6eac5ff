/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stack ids and which stack definitions the backend has. A stack's id is a
 * content hash of its frames (see proto Stack.id), so it is the same on every
 * stream and after a restart. A definition travels with every batch that
 * counts the stack until a batch that carried it is acknowledged on the
 * current stream; a new stream starts with nothing known, and a definition
 * acknowledged more than an hour ago is sent again (the backend forgets
 * stacks nothing has referenced within its retention).
 */
#ifndef HOTPATH_DAEMON_STACK_DEFS_H
#define HOTPATH_DAEMON_STACK_DEFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "measure/stack_table.h"
#include "model/model.h"

/* How long an acknowledged definition is taken as known to the backend. */
#define HP_STACK_DEF_TTL_MS (3600 * 1000)

struct hp_stack_def_slot {
	uint64_t id;       /* 0 = empty (an id of 0 is never tracked: it is always sent) */
	uint64_t sent_seq; /* batch that last carried the definition; 0 = none in flight */
	int64_t acked_ms;  /* when a batch carrying it was acknowledged; 0 = not yet */
};

struct hp_stack_defs {
	struct hp_stack_def_slot *slots;
	size_t nslots, nused, pending;
};

/* The content id of stack st of set (kernel frames named by m's module digests). */
uint64_t hp_stack_id(const struct hp_model *m, const struct hp_stack_set *set, const struct hp_stack *st);

int hp_stack_defs_init(struct hp_stack_defs *d);
void hp_stack_defs_free(struct hp_stack_defs *d);
/* A new stream: the backend is taken to know nothing yet. */
void hp_stack_defs_reset(struct hp_stack_defs *d);
/* Whether a batch counting stack id must carry its definition. */
bool hp_stack_defs_needed(const struct hp_stack_defs *d, uint64_t id, int64_t now_ms);
/* Batch seq carries the definition of id. */
void hp_stack_defs_sent(struct hp_stack_defs *d, uint64_t id, uint64_t seq);
/* Every batch of this instance up to seq is stored. */
void hp_stack_defs_ack(struct hp_stack_defs *d, uint64_t seq, int64_t now_ms);

#endif
