/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The install journals (replace/journal.h) read back and written as records:
 * an undo record to and from JSON, a journal's state (which records it has:
 * installed, reverting, heap kept, ...), the journals in a state folder and
 * the one of a process's root or of an install id. Numbers in records are
 * JSON integers or "0x..." strings (base/json_get.h).
 */
#ifndef HOTPATH_REPLACE_JOURNAL_STATE_H
#define HOTPATH_REPLACE_JOURNAL_STATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "replace/patch_target.h"

/* An address as a record's "0x..." string; a record's number (0 when absent). */
json_t *hp_jrec_hex(uint64_t v);
uint64_t hp_jrec_u64(const json_t *rec, const char *key);

/* An undo record ({"op": "undo", kind, addr, len, orig, now}) and back
 * (0, or -EINVAL for a malformed one; free u with hp_undo_free). */
json_t *hp_undo_record(const struct hp_undo *u);
int hp_undo_from_record(const json_t *r, struct hp_undo *u);

/* The plan file beside a journal: ID.journal -> ID.plan.json. */
void hp_journal_plan_path(const char *journal, char *out, size_t len);

/* What one journal's records say. */
struct hp_jstate {
	json_t *recs;
	const json_t *begin;
	bool installed, revert, reverted, heap_mapped, heap_released, heap_kept, unwind_intent, unwind_done,
		dereg_intent, unwind_registered;
	struct hp_heap heap;
	const json_t **undo;
	size_t nundo;
	char kept_why[256];
};

/* Read path's records: 0, or a negative errno with the reason in err. */
int hp_jstate_read(const char *path, struct hp_jstate *s, char *err, size_t errlen);
void hp_jstate_free(struct hp_jstate *s);

/* The paths of the *.journal files in dir, in name order (malloc'd, each and the array);
 * 0 (none when dir does not exist), or a negative errno. */
int hp_journals_list(const char *dir, char ***out, size_t *n);
/* The journal in dir of root installed in process pid started at start, and
 * not reverted (a revert that restored the code but kept the heap, because a
 * thread was still in it, counts as reverted): 0 with its path, or -ENOENT. */
int hp_journal_find(const char *dir, int pid, uint64_t start, const char *root, char *path, size_t plen);
/* A change to existing code (an entry or a call site) a journal records:
 * installs compose, so two may have written the same bytes (a hot set's
 * member entry, then a later plan's root; a call site both redirect). */
struct hp_jwrite {
	uint64_t addr;
	uint8_t len;
	uint8_t orig[HP_UNDO_MAX], now[HP_UNDO_MAX];
	uint64_t seq; /* its install's order (the begin record's "seq") */
	bool active;  /* its install is not being reverted: its bytes may be put back */
};
/* The writes the journals in dir record in process pid (started at start;
 * 0: any start), all but the journal except's (may be NULL), appended to
 * *out (n of them, capacity *cap). 0, -EIO when dir cannot be listed, or
 * -ENOMEM (what was read stays). */
int hp_journal_writes(const char *dir, int pid, uint64_t start, const char *except, struct hp_jwrite **out, size_t *n,
		      size_t *cap);

/* The journal of install id (the one installed before one whose revert kept
 * its heap): 0 with its path and process, or -ENOENT. */
int hp_journal_of_id(const char *dir, const char *id, char *path, size_t plen, int *pid);

#endif
