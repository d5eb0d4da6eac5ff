// SPDX-License-Identifier: Apache-2.0
/*
 * The code model of this machine's live kernel: symbols from /proc/kallsyms,
 * text read through BPF, every function's blocks and successors checked for
 * consistency, and vfs_read looked at closely.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "objdump.h"
#include "model/model.h"
#include "target/kernel_cache.h"
#include "target/target.h"
#include "test_common.h"

static struct hp_model *km;
static char kerr[512];
static int kret;
/* The noreturn cache the whole parse writes (kernel_cache.h): a folder of
 * the test's own, so the fast path is tested without it ("") and with it. */
static char cache_dir[] = "/tmp/hotpath-kcache-XXXXXX";

static void t_kernel_model_opens(void)
{
	struct hp_open_opts o = { .quiet = true, .kernel_cache_dir = cache_dir };

	kret = hp_model_open_kernel(&o, &km, kerr, sizeof(kerr));
	REQUIRE(kret == 0 && km, "open failed: %d %s", kret, kerr);
	REQUIRE(km->nmods >= 1 && !strcmp(km->mods[0].name, "vmlinux"), "first module is not vmlinux");
	EXPECT(km->release[0], "no kernel release");
	EXPECT(strlen(km->build_id) == 40, "build id '%s' is not 20 bytes of hex", km->build_id);
	EXPECT(km->mods[0].base == km->mods[0].funcs[0].addr || km->mods[0].base < km->mods[0].funcs[0].addr,
	       "vmlinux base after its first function");
}

static void t_kernel_has_many_functions(void)
{
	struct hp_model_stats st;

	REQUIRE(km, "no model");
	hp_model_stats(km, &st);
	EXPECT(st.functions > 50000, "only %zu functions", st.functions);
	EXPECT(st.blocks > st.functions, "only %zu blocks", st.blocks);
	EXPECT(st.unreadable == 0, "%zu unreadable functions", st.unreadable);
	/* A handful of hand-written functions hold data; most decode. */
	EXPECT(st.undecodable < st.functions / 1000, "%zu undecodable functions", st.undecodable);
}

static void t_kernel_functions_sorted_nonoverlapping(void)
{
	REQUIRE(km, "no model");
	for (size_t i = 0; i < km->nmods; i++) {
		const struct hp_module *mod = &km->mods[i];

		for (size_t j = 0; j + 1 < mod->nfuncs; j++)
			REQUIRE(mod->funcs[j].addr + mod->funcs[j].size <= mod->funcs[j + 1].addr, "%s overlaps %s",
				mod->funcs[j].name, mod->funcs[j + 1].name);
		for (size_t j = 0; j < mod->nfuncs; j++)
			REQUIRE(strncmp(mod->funcs[j].name, "__pfx_", 6), "padding symbol %s is a function",
				mod->funcs[j].name);
	}
}

static void t_vfs_read_blocks_tile(void)
{
	const struct hp_module *mod;
	const struct hp_function *f;
	const char *why;

	REQUIRE(km, "no model");
	f = hp_model_find(km, "vfs_read", &mod, NULL);
	REQUIRE(f, "vfs_read not found");
	REQUIRE(!(f->flags & (HP_FN_UNDECODABLE | HP_FN_UNREADABLE)), "vfs_read flags 0x%x", f->flags);
	REQUIRE(f->nblocks > 3, "vfs_read has %u blocks", f->nblocks);
	EXPECT(mod->blocks[f->block_start].offset == 0, "first block not at offset 0");
	why = check_function_cfg(mod, f);
	EXPECT(!why, "%s", why);
}

static void t_all_functions_tile_and_targets_are_block_starts(void)
{
	size_t checked = 0;

	REQUIRE(km, "no model");
	for (size_t i = 0; i < km->nmods; i++) {
		const struct hp_module *mod = &km->mods[i];

		for (size_t j = 0; j < mod->nfuncs; j++) {
			const struct hp_function *f = &mod->funcs[j];
			const char *why;

			if (f->flags & (HP_FN_UNDECODABLE | HP_FN_UNREADABLE))
				continue;
			why = check_function_cfg(mod, f);
			REQUIRE(!why, "%s", why);
			checked++;
		}
	}
	EXPECT(checked > 50000, "only %zu functions checked", checked);
}

static void t_undecodable_functions_still_tile(void)
{
	size_t n = 0;

	REQUIRE(km, "no model");
	for (size_t i = 0; i < km->nmods; i++) {
		const struct hp_module *mod = &km->mods[i];

		for (size_t j = 0; j < mod->nfuncs; j++) {
			const struct hp_function *f = &mod->funcs[j];
			uint32_t off = 0;

			if (!(f->flags & HP_FN_UNDECODABLE))
				continue;
			n++;
			for (uint32_t b = 0; b < f->nblocks; b++)
				off += mod->blocks[f->block_start + b].size;
			REQUIRE(off == f->size, "%s: undecodable function's blocks cover %u of %u", f->name, off,
				f->size);
			const struct hp_block *last = &mod->blocks[f->block_start + f->nblocks - 1];
			REQUIRE(last->offset == f->bad_offset && last->ninsn == 0 && last->nsucc == 0,
				"%s: the undecodable remainder is not one empty block", f->name);
		}
	}
	if (!n)
		SKIP("no function of this kernel is undecodable");
}

static void t_lookup_and_block_at(void)
{
	const struct hp_module *mod = NULL, *mod2 = NULL;
	const struct hp_function *f, *g;
	const struct hp_block *b;

	REQUIRE(km, "no model");
	f = hp_model_find(km, "vfs_read", &mod, NULL);
	REQUIRE(f, "vfs_read not found");
	g = hp_model_lookup(km, f->addr + 3, &mod2);
	REQUIRE(g == f && mod2 == mod, "lookup(vfs_read+3) gave %s", g ? g->name : "nothing");
	EXPECT(hp_model_lookup(km, 16, NULL) == NULL, "lookup of address 16 found a function");
	b = hp_function_block_at(mod, f, f->addr + 3);
	REQUIRE(b && b->offset == 0, "block_at(vfs_read+3) is not the first block");
	const struct hp_block *last = &mod->blocks[f->block_start + f->nblocks - 1];
	EXPECT(hp_function_block_at(mod, f, f->addr + f->size - 1) == last, "block_at(last byte) is wrong");
	EXPECT(hp_function_block_at(mod, f, f->addr + f->size) == NULL, "block_at(end) found a block");
	EXPECT(hp_model_find(km, "no_such_fn", NULL, NULL) == NULL, "found no_such_fn");
	EXPECT(hp_model_find(km, "vmlinux:vfs_read", NULL, NULL) == f, "vmlinux:vfs_read not found");
}

static void t_vfs_read_calls_symbolized(void)
{
	const struct hp_module *mod;
	const struct hp_function *f;
	char buf[256];
	bool named = false;

	REQUIRE(km, "no model");
	f = hp_model_find(km, "vfs_read", &mod, NULL);
	REQUIRE(f && f->ncalls > 0, "vfs_read has no direct calls");
	for (uint32_t k = 0; k < f->ncalls; k++) {
		const struct hp_call *c = &mod->calls[f->call_start + k];
		const char *s = hp_model_symbolize(km, c->target, buf, sizeof(buf));

		EXPECT(c->site < f->size, "call site outside the function");
		if (s && (!strcmp(s, "rw_verify_area") || !strcmp(s, "fsnotify") || !strcmp(s, "__fsnotify_parent")))
			named = true;
	}
	EXPECT(named, "no call to rw_verify_area/fsnotify found by name");
	EXPECT(hp_model_symbolize(km, f->addr + 5, buf, sizeof(buf)) && !strcmp(buf, "vfs_read+0x5"),
	       "symbolize(vfs_read+5) gave '%s'", buf);
}

static void t_vfs_read_disassembles(void)
{
	const struct hp_module *mod;
	const struct hp_function *f;
	struct hp_insn *in = NULL;
	char err[256];
	uint32_t total = 0;
	int n;

	REQUIRE(km, "no model");
	f = hp_model_find(km, "vfs_read", &mod, NULL);
	REQUIRE(f, "vfs_read not found");
	n = hp_function_disassemble(km, mod, f, &in, err, sizeof(err));
	REQUIRE(n > 10, "disassemble gave %d: %s", n, err);
	/* This kernel starts traceable functions with a 5-byte nop (the
	 * patched-out fentry call). */
	EXPECT(in[0].addr == f->addr, "first instruction not at the function start");
	EXPECT(in[0].len == 5 && !memcmp(in[0].bytes, "\x0f\x1f\x44\x00\x00", 5),
	       "first instruction is not the 5-byte nop: len %u, '%s'", in[0].len, in[0].text);
	EXPECT(strstr(in[0].text, "nop") != NULL, "first instruction text '%s'", in[0].text);
	for (int i = 0; i < n; i++)
		total += in[i].len;
	EXPECT(total == f->size, "instructions cover %u of %u bytes", total, f->size);
	uint32_t ninsn = 0;
	for (uint32_t b = 0; b < f->nblocks; b++)
		ninsn += mod->blocks[f->block_start + b].ninsn;
	EXPECT(ninsn == (uint32_t)n, "blocks count %u instructions, disassembly %d", ninsn, n);
	free(in);
}

static void t_only_function_matches_full_parse(void)
{
	struct hp_open_opts o = { .quiet = true, .only_function = "vfs_read", .kernel_cache_dir = "" };
	struct hp_model *one = NULL;
	const struct hp_module *m1, *m2;
	const struct hp_function *f1, *f2;
	char err[512];
	int r;

	REQUIRE(km, "no model");
	r = hp_model_open_kernel(&o, &one, err, sizeof(err));
	REQUIRE(r == 0, "open only vfs_read: %s", err);
	f1 = hp_model_find(km, "vfs_read", &m1, NULL);
	f2 = hp_model_find(one, "vfs_read", &m2, NULL);
	REQUIRE(f1 && f2, "vfs_read missing");
	EXPECT(f1->addr == f2->addr && f1->size == f2->size, "different extent");
	REQUIRE(f1->nblocks == f2->nblocks, "%u blocks vs %u", f1->nblocks, f2->nblocks);
	for (uint32_t b = 0; b < f1->nblocks; b++) {
		const struct hp_block *a = &m1->blocks[f1->block_start + b], *c = &m2->blocks[f2->block_start + b];

		REQUIRE(a->offset == c->offset && a->size == c->size && a->ninsn == c->ninsn && a->nsucc == c->nsucc,
			"block %u differs", b);
		for (uint32_t k = 0; k < a->nsucc; k++)
			REQUIRE(m1->succs[a->succ_start + k].kind == m2->succs[c->succ_start + k].kind &&
					m1->succs[a->succ_start + k].target == m2->succs[c->succ_start + k].target,
				"successor %u of block %u differs", k, b);
	}
	/* Other functions are indexed (callees symbolize) but not parsed. */
	const struct hp_function *g = hp_model_find(one, "rw_verify_area", NULL, NULL);
	EXPECT(g && g->nblocks == 0, "rw_verify_area should be indexed but unparsed");
	hp_model_free(one);
}

/* "" when f (of model a) and g (of model b) are the same function with the
 * same facts and blocks; else what differs. */
static const char *same_function(const struct hp_model *ma, const struct hp_module *a, const struct hp_function *f,
				 const struct hp_model *mb, const struct hp_module *b, const struct hp_function *g)
{
	static char why[512];
	const uint32_t facts = HP_FN_UNDECODABLE | HP_FN_NORETURN | HP_FN_NORETURN_NAMED | HP_FN_COLD_PART |
			       HP_FN_UNRESOLVED_JUMP | HP_FN_STATIC_BRANCH | HP_FN_STATIC_CALL;
	const char *fp = f->parent ? a->funcs[f->parent - 1].name : "",
		   *gp = g->parent ? b->funcs[g->parent - 1].name : "";
	const char *fc = f->cold ? a->funcs[f->cold - 1].name : "", *gc = g->cold ? b->funcs[g->cold - 1].name : "";

#define DIFF(...) return snprintf(why, sizeof(why), __VA_ARGS__), why
	if (f->addr != g->addr || f->size != g->size)
		DIFF("extent %u bytes vs %u", f->size, g->size);
	if ((f->flags & facts) != (g->flags & facts))
		DIFF("flags 0x%x vs 0x%x", f->flags & facts, g->flags & facts);
	if (strcmp(fp, gp) || strcmp(fc, gc))
		DIFF("fragment links (part of '%s', cold '%s') vs ('%s', '%s')", fp, fc, gp, gc);
	if (f->nblocks != g->nblocks || f->ncalls != g->ncalls || f->nicalls != g->nicalls)
		DIFF("%u blocks, %u calls, %u indirect calls vs %u, %u, %u", f->nblocks, f->ncalls, f->nicalls,
		     g->nblocks, g->ncalls, g->nicalls);
	for (uint32_t i = 0; i < f->nblocks; i++) {
		const struct hp_block *x = &a->blocks[f->block_start + i], *y = &b->blocks[g->block_start + i];
		if (x->offset != y->offset || x->size != y->size || x->ninsn != y->ninsn || x->nsucc != y->nsucc)
			DIFF("block %u: +0x%x size %u, %u successors vs +0x%x size %u, %u successors", i, x->offset,
			     x->size, x->nsucc, y->offset, y->size, y->nsucc);
		for (uint32_t k = 0; k < x->nsucc; k++)
			if (a->succs[x->succ_start + k].kind != b->succs[y->succ_start + k].kind ||
			    a->succs[x->succ_start + k].target != b->succs[y->succ_start + k].target)
				DIFF("block +0x%x: successor %u differs", x->offset, k);
	}
	for (uint32_t i = 0; i < f->ncalls; i++) {
		const struct hp_call *x = &a->calls[f->call_start + i], *y = &b->calls[g->call_start + i];
		const struct hp_function *cx = hp_model_lookup(ma, x->target, NULL),
					 *cy = hp_model_lookup(mb, y->target, NULL);
		if (x->site != y->site || x->target != y->target)
			DIFF("call %u differs", i);
		if (!!(cx && (cx->flags & HP_FN_NORETURN)) != !!(cy && (cy->flags & HP_FN_NORETURN)))
			DIFF("callee %s never returns in one model only", cx ? cx->name : "?");
	}
	for (uint32_t i = 0; i < f->nicalls; i++)
		if (a->icall_sites[f->icall_start + i] != b->icall_sites[g->icall_start + i])
			DIFF("indirect call site %u differs", i);
#undef DIFF
	return "";
}

/* By address (what `hotpathd measure kernel 0xADDR` opens): the function
 * holding it, as the whole model has it, and nothing else parsed. */
static void t_only_address_matches_full_parse(void)
{
	const struct hp_module *m1, *m2;
	const struct hp_function *f1, *f2;
	struct hp_model *one = NULL;
	char err[512];

	REQUIRE(km, "no model");
	f1 = hp_model_find(km, "vfs_read", &m1, NULL);
	REQUIRE(f1 && f1->nblocks > 1, "vfs_read missing or one block");
	/* Its second block: inside the function, not at its start. */
	struct hp_open_opts o = { .quiet = true,
				  .only_address = f1->addr + m1->blocks[f1->block_start + 1].offset,
				  .kernel_cache_dir = cache_dir };
	REQUIRE(hp_model_open_kernel(&o, &one, err, sizeof(err)) == 0, "open only 0x%" PRIx64 ": %s", o.only_address,
		err);
	f2 = hp_model_lookup(one, o.only_address, &m2);
	REQUIRE(f2 && !strcmp(f2->name, "vfs_read"), "0x%" PRIx64 " is in %s", o.only_address, f2 ? f2->name : "none");
	const char *why = same_function(km, m1, f1, one, m2, f2);
	EXPECT(!*why, "by address vfs_read differs from the whole model: %s", why);
	const struct hp_function *g = hp_model_find(one, "rw_verify_area", NULL, NULL);
	EXPECT(g && g->nblocks == 0, "rw_verify_area should be indexed but unparsed");
	hp_model_free(one);
}

/* Does f call a function the model proved (not named) never returns? */
static bool calls_proven_noreturn(const struct hp_module *mod, const struct hp_function *f)
{
	for (uint32_t c = 0; c < f->ncalls; c++) {
		const struct hp_function *g = hp_model_lookup(km, mod->calls[f->call_start + c].target, NULL);
		if (g && g->addr == mod->calls[f->call_start + c].target && (g->flags & HP_FN_NORETURN) &&
		    !(g->flags & HP_FN_NORETURN_NAMED))
			return true;
	}
	return false;
}

/* One model, one answer: a function opened by name (the fast path) has the
 * blocks, successors, callees that never return and .cold links of the
 * whole-kernel model. The sample is the kind the fast path used to get
 * wrong: .cold parts (their blocks start where the main part jumps in),
 * main parts with a .cold part, callers of functions proven (not named) to
 * never return, and proven functions themselves, plus vfs_read. */
static int sample_functions(const char **pick)
{
	static const char *const named[] = { "x2apic_cluster_probe.cold", "__btrfs_check_leaf", "pnp_start_dev",
					     "vfs_read" };
	int npick = 0, ncold = 0, nmain = 0, ncaller = 0, nproven = 0;
	const struct hp_module *vm = &km->mods[0];

	for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
		if (hp_model_find(km, named[i], NULL, NULL))
			pick[npick++] = named[i];
	/* 3 of each kind; the many fragments spread over the text (every 7th). */
	int seen[4] = { 0 };
	static const int stride[4] = { 7, 7, 1, 1 };
	for (size_t k = 0; k < vm->nfuncs && npick < 20; k++) {
		const struct hp_function *f = &vm->funcs[k];
		int kind = (f->flags & HP_FN_COLD_PART)                                        ? 0 :
			   f->cold                                                             ? 1 :
			   calls_proven_noreturn(vm, f)                                        ? 2 :
			   ((f->flags & HP_FN_NORETURN) && !(f->flags & HP_FN_NORETURN_NAMED)) ? 3 :
												 -1;
		int *have = kind == 0 ? &ncold : kind == 1 ? &nmain : kind == 2 ? &ncaller : &nproven;
		bool dup = false;

		if (kind < 0 || *have >= 3 || seen[kind]++ % stride[kind] || f->nblocks == 0)
			continue;
		if (hp_model_find_all(km, f->name, NULL, 0) != 1)
			continue; /* the name alone would be ambiguous */
		for (int p = 0; p < npick; p++)
			dup |= !strcmp(pick[p], f->name);
		if (dup)
			continue;
		pick[npick++] = f->name;
		(*have)++;
	}
	EXPECT(ncold == 3 && nmain == 3 && ncaller == 3 && nproven == 3,
	       "sample: %d .cold parts, %d main parts, %d callers of proven noreturn functions, %d proven", ncold,
	       nmain, ncaller, nproven);
	return npick;
}

static void name_entry_matches_full_model(const char *dir)
{
	const char *pick[24];
	int npick, checked = 0;

	REQUIRE(km, "no model");
	npick = sample_functions(pick);
	for (int p = 0; p < npick; p++) {
		struct hp_open_opts o = { .quiet = true, .only_function = pick[p], .kernel_cache_dir = dir };
		struct hp_model *one = NULL;
		const struct hp_module *m1, *m2;
		const struct hp_function *f1, *f2;
		char err[512];

		REQUIRE(hp_model_open_kernel(&o, &one, err, sizeof(err)) == 0, "open only %s: %s", pick[p], err);
		f1 = hp_model_find(km, pick[p], &m1, NULL);
		f2 = hp_model_find(one, pick[p], &m2, NULL);
		if (!f1 || !f2) {
			EXPECT(0, "%s missing from one of the models", pick[p]);
		} else {
			const char *why = same_function(km, m1, f1, one, m2, f2);
			EXPECT(!*why, "%s: by name (%s) it differs from the whole model: %s", pick[p],
			       *dir ? "with the noreturn cache" : "parsing its callees", why);
			checked++;
		}
		hp_model_free(one);
	}
	EXPECT(checked >= 12, "only %d functions compared", checked);
}

/* Without the cache: the function's call closure is parsed. */
static void t_name_entry_matches_full_model(void)
{
	name_entry_matches_full_model("");
}

/* The whole parse wrote the cache: root's, 0600, vmlinux's functions that
 * never return; with it no callee is parsed and the answer is the same. */
static void t_name_entry_with_cache_matches_full_model(void)
{
	char path[256];
	struct stat st;

	REQUIRE(km, "no model");
	snprintf(path, sizeof(path), "%s/%s", cache_dir, HP_KERNEL_CACHE_FILE);
	REQUIRE(stat(path, &st) == 0, "the whole parse wrote no cache at %s", path);
	EXPECT((st.st_mode & 0777) == 0600 && st.st_uid == geteuid(), "%s: mode %o, owner %u", path,
	       (unsigned)(st.st_mode & 0777), (unsigned)st.st_uid);
	name_entry_matches_full_model(cache_dir);
	/* vfs_read's callees are indexed, not parsed. */
	struct hp_open_opts o = { .quiet = true, .only_function = "vfs_read", .kernel_cache_dir = cache_dir };
	struct hp_model *one = NULL;
	char err[512];
	REQUIRE(hp_model_open_kernel(&o, &one, err, sizeof(err)) == 0, "open only vfs_read: %s", err);
	const struct hp_function *g = hp_model_find(one, "rw_verify_area", NULL, NULL);
	EXPECT(g && g->nblocks == 0, "rw_verify_area should be indexed but unparsed");
	hp_model_free(one);
}

/* A function of the whole model found by an alias (a name
 * hp_module_normalize dropped) that names it alone and does not call it:
 * the function, with *alias set; NULL if the kernel has none. */
static const struct hp_function *alias_of_parsed(const char **alias)
{
	for (size_t i = 0; i < km->naliases; i++) {
		const struct hp_name_ent *e = &km->aliases[i];
		const struct hp_function *f = &km->mods[e->mod].funcs[e->fn];
		if (f->nblocks && strcmp(e->name, f->name) && hp_model_find_all(km, e->name, NULL, 0) == 1 &&
		    hp_model_find_all(km, f->name, NULL, 0) == 1) {
			*alias = e->name;
			return f;
		}
	}
	return NULL;
}

/* Some functions opened at once (`measure kernel A B`, `plan kernel ROOT
 * --profile` with its counted callees): each as the whole model has it,
 * whatever else the set holds: the sample of one-function opens, a
 * function by an alias, one by an address inside it, a module's function
 * (if any is loaded); a name that finds nothing adds nothing; a function
 * not asked for stays unparsed. */
static void set_matches_full_model(const char *dir)
{
	const char *names[32], *alias = NULL, *want[32];
	const struct hp_function *by_alias, *by_addr, *mod_fn = NULL;
	const struct hp_module *am;
	struct hp_model *set = NULL;
	uint64_t addr;
	char err[512];
	int n, nwant, checked = 0;

	REQUIRE(km, "no model");
	n = sample_functions(names);
	nwant = n;
	memcpy(want, names, (size_t)n * sizeof(*names));
	by_alias = alias_of_parsed(&alias);
	if (by_alias) {
		names[n++] = alias;
		want[nwant++] = by_alias->name;
	}
	names[n++] = "hotpath_no_such_function";
	for (size_t i = 1; i < km->nmods && !mod_fn; i++)
		for (size_t k = 0; k < km->mods[i].nfuncs && !mod_fn; k++) {
			const struct hp_function *f = &km->mods[i].funcs[k];
			if (f->nblocks > 1 && hp_model_find_all(km, f->name, NULL, 0) == 1)
				mod_fn = f;
		}
	if (mod_fn) {
		names[n++] = mod_fn->name;
		want[nwant++] = mod_fn->name;
	}
	by_addr = hp_model_find(km, "rw_verify_area", &am, NULL);
	REQUIRE(by_addr && by_addr->nblocks > 1, "rw_verify_area missing or one block");
	addr = by_addr->addr + am->blocks[by_addr->block_start + 1].offset;
	want[nwant++] = by_addr->name;

	struct hp_open_opts o = { .quiet = true,
				  .only_functions = names,
				  .nonly_functions = (size_t)n,
				  .only_addresses = &addr,
				  .nonly_addresses = 1,
				  .kernel_cache_dir = dir };
	REQUIRE(hp_model_open_kernel(&o, &set, err, sizeof(err)) == 0, "open %d functions: %s", n, err);
	for (int p = 0; p < nwant; p++) {
		const struct hp_module *m1, *m2;
		const struct hp_function *f1 = hp_model_find(km, want[p], &m1, NULL),
					 *f2 = hp_model_find(set, want[p], &m2, NULL);
		if (!f1 || !f2) {
			EXPECT(0, "%s missing from one of the models", want[p]);
			continue;
		}
		const char *why = same_function(km, m1, f1, set, m2, f2);
		EXPECT(!*why, "%s: in a set (%s) it differs from the whole model: %s", want[p],
		       *dir ? "with the noreturn cache" : "parsing their callees", why);
		checked++;
	}
	EXPECT(checked >= 14, "only %d functions compared", checked);
	EXPECT(by_alias || !km->naliases, "no alias of a parsed function among %zu", km->naliases);
	EXPECT(!hp_model_find(set, "hotpath_no_such_function", NULL, NULL), "an unknown name was found");
	/* Not asked for: indexed, not parsed. */
	const struct hp_function *g = hp_model_find(set, "vfs_write", NULL, NULL);
	EXPECT(g && g->nblocks == 0, "vfs_write should be indexed but unparsed");
	hp_model_free(set);
}

/* Without the cache: the set's call closure is parsed. */
static void t_set_matches_full_model(void)
{
	set_matches_full_model("");
}

/* With the cache (the whole parse wrote it): no callee is parsed. */
static void t_set_with_cache_matches_full_model(void)
{
	set_matches_full_model(cache_dir);
}

/* Only names that find nothing: nothing is parsed (the caller reports
 * them), not the whole kernel. */
static void t_set_of_unknown_names_parses_nothing(void)
{
	const char *names[] = { "hotpath_no_such_function", "vmlinux:hotpath_no_such_either" };
	struct hp_open_opts o = {
		.quiet = true, .only_functions = names, .nonly_functions = 2, .kernel_cache_dir = cache_dir
	};
	struct hp_model_stats st;
	struct hp_model *set = NULL;
	char err[512];

	REQUIRE(hp_model_open_kernel(&o, &set, err, sizeof(err)) == 0, "open: %s", err);
	hp_model_stats(set, &st);
	EXPECT(st.functions > 50000 && st.blocks == 0, "%zu functions indexed, %zu blocks parsed", st.functions,
	       st.blocks);
	hp_model_free(set);
}

/* Write text as the cache file of dir. */
static void put_cache(const char *dir, const char *text, size_t len)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, HP_KERNEL_CACHE_FILE);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	REQUIRE(fd >= 0 && write(fd, text, len) == (ssize_t)len, "writing %s", path);
	close(fd);
}

/* A cache that is not exactly as written for this kernel is refused with
 * the reason and the parse goes on without it, to the same answer: a byte
 * changed (the checksum), an entry that starts no function (a valid file
 * for this key), a file others may read, another boot. */
static void t_damaged_cache_is_refused(void)
{
	char path[256], why[256] = "";
	struct hp_kcache_key k;
	struct hp_kcache_fn *v = NULL;
	size_t n = 0, len = 0;
	char *good = NULL, *text = NULL;
	const struct hp_module *vm;
	const struct hp_function *f;
	FILE *fp;

	REQUIRE(km, "no model");
	vm = &km->mods[0];
	REQUIRE(hp_kcache_key_now(&k, km->build_id, vm->nfuncs,
				  vm->funcs[vm->nfuncs - 1].addr + vm->funcs[vm->nfuncs - 1].size - vm->base) == 0,
		"no cache key (the agent binary's build id, the boot id)");
	REQUIRE(hp_kcache_load(cache_dir, &k, &v, &n, why, sizeof(why)) == 0 && n > 10, "the cache: %s", why);
	snprintf(path, sizeof(path), "%s/%s", cache_dir, HP_KERNEL_CACHE_FILE);
	REQUIRE((fp = fopen(path, "r")) != NULL, "open %s", path);
	good = malloc(HP_KERNEL_CACHE_MAX_BYTES);
	REQUIRE(good, "out of memory");
	size_t glen = fread(good, 1, HP_KERNEL_CACHE_MAX_BYTES - 1, fp);
	fclose(fp);
	good[glen] = 0;

	/* One digit of an entry changed: the checksum says so. */
	char *entry = strstr(good, "\np ");
	REQUIRE(entry, "no proven entry in the cache");
	entry[3] = entry[3] == '1' ? '2' : '1';
	struct hp_kcache_fn *w = NULL;
	size_t nw = 0;
	EXPECT(hp_kcache_decode(good, glen, &k, &w, &nw, why, sizeof(why)) == -EBADMSG && strstr(why, "checksum"),
	       "a changed entry: %s", why);
	entry[3] = entry[3] == '1' ? '2' : '1';
	/* Another boot's. */
	struct hp_kcache_key other = k;
	other.boot[0] = other.boot[0] == 'a' ? 'b' : 'a';
	EXPECT(hp_kcache_decode(good, glen, &other, &w, &nw, why, sizeof(why)) == -ESTALE && strstr(why, "boot"),
	       "another boot's: %s", why);

	/* An entry one byte into a function: a well-formed file the parse refuses. */
	f = hp_model_find(km, "vfs_read", NULL, NULL);
	REQUIRE(f, "no vfs_read");
	struct hp_kcache_fn *bad = calloc(n + 1, sizeof(*bad));
	size_t nb = 0;
	bool put = false;
	for (size_t i = 0; i < n; i++) {
		if (!put && v[i].off > f->addr + 1 - vm->base) {
			bad[nb++] = (struct hp_kcache_fn){ f->addr + 1 - vm->base, false };
			put = true;
		}
		bad[nb++] = v[i];
	}
	REQUIRE(hp_kcache_encode(&k, bad, nb, &text, &len) == 0, "encode");
	put_cache(cache_dir, text, len);
	struct hp_open_opts o = { .quiet = true, .only_function = "vfs_read", .kernel_cache_dir = cache_dir };
	struct hp_model *one = NULL;
	char err[512];
	REQUIRE(hp_model_open_kernel(&o, &one, err, sizeof(err)) == 0, "open only vfs_read: %s", err);
	const struct hp_module *m1, *m2;
	const struct hp_function *f1 = hp_model_find(km, "vfs_read", &m1, NULL),
				 *f2 = hp_model_find(one, "vfs_read", &m2, NULL);
	const char *diff = f2 ? same_function(km, m1, f1, one, m2, f2) : "missing";
	EXPECT(!*diff, "with a refused cache vfs_read differs from the whole model: %s", diff);
	hp_model_free(one);
	free(text);

	/* Readable by others: refused before it is read. */
	put_cache(cache_dir, good, glen);
	chmod(path, 0644);
	EXPECT(hp_kcache_load(cache_dir, &k, &w, &nw, why, sizeof(why)) == -EPERM, "a 0644 file was read: %s", why);
	chmod(path, 0600);
	EXPECT(hp_kcache_load(cache_dir, &k, &w, &nw, why, sizeof(why)) == 0, "the good file again: %s", why);
	free(w);
	free(bad);
	free(v);
	free(good);
}

static void t_successor_kinds_present(void)
{
	size_t counts[6] = { 0 };

	REQUIRE(km, "no model");
	for (size_t i = 0; i < km->nmods; i++)
		for (size_t k = 0; k < km->mods[i].nsuccs; k++)
			if (km->mods[i].succs[k].kind >= 1 && km->mods[i].succs[k].kind <= 5)
				counts[km->mods[i].succs[k].kind]++;
	/* A retpoline/rethunk kernel has all five kinds. */
	for (int k = 1; k <= 5; k++)
		EXPECT(counts[k] > 0, "no %s successors", hp_succ_kind_name(k));
	EXPECT(counts[HP_SUCC_RETURN] > 30000, "only %zu returns", counts[HP_SUCC_RETURN]);
}

/* Kernel text as this model reads and decodes it, against objdump's
 * disassembly of the same bytes: instruction boundaries agree, and every
 * direct branch target inside a function starts a block. */
static void t_kernel_functions_match_objdump(void)
{
	const struct hp_module *vm;
	unsigned seed = 42;
	char path[] = "/tmp/hotpath-ktext-XXXXXX";
	int fd, checked = 0;

	REQUIRE(km, "no model");
	vm = &km->mods[0];
	REQUIRE((fd = mkstemp(path)) >= 0, "mkstemp");
	close(fd);
	for (int i = 0; i < 150 && !t_failed_case; i++) {
		const struct hp_function *f =
			i == 0 ? hp_model_find(km, "vfs_read", NULL, NULL) : &vm->funcs[rand_r(&seed) % vm->nfuncs];
		struct hp_insn *ins = NULL;
		struct od od;
		char err[256];
		uint8_t *bytes;
		int n;

		if (!f || (f->flags & (HP_FN_UNDECODABLE | HP_FN_UNREADABLE)) || f->size > 65536)
			continue;
		bytes = malloc(f->size);
		REQUIRE(bytes && km->read(km, f->addr, bytes, f->size) == 0, "reading %s", f->name);
		FILE *fp = fopen(path, "wb");
		REQUIRE(fp && fwrite(bytes, 1, f->size, fp) == f->size, "write");
		fclose(fp);
		free(bytes);
		REQUIRE(objdump_raw(path, f->addr, &od), "objdump failed on %s", f->name);
		n = hp_function_disassemble(km, vm, f, &ins, err, sizeof(err));
		REQUIRE(n > 0, "%s: %s", f->name, err);
		EXPECT((size_t)n == od.n, "%s: %d instructions, objdump %zu", f->name, n, od.n);
		/* The CFG's decoder and the disassembler agree on the count. */
		uint32_t ninsn = 0;
		for (uint32_t b = 0; b < f->nblocks; b++)
			ninsn += vm->blocks[f->block_start + b].ninsn;
		EXPECT(ninsn == (uint32_t)n, "%s: blocks hold %u instructions, disassembly %d", f->name, ninsn, n);
		for (size_t k = 0; k < od.n && k < (size_t)n; k++) {
			if (ins[k].addr != od.v[k].addr) {
				EXPECT(0, "%s: instruction %zu at 0x%" PRIx64 ", objdump 0x%" PRIx64, f->name, k,
				       ins[k].addr, od.v[k].addr);
				break;
			}
			const struct od_insn *in = &od.v[k];
			if (in->direct && in->target >= f->addr && in->target < f->addr + f->size &&
			    od.v[od_first(&od, in->target)].addr == in->target) {
				const struct hp_block *b = hp_function_block_at(vm, f, in->target);
				EXPECT(b && f->addr + b->offset == in->target,
				       "%s: branch target 0x%" PRIx64 " is not a block start", f->name, in->target);
			}
		}
		free(ins);
		free(od.v);
		checked++;
	}
	unlink(path);
	EXPECT(checked >= 120, "only %d functions compared", checked);
}

struct reader_arg {
	unsigned seed;
	int mismatches, disassembled;
};

/* What the sampler and the daemon do at once: lookups, block lookups and
 * disassembly (which reads kernel text through the shared BPF buffer). */
static void *reader(void *p)
{
	struct reader_arg *a = p;
	const struct hp_module *vm = &km->mods[0];

	for (int i = 0; i < 20000; i++) {
		const struct hp_function *f = &vm->funcs[rand_r(&a->seed) % vm->nfuncs];
		const struct hp_module *mod = NULL;
		uint64_t addr = f->addr + rand_r(&a->seed) % f->size;

		if (hp_model_lookup(km, addr, &mod) != f || mod != vm)
			a->mismatches++;
		if (f->nblocks && !hp_function_block_at(vm, f, addr))
			a->mismatches++;
		if (i % 500 == 0) {
			struct hp_insn *in = NULL;
			char err[256];
			int n = hp_function_disassemble(km, vm, f, &in, err, sizeof(err));
			uint32_t total = 0;
			for (int k = 0; k < n; k++)
				total += in[k].len;
			if (n < 0 || (!(f->flags & HP_FN_UNDECODABLE) && total != f->size))
				a->mismatches++;
			a->disassembled += n > 0;
			free(in);
		}
	}
	return NULL;
}

static void t_concurrent_readers(void)
{
	pthread_t t[4];
	struct reader_arg a[4];

	REQUIRE(km, "no model");
	for (int i = 0; i < 4; i++) {
		a[i] = (struct reader_arg){ .seed = 1000u + i };
		pthread_create(&t[i], NULL, reader, &a[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		EXPECT(a[i].mismatches == 0, "reader %d saw %d wrong answers", i, a[i].mismatches);
		EXPECT(a[i].disassembled >= 38, "reader %d disassembled only %d functions", i, a[i].disassembled);
	}
}

int main(void)
{
	if (!mkdtemp(cache_dir)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(t_kernel_model_opens);
	RUN(t_kernel_has_many_functions);
	RUN(t_kernel_functions_sorted_nonoverlapping);
	RUN(t_vfs_read_blocks_tile);
	RUN(t_all_functions_tile_and_targets_are_block_starts);
	RUN(t_undecodable_functions_still_tile);
	RUN(t_lookup_and_block_at);
	RUN(t_vfs_read_calls_symbolized);
	RUN(t_vfs_read_disassembles);
	RUN(t_only_function_matches_full_parse);
	RUN(t_only_address_matches_full_parse);
	RUN(t_name_entry_matches_full_model);
	RUN(t_name_entry_with_cache_matches_full_model);
	RUN(t_set_matches_full_model);
	RUN(t_set_with_cache_matches_full_model);
	RUN(t_set_of_unknown_names_parses_nothing);
	RUN(t_damaged_cache_is_refused);
	RUN(t_successor_kinds_present);
	RUN(t_kernel_functions_match_objdump);
	RUN(t_concurrent_readers);
	hp_model_free(km);
	char path[300];
	snprintf(path, sizeof(path), "%s/%s", cache_dir, HP_KERNEL_CACHE_FILE);
	unlink(path);
	rmdir(cache_dir);
	TEST_EXIT();
}
