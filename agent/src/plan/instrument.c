// SPDX-License-Identifier: Apache-2.0
/*
 * Instrumented copies (instrument.h): the plan of one function laid out in
 * its original block order with a counter increment before every block,
 * made by the same emitter and checked by the same verifier as a layout
 * plan, so the install engine installs and reverts it like any plan.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa/isa.h"
#include "plan/instrument.h"

#define AREA_ALIGN 4096u

int hp_flags_live_in(const struct hp_module *mod, const struct hp_function *f, const uint8_t *code, unsigned *live)
{
	uint32_t n = f->nblocks;
	unsigned *use = calloc(n + 1, sizeof(unsigned)), *def = calloc(n + 1, sizeof(unsigned));

	if (!use || !def) {
		free(use);
		free(def);
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < n; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		for (uint32_t off = bl->offset; off < bl->offset + bl->size;) {
			struct hp_isa_insn in;
			unsigned rd, wr;
			if (hp_isa_decode(code + off, f->size - off, f->addr + off, &in) < 0 ||
			    hp_isa_flags(code + off, f->size - off, &rd, &wr) < 0) {
				use[b] |= HP_ISA_STATUS_FLAGS & ~def[b]; /* unknown: assume it reads them all */
				break;
			}
			use[b] |= rd & ~def[b];
			def[b] |= wr;
			if (in.cls == HP_IC_CALL || in.cls == HP_IC_CALL_IND)
				def[b] = HP_ISA_STATUS_FLAGS; /* no flag survives a call (SysV ABI) */
			off += in.len;
		}
		live[b] = use[b];
	}
	/* live_in(b) = use(b) | (live_out(b) & ~def(b)), to the fixed point. */
	for (bool changed = true; changed;) {
		changed = false;
		for (uint32_t b = n; b-- > 0;) {
			const struct hp_block *bl = &mod->blocks[f->block_start + b];
			unsigned out = 0;
			for (uint16_t s = 0; s < bl->nsucc; s++) {
				const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
				if (sc->kind == HP_SUCC_FALLTHROUGH || sc->kind == HP_SUCC_TAKEN) {
					const struct hp_block *t = hp_function_block_at(mod, f, f->addr + sc->target);
					out |= t ? live[t - &mod->blocks[f->block_start]] : HP_ISA_STATUS_FLAGS;
				} else if (sc->kind == HP_SUCC_INDIRECT) {
					out |= HP_ISA_STATUS_FLAGS;
				}
			}
			unsigned in = use[b] | (out & ~def[b]);
			if (in != live[b]) {
				live[b] = in;
				changed = true;
			}
		}
	}
	free(use);
	free(def);
	return 0;
}

static int counter_len(const struct hp_instrument *ins, bool keep)
{
	uint8_t buf[64];
	uint32_t d;
	return hp_isa_encode_counter(ins->lock, keep, ins->red_zone, 0x1000, 0x2000, buf, sizeof(buf), &d);
}

uint32_t hp_instrument_prefix_len(const struct hp_plan *p, uint32_t member, uint32_t bi)
{
	const struct hp_instrument *ins = p->instrument;
	if (!ins || member || bi >= ins->nslots)
		return 0;
	int n = counter_len(ins, ins->live[bi] != 0);
	return n > 0 ? (uint32_t)n : 0;
}

static uint64_t slot_addr(const struct hp_plan *p, uint32_t slot)
{
	return p->base + p->instrument->area_off + 8ull * slot;
}

int hp_instrument_write(struct hp_plan *p, uint32_t member, uint32_t bi, uint64_t at, uint8_t *out)
{
	struct hp_instrument *ins = p->instrument;
	uint32_t d;

	if (!ins || member || bi >= ins->nslots)
		return 0;
	if (!ins->area_off)
		ins->area_off = (p->code_len + AREA_ALIGN - 1) / AREA_ALIGN * AREA_ALIGN;
	int n = hp_isa_encode_counter(ins->lock, ins->live[bi] != 0, ins->red_zone, at, slot_addr(p, bi), out,
				      p->code_len + 16 - (at - p->base), &d);
	if (n < 0)
		return -ERANGE;
	ins->disp[bi] = (uint32_t)(at - p->base) + d;
	return n;
}

int hp_instrument_check(const struct hp_plan *p, uint32_t member, uint32_t bi, uint64_t at)
{
	const struct hp_instrument *ins = p->instrument;
	uint8_t want[64];
	uint32_t d;

	if (!ins)
		return 0;
	if (member || bi >= ins->nslots)
		return -1;
	int n = hp_isa_encode_counter(ins->lock, ins->live[bi] != 0, ins->red_zone, at, slot_addr(p, bi), want,
				      sizeof(want), &d);
	if (n < 0 || at < p->base || at + (uint64_t)n > p->base + p->code_len ||
	    memcmp(p->code + (at - p->base), want, (size_t)n))
		return -1;
	return n;
}

size_t hp_instrument_area_len(const struct hp_plan *p)
{
	const struct hp_instrument *ins = p->instrument;
	if (!ins)
		return 0;
	return (8ull * ins->nslots + AREA_ALIGN - 1) / AREA_ALIGN * AREA_ALIGN;
}

void hp_instrument_plan_free(struct hp_plan *p)
{
	if (p->instrument) {
		free(p->instrument->live);
		free(p->instrument->disp);
		free(p->instrument);
	}
	hp_plan_free(p);
}

int hp_instrument_plan(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f, bool lock,
		       uint64_t base, struct hp_plan *p, char *err, size_t errlen)
{
	struct hp_instrument *ins;
	struct hp_plan_member *mb;
	uint8_t *code = NULL;
	char detail[160] = "";
	int r = -ENOMEM;

	err[0] = '\0';
	memset(p, 0, sizeof(*p));
	hp_plan_opts_default(&p->opts);
	p->opts.no_align = true; /* the original order, no padding */
	p->opts.base = base;
	const char *rule = hp_plan_kept_rule(m, mod, f, detail, sizeof(detail));
	if (rule) {
		p->status = HP_PLAN_ROOT_KEPT;
		snprintf(p->message, sizeof(p->message), "%s cannot move (%s%s%s): no instrumented copy is made",
			 f->name, rule, detail[0] ? ": " : "", detail);
		return 0;
	}
	if (!f->nblocks) {
		snprintf(err, errlen, "%s has no blocks in the model", f->name);
		return -EINVAL;
	}
	p->instrument = ins = calloc(1, sizeof(*ins));
	p->members = mb = calloc(1, sizeof(*mb));
	code = malloc(f->size + 16);
	if (!ins || !mb || !code)
		goto fail;
	p->nmembers = 1;
	ins->lock = lock;
	ins->red_zone = 128;
	ins->nslots = f->nblocks;
	ins->live = calloc(f->nblocks, sizeof(unsigned));
	ins->disp = calloc(f->nblocks, sizeof(uint32_t));
	mb->count = calloc(f->nblocks, sizeof(double));
	mb->blocks = calloc(f->nblocks, sizeof(*mb->blocks));
	mb->chains = calloc(1, sizeof(*mb->chains));
	if (!ins->live || !ins->disp || !mb->count || !mb->blocks || !mb->chains)
		goto fail;
	memset(code + f->size, 0, 16);
	if ((r = m->read(m, f->addr, code, f->size)) < 0) {
		snprintf(err, errlen, "reading %s: %s", f->name, strerror(-r));
		goto fail;
	}
	if ((r = hp_flags_live_in(mod, f, code, ins->live)) < 0)
		goto fail;
	for (uint32_t b = 0; b < f->nblocks; b++)
		ins->kept_flags += ins->live[b] != 0;
	mb->mod = mod;
	mb->fn = mb->parent = f;
	mb->nblocks = mb->nhot = f->nblocks;
	for (uint32_t b = 0; b < f->nblocks; b++) {
		mb->blocks[b] = (struct hp_plan_block){ .index = b, .hot = true, .chain = 0 };
		mb->hot_bytes += mod->blocks[f->block_start + b].size;
	}
	mb->chains[0] = (struct hp_plan_chain){ 0, f->nblocks, 0, mb->hot_bytes };
	mb->nchains = 1;
	hp_cfg_signature(mod, f, mb->signature);
	if ((r = hp_plan_emit(m, p, err, errlen)) < 0)
		goto fail;
	p->verified = hp_plan_verify(m, p);
	if (!p->verified) {
		p->status = HP_PLAN_REFUSED;
		snprintf(p->message, sizeof(p->message), "the instrumented copy failed verification: %s",
			 p->verify_error);
	}
	free(code);
	return 0;
fail:
	if (r == -ENOMEM && !err[0])
		snprintf(err, errlen, "out of memory");
	free(code);
	hp_instrument_plan_free(p);
	return r;
}
