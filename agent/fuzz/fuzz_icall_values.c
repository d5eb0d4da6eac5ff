/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: value profiles of indirect call sites (`hotpathd icalls
 * --json`, what `hotpathd plan --icall-targets` reads). An input is read or
 * refused with a message; what is read names every site's function and
 * every target, holds non-negative counts, and lists each site's targets
 * most first.
 */
#include <stdio.h>
#include <stdlib.h>

#include "plan/icall_values.h"

static void fail(const char *what)
{
	fprintf(stderr, "invariant broken: %s\n", what);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hp_icall_values v;
	char err[256] = "";

	if (hp_icall_values_parse((const char *)data, size, &v, err, sizeof(err)) < 0) {
		if (!err[0] || v.nsites || v.sites)
			fail("a refused value profile gives no reason, or keeps sites");
		return 0;
	}
	for (size_t i = 0; i < v.nsites; i++) {
		const struct hp_icall_value_site *s = &v.sites[i];
		if (!s->function || !s->function[0] || !(s->calls >= 0))
			fail("a site without its function, or with a negative count");
		for (size_t k = 0; k < s->ntargets; k++) {
			if (!s->targets[k].function || !s->targets[k].function[0] || !(s->targets[k].count >= 0))
				fail("a target without its function, or with a negative count");
			if (k && s->targets[k].count > s->targets[k - 1].count)
				fail("targets not most first");
		}
	}
	hp_icall_values_free(&v);
	return 0;
}
