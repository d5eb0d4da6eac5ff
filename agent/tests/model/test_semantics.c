// SPDX-License-Identifier: Apache-2.0
/*
 * CFG semantics a layout depends on, on real code: calls that never return
 * (named and proven) end their blocks, .cold fragments are linked to their
 * functions with the jumps between them landing on block starts, PLT stubs
 * are named, and on the live kernel WARN traps continue while BUG traps and
 * __stack_chk_fail calls end their blocks. A switch table's bound is exact
 * only when its check compares the index register or the register the index
 * was copied from (SQLite's VDBE loop: cmp dl, 0xb8; ja; ...; movzx ecx, dl).
 * A table whose lea is hoisted before its loop is resolved by following its
 * base register back over the CFG.
 */
#include <inttypes.h>

#include "harness.h"
#include "isa/isa.h"
#include "model/jumptable.h"
#include "model/model.h"
#include "target/target.h"
#include "test_common.h"
#include "test_util.h"

static struct hp_model *open_fixture(const char *src, const char *out, const char *flags)
{
	struct hp_open_opts o = { .quiet = true };
	struct hp_model *m = NULL;
	char err[256];
	const char *p = tu_compile(src, out, flags);

	if (!p || hp_model_open_elf(p, &o, &m, err, sizeof(err)) < 0)
		return NULL;
	return m;
}

/* The block of f containing the call to callee, or NULL. */
static const struct hp_block *call_block(const struct hp_model *m, const struct hp_module *mod,
					 const struct hp_function *f, const char *callee)
{
	char buf[128];

	for (uint32_t c = 0; c < f->ncalls; c++) {
		const struct hp_call *cl = &mod->calls[f->call_start + c];
		const char *s = hp_model_symbolize(m, cl->target, buf, sizeof(buf));
		if (s && !strcmp(s, callee))
			return hp_function_block_at(mod, f, f->addr + cl->site);
	}
	return NULL;
}

static void t_noreturn_calls_end_blocks(void)
{
	struct hp_model *m = open_fixture("noret.c", "noret", "-O2");
	const struct hp_module *mod;
	const struct hp_function *die, *check, *cold;
	const struct hp_block *b;

	REQUIRE(m, "gcc or open failed");
	die = hp_model_find(m, "nr_die", &mod, NULL);
	check = hp_model_find(m, "nr_check", NULL, NULL);
	REQUIRE(die && check, "fixture functions not found");
	EXPECT((die->flags & HP_FN_NORETURN) && !(die->flags & HP_FN_NORETURN_NAMED),
	       "nr_die (only ever exits) not proven to never return (flags 0x%x)", die->flags);
	EXPECT(hp_model_find(m, "_exit@plt", NULL, NULL), "_exit@plt stub not named");
	b = call_block(m, mod, check, "nr_die");
	REQUIRE(b, "nr_check's call to nr_die not found");
	EXPECT(b->nsucc == 0, "the block calling nr_die has %u successors, want none", b->nsucc);
	EXPECT(!check_function_cfg(mod, check), "%s", check_function_cfg(mod, check));
	/* abort is in nr_check's .cold fragment, reached by a jump. */
	cold = hp_model_find(m, "nr_check.cold", NULL, NULL);
	REQUIRE(cold, "nr_check.cold not found");
	b = call_block(m, mod, cold, "abort@plt");
	REQUIRE(b, "nr_check.cold's call to abort@plt not found");
	EXPECT(b->nsucc == 0, "the block calling abort has %u successors", b->nsucc);
	hp_model_free(m);
}

static void t_cold_fragments_are_linked(void)
{
	struct hp_model *m = open_fixture("noret.c", "noret_cold", "-O2");
	const struct hp_module *mod;
	const struct hp_function *f, *c;
	int jumps = 0;

	REQUIRE(m, "gcc or open failed");
	f = hp_model_find(m, "nr_cold", &mod, NULL);
	c = hp_model_find(m, "nr_cold.cold", NULL, NULL);
	REQUIRE(f && c, "nr_cold or nr_cold.cold not found");
	EXPECT((c->flags & HP_FN_COLD_PART) && c->parent == (uint32_t)(f - mod->funcs) + 1 &&
		       f->cold == (uint32_t)(c - mod->funcs) + 1,
	       "nr_cold.cold not linked to nr_cold");
	/* Every jump from one fragment into the other lands on a block start. */
	const struct hp_function *pair[2][2] = { { f, c }, { c, f } };
	for (int d = 0; d < 2; d++)
		for (uint32_t b = 0; b < pair[d][0]->nblocks; b++) {
			const struct hp_block *bl = &mod->blocks[pair[d][0]->block_start + b];
			for (uint32_t s = 0; s < bl->nsucc; s++) {
				const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
				const struct hp_function *to = pair[d][1];
				if (sc->kind != HP_SUCC_TAIL_CALL || sc->target < to->addr ||
				    sc->target >= to->addr + to->size)
					continue;
				const struct hp_block *tb = hp_function_block_at(mod, to, sc->target);
				EXPECT(tb && to->addr + tb->offset == sc->target,
				       "jump from %s to 0x%" PRIx64 " lands inside a block of %s", pair[d][0]->name,
				       sc->target, to->name);
				jumps++;
			}
		}
	EXPECT(jumps >= 2, "only %d jumps between nr_cold and its .cold part", jumps);
	hp_model_free(m);
}

static void t_plt_callees_are_named(void)
{
	struct hp_model *m = open_fixture("noret.c", "noret_plt", "-O2");
	const struct hp_module *mod;
	const struct hp_function *f;

	REQUIRE(m, "gcc or open failed");
	f = hp_model_find(m, "main", &mod, NULL);
	REQUIRE(f, "main not found");
	EXPECT(call_block(m, mod, f, "printf@plt") || call_block(m, mod, f, "__printf_chk@plt"),
	       "main's call to printf is not named through the PLT");
	EXPECT(call_block(m, mod, f, "strtol@plt") || call_block(m, mod, f, "atoi@plt"),
	       "main's call to atoi/strtol is not named through the PLT");
	hp_model_free(m);
}

/* A shared library calling its own export that never returns goes through
 * its own PLT: the stub never returns either, so the call ends its block;
 * the whole model and a parse of the caller alone agree. */
static void t_plt_calls_to_own_noreturn_export_end_blocks(void)
{
	const char *p = tu_compile("noret_lib.c", "libnoret.so", "-O2 -fPIC -shared");

	REQUIRE(p, "gcc failed");
	for (int only = 0; only < 2; only++) {
		struct hp_open_opts o = { .quiet = true, .only_function = only ? "nl_check" : NULL };
		struct hp_model *m = NULL;
		const struct hp_module *mod;
		const struct hp_function *check, *stub, *fatal;
		const struct hp_block *b;
		char err[256];

		REQUIRE(hp_model_open_elf(p, &o, &m, err, sizeof(err)) == 0, "open: %s", err);
		check = hp_model_find(m, "nl_check", &mod, NULL);
		stub = hp_model_find(m, "nl_fatal@plt", NULL, NULL);
		fatal = hp_model_find(m, "nl_fatal", NULL, NULL);
		REQUIRE(check && stub && fatal, "nl_check, nl_fatal@plt or nl_fatal not found");
		EXPECT((stub->flags & HP_FN_PLT) && (stub->flags & HP_FN_NORETURN) && (fatal->flags & HP_FN_NORETURN) &&
			       !(fatal->flags & HP_FN_NORETURN_NAMED),
		       "%s: nl_fatal (0x%x) and its stub (0x%x) not proven to never return", only ? "by name" : "whole",
		       fatal->flags, stub->flags);
		b = call_block(m, mod, check, "nl_fatal@plt");
		REQUIRE(b, "nl_check's call to nl_fatal@plt not found");
		EXPECT(b->nsucc == 0, "%s: the block calling nl_fatal@plt has %u successors, want none",
		       only ? "by name" : "whole", b->nsucc);
		EXPECT(!check_function_cfg(mod, check), "%s", check_function_cfg(mod, check));
		hp_model_free(m);
	}
}

/* The C library this test runs on, from its own mappings. */
static bool mapped_libc(char *path, size_t len)
{
	FILE *fp = fopen("/proc/self/maps", "r");
	char line[640];
	bool found = false;

	while (fp && !found && fgets(line, sizeof(line), fp)) {
		char *s = strchr(line, '/');
		if (s && strstr(s, "/libc.so.6")) {
			s[strcspn(s, "\n")] = '\0';
			snprintf(path, len, "%s", s);
			found = true;
		}
	}
	if (fp)
		fclose(fp);
	return found;
}

/* libc calls its own IFUNCs through PLT slots with IRELATIVE relocations
 * (the resolver's address as addend): each stub is named after the IFUNC. */
static void t_ifunc_plt_slots_are_named(void)
{
	static const char *const stubs[] = { "strlen@plt", "strchr@plt", "strcmp@plt", "memchr@plt" };
	struct hp_open_opts o = { .quiet = true };
	struct hp_model *m = NULL;
	char libc[512], err[256];

	REQUIRE(mapped_libc(libc, sizeof(libc)), "libc.so.6 is not in /proc/self/maps");
	REQUIRE(hp_model_open_elf(libc, &o, &m, err, sizeof(err)) == 0, "open %s: %s", libc, err);
	for (size_t i = 0; i < sizeof(stubs) / sizeof(stubs[0]); i++) {
		const struct hp_function *f = hp_model_find(m, stubs[i], NULL, NULL);
		EXPECT(f && (f->flags & HP_FN_PLT) && f->size <= 16, "%s: %s is not a named PLT stub", libc, stubs[i]);
	}
	hp_model_free(m);
}

static void t_kernel_warn_continues_bug_ends(void)
{
	struct hp_open_opts o = { .quiet = true };
	struct hp_model *m = NULL;
	char err[256];
	size_t warn_cont = 0, warn_total = 0;

	if (hp_model_open_kernel(&o, &m, err, sizeof(err)) < 0)
		SKIP("kernel model unavailable: %s", err);
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	REQUIRE(kf && kf->nbug_entries > 1000 && kf->nwarn_traps > 100, "bug table not read (%zu entries, %zu warn)",
		kf ? kf->nbug_entries : 0, kf ? kf->nwarn_traps : 0);
	/* A WARN trap is inside a block (execution continues after it). */
	for (size_t i = 0; i < kf->nwarn_traps; i++) {
		const struct hp_module *mod;
		const struct hp_function *f = hp_model_lookup(m, kf->warn_traps[i], &mod);
		const struct hp_block *b = f ? hp_function_block_at(mod, f, kf->warn_traps[i]) : NULL;
		if (!b)
			continue;
		warn_total++;
		warn_cont += b->nsucc > 0 && f->addr + b->offset + b->size > kf->warn_traps[i] + 2;
	}
	EXPECT(warn_total > 100 && warn_cont * 10 >= warn_total * 9, "%zu of %zu WARN traps continue", warn_cont,
	       warn_total);
	/* vfs_read's call to __stack_chk_fail ends its block. */
	const struct hp_module *mod;
	const struct hp_function *f = hp_model_find(m, "vfs_read", &mod, NULL);
	REQUIRE(f, "vfs_read not found");
	const struct hp_block *b = call_block(m, mod, f, "__stack_chk_fail");
	if (b)
		EXPECT(b->nsucc == 0, "vfs_read's __stack_chk_fail block has successors");
	EXPECT(!check_function_cfg(mod, f), "%s", check_function_cfg(mod, f));
	hp_model_free(m);
}

/* A lookup that found no function passes NULL on: no block, and no crash
 * (f was read before the check that it is there). */
static void t_block_at_without_function(void)
{
	struct hp_module mod = { 0 };

	EXPECT(!hp_function_block_at(&mod, NULL, 0x1000), "a block without a function");
	EXPECT(!hp_function_block_at(NULL, NULL, 0x1000), "a block without a module or function");
}

/* cmp dl, 0xb8; ja; lea rsi, [rip + 0x100]; movzx ecx, SRC; movsxd rax,
 * [rsi + rcx*4]; add rax, rsi; jmp rax: exact when SRC is dl, not when al. */
static void t_table_bound_through_a_copy(void)
{
	for (int src_dl = 1; src_dl >= 0; src_dl--) {
		uint8_t code[] = { 0x80, 0xfa, 0xb8, 0x77, 0x00,
				   0x48, 0x8d, 0x35, 0x00, 0x01,
				   0x00, 0x00, 0x0f, 0xb6, src_dl ? 0xca : 0xc8,
				   0x48, 0x63, 0x04, 0x8e, 0x48,
				   0x01, 0xf0, 0xff, 0xe0 };
		const uint32_t offs[] = { 0, 3, 5, 12, 15, 19, 22 };
		struct hp_jt_match jm;

		REQUIRE(hp_jt_recognize(code, sizeof(code), 0x1000, offs, 7, &jm), "the table jump is not recognized");
		EXPECT(jm.relative && jm.entry_size == 4 && jm.nentries == 0xb9 && jm.table == 0x1000 + 12 + 0x100 &&
			       jm.base_at == 2,
		       "table 0x%" PRIx64 ", %u entries, base at %u", jm.table, jm.nentries, jm.base_at);
		EXPECT(jm.exact == (bool)src_dl, "movzx ecx, %s: exact %d", src_dl ? "dl" : "al", jm.exact);
	}
}

/* lea rsi, [rip+0x100]; movsxd rax, [rsi+rcx*4]; (mov rsi, rdx;) add rax,
 * rsi; jmp rax: the shape of a table jump only when nothing sets rsi
 * between its load and the add. */
static void t_table_base_set_before_the_add(void)
{
	static const uint8_t code[] = { 0x48, 0x8d, 0x35, 0x00, 0x01, 0x00, 0x00, 0x48, 0x63, 0x04,
					0x8e, 0x48, 0x89, 0xd6, 0x48, 0x01, 0xf0, 0xff, 0xe0 };
	const uint32_t with_mov[] = { 0, 7, 11, 14, 17 }, without[] = { 0, 7, 14, 17 };
	struct hp_jt_match jm;

	EXPECT(hp_jt_recognize_shape(code, sizeof(code), 0x1000, without, 4, &jm) && !jm.hoisted && jm.table == 0x1107,
	       "lea; movsxd; add; jmp is not the table jump it is");
	EXPECT(!hp_jt_recognize_shape(code, sizeof(code), 0x1000, with_mov, 5, &jm),
	       "a base set between the load and the add passed for a table jump");
}

/* A computed goto's label table: lea rdi, [rip+0x100]; and eax, 0x7f; jmp
 * [rdi+rax*8] is one with no bound (its size comes from the data); so is
 * "mov rax, [rdi+rax*8]; jmp rax" (without the lea in the window: hoisted),
 * but not with "add rax, 5" between the load and the jump. */
static void t_label_table_shapes(void)
{
	static const uint8_t code[] = { 0x48, 0x8d, 0x3d, 0x00, 0x01, 0x00, 0x00, /* 0: lea rdi, [rip+0x100] */
					0x83, 0xe0, 0x7f,                         /* 7: and eax, 0x7f */
					0xff, 0x24, 0xc7,                         /* 10: jmp [rdi+rax*8] */
					0x48, 0x8b, 0x04, 0xc7,                   /* 13: mov rax, [rdi+rax*8] */
					0x48, 0x83, 0xc0, 0x05,                   /* 17: add rax, 5 */
					0xff, 0xe0,                               /* 21: jmp rax */
					0x48, 0x8b, 0x04, 0xc7,                   /* 23: mov rax, [rdi+rax*8] */
					0xff, 0xe0 };                             /* 27: jmp rax */
	const uint32_t direct[] = { 0, 7, 10 }, added[] = { 13, 17, 21 }, loaded[] = { 23, 27 };
	struct hp_jt_match jm;

	REQUIRE(hp_jt_recognize(code, sizeof(code), 0x1000, direct, 3, &jm), "jmp [rdi+rax*8] is not a label table");
	EXPECT(jm.label && !jm.relative && jm.entry_size == 8 && jm.nentries == 0 && !jm.hoisted &&
		       jm.table == 0x1107 && jm.base_at == 0,
	       "label %d, entries %u of %u bytes, table 0x%" PRIx64 ", base at %u", jm.label, jm.nentries,
	       jm.entry_size, jm.table, jm.base_at);
	REQUIRE(hp_jt_recognize(code, sizeof(code), 0x1000, loaded, 2, &jm), "mov; jmp is not a label table");
	EXPECT(jm.label && jm.hoisted && jm.base_at == 0, "mov; jmp: label %d hoisted %d base at %u", jm.label,
	       jm.hoisted, jm.base_at);
	EXPECT(!hp_jt_recognize(code, sizeof(code), 0x1000, added, 3, &jm) || !jm.label,
	       "an entry changed between its load and the jump passed for a label table");
}

/* Following a table's base back over a CFG: block 3 reads rcx (movsxd rax,
 * [rcx+rax*4]; add rax, rcx; jmp rax) and is reached from the blocks in
 * preds; block 0 and block 1 each set rcx with a lea of the same table,
 * block 2 writes it otherwise (mov rcx, rdx), block 5 calls (after block
 * 0's lea), block 4 sets it to another table. */
static void t_table_base_followed_back(void)
{
	static const uint8_t code[] = { 0x48, 0x8d, 0x0d, 0x00, 0x01, 0x00, 0x00, /* 0: lea rcx, [rip+0x100] */
					0x48, 0x8d, 0x0d, 0xf9, 0x00, 0x00, 0x00, /* 7: lea rcx, [rip+0xf9] */
					0x48, 0x89, 0xd1,                         /* 14: mov rcx, rdx */
					0x48, 0x63, 0x04, 0x81,                   /* 17: movsxd rax, [rcx+rax*4] */
					0x48, 0x01, 0xc8,                         /* 21: add rax, rcx */
					0xff, 0xe0,                               /* 24: jmp rax */
					0x48, 0x8d, 0x0d, 0x00, 0x02, 0x00, 0x00, /* 26: lea rcx, [rip+0x200] */
					0xe8, 0x00, 0x00, 0x00, 0x00 };           /* 33: call (next) */
	uint64_t start[] = { 0x1000, 0x1007, 0x100e, 0x1011, 0x101a, 0x1021 };
	uint64_t end[] = { 0x1007, 0x100e, 0x1011, 0x101a, 0x1021, 0x1026 };
	static const struct {
		uint32_t preds[2];
		uint8_t entry1, entry3;
		bool ok;
		const char *what;
	} cases[] = {
		{ { 0, 1 }, 1, 0, true, "two leas of one table" },
		{ { 0, 2 }, 1, 0, false, "a lea and a mov" },
		{ { 0, 5 }, 1, 0, false, "a lea and a call (rcx is the callee's to change)" },
		{ { 1, 4 }, 1, 0, false, "leas of two tables" },
		{ { 0, 1 }, 1, 1, false, "reached from outside as well" },
		{ { 0, 1 }, 2, 0, false, "a block with a lea entered from elsewhere in its middle" },
	};

	struct hp_isa_detail lea0;
	REQUIRE(hp_isa_decode_detail(code, sizeof(code), 0x1000, &lea0) == 0, "lea does not decode");
	uint16_t rcx = lea0.op[0].reg;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		/* Block 5 (the call) is reached from block 0 only. */
		uint32_t pred_start[] = { 0, 0, 0, 0, 2, 2, 3 }, pred[3] = { cases[c].preds[0], cases[c].preds[1], 0 };
		uint8_t entry[6] = { 1, cases[c].entry1, 1, cases[c].entry3, 1, 0 };
		struct hp_jt_graph g = { code, 0x1000, sizeof(code), 6, start, end, pred_start, pred, entry, true };
		uint64_t table, lea;
		bool ok = hp_jt_base_reaches(&g, 3, 0x1015, rcx, &table, &lea);
		EXPECT(ok == cases[c].ok, "%s: %s", cases[c].what, ok ? "proved" : "not proved");
		if (ok)
			EXPECT(table == 0x1107 && lea == 0x1000, "%s: table 0x%" PRIx64 ", lea 0x%" PRIx64,
			       cases[c].what, table, lea);
	}
}

/* A switch in a loop whose table's lea gcc hoisted before the loop
 * (fixtures/hoisted.c, -O2 -fPIE): resolved by following its base register
 * back over the CFG, its ten cases successors of the jump; through calls
 * only when the base is a register the ABI has a callee keep. */
static void t_hoisted_table_is_resolved(void)
{
	struct hp_model *m = open_fixture("hoisted.c", "hoisted", "-O2 -fPIE -pie");
	const struct hp_module *mod;

	REQUIRE(m, "gcc or open failed");
	const struct hp_function *f = hp_model_find(m, "hs_run", &mod, NULL);
	REQUIRE(f, "hs_run not found");
	EXPECT(!(f->flags & HP_FN_UNRESOLVED_JUMP) && f->njt == 1, "hs_run: %u tables, unresolved jump %d", f->njt,
	       !!(f->flags & HP_FN_UNRESOLVED_JUMP));
	if (f->njt == 1) {
		const struct hp_jump_table *jt = &mod->jtables[f->jt_start];
		const struct hp_block *at = hp_function_block_at(mod, f, f->addr + jt->site);
		EXPECT(jt->hoisted && jt->relative && jt->exact && jt->nentries == 10 && at && at->nsucc == 10 &&
			       hp_function_block_at(mod, f, f->addr + jt->base_site) != at &&
			       jt->site - jt->base_site > 32,
		       "table: hoisted %d, exact %d, %u entries, %u successors, lea +0x%x, jump +0x%x", jt->hoisted,
		       jt->exact, jt->nentries, at ? at->nsucc : 0, jt->base_site, jt->site);
	}
	/* hs_calls' base is r10 across calls to hs_put: not proved, the ABI lets a callee change r10. */
	f = hp_model_find(m, "hs_calls", &mod, NULL);
	REQUIRE(f, "hs_calls not found");
	EXPECT((f->flags & HP_FN_UNRESOLVED_JUMP) && f->njt == 0, "hs_calls (r10 across calls): %u tables", f->njt);
	hp_model_free(m);
	/* With -fno-ipa-ra its base is r12, which a callee keeps: proved through the calls. */
	REQUIRE((m = open_fixture("hoisted.c", "hoisted_noipara", "-O2 -fPIE -pie -fno-ipa-ra")), "gcc or open failed");
	f = hp_model_find(m, "hs_calls", &mod, NULL);
	REQUIRE(f, "hs_calls not found");
	EXPECT(!(f->flags & HP_FN_UNRESOLVED_JUMP) && f->njt == 1 && mod->jtables[f->jt_start].hoisted,
	       "hs_calls (r12 across calls): %u tables, unresolved jump %d", f->njt,
	       !!(f->flags & HP_FN_UNRESOLVED_JUMP));
	hp_model_free(m);
}

int main(void)
{
	RUN(t_block_at_without_function);
	RUN(t_table_bound_through_a_copy);
	RUN(t_table_base_set_before_the_add);
	RUN(t_label_table_shapes);
	RUN(t_table_base_followed_back);
	RUN(t_hoisted_table_is_resolved);
	RUN(t_noreturn_calls_end_blocks);
	RUN(t_cold_fragments_are_linked);
	RUN(t_plt_callees_are_named);
	RUN(t_plt_calls_to_own_noreturn_export_end_blocks);
	RUN(t_ifunc_plt_slots_are_named);
	RUN(t_kernel_warn_continues_bug_ends);
	tu_cleanup();
	TEST_EXIT();
}
