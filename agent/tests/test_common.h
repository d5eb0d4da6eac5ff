/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checks shared by the model tests: structural invariants every parsed
 * function must satisfy, whatever the target.
 */
#ifndef HOTPATH_TEST_COMMON_H
#define HOTPATH_TEST_COMMON_H

#include <inttypes.h>
#include <stdio.h>

#include "model/model.h"
#include "target/target.h"

/* Blocks tile [0, size) in order; fallthrough/taken targets are block starts
 * of the same function. Returns NULL or a static description of the first
 * violation. */
static const char *check_function_cfg(const struct hp_module *mod, const struct hp_function *f)
{
	static char why[256];
	uint32_t off = 0, b, k;

	if (f->size && !f->nblocks) {
		snprintf(why, sizeof(why), "%s: no blocks", f->name);
		return why;
	}
	for (b = 0; b < f->nblocks; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];

		if (bl->offset != off || !bl->size) {
			snprintf(why, sizeof(why), "%s: block %u at +0x%x, expected +0x%x (size %u)", f->name, b,
				 bl->offset, off, bl->size);
			return why;
		}
		off += bl->size;
	}
	if (off != f->size) {
		snprintf(why, sizeof(why), "%s: blocks cover %u of %u bytes", f->name, off, f->size);
		return why;
	}
	for (b = 0; b < f->nblocks; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];

		for (k = 0; k < bl->nsucc; k++) {
			const struct hp_succ *s = &mod->succs[bl->succ_start + k];

			if (s->kind != HP_SUCC_FALLTHROUGH && s->kind != HP_SUCC_TAKEN)
				continue;
			const struct hp_block *t = hp_function_block_at(mod, f, f->addr + s->target);
			if (!t || t->offset != s->target) {
				snprintf(why, sizeof(why), "%s: %s target +0x%" PRIx64 " is not a block start", f->name,
					 hp_succ_kind_name(s->kind), s->target);
				return why;
			}
		}
	}
	return NULL;
}

#endif
