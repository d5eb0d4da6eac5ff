// SPDX-License-Identifier: Apache-2.0
/*
 * Lookups over installed copies (moved.h), for probes placed on moved code
 * and for samples taken in it.
 */
#include <stdlib.h>

#include "measure/moved.h"

uint64_t hp_moved_lookup(const struct hp_moved_code *mc, size_t n, uint64_t a)
{
	for (size_t i = 0; i < n; i++) {
		if (a < mc[i].heap || a >= mc[i].heap + mc[i].heap_len)
			continue;
		size_t lo = 0, hi = mc[i].nblocks;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (mc[i].blocks[mid].copy <= a)
				lo = mid + 1;
			else
				hi = mid;
		}
		/* The last block starting at or before a that holds it. */
		for (size_t k = lo; k-- > 0;) {
			const struct hp_moved_block *b = &mc[i].blocks[k];
			if (!b->copy)
				break;
			if (a < b->copy + b->size)
				return b->orig + (a - b->copy);
			if (b->copy + 64 < a)
				break;
		}
	}
	return 0;
}

uint64_t hp_moved_run_address(const struct hp_moved_code *mc, size_t n, int pid, uint64_t orig, int entry)
{
	for (size_t i = 0; i < n; i++) {
		if (mc[i].pid != pid)
			continue;
		if (entry)
			for (size_t k = 0; k < mc[i].nfns; k++)
				if (mc[i].fns[k].orig == orig)
					return mc[i].fns[k].copy;
		for (size_t k = 0; k < mc[i].nblocks; k++)
			if (mc[i].blocks[k].orig == orig)
				return mc[i].blocks[k].copy;
	}
	return orig;
}

void hp_moved_code_free(struct hp_moved_code *mc, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(mc[i].blocks);
		free(mc[i].fns);
	}
	free(mc);
}
