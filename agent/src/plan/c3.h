/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Function order by call-chain clustering, C3 (Ottoni and Maher, "Optimizing
 * function placement for large-scale data-center applications", CGO 2017;
 * BOLT's hfsort+ and cdsort descend from it). Functions are taken hottest
 * first; each one's cluster is appended to the cluster of its heaviest
 * caller while the merged cluster stays within a page; the clusters are then
 * laid out densest first (work per byte), so caller and callee share pages
 * and the hottest code comes first.
 */
#ifndef HOTPATH_C3_H
#define HOTPATH_C3_H

#include <stddef.h>
#include <stdint.h>

struct hp_c3_fn {
	double work;   /* samples, or instructions executed */
	uint32_t size; /* hot bytes */
};

/* One per caller and callee (its call sites' counts summed). */
struct hp_c3_call {
	uint32_t caller, callee; /* indices into the functions */
	double count;
};

/* Writes the n functions' layout order into order. 0, or -1 on allocation
 * failure. Ties are broken by index, so the order is reproducible. */
int hp_c3_order(const struct hp_c3_fn *f, size_t n, const struct hp_c3_call *calls, size_t ncalls, uint32_t page,
		uint32_t *order);

/* Where code whose first hot_bytes are hot (contiguous from its start)
 * should start, as an offset from a page boundary: a multiple of the line
 * below one way (sets x line bytes), chosen so its hot lines add as few as
 * possible to the sets the hot code staying in place fills beyond their
 * ways (resident[s]: hot lines of that code mapping to set s). Ties: the
 * fewest resident lines shared, then the smallest offset. */
uint32_t hp_place_offset(const uint32_t *resident, uint32_t sets, uint32_t ways, uint32_t line, uint64_t hot_bytes);

#endif
