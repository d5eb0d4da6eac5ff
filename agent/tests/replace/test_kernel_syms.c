// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel target's view of /proc/kallsyms (replace/kernel_syms.h): on the
 * kallsyms recorded in the kernel lane's guest (tests/fixtures/kallsyms-6.1,
 * two modules) every module's base must be what a plain scan of the same
 * lines finds (its lowest t/T symbol), vmlinux's _text and __fentry__ too;
 * /proc/modules' key ignores reference counts and nothing else; and on this
 * machine's live kernel the process's view answers as a fresh scan does,
 * reading /proc/kallsyms once for any number of lookups.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
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

int main(void)
{
	RUN(t_recorded_kallsyms_as_a_scan_finds_it);
	RUN(t_modules_key_ignores_reference_counts_only);
	RUN(t_live_view_read_once);
	TEST_EXIT();
}
