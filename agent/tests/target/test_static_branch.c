// SPDX-License-Identifier: Apache-2.0
/*
 * Jump labels and static calls: the tables' relative entries decoded, every
 * site put in its canonical form whatever its state (jump labels: NOP or JMP,
 * 2 or 5 bytes; static calls: call, jmp, NOP, xor eax or ret) and foreign
 * bytes left alone, on made-up bytes; then on this machine's live kernel,
 * every canonical jump-label site ends a block with two successors
 * (fallthrough and taken), __schedule's included, and every static call site
 * is an indirect call or jump.
 */
#include <errno.h>
#include <string.h>

#include "harness.h"
#include "model/model.h"
#include "target/static_branch.h"
#include "target/target.h"

static void put32(uint8_t *p, int32_t v)
{
	uint32_t u = (uint32_t)v;
	p[0] = (uint8_t)u;
	p[1] = (uint8_t)(u >> 8);
	p[2] = (uint8_t)(u >> 16);
	p[3] = (uint8_t)(u >> 24);
}

static void put64(uint8_t *p, int64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

/* Entry i at table + 16 i: code, target and key relative to their fields. */
static void entry(uint8_t *tab, uint64_t table, size_t i, uint64_t code, uint64_t target, uint64_t key, int flags)
{
	uint64_t at = table + 16 * i;
	put32(tab + 16 * i, (int32_t)(code - at));
	put32(tab + 16 * i + 4, (int32_t)(target - (at + 4)));
	put64(tab + 16 * i + 8, (int64_t)(key - (at + 8)) + flags);
}

static void t_jump_table_entries_decode(void)
{
	const uint64_t table = 0xffffffff82000000ull, text = 0xffffffff81000000ull;
	uint8_t tab[16 * 4];
	struct hp_static_branch *v = NULL;

	entry(tab, table, 0, text + 0x300, text + 0x340, 0xffffffff83001000ull, 1);
	entry(tab, table, 1, text + 0x100, text + 0x90, 0xffffffff83002000ull, 2);
	entry(tab, table, 2, text + 0x100, text + 0x90, 0xffffffff83002000ull, 0);   /* same site twice */
	entry(tab, table, 3, 0xffffffff84000000ull, text, 0xffffffff83002000ull, 0); /* outside the text */
	long n = hp_jump_table_parse(tab, sizeof(tab), table, text, text + 0x1000, &v);
	REQUIRE(n == 2 && v, "%ld sites, expected 2", n);
	EXPECT(v[0].code == text + 0x100 && v[0].target == text + 0x90 && v[0].key == 0xffffffff83002000ull,
	       "first site decoded as %llx -> %llx key %llx", (unsigned long long)v[0].code,
	       (unsigned long long)v[0].target, (unsigned long long)v[0].key);
	EXPECT(v[1].code == text + 0x300 && v[1].target == text + 0x340 && v[1].key == 0xffffffff83001000ull,
	       "second site decoded wrongly");
	/* Bit 0 of the key field is the entry's branch bit, bit 1 init text. */
	EXPECT(v[0].branch == 0 && v[1].branch == 1, "branch bits %u %u, expected 0 1", v[0].branch, v[1].branch);
	free(v);
	EXPECT(hp_jump_table_parse(tab, 15, table, text, text + 0x1000, &v) == -EINVAL && !v,
	       "a table of 15 bytes was accepted");
}

/* A module's table, whose end sysfs does not give, ends at its first entry
 * whose site or target is not in the module's text. */
static void t_module_table_ends_at_its_first_foreign_entry(void)
{
	const uint64_t table = 0xffffffffc0100000ull, text = 0xffffffffc0000000ull, key = 0xffffffffc0102000ull;
	uint8_t tab[16 * 5];

	memset(tab, 0, sizeof(tab));
	entry(tab, table, 0, text + 0x10, text + 0x40, key, 0);
	entry(tab, table, 1, text + 0x80, text + 0x20, key, 1);
	entry(tab, table, 2, text + 0x90, text + 0x5000, key, 0); /* target outside: the table ended */
	entry(tab, table, 3, text + 0xa0, text + 0xb0, key, 0);
	EXPECT(hp_jump_table_own_prefix(tab, sizeof(tab), table, text, text + 0x1000) == 32,
	       "own prefix %zu bytes, expected 2 entries",
	       hp_jump_table_own_prefix(tab, sizeof(tab), table, text, text + 0x1000));
	/* Zeros after the table (padding): an entry pointing at itself. */
	memset(tab + 32, 0, sizeof(tab) - 32);
	EXPECT(hp_jump_table_own_prefix(tab, sizeof(tab), table, text, text + 0x1000) == 32, "zeros taken as entries");
	EXPECT(hp_jump_table_own_prefix(tab, 31, table, text, text + 0x1000) == 16, "a partial entry was taken");
	EXPECT(hp_jump_table_own_prefix(tab, sizeof(tab), table, text + 0x20, text + 0x1000) == 0,
	       "a first entry outside the text was taken");
}

static void t_sites_take_one_canonical_form(void)
{
	const uint64_t lo = 0x1000;
	/* 0x00: nop5 (key off), 0x10: jmp rel32 to 0x40 (key on),
	 * 0x20: nop2 (xchg ax,ax), 0x30: jmp rel8 to 0x38, 0x50: jmp rel32 to 0x60
	 * whose entry says 0x70 (foreign), 0x58: add (foreign). */
	uint8_t code[0x80], want[0x80];
	memset(code, 0xcc, sizeof(code));
	memcpy(code + 0x00, "\x0f\x1f\x44\x00\x00", 5);
	memcpy(code + 0x10, "\xe9\x2b\x00\x00\x00", 5);
	memcpy(code + 0x20, "\x66\x90", 2);
	memcpy(code + 0x30, "\xeb\x06", 2);
	memcpy(code + 0x50, "\xe9\x0b\x00\x00\x00", 5);
	memcpy(code + 0x58, "\x48\x01\xd8", 3);
	memcpy(want, code, sizeof(code));
	memcpy(want + 0x00, "\xe9\x3b\x00\x00\x00", 5); /* to 0x40 */
	memcpy(want + 0x20, "\xeb\x16", 2);             /* to 0x38 */
	const struct hp_static_branch v[] = {
		{ lo + 0x00, lo + 0x40, 0 }, { lo + 0x10, lo + 0x40, 0 }, { lo + 0x20, lo + 0x38, 0 },
		{ lo + 0x30, lo + 0x38, 0 }, { lo + 0x50, lo + 0x70, 0 }, { lo + 0x58, lo + 0x70, 0 },
		{ lo + 0x7f, lo + 0x70, 0 }, /* runs off the end of the copy */
	};
	uint64_t sites[7];
	struct hp_static_branch_stats st;
	size_t n = hp_static_branch_canonicalize(code, lo, sizeof(code), v, 7, sites, &st);
	EXPECT(n == 4 && st.rewritten == 4 && st.were_nop == 2 && st.foreign == 3,
	       "%zu rewritten (%zu were NOPs), %zu foreign", st.rewritten, st.were_nop, st.foreign);
	EXPECT(n == 4 && sites[0] == lo && sites[1] == lo + 0x10 && sites[2] == lo + 0x20 && sites[3] == lo + 0x30,
	       "wrong canonical sites");
	EXPECT(!memcmp(code, want, sizeof(code)), "bytes after the rewrite are not the JMP forms");
	/* Twice gives the same bytes: the form does not depend on the state. */
	memcpy(want, code, sizeof(code));
	hp_static_branch_canonicalize(code, lo, sizeof(code), v, 7, sites, &st);
	EXPECT(!memcmp(code, want, sizeof(code)) && st.were_nop == 0, "canonical form is not a fixed point");
}

/* Sites the kernel is patching as the text is read (a key flipping:
 * text_poke_bp has an int3 over the first byte, and the old or the new tail
 * after it) take the same canonical form as settled ones: a parse during a
 * flip gives the same catalog digest (two parses of this machine's kernel
 * once differed while other test runs flipped keys). */
static void t_sites_being_patched_take_the_canonical_form(void)
{
	const uint64_t lo = 0x1000;
	/* 0x00: nop5's tail, 0x10: jmp rel32 to 0x40's tail, 0x20: nop2's
	 * tail, 0x30: jmp rel8 to 0x38's tail, each after an int3; 0x50: an
	 * int3 and a tail of neither form (foreign). */
	uint8_t code[0x60], settled[0x60];
	memset(code, 0xcc, sizeof(code));
	memcpy(code + 0x00, "\xcc\x1f\x44\x00\x00", 5);
	memcpy(code + 0x10, "\xcc\x2b\x00\x00\x00", 5);
	memcpy(code + 0x20, "\xcc\x90", 2);
	memcpy(code + 0x30, "\xcc\x06", 2);
	memcpy(code + 0x50, "\xcc\x01\x02\x03\x04", 5);
	memset(settled, 0xcc, sizeof(settled));
	memcpy(settled + 0x00, "\x0f\x1f\x44\x00\x00", 5);
	memcpy(settled + 0x10, "\xe9\x2b\x00\x00\x00", 5);
	memcpy(settled + 0x20, "\x66\x90", 2);
	memcpy(settled + 0x30, "\xeb\x06", 2);
	memcpy(settled + 0x50, "\xcc\x01\x02\x03\x04", 5);
	const struct hp_static_branch v[] = {
		{ lo + 0x00, lo + 0x40, 0 }, { lo + 0x10, lo + 0x40, 0 }, { lo + 0x20, lo + 0x38, 0 },
		{ lo + 0x30, lo + 0x38, 0 }, { lo + 0x50, lo + 0x40, 0 },
	};
	uint64_t sites[5];
	struct hp_static_branch_stats st, st2;
	size_t n = hp_static_branch_canonicalize(code, lo, sizeof(code), v, 5, sites, &st);
	EXPECT(n == 4 && st.rewritten == 4 && st.mid_patch == 4 && st.foreign == 1,
	       "%zu rewritten (%zu being patched), %zu foreign", st.rewritten, st.mid_patch, st.foreign);
	hp_static_branch_canonicalize(settled, lo, sizeof(settled), v, 5, sites, &st2);
	EXPECT(!memcmp(code, settled, sizeof(code)), "a site being patched does not read as a settled one");

	/* A static call site being patched: the same call form as any other. */
	uint8_t call[8] = { 0xcc, 0x11, 0x22, 0x33, 0x44, 0xcc, 0xcc, 0xcc };
	const struct hp_static_call c = { lo, 0 };
	n = hp_static_call_canonicalize(call, lo, sizeof(call), &c, 1, sites, &st);
	EXPECT(n == 1 && st.mid_patch == 1 && !memcmp(call, "\xe8\x00\x00\x00\x00", 5),
	       "a static call site being patched: %zu rewritten, %zu foreign", st.rewritten, st.foreign);
}

/* A module's .static_call_sites, whose end sysfs does not give, ends at its
 * first entry whose site is not in the module's text or whose key is. */
static void t_module_static_call_table_ends_at_its_first_foreign_entry(void)
{
	const uint64_t table = 0xffffffffc0100000ull, text = 0xffffffffc0000000ull, key = 0xffffffffc0102000ull;
	uint8_t tab[8 * 5];

	memset(tab, 0, sizeof(tab));
	for (size_t i = 0; i < 4; i++) {
		uint64_t at = table + 8 * i, site = text + 0x10 * (i + 1), k = i == 2 ? text + 0x40 : key;
		put32(tab + 8 * i, (int32_t)(site - at));
		put32(tab + 8 * i + 4, (int32_t)(k - (at + 4)) + (i == 1)); /* entry 1 a tail call */
	}
	/* Entry 2's key lies in the text: the table ended. */
	EXPECT(hp_static_call_own_prefix(tab, sizeof(tab), table, text, text + 0x1000) == 16,
	       "own prefix %zu bytes, expected 2 entries",
	       hp_static_call_own_prefix(tab, sizeof(tab), table, text, text + 0x1000));
	/* Zeros after the table (padding): an entry pointing at itself. */
	memset(tab + 16, 0, sizeof(tab) - 16);
	EXPECT(hp_static_call_own_prefix(tab, sizeof(tab), table, text, text + 0x1000) == 16, "zeros taken as entries");
	EXPECT(hp_static_call_own_prefix(tab, 15, table, text, text + 0x1000) == 8, "a partial entry was taken");
	EXPECT(hp_static_call_own_prefix(tab, sizeof(tab), table, text + 0x20, text + 0x1000) == 0,
	       "a first entry outside the text was taken");
	struct hp_static_call *v = NULL;
	long n = hp_static_call_parse(tab, 16, table, text, text + 0x1000, &v);
	REQUIRE(n == 2 && v, "%ld sites, expected 2", n);
	EXPECT(v[0].key == key && v[1].key == key && v[0].tail == 0 && v[1].tail == 1, "keys or tail bits wrong");
	free(v);
}

static void t_static_call_sites_take_one_form(void)
{
	const uint64_t table = 0xffffffff82000000ull, lo = 0xffffffff81000000ull;
	uint8_t tab[8 * 3];
	/* Entry 0: a call site at +0x20 (tail flag clear), entry 1: a tail
	 * site at +0x00 (flag 1), entry 2: outside the text. */
	put32(tab + 0, (int32_t)(lo + 0x20 - table));
	put32(tab + 4, (int32_t)(0x1000 - 4) + 0);
	put32(tab + 8, (int32_t)(lo + 0x00 - (table + 8)));
	put32(tab + 12, (int32_t)(0x2000 - 12) + 1);
	put32(tab + 16, (int32_t)(0x10000000 - 16));
	put32(tab + 20, 0);
	struct hp_static_call *v = NULL;
	long n = hp_static_call_parse(tab, sizeof(tab), table, lo, lo + 0x1000, &v);
	REQUIRE(n == 2 && v, "%ld sites, expected 2", n);
	EXPECT(v[0].code == lo && v[0].tail == 1 && v[1].code == lo + 0x20 && v[1].tail == 0, "sites decoded wrongly");
	/* The key, relative to its field, flags cleared. */
	EXPECT(v[0].key == table + 0x2000 && v[1].key == table + 0x1000 && !v[0].trampoline && !v[0].tramp,
	       "keys decoded as %llx %llx", (unsigned long long)v[0].key, (unsigned long long)v[1].key);
	free(v);
	EXPECT(hp_static_call_parse(tab, 7, table, lo, lo + 0x1000, &v) == -EINVAL, "a table of 7 bytes was accepted");

	/* Each form the kernel writes, then one it does not. */
	static const uint8_t forms[][5] = {
		{ 0xe8, 0x11, 0x22, 0x33, 0x44 }, /* call func */
		{ 0x0f, 0x1f, 0x44, 0x00, 0x00 }, /* nop5: unset */
		{ 0x2e, 0x2e, 0x2e, 0x31, 0xc0 }, /* xor eax, eax: return 0 */
		{ 0xe9, 0x55, 0x66, 0x77, 0x08 }, /* jmp func (tail) */
		{ 0xc3, 0xcc, 0xcc, 0xcc, 0xcc }, /* ret (tail, unset) */
	};
	for (size_t f = 0; f < 5; f++)
		for (uint8_t tail = 0; tail < 2; tail++) {
			uint8_t code[8];
			memcpy(code, forms[f], 5);
			memset(code + 5, 0x90, 3);
			struct hp_static_call one = { lo, tail };
			uint64_t site;
			struct hp_static_branch_stats st;
			size_t k = hp_static_call_canonicalize(code, lo, sizeof(code), &one, 1, &site, &st);
			EXPECT(k == 1 && site == lo && code[0] == (tail ? 0xe9 : 0xe8) &&
				       !memcmp(code + 1, "\0\0\0\0", 4),
			       "form %zu (tail %u) not canonical: %02x %02x", f, tail, code[0], code[1]);
		}
	uint8_t other[8] = { 0x48, 0x89, 0xc7, 0x90, 0x90, 0x90, 0x90, 0x90 };
	struct hp_static_call one = { lo, 0 };
	uint64_t site;
	struct hp_static_branch_stats st;
	EXPECT(hp_static_call_canonicalize(other, lo, sizeof(other), &one, 1, &site, &st) == 0 && st.foreign == 1 &&
		       other[0] == 0x48,
	       "a mov was taken for a static call form");
}

/* Every canonical site of the live kernel ends a block whose successors are
 * the fallthrough after it and its target (taken, or a tail call when the
 * target is in another fragment). */
static void t_kernel_sites_are_two_way_branches(void)
{
	struct hp_open_opts o = { .quiet = true };
	struct hp_model *m = NULL;
	char err[256];

	if (hp_model_open_kernel(&o, &m, err, sizeof(err)) < 0)
		SKIP("kernel model unavailable: %s", err);
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	REQUIRE(kf && kf->njump_entries > 100, "jump table not read: %s", kf && kf->nnotes ? kf->notes[0] : "");
	EXPECT(kf->nstatic_branches * 10 >= kf->njump_entries * 9, "only %zu of %zu sites canonical (%zu foreign)",
	       kf->nstatic_branches, kf->njump_entries, kf->static_branch_foreign);
	size_t in_funcs = 0, two_way = 0, in_schedule = 0;
	for (size_t i = 0; i < kf->njump_entries; i++) {
		const struct hp_static_branch *s = &kf->jump_entries[i];
		const struct hp_module *mod;
		const struct hp_function *f = hp_model_lookup(m, s->code, &mod);
		if (!f || !f->nblocks || (f->flags & HP_FN_UNDECODABLE))
			continue;
		const struct hp_block *b = hp_function_block_at(mod, f, s->code);
		if (!b)
			continue;
		in_funcs++;
		bool fall = false, taken = false;
		for (uint16_t k = 0; k < b->nsucc; k++) {
			const struct hp_succ *sc = &mod->succs[b->succ_start + k];
			fall |= sc->kind == HP_SUCC_FALLTHROUGH &&
				f->addr + sc->target == f->addr + b->offset + b->size;
			taken |= (sc->kind == HP_SUCC_TAKEN && f->addr + sc->target == s->target) ||
				 (sc->kind == HP_SUCC_TAIL_CALL && sc->target == s->target);
		}
		bool ok = b->nsucc == 2 && fall && taken && f->addr + b->offset + b->size > s->code &&
			  f->addr + b->offset + b->size <= s->code + 5 && (f->flags & HP_FN_STATIC_BRANCH);
		two_way += ok;
		in_schedule += ok && !strcmp(f->name, "__schedule");
		if (!ok && in_funcs - two_way <= 1)
			fprintf(stderr, "  %s+0x%llx: block +0x%x..+0x%x, %u successors\n", f->name,
				(unsigned long long)(s->code - f->addr), b->offset, b->offset + b->size, b->nsucc);
	}
	EXPECT(in_funcs > 100, "only %zu sites in parsed functions", in_funcs);
	/* A site whose target is its own fallthrough would give one successor;
	 * allow a handful. */
	EXPECT(two_way + 5 >= in_funcs, "%zu of %zu sites are two-way branches", two_way, in_funcs);
	EXPECT(in_schedule > 0, "__schedule (trace_sched_switch) has no two-way jump-label site");
	/* Static call sites: indirect calls (or, tail sites and trampolines,
	 * blocks ending with an indirect successor). */
	EXPECT(kf->nstatic_calls > 100, "only %zu static call sites canonical (%zu foreign)", kf->nstatic_calls,
	       kf->static_call_foreign);
	size_t calls_in = 0, calls_ind = 0;
	for (size_t i = 0; i < kf->nstatic_calls; i++) {
		const struct hp_module *mod;
		const struct hp_function *f = hp_model_lookup(m, kf->static_calls[i], &mod);
		if (!f || !f->nblocks || (f->flags & HP_FN_UNDECODABLE))
			continue;
		calls_in++;
		uint32_t off = (uint32_t)(kf->static_calls[i] - f->addr);
		bool ind = false;
		for (uint32_t k = 0; k < f->nicalls; k++)
			ind |= mod->icall_sites[f->icall_start + k] == off;
		const struct hp_block *b = hp_function_block_at(mod, f, kf->static_calls[i]);
		if (!ind && b && b->offset + b->size == off + 5 && b->nsucc == 1)
			ind = mod->succs[b->succ_start].kind == HP_SUCC_INDIRECT;
		calls_ind += ind && (f->flags & HP_FN_STATIC_CALL);
		for (uint32_t k = 0; k < f->ncalls; k++)
			EXPECT(mod->calls[f->call_start + k].site != off,
			       "%s+0x%x: static call site kept a direct callee", f->name, off);
	}
	EXPECT(calls_in > 100 && calls_ind == calls_in, "%zu of %zu static call sites are indirect", calls_ind,
	       calls_in);
	const struct hp_function *tramp = hp_model_find(m, "__SCT__tp_func_sched_switch", NULL, NULL);
	EXPECT(!tramp || (tramp->flags & HP_FN_STATIC_CALL), "the sched_switch trampoline is not a static call");
	hp_model_free(m);
}

int main(void)
{
	RUN(t_jump_table_entries_decode);
	RUN(t_module_table_ends_at_its_first_foreign_entry);
	RUN(t_sites_take_one_canonical_form);
	RUN(t_sites_being_patched_take_the_canonical_form);
	RUN(t_module_static_call_table_ends_at_its_first_foreign_entry);
	RUN(t_static_call_sites_take_one_form);
	RUN(t_kernel_sites_are_two_way_branches);
	TEST_EXIT();
}
