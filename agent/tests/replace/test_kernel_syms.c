// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel target's view of /proc/kallsyms (replace/kernel_syms.h): on the
 * kallsyms recorded in the kernel lane's guest (tests/fixtures/kallsyms-6.1,
 * two modules) every module's base must be what a plain scan of the same
 * lines finds (its lowest t/T symbol), vmlinux's _text and __fentry__ too;
 * /proc/modules' key ignores reference counts and nothing else; and on this
 * machine's live kernel the process's view answers as a fresh scan does,
 * reading /proc/kallsyms once for any number of lookups.
 *
 * Then a kernel plan installed on another boot or host of its build, where
 * KASLR and the module loader put vmlinux and the plan's module elsewhere, each
 * by its own distance: a module's extent from /proc/modules; a plan of a
 * module whose copy reaches vmlinux is installed only where vmlinux moved by
 * the module's distance (else refused, not installed with calls into the wrong
 * code: replace/install.h, hp_iplan_kernel_moved); and the copy's position map
 * moves with the members (plan/kernel_map.c, hp_plan_kernel_map_rebase).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hotpath_uapi.h"
#include "plan/plan.h"
#include "replace/install.h"
#include "replace/kernel_syms.h"
#include "test_util.h"

/* The recorded kallsyms followed by extra lines, as one string. */
static char *recorded(const char *extra)
{
	return tu_recorded_kallsyms(extra, NULL);
}

/* A plain scan, the way the target looked symbols up before the view: the
 * address of vmlinux's symbol name, or (name NULL) module mod's lowest text
 * symbol. */
static uint64_t scan(const char *text, const char *name, const char *mod)
{
	FILE *fp = fmemopen((void *)text, strlen(text), "r");
	char line[512];
	uint64_t best = 0;
	while (fp && fgets(line, sizeof(line), fp)) {
		char type, sym[256], m[256] = "";
		unsigned long long a;
		int n = sscanf(line, "%llx %c %255s [%255[^]]]", &a, &type, sym, m);
		if (n < 3 || !a || (mod ? n != 4 || strcmp(m, mod) : n == 4))
			continue;
		if (!name && (type == 't' || type == 'T') && (!best || a < best))
			best = a;
		else if (name && !strcmp(sym, name)) {
			best = a;
			break;
		}
	}
	if (fp)
		fclose(fp);
	return best;
}

static void t_recorded_kallsyms_as_a_scan_finds_it(void)
{
	char *text = recorded(
		"ffffffffa3a6b2c0 T __fentry__\n"
		"ffffffffc0300000 t late_fn\t[late]\n"
		"ffffffffc02ff000 d late_data\t[late]\n"
		"0000000000000000 t zero_fn\t[zeroed]\n"
		"garbage line\n"
		"ffffffffc0400000 t bad_mod\t[unclosed\n");
	REQUIRE(text, "cannot read the recorded kallsyms");
	FILE *fp = fmemopen(text, strlen(text), "r");
	struct hp_ksyms_view v = { 0 };
	REQUIRE(hp_ksyms_view_read(&v, fp) == 0, "read failed");
	fclose(fp);
	EXPECT(v.text == 0xffffffffa3800000ull && v.text == scan(text, "_text", NULL), "_text 0x%llx",
	       (unsigned long long)v.text);
	EXPECT(v.fentry == 0xffffffffa3a6b2c0ull && v.fentry == scan(text, "__fentry__", NULL), "__fentry__ 0x%llx",
	       (unsigned long long)v.fentry);
	const char *mods[] = { "hotpath_lane", "failover", "late" };
	for (size_t i = 0; i < 3; i++) {
		uint64_t want = scan(text, NULL, mods[i]), got = hp_ksyms_view_module(&v, mods[i]);
		EXPECT(want && got == want, "%s: view 0x%llx, scan 0x%llx", mods[i], (unsigned long long)got,
		       (unsigned long long)want);
	}
	/* The lane module's base as the recording's model places it (test_kallsyms.c). */
	EXPECT(hp_ksyms_view_module(&v, "hotpath_lane") == 0xffffffffc024d000ull, "hotpath_lane's base");
	EXPECT(hp_ksyms_view_module(&v, "late") == 0xffffffffc0300000ull, "data does not place a module");
	EXPECT(!hp_ksyms_view_module(&v, "zeroed") && !hp_ksyms_view_module(&v, "unclosed") &&
		       !hp_ksyms_view_module(&v, "absent") && !hp_ksyms_view_module(&v, NULL),
	       "zero addresses, broken lines and absent modules place nothing");
	EXPECT(v.nmods == 3, "%zu modules", v.nmods);
	hp_ksyms_view_free(&v);
	free(text);
}

static char *key_of(const char *modules)
{
	char *k = NULL;
	FILE *fp = fmemopen((void *)modules, strlen(modules), "r");
	if (!fp || hp_ksyms_modules_key(fp, &k) < 0)
		k = NULL;
	if (fp)
		fclose(fp);
	return k;
}

static void t_modules_key_ignores_reference_counts_only(void)
{
	char *a =
		     key_of("hotpath 45056 0 - Live 0xffffffffc0280000 (OE)\n"
			    "hotpath_lane 16384 0 - Live 0xffffffffc024d000 (OE)\n"),
	     *used =
		     key_of("hotpath 45056 1 - Live 0xffffffffc0280000 (OE)\n"
			    "hotpath_lane 16384 2 hotpath, Live 0xffffffffc024d000 (OE)\n"),
	     *moved =
		     key_of("hotpath 45056 0 - Live 0xffffffffc0290000 (OE)\n"
			    "hotpath_lane 16384 0 - Live 0xffffffffc024d000 (OE)\n"),
	     *loading =
		     key_of("hotpath 45056 0 - Loading 0xffffffffc0280000 (OE)\n"
			    "hotpath_lane 16384 0 - Live 0xffffffffc024d000 (OE)\n"),
	     *gone = key_of("hotpath_lane 16384 0 - Live 0xffffffffc024d000 (OE)\n"), *none = key_of("");
	REQUIRE(a && used && moved && loading && gone && none, "key failed");
	EXPECT(!strcmp(a, used), "reference counts and users changed the key");
	EXPECT(strcmp(a, moved), "a module at another address kept the key");
	EXPECT(strcmp(a, loading), "a module still loading kept the key");
	EXPECT(strcmp(a, gone), "an unloaded module kept the key");
	EXPECT(!*none, "no modules: an empty key");
	free(a), free(used), free(moved), free(loading), free(gone), free(none);
}

static char *slurp_kallsyms(void)
{
	FILE *in = fopen("/proc/kallsyms", "re");
	char *text = NULL;
	size_t len = 0;
	if (!in)
		return NULL;
	FILE *mem = open_memstream(&text, &len);
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		fwrite(buf, 1, n, mem);
	fclose(in);
	fclose(mem);
	return text;
}

static void t_live_view_read_once(void)
{
	char *text = slurp_kallsyms();
	if (!text || !scan(text, "_text", NULL)) {
		free(text);
		SKIP("/proc/kallsyms shows no addresses here (kptr_restrict, or not root)");
	}
	unsigned r0 = hp_ksyms_live_reads();
	EXPECT(hp_ksyms_live_text() == scan(text, "_text", NULL), "_text");
	EXPECT(hp_ksyms_live_fentry() == scan(text, "__fentry__", NULL), "__fentry__");
	EXPECT(!hp_ksyms_live_module("hotpath_no_such_module"), "a module that is not loaded");
	for (int i = 0; i < 5; i++)
		EXPECT(hp_ksyms_live_text() == scan(text, "_text", NULL), "_text again");
	/* Each module /proc/modules lists, as a scan finds it. */
	FILE *fp = fopen("/proc/modules", "re");
	char line[1024], name[64];
	size_t checked = 0;
	while (fp && fgets(line, sizeof(line), fp) && checked < 8)
		if (sscanf(line, "%63s", name) == 1) {
			EXPECT(hp_ksyms_live_module(name) == scan(text, NULL, name), "module %s", name);
			checked++;
		}
	if (fp)
		fclose(fp);
	/* Unless the modules changed meanwhile (then it reads again), one read. */
	EXPECT(hp_ksyms_live_reads() - r0 >= 1, "no read at all");
	printf("# %u read(s) of /proc/kallsyms for %zu module and 7 vmlinux lookups\n", hp_ksyms_live_reads() - r0,
	       checked + 1);
	EXPECT(hp_ksyms_live_reads() - r0 == 1, "%u reads", hp_ksyms_live_reads() - r0);
	free(text);
}

static int span_of(const char *modules, const char *name, uint64_t *addr, uint64_t *size)
{
	FILE *fp = fmemopen((void *)modules, strlen(modules), "r");
	int r = fp ? hp_ksyms_modules_span(fp, name, addr, size) : -ENOMEM;
	if (fp)
		fclose(fp);
	return r;
}

static void t_module_span(void)
{
	const char *mods =
		"hotpath 61440 0 - Live 0xffffffffc0a10000 (OE)\n"
		"hotpath_lane 16384 1 hotpath, Live 0xffffffffc0a00000 (O)\n"
		"virtio_net 61440 0 - Loading 0x0000000000000000\n";
	uint64_t a = 0, n = 0;
	EXPECT(span_of(mods, "hotpath_lane", &a, &n) == 0 && a == 0xffffffffc0a00000 && n == 16384,
	       "hotpath_lane: 0x%" PRIx64 " %" PRIu64, a, n);
	EXPECT(span_of(mods, "hotpath", &a, &n) == 0 && a == 0xffffffffc0a10000 && n == 61440,
	       "hotpath: 0x%" PRIx64 " %" PRIu64, a, n);
	EXPECT(span_of(mods, "virtio_net", &a, &n) == -ENOENT, "a module without an address has no extent");
	EXPECT(span_of(mods, "hotpath_lan", &a, &n) == -ENOENT, "a prefix of a name is not the module");
	EXPECT(span_of("", "hotpath", &a, &n) == -ENOENT, "no modules");
}

/* lane_mix planned on one boot: hotpath_lane's text from 0xffffffffc0a00010
 * (its core allocation from ...c0a00000), vmlinux's _text at ...81000000; the
 * copy calls lane_here (in the module) and returns through vmlinux's
 * __x86_return_thunk. */
#define MOD0  0xffffffffc0a00000ull
#define TEXT0 0xffffffff81000000ull
static struct hp_imember lane_mix = { .name = "lane_mix", .module = "hotpath_lane", .addr = MOD0 + 0x140 };
static struct hp_imember ktime_get = { .name = "ktime_get", .module = "vmlinux", .addr = TEXT0 + 0x1d2e40 };
static struct hp_reloc mix_relocs[] = {
	{ .offset = 0x11, .target = MOD0 + 0x10, .kind = HP_RELOC_REL32 },         /* call lane_here */
	{ .offset = 0x2a, .target = MOD0 + 0x2200, .kind = HP_RELOC_REL32 },       /* its data (RIP-relative) */
	{ .offset = 0x40, .target = 0xffffffffc1000000, .kind = HP_RELOC_CODE64 }, /* in the copy itself */
	{ .offset = 0x52, .target = TEXT0 + 0x1404f00, .kind = HP_RELOC_REL32 },   /* jmp __x86_return_thunk */
};

static struct hp_iplan mix_plan(uint64_t kernel_text, size_t nrelocs)
{
	return (struct hp_iplan){ .kind = "kernel",
				  .module = "hotpath_lane",
				  .module_base = MOD0 + 0x10,
				  .kernel_text = kernel_text,
				  .members = &lane_mix,
				  .nmembers = 1,
				  .relocs = mix_relocs,
				  .nrelocs = nrelocs };
}

static void t_kernel_plan_on_another_boot(void)
{
	char err[512] = "";
	const int64_t dm = 0x37000;    /* the module, another boot */
	const int64_t dv = 0x1e000000; /* vmlinux, another boot (KASLR: 2 MiB steps) */
	const uint64_t size = 16384;
	struct hp_iplan p = mix_plan(TEXT0, 4);

	EXPECT(hp_iplan_kernel_moved(&p, 0, TEXT0, MOD0, size, err, sizeof(err)) == 0, "the same boot: %s", err);
	EXPECT(hp_iplan_kernel_moved(&p, dm, TEXT0 + dm, MOD0 + dm, size, err, sizeof(err)) == 0,
	       "vmlinux moved by the module's distance: %s", err);
	err[0] = 0;
	EXPECT(hp_iplan_kernel_moved(&p, dm, TEXT0 + dv, MOD0 + dm, size, err, sizeof(err)) == -ESTALE,
	       "a copy reaching vmlinux, which moved by another distance, was not refused");
	EXPECT(strstr(err, "0xffffffff82404f00") && strstr(err, "vmlinux moved by another distance") &&
		       strstr(err, "plan again on this kernel"),
	       "the reason: %s", err);
	/* The module's own code and data only (not the thunk): placed by its distance. */
	p = mix_plan(TEXT0, 3);
	EXPECT(hp_iplan_kernel_moved(&p, dm, TEXT0 + dv, MOD0 + dm, size, err, sizeof(err)) == 0,
	       "a copy reaching only its module: %s", err);
	/* Its module's extent unknown: nothing is known to be inside it. */
	EXPECT(hp_iplan_kernel_moved(&p, dm, TEXT0 + dv, 0, 0, err, sizeof(err)) == -ESTALE,
	       "the module's extent unknown");
	/* A plan that does not say where vmlinux was (an older agent's). */
	p = mix_plan(0, 4);
	err[0] = 0;
	EXPECT(hp_iplan_kernel_moved(&p, dm, TEXT0 + dm, MOD0 + dm, size, err, sizeof(err)) == -ESTALE &&
		       strstr(err, "does not say where vmlinux was"),
	       "no kernel_text: %s", err);
	EXPECT(hp_iplan_kernel_moved(&p, 0, TEXT0, MOD0, size, err, sizeof(err)) == -ESTALE,
	       "no kernel_text, even where the module did not move: vmlinux may have");
	/* A vmlinux callee that joined the module's group: refused where vmlinux moved apart. */
	struct hp_imember two[2] = { lane_mix, ktime_get };
	p = mix_plan(TEXT0, 3);
	p.members = two;
	p.nmembers = 2;
	err[0] = 0;
	EXPECT(hp_iplan_kernel_moved(&p, dm, TEXT0 + dv, MOD0 + dm, size, err, sizeof(err)) == -ESTALE &&
		       strstr(err, "member ktime_get"),
	       "a vmlinux member: %s", err);
	EXPECT(hp_iplan_kernel_moved(&p, dm, TEXT0 + dm, MOD0 + dm, size, err, sizeof(err)) == 0,
	       "a vmlinux member, vmlinux moved with the module: %s", err);
	/* A vmlinux plan: its module_base is _text, the delta vmlinux's own. */
	p = mix_plan(TEXT0, 4);
	p.module = "vmlinux";
	EXPECT(hp_iplan_kernel_moved(&p, dv, TEXT0 + dv, 0, 0, err, sizeof(err)) == 0, "a vmlinux plan: %s", err);
}

static void t_position_map_moves_with_the_members(void)
{
	enum {
		HEAD = sizeof(struct hotpath_map_head),
		SYM = sizeof(struct hotpath_map_sym),
		RUN = sizeof(struct hotpath_map_run)
	};
	static const char names[] = "lane_mix";
	struct hotpath_map_head h = { .magic = HOTPATH_MAP_MAGIC,
				      .version = HOTPATH_MAP_VERSION,
				      .code_to_map = 0x80,
				      .nsyms = 1,
				      .nruns = 2,
				      .strtab_len = sizeof(names) };
	struct hotpath_map_sym sy = { .off = 0, .size = 0x60, .name = 0 };
	struct hotpath_map_run runs[2] = {
		{ .off = 0, .len = 0x20, .orig = MOD0 + 0x140, .kind = HOTPATH_RUN_SAME },
		{ .off = 0x20, .len = 5, .orig = MOD0 + 0x171, .kind = HOTPATH_RUN_STATE_AT },
	};
	uint8_t map[HEAD + SYM + 2 * RUN + sizeof(names)], was[sizeof(map)];
	memcpy(map, &h, HEAD);
	memcpy(map + HEAD, &sy, SYM);
	memcpy(map + HEAD + SYM, runs, sizeof(runs));
	memcpy(map + HEAD + SYM + sizeof(runs), names, sizeof(names));
	memcpy(was, map, sizeof(map));

	EXPECT(hp_plan_kernel_map_rebase(map, sizeof(map), 0x37000) == 0, "rebase");
	struct hotpath_map_run got[2];
	memcpy(got, map + HEAD + SYM, sizeof(got));
	EXPECT(got[0].orig == MOD0 + 0x37140 && got[1].orig == MOD0 + 0x37171, "origs 0x%llx 0x%llx",
	       (unsigned long long)got[0].orig, (unsigned long long)got[1].orig);
	EXPECT(got[0].off == 0 && got[0].len == 0x20 && got[1].kind == HOTPATH_RUN_STATE_AT, "a run's other fields");
	EXPECT(!memcmp(map, was, HEAD + SYM) && !memcmp(map + HEAD + SYM + sizeof(runs), names, sizeof(names)),
	       "the head, the symbol or the names changed");
	EXPECT(hp_plan_kernel_map_rebase(map, sizeof(map), -0x37000) == 0 && !memcmp(map, was, sizeof(map)),
	       "moved back, the map is the plan's again");
	EXPECT(hp_plan_kernel_map_rebase(map, sizeof(map) - 1, 0x37000) == -EINVAL && !memcmp(map, was, sizeof(map)),
	       "a map of another length than its head says was rebased");
	map[0] ^= 0xff;
	EXPECT(hp_plan_kernel_map_rebase(map, sizeof(map), 0x37000) == -EINVAL, "a map with a wrong magic");
}

int main(void)
{
	RUN(t_recorded_kallsyms_as_a_scan_finds_it);
	RUN(t_modules_key_ignores_reference_counts_only);
	RUN(t_live_view_read_once);
	RUN(t_module_span);
	RUN(t_kernel_plan_on_another_boot);
	RUN(t_position_map_moves_with_the_members);
	TEST_EXIT();
}
