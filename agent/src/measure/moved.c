// SPDX-License-Identifier: Apache-2.0
/*
 * Lookups over installed copies (moved.h), for probes placed on moved code.
 */
#include <stdlib.h>

#include "measure/moved.h"

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
