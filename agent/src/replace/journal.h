/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The undo journal: an append-only file in the agent's state folder, one
 * record a line, each a JSON object behind its length and CRC-32, made
 * durable (fdatasync) before the change it describes is made. Space is
 * reserved when the journal is created, so a full disk refuses an install
 * before anything changes in the target rather than in the middle of one.
 * A record cut short by a crash (a torn last line) was never durable, so
 * its change was never made: the reader stops there.
 */
#ifndef HOTPATH_REPLACE_JOURNAL_H
#define HOTPATH_REPLACE_JOURNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hp_journal {
	int fd;
	char path[4096];
	uint64_t end;      /* offset where the next record goes */
	uint64_t reserved; /* bytes allocated on disk */
	size_t records;
};

/* Create dir/name exclusively (and dir, 0700, if needed), reserving space.
 * Returns 0, -EEXIST when it exists, or a negative errno with err naming
 * the folder and the cause (ENOSPC: the disk is full). */
int hp_journal_create(const char *dir, const char *name, struct hp_journal *j, char *err, size_t errlen);
/* Open an existing journal to append to it (recovery, revert). */
int hp_journal_open(const char *path, struct hp_journal *j, char *err, size_t errlen);
/* Append records and make them durable with one fdatasync. Returns 0 or a
 * negative errno (err says why); a failed append adds nothing. */
int hp_journal_append(struct hp_journal *j, json_t *const *recs, size_t n, char *err, size_t errlen);
/* Append one record (steals the reference). */
int hp_journal_add(struct hp_journal *j, json_t *rec, char *err, size_t errlen);
/* The complete records at the start of buf (a journal's bytes), as a JSON
 * array (new reference); *torn tells whether a malformed or cut-short
 * record ended them. Returns the bytes they take. */
size_t hp_journal_parse(const char *buf, size_t n, json_t **records, bool *torn);
/* Every complete record of the journal at path, as a JSON array (new
 * reference); *torn tells whether a cut-short record ended it. */
int hp_journal_read(const char *path, json_t **records, bool *torn, char *err, size_t errlen);
/* Remove the journal (its change is fully undone) and make that durable. */
int hp_journal_retire(struct hp_journal *j);
void hp_journal_close(struct hp_journal *j);

/* Write a whole file durably (temporary name, fsync, rename, fsync of the folder). */
int hp_write_file_durably(const char *path, const void *data, size_t len, char *err, size_t errlen);

#endif
