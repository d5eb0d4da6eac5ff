/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Block layout by the extended TSP objective (Newell and Pupyrev, "Improved
 * Basic Block Reordering", IEEE Transactions on Computers 69(12), 2020; the
 * layout LLVM's CodeLayout and BOLT's -reorder-blocks=ext-tsp compute). A
 * layout's score sums, over the edges between its blocks, the edge's count
 * times 1 when the target starts where the source ends (a fallthrough),
 * 0.1 * (1 - d/1024) for a forward jump of d <= 1024 bytes and
 * 0.1 * (1 - d/640) for a backward jump of d <= 640 bytes: jumps short
 * enough to stay in the fetched lines still earn something. Chains start as
 * single blocks (a block that ends without a branch already joined with the
 * block it runs into); the pair of chains an edge connects whose merge gains
 * the most is merged, again and again while a merge gains anything. A merge
 * puts X before Y, or splits X (at most 128 blocks long) in two and puts Y
 * between, before or after its parts (X1 Y X2, Y X2 X1, X2 X1 Y), never
 * moving the entry from the front. The chains are then ordered entry first,
 * then by density (count per byte).
 *
 * Also the figure a layout is judged by without a PMU: its taken branches,
 * the summed counts of the edges whose target does not start where their
 * source ends (a taken jcc or jmp, including the jumps a layout adds).
 */
#ifndef HOTPATH_EXT_TSP_H
#define HOTPATH_EXT_TSP_H

#include <stddef.h>
#include <stdint.h>

#include "plan/chains.h"

/* As hp_chains_build (chains.h): the hot blocks of b[0..n) in layout order
 * into order, each one's chain into chain_of (-1 for cold blocks), the
 * chains' number into *nchains; returns the blocks placed, or -1 when out
 * of memory. */
int hp_ext_tsp_build(const struct hp_chain_block *b, size_t n, const struct hp_chain_edge *e, size_t ne, uint32_t entry,
		     uint32_t *order, int32_t *chain_of, uint32_t *nchains);

/* The ext-TSP score of the blocks laid out in order[0..k) back to back. */
double hp_ext_tsp_score(const struct hp_chain_block *b, size_t n, const struct hp_chain_edge *e, size_t ne,
			const uint32_t *order, size_t k);

/* Taken branches of a layout: order[0..k) holds the blocks, laid out back to
 * back except between order[brk - 1] and order[brk] (the hot chunk's end:
 * the cold chunk is elsewhere; brk = k when there is no break); an edge
 * from a block to one not right after it counts (blocks absent from order
 * are never right after anything). Edges from a block to itself count. */
double hp_layout_taken(size_t n, const struct hp_chain_edge *e, size_t ne, const uint32_t *order, size_t k, size_t brk);

#endif
