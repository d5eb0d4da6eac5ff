/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the planner, emitter and verifier on real code. An input
 * picks either a real function of an ELF program (hotpathd itself unless
 * HP_FUZZ_ELF names another) or a synthetic group of functions whose CFGs
 * are random but whose instructions are real ones taken from that program
 * (branches encoded through the ISA layer), then random block and edge
 * counts and random plan options. A plan must be made or refused with a
 * reason; a plan's layout must be whole (every block once, every hot block
 * in one chain, padding within its bounds); and the verifier must be sound
 * as well as complete: the verified code re-based anywhere within reach
 * verifies again, while the same code with one semantic change (a branch
 * condition inverted, a displacement moved, an operand changed, padding
 * that is not a nop) must be refused. Random counts at the copy's block
 * starts map back onto the group (a second pass) and plan again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa/isa.h"
#include "model/cfg.h"
#include "model/model.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "target/target.h"

#define SYNTH_BASE 0x40000000ull

struct pool_insn {
	uint8_t bytes[15];
	uint8_t len, cls;
	uint64_t addr;
};

static struct hp_model *real;
static const struct hp_function **roots;
static size_t nroots;
static struct pool_insn *pool; /* instructions that do not transfer control */
static size_t npool;
static struct pool_insn call_insn, ret_insn; /* one real direct call and one ret */

struct input {
	const uint8_t *d;
	size_t n, i;
};

static uint32_t take(struct input *in, uint32_t mod)
{
	uint32_t v = 0;

	for (int k = 0; k < 3 && in->i < in->n; k++)
		v = v << 8 | in->d[in->i++];
	return mod ? v % mod : v;
}

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "invariant broken: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	abort();
}

static void init_real(void)
{
	struct hp_open_opts o = { .quiet = true, .threads = 1 };
	const char *path = getenv("HP_FUZZ_ELF") ? getenv("HP_FUZZ_ELF") : "build/hotpathd";
	char err[256], detail[160];
	const struct hp_module *mod;

	if (hp_model_open_elf(path, &o, &real, err, sizeof(err)) < 0) {
		fprintf(stderr, "fuzz_plan needs an x86-64 program to take code from (HP_FUZZ_ELF): %s\n", err);
		exit(1);
	}
	mod = &real->mods[0];
	roots = calloc(mod->nfuncs + 1, sizeof(*roots));
	pool = calloc(200000, sizeof(*pool));
	if (!roots || !pool)
		exit(1);
	for (size_t i = 0; i < mod->nfuncs; i++) {
		const struct hp_function *f = &mod->funcs[i];
		uint8_t *code;

		if (f->nblocks >= 2 && f->size < 8192 && !hp_plan_kept_rule(real, mod, f, detail, sizeof(detail)))
			roots[nroots++] = f;
		if (npool >= 200000 || f->size > 65536 || !(code = malloc(f->size + 16)))
			continue;
		if (real->read(real, f->addr, code, f->size) == 0)
			for (uint32_t off = 0; off < f->size && npool < 200000;) {
				struct hp_isa_insn in;
				struct pool_insn *p = &pool[npool];
				if (hp_isa_decode(code + off, f->size - off, f->addr + off, &in) < 0)
					break;
				*p = (struct pool_insn){ .len = in.len, .cls = in.cls, .addr = f->addr + off };
				memcpy(p->bytes, code + off, in.len);
				if (in.cls == HP_IC_OTHER)
					npool++;
				else if (in.cls == HP_IC_CALL && in.has_target && !call_insn.len)
					call_insn = *p;
				else if (in.cls == HP_IC_RET && in.len == 1 && !ret_insn.len)
					ret_insn = *p;
				off += in.len;
			}
		free(code);
	}
	if (!nroots || npool < 100 || !call_insn.len || !ret_insn.len) {
		fprintf(stderr, "fuzz_plan: %s has too little code to fuzz with\n", path);
		exit(1);
	}
}

/* A synthetic module: functions laid out one after another. */
struct synth {
	uint8_t *code;
	size_t len;
};

static int synth_read(struct hp_model *m, uint64_t addr, void *buf, size_t len)
{
	struct synth *s = m->priv;

	if (addr < SYNTH_BASE || addr - SYNTH_BASE > s->len || len > s->len - (addr - SYNTH_BASE))
		return -EFAULT;
	memcpy(buf, s->code + (addr - SYNTH_BASE), len);
	return 0;
}

static const uint8_t *synth_bytes(void *ctx, const struct hp_module *mod, const struct hp_function *f, int *err)
{
	struct synth *s = ctx;

	if (f->addr < SYNTH_BASE || f->addr + f->size > SYNTH_BASE + s->len) {
		*err = EFAULT;
		return NULL;
	}
	return s->code + (f->addr - SYNTH_BASE);
}

static void synth_free(struct hp_model *m)
{
	struct synth *s = m->priv;

	if (s)
		free(s->code);
	free(s);
	m->priv = NULL;
}

enum term { T_FALL, T_JCC, T_JMP, T_RET, T_TAIL };

struct sblock {
	uint32_t body[4], nbody; /* pool indices; UINT32_MAX: a call */
	uint32_t call_fn[4];
	uint8_t term, cond;
	uint32_t target; /* block, or function for T_TAIL */
	uint32_t off, size;
};

/* Random functions of real instructions: sizes first, then bytes. */
static struct hp_model *build_synth(struct input *in)
{
	uint32_t nf = 1 + take(in, 6), nb[6], total = 0;
	struct sblock *b[6] = { 0 };
	uint32_t fstart[6];
	struct hp_model *m = hp_model_new(HP_TARGET_ELF);
	struct synth *s = calloc(1, sizeof(*s));
	struct hp_module *mod;

	if (!m || !s) {
		free(s);
		hp_model_free(m);
		return NULL;
	}
	m->priv = s;
	m->free_priv = synth_free;
	m->read = synth_read;
	for (uint32_t f = 0; f < nf; f++) {
		nb[f] = 1 + take(in, 24);
		b[f] = calloc(nb[f], sizeof(**b));
		if (!b[f])
			goto fail;
		fstart[f] = total;
		for (uint32_t k = 0; k < nb[f]; k++) {
			struct sblock *x = &b[f][k];
			x->off = total - fstart[f];
			x->nbody = take(in, 5);
			for (uint32_t j = 0; j < x->nbody; j++) {
				if (take(in, 8) == 0) {
					x->body[j] = UINT32_MAX;
					x->call_fn[j] = take(in, nf);
					total += call_insn.len;
				} else {
					x->body[j] = take(in, (uint32_t)npool);
					total += pool[x->body[j]].len;
				}
			}
			x->term = (uint8_t)take(in, 5);
			if (k == nb[f] - 1 && (x->term == T_FALL || x->term == T_JCC))
				x->term = T_RET; /* nothing may run off the end */
			x->cond = (uint8_t)take(in, 16);
			x->target = x->term == T_TAIL ? take(in, nf) : take(in, nb[f]);
			x->size = (uint32_t)(x->term == T_JCC                      ? 6 :
					     x->term == T_JMP || x->term == T_TAIL ? 5 :
					     x->term == T_RET                      ? 1 :
										     0);
			total += x->size;
			x->size += total - x->size - (fstart[f] + x->off); /* the whole block */
		}
		total = (total + 15) & ~15u;
	}
	s->len = total;
	if (!(s->code = malloc(total + 16)))
		goto fail;
	memset(s->code, 0xcc, total + 16); /* int3 between functions */
	for (uint32_t f = 0; f < nf; f++)
		for (uint32_t k = 0; k < nb[f]; k++) {
			struct sblock *x = &b[f][k];
			uint64_t at = SYNTH_BASE + fstart[f] + x->off;
			for (uint32_t j = 0; j < x->nbody; j++) {
				const struct pool_insn *p = x->body[j] == UINT32_MAX ? &call_insn : &pool[x->body[j]];
				uint64_t t = x->body[j] == UINT32_MAX ? SYNTH_BASE + fstart[x->call_fn[j]] : 0;
				uint8_t *out = s->code + (at - SYNTH_BASE);
				if (hp_isa_relocate(p->bytes, p->len, p->addr, at, t, out, 15, NULL) != p->len)
					hp_isa_nop_fill(out, p->len); /* out of reach from here */
				at += p->len;
			}
			uint8_t *out = s->code + (at - SYNTH_BASE);
			uint64_t t = x->term == T_TAIL ? SYNTH_BASE + fstart[x->target] :
							 SYNTH_BASE + fstart[f] + b[f][x->target].off;
			if (x->term == T_JCC || x->term == T_JMP || x->term == T_TAIL)
				hp_isa_encode_branch(x->term == T_JCC ? x->cond : -1, at, t, HP_W_NEAR, out, 16);
			else if (x->term == T_RET)
				memcpy(out, ret_insn.bytes, 1);
		}
	if (!(mod = hp_model_add_module(m, "synthetic", SYNTH_BASE)))
		goto fail;
	for (uint32_t f = 0; f < nf; f++) {
		char name[16];
		uint32_t end = f + 1 < nf ? fstart[f + 1] : total;
		uint32_t size = b[f][nb[f] - 1].off + b[f][nb[f] - 1].size;
		snprintf(name, sizeof(name), "s%u", f);
		if (size > end - fstart[f] ||
		    hp_module_add_function(mod, hp_model_strdup(m, name), SYNTH_BASE + fstart[f], size, 0) < 0)
			goto fail;
	}
	struct hp_cfg_env env = { 0 };
	if (hp_module_normalize(m, mod) < 0 || hp_model_build_index(m) < 0 ||
	    hp_cfg_parse_module(mod, &env, synth_bytes, s, 1, NULL) < 0)
		goto fail;
	for (uint32_t f = 0; f < nf; f++)
		free(b[f]);
	return m;
fail:
	for (uint32_t f = 0; f < nf; f++)
		free(b[f]);
	hp_model_free(m);
	return NULL;
}

/* Random counts for f's blocks, some measured edges. */
static void random_counts(struct input *in, struct hp_profile *p, const struct hp_module *mod,
			  const struct hp_function *f)
{
	for (uint32_t k = 0; k < f->nblocks; k++) {
		uint32_t v = take(in, 4) ? 0 : take(in, 1000);
		if (v || k == 0)
			hp_profile_add(p, mod, f, mod->blocks[f->block_start + k].offset,
				       v * (double)(1 + take(in, 50)));
	}
	for (uint32_t e = take(in, 4); e > 0 && f->nblocks; e--)
		hp_profile_add_edge(p, mod, f, mod->blocks[f->block_start + take(in, f->nblocks)].offset,
				    mod->blocks[f->block_start + take(in, f->nblocks)].offset, take(in, 500));
}

/* The root and what it calls, breadth first, each with random counts. */
static void random_profile(struct input *in, struct hp_model *m, const struct hp_function *root, struct hp_profile *p)
{
	const struct hp_function *todo[32];
	size_t n = 1;

	memset(p, 0, sizeof(*p));
	p->weight = 1;
	todo[0] = root;
	for (size_t i = 0; i < n; i++) {
		const struct hp_module *mod;
		const struct hp_function *f = hp_model_lookup(m, todo[i]->addr, &mod);
		random_counts(in, p, mod, f);
		for (uint32_t c = 0; c < f->ncalls && n < 32; c++) {
			const struct hp_function *g = hp_model_lookup(m, mod->calls[f->call_start + c].target, NULL);
			bool seen = !g || g->addr != mod->calls[f->call_start + c].target;
			for (size_t j = 0; j < n && !seen; j++)
				seen = todo[j] == g;
			if (!seen)
				todo[n++] = g;
		}
	}
}

/* Every block of every member once; hot blocks in exactly one chain, the
 * chains tiling the hot part; padding within its bounds. */
static void check_layout(const struct hp_plan *p)
{
	uint64_t pad = 0, hot = 0;

	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		uint8_t *seen = calloc(mb->fn->nblocks + 1, 1);
		uint32_t in_chains = 0;
		if (!seen)
			abort();
		if (mb->nblocks != mb->fn->nblocks || mb->nhot > mb->nblocks)
			fail("a member's layout does not hold each of its blocks", mb->fn->name);
		for (uint32_t j = 0; j < mb->nblocks; j++) {
			const struct hp_plan_block *b = &mb->blocks[j];
			if (b->index >= mb->fn->nblocks || seen[b->index]++)
				fail("a block is laid out twice or is not the function's", mb->fn->name);
			if (b->hot != (j < mb->nhot) ||
			    (b->hot && (b->chain < 0 || (uint32_t)b->chain >= mb->nchains)) ||
			    (!b->hot && b->chain != -1))
				fail("hot and cold blocks or chains mixed", mb->fn->name);
			if (b->pad > p->opts.max_pad || (p->opts.no_align && b->pad))
				fail("padding beyond its bound", mb->fn->name);
			pad += b->pad;
		}
		for (uint32_t c = 0; c < mb->nchains; c++) {
			const struct hp_plan_chain *ch = &mb->chains[c];
			if (ch->first != in_chains || ch->first + ch->n > mb->nhot)
				fail("chains do not tile the hot chunk", mb->fn->name);
			for (uint32_t j = ch->first; j < ch->first + ch->n; j++)
				if (mb->blocks[j].chain != (int32_t)c)
					fail("a block is not in the chain that holds it", mb->fn->name);
			in_chains += ch->n;
		}
		if (in_chains != mb->nhot || mb->blocks[0].index != 0)
			fail("hot blocks outside chains, or the entry does not lead", mb->fn->name);
		hot += mb->hot_bytes;
		free(seen);
	}
	if ((double)pad > p->opts.max_pad_share * (double)hot + 1e-9)
		fail("total padding beyond its share of hot bytes", NULL);
	for (size_t i = 0; i < p->nrelocs; i++)
		if ((uint64_t)p->relocs[i].offset + 4 > p->code_len)
			fail("a relocation outside the code", NULL);
}

struct einsn {
	uint64_t addr;
	uint8_t len, cls;
	bool term;     /* a branch the layout made, after the block's body */
	uint64_t bend; /* end of its block */
};

/* The emitted instructions, walked block by block. */
static size_t emitted(const struct hp_plan *p, struct einsn *out, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < p->nmembers; i++)
		for (uint32_t j = 0; j < p->members[i].nblocks; j++) {
			const struct hp_plan_block *b = &p->members[i].blocks[j];
			for (uint64_t a = b->new_addr; a < b->new_addr + b->new_size && n < max;) {
				struct hp_isa_insn in;
				if (hp_isa_decode(p->code + (a - p->base), b->new_addr + b->new_size - a, a, &in) < 0)
					fail("verified code does not decode", p->members[i].fn->name);
				out[n++] =
					(struct einsn){ a, in.len, in.cls, in.cls == HP_IC_JCC || in.cls == HP_IC_JMP,
							b->new_addr + b->new_size };
				a += in.len;
			}
		}
	return n;
}

/* Re-based by delta within reach, the code must verify at its new place. */
static void check_rebased(struct hp_model *m, struct hp_plan *p, int64_t delta)
{
	uint8_t *moved = malloc(p->code_len + 16), *keep = p->code;
	char err[256];

	if (!moved)
		abort();
	if (hp_plan_relocate(p, p->base + (uint64_t)delta, 0, moved, err, sizeof(err)) < 0) {
		if (!err[0])
			fail("a refused relocation gives no reason", NULL);
		free(moved);
		return;
	}
	p->code = moved;
	p->base += (uint64_t)delta;
	for (size_t i = 0; i < p->nmembers; i++) {
		p->members[i].new_entry += (uint64_t)delta;
		for (uint32_t j = 0; j < p->members[i].nblocks; j++)
			p->members[i].blocks[j].new_addr += (uint64_t)delta;
	}
	bool ok = hp_plan_verify(m, p) && hp_plan_verify_unwind(m, p); /* .eh_frame is pc-relative: it moves too */
	p->code = keep;
	p->base -= (uint64_t)delta;
	for (size_t i = 0; i < p->nmembers; i++) {
		p->members[i].new_entry -= (uint64_t)delta;
		for (uint32_t j = 0; j < p->members[i].nblocks; j++)
			p->members[i].blocks[j].new_addr -= (uint64_t)delta;
	}
	free(moved);
	if (!ok)
		fail("re-based code no longer verifies", p->verify_error);
}

/* One semantic change to the code must be refused by the verifier. */
static void check_mutation(struct input *in, struct hp_model *m, struct hp_plan *p)
{
	static struct einsn ins[1 << 16];
	size_t n = emitted(p, ins, 1 << 16);
	uint8_t keep[16];
	uint64_t at = 0;
	uint32_t kind = take(in, 4);

	if (!n)
		return;
	struct einsn *e = &ins[take(in, (uint32_t)n)];
	uint8_t *c = p->code + (e->addr - p->base);
	memcpy(keep, c, e->len);
	switch (kind) {
	case 0: /* invert a branch condition without swapping its targets */
		for (size_t k = 0; k < n && e->cls != HP_IC_JCC; k++)
			e = &ins[(size_t)(e - ins + 1) % n];
		if (e->cls != HP_IC_JCC)
			return;
		c = p->code + (e->addr - p->base);
		memcpy(keep, c, e->len);
		/* Both ways to the same place (the original jumped to its own
		 * fallthrough): inverting changes nothing. */
		struct hp_isa_insn j, k;
		uint64_t other = e->addr + e->len;
		size_t x = (size_t)(e - ins);
		hp_isa_decode(c, e->len, e->addr, &j);
		if (x + 1 < n && ins[x + 1].addr == other && other < e->bend && ins[x + 1].cls == HP_IC_JMP &&
		    hp_isa_decode(p->code + (other - p->base), ins[x + 1].len, other, &k) == 0)
			other = k.target;
		if (j.target == other)
			return;
		c[c[0] == 0x0f ? 1 : 0] ^= 1;
		break;
	case 1: { /* move a branch or call a few bytes */
		for (size_t k = 0; k < n && e->cls != HP_IC_JCC && e->cls != HP_IC_JMP && e->cls != HP_IC_CALL; k++)
			e = &ins[(size_t)(e - ins + 1) % n];
		if (e->cls != HP_IC_JCC && e->cls != HP_IC_JMP && e->cls != HP_IC_CALL)
			return;
		c = p->code + (e->addr - p->base);
		memcpy(keep, c, e->len);
		int8_t d = (int8_t)(1 + take(in, 3));
		if (e->len == 2) {
			c[1] = (uint8_t)(c[1] + d);
		} else {
			int32_t v;
			memcpy(&v, c + e->len - 4, 4);
			v += d;
			memcpy(c + e->len - 4, &v, 4);
		}
		break;
	}
	case 2: { /* change one byte of a body instruction to another operation */
		uint8_t x = (uint8_t)(1 + take(in, 255));
		uint32_t off = take(in, e->len);
		struct hp_isa_insn a;
		uint64_t ta, tb;
		c[off] ^= x;
		if (e->term ||
		    (hp_isa_decode(c, e->len, e->addr, &a) == 0 && a.len == e->len &&
		     hp_isa_same_operation(keep, e->len, e->addr, c, e->len, e->addr, &ta, &tb) && ta == tb)) {
			memcpy(c, keep, e->len); /* the same operation still (or a branch): no claim */
			return;
		}
		break;
	}
	default: /* padding that is not a nop: its first byte a ret */
		for (size_t i = 0; i < p->nmembers && !at; i++)
			for (uint32_t j = 0; j < p->members[i].nblocks && !at; j++)
				if (p->members[i].blocks[j].pad)
					at = p->members[i].blocks[j].new_addr - p->members[i].blocks[j].pad;
		if (!at)
			return;
		e = &(struct einsn){ .addr = at, .len = 1 };
		c = p->code + (at - p->base);
		keep[0] = c[0];
		c[0] = ret_insn.bytes[0];
		break;
	}
	if (hp_plan_verify(m, p)) {
		char what[96];
		snprintf(what, sizeof(what), "mutation %u at 0x%llx", kind, (unsigned long long)e->addr);
		fail("the verifier accepted changed code", what);
	}
	memcpy(c, keep, e->len);
	if (!hp_plan_verify(m, p))
		fail("restored code no longer verifies", p->verify_error);
}

/* Random counts at the copy's block starts, mapped back (a second pass):
 * every count lands on a member's block, and the second plan is made or
 * refused with a reason. */
static void check_second_pass(struct input *in, struct hp_model *m, const struct hp_module *mod,
			      const struct hp_plan *p)
{
	static char text[1 << 20];
	size_t len = (size_t)snprintf(text, sizeof(text), "{\"blocks\": [");
	struct hp_profile prof;
	struct hp_plan second;
	char err[256] = "";
	bool any = false;

	for (size_t i = 0; i < p->nmembers; i++)
		for (uint32_t j = 0; j < p->members[i].nblocks && len < sizeof(text) - 100; j++) {
			uint32_t c = take(in, 3) ? take(in, 1000) : 0;
			if (!p->members[i].blocks[j].new_size || !c)
				continue; /* nothing to count at an emptied block */
			len += (size_t)snprintf(text + len, sizeof(text) - len, "%s{\"block\": %llu, \"count\": %u}",
						any ? ", " : "",
						(unsigned long long)(p->members[i].blocks[j].new_addr + 0x100000), c);
			any = true;
		}
	len += (size_t)snprintf(text + len, sizeof(text) - len, "]}");
	if (hp_profile_under_root(p, p->base + 0x100000, text, len, &prof, err, sizeof(err)) < 0)
		fail("counts at the copy's block starts were refused", err);
	for (size_t i = 0; i < prof.nfns; i++) {
		bool member = false;
		for (size_t k = 0; k < p->nmembers; k++)
			member |= p->members[k].fn->addr == prof.fns[i].addr;
		for (size_t b = 0; b < prof.fns[i].nblocks; b++)
			if (!(prof.fns[i].blocks[b].count >= 0))
				member = false;
		if (!member)
			fail("a count mapped back outside the group, or negative", prof.fns[i].name);
	}
	struct hp_plan_opts o = p->opts;
	o.base = 0;
	int r = hp_plan_make(m, p->members[0].fn, mod, &prof, &o, &second, err, sizeof(err));
	if ((r < 0 && !err[0]) || (r == 0 && second.status == HP_PLAN_OK && !second.verified))
		fail("the second plan is neither made nor refused with a reason", err);
	hp_plan_free(&second);
	hp_profile_free(&prof);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = { data, size, 0 };
	struct hp_model *m;
	const struct hp_module *mod;
	const struct hp_function *root;
	struct hp_plan_opts o;
	struct hp_profile prof;
	struct hp_plan plan;
	char err[256] = "";
	static const uint32_t fetch[] = { 4, 8, 16, 32, 64 };
	static const struct hp_cache_geometry l1i[] = { { 32768, 64, 8 }, { 65536, 64, 4 }, { 16384, 32, 2 } };

	if (!real)
		init_real();
	if (take(&in, 2)) {
		m = real;
		root = roots[take(&in, (uint32_t)nroots)];
	} else {
		if (!(m = build_synth(&in)))
			return 0;
		root = &m->mods[0].funcs[0];
	}
	hp_model_lookup(m, root->addr, &mod);
	random_profile(&in, m, root, &prof);
	hp_plan_opts_default(&o);
	o.l1i = l1i[take(&in, 3)];
	o.fetch_block = fetch[take(&in, 5)];
	o.max_pad = take(&in, 16);
	o.no_align = take(&in, 4) == 0;
	o.max_functions = 1 + take(&in, 64);
	o.join_fraction = take(&in, 100) / 200.0;
	o.small_block = take(&in, 32);
	if (in.i < in.n && take(&in, 8) == 0) { /* past the code, up to 4 GiB away; or on the code */
		const struct hp_function *last = &mod->funcs[mod->nfuncs - 1];
		o.base = (last->addr + last->size + 0xfff + ((uint64_t)take(&in, 1 << 20) << 12)) & ~0xfffull;
		if (in.i < in.n && take(&in, 16) == 0)
			o.base = root->addr;
	}
	int r = hp_plan_make(m, root, mod, &prof, &o, &plan, err, sizeof(err));
	if (r < 0) {
		if (!err[0])
			fail("a failed plan gives no reason", NULL);
	} else if (plan.status != HP_PLAN_OK) {
		if (!plan.message[0])
			fail("a plan that is not made gives no reason", NULL);
		if (plan.status == HP_PLAN_REFUSED && plan.verified)
			fail("a refused plan claims to be verified", NULL);
	} else {
		if (!plan.verified || !plan.code_len)
			fail("a plan reported OK is not verified", plan.verify_error);
		check_layout(&plan);
		int64_t delta = ((int64_t)take(&in, 1 << 20) - (1 << 19)) * 16;
		if ((int64_t)plan.base + delta > 0x10000) /* user addresses stay user addresses */
			check_rebased(m, &plan, delta);
		check_mutation(&in, m, &plan);
		check_second_pass(&in, m, mod, &plan);
	}
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	if (m != real)
		hp_model_free(m);
	return 0;
}
