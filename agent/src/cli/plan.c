// SPDX-License-Identifier: Apache-2.0
/*
 * `hotpathd plan`: a code positioning plan for a root function of the
 * kernel, a process or an ELF file, from a profile (measure JSON or a saved
 * profile, several merged with weights) or from PC samples taken now.
 * Text and JSON come from one walk over the plan: a report writer prints
 * either form (text leaves out the bulk: per-set cells and code bytes).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fcntl.h>

#include "cli/commands.h"
#include "cli/json.h"
#include "measure/sampler.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "replace/install.h"
#include "host/processes.h"
#include "host/procmaps.h"
#include "target/target.h"
#include "target/target_elf.h"

static const char plan_usage[] =
	"usage: hotpathd plan kernel ROOT [options]\n"
	"       hotpathd plan pid PID ROOT [options]\n"
	"       hotpathd plan elf PATH ROOT [options]\n"
	"\n"
	"Plan the re-layout of ROOT and its hot callees (KernInst's code positioning):\n"
	"group, hot/cold splitting, basic-block chains, call-affinity order, fetch-block\n"
	"alignment; the L1i footprint before and after; the emitted x86-64 code, decoded\n"
	"again and verified to be the original CFGs re-laid-out. Nothing is installed.\n"
	"\n"
	"counts:\n"
	"  --profile FILE[:W]   block (and edge) counts: `hotpathd measure --json` output,\n"
	"                       a saved profile, or a plan's JSON; repeat to merge several\n"
	"                       workloads, each normalised then weighted by W (default 1)\n"
	"  --sample SECONDS     kernel only: sample PCs now and estimate block counts\n"
	"                       (samples per block / its instructions)\n"
	"second pass (re-plan an installed group from calls under its root):\n"
	"  --second-pass PLAN   PLAN is the installed plan's JSON; it is made again from its\n"
	"                       saved inputs and must match. --profile then gives counts\n"
	"                       measured at its copy's block starts, which only the root's\n"
	"                       copy reaches; the new plan uses PLAN's options\n"
	"  --installed-base A   where the copy runs (default: PLAN's base)\n"
	"  --state-dir DIR      pid targets: installed copies' journals (default\n"
	"                       /var/lib/hotpathd); the process's code is read as it was\n"
	"                       before their patches\n"
	"thresholds and geometry:\n"
	"  --join F             a callee joins when one of its blocks ran more than F times\n"
	"                       the root's calls (default 0.05)\n"
	"  --stall F            I-cache stall/CPU ratio that makes a bottleneck (0.10)\n"
	"  --l1i SIZE,WAYS,LINE L1i geometry in bytes (default: the host's, from sysfs)\n"
	"  --fetch N            fetch block bytes for alignment (16)\n"
	"  --max-pad N          most padding before one aligned block (7)\n"
	"  --no-align           no alignment padding\n"
	"  --max-functions N    group size bound (64)\n"
	"  --base ADDR          lay the code out at ADDR (default: a page past the root's module)\n"
	"output:\n"
	"  --json               one JSON object (format in docs/agent-cli.md)\n"
	"  --code FILE          write the emitted code's bytes to FILE\n"
	"\n"
	"exit status: 0 plan made and verified, 1 error or verification failed, 2 usage,\n"
	"             3 ROOT not found, 4 no plan (no counts, root not hot, root cannot move)\n";

/* The report writer: JSON, or indented text. */
struct rw {
	bool json;
	struct json j;
	int depth;
	bool in_item;
};

static void rw_indent(struct rw *w)
{
	for (int i = 0; i < w->depth; i++)
		fputs("  ", stdout);
}

static void rw_obj(struct rw *w, const char *key)
{
	if (w->json) {
		if (key)
			json_key(&w->j, key);
		json_obj_begin(&w->j);
		return;
	}
	if (key) {
		rw_indent(w);
		printf("%s:\n", key);
	}
	w->depth++;
}

static void rw_obj_end(struct rw *w)
{
	if (w->json)
		json_obj_end(&w->j);
	else
		w->depth--;
}

static void rw_arr(struct rw *w, const char *key)
{
	if (w->json) {
		json_key(&w->j, key);
		json_arr_begin(&w->j);
		return;
	}
	rw_indent(w);
	printf("%s:\n", key);
	w->depth++;
}

static void rw_arr_end(struct rw *w)
{
	if (w->json)
		json_arr_end(&w->j);
	else
		w->depth--;
}

/* An object inside an array: one text line. */
static void rw_item(struct rw *w)
{
	if (w->json) {
		json_obj_begin(&w->j);
		return;
	}
	rw_indent(w);
	fputs("-", stdout);
	w->in_item = true;
}

static void rw_item_end(struct rw *w)
{
	if (w->json) {
		json_obj_end(&w->j);
		return;
	}
	fputs("\n", stdout);
	w->in_item = false;
}

static void rw_str(struct rw *w, const char *k, const char *v)
{
	if (w->json) {
		json_kstr(&w->j, k, v);
	} else if (w->in_item) {
		printf(" %s=%s", k, v ? v : "-");
	} else {
		rw_indent(w);
		printf("%s: %s\n", k, v ? v : "-");
	}
}

static void rw_num(struct rw *w, const char *k, double v, int dec)
{
	char buf[64];
	if (w->json) {
		json_key(&w->j, k);
		json_double(&w->j, v, dec);
		return;
	}
	snprintf(buf, sizeof(buf), "%.*f", dec, v);
	rw_str(w, k, buf);
}

static void rw_u64(struct rw *w, const char *k, uint64_t v)
{
	char buf[32];
	if (w->json) {
		json_ku64(&w->j, k, v);
		return;
	}
	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	rw_str(w, k, buf);
}

/* Addresses: hex strings in both forms (kernel addresses exceed 2^53). */
static void rw_hex(struct rw *w, const char *k, uint64_t v)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
	rw_str(w, k, buf);
}

static void rw_bool(struct rw *w, const char *k, bool v)
{
	if (w->json) {
		json_key(&w->j, k);
		json_bool(&w->j, v);
		return;
	}
	rw_str(w, k, v ? "yes" : "no");
}

static const char *status_name(enum hp_plan_status s)
{
	static const char *const n[] = { "ok", "no_counts", "not_hot", "root_kept", "refused" };
	return (unsigned)s < 5 ? n[s] : "?";
}

static void write_icache(struct rw *w, const char *key, const struct hp_plan *p, const struct hp_icache *ic)
{
	rw_obj(w, key);
	rw_u64(w, "sets", ic->sets);
	rw_u64(w, "ways", ic->ways);
	rw_u64(w, "line_bytes", ic->line);
	rw_u64(w, "hot_bytes", ic->hot_bytes);
	rw_u64(w, "hot_lines", ic->hot_lines);
	rw_u64(w, "minimum_lines", ic->minimum);
	rw_u64(w, "distance_to_minimum", ic->hot_lines - (ic->hot_lines > ic->minimum ? ic->minimum : ic->hot_lines));
	rw_num(w, "ratio", ic->minimum ? (double)ic->hot_lines / ic->minimum : 0, 3);
	rw_u64(w, "conflict_sets", ic->conflict_sets);
	rw_u64(w, "max_lines_in_a_set", ic->max_per_set);
	if (w->json) {
		/* The heatmap: per set, each distinct hot line with the blocks in it. */
		rw_arr(w, "cells");
		for (uint32_t s = 0; s < ic->sets; s++) {
			if (!ic->lines_per_set[s])
				continue;
			uint64_t seen[256];
			int ns = 0;
			for (size_t i = 0; i < ic->npieces; i++) {
				const struct hp_hot_piece *pc = &ic->pieces[i];
				for (uint64_t l = pc->addr / ic->line;
				     pc->size && l <= (pc->addr + pc->size - 1) / ic->line; l++) {
					if (l % ic->sets != s)
						continue;
					int k;
					for (k = 0; k < ns && seen[k] != l; k++)
						;
					if (k < ns || ns == 256)
						continue;
					seen[ns++] = l;
					rw_item(w);
					rw_u64(w, "set", s);
					rw_u64(w, "way", (uint64_t)ns - 1);
					rw_hex(w, "line", l * ic->line);
					rw_bool(w, "conflict", ic->lines_per_set[s] > ic->ways);
					rw_arr(w, "blocks");
					for (size_t q = 0; q < ic->npieces; q++) {
						const struct hp_hot_piece *x = &ic->pieces[q];
						if (!x->size || x->addr / ic->line > l ||
						    (x->addr + x->size - 1) / ic->line < l)
							continue;
						const struct hp_plan_member *mb = &p->members[x->member];
						char name[300];
						snprintf(name, sizeof(name), "%s+0x%x", mb->fn->name,
							 mb->mod->blocks[mb->fn->block_start + x->block].offset);
						json_str(&w->j, name);
					}
					rw_arr_end(w);
					rw_item_end(w);
				}
			}
		}
		rw_arr_end(w);
	}
	rw_obj_end(w);
}

static void write_profile(struct rw *w, const struct hp_plan *p)
{
	const struct hp_profile *pr = p->profile;
	if (!pr || !w->json)
		return;
	/* The inputs, so the plan can be reproduced: hotpath-profile/1. */
	rw_obj(w, "profile");
	rw_str(w, "format", "hotpath-profile/1");
	rw_str(w, "source", pr->source);
	if (pr->scope[0])
		rw_str(w, "scope", pr->scope);
	rw_bool(w, "estimated", pr->estimated);
	rw_arr(w, "functions");
	/* The members' counts, and those of the functions kept in place (so
	 * the plan made again keeps them too). */
	for (size_t i = 0; i < p->nmembers + p->nkept; i++) {
		const struct hp_function *f = i < p->nmembers ? p->members[i].fn : p->kept[i - p->nmembers].fn;
		const struct hp_prof_fn *pf = hp_profile_find(pr, f->addr);
		if (!pf)
			continue;
		rw_item(w);
		rw_str(w, "name", pf->name);
		rw_hex(w, "address", pf->addr);
		if (i < p->nmembers)
			rw_str(w, "signature", p->members[i].signature);
		else if (pf->signature[0])
			rw_str(w, "signature", pf->signature);
		rw_arr(w, "blocks");
		for (size_t b = 0; b < pf->nblocks; b++) {
			rw_item(w);
			rw_u64(w, "offset", pf->blocks[b].offset);
			rw_num(w, "count", pf->blocks[b].count, 3);
			rw_item_end(w);
		}
		rw_arr_end(w);
		rw_arr(w, "edges");
		for (size_t e = 0; e < pf->nedges; e++) {
			rw_item(w);
			rw_u64(w, "from", pf->edges[e].from);
			rw_u64(w, "to", pf->edges[e].to);
			rw_num(w, "count", pf->edges[e].count, 3);
			rw_item_end(w);
		}
		rw_arr_end(w);
		rw_item_end(w);
	}
	rw_arr_end(w);
	rw_obj_end(w);
}

/* The root's module as an installer checks it: its file's GNU build id
 * (for a process, the file the process maps) and where it is loaded. */
static void module_build_id(const struct hp_model *m, const struct hp_module *mod, int pid, uint64_t addr, char *out)
{
	struct hp_code_location loc;
	char e[200];
	int er = 0, fd;
	Elf *elf;

	out[0] = 0;
	if (m->kind != HP_TARGET_PID) {
		snprintf(out, 65, "%s", m->build_id);
		return;
	}
	if (hp_code_location(pid, addr, &loc) < 0)
		return;
	if ((fd = open(loc.path, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	if ((elf = hp_elf_begin(fd, mod->name, e, sizeof(e), &er))) {
		hp_elf_build_id(elf, out);
		elf_end(elf);
	}
	close(fd);
}

static void write_plan(struct rw *w, struct hp_model *m, const struct hp_plan *p, const struct hp_function *root,
		       int pid)
{
	static const char *const src[] = { "measured", "derived_exact", "estimated" };
	char buf[128];

	rw_obj(w, NULL);
	rw_str(w, "root", root->name);
	rw_str(w, "status", status_name(p->status));
	if (p->message[0])
		rw_str(w, "message", p->message);
	rw_obj(w, "target");
	rw_str(w, "kind", m->kind == HP_TARGET_KERNEL ? "kernel" : m->kind == HP_TARGET_ELF ? "elf" : "pid");
	rw_str(w, "release", m->release);
	rw_str(w, "build_id", m->build_id);
	if (p->nmembers) {
		/* Which process and file the plan is for, checked before an install. */
		char bid[65];
		uint64_t start = 0;
		module_build_id(m, p->members[0].mod, pid, root->addr, bid);
		if (m->kind == HP_TARGET_PID) {
			rw_u64(w, "pid", (uint64_t)pid);
			if (hp_process_start_time(pid, &start) == 0)
				rw_u64(w, "start_time", start);
		}
		rw_str(w, "module", p->members[0].mod->name);
		rw_hex(w, "module_base", p->members[0].mod->base);
		rw_str(w, "module_build_id", bid);
	}
	rw_obj_end(w);
	rw_obj(w, "bottleneck");
	rw_bool(w, "measurable", p->stall_measurable);
	rw_num(w, "threshold", p->opts.stall_threshold, 3);
	rw_str(w, "note", p->stall_note);
	rw_obj_end(w);
	rw_obj(w, "options");
	rw_num(w, "join_fraction", p->opts.join_fraction, 4);
	rw_u64(w, "fetch_block", p->opts.fetch_block);
	rw_u64(w, "max_pad", p->opts.max_pad);
	rw_bool(w, "align", !p->opts.no_align);
	rw_u64(w, "l1i_size", p->opts.l1i.size_bytes);
	rw_u64(w, "l1i_ways", p->opts.l1i.ways);
	rw_u64(w, "l1i_line", p->opts.l1i.line_bytes);
	rw_num(w, "stall_threshold", p->opts.stall_threshold, 4);
	rw_num(w, "max_pad_share", p->opts.max_pad_share, 4);
	rw_u64(w, "max_functions", p->opts.max_functions);
	rw_u64(w, "small_block", p->opts.small_block);
	rw_obj_end(w);
	if (p->status != HP_PLAN_OK && p->status != HP_PLAN_REFUSED) {
		rw_obj_end(w);
		return;
	}
	/* The group: KernInst Figure 3's table. */
	uint64_t th = 0, tc = 0, tj = 0, tnh = 0, tnc = 0;
	rw_arr(w, "group");
	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		rw_item(w);
		rw_str(w, "function", mb->fn->name);
		rw_hex(w, "address", mb->fn->addr);
		rw_hex(w, "new_address", mb->new_entry);
		rw_str(w, "called_from", p->members[mb->parent < p->nmembers ? mb->parent : 0].fn->name);
		rw_num(w, "calls", mb->calls, 1);
		rw_u64(w, "blocks", mb->fn->nblocks);
		rw_u64(w, "hot_blocks", mb->nhot);
		rw_u64(w, "hot_bytes", mb->hot_bytes);
		rw_u64(w, "chains", mb->nchains);
		rw_u64(w, "cold_bytes", mb->cold_bytes);
		rw_u64(w, "jump_table_bytes", mb->jt_bytes);
		rw_u64(w, "new_hot_bytes", mb->new_hot_bytes);
		rw_u64(w, "new_cold_bytes", mb->new_cold_bytes);
		rw_u64(w, "edges", mb->nedges);
		rw_u64(w, "edges_exact", mb->exact_edges);
		rw_bool(w, "address_taken", mb->fn->flags & HP_FN_ADDR_TAKEN);
		rw_str(w, "module", mb->mod->name);
		rw_u64(w, "size", mb->fn->size);
		char dg[65] = "";
		hp_plan_member_digest(m, mb->fn, dg);
		rw_str(w, "original_sha256", dg);
		if (w->json) {
			rw_arr(w, "chain_table");
			for (uint32_t c = 0; c < mb->nchains; c++) {
				rw_item(w);
				rw_u64(w, "chain", c);
				rw_u64(w, "bytes", mb->chains[c].bytes);
				rw_num(w, "weight", mb->chains[c].weight, 1);
				rw_arr(w, "blocks");
				for (uint32_t k = 0; k < mb->chains[c].n; k++)
					json_u64(&w->j, mb->mod->blocks[mb->fn->block_start +
									mb->blocks[mb->chains[c].first + k].index]
								.offset);
				rw_arr_end(w);
				rw_item_end(w);
			}
			rw_arr_end(w);
			rw_arr(w, "layout");
			for (uint32_t k = 0; k < mb->nblocks; k++) {
				const struct hp_plan_block *b = &mb->blocks[k];
				const struct hp_block *bl = &mb->mod->blocks[mb->fn->block_start + b->index];
				rw_item(w);
				rw_u64(w, "offset", bl->offset);
				rw_u64(w, "size", bl->size);
				rw_num(w, "count", b->count, 1);
				rw_bool(w, "hot", b->hot);
				json_key(&w->j, "chain");
				json_i64(&w->j, b->chain);
				rw_hex(w, "new_address", b->new_addr);
				rw_u64(w, "new_size", b->new_size);
				rw_u64(w, "padding", b->pad);
				rw_item_end(w);
			}
			rw_arr_end(w);
			rw_arr(w, "edge_counts");
			for (size_t e = 0; e < mb->nedges; e++) {
				rw_item(w);
				rw_u64(w, "from", mb->mod->blocks[mb->fn->block_start + mb->edges[e].from].offset);
				rw_u64(w, "to", mb->mod->blocks[mb->fn->block_start + mb->edges[e].to].offset);
				rw_num(w, "count", mb->edges[e].count, 1);
				rw_str(w, "source", src[mb->edges[e].source]);
				rw_item_end(w);
			}
			rw_arr_end(w);
		}
		rw_item_end(w);
		th += mb->hot_bytes;
		tc += mb->cold_bytes;
		tj += mb->jt_bytes;
		tnh += mb->new_hot_bytes;
		tnc += mb->new_cold_bytes;
	}
	rw_arr_end(w);
	rw_obj(w, "totals");
	rw_u64(w, "functions", p->nmembers);
	rw_u64(w, "hot_bytes", th);
	rw_u64(w, "cold_bytes", tc);
	rw_u64(w, "jump_table_bytes", tj);
	rw_u64(w, "new_hot_bytes", tnh);
	rw_u64(w, "new_cold_bytes", tnc);
	rw_u64(w, "padding_bytes", p->pad_bytes);
	rw_u64(w, "inverted_branches", p->inverted);
	rw_u64(w, "removed_jumps", p->removed_jumps);
	rw_u64(w, "added_jumps", p->added_jumps);
	rw_obj_end(w);
	rw_arr(w, "kept_in_place");
	for (size_t i = 0; i < p->nkept; i++) {
		rw_item(w);
		rw_str(w, "function", p->kept[i].fn->name);
		rw_hex(w, "address", p->kept[i].fn->addr);
		rw_str(w, "rule", p->kept[i].rule);
		if (p->kept[i].detail[0])
			rw_str(w, "detail", p->kept[i].detail);
		rw_item_end(w);
	}
	rw_arr_end(w);
	rw_arr(w, "indirect_calls");
	for (size_t i = 0; i < p->nicalls; i++) {
		rw_item(w);
		snprintf(buf, sizeof(buf), "%s+0x%x", p->members[p->icalls[i].member].fn->name, p->icalls[i].site);
		rw_str(w, "site", buf);
		rw_num(w, "count", p->icalls[i].count, 1);
		rw_str(w, "observed_callees", "not measured");
		rw_item_end(w);
	}
	rw_arr_end(w);
	write_icache(w, "icache_before", p, &p->before);
	write_icache(w, "icache_after", p, &p->after);
	rw_obj(w, "code");
	rw_hex(w, "base", p->base);
	rw_u64(w, "bytes", p->code_len);
	rw_bool(w, "verified", p->verified);
	if (p->verified) {
		struct hp_code_image ci;
		char hash[65];
		hp_plan_code_image(p, &ci);
		if (hp_code_hash(&ci, hash) == 0)
			rw_str(w, "sha256", hash);
	}
	if (!p->verified)
		rw_str(w, "verify_error", p->verify_error);
	rw_u64(w, "verified_blocks", p->verified_blocks);
	rw_u64(w, "verified_edges", p->verified_edges);
	rw_u64(w, "verified_instructions", p->verified_insns);
	if (w->json) {
		rw_arr(w, "relocations");
		for (size_t i = 0; i < p->nrelocs; i++) {
			rw_item(w);
			rw_u64(w, "offset", p->relocs[i].offset);
			rw_hex(w, "target", p->relocs[i].target);
			rw_str(w, "kind", "rel32");
			rw_item_end(w);
		}
		rw_arr_end(w);
		char *hex = malloc(p->code_len * 2 + 1);
		for (size_t i = 0; hex && i < p->code_len; i++)
			sprintf(hex + 2 * i, "%02x", p->code[i]);
		if (hex)
			hex[p->code_len * 2] = 0;
		rw_str(w, "hex", hex ? hex : "");
		free(hex);
	}
	if (p->unwind) {
		/* The copy's .eh_frame, to install at base + offset with the code. */
		rw_obj(w, "unwind");
		rw_u64(w, "offset", p->unwind_off);
		rw_u64(w, "bytes", p->unwind_len);
		rw_u64(w, "fdes", p->unwind_fdes);
		if (w->json) {
			char *hex = malloc(p->unwind_len * 2 + 1);
			for (size_t i = 0; hex && i < p->unwind_len; i++)
				sprintf(hex + 2 * i, "%02x", p->unwind[i]);
			if (hex)
				hex[p->unwind_len * 2] = 0;
			rw_str(w, "hex", hex ? hex : "");
			free(hex);
		}
		rw_obj_end(w);
	}
	rw_obj_end(w);
	rw_arr(w, "notes");
	for (int i = 0; i < p->nnotes; i++) {
		if (w->json)
			json_str(&w->j, p->notes[i]);
		else {
			rw_indent(w);
			printf("- %s\n", p->notes[i]);
		}
	}
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	for (int i = 0; kf && i < kf->nnotes; i++) {
		if (w->json)
			json_str(&w->j, kf->notes[i]);
		else {
			rw_indent(w);
			printf("- %s\n", kf->notes[i]);
		}
	}
	rw_arr_end(w);
	rw_num(w, "plan_seconds", p->seconds, 4);
	write_profile(w, p);
	rw_obj_end(w);
	if (w->json)
		fputc('\n', stdout);
}

/* Estimated block counts from PC samples: samples per block / instructions. */
static int sample_profile(struct hp_model *m, unsigned secs, struct hp_profile *out, char *err, size_t errlen)
{
	struct hp_sampler_opts so = { 0 };
	struct hp_sampler *s = hp_sampler_open(m, &so, err, errlen);
	struct hp_sample_interval iv;

	memset(out, 0, sizeof(*out));
	out->weight = 1;
	out->estimated = true;
	if (!s)
		return -EPERM;
	sleep(secs);
	if (hp_sampler_take(s, &iv) < 0) {
		hp_sampler_close(s);
		snprintf(err, errlen, "sampling failed");
		return -EIO;
	}
	for (size_t i = 0; i < iv.nblocks; i++) {
		const struct hp_module *mod = &m->mods[iv.blocks[i].mod];
		const struct hp_function *f = &mod->funcs[iv.blocks[i].fn];
		const struct hp_block *b = hp_function_block_at(mod, f, f->addr + iv.blocks[i].offset);
		if (b &&
		    hp_profile_add(out, mod, f, b->offset, (double)iv.blocks[i].count / (b->ninsn ? b->ninsn : 1)) < 0)
			break;
	}
	snprintf(out->source, sizeof(out->source), "%u s of %s PC samples", secs, hp_sampler_event(s));
	hp_sample_interval_free(&iv);
	hp_sampler_close(s);
	return 0;
}

/* The whole of a file, for JSON inputs. */
static int read_text(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
	FILE *fp = fopen(path, "r");
	size_t cap = 65536, n;
	char *buf = malloc(cap);

	*out = NULL;
	*len = 0;
	if (!fp || !buf) {
		snprintf(err, errlen, "cannot read %s: %s", path, fp ? "out of memory" : strerror(errno));
		if (fp)
			fclose(fp);
		free(buf);
		return -1;
	}
	while ((n = fread(buf + *len, 1, cap - *len, fp)) > 0) {
		*len += n;
		if (*len == cap) {
			char *nb = cap < (256u << 20) ? realloc(buf, cap *= 2) : NULL;
			if (!nb) {
				snprintf(err, errlen, "%s is too large", path);
				free(buf);
				fclose(fp);
				return -1;
			}
			buf = nb;
		}
	}
	fclose(fp);
	*out = buf;
	return 0;
}

int cmd_plan(int argc, char **argv)
{
	const char *pos[3], *profiles[16], *code_path = NULL, *second = NULL, *state_dir = "/var/lib/hotpathd";
	uint64_t installed_base = 0;
	struct hp_plan first = { 0 };
	struct hp_profile first_prof = { 0 };
	char *text = NULL;
	size_t tlen = 0;
	int npos = 0, nprof = 0, i, need, rc = HP_EXIT_ERROR, plan_pid = 0;
	unsigned sample_secs = 0;
	bool json = false;
	struct hp_plan_opts o;
	struct hp_model *m = NULL;
	struct hp_profile prof[16], merged = { 0 };
	struct hp_plan plan = { 0 };
	char err[512];

	hp_plan_opts_default(&o);
	memset(prof, 0, sizeof(prof));
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		unsigned u;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(plan_usage, stdout);
			return HP_EXIT_OK;
		} else if (!strcmp(a, "--json")) {
			json = true;
		} else if (!strcmp(a, "--no-align")) {
			o.no_align = true;
		} else if (!v && a[0] == '-' && a[1]) {
			fprintf(stderr, "hotpathd plan: %s needs a value (see 'hotpathd plan --help')\n", a);
			return HP_EXIT_USAGE;
		} else if (!strcmp(a, "--profile")) {
			if (nprof == 16) {
				fprintf(stderr, "hotpathd plan: at most 16 profiles\n");
				return HP_EXIT_USAGE;
			}
			profiles[nprof++] = argv[++i];
		} else if (!strcmp(a, "--sample") && hp_parse_uint(v, 1, 3600, &sample_secs) == 0) {
			i++;
		} else if (!strcmp(a, "--join") || !strcmp(a, "--stall")) {
			char *e;
			double d = strtod(v, &e);
			if (*e || d < 0 || d > 1) {
				fprintf(stderr, "hotpathd plan: %s needs a fraction from 0 to 1\n", a);
				return HP_EXIT_USAGE;
			}
			*(!strcmp(a, "--join") ? &o.join_fraction : &o.stall_threshold) = d;
			i++;
		} else if (!strcmp(a, "--l1i")) {
			unsigned sz, wy, ln;
			if (sscanf(v, "%u,%u,%u", &sz, &wy, &ln) != 3 || !sz || !wy || !ln || sz % (wy * ln) ||
			    (ln & (ln - 1))) {
				fprintf(stderr, "hotpathd plan: --l1i needs SIZE,WAYS,LINE (e.g. 32768,8,64)\n");
				return HP_EXIT_USAGE;
			}
			o.l1i = (struct hp_cache_geometry){ sz, ln, wy };
			i++;
		} else if (!strcmp(a, "--fetch") && hp_parse_uint(v, 1, 4096, &u) == 0 && !(u & (u - 1))) {
			o.fetch_block = u;
			i++;
		} else if (!strcmp(a, "--max-pad") && hp_parse_uint(v, 0, 63, &u) == 0) {
			o.max_pad = u;
			i++;
		} else if (!strcmp(a, "--max-functions") && hp_parse_uint(v, 1, 4096, &u) == 0) {
			o.max_functions = u;
			i++;
		} else if (!strcmp(a, "--base")) {
			char *e;
			o.base = strtoull(v, &e, 0);
			if (*e || !o.base) {
				fprintf(stderr, "hotpathd plan: --base needs an address\n");
				return HP_EXIT_USAGE;
			}
			i++;
		} else if (!strcmp(a, "--code")) {
			code_path = argv[++i];
		} else if (!strcmp(a, "--second-pass")) {
			second = argv[++i];
		} else if (!strcmp(a, "--state-dir")) {
			state_dir = argv[++i];
		} else if (!strcmp(a, "--installed-base")) {
			char *e;
			installed_base = strtoull(v, &e, 0);
			if (*e || !installed_base) {
				fprintf(stderr, "hotpathd plan: --installed-base needs an address\n");
				return HP_EXIT_USAGE;
			}
			i++;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "hotpathd plan: bad option or value '%s' (see 'hotpathd plan --help')\n", a);
			return HP_EXIT_USAGE;
		} else if (npos < 3) {
			pos[npos++] = a;
		} else {
			fprintf(stderr, "hotpathd plan: too many arguments\n");
			return HP_EXIT_USAGE;
		}
	}
	if (npos < 1) {
		fputs(plan_usage, stderr);
		return HP_EXIT_USAGE;
	}
	need = !strcmp(pos[0], "kernel") ? 2 : (!strcmp(pos[0], "elf") || !strcmp(pos[0], "pid")) ? 3 : 0;
	if (!need || npos != need) {
		fprintf(stderr, "hotpathd plan: expected kernel ROOT, pid PID ROOT or elf PATH ROOT\n");
		return HP_EXIT_USAGE;
	}
	if (second && (nprof != 1 || sample_secs)) {
		fprintf(stderr, "hotpathd plan: --second-pass takes exactly one --profile: the counts on the copy\n");
		return HP_EXIT_USAGE;
	}
	if (sample_secs && need != 2) {
		fprintf(stderr, "hotpathd plan: --sample is for the kernel; give --profile for processes and files\n");
		return HP_EXIT_USAGE;
	}
	struct hp_open_opts oo = { .quiet = true };
	int r;
	if (need == 2)
		r = hp_model_open_kernel(&oo, &m, err, sizeof(err));
	else if (!strcmp(pos[0], "elf"))
		r = hp_model_open_elf(pos[1], &oo, &m, err, sizeof(err));
	else {
		unsigned pid;
		if (hp_parse_uint(pos[1], 1, 0x7fffffff, &pid) < 0) {
			fprintf(stderr, "hotpathd plan: PID must be a positive number\n");
			return HP_EXIT_USAGE;
		}
		plan_pid = (int)pid;
		/* The code as planned: the original bytes under installed copies' patches. */
		struct hp_byte_patch *bp = NULL;
		size_t nbp = 0;
		hp_installed_patches(state_dir, (int)pid, &bp, &nbp);
		oo.overlay = bp;
		oo.noverlay = nbp;
		r = hp_model_open_pid((int)pid, &oo, &m, err, sizeof(err));
		free(bp);
	}
	if (r < 0) {
		fprintf(stderr, "hotpathd plan: %s\n", err);
		return HP_EXIT_ERROR;
	}
	const struct hp_module *mod;
	bool amb = false;
	const struct hp_function *root = hp_model_find(m, pos[need - 1], &mod, &amb);
	if (!root) {
		fprintf(stderr, "hotpathd plan: %s: %s\n", pos[need - 1],
			amb ? "ambiguous name (use module:name)" : "no such function");
		rc = HP_EXIT_NOT_FOUND;
		goto out;
	}
	const struct hp_profile *use = NULL;
	if (second) {
		/* The installed plan, made again; then the copy's counts mapped back. */
		if (read_text(second, &text, &tlen, err, sizeof(err)) < 0 ||
		    hp_plan_remake(m, text, tlen, &first_prof, &first, err, sizeof(err)) < 0) {
			fprintf(stderr, "hotpathd plan: %s\n", err);
			goto out;
		}
		if (first.members[0].fn != root) {
			fprintf(stderr, "hotpathd plan: the installed plan's root is %s, not %s\n",
				first.members[0].fn->name, root->name);
			rc = HP_EXIT_USAGE;
			goto out;
		}
		free(text);
		text = NULL;
		if (read_text(profiles[0], &text, &tlen, err, sizeof(err)) < 0 ||
		    hp_profile_under_root(&first, installed_base ? installed_base : first.base, text, tlen, &prof[0],
					  err, sizeof(err)) < 0) {
			fprintf(stderr, "hotpathd plan: %s\n", err);
			goto out;
		}
		uint64_t base = o.base;
		o = first.opts;
		o.base = base;
		nprof = 0;
		use = &prof[0];
	}
	for (i = 0; i < nprof; i++) {
		char path[4096];
		double wgt = 1;
		snprintf(path, sizeof(path), "%s", profiles[i]);
		char *colon = strrchr(path, ':');
		if (colon && colon[1]) {
			char *e;
			double d = strtod(colon + 1, &e);
			if (!*e && d > 0) {
				wgt = d;
				*colon = 0;
			}
		}
		if (hp_profile_read(path, m, &prof[i], err, sizeof(err)) < 0) {
			fprintf(stderr, "hotpathd plan: %s\n", err);
			goto out;
		}
		prof[i].weight = wgt;
	}
	if (sample_secs) {
		if (sample_profile(m, sample_secs, &prof[0], err, sizeof(err)) < 0) {
			fprintf(stderr, "hotpathd plan: %s\n", err);
			goto out;
		}
		nprof = 1;
	}
	if (nprof == 1)
		use = &prof[0];
	else if (nprof > 1) {
		if (hp_profile_merge(prof, (size_t)nprof, &merged) < 0) {
			fprintf(stderr,
				"hotpathd plan: the profiles cannot be merged (out of memory, or their scopes "
				"differ)\n");
			goto out;
		}
		use = &merged;
	}
	if (hp_plan_make(m, root, mod, use, &o, &plan, err, sizeof(err)) < 0) {
		fprintf(stderr, "hotpathd plan: %s\n", err);
		goto out;
	}
	struct rw w = { .json = json };
	if (json)
		json_init(&w.j, stdout);
	write_plan(&w, m, &plan, root, plan_pid);
	if (code_path && plan.code) {
		FILE *fp = fopen(code_path, "wb");
		if (!fp || fwrite(plan.code, 1, plan.code_len, fp) != plan.code_len) {
			fprintf(stderr, "hotpathd plan: cannot write %s: %s\n", code_path, strerror(errno));
			if (fp)
				fclose(fp);
			goto out;
		}
		fclose(fp);
	}
	rc = plan.status == HP_PLAN_OK ? HP_EXIT_OK : plan.status == HP_PLAN_REFUSED ? HP_EXIT_ERROR : 4;
out:
	free(text);
	hp_plan_free(&first);
	hp_profile_free(&first_prof);
	hp_plan_free(&plan);
	for (i = 0; i < 16; i++)
		hp_profile_free(&prof[i]);
	hp_profile_free(&merged);
	hp_model_free(m);
	return rc;
}
