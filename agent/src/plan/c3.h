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

#endif
