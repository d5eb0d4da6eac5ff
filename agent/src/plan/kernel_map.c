// SPDX-License-Identifier: Apache-2.0
/*
 * A kernel copy's position map: the unwind data of a kernel plan. The kernel
 * unwinds with ORC, whose tables live in kernel memory the agent does not
 * read; hotpath.ko does, so the plan says which original code each byte of
 * the copy runs as, and the module gives the copy the original's entries at
 * the same places (kmod/hotpath_unwind.c), with the originals' names. The
 * same facts as a process copy's .eh_frame (unwind.c): every body
 * instruction of an emitted block is the original instruction with the
 * original length, so a body is a run of the original (HOTPATH_RUN_SAME);
 * the branches the layout added after a body run in the state after the
 * body (HOTPATH_RUN_STATE_AT the final branch, or the fall-through point);
 * alignment padding before a block, in the block's start state. A symbol
 * per member's hot and cold chunk carries the member's name. The format is
 * hotpath_uapi.h's structs, written as they are (the agent is x86-64's, whose
 * order is the format's little-endian; records unaligned); it follows the code
 * in the plan's image like the .eh_frame does, so the plan's hash and its
 * approval cover it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "hotpath_uapi.h"
#include "isa/isa.h"
#include "plan/instrument.h"
#include "plan/plan.h"

struct map {
	struct hotpath_map_run *runs;
	size_t nruns, runs_cap;
	struct hotpath_map_sym *syms;
	size_t nsyms, syms_cap;
	char *str;
	size_t nstr, str_cap;
};

static int add_run(struct map *k, const struct hp_plan *p, uint64_t at, uint32_t len, uint64_t orig, uint32_t kind)
{
	if (!len)
		return 0;
	if (HP_GROW(k->runs, k->runs_cap, k->nruns + 1))
		return -ENOMEM;
	k->runs[k->nruns++] =
		(struct hotpath_map_run){ .off = (uint32_t)(at - p->base), .len = len, .orig = orig, .kind = kind };
	return 0;
}

static int add_sym(struct map *k, const struct hp_plan *p, uint64_t at, uint32_t size, const char *name)
{
	size_t n = strlen(name) + 1;

	if (!size)
		return 0;
	if (HP_GROW(k->syms, k->syms_cap, k->nsyms + 1) || HP_GROW(k->str, k->str_cap, k->nstr + n))
		return -ENOMEM;
	k->syms[k->nsyms++] =
		(struct hotpath_map_sym){ .off = (uint32_t)(at - p->base), .size = size, .name = (uint32_t)k->nstr };
	memcpy(k->str + k->nstr, name, n);
	k->nstr += n;
	return 0;
}

/* Where the bytes the layout added after block bl's body run: the final
 * branch's state, else the fall-through point's, else the body's last. */
static uint64_t after_body(const struct hp_function *f, const struct hp_block *bl, uint32_t body)
{
	uint64_t a = f->addr + bl->offset + body;

	return body < bl->size || a < f->addr + f->size ? a : a - 1;
}

static int member_runs(struct hp_model *m, const struct hp_plan *p, uint32_t i, struct map *k, char *err, size_t errlen)
{
	const struct hp_plan_member *mb = &p->members[i];
	const struct hp_function *f = mb->fn;

	for (uint32_t j = 0; j < mb->nblocks; j++) {
		const struct hp_plan_block *pb = &mb->blocks[j];
		const struct hp_block *bl = &mb->mod->blocks[f->block_start + pb->index];
		uint64_t oa = f->addr + bl->offset;
		uint32_t body = hp_plan_block_body(m, f, bl);
		if (!pb->new_size)
			continue;
		if (hp_instrument_prefix_len(p, i, pb->index) ||
		    hp_plan_promoted_bytes(p, f, bl->offset, bl->offset + body)) {
			snprintf(err, errlen, "%s: a kernel copy has no counters or promoted calls to map", f->name);
			return -EOPNOTSUPP;
		}
		if (add_run(k, p, pb->new_addr - pb->pad, pb->pad, oa, HOTPATH_RUN_STATE_AT) < 0 ||
		    add_run(k, p, pb->new_addr, body < pb->new_size ? body : pb->new_size, oa, HOTPATH_RUN_SAME) < 0 ||
		    (pb->new_size > body && add_run(k, p, pb->new_addr + body, pb->new_size - body,
						    after_body(f, bl, body), HOTPATH_RUN_STATE_AT) < 0))
			return -ENOMEM;
	}
	return 0;
}

enum {
	HEAD = sizeof(struct hotpath_map_head),
	SYM = sizeof(struct hotpath_map_sym),
	RUN = sizeof(struct hotpath_map_run),
};

int hp_plan_kernel_map(struct hp_model *m, struct hp_plan *p, char *err, size_t errlen)
{
	struct map k = { 0 };
	int r = 0;

	for (uint32_t i = 0; i < p->nmembers && !r; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		r = member_runs(m, p, i, &k, err, errlen);
		if (!r && (add_sym(&k, p, mb->hot_addr, mb->new_hot_bytes, mb->fn->name) < 0 ||
			   add_sym(&k, p, mb->cold_addr, mb->new_cold_bytes, mb->fn->name) < 0))
			r = -ENOMEM;
	}
	size_t len = HEAD + k.nsyms * SYM + k.nruns * RUN + k.nstr;
	uint8_t *o = r || !k.nsyms ? NULL : calloc(1, len);
	if (!r && k.nsyms && !o)
		r = -ENOMEM;
	if (o) {
		struct hotpath_map_head head = { .magic = HOTPATH_MAP_MAGIC,
						 .version = HOTPATH_MAP_VERSION,
						 .code_to_map = p->unwind_off,
						 .nsyms = (uint32_t)k.nsyms,
						 .nruns = (uint32_t)k.nruns,
						 .strtab_len = (uint32_t)k.nstr };
		memcpy(o, &head, HEAD);
		memcpy(o + HEAD, k.syms, k.nsyms * SYM);
		memcpy(o + HEAD + k.nsyms * SYM, k.runs, k.nruns * RUN);
		memcpy(o + HEAD + k.nsyms * SYM + k.nruns * RUN, k.str, k.nstr);
		p->unwind = o;
		p->unwind_len = len;
		p->unwind_fdes = k.nsyms;
	}
	if (r == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	free(k.runs);
	free(k.syms);
	free(k.str);
	return r;
}

static bool fail(struct hp_plan *p, const char *why, uint64_t at)
{
	snprintf(p->verify_error, sizeof(p->verify_error), "unwind: the position map %s at 0x%llx", why,
		 (unsigned long long)at);
	return false;
}

/* The map read back: its head and sizes agree, every run and symbol lies in
 * the code, and every run of the original's instructions decodes, in the
 * copy and in the original, into instructions of the same lengths. */
bool hp_plan_verify_kernel_map(struct hp_model *m, struct hp_plan *p)
{
	const uint8_t *b = p->unwind;
	size_t len = p->unwind_len;
	struct hotpath_map_head h;

	if (len < HEAD || (memcpy(&h, b, HEAD), h.magic != HOTPATH_MAP_MAGIC) || h.code_to_map != p->unwind_off)
		return fail(p, "has a wrong head", p->base + p->unwind_off);
	uint32_t nsyms = h.nsyms, nruns = h.nruns, nstr = h.strtab_len;
	if (HEAD + (size_t)nsyms * SYM + (size_t)nruns * RUN + nstr != len || !nstr || b[len - 1])
		return fail(p, "has sizes that disagree", p->base + p->unwind_off);
	for (uint32_t i = 0; i < nsyms; i++) {
		struct hotpath_map_sym sy;
		memcpy(&sy, b + HEAD + (size_t)i * SYM, SYM);
		if ((uint64_t)sy.off + sy.size > p->code_len || sy.name >= nstr)
			return fail(p, "names a function outside the code", p->base + sy.off);
	}
	for (uint32_t i = 0; i < nruns; i++) {
		struct hotpath_map_run r;
		memcpy(&r, b + HEAD + (size_t)nsyms * SYM + (size_t)i * RUN, RUN);
		uint32_t off = r.off, rl = r.len, kind = r.kind;
		uint64_t orig = r.orig;
		if ((uint64_t)off + rl > p->code_len || kind > HOTPATH_RUN_STATE_AT)
			return fail(p, "has a run outside the code", p->base + off);
		for (uint32_t d = 0; kind == HOTPATH_RUN_SAME && d < rl;) {
			uint8_t code[16];
			uint32_t n = rl - d < sizeof(code) ? rl - d : (uint32_t)sizeof(code);
			struct hp_isa_insn a, c;
			if (m->read(m, orig + d, code, n) < 0 || hp_isa_decode(code, n, orig + d, &a) < 0 ||
			    hp_isa_decode(p->code + off + d, n, p->base + off + d, &c) < 0 || a.len != c.len)
				return fail(p, "maps an instruction to one of another length", p->base + off + d);
			d += c.len;
		}
	}
	return true;
}

int hp_plan_kernel_map_rebase(uint8_t *map, size_t len, int64_t delta)
{
	struct hotpath_map_head h;

	if (len < HEAD || (memcpy(&h, map, HEAD), h.magic != HOTPATH_MAP_MAGIC) ||
	    HEAD + (size_t)h.nsyms * SYM + (size_t)h.nruns * RUN + h.strtab_len != len)
		return -EINVAL;
	for (uint32_t i = 0; i < h.nruns; i++) {
		uint8_t *at = map + HEAD + (size_t)h.nsyms * SYM + (size_t)i * RUN;
		struct hotpath_map_run r;
		memcpy(&r, at, RUN);
		r.orig += (uint64_t)delta;
		memcpy(at, &r, RUN);
	}
	return 0;
}
