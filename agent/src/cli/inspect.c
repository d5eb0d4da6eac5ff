// SPDX-License-Identifier: Apache-2.0
/*
 * `hotpathd inspect` (one function of a target: blocks, instructions,
 * successors, callees) and `hotpathd parse` (a whole target: totals, time and
 * peak memory). Text and JSON come from the same walk over the model: an
 * emitter writes either form, so both always show the same facts.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/commands.h"
#include "base/hex.h"
#include "base/json.h"
#include "daemon/catalog.h"
#include "model/model.h"
#include "target/target.h"

static const char inspect_usage[] =
	"usage: hotpathd inspect kernel FUNCTION [--json]\n"
	"       hotpathd inspect elf PATH FUNCTION [--json]\n"
	"       hotpathd inspect pid PID FUNCTION [--json]\n"
	"\n"
	"Show one function's basic blocks, instructions, successors and callees.\n"
	"\n"
	"targets:\n"
	"  kernel      the running kernel: symbols from /proc/kallsyms, bytes read with a\n"
	"              BPF program (needs root, or CAP_BPF + CAP_PERFMON)\n"
	"  elf PATH    an ELF file on disk: .symtab, else .dynsym, else .eh_frame ranges\n"
	"  pid PID     a running process: its ELF files through /proc/PID/maps, bytes\n"
	"              from /proc/PID/mem (needs ptrace access to the process)\n"
	"\n"
	"FUNCTION is a name, module:name (when a name is in several modules), or an\n"
	"address (0x...) inside the function.\n"
	"\n"
	"  --json      one JSON object: {\"function\": {name, module, address, size,\n"
	"              undecodable, size_estimated, noreturn, cold_part_of, cold_part},\n"
	"              \"blocks\": [{start, size, instructions, successors:\n"
	"              [{kind, target, target_name}]}], \"callees\": [{site, target, name,\n"
	"              noreturn}],\n"
	"              \"indirect_call_sites\": [...], \"probes\": [...]}; addresses are\n"
	"              integers; an instruction with a probe on it has \"probe\": true\n"
	"\n"
	"A process's code is shown as the program has it: where a probe sits (a\n"
	"uprobe of a running measurement, or another tool's breakpoint: an int3 the\n"
	"kernel wrote into the process's text), the listing shows the program's own\n"
	"instruction, marked [probe].\n"
	"\n"
	"successor kinds: fallthrough, taken, tail_call, indirect, return\n"
	"exit status: 0 ok, 1 error (e.g. missing permission, bad file), 2 usage,\n"
	"             3 no such function (or an ambiguous name: candidates are listed)\n";

static const char parse_usage[] =
	"usage: hotpathd parse kernel|elf PATH|pid PID [--json [--functions]] [--threads N] [--quiet]\n"
	"\n"
	"Parse every function of a target into basic blocks and print totals: functions,\n"
	"blocks, undecodable and unreadable functions, wall seconds and peak memory,\n"
	"and each module's catalog digest (the name its catalog piece is uploaded under).\n"
	"bench/kernel_parse runs this on the live kernel.\n"
	"\n"
	"  --json       print one JSON object instead of text\n"
	"  --functions  with --json: each module also lists its functions (name, address,\n"
	"               size, blocks, undecodable): the catalog bench/console_tree measures\n"
	"  --threads N  decode with N threads (default: one per online CPU)\n"
	"  --quiet      no progress on stderr\n";

struct target_args {
	enum hp_target_kind kind;
	const char *path;
	int pid;
	const char *function;
	bool json, quiet;
	int threads;
};

static int usage_error(const char *cmd, const char *msg)
{
	fprintf(stderr, "hotpathd %s: %s (see 'hotpathd %s --help')\n", cmd, msg, cmd);
	return HP_EXIT_USAGE;
}

/* Parse "KIND [PATH|PID] [FUNCTION] [options]"; returns 0 or an exit code. */
static int parse_target_args(const char *cmd, int argc, char **argv, bool want_function, struct target_args *t)
{
	const char *pos[3];
	int npos = 0, i, need;

	memset(t, 0, sizeof(*t));
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			t->json = true;
		} else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
			t->quiet = true;
		} else if (!strcmp(argv[i], "--threads")) {
			unsigned n;
			if (i + 1 >= argc)
				return usage_error(cmd, "--threads needs a number");
			if (hp_parse_uint(argv[++i], 0, 1024, &n) < 0)
				return usage_error(cmd, "--threads needs a number from 0 to 1024");
			t->threads = (int)n;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			char msg[160];
			snprintf(msg, sizeof(msg), "unknown option '%s'", argv[i]);
			return usage_error(cmd, msg);
		} else if (npos < 3) {
			pos[npos++] = argv[i];
		} else {
			return usage_error(cmd, "too many arguments");
		}
	}
	if (npos < 1)
		return usage_error(cmd, "missing target (kernel, elf PATH or pid PID)");
	if (!strcmp(pos[0], "kernel")) {
		t->kind = HP_TARGET_KERNEL;
		need = 1;
	} else if (!strcmp(pos[0], "elf")) {
		t->kind = HP_TARGET_ELF;
		need = 2;
	} else if (!strcmp(pos[0], "pid")) {
		t->kind = HP_TARGET_PID;
		need = 2;
	} else {
		char msg[160];
		snprintf(msg, sizeof(msg), "unknown target '%s' (kernel, elf or pid)", pos[0]);
		return usage_error(cmd, msg);
	}
	if (npos < need)
		return usage_error(cmd, t->kind == HP_TARGET_ELF ? "missing PATH" : "missing PID");
	if (t->kind == HP_TARGET_ELF)
		t->path = pos[1];
	if (t->kind == HP_TARGET_PID) {
		char *e;
		long p = strtol(pos[1], &e, 10);
		if (*e || p <= 0 || p > 0x7fffffff)
			return usage_error(cmd, "PID must be a positive number");
		t->pid = (int)p;
	}
	if (want_function) {
		if (npos < need + 1)
			return usage_error(cmd, "missing FUNCTION");
		t->function = pos[need];
	}
	if (npos > need + (want_function ? 1 : 0))
		return usage_error(cmd, "too many arguments");
	return 0;
}

static int open_target(const struct target_args *t, const struct hp_open_opts *o, struct hp_model **m, char *err,
		       size_t errlen)
{
	switch (t->kind) {
	case HP_TARGET_KERNEL:
		return hp_model_open_kernel(o, m, err, errlen);
	case HP_TARGET_ELF:
		return hp_model_open_elf(t->path, o, m, err, errlen);
	case HP_TARGET_PID:
		return hp_model_open_pid(t->pid, o, m, err, errlen);
	}
	return -EINVAL;
}

static void target_desc(const struct target_args *t, char *buf, size_t len)
{
	if (t->kind == HP_TARGET_KERNEL)
		snprintf(buf, len, "the kernel");
	else if (t->kind == HP_TARGET_ELF)
		snprintf(buf, len, "%s", t->path);
	else
		snprintf(buf, len, "process %d", t->pid);
}

static bool parse_address(const char *s, uint64_t *addr)
{
	char *e;

	if (strncmp(s, "0x", 2))
		return false;
	errno = 0;
	*addr = strtoull(s + 2, &e, 16);
	return !errno && e != s + 2 && !*e;
}

/* Successor target as an absolute address; false if it has none. */
static bool succ_abs(const struct hp_function *f, const struct hp_succ *s, uint64_t *abs)
{
	switch (s->kind) {
	case HP_SUCC_FALLTHROUGH:
	case HP_SUCC_TAKEN:
		*abs = f->addr + s->target;
		return true;
	case HP_SUCC_TAIL_CALL:
		*abs = s->target;
		return true;
	}
	return false;
}

static bool has_probe(const uint64_t *probes, int nprobes, uint64_t a)
{
	for (int i = 0; i < nprobes; i++)
		if (probes[i] == a)
			return true;
	return false;
}

static void print_function(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
			   const struct hp_insn *insns, int ninsn, const uint64_t *probes, int nprobes, bool as_json)
{
	struct json j;
	char name[256];
	int ii = 0;
	uint32_t b, k;

	if (as_json) {
		json_init(&j, stdout);
		json_obj_begin(&j);
		json_key(&j, "function");
		json_obj_begin(&j);
		json_kstr(&j, "name", f->name);
		json_kstr(&j, "module", mod->name);
		json_ku64(&j, "address", f->addr);
		json_ku64(&j, "size", f->size);
		json_key(&j, "undecodable");
		if (f->flags & HP_FN_UNDECODABLE) {
			json_obj_begin(&j);
			json_ku64(&j, "offset", f->bad_offset);
			json_obj_end(&j);
		} else {
			json_null(&j);
		}
		json_key(&j, "size_estimated");
		json_bool(&j, f->flags & HP_FN_SIZE_ESTIMATED);
		json_key(&j, "noreturn");
		json_bool(&j, f->flags & HP_FN_NORETURN);
		json_kstr(&j, "cold_part_of", f->parent ? mod->funcs[f->parent - 1].name : NULL);
		json_kstr(&j, "cold_part", f->cold ? mod->funcs[f->cold - 1].name : NULL);
		json_obj_end(&j);
		json_key(&j, "blocks");
		json_arr_begin(&j);
	} else {
		printf("function %s  module %s  address 0x%" PRIx64 "  size %u%s\n", f->name, mod->name, f->addr,
		       f->size, f->flags & HP_FN_SIZE_ESTIMATED ? " (estimated)" : "");
		printf("  %u blocks, %u callees, %u indirect call sites\n", f->nblocks, f->ncalls, f->nicalls);
		if (f->flags & HP_FN_UNDECODABLE)
			printf("  undecodable from offset %u\n", f->bad_offset);
		if (f->flags & HP_FN_NORETURN)
			printf("  never returns (%s)\n", f->flags & HP_FN_NORETURN_NAMED ? "known by name" : "proven");
		if (f->parent)
			printf("  .cold part of %s\n", mod->funcs[f->parent - 1].name);
		if (f->cold)
			printf("  .cold part: %s\n", mod->funcs[f->cold - 1].name);
	}
	for (b = 0; b < f->nblocks; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		uint64_t start = f->addr + bl->offset;

		if (as_json) {
			json_obj_begin(&j);
			json_ku64(&j, "start", start);
			json_ku64(&j, "size", bl->size);
			json_key(&j, "instructions");
			json_arr_begin(&j);
		} else {
			printf("block 0x%" PRIx64 " size %u ->", start, bl->size);
			if (!bl->nsucc)
				printf(" (none)");
			for (k = 0; k < bl->nsucc; k++) {
				const struct hp_succ *s = &mod->succs[bl->succ_start + k];
				uint64_t t;

				printf("%s %s", k ? "," : "", hp_succ_kind_name(s->kind));
				if (succ_abs(f, s, &t))
					printf(" 0x%" PRIx64 "%s%s%s", t,
					       hp_model_symbolize(m, t, name, sizeof(name)) ? " <" : "",
					       hp_model_symbolize(m, t, name, sizeof(name)) ? name : "",
					       hp_model_symbolize(m, t, name, sizeof(name)) ? ">" : "");
			}
			printf("\n");
		}
		while (ii < ninsn && insns[ii].addr < start)
			ii++;
		for (; ii < ninsn && insns[ii].addr < start + bl->size; ii++) {
			char hex[31] = "";

			hp_hex(insns[ii].bytes, insns[ii].len, hex);
			if (as_json) {
				json_obj_begin(&j);
				json_ku64(&j, "address", insns[ii].addr);
				json_ku64(&j, "length", insns[ii].len);
				json_kstr(&j, "bytes", hex);
				json_kstr(&j, "text", insns[ii].text);
				json_key(&j, "probe");
				json_bool(&j, has_probe(probes, nprobes, insns[ii].addr));
				json_obj_end(&j);
			} else {
				printf("    0x%" PRIx64 "  %-30s %s%s\n", insns[ii].addr, hex, insns[ii].text,
				       has_probe(probes, nprobes, insns[ii].addr) ? "  [probe]" : "");
			}
		}
		if (as_json) {
			json_arr_end(&j);
			json_key(&j, "successors");
			json_arr_begin(&j);
			for (k = 0; k < bl->nsucc; k++) {
				const struct hp_succ *s = &mod->succs[bl->succ_start + k];
				uint64_t t;

				json_obj_begin(&j);
				json_kstr(&j, "kind", hp_succ_kind_name(s->kind));
				json_key(&j, "target");
				if (succ_abs(f, s, &t)) {
					json_u64(&j, t);
					json_kstr(&j, "target_name", hp_model_symbolize(m, t, name, sizeof(name)));
				} else {
					json_null(&j);
					json_kstr(&j, "target_name", NULL);
				}
				json_obj_end(&j);
			}
			json_arr_end(&j);
			json_obj_end(&j);
		}
	}
	if (as_json) {
		json_arr_end(&j);
		json_key(&j, "callees");
		json_arr_begin(&j);
	} else if (f->ncalls) {
		printf("callees:\n");
	}
	for (k = 0; k < f->ncalls; k++) {
		const struct hp_call *c = &mod->calls[f->call_start + k];
		const char *nm = hp_model_symbolize(m, c->target, name, sizeof(name));
		const struct hp_function *cf = hp_model_lookup(m, c->target, NULL);
		bool noret = cf && cf->addr == c->target && (cf->flags & HP_FN_NORETURN);

		if (as_json) {
			json_obj_begin(&j);
			json_ku64(&j, "site", f->addr + c->site);
			json_ku64(&j, "target", c->target);
			json_kstr(&j, "name", nm);
			json_key(&j, "noreturn");
			json_bool(&j, noret);
			json_obj_end(&j);
		} else {
			printf("  0x%" PRIx64 " -> 0x%" PRIx64 " %s%s\n", f->addr + c->site, c->target, nm ? nm : "?",
			       noret ? " (never returns)" : "");
		}
	}
	if (as_json) {
		json_arr_end(&j);
		json_key(&j, "indirect_call_sites");
		json_arr_begin(&j);
	} else if (f->nicalls) {
		printf("indirect call sites:\n");
	}
	for (k = 0; k < f->nicalls; k++) {
		uint64_t site = f->addr + mod->icall_sites[f->icall_start + k];

		if (as_json)
			json_u64(&j, site);
		else
			printf("  0x%" PRIx64 "\n", site);
	}
	if (as_json) {
		json_arr_end(&j);
		json_key(&j, "probes");
		json_arr_begin(&j);
	} else if (nprobes) {
		printf("probes (breakpoints in the process's memory, shown above as the program's own bytes):\n");
	}
	for (int k2 = 0; k2 < nprobes; k2++) {
		if (as_json)
			json_u64(&j, probes[k2]);
		else
			printf("  0x%" PRIx64 "\n", probes[k2]);
	}
	if (as_json) {
		json_arr_end(&j);
		json_obj_end(&j);
	}
}

int cmd_inspect(int argc, char **argv)
{
	struct target_args t;
	struct hp_open_opts o = { 0 };
	struct hp_model *m = NULL;
	struct hp_find_hit hits[16];
	const struct hp_module *mod = NULL;
	const struct hp_function *f = NULL;
	struct hp_insn *insns = NULL;
	uint64_t *probes = NULL;
	char err[512] = "", where[300];
	uint64_t addr;
	size_t nhits = 0, i;
	int r, n, nprobes = 0, rc = HP_EXIT_ERROR;

	for (i = 1; i < (size_t)argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(inspect_usage, stdout);
			return HP_EXIT_OK;
		}
	if ((r = parse_target_args("inspect", argc, argv, true, &t)))
		return r;
	target_desc(&t, where, sizeof(where));
	bool by_addr = parse_address(t.function, &addr);
	o.only_function = by_addr ? NULL : t.function;
	o.only_address = by_addr ? addr : 0; /* the kernel's: the function holding it */
	o.quiet = true;
	o.threads = t.threads;
	if ((r = open_target(&t, &o, &m, err, sizeof(err))) < 0) {
		fprintf(stderr, "hotpathd: %s\n", err);
		return HP_EXIT_ERROR;
	}
	if (by_addr) {
		f = hp_model_lookup(m, addr, &mod);
		nhits = f ? 1 : 0;
	} else {
		nhits = hp_model_find_all(m, t.function, hits, 16);
		if (nhits == 1) {
			f = hits[0].fn;
			mod = hits[0].mod;
		}
	}
	if (nhits == 0) {
		fprintf(stderr, "hotpathd: no function '%s' in %s\n", t.function, where);
		rc = HP_EXIT_NOT_FOUND;
		goto out;
	}
	if (nhits > 1) {
		fprintf(stderr, "hotpathd: '%s' is ambiguous in %s; candidates:\n", t.function, where);
		for (i = 0; i < nhits && i < 16; i++)
			fprintf(stderr, "  %s:%s at 0x%" PRIx64 "\n", hits[i].mod->name, hits[i].fn->name,
				hits[i].fn->addr);
		if (nhits > 16)
			fprintf(stderr, "  ... and %zu more\n", nhits - 16);
		fprintf(stderr, "(name one by module:name or by address 0x...)\n");
		rc = HP_EXIT_NOT_FOUND;
		goto out;
	}
	if (f->flags & HP_FN_UNREADABLE) {
		fprintf(stderr, "hotpathd: cannot read %s: %s\n", f->name, strerror(f->read_errno));
		goto out;
	}
	n = hp_function_disassemble(m, mod, f, &insns, err, sizeof(err));
	if (n < 0) {
		fprintf(stderr, "hotpathd: %s\n", err);
		goto out;
	}
	probes = f->size ? malloc(f->size * sizeof(*probes)) : NULL;
	nprobes = probes ? hp_model_probe_sites(m, f->addr, f->size, probes, f->size) : 0;
	if (nprobes < 0) {
		fprintf(stderr, "hotpathd: cannot read %s: %s\n", f->name, strerror(-nprobes));
		goto out;
	}
	print_function(m, mod, f, insns, n, probes, nprobes, t.json);
	rc = HP_EXIT_OK;
out:
	free(probes);
	free(insns);
	hp_model_free(m);
	return rc;
}

int cmd_parse(int argc, char **argv)
{
	struct target_args t;
	struct hp_open_opts o = { 0 };
	struct hp_model *m = NULL;
	struct hp_model_stats st;
	struct rusage ru;
	char err[512] = "";
	size_t i;
	int r;

	bool functions = false;
	int nargs = 0;
	char **args = calloc((size_t)argc + 1, sizeof(*args));

	if (!args) {
		fprintf(stderr, "hotpathd: out of memory\n");
		return HP_EXIT_ERROR;
	}
	for (i = 0; i < (size_t)argc; i++) {
		if (i > 0 && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))) {
			free(args);
			fputs(parse_usage, stdout);
			return HP_EXIT_OK;
		}
		if (i > 0 && !strcmp(argv[i], "--functions"))
			functions = true;
		else
			args[nargs++] = argv[i];
	}
	r = parse_target_args("parse", nargs, args, false, &t);
	free(args);
	if (r)
		return r;
	if (functions && !t.json)
		return usage_error("parse", "--functions needs --json");
	o.threads = t.threads;
	o.quiet = t.quiet || t.json;
	if ((r = open_target(&t, &o, &m, err, sizeof(err))) < 0) {
		fprintf(stderr, "hotpathd: %s\n", err);
		return HP_EXIT_ERROR;
	}
	hp_model_stats(m, &st);
	/* The digest each module's catalog piece is uploaded under (the
	 * daemon computes the same over the same model). */
	if ((r = hp_catalog_digest_all(m)) < 0) {
		fprintf(stderr, "hotpathd: computing the catalog digests: %s\n", strerror(-r));
		hp_model_free(m);
		return HP_EXIT_ERROR;
	}
	getrusage(RUSAGE_SELF, &ru);
	double rss_mib = ru.ru_maxrss / 1024.0;
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	if (t.json) {
		struct json j;

		json_init(&j, stdout);
		json_obj_begin(&j);
		json_ku64(&j, "functions", st.functions);
		json_ku64(&j, "blocks", st.blocks);
		json_ku64(&j, "successors", st.succs);
		json_ku64(&j, "calls", st.calls);
		json_ku64(&j, "indirect_call_sites", st.icalls);
		json_ku64(&j, "undecodable", st.undecodable);
		json_ku64(&j, "unreadable", st.unreadable);
		json_key(&j, "seconds");
		json_double(&j, m->parse_seconds, 3);
		json_key(&j, "peak_rss_mib");
		json_double(&j, rss_mib, 1);
		json_kstr(&j, "release", m->release);
		json_kstr(&j, "build_id", m->build_id);
		if (kf) {
			json_ku64(&j, "jump_label_sites", kf->nstatic_branches);
			json_ku64(&j, "jump_label_sites_left", kf->static_branch_foreign);
			json_ku64(&j, "static_call_sites", kf->nstatic_calls);
			json_ku64(&j, "static_call_sites_left", kf->static_call_foreign);
		}
		json_key(&j, "modules");
		json_arr_begin(&j);
		for (i = 0; i < m->nmods; i++) {
			json_obj_begin(&j);
			json_kstr(&j, "name", m->mods[i].name);
			json_ku64(&j, "base", m->mods[i].base);
			json_ku64(&j, "functions", m->mods[i].nfuncs);
			json_ku64(&j, "blocks", m->mods[i].nblocks);
			json_kstr(&j, "digest", m->mods[i].digest);
			if (functions) {
				json_key(&j, "function_list");
				json_arr_begin(&j);
				for (size_t k = 0; k < m->mods[i].nfuncs; k++) {
					const struct hp_function *f = &m->mods[i].funcs[k];

					json_obj_begin(&j);
					json_kstr(&j, "name", f->name);
					json_ku64(&j, "address", f->addr);
					json_ku64(&j, "size", f->size);
					json_ku64(&j, "blocks", f->nblocks);
					json_key(&j, "undecodable");
					json_bool(&j, (f->flags & HP_FN_UNDECODABLE) != 0);
					json_obj_end(&j);
				}
				json_arr_end(&j);
			}
			json_obj_end(&j);
		}
		json_arr_end(&j);
		json_obj_end(&j);
	} else {
		if (m->release[0])
			printf("target: %s%s%s\n", m->release, m->build_id[0] ? "  build id " : "", m->build_id);
		for (i = 0; i < m->nmods; i++)
			printf("module %s  base 0x%" PRIx64 "  %zu functions, %zu blocks  digest %s\n", m->mods[i].name,
			       m->mods[i].base, m->mods[i].nfuncs, m->mods[i].nblocks, m->mods[i].digest);
		printf("successors %zu, direct calls %zu, indirect call sites %zu, unreadable %zu\n", st.succs,
		       st.calls, st.icalls, st.unreadable);
		if (kf)
			printf("jump labels %zu, static calls %zu (vmlinux, modelled state-free; left as found: %zu, %zu)\n",
			       kf->nstatic_branches, kf->nstatic_calls, kf->static_branch_foreign,
			       kf->static_call_foreign);
		printf("parsed: %zu functions, %zu blocks, %zu undecodable, %.2f s, %.0f MiB\n", st.functions,
		       st.blocks, st.undecodable, m->parse_seconds, rss_mib);
	}
	hp_model_free(m);
	return HP_EXIT_OK;
}
