/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Basic-block chains for a function's hot chunk: Pettis-Hansen's greedy
 * merging of chains along edges in decreasing count, restricted by the
 * AS/400 FDPR rules: a chain is extended only with a "perfect partner" (the
 * edge is both the heaviest out of its source and the heaviest into its
 * target); a small isolated predecessor whose only successor is the target
 * starts a new chain with it instead; and a block that ends without a
 * branch keeps its successor right after it (ShouldFollow: otherwise a
 * jump would be added).
 */
#ifndef HOTPATH_CHAINS_H
#define HOTPATH_CHAINS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hp_chain_block {
	double count;
	uint32_t size;
	bool hot;
	int32_t falls_to; /* ends without a branch and runs into this block; -1 if it ends in one */
};

struct hp_chain_edge {
	uint32_t from, to;
	double count;
};

/* Chains over the hot blocks of b[0..n): writes the hot blocks in layout
 * order into order (entry's chain first, then each chain after the one its
 * heaviest incoming edge comes from, else by weight) and the chain number of
 * each into chain_of (indexed by block; -1 for cold blocks). Returns the
 * number of hot blocks placed (order's length) and sets *nchains, or -1 on
 * allocation failure. small_bytes bounds an "isolated small" block. */
int hp_chains_build(const struct hp_chain_block *b, size_t n, const struct hp_chain_edge *e, size_t ne, uint32_t entry,
		    uint32_t small_bytes, uint32_t *order, int32_t *chain_of, uint32_t *nchains);

#endif
