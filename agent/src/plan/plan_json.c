// SPDX-License-Identifier: Apache-2.0
/*
 * A plan's report: the JSON document `hotpathd plan --json` prints and the
 * daemon answers MakePlan with, and the indented text form of the same walk
 * (text leaves out the bulk: per-set cells, chain tables, the code's bytes
 * and listing). One writer for both callers, so the two are byte for byte
 * the same; the format is in docs/agent-cli.md ("hotpathd plan"), its
 * shape in proto/hotpath/v1/plan.schema.json: change both with this file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/hex.h"
#include "base/json.h"
#include "host/processes.h"
#include "isa/isa.h"
#include "host/procmaps.h"
#include "plan/plan.h"
#include "plan/plan_json.h"
#include "plan/static_calls.h"
#include "plan/static_keys.h"
#include "plan/profile.h"
#include "target/target.h"
#include "target/target_elf.h"

struct rw {
	FILE *fp;
	bool json;
	struct json j;
	int depth;
	bool in_item;
};

static void rw_indent(struct rw *w)
{
	for (int i = 0; i < w->depth; i++)
		fputs("  ", w->fp);
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
		fprintf(w->fp, "%s:\n", key);
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
	fprintf(w->fp, "%s:\n", key);
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
	fputs("-", w->fp);
	w->in_item = true;
}

static void rw_item_end(struct rw *w)
{
	if (w->json) {
		json_obj_end(&w->j);
		return;
	}
	fputs("\n", w->fp);
	w->in_item = false;
}

static void rw_str(struct rw *w, const char *k, const char *v)
{
	if (w->json) {
		json_kstr(&w->j, k, v);
	} else if (w->in_item) {
		fprintf(w->fp, " %s=%s", k, v ? v : "-");
	} else {
		rw_indent(w);
		fprintf(w->fp, "%s: %s\n", k, v ? v : "-");
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

/* A profile function's "blocks" [{offset, count}]; with ran_only, those
 * that ran. */
static void write_blocks(struct rw *w, const struct hp_prof_fn *pf, bool ran_only)
{
	rw_arr(w, "blocks");
	for (size_t b = 0; b < pf->nblocks; b++) {
		if (ran_only && !(pf->blocks[b].count > 0))
			continue;
		rw_item(w);
		rw_u64(w, "offset", pf->blocks[b].offset);
		rw_num(w, "count", pf->blocks[b].count, 3);
		rw_item_end(w);
	}
	rw_arr_end(w);
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
		write_blocks(w, pf, false);
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
	/* The rest of the profile's hot code, which the plan leaves where it is
	 * (non-members of the hot set's module, other modules: a library's
	 * allocator and printf): a later plan given this one as --resident
	 * places its copy against it. Not read as counts to plan from. */
	rw_arr(w, "resident");
	for (size_t i = 0; i < pr->nfns; i++) {
		const struct hp_prof_fn *pf = &pr->fns[i];
		bool in_plan = false;
		for (size_t k = 0; k < p->nmembers + p->nkept && !in_plan; k++)
			in_plan = (k < p->nmembers ? p->members[k].fn : p->kept[k - p->nmembers].fn)->addr == pf->addr;
		if (in_plan)
			continue;
		rw_item(w);
		rw_str(w, "name", pf->name);
		rw_hex(w, "address", pf->addr);
		write_blocks(w, pf, true);
		rw_item_end(w);
	}
	rw_arr_end(w);
	rw_obj_end(w);
}

/* The root's module as an installer checks it: its file's GNU build id
 * (for a process, the file the process maps) and where it is loaded. */
/* Names for branch and call targets in the listing: a block of the copy
 * ("copy:fn+0xoff"), else the function of the target's code ("fn+0xoff"). */
struct symctx {
	struct hp_model *m;
	const struct hp_plan *p;
};

static bool symbolize(void *ctx, uint64_t addr, char *buf, size_t len)
{
	const struct symctx *sc = ctx;
	const struct hp_plan *p = sc->p;
	const struct hp_module *mod;
	const struct hp_function *f;

	if (addr >= p->base && addr < p->base + p->code_len) {
		for (size_t i = 0; i < p->nmembers; i++) {
			const struct hp_plan_member *mb = &p->members[i];
			for (uint32_t k = 0; k < mb->nblocks; k++)
				if (mb->blocks[k].new_addr == addr && mb->blocks[k].new_size) {
					uint32_t off =
						mb->mod->blocks[mb->fn->block_start + mb->blocks[k].index].offset;
					if (off)
						snprintf(buf, len, "copy:%s+0x%x", mb->fn->name, off);
					else
						snprintf(buf, len, "copy:%s", mb->fn->name);
					return true;
				}
		}
		return false;
	}
	if (!(f = hp_model_lookup(sc->m, addr, &mod)))
		return false;
	if (addr == f->addr)
		snprintf(buf, len, "%s", f->name);
	else
		snprintf(buf, len, "%s+0x%" PRIx64, f->name, addr - f->addr);
	return true;
}

/* code.listing: the emitted instructions, each with its origin (listing.c). */
static void write_listing(struct rw *w, struct hp_model *m, const struct hp_plan *p)
{
	struct hp_listing l;
	struct symctx sc = { m, p };
	char err[200], text[256], hex[64], from[300];

	if (hp_plan_listing(m, p, &l, err, sizeof(err)) < 0) {
		rw_str(w, "listing_error", err);
		return;
	}
	rw_arr(w, "listing");
	for (size_t i = 0; i < l.n; i++) {
		const struct hp_listing_insn *in = &l.insns[i];
		const uint8_t *c = p->code + (in->addr - p->base);
		if (hp_isa_format(c, in->len, in->addr, text, sizeof(text), symbolize, &sc) < 0)
			snprintf(text, sizeof(text), "(bad)");
		hp_hex(c, in->len < 31 ? in->len : 31, hex);
		if (in->origin == HP_LISTING_ORIGINAL)
			snprintf(from, sizeof(from), "%s+0x%x", p->members[in->member].fn->name, in->offset);
		else
			snprintf(from, sizeof(from), "%s", in->origin == HP_LISTING_ADDED ? "added" : "padding");
		rw_item(w);
		rw_hex(w, "address", in->addr);
		rw_str(w, "bytes", hex);
		rw_str(w, "text", text);
		rw_str(w, "from", from);
		rw_item_end(w);
	}
	rw_arr_end(w);
	hp_listing_free(&l);
}

void hp_plan_module_build_id(const struct hp_model *m, const struct hp_module *mod, int pid, uint64_t addr,
			     char out[65])
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

	if (!root && p->nmembers)
		root = p->members[0].fn; /* a hot set's: the first laid out */
	rw_obj(w, NULL);
	rw_str(w, "root", root ? root->name : "(hot set)");
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
		hp_plan_module_build_id(m, p->members[0].mod, pid, root->addr, bid);
		if (m->kind == HP_TARGET_PID) {
			rw_u64(w, "pid", (uint64_t)pid);
			if (hp_process_start_time(pid, &start) == 0)
				rw_u64(w, "start_time", start);
		}
		rw_str(w, "module", p->members[0].mod->name);
		rw_hex(w, "module_base", p->members[0].mod->base);
		/* A kernel plan also says where vmlinux was: KASLR and the module loader
		 * move vmlinux and each module apart on another boot or host, and the
		 * install places a module's copy only where what it reaches moved with it
		 * (replace/install.h, hp_iplan_kernel_moved). */
		for (size_t i = 0; m->kind == HP_TARGET_KERNEL && i < m->nmods; i++)
			if (!strcmp(m->mods[i].name, "vmlinux"))
				rw_hex(w, "kernel_text", m->mods[i].base);
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
	rw_num(w, "min_caller_share", p->opts.min_caller_share, 4);
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
	rw_str(w, "block_layout", hp_block_layout_name(p->opts.block_layout));
	if (p->opts.hot_set) {
		rw_bool(w, "hot_set", true);
		rw_num(w, "hot_share", p->opts.hot_share, 4);
		rw_num(w, "cold_rate", p->opts.cold_rate, 4);
		rw_num(w, "cold_below", p->cold_below, 3);
	}
	if (p->opts.icall_values)
		rw_num(w, "promote_share", p->opts.promote_share, 4);
	rw_obj_end(w);
	if (p->status != HP_PLAN_OK && p->status != HP_PLAN_REFUSED) {
		rw_obj_end(w);
		return;
	}
	/* The group: KernInst Figure 3's table. */
	uint64_t th = 0, tc = 0, tj = 0, tnh = 0, tnc = 0;
	double tkb = 0, tka = 0;
	rw_arr(w, "group");
	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		rw_item(w);
		rw_str(w, "function", mb->fn->name);
		rw_hex(w, "address", mb->fn->addr);
		rw_hex(w, "new_address", mb->new_entry);
		rw_str(w, "called_from", mb->parent ? mb->parent->name : p->members[0].fn->name);
		rw_num(w, "calls", mb->calls, 1);
		rw_u64(w, "blocks", mb->fn->nblocks);
		rw_u64(w, "hot_blocks", mb->nhot);
		rw_u64(w, "hot_bytes", mb->hot_bytes);
		rw_u64(w, "chains", mb->nchains);
		rw_u64(w, "cold_bytes", mb->cold_bytes);
		rw_u64(w, "jump_table_bytes", mb->jt_bytes);
		rw_str(w, "block_layout", hp_block_layout_name(mb->layout));
		rw_num(w, "taken_branches_before", mb->taken_before, 1);
		rw_num(w, "taken_branches_after", mb->taken_after, 1);
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
			/* Its jump-label sites: the installer reads them as the
			 * digest saw them (their JMP form), whatever their keys. */
			const struct hp_static_branch *ks;
			size_t nks = hp_key_sites_in(m, mb->fn->addr, mb->fn->addr + mb->fn->size, &ks);
			rw_arr(w, "jump_labels");
			for (size_t k = 0; k < nks; k++) {
				rw_item(w);
				rw_u64(w, "offset", ks[k].code - mb->fn->addr);
				rw_hex(w, "target", ks[k].target);
				rw_item_end(w);
			}
			rw_arr_end(w);
			/* Its static call sites: the installer reads them in their
			 * canonical form too, whatever the calls are set to; the copy
			 * calls each one's trampoline. */
			const struct hp_static_call *cs;
			size_t ncs = hp_call_sites_in(m, mb->fn->addr, mb->fn->addr + mb->fn->size, &cs);
			rw_arr(w, "static_calls");
			for (size_t k = 0; k < ncs; k++) {
				if (!hp_call_site_movable(m, cs[k].code))
					continue;
				rw_item(w);
				rw_u64(w, "offset", cs[k].code - mb->fn->addr);
				rw_bool(w, "tail", cs[k].tail);
				rw_hex(w, "trampoline", cs[k].tramp);
				rw_item_end(w);
			}
			rw_arr_end(w);
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
		tkb += mb->taken_before;
		tka += mb->taken_after;
	}
	rw_arr_end(w);
	rw_obj(w, "totals");
	rw_u64(w, "functions", p->nmembers);
	rw_u64(w, "hot_bytes", th);
	rw_u64(w, "cold_bytes", tc);
	rw_u64(w, "jump_table_bytes", tj);
	rw_u64(w, "new_hot_bytes", tnh);
	rw_u64(w, "new_cold_bytes", tnc);
	rw_num(w, "taken_branches_before", tkb, 1);
	rw_num(w, "taken_branches_after", tka, 1);
	rw_u64(w, "padding_bytes", p->pad_bytes);
	rw_u64(w, "inverted_branches", p->inverted);
	rw_u64(w, "removed_jumps", p->removed_jumps);
	rw_u64(w, "added_jumps", p->added_jumps);
	rw_u64(w, "key_reads", p->key_reads);
	rw_u64(w, "promoted_calls", p->npromoted);
	rw_u64(w, "trampoline_calls", p->trampoline_calls);
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
		const struct hp_plan_icall *ic = &p->icalls[i];
		if (!ic->measured_calls && !ic->ntargets) {
			rw_str(w, "observed_callees", "not measured");
		} else {
			/* The value profile it was planned from, and the promotion. */
			rw_num(w, "measured_calls", ic->measured_calls, 1);
			rw_arr(w, "observed_callees");
			for (uint32_t t = 0; t < ic->ntargets; t++) {
				rw_item(w);
				rw_str(w, "function", ic->targets[t].function);
				rw_num(w, "count", ic->targets[t].count, 1);
				rw_item_end(w);
			}
			rw_arr_end(w);
		}
		if (ic->promoted) {
			rw_obj(w, "promoted");
			rw_str(w, "target", ic->promoted->name);
			rw_num(w, "share", ic->measured_calls > 0 ? ic->targets[0].count / ic->measured_calls : 0, 4);
			rw_hex(w, "new_address", ic->new_addr);
			rw_u64(w, "bytes", ic->new_len);
			rw_hex(w, "slot", ic->slot);
			rw_obj_end(w);
		} else if (ic->why_not) {
			rw_str(w, "not_promoted", ic->why_not);
		}
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
			rw_str(w, "kind",
			       p->relocs[i].kind == HP_RELOC_ABS64  ? "abs64" :
			       p->relocs[i].kind == HP_RELOC_CODE64 ? "code64" :
								      "rel32");
			rw_item_end(w);
		}
		rw_arr_end(w);
		char *hex = malloc(p->code_len * 2 + 1);
		if (hex)
			hp_hex(p->code, p->code_len, hex);
		rw_str(w, "hex", hex ? hex : "");
		free(hex);
		write_listing(w, m, p);
	}
	if (p->unwind) {
		/* The copy's .eh_frame (a process's) or position map (the kernel's,
		 * kernel_map.c), to install at base + offset with the code. */
		bool kernel = m->kind == HP_TARGET_KERNEL;
		rw_obj(w, "unwind");
		rw_str(w, "format", kernel ? "kernel-map" : "eh_frame");
		rw_u64(w, "offset", p->unwind_off);
		rw_u64(w, "bytes", p->unwind_len);
		rw_u64(w, kernel ? "functions" : "fdes", p->unwind_fdes);
		if (w->json) {
			char *hex = malloc(p->unwind_len * 2 + 1);
			if (hex)
				hp_hex(p->unwind, p->unwind_len, hex);
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
			fprintf(w->fp, "- %s\n", p->notes[i]);
		}
	}
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	for (int i = 0; kf && i < kf->nnotes; i++) {
		if (w->json)
			json_str(&w->j, kf->notes[i]);
		else {
			rw_indent(w);
			fprintf(w->fp, "- %s\n", kf->notes[i]);
		}
	}
	rw_arr_end(w);
	rw_num(w, "plan_seconds", p->seconds, 4);
	write_profile(w, p);
	rw_obj_end(w);
}

void hp_plan_report(FILE *fp, bool json, struct hp_model *m, const struct hp_plan *p, const struct hp_function *root,
		    int pid)
{
	struct rw w = { .fp = fp, .json = json };

	if (json)
		json_init(&w.j, fp);
	write_plan(&w, m, p, root, pid);
}

int hp_plan_json(struct hp_model *m, const struct hp_plan *p, const struct hp_function *root, int pid, char **out,
		 size_t *len)
{
	FILE *fp = open_memstream(out, len);

	if (!fp)
		return -ENOMEM;
	hp_plan_report(fp, true, m, p, root, pid);
	if (fclose(fp) != 0 || !*out) {
		free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

int hp_plan_code_sha256(const struct hp_plan *p, char out[65])
{
	struct hp_code_image ci;

	out[0] = 0;
	if (!p->verified)
		return -EINVAL;
	hp_plan_code_image(p, &ci);
	return hp_code_hash(&ci, out);
}
