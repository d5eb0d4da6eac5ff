/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: edge derivation (measure/edges.c) over arbitrary CFGs and
 * block counts built from the input: up to 24 blocks, each with up to two
 * successors of any kind and any count, with or without an entry count. The
 * result must hold its invariants whatever the counts: every edge's count
 * within its bounds, exact edges with equal bounds, edges naming real
 * blocks, and when every edge is exact and no violation is reported, flow
 * conserved at every block whose count is known (some blocks come without one). Nothing may crash, loop or read out of bounds.
 */
#include <stdlib.h>
#include <string.h>

#include "measure/edges.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hp_block blocks[24];
	struct hp_succ succs[48];
	uint64_t counts[24], entry;
	bool measured[24];
	struct hp_module mod = { .blocks = blocks, .succs = succs };
	struct hp_function f = { .name = "f", .addr = 0x1000 };
	size_t p = 0;
	if (size < 2)
		return 0;
	uint32_t n = data[p++] % 25;
	bool has_entry = data[p++] & 1;
	f.nblocks = n;
	f.size = n * 16;
	for (uint32_t b = 0; b < n; b++) {
		blocks[b] = (struct hp_block){
			.offset = b * 16, .size = 16, .ninsn = 1, .succ_start = (uint32_t)mod.nsuccs
		};
		uint8_t spec = p < size ? data[p++] : 0;
		for (int k = 0; k < (spec & 3) && k < 2; k++) {
			uint8_t kind = (uint8_t)(1 + (spec >> (2 + 3 * k)) % 5);
			uint8_t tgt = p < size ? data[p++] : 0;
			/* Targets inside the function are block starts, or not (a damaged CFG). */
			uint64_t target = kind == HP_SUCC_TAIL_CALL ? 0x9000 : (uint64_t)(tgt % 26) * 16 + (tgt >> 7);
			succs[mod.nsuccs++] = (struct hp_succ){ kind, target };
			blocks[b].nsucc++;
		}
		counts[b] = 0;
		for (int k = 0; k < 2 && p < size; k++)
			counts[b] = counts[b] << 8 | data[p++];
		/* A block without a count now and then (the kernel refused its probe). */
		measured[b] = (spec & 0xe0) != 0xe0;
	}
	entry = p < size ? data[p++] : 0;
	struct hp_edge_result r;
	if (hp_edges_derive(&mod, &f, counts, measured, has_entry ? &entry : NULL, &r) < 0)
		return 0;
	size_t exact = 0;
	for (size_t i = 0; i < r.nedges; i++) {
		const struct hp_edge *e = &r.edges[i];
		if (e->low > e->count || e->count > e->high)
			abort();
		if (e->how == HP_EDGE_EXACT && (e->low != e->count || e->high != e->count))
			abort();
		if ((e->from != HP_EDGE_NO_BLOCK && e->from >= n) || (e->to != HP_EDGE_NO_BLOCK && e->to >= n))
			abort();
		exact += e->how == HP_EDGE_EXACT;
	}
	if (exact != r.nexact)
		abort();
	if (r.nexact == r.nedges && !r.violations) {
		for (uint32_t b = 0; b < n; b++) {
			if (!measured[b])
				continue;
			uint64_t in = 0, out = 0;
			for (size_t i = 0; i < r.nedges; i++) {
				in += r.edges[i].to == b ? r.edges[i].count : 0;
				out += r.edges[i].from == b ? r.edges[i].count : 0;
			}
			if (in != counts[b] || out != counts[b])
				abort(); /* exact everywhere and no violation means conserved */
		}
	}
	hp_edge_result_free(&r);
	return 0;
}
