// SPDX-License-Identifier: Apache-2.0
/*
 * hotpathd icalls: the value profile of the indirect call sites in a
 * process's installed copies (issue 17's indirect-call promotion). Every
 * member's copy entry and every indirect call site of a member's copy is
 * probed (measure/callers.h) for a window; at an entry, the return
 * address names the call that reached it: right after an indirect call
 * of the copy, that call went through the pointer, to the member's
 * original entry and from there by its jump to the copy; right after a
 * promoted call's direct call, it went straight to the copy. Each site
 * gets its executions and its targets with both counts. `hotpathd plan
 * --icall-targets` reads the JSON; a site measured again after the
 * promotion shows how many calls still go through the original entry.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/grow.h"
#include "base/json.h"
#include "cli/commands.h"
#include "host/procmaps.h"
#include "isa/isa.h"
#include "measure/callers.h"
#include "measure/moved.h"
#include "replace/install.h"
#include "target/target.h"

#define DEFAULT_STATE "/var/lib/hotpathd"

static const char icalls_usage[] =
	"usage: hotpathd icalls pid PID [--seconds S] [--state-dir DIR] [--json]\n"
	"\n"
	"The targets of the indirect calls in PID's installed copies, counted exactly for\n"
	"S seconds (default 2, 1..600): every member's copy entry and every indirect call\n"
	"site of the copies is probed (uprobes; each hit costs a few microseconds), and the\n"
	"return address at an entry names the call that reached it. Per site: its\n"
	"executions, and per target the calls through the pointer (which reach the\n"
	"target's original entry and jump from there to its copy) and, where the site is\n"
	"promoted, the calls made directly to the copy. --json gives what\n"
	"`hotpathd plan --icall-targets` reads.\n"
	"  --state-dir DIR  installed copies' journals (default " DEFAULT_STATE ")\n";

struct target {
	uint32_t entry; /* index into entries */
	uint64_t indirect, direct;
};

struct site {
	const struct hp_function *f;
	uint32_t off;
	uint64_t copy;
	bool promoted;
	uint64_t calls;
	struct target *targets;
	size_t ntargets, cap;
};

struct entry {
	const struct hp_function *f;
	uint64_t copy;
	uint64_t calls, through_sites, direct, other;
};

struct ret {
	uint64_t addr;
	uint32_t site;
	bool direct;
};

struct probes {
	struct hp_caller_probe *p;
	char (*paths)[96];
	size_t n, cap, cap_paths;
};

static int add_probe(struct probes *ps, int pid, uint64_t addr, char *err, size_t errlen)
{
	struct hp_code_location loc;
	int r = hp_code_location(pid, addr, &loc);

	if (r < 0) {
		snprintf(err, errlen, "no file mapping holds 0x%" PRIx64 " in process %d: %s", addr, pid, strerror(-r));
		return r;
	}
	if (HP_GROW(ps->p, ps->cap, ps->n + 1) || HP_GROW(ps->paths, ps->cap_paths, ps->n + 1)) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	snprintf(ps->paths[ps->n], sizeof(ps->paths[ps->n]), "%s", loc.path);
	ps->p[ps->n].file_offset = loc.file_offset;
	ps->n++;
	return 0;
}

static int cmp_ret(const void *a, const void *b)
{
	const struct ret *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static const struct ret *find_ret(const struct ret *r, size_t n, uint64_t addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (r[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && r[lo].addr == addr ? &r[lo] : NULL;
}

/* Where f's indirect call at off runs in copy block cb (original block bl):
 * the original's instructions and the copy's in step, a promoted call's
 * sequence standing for its call. 0 when it cannot be followed. */
static uint64_t site_in_copy(struct hp_model *m, int memfd, const struct hp_function *f, const struct hp_block *bl,
			     uint64_t cb, uint32_t cb_size, uint32_t off)
{
	uint8_t *ob = malloc(bl->size + 16), *cp = malloc(cb_size + 64);
	uint64_t at = 0;
	uint32_t o = 0, c = 0;

	if (!ob || !cp || m->read(m, f->addr + bl->offset, ob, bl->size) < 0 ||
	    pread(memfd, cp, cb_size, (off_t)cb) != (ssize_t)cb_size)
		goto out;
	memset(ob + bl->size, 0, 16);
	memset(cp + cb_size, 0, 64);
	while (bl->offset + o < off && o < bl->size && c < cb_size) {
		struct hp_isa_insn oi, ci;
		struct hp_isa_promoted q = { 0 };
		if (hp_isa_decode(ob + o, bl->size - o, f->addr + bl->offset + o, &oi) < 0 ||
		    hp_isa_decode(cp + c, cb_size - c, cb + c, &ci) < 0)
			goto out;
		if (oi.cls == HP_IC_CALL_IND && ci.cls != HP_IC_CALL_IND &&
		    hp_isa_match_promoted_call(cp + c, cb_size - c, cb + c, NULL, 0, 0, &q) > 0)
			c += q.len;
		else
			c += oi.len;
		o += oi.len;
	}
	if (bl->offset + o == off && c < cb_size)
		at = cb + c;
out:
	free(ob);
	free(cp);
	return at;
}

static int add_target(struct site *s, uint32_t entry, uint64_t n, bool direct)
{
	size_t k = 0;

	while (k < s->ntargets && s->targets[k].entry != entry)
		k++;
	if (k == s->ntargets) {
		if (HP_GROW(s->targets, s->cap, s->ntargets + 1))
			return -ENOMEM;
		s->targets[s->ntargets++] = (struct target){ entry, 0, 0 };
	}
	*(direct ? &s->targets[k].direct : &s->targets[k].indirect) += n;
	return 0;
}

int cmd_icalls(int argc, char **argv)
{
	const char *state_dir = DEFAULT_STATE;
	unsigned seconds = 2, pid = 0;
	bool json = false;
	int rc = HP_EXIT_ERROR, memfd = -1;
	char err[512] = "", path[64];
	struct hp_model *m = NULL;
	struct hp_moved_code *mc = NULL;
	size_t nmc = 0;
	struct entry *entries = NULL;
	struct site *sites = NULL;
	struct ret *rets = NULL;
	size_t nentries = 0, nsites = 0, nrets = 0, cap_e = 0, cap_s = 0, cap_r = 0;
	struct probes ps = { 0 };
	struct hp_callers hits = { 0 };

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(icalls_usage, stdout);
			return HP_EXIT_OK;
		} else if (!strcmp(a, "--json")) {
			json = true;
		} else if (!strcmp(a, "--seconds") && v && hp_parse_uint(v, 1, 600, &seconds) == 0) {
			i++;
		} else if (!strcmp(a, "--state-dir") && v) {
			state_dir = argv[++i];
		} else if (!strcmp(a, "pid") && v && !pid && hp_parse_uint(v, 1, 0x7fffffff, &pid) == 0) {
			i++;
		} else {
			fprintf(stderr, "hotpathd icalls: bad argument '%s'\n%s", a, icalls_usage);
			return HP_EXIT_USAGE;
		}
	}
	if (!pid) {
		fputs(icalls_usage, stderr);
		return HP_EXIT_USAGE;
	}
	struct hp_open_opts oo = { .quiet = true };
	if (hp_model_open_pid_unpatched(state_dir, (int)pid, &oo, &m, err, sizeof(err)) < 0 ||
	    hp_moved_code_of(state_dir, (int)pid, &mc, &nmc, err, sizeof(err)) < 0) {
		fprintf(stderr, "hotpathd icalls: %s\n", err);
		goto out;
	}
	if (!nmc) {
		fprintf(stderr, "hotpathd icalls: process %u has no installed copy in %s (hotpathd installed)\n", pid,
			state_dir);
		goto out;
	}
	snprintf(path, sizeof(path), "/proc/%u/mem", pid);
	if ((memfd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "hotpathd icalls: %s: %s\n", path, strerror(errno));
		goto out;
	}
	/* The entries first (probe i is entry i), then the sites. */
	for (size_t i = 0; i < nmc; i++)
		for (size_t k = 0; k < mc[i].nfns; k++) {
			const struct hp_module *mod;
			const struct hp_function *f = hp_model_lookup(m, mc[i].fns[k].orig, &mod);
			if (!f || f->addr != mc[i].fns[k].orig || !mc[i].fns[k].copy)
				continue;
			if (HP_GROW(entries, cap_e, nentries + 1))
				goto nomem;
			entries[nentries++] = (struct entry){ .f = f, .copy = mc[i].fns[k].copy };
			if (add_probe(&ps, (int)pid, mc[i].fns[k].copy, err, sizeof(err)) < 0)
				goto fail;
		}
	for (size_t i = 0; i < nmc; i++)
		for (size_t k = 0; k < mc[i].nfns; k++) {
			const struct hp_module *mod;
			const struct hp_function *f = hp_model_lookup(m, mc[i].fns[k].orig, &mod);
			if (!f || f->addr != mc[i].fns[k].orig)
				continue;
			for (uint32_t q = 0; q < f->nicalls; q++) {
				uint32_t off = mod->icall_sites[f->icall_start + q];
				const struct hp_block *bl = hp_function_block_at(mod, f, f->addr + off);
				const struct hp_moved_block *mb = NULL;
				for (size_t b = 0; bl && b < mc[i].nblocks && !mb; b++)
					if (mc[i].blocks[b].orig == f->addr + bl->offset && mc[i].blocks[b].copy)
						mb = &mc[i].blocks[b];
				uint64_t at = mb ? site_in_copy(m, memfd, f, bl, mb->copy, mb->size, off) : 0;
				uint8_t code[64];
				struct hp_isa_insn in;
				struct hp_isa_promoted pc = { 0 };
				if (!at || pread(memfd, code, sizeof(code), (off_t)at) != (ssize_t)sizeof(code) ||
				    hp_isa_decode(code, sizeof(code), at, &in) < 0)
					continue;
				bool promoted = in.cls != HP_IC_CALL_IND &&
						hp_isa_match_promoted_call(code, sizeof(code), at, NULL, 0, 0, &pc) > 0;
				if (in.cls != HP_IC_CALL_IND && !promoted)
					continue;
				if (HP_GROW(sites, cap_s, nsites + 1) || HP_GROW(rets, cap_r, nrets + 2))
					goto nomem;
				sites[nsites] = (struct site){ .f = f, .off = off, .copy = at, .promoted = promoted };
				if (promoted) {
					rets[nrets++] = (struct ret){ at + pc.direct_ret, (uint32_t)nsites, true };
					rets[nrets++] = (struct ret){ at + pc.len, (uint32_t)nsites, false };
				} else {
					rets[nrets++] = (struct ret){ at + in.len, (uint32_t)nsites, false };
				}
				nsites++;
				if (add_probe(&ps, (int)pid, at, err, sizeof(err)) < 0)
					goto fail;
			}
		}
	qsort(rets, nrets, sizeof(*rets), cmp_ret);
	for (size_t i = 0; i < ps.n; i++)
		ps.p[i].path = ps.paths[i];
	/* On stderr with --json too: the window starts (a caller times the program against it). */
	fprintf(stderr, "probing %zu entries and %zu indirect call sites of process %u for %u s ...\n", nentries,
		nsites, pid, seconds);
	if (hp_callers_measure(ps.p, ps.n, (int)pid, seconds, &hits, err, sizeof(err)) < 0)
		goto fail;
	for (size_t h = 0; h < hits.nhits; h++) {
		const struct hp_caller_hit *x = &hits.hits[h];
		if (x->probe >= nentries) {
			sites[x->probe - nentries].calls += x->count;
			continue;
		}
		struct entry *e = &entries[x->probe];
		const struct ret *r = find_ret(rets, nrets, x->ret);
		e->calls += x->count;
		if (!r) {
			e->other += x->count;
			continue;
		}
		*(r->direct ? &e->direct : &e->through_sites) += x->count;
		if (add_target(&sites[r->site], x->probe, x->count, r->direct) < 0)
			goto nomem;
	}
	if (json) {
		struct json j;
		json_init(&j, stdout);
		json_obj_begin(&j);
		json_kstr(&j, "format", "hotpath-icalls/1");
		json_ku64(&j, "pid", pid);
		json_ku64(&j, "seconds", seconds);
		json_ku64(&j, "samples", hits.samples);
		json_ku64(&j, "lost", hits.lost);
		json_ku64(&j, "unread", hits.unread);
		json_ku64(&j, "refused_probes", hits.refused);
		json_key(&j, "sites");
		json_arr_begin(&j);
		for (size_t i = 0; i < nsites; i++) {
			const struct site *s = &sites[i];
			char off[24];
			if (!s->calls && !s->ntargets)
				continue;
			json_obj_begin(&j);
			json_kstr(&j, "function", s->f->name);
			snprintf(off, sizeof(off), "0x%x", s->off);
			json_kstr(&j, "site", off);
			json_kaddr(&j, "copy", s->copy);
			json_key(&j, "promoted");
			json_bool(&j, s->promoted);
			json_ku64(&j, "calls", s->calls);
			json_key(&j, "targets");
			json_arr_begin(&j);
			for (size_t t = 0; t < s->ntargets; t++) {
				json_obj_begin(&j);
				json_kstr(&j, "function", entries[s->targets[t].entry].f->name);
				json_ku64(&j, "indirect", s->targets[t].indirect);
				json_ku64(&j, "direct", s->targets[t].direct);
				json_obj_end(&j);
			}
			json_arr_end(&j);
			json_obj_end(&j);
		}
		json_arr_end(&j);
		json_key(&j, "entries");
		json_arr_begin(&j);
		for (size_t i = 0; i < nentries; i++) {
			const struct entry *e = &entries[i];
			if (!e->calls)
				continue;
			json_obj_begin(&j);
			json_kstr(&j, "function", e->f->name);
			json_ku64(&j, "calls", e->calls);
			json_ku64(&j, "through_sites", e->through_sites);
			json_ku64(&j, "direct_from_promoted", e->direct);
			json_ku64(&j, "other", e->other);
			json_obj_end(&j);
		}
		json_arr_end(&j);
		json_obj_end(&j);
		fputc('\n', stdout);
	} else {
		printf("%" PRIu64 " hits of process %u (%" PRIu64 " lost, %" PRIu64 " unread, %u probes refused)\n",
		       hits.samples, pid, hits.lost, hits.unread, hits.refused);
		for (size_t i = 0; i < nsites; i++) {
			const struct site *s = &sites[i];
			if (!s->calls && !s->ntargets)
				continue;
			printf("%s+0x%x%s: %" PRIu64 " calls\n", s->f->name, s->off, s->promoted ? " (promoted)" : "",
			       s->calls);
			for (size_t t = 0; t < s->ntargets; t++)
				printf("  %-40s through the pointer %" PRIu64 ", direct %" PRIu64 "\n",
				       entries[s->targets[t].entry].f->name, s->targets[t].indirect,
				       s->targets[t].direct);
		}
	}
	rc = HP_EXIT_OK;
	goto out;
nomem:
	snprintf(err, sizeof(err), "out of memory");
fail:
	fprintf(stderr, "hotpathd icalls: %s\n", err);
out:
	for (size_t i = 0; i < nsites; i++)
		free(sites[i].targets);
	free(sites);
	free(entries);
	free(rets);
	free(ps.p);
	free(ps.paths);
	hp_callers_free(&hits);
	if (memfd >= 0)
		close(memfd);
	hp_moved_code_free(mc, nmc);
	hp_model_free(m);
	return rc;
}
