// SPDX-License-Identifier: Apache-2.0
/*
 * Jump-label sites in copies (static_keys.h): the site lookup in the kernel
 * facts and the rule that a site's key read may change the status flags.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "isa/isa.h"
#include "plan/instrument.h"
#include "plan/static_keys.h"
#include "target/target.h"

const struct hp_static_branch *hp_key_site(struct hp_model *m, uint64_t addr)
{
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	size_t n = kf ? kf->njump_entries : 0,
	       i = n ? hp_sites_from(kf->jump_entries, n, sizeof(*kf->jump_entries), addr) : 0;

	return i < n && kf->jump_entries[i].code == addr ? &kf->jump_entries[i] : NULL;
}

size_t hp_key_sites_in(struct hp_model *m, uint64_t lo, uint64_t hi, const struct hp_static_branch **first)
{
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	size_t n = kf ? kf->njump_entries : 0;
	size_t i = n ? hp_sites_from(kf->jump_entries, n, sizeof(*kf->jump_entries), lo) : 0;
	size_t j = n ? hp_sites_from(kf->jump_entries, n, sizeof(*kf->jump_entries), hi) : 0;

	*first = j > i ? &kf->jump_entries[i] : NULL;
	return j - i;
}

/* The instruction ending block b of f: its offset, or UINT32_MAX. */
static uint32_t last_insn(const struct hp_function *f, const struct hp_block *b, const uint8_t *code)
{
	uint32_t off = b->offset, last = UINT32_MAX;
	struct hp_isa_insn in;

	while (off < b->offset + b->size && hp_isa_decode(code + off, f->size - off, f->addr + off, &in) == 0) {
		last = off;
		off += in.len;
	}
	return off == b->offset + b->size ? last : UINT32_MAX;
}

const char *hp_plan_key_sites_rule(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
				   const uint8_t *code, char *detail, size_t dlen)
{
	unsigned *live = calloc(f->nblocks + 1, sizeof(unsigned));
	const char *rule = NULL;

	if (!live)
		return "out of memory";
	if (hp_flags_live_in(mod, f, code, live) < 0) {
		free(live);
		return "out of memory";
	}
	for (uint32_t i = 0; !rule && i < f->nblocks; i++) {
		const struct hp_block *b = &mod->blocks[f->block_start + i];
		uint32_t last = last_insn(f, b, code);
		const struct hp_static_branch *s = last == UINT32_MAX ? NULL : hp_key_site(m, f->addr + last);
		if (!s)
			continue;
		snprintf(detail, dlen, "the site at +0x%x", last);
		if (s->target < f->addr || s->target >= f->addr + f->size) {
			rule = "jump-label site whose target is outside the function: whether the status flags are "
			       "live there is not known, and its key read would change them";
			break;
		}
		/* The flags live after the site: the union over both ways out. */
		unsigned out = 0;
		const struct hp_block *t = hp_function_block_at(mod, f, s->target);
		const struct hp_block *n = hp_function_block_at(mod, f, f->addr + b->offset + b->size);
		out |= t && f->addr + t->offset == s->target ? live[t - &mod->blocks[f->block_start]] :
							       HP_ISA_STATUS_FLAGS;
		out |= n && b->offset + b->size < f->size ? live[n - &mod->blocks[f->block_start]] :
							    HP_ISA_STATUS_FLAGS;
		if (out)
			rule = "jump-label site after which a status flag is live: its key read would change it";
	}
	free(live);
	if (!rule)
		detail[0] = 0;
	return rule;
}
