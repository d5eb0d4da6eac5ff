/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: arbitrary bytes read as the capability cache file
 * (host/caps_cache.h) for a fixed key. Checks what hp_caps_get relies on: a
 * file taken gives exactly the cached capabilities, in probe order, each
 * with a detail of printable ASCII that fits; a refusal says why and leaves
 * nothing behind; and what is taken encodes back to the very bytes that were
 * read (nothing of it unchecked).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/caps_cache.h"

static void broken(const char *what)
{
	fprintf(stderr, "invariant broken: %s\n", what);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct hp_caps_key k = { .text = "agent 5f1c0ffee0\nboot 1b2c3d4e-0000-4000-8000-00000000abcd\n"
						      "release 6.1.0-lane\nlockdown none\n" };
	static const char *const order[] = { "fentry",          "fexit",  "kprobes", "kretprobes", "tracepoints",
					     "raw_tracepoints", "tp_btf", "uprobes", "uretprobes", "uprobe_multi" };
	struct hp_caps c;
	char why[256] = "", *back = NULL;
	size_t blen = 0;

	if (hp_caps_cache_decode((const char *)data, size, &k, &c, why, sizeof(why)) == 0) {
		if (c.n != sizeof(order) / sizeof(order[0]))
			broken("not every cached capability");
		for (size_t i = 0; i < c.n; i++) {
			if (!c.caps[i].name || strcmp(c.caps[i].name, order[i]))
				broken("a capability out of order or unnamed");
			if (strnlen(c.caps[i].detail, sizeof(c.caps[i].detail)) >= sizeof(c.caps[i].detail))
				broken("a detail without its end");
			for (const char *p = c.caps[i].detail; *p; p++)
				if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
					broken("a detail with a byte that is not printable");
		}
		if (hp_caps_cache_encode(&k, &c, &back, &blen) < 0 || blen != size || memcmp(back, data, size))
			broken("a file taken is not what its answers encode to");
	} else {
		if (!why[0])
			broken("a refusal without a reason");
		if (c.n)
			broken("a refusal that leaves answers behind");
	}
	free(back);
	return 0;
}
