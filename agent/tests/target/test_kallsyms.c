// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel's symbols as functions, on a kernel with loaded modules. This
 * machine's kernel has none, so the module path is checked on a /proc/kallsyms
 * and /sys/module/NAME/sections recorded in the kernel lane's guest (Debian
 * 6.1, tests/fixtures/kallsyms-6.1): module functions, their bounds at
 * section starts and non-text symbols, the module_exit() alias, and the
 * loader's zero fill trimmed from the real bytes of a module's last function.
 * The kernel lane itself checks the same on the live guest.
 */
#include <errno.h>
#include <string.h>

#include "harness.h"
#include "model/model.h"
#include "target/kallsyms.h"
#include "test_util.h"

#define LANE_MOD     0xffffffffc024d000ull /* hotpath_lane's .text in the recording */
#define FAILOVER_MOD 0xffffffffc0274000ull

struct built {
	struct hp_model *m;
	struct hp_kallsyms ks;
	int sections; /* modules whose sections were read */
};

/* Build a model from the recorded kallsyms followed by extra lines; with the
 * recorded /sys/module sections unless without_sections. */
static int build(struct built *b, const char *extra, bool without_sections, char *err, size_t errlen)
{
	char path[256], *text;
	size_t len = 0;
	FILE *in;
	int r;

	memset(b, 0, sizeof(*b));
	if (!(text = tu_recorded_kallsyms(extra, &len))) {
		snprintf(err, errlen, "cannot open the recorded kallsyms: %s", strerror(errno));
		return -errno;
	}
	in = fmemopen(text, len, "r");
	b->m = hp_model_new(HP_TARGET_KERNEL);
	r = hp_kallsyms_read(b->m, in, &b->ks, err, errlen);
	fclose(in);
	free(text);
	if (r == 0 && !without_sections) {
		snprintf(path, sizeof(path), "%s/kallsyms-6.1/sys-module", tu_fixtures());
		b->sections = hp_kallsyms_read_sections(&b->ks, path);
	}
	if (r == 0)
		r = hp_kallsyms_build(b->m, &b->ks, err, errlen);
	if (r == 0)
		r = hp_model_build_index(b->m);
	return r;
}

static void unbuild(struct built *b)
{
	hp_kallsyms_free(&b->ks);
	hp_model_free(b->m);
}

static const struct hp_module *module(const struct hp_model *m, const char *name)
{
	for (size_t i = 0; i < m->nmods; i++)
		if (!strcmp(m->mods[i].name, name))
			return &m->mods[i];
	return NULL;
}

static const struct hp_function *function(const struct hp_module *mod, const char *name)
{
	for (size_t i = 0; mod && i < mod->nfuncs; i++)
		if (!strcmp(mod->funcs[i].name, name))
			return &mod->funcs[i];
	return NULL;
}

static void t_modules_in_kallsyms_order(void)
{
	struct built b;
	char err[256];

	REQUIRE(build(&b, NULL, false, err, sizeof(err)) == 0, "build failed: %s", err);
	EXPECT(b.m->nmods == 3, "%zu modules, expected vmlinux, hotpath_lane, failover", b.m->nmods);
	EXPECT(b.m->nmods >= 3 && !strcmp(b.m->mods[0].name, "vmlinux") && !strcmp(b.m->mods[1].name, "hotpath_lane") &&
		       !strcmp(b.m->mods[2].name, "failover"),
	       "modules out of order");
	EXPECT(b.sections == 2, "sections read for %d modules, expected 2", b.sections);
	const struct hp_module *lane = module(b.m, "hotpath_lane");
	REQUIRE(lane, "no hotpath_lane");
	EXPECT(lane->base == LANE_MOD, "hotpath_lane base %#llx", (unsigned long long)lane->base);
	EXPECT(lane->nfuncs == 6, "hotpath_lane has %zu functions, expected 6", lane->nfuncs);
	unbuild(&b);
}

/* Between two text symbols of one section a function ends at the next one. */
static void t_module_functions_end_at_next_symbol(void)
{
	static const struct {
		const char *name;
		uint64_t addr;
		uint32_t size;
	} want[] = {
		{ "lane_open", LANE_MOD + 0x000, 0x20 },
		{ "lane_nap", LANE_MOD + 0x020, 0x10 },
		{ "lane_write", LANE_MOD + 0x030, 0xe0 },
		{ "lane_step", LANE_MOD + 0x110, 0x50 },
		/* the last function of .text: .exit.text (lane_exit) starts at +0x1c4 */
		{ "lane_read", LANE_MOD + 0x160, 0x64 },
	};
	struct built b;
	char err[256];

	REQUIRE(build(&b, NULL, false, err, sizeof(err)) == 0, "build failed: %s", err);
	const struct hp_module *lane = module(b.m, "hotpath_lane");
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct hp_function *f = function(lane, want[i].name);
		EXPECT(f, "%s missing", want[i].name);
		if (!f)
			continue;
		EXPECT(f->addr == want[i].addr && f->size == want[i].size,
		       "%s at %#llx size %#x, expected %#llx size %#x", want[i].name, (unsigned long long)f->addr,
		       f->size, (unsigned long long)want[i].addr, want[i].size);
		EXPECT(!(f->flags & HP_FN_SIZE_ESTIMATED), "%s flagged estimated", want[i].name);
	}
	unbuild(&b);
}

/* The last function stops at the next section (.note.gnu.build-id at +0x1000),
 * not a page later in the module's read-only data, as it used to. */
static void t_last_module_function_ends_at_next_section(void)
{
	struct built b;
	char err[256];

	REQUIRE(build(&b, NULL, false, err, sizeof(err)) == 0, "build failed: %s", err);
	const struct hp_function *f = function(module(b.m, "hotpath_lane"), "lane_exit");
	REQUIRE(f, "lane_exit missing");
	EXPECT(f->addr == LANE_MOD + 0x1c4, "lane_exit at %#llx", (unsigned long long)f->addr);
	EXPECT(f->size == 0x1000 - 0x1c4, "lane_exit size %#x, expected %#x (up to .note.gnu.build-id)", f->size,
	       0x1000 - 0x1c4);
	EXPECT(f->flags & HP_FN_SIZE_ESTIMATED, "the last function is not flagged estimated");
	/* failover: .text.unlikely (failover_slave_register.cold) then .exit.text */
	const struct hp_module *fo = module(b.m, "failover");
	const struct hp_function *cold = function(fo, "failover_slave_register.cold");
	const struct hp_function *unreg = function(fo, "failover_unregister");
	const struct hp_function *exitf = function(fo, "failover_exit");
	REQUIRE(cold && unreg && exitf, "failover functions missing");
	EXPECT(unreg->size == 0x75d - 0x6d2, "failover_unregister size %#x", unreg->size);
	EXPECT(exitf->size == 0x1000 - 0x75d, "failover_exit size %#x", exitf->size);
	unbuild(&b);
}

/* Without /sys/module (not root), the first non-text symbol above still
 * bounds the last function: hotpath_lane's _note_10 at +0x1024. */
static void t_last_module_function_without_sections(void)
{
	struct built b;
	char err[256];

	REQUIRE(build(&b, NULL, true, err, sizeof(err)) == 0, "build failed: %s", err);
	EXPECT(b.sections == 0, "sections read");
	const struct hp_function *f = function(module(b.m, "hotpath_lane"), "lane_exit");
	REQUIRE(f, "lane_exit missing");
	EXPECT(f->size == 0x1024 - 0x1c4, "lane_exit size %#x, expected %#x (up to _note_10)", f->size, 0x1024 - 0x1c4);
	unbuild(&b);
}

/* module_exit() adds cleanup_module as an alias: the function keeps its own
 * name, and the alias still finds it. */
static void t_module_exit_alias_keeps_own_name(void)
{
	struct built b;
	char err[256];
	const struct hp_module *mod = NULL;

	REQUIRE(build(&b, NULL, false, err, sizeof(err)) == 0, "build failed: %s", err);
	const struct hp_module *lane = module(b.m, "hotpath_lane");
	EXPECT(function(lane, "lane_exit"), "lane_exit is not a function name");
	EXPECT(!function(lane, "cleanup_module"), "cleanup_module named the function");
	const struct hp_function *f = hp_model_find(b.m, "hotpath_lane:cleanup_module", &mod, NULL);
	EXPECT(f && !strcmp(f->name, "lane_exit") && mod == lane,
	       "hotpath_lane:cleanup_module does not find lane_exit");
	EXPECT(function(module(b.m, "failover"), "failover_exit"), "failover_exit is not a function name");
	unbuild(&b);
}

/* JIT'd BPF programs and ftrace trampolines are not modules (these two lines
 * are not from the recording: the guest had none loaded). A module with no
 * non-text symbol above its last function bounds it one page on. */
static void t_transient_code_skipped_and_lone_module_bounded(void)
{
	static const char extra[] =
		"ffffffffc0400000 t bpf_prog_6deef7357e7b4530_sd_fw_ingress\t[bpf]\n"
		"ffffffffc0401000 t ftrace_trampoline\t[__builtin__ftrace]\n"
		"ffffffffc0500000 t lone_a\t[lone]\n"
		"ffffffffc0500040 t lone_b\t[lone]\n";
	struct built b;
	char err[256];

	REQUIRE(build(&b, extra, false, err, sizeof(err)) == 0, "build failed: %s", err);
	EXPECT(!module(b.m, "bpf") && !module(b.m, "__builtin__ftrace"), "transient code became a module");
	const struct hp_module *lone = module(b.m, "lone");
	REQUIRE(lone && lone->nfuncs == 2, "module lone missing or wrong");
	EXPECT(lone->funcs[0].size == 0x40, "lone_a size %#x", lone->funcs[0].size);
	EXPECT(lone->funcs[1].size == 4096 && (lone->funcs[1].flags & HP_FN_SIZE_ESTIMATED), "lone_b size %#x",
	       lone->funcs[1].size);
	unbuild(&b);
}

static void t_vmlinux_between_text_and_etext(void)
{
	struct built b;
	char err[256];

	REQUIRE(build(&b, NULL, false, err, sizeof(err)) == 0, "build failed: %s", err);
	const struct hp_module *vm = module(b.m, "vmlinux");
	const struct hp_function *vr = function(vm, "vfs_read"), *rt = function(vm, "__x86_return_thunk");
	REQUIRE(vr && rt, "vfs_read or __x86_return_thunk missing");
	EXPECT(vr->size == 0xffffffffa3b67550ull - 0xffffffffa3b669e0ull, "vfs_read size %#x", vr->size);
	EXPECT(rt->addr + rt->size == 0xffffffffa4601d32ull, "__x86_return_thunk does not end at _etext");
	EXPECT(b.ks.nret == 1 && b.ks.ret_thunks[0] == rt->addr, "return thunk not recorded");
	EXPECT(function(vm, "_text") || function(vm, "startup_64"), "no function at _text");
	EXPECT(!function(vm, "_stext") && !function(vm, "_text"), "a section marker named a function");
	unbuild(&b);
}

/* The symbols come out sorted by (module, address) whatever the file's order,
 * with aliases at one address in the file's order: vmlinux in order then a
 * module out of order (the parse keeps vmlinux's run and sorts the rest),
 * and a module line before vmlinux's (the whole is sorted). Addresses in
 * upper case and with more than 16 digits read as strtoull reads them. */
static void t_symbols_sorted_whatever_the_order(void)
{
	static const char *const files[] = {
		"ffffffff81000000 T _text\nffffffff81000100 T alias_b\nffffffff81000100 T alias_a\n"
		"ffffffff81000200 t f2\nffffffff82000000 T _etext\n"
		"ffffffffc0000080 t m_c\t[m]\nffffffffc0000000 t m_a\t[m]\nffffffffc0000040 t m_b\t[m]\n",
		"ffffffffc0000080 t m_c\t[m]\nffffffff81000000 T _text\nffffffff81000100 T alias_b\n"
		"ffffffff81000100 T alias_a\nffffffffc0000000 t m_a\t[m]\nffffffff81000200 t f2\n"
		"FFFFFFFF82000000 T _etext\nffffffffc0000040 t m_b\t[m]\n0000ffffffffc0001000 t m_d\t[m]\n",
	};
	for (size_t fi = 0; fi < 2; fi++) {
		struct hp_kallsyms ks = { 0 };
		struct hp_model *m = hp_model_new(HP_TARGET_KERNEL);
		char err[256] = "";
		FILE *fp = fmemopen((void *)files[fi], strlen(files[fi]), "r");
		REQUIRE(m && fp, "setup");
		int r = hp_kallsyms_read(m, fp, &ks, err, sizeof(err));
		fclose(fp);
		REQUIRE(r == 0, "file %zu: %s", fi, err);
		static const char *const want[] = { "_text", "alias_b", "alias_a", "f2", "_etext",
						    "m_a",   "m_b",     "m_c",     "m_d" };
		size_t nwant = fi ? 9 : 8;
		EXPECT(ks.n == nwant, "file %zu: %zu symbols", fi, ks.n);
		for (size_t i = 0; i < ks.n && i < nwant; i++)
			EXPECT(ks.syms[i].name && !strcmp(ks.syms[i].name, want[i]),
			       "file %zu: symbol %zu is %s, not %s", fi, i, ks.syms[i].name ? ks.syms[i].name : "-",
			       want[i]);
		EXPECT(ks.text == 0xffffffff81000000ull && ks.etext == 0xffffffff82000000ull,
		       "file %zu: text %#lx-%#lx", fi, (unsigned long)ks.text, (unsigned long)ks.etext);
		hp_kallsyms_free(&ks);
		hp_model_free(m);
	}
}

static void t_kallsyms_without_addresses_refused(void)
{
	static const char zeroed[] =
		"0000000000000000 T _text\n0000000000000000 T vfs_read\n0000000000000000 T _etext\n";
	struct hp_kallsyms ks = { 0 };
	struct hp_model *m = hp_model_new(HP_TARGET_KERNEL);
	char err[256] = "";
	FILE *fp = fmemopen((void *)zeroed, sizeof(zeroed) - 1, "r");

	REQUIRE(m && fp, "setup");
	int r = hp_kallsyms_read(m, fp, &ks, err, sizeof(err));
	fclose(fp);
	EXPECT(r == -EPERM, "zeroed kallsyms gave %d", r);
	EXPECT(strstr(err, "kptr_restrict"), "reason does not name kptr_restrict: %s", err);
	hp_kallsyms_free(&ks);
	hp_model_free(m);
}

/* The loader's fill after a module function, on the real bytes of lane_exit
 * (read from the guest: a mov whose displacement ends in zero bytes, then a
 * jmp to proc_remove) and on edge cases. */
static void t_trim_fill(void)
{
	uint8_t exitf[64] = { 0x48, 0x8b, 0x3d, 0xf5, 0x21, 0x00, 0x00, 0xe9, 0xb0, 0x05, 0x9c, 0xe3 };
	uint8_t jmp0[16] = { 0xe9, 0x00, 0x01, 0x00, 0x00 }; /* jmp whose rel32 ends in zeros */
	uint8_t call0[5] = { 0xe8, 0x00, 0x00, 0x00, 0x00 }; /* the function's own last bytes */
	uint8_t int3s[4] = { 0xc3, 0xcc, 0xcc, 0xcc };
	uint8_t odd[4] = { 0xc3, 0x00, 0x00, 0x00 };
	uint8_t zeros[8] = { 0 };
	uint8_t ret[1] = { 0xc3 };
	uint64_t a = LANE_MOD + 0x1c4;

	EXPECT(hp_ktext_trim_fill(exitf, sizeof(exitf), a, true) == 12, "lane_exit trimmed to %u, expected 12",
	       hp_ktext_trim_fill(exitf, sizeof(exitf), a, true));
	EXPECT(hp_ktext_trim_fill(jmp0, sizeof(jmp0), a, false) == 5, "jmp trimmed to %u",
	       hp_ktext_trim_fill(jmp0, sizeof(jmp0), a, false));
	EXPECT(hp_ktext_trim_fill(call0, sizeof(call0), a, false) == 5, "a call's zero displacement was cut");
	EXPECT(hp_ktext_trim_fill(int3s, sizeof(int3s), a, false) == 4, "int3 trimmed without int3_fill");
	EXPECT(hp_ktext_trim_fill(int3s, sizeof(int3s), a, true) == 1, "int3 fill kept with int3_fill");
	EXPECT(hp_ktext_trim_fill(odd, sizeof(odd), a, false) == 1, "odd zero run trimmed to %u",
	       hp_ktext_trim_fill(odd, sizeof(odd), a, false));
	EXPECT(hp_ktext_trim_fill(zeros, sizeof(zeros), a, true) == sizeof(zeros), "all-zero function changed");
	EXPECT(hp_ktext_trim_fill(ret, sizeof(ret), a, true) == 1, "ret changed");
}

/* A static call's key (__SCK__X, data) and trampoline (__SCT__X, text)
 * are paired by name within one module or vmlinux: a key of a module names
 * no trampoline of vmlinux, a key without a trampoline is left out, and a
 * trampoline name listed twice is not trusted. */
static void t_static_call_keys_paired_with_trampolines_by_name(void)
{
	static const char extra[] =
		"ffffffffa4e01000 D __SCK__tp_func_sched_switch\n"
		"ffffffffa3a01000 T __SCT__tp_func_sched_switch\n"
		"ffffffffa4e01010 d __SCK__pv_sched_clock\n"
		"ffffffffa3a01008 t __SCT__pv_sched_clock\n"
		"ffffffffa4e01020 D __SCK__no_trampoline\n"
		"ffffffffc0250400 d __SCK__lane_sc\t[hotpath_lane]\n"
		"ffffffffc024d800 T __SCT__lane_sc\t[hotpath_lane]\n"
		"ffffffffc0276400 d __SCK__pv_sched_clock\t[failover]\n"
		"ffffffffa4e01030 D __SCK__twice\n"
		"ffffffffa3a01010 T __SCT__twice\n"
		"ffffffffa3a01018 T __SCT__twice\n";
	struct hp_static_call_tramp *v = NULL;
	char err[256];
	struct built b;

	REQUIRE(build(&b, extra, false, err, sizeof(err)) == 0, "build: %s", err);
	long n = hp_kallsyms_static_call_tramps(&b.ks, &v);
	REQUIRE(n == 3 && v, "%ld pairs, expected 3", n);
	EXPECT(v[0].key == 0xffffffffa4e01000ull && v[0].tramp == 0xffffffffa3a01000ull, "sched_switch: %llx -> %llx",
	       (unsigned long long)v[0].key, (unsigned long long)v[0].tramp);
	EXPECT(v[1].key == 0xffffffffa4e01010ull && v[1].tramp == 0xffffffffa3a01008ull,
	       "a static (d/t) key and trampoline: %llx -> %llx", (unsigned long long)v[1].key,
	       (unsigned long long)v[1].tramp);
	EXPECT(v[2].key == 0xffffffffc0250400ull && v[2].tramp == 0xffffffffc024d800ull,
	       "the module's own key: %llx -> %llx", (unsigned long long)v[2].key, (unsigned long long)v[2].tramp);
	free(v);
	unbuild(&b);

	/* No key listed (a kernel without CONFIG_KALLSYMS_ALL): no pairs. */
	REQUIRE(build(&b, "ffffffffa3a01000 T __SCT__tp_func_sched_switch\n", false, err, sizeof(err)) == 0,
		"build: %s", err);
	EXPECT(hp_kallsyms_static_call_tramps(&b.ks, &v) == 0 && !v, "pairs without keys");
	unbuild(&b);
}

int main(void)
{
	RUN(t_modules_in_kallsyms_order);
	RUN(t_module_functions_end_at_next_symbol);
	RUN(t_last_module_function_ends_at_next_section);
	RUN(t_last_module_function_without_sections);
	RUN(t_module_exit_alias_keeps_own_name);
	RUN(t_transient_code_skipped_and_lone_module_bounded);
	RUN(t_vmlinux_between_text_and_etext);
	RUN(t_kallsyms_without_addresses_refused);
	RUN(t_symbols_sorted_whatever_the_order);
	RUN(t_trim_fill);
	RUN(t_static_call_keys_paired_with_trampolines_by_name);
	TEST_EXIT();
}
