// SPDX-License-Identifier: Apache-2.0
/*
 * Lookups over installed copies (moved.h), for probes placed on moved code.
 */
#include <errno.h>
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

static int by_copy(const void *a, const void *b)
{
	const struct hp_moved_block *x = a, *y = b;
	return x->copy < y->copy ? -1 : x->copy > y->copy;
}

void hp_moved_sort(struct hp_moved_block *b, size_t n)
{
	qsort(b, n, sizeof(*b), by_copy);
}

int hp_moved_copies(const struct hp_moved_code *mc, size_t n, struct hp_moved_block **out, size_t *nout)
{
	size_t total = 0, k = 0;

	for (size_t i = 0; i < n; i++)
		total += mc[i].nblocks;
	*out = NULL;
	*nout = 0;
	if (!total)
		return 0;
	struct hp_moved_block *b = malloc(total * sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < mc[i].nblocks; j++)
			if (mc[i].blocks[j].copy && mc[i].blocks[j].size)
				b[k++] = mc[i].blocks[j];
	hp_moved_sort(b, k);
	*out = b;
	*nout = k;
	return 0;
}

uint64_t hp_moved_original(const struct hp_moved_block *b, size_t n, uint64_t ip)
{
	size_t lo = 0, hi = n;

	while (lo < hi) { /* the first block starting after ip */
		size_t mid = lo + (hi - lo) / 2;
		if (b[mid].copy <= ip)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || ip - b[lo - 1].copy >= b[lo - 1].size)
		return 0;
	const struct hp_moved_block *k = &b[lo - 1];
	uint64_t d = ip - k->copy;
	return k->orig + (k->orig_size && d >= k->orig_size ? k->orig_size - 1 : d);
}
