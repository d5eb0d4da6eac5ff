/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Code that runs somewhere else now: the blocks of functions whose copy is
 * installed in a process (replace layer), each original block with the
 * address it runs at in the copy. A measurement probes the copy where the
 * original no longer runs (the original's entry is a jump, and uprobes
 * read the instruction they replace from the file, not from the patched
 * memory), and a probe hit in the copy is attributed to the original
 * block it was copied from.
 */
#ifndef HOTPATH_MEASURE_MOVED_H
#define HOTPATH_MEASURE_MOVED_H

#include <stddef.h>
#include <stdint.h>

struct hp_moved_block {
	uint64_t orig;      /* the original block's address */
	uint64_t copy;      /* where it runs in the copy; 0 when the layout emptied it */
	uint32_t size;      /* bytes in the copy */
	uint32_t orig_size; /* bytes of the original block (0: not known) */
	uint32_t offset;    /* in its function */
	uint32_t member;
};

struct hp_moved_fn {
	uint64_t orig, copy; /* entries */
	uint32_t size;       /* of the original */
};

struct hp_moved_code {
	int pid;
	uint64_t heap, heap_len;
	struct hp_moved_block *blocks; /* sorted by copy */
	size_t nblocks;
	struct hp_moved_fn *fns;
	size_t nfns;
};

/* Where original address orig (a function entry when entry is set, else a
 * block start) of process pid runs now: its copy, 0 when the copy's
 * layout emptied that block, or orig itself when it did not move. */
uint64_t hp_moved_run_address(const struct hp_moved_code *mc, size_t n, int pid, uint64_t orig, int entry);
void hp_moved_code_free(struct hp_moved_code *mc, size_t n);

/* Blocks sorted by their copy's address. */
void hp_moved_sort(struct hp_moved_block *b, size_t n);
/* The other way, for samples taken in copies: the blocks of every copy in
 * mc (all pids), flattened into *out sorted by copy address (emptied blocks
 * left out). 0, or -ENOMEM. */
int hp_moved_copies(const struct hp_moved_code *mc, size_t n, struct hp_moved_block **out, size_t *nout);
/* The original address that copy address ip runs as, in blocks sorted by
 * copy (hp_moved_copies): the block's original start plus ip's distance into
 * its copy, kept inside the original block (the branches a layout adds after
 * a body run as the block's last byte); 0 when ip is in no copied block. */
uint64_t hp_moved_original(const struct hp_moved_block *b, size_t n, uint64_t ip);

#endif
