/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: profile files (the measure report, a saved
 * hotpath-profile/1, a plan's JSON) read against a real program's model
 * (hotpathd itself unless HP_FUZZ_ELF names another). An input is read or
 * refused with a message; what is read holds only non-negative counts at
 * block starts of functions of the model, and merging it with itself
 * keeps it so.
 */
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "plan/profile.h"
#include "target/target.h"

static void fail(const char *what)
{
	fprintf(stderr, "invariant broken: %s\n", what);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct hp_model *m;
	struct hp_profile p, two[2], merged;
	char err[256] = "";

	if (!m) {
		struct hp_open_opts o = { .quiet = true, .threads = 1 };
		const char *path = getenv("HP_FUZZ_ELF") ? getenv("HP_FUZZ_ELF") : "build/hotpathd";
		if (hp_model_open_elf(path, &o, &m, err, sizeof(err)) < 0) {
			fprintf(stderr, "fuzz_profile needs an x86-64 program (HP_FUZZ_ELF): %s\n", err);
			exit(1);
		}
	}
	if (hp_profile_parse((const char *)data, size, m, &p, err, sizeof(err)) < 0) {
		if (!err[0] || p.nfns)
			fail("a refused profile gives no reason, or keeps counts");
		return 0;
	}
	for (size_t i = 0; i < p.nfns; i++) {
		const struct hp_module *mod;
		const struct hp_function *f = hp_model_lookup(m, p.fns[i].addr, &mod);
		if (!f || f->addr != p.fns[i].addr)
			fail("counts for an address that is no function");
		for (size_t b = 0; b < p.fns[i].nblocks; b++) {
			const struct hp_block *bl = hp_function_block_at(mod, f, f->addr + p.fns[i].blocks[b].offset);
			if (!bl || bl->offset != p.fns[i].blocks[b].offset || !(p.fns[i].blocks[b].count >= 0))
				fail("a count that is not at a block start, or negative");
		}
	}
	two[0] = two[1] = p;
	if (hp_profile_merge(two, 2, &merged) == 0)
		for (size_t i = 0; i < merged.nfns; i++)
			for (size_t b = 0; b < merged.fns[i].nblocks; b++)
				if (!(merged.fns[i].blocks[b].count >= 0))
					fail("a merged count is negative or not a number");
	hp_profile_free(&merged);
	hp_profile_free(&p);
	return 0;
}
