/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: arbitrary bytes read as the kernel's noreturn cache file
 * (target/kernel_cache.h) for a fixed key. Checks what the kernel target
 * relies on: a file taken has entries in order, each inside vmlinux's text
 * and no more than its functions; a refusal says why; and what is taken
 * encodes back to the very bytes that were read (nothing of it unchecked).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "target/kernel_cache.h"

static void broken(const char *what)
{
	fprintf(stderr, "invariant broken: %s\n", what);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct hp_kcache_key k = { .agent = "5f1c0ffee0",
						.boot = "1b2c3d4e-0000-4000-8000-00000000abcd",
						.build = "eb4fbcd037e7253717950bf2b93bd5566f47c56f",
						.nfuncs = 64,
						.span = 0x4000 };
	struct hp_kcache_fn *v = NULL;
	char why[256] = "", *back = NULL;
	size_t n = 0, blen = 0;

	if (hp_kcache_decode((const char *)data, size, &k, &v, &n, why, sizeof(why)) == 0) {
		if (n > k.nfuncs)
			broken("more entries than functions");
		for (size_t i = 0; i < n; i++)
			if (v[i].off >= k.span || (i && v[i].off <= v[i - 1].off))
				broken("an entry out of bounds or out of order");
		if (hp_kcache_encode(&k, v, n, &back, &blen) < 0 || blen != size || memcmp(back, data, size))
			broken("a file taken is not what its entries encode to");
	} else if (!why[0]) {
		broken("a refusal without a reason");
	}
	free(back);
	free(v);
	return 0;
}
