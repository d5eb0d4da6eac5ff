/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: arbitrary text read as /proc/kallsyms and turned into vmlinux and module
 * functions, then the input's bytes trimmed as a module function's tail. Checks the invariants
 * the rest of the engine relies on: within a module, functions are sorted, do not overlap and are
 * not empty; trimming never grows a function and leaves it non-empty. A rejection must say why.
 */
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "target/kallsyms.h"

static void broken(const char *what)
{
	fprintf(stderr, "invariant broken: %s\n", what);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hp_kallsyms ks = { 0 };
	struct hp_model *m = hp_model_new(HP_TARGET_KERNEL);
	char err[256] = "";
	FILE *fp = fmemopen((void *)data, size ? size : 1, "r");

	if (!m || !fp)
		abort();
	if (size == 0)
		fgetc(fp); /* fmemopen needs a non-empty buffer: read it to the end */
	if (hp_kallsyms_read(m, fp, &ks, err, sizeof(err)) == 0) {
		if (hp_kallsyms_build(m, &ks, err, sizeof(err)) < 0 && !err[0])
			broken("a build failure without a reason");
		for (size_t i = 0; i < m->nmods; i++) {
			const struct hp_module *mod = &m->mods[i];
			for (size_t k = 0; k < mod->nfuncs; k++) {
				if (!mod->funcs[k].size)
					broken("an empty function");
				if (k + 1 < mod->nfuncs &&
				    mod->funcs[k].addr + mod->funcs[k].size > mod->funcs[k + 1].addr)
					broken("overlapping or unsorted functions");
			}
		}
	} else if (!err[0]) {
		broken("a rejection without a reason");
	}
	fclose(fp);
	if (size && size <= UINT32_MAX) {
		uint32_t t = hp_ktext_trim_fill(data, (uint32_t)size, 0xffffffffc0000000ull, data[0] & 1);
		if (t > size || t == 0)
			broken("trimming grew or emptied a function");
	}
	hp_kallsyms_free(&ks);
	hp_model_free(m);
	return 0;
}
