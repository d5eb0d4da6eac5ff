// SPDX-License-Identifier: Apache-2.0
/*
 * The ELF-file target on programs compiled here with gcc: block boundaries
 * cross-checked against objdump's disassembly, symbol fallbacks (.dynsym,
 * .eh_frame), and bad input, including a deterministic mutation fuzz.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>

#include "harness.h"
#include "objdump.h"
#include "model/model.h"
#include "target/target.h"
#include "test_common.h"
#include "test_util.h"

static bool is_block_start(const struct hp_module *mod, const struct hp_function *f, uint64_t addr)
{
	const struct hp_block *b = hp_function_block_at(mod, f, addr);
	return b && f->addr + b->offset == addr;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Is addr a target of a switch table the model resolved in f? */
static bool is_table_target(const struct hp_module *mod, const struct hp_function *f, uint64_t addr)
{
	for (uint32_t t = 0; t < f->njt; t++) {
		const struct hp_jump_table *jt = &mod->jtables[f->jt_start + t];
		for (uint32_t e = 0; e < jt->nentries; e++)
			if (mod->jt_targets[jt->target_start + e] == addr)
				return true;
	}
	return false;
}

/* Does the call at od instruction in go to a function the model says never returns? */
static bool calls_noreturn(const struct hp_model *m, const struct od_insn *in)
{
	const struct hp_function *g = in->call_target ? hp_model_lookup(m, in->call_target, NULL) : NULL;
	return g && g->addr == in->call_target && (g->flags & HP_FN_NORETURN);
}

/* Cross-check every function of path against objdump; returns the number of
 * functions checked, or -1 after recording a failure. */
static int cross_check(const char *path)
{
	struct hp_open_opts o = { .quiet = true };
	struct hp_model *m = NULL;
	struct od od;
	char err[512];
	int checked = 0;

	if (hp_model_open_elf(path, &o, &m, err, sizeof(err)) < 0) {
		t_fail(__FILE__, __LINE__, "open %s: %s", path, err);
		return -1;
	}
	if (!objdump(path, &od)) {
		t_fail(__FILE__, __LINE__, "objdump %s failed", path);
		hp_model_free(m);
		return -1;
	}
	const struct hp_module *mod = &m->mods[0];
	/* Every direct jump target of the file: jumps between a function and
	 * its .cold fragment make leaders across functions. */
	uint64_t *targets = calloc(od.n + 1, sizeof(*targets));
	size_t ntargets = 0;
	for (size_t q = 0; targets && q < od.n; q++)
		if (od.v[q].direct)
			targets[ntargets++] = od.v[q].target;
	qsort(targets, ntargets, sizeof(*targets), cmp_u64);
	for (size_t fi = 0; fi < mod->nfuncs && !t_failed_case; fi++) {
		const struct hp_function *f = &mod->funcs[fi];
		const char *why;
		struct hp_insn *ins = NULL;
		size_t a = od_first(&od, f->addr), b = a, k;
		int n;

		while (b < od.n && od.v[b].addr < f->addr + f->size)
			b++;
		if (b == a)
			continue;
		if ((why = check_function_cfg(mod, f))) {
			t_fail(__FILE__, __LINE__, "%s", why);
			break;
		}
		/* Instruction boundaries agree with objdump's. */
		n = hp_function_disassemble(m, mod, f, &ins, err, sizeof(err));
		if (n != (int)(b - a)) {
			t_fail(__FILE__, __LINE__, "%s: %d instructions, objdump has %zu", f->name, n, b - a);
			free(ins);
			break;
		}
		for (k = 0; k < b - a; k++)
			if (ins[k].addr != od.v[a + k].addr) {
				t_fail(__FILE__, __LINE__, "%s: instruction %zu at 0x%" PRIx64 ", objdump 0x%" PRIx64,
				       f->name, k, ins[k].addr, od.v[a + k].addr);
				break;
			}
		free(ins);
		for (k = a; k < b && !t_failed_case; k++) {
			const struct od_insn *in = &od.v[k];
			bool last = k + 1 == b;

			/* Every direct branch target inside the function starts a block,
			 * unless it lands inside an instruction (glibc jumps over a
			 * lock prefix): the linear sweep keeps objdump's boundaries. */
			bool mid_insn = in->direct && in->target >= f->addr && in->target < f->addr + f->size &&
					od.v[od_first(&od, in->target)].addr != in->target;
			if (in->direct && !mid_insn && in->target >= f->addr && in->target < f->addr + f->size &&
			    !is_block_start(mod, f, in->target))
				t_fail(__FILE__, __LINE__,
				       "%s: branch at 0x%" PRIx64 " to 0x%" PRIx64 " which is not a block start",
				       f->name, in->addr, in->target);
			/* The instruction after a control transfer starts a block
			 * (runs of int3 padding are one block). */
			if (!last && in->transfer && !(in->int3 && od.v[k + 1].int3) &&
			    !is_block_start(mod, f, od.v[k + 1].addr))
				t_fail(__FILE__, __LINE__, "%s: 0x%" PRIx64 " after %s is not a block start", f->name,
				       od.v[k + 1].addr, in->mnem);
			/* A call to a function that never returns ends its block. */
			if (!last && calls_noreturn(m, in) && !is_block_start(mod, f, od.v[k + 1].addr))
				t_fail(__FILE__, __LINE__,
				       "%s: 0x%" PRIx64 " after a call to a noreturn function is not a block start",
				       f->name, od.v[k + 1].addr);
			/* A block starts only where something makes it a leader: a
			 * jump from anywhere (this function or its other fragment),
			 * a switch table entry, the end of a call that never returns. */
			if (!last && is_block_start(mod, f, od.v[k + 1].addr) && !in->transfer) {
				uint64_t at = od.v[k + 1].addr;
				bool targeted = bsearch(&at, targets, ntargets, sizeof(*targets), cmp_u64) ||
						is_table_target(mod, f, at) || calls_noreturn(m, in);
				if (!targeted)
					t_fail(__FILE__, __LINE__,
					       "%s: block at 0x%" PRIx64
					       " follows %s and is no "
					       "branch target",
					       f->name, od.v[k + 1].addr, in->mnem);
			}
		}
		checked++;
	}
	free(targets);
	free(od.v);
	hp_model_free(m);
	return t_failed_case ? -1 : checked;
}

static void check_fixture(const char *src, const char *out, const char *flags, int min_funcs)
{
	const char *p = tu_compile(src, out, flags);
	int n;

	REQUIRE(p, "gcc %s %s failed", flags, src);
	n = cross_check(p);
	if (n >= 0)
		EXPECT(n >= min_funcs, "only %d functions cross-checked", n);
}

static void t_loop_O2_matches_objdump(void)
{
	check_fixture("loop.c", "loop_O2", "-O2", 4);
}
static void t_loop_O0_matches_objdump(void)
{
	check_fixture("loop.c", "loop_O0", "-O0", 4);
}
static void t_switch_no_jump_tables_matches_objdump(void)
{
	check_fixture("switchy.c", "sw_nojt", "-O2 -fno-jump-tables", 4);
}
static void t_switch_jump_tables_matches_objdump(void)
{
	check_fixture("switchy.c", "sw_jt", "-O2 -fjump-tables", 4);
}

/* Count successors of kind in the function named name of an ELF file. */
static int count_kind(const char *path, const char *name, int kind)
{
	struct hp_model *m = NULL;
	struct hp_open_opts o = { .quiet = true };
	const struct hp_module *mod;
	const struct hp_function *f;
	char err[256];
	int n = 0;

	if (hp_model_open_elf(path, &o, &m, err, sizeof(err)) < 0)
		return -1;
	f = hp_model_find(m, name, &mod, NULL);
	if (!f) {
		hp_model_free(m);
		return -1;
	}
	for (uint32_t b = 0; b < f->nblocks; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		for (uint32_t k = 0; k < bl->nsucc; k++)
			n += mod->succs[bl->succ_start + k].kind == kind;
	}
	hp_model_free(m);
	return n;
}

static void t_jump_table_is_resolved(void)
{
	const char *jt = tu_compile("switchy.c", "sw_jt2", "-O2 -fjump-tables");
	const char *nojt = tu_compile("switchy.c", "sw_nojt2", "-O2 -fno-jump-tables");

	REQUIRE(jt && nojt, "gcc failed");
	/* The table's 15 entries (14 cases and the default) are taken successors of the jump. */
	EXPECT(count_kind(jt, "sw_dense", HP_SUCC_INDIRECT) == 0, "sw_dense's table jump is unresolved");
	EXPECT(count_kind(jt, "sw_dense", HP_SUCC_TAKEN) >= 14, "too few table successors in sw_dense");
	EXPECT(count_kind(nojt, "sw_dense", HP_SUCC_INDIRECT) == 0, "indirect jump without jump tables");
	EXPECT(count_kind(nojt, "sw_dense", HP_SUCC_TAKEN) >= 5, "too few taken branches without jump tables");
	EXPECT(count_kind(nojt, "sw_dense", HP_SUCC_RETURN) >= 1, "no return");
}

static void t_calls_are_recorded(void)
{
	const char *p = tu_compile("loop.c", "loop_calls", "-O2");
	struct hp_model *m = NULL;
	struct hp_open_opts o = { .quiet = true };
	const struct hp_module *mod;
	const struct hp_function *f;
	char err[256], buf[128];
	bool classify = false, sum = false;

	REQUIRE(p, "gcc failed");
	REQUIRE(hp_model_open_elf(p, &o, &m, err, sizeof(err)) == 0, "%s", err);
	f = hp_model_find(m, "fx_work", &mod, NULL);
	REQUIRE(f, "fx_work not found");
	for (uint32_t k = 0; k < f->ncalls; k++) {
		const char *s = hp_model_symbolize(m, mod->calls[f->call_start + k].target, buf, sizeof(buf));
		classify |= s && !strcmp(s, "fx_classify");
		sum |= s && !strcmp(s, "fx_sum");
	}
	EXPECT(classify && sum, "fx_work's calls to fx_classify/fx_sum not found (%u calls)", f->ncalls);
	hp_model_free(m);
}

static void t_stripped_dynamic_uses_dynsym(void)
{
	const char *p = tu_compile("loop.c", "loop_dyn", "-O2 -rdynamic");
	struct hp_model *m = NULL;
	struct hp_open_opts o = { .quiet = true };
	const struct hp_module *mod;
	const struct hp_function *f;
	char cmd[600], err[256];

	REQUIRE(p, "gcc failed");
	snprintf(cmd, sizeof(cmd), "strip --strip-all '%s'", p);
	REQUIRE(system(cmd) == 0, "strip failed");
	snprintf(cmd, sizeof(cmd), "readelf -S '%s' | grep -q '\\.symtab'", p);
	REQUIRE(system(cmd) != 0, "strip left a .symtab");
	REQUIRE(hp_model_open_elf(p, &o, &m, err, sizeof(err)) == 0, "%s", err);
	f = hp_model_find(m, "fx_work", &mod, NULL);
	REQUIRE(f, "fx_work not found through .dynsym");
	EXPECT(!(f->flags & HP_FN_SIZE_ESTIMATED), "dynsym sizes are exact");
	const char *why = check_function_cfg(mod, f);
	EXPECT(!why, "%s", why);
	hp_model_free(m);
}

static void t_stripped_static_uses_eh_frame(void)
{
	const char *p = tu_compile("loop.c", "loop_static", "-O2 -static");
	struct hp_model *m = NULL;
	struct hp_open_opts o = { .quiet = true };
	char cmd[600], err[256];
	size_t estimated = 0;

	if (!p)
		SKIP("gcc -static does not link here (no libc.a)");
	snprintf(cmd, sizeof(cmd), "strip --strip-all '%s'", p);
	REQUIRE(system(cmd) == 0, "strip failed");
	REQUIRE(hp_model_open_elf(p, &o, &m, err, sizeof(err)) == 0, "%s", err);
	const struct hp_module *mod = &m->mods[0];
	REQUIRE(mod->nfuncs > 200, "only %zu functions from .eh_frame", mod->nfuncs);
	for (size_t i = 0; i < mod->nfuncs; i++) {
		const struct hp_function *f = &mod->funcs[i];
		char want[40];

		estimated += !!(f->flags & HP_FN_SIZE_ESTIMATED);
		snprintf(want, sizeof(want), "fde_%" PRIx64, f->addr);
		REQUIRE(!strcmp(f->name, want), "function %s at 0x%" PRIx64 " is not named by its FDE", f->name,
			f->addr);
		if (!(f->flags & HP_FN_UNDECODABLE)) {
			const char *why = check_function_cfg(mod, f);
			REQUIRE(!why, "%s", why);
		}
	}
	EXPECT(estimated == mod->nfuncs, "FDE functions must be flagged size-estimated");
	hp_model_free(m);
}

static void t_static_unstripped_matches_objdump(void)
{
	const char *p = tu_compile("loop.c", "loop_static2", "-O2 -static");

	if (!p)
		SKIP("gcc -static does not link here (no libc.a)");
	int n = cross_check(p);
	if (n >= 0)
		EXPECT(n > 500, "only %d functions", n);
}

static void expect_open_error(const char *path, const char *needle)
{
	struct hp_model *m = NULL;
	char err[512] = "";
	int r = hp_model_open_elf(path, NULL, &m, err, sizeof(err));

	EXPECT(r < 0 && !m, "%s: opened (r=%d)", path, r);
	EXPECT(err[0], "%s: no error message", path);
	EXPECT(!needle || strstr(err, needle), "%s: message '%s' lacks '%s'", path, err, needle);
	hp_model_free(m);
}

static bool write_file(const char *path, const void *buf, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	bool ok = fd >= 0 && write(fd, buf, n) == (ssize_t)n;

	if (fd >= 0)
		close(fd);
	return ok;
}

static uint8_t *read_whole(const char *path, size_t *n)
{
	off_t sz = tu_file_size(path);
	FILE *fp = fopen(path, "rb");
	uint8_t *b = sz > 0 ? malloc(sz) : NULL;

	if (!fp || !b || fread(b, 1, sz, fp) != (size_t)sz) {
		if (fp)
			fclose(fp);
		free(b);
		return NULL;
	}
	fclose(fp);
	*n = sz;
	return b;
}

static void t_bad_input_is_an_error(void)
{
	const char *good = tu_compile("loop.c", "loop_bad", "-O2");
	char p[400];
	size_t n;
	uint8_t *b;

	REQUIRE(good && (b = read_whole(good, &n)), "fixture");
	snprintf(p, sizeof(p), "%s/does-not-exist", tu_tmpdir());
	expect_open_error(p, "No such file");
	snprintf(p, sizeof(p), "%s/empty", tu_tmpdir());
	REQUIRE(write_file(p, "", 0), "write");
	expect_open_error(p, "empty");
	snprintf(p, sizeof(p), "%s/text", tu_tmpdir());
	REQUIRE(write_file(p, "#!/bin/sh\necho hello\n", 21), "write");
	expect_open_error(p, "not an ELF");
	snprintf(p, sizeof(p), "%s/trunc100", tu_tmpdir());
	REQUIRE(write_file(p, b, 100), "write");
	expect_open_error(p, NULL);
	snprintf(p, sizeof(p), "%s/trunchalf", tu_tmpdir());
	REQUIRE(write_file(p, b, n / 2), "write");
	expect_open_error(p, "truncated");
	/* Same file, another machine. */
	b[18] = 183; /* EM_AARCH64 */
	b[19] = 0;
	snprintf(p, sizeof(p), "%s/arm", tu_tmpdir());
	REQUIRE(write_file(p, b, n), "write");
	expect_open_error(p, "not an x86-64");
	expect_open_error(tu_tmpdir(), "not a regular file");
	free(b);
}

static void t_mutation_fuzz_never_crashes(void)
{
	const char *good = tu_compile("loop.c", "loop_fuzz", "-O2");
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	size_t n, runs = 0, errors = 0, opened = 0;
	uint8_t *b, *mut;
	char p[400];

	REQUIRE(good && (b = read_whole(good, &n)), "fixture");
	mut = malloc(n);
	snprintf(p, sizeof(p), "%s/fuzz", tu_tmpdir());
	for (int i = 0; i < 3000; i++) {
		size_t len = n;
		struct hp_model *m = NULL;
		char err[512] = "";

#define NEXT() (seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17, seed)
		memcpy(mut, b, n);
		int flips = 1 + NEXT() % 8;
		for (int k = 0; k < flips; k++) {
			size_t pos;
			/* Aim half the flips at the headers, where parsing decides. */
			if (NEXT() % 2)
				pos = NEXT() % 64;
			else
				pos = NEXT() % n;
			mut[pos] = (uint8_t)NEXT();
		}
		if (NEXT() % 8 == 0)
			len = NEXT() % n;
		if (!write_file(p, mut, len))
			break;
		struct hp_open_opts q = { .quiet = true };
		int r = hp_model_open_elf(p, &q, &m, err, sizeof(err));
		if (r < 0) {
			errors++;
			EXPECT(err[0] && !m, "run %d: error %d without a message", i, r);
		} else {
			opened++;
			/* Use what was opened, as a caller would. */
			for (size_t k = 0; k < m->mods[0].nfuncs && k < 8; k++) {
				struct hp_insn *ins = NULL;
				const struct hp_function *f = &m->mods[0].funcs[k];
				int c = hp_function_disassemble(m, &m->mods[0], f, &ins, err, sizeof(err));
				if (c >= 0)
					free(ins);
				hp_model_lookup(m, f->addr, NULL);
			}
			hp_model_free(m);
		}
		runs++;
	}
	free(mut);
	free(b);
	EXPECT(runs == 3000, "only %zu of 3000 runs completed", runs);
	EXPECT(errors > 0 && opened > 0, "fuzz not exercising both paths: %zu errors, %zu opened", errors, opened);
	printf("# fuzz: %zu runs, %zu rejected with a message, %zu opened\n", runs, errors, opened);
}

int main(void)
{
	if (!tu_tmpdir()[0]) {
		printf("FAIL - setup: no temporary directory\n");
		return 1;
	}
	RUN(t_loop_O2_matches_objdump);
	RUN(t_loop_O0_matches_objdump);
	RUN(t_switch_no_jump_tables_matches_objdump);
	RUN(t_switch_jump_tables_matches_objdump);
	RUN(t_jump_table_is_resolved);
	RUN(t_calls_are_recorded);
	RUN(t_stripped_dynamic_uses_dynsym);
	RUN(t_stripped_static_uses_eh_frame);
	RUN(t_static_unstripped_matches_objdump);
	RUN(t_bad_input_is_an_error);
	RUN(t_mutation_fuzz_never_crashes);
	tu_cleanup();
	TEST_EXIT();
}
