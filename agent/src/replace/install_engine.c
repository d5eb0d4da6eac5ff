// SPDX-License-Identifier: Apache-2.0
/*
 * Installing (install.h), written against the target interface only;
 * reverting is revert.c's, the journals read back journal_state.c's,
 * the listing installed.c's. One journal per install, in STATE_DIR/replace/:
 *   ID.plan.json   the plan as installed (for listing, measuring and the
 *                  second pass)
 *   ID.journal     records, each durable before its change is made:
 *     begin      who and what: pid, start time, root, module, build id,
 *                code hash, address shift
 *     undo       a change to existing bytes with the original bytes
 *                (scratch bytes, the entry, a call site)
 *     heap       the code heap about to be mapped (address, length);
 *     heap_mapped, unwind_register (intent), unwind_registered, installed,
 *     revert, restored, unwind_deregister (intent), unwind_deregistered,
 *     heap_released, heap_kept,
 *     reverted (the journal is then removed).
 * Recovery never trusts a record alone: a change counts as made when the
 * live bytes are its new bytes, as undone when they are the original ones.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/grow.h"
#include "host/processes.h"
#include "isa/isa.h"
#include "replace/install.h"
#include "replace/install_op.h"
#include "replace/journal.h"
#include "replace/journal_state.h"
#include "replace/kernel_syms.h"
#include "replace/patch_target.h"

#define REACH      ((int64_t)1 << 31)
#define HEAP_ALIGN 4096
/* A plan's code may start inside a page (a hot set's place pass picks where
 * in it, for the L1i sets): the heap starts at the page boundary before it,
 * so the code is that many bytes into the heap. */
#define LEAD(p)    ((p)->base & (HEAP_ALIGN - 1))
#define ORIGIN(p)  ((p)->base - LEAD(p))

const char *hp_install_step_name(enum hp_install_step s)
{
	static const char *const n[] = {
		"",      "checked", "journaled", "stopped",      "scratch",      "heap",        "unwind",
		"entry", "calls",   "installed", "revert_calls", "revert_entry", "revert_heap", "reverted"
	};
	return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "?";
}

/* The copy's address of an instruction boundary inside the root's entry
 * block (decoding the original and the copy side by side), or 0. */
static uint64_t map_pc(void *ctx, uint64_t pc)
{
	struct hp_op *x = ctx;
	const struct hp_imember *root = &x->p->members[0];
	uint64_t entry = root->addr + (uint64_t)x->delta;
	const struct hp_iblock *b0 = NULL;

	for (size_t i = 0; i < root->nblocks; i++)
		if (root->blocks[i].offset == 0)
			b0 = &root->blocks[i];
	/* An instrumented copy's blocks start with their counter: no
	 * instruction-for-instruction match; wait instead. */
	if (x->p->counters_len || !b0 || !b0->new_size || pc <= entry || pc >= entry + x->entry_block_len)
		return 0;
	uint64_t copy = b0->new_addr - ORIGIN(x->p);
	const uint8_t *c = x->image + copy;
	uint32_t oo = 0, co = 0;
	while (oo < x->entry_block_len && co < b0->new_size) {
		struct hp_isa_insn a, b;
		if (hp_isa_decode(x->entry_block + oo, x->entry_block_len - oo, entry + oo, &a) < 0 ||
		    hp_isa_decode(c + co, b0->new_size - co, x->heap.addr + copy + co, &b) < 0)
			return 0;
		if (a.cls != HP_IC_OTHER || b.cls != HP_IC_OTHER)
			return 0; /* the block's branch may be laid out otherwise: wait instead */
		oo += a.len;
		co += b.len;
		if (entry + oo == pc)
			return x->heap.addr + copy + co;
	}
	return 0;
}

/* How many members have their entry spliced: the root, or a hot set's every member. */
static size_t spliced(const struct hp_iplan *p)
{
	return p->hot_set ? p->nmembers : 1;
}

static int check_plan(struct hp_op *x, char *err, size_t errlen)
{
	const struct hp_iplan *p = x->p;
	const struct hp_install_opts *o = x->o;
	int r;

	if (!p->hash[0] || strcmp(p->hash, p->computed)) {
		snprintf(err, errlen,
			 "the plan was altered: its code hashes to %s, the plan states %s; only the code as planned "
			 "(and approved) is installed",
			 p->computed, p->hash[0] ? p->hash : "no hash");
		return -EBADMSG;
	}
	if (o->approved_hash && strcmp(o->approved_hash, p->computed)) {
		snprintf(err, errlen, "the plan's code hash %s is not the approved hash %s", p->computed,
			 o->approved_hash);
		return -EACCES;
	}
	if (o->approve && (r = o->approve(o->approve_ctx, p, err, errlen)) < 0)
		return r;
	/* The root's entry (a hot set's: every member's) takes a 5-byte jump:
	 * no other block may start in it. */
	for (size_t k = 0; k < spliced(p); k++) {
		const struct hp_imember *root = &p->members[k];
		if (root->size < 5) {
			snprintf(err, errlen, "%s is %u bytes long: too short for the jump to its copy", root->name,
				 root->size);
			return -EINVAL;
		}
		for (size_t i = 0; i < root->nblocks; i++)
			if (root->blocks[i].offset > 0 && root->blocks[i].offset < 5) {
				snprintf(err, errlen,
					 "%s has a block at +%u, inside the 5 bytes its entry jump would cover: a "
					 "thread running the original could branch into the jump",
					 root->name, root->blocks[i].offset);
				return -EINVAL;
			}
	}
	return 0;
}

/* The original bytes of [addr, addr + len) under the other installs' writes, into buf. */
static void others_original(const struct hp_op *x, uint64_t addr, uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < x->nothers; i++) {
		const struct hp_jwrite *o = &x->others[i];
		for (uint8_t k = 0; k < o->len; k++)
			if (o->addr + k >= addr && o->addr + k < addr + len)
				buf[o->addr + k - addr] = o->orig[k];
	}
}

/* A member's jump-label sites in b (its bytes, read at addr + delta) put
 * in their JMP form, as the planner's reader showed them for the digest:
 * the kernel flips them with their keys, which changes nothing the copy
 * does (it reads the keys). A site that is neither its NOP nor its JMP
 * stays as read, so the digest differs. 0 or -ENOMEM. */
static int jump_labels_canonical(const struct hp_imember *mb, int64_t delta, uint8_t *b)
{
	struct hp_static_branch *v;
	struct hp_static_branch_stats st;
	uint64_t *sites;

	if (!mb->njump_labels)
		return 0;
	v = calloc(mb->njump_labels, sizeof(*v));
	sites = calloc(mb->njump_labels, sizeof(*sites));
	if (!v || !sites) {
		free(v);
		free(sites);
		return -ENOMEM;
	}
	for (size_t k = 0; k < mb->njump_labels; k++)
		v[k] = (struct hp_static_branch){ .code = mb->jump_labels[k].code + (uint64_t)delta,
						  .target = mb->jump_labels[k].target + (uint64_t)delta };
	hp_static_branch_canonicalize(b, mb->addr + (uint64_t)delta, mb->size, v, mb->njump_labels, sites, &st);
	free(v);
	free(sites);
	return 0;
}
/* Likewise a member's static call sites, put in their canonical form (a
 * call or jump to the next byte): the kernel rewrites them whenever the
 * call is updated, which changes nothing the copy does (it calls the
 * trampoline). A site in none of the kernel's forms stays as read. 0 or
 * -ENOMEM. */
static int static_calls_canonical(const struct hp_imember *mb, int64_t delta, uint8_t *b)
{
	struct hp_static_call *v;
	struct hp_static_branch_stats st;
	uint64_t *sites;

	if (!mb->nstatic_calls)
		return 0;
	v = calloc(mb->nstatic_calls, sizeof(*v));
	sites = calloc(mb->nstatic_calls, sizeof(*sites));
	if (!v || !sites) {
		free(v);
		free(sites);
		return -ENOMEM;
	}
	for (size_t k = 0; k < mb->nstatic_calls; k++)
		v[k] = (struct hp_static_call){ .code = mb->static_calls[k].code + (uint64_t)delta,
						.tail = mb->static_calls[k].tail };
	hp_static_call_canonicalize(b, mb->addr + (uint64_t)delta, mb->size, v, mb->nstatic_calls, sites, &st);
	free(v);
	free(sites);
	return 0;
}

/* A kernel plan of a module: whether what its copy reaches moved as the module
 * did since it was planned (hp_iplan_kernel_moved), from the live kernel's
 * _text and the module's extent in /proc/modules. */
static int kernel_moved(struct hp_op *x, char *err, size_t errlen)
{
	const struct hp_iplan *p = x->p;
	uint64_t addr = 0, size = 0;

	if (!p->module || !strcmp(p->module, "vmlinux"))
		return 0;
	uint64_t text = hp_ksyms_live_text();
	if (!p->kernel_text || !text || (int64_t)(text - p->kernel_text) != x->delta)
		hp_ksyms_live_module_span(p->module, &addr, &size);
	return hp_iplan_kernel_moved(p, x->delta, text, addr, size, err, errlen);
}

static int check_target(struct hp_op *x, char *err, size_t errlen)
{
	const struct hp_iplan *p = x->p;
	uint64_t bias;
	int r;

	if ((r = x->t.ops->module_base(&x->t, p->module, p->build_id, &bias, err, errlen)) < 0)
		return r == -ENOENT ? -ESTALE : r;
	x->delta = (int64_t)(bias - p->module_base);
	if (!strcmp(x->t.ops->kind, "kernel") && (r = kernel_moved(x, err, errlen)) < 0)
		return r;
	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_imember *mb = &p->members[i];
		uint8_t *b = malloc(mb->size + 1);
		char dg[65] = "";
		if (!b)
			return -ENOMEM;
		r = x->t.ops->read(&x->t, mb->addr + (uint64_t)x->delta, b, mb->size);
		if (r == 0) {
			/* The original bytes under the patches of what is installed
			 * (the caller's, and every journal's in this process). */
			hp_byte_patches_apply(x->o->orig, x->o->norig, mb->addr + (uint64_t)x->delta, b, mb->size);
			others_original(x, mb->addr + (uint64_t)x->delta, b, mb->size);
			r = jump_labels_canonical(mb, x->delta, b);
			if (r == 0)
				r = static_calls_canonical(mb, x->delta, b);
			hp_bytes_digest(b, mb->size, dg);
		}
		if (i == 0)
			memcpy(x->entry_block, b,
			       x->entry_block_len =
				       mb->size < sizeof(x->entry_block) ? mb->size : sizeof(x->entry_block));
		free(b);
		if (r < 0) {
			snprintf(err, errlen, "cannot read %s in %s: %s", mb->name, x->t.desc, strerror(-r));
			return r == -EIO ? -ESRCH : r;
		}
		if (strcmp(dg, mb->digest)) {
			snprintf(err, errlen,
				 "the plan is stale: %s in %s is not the code the plan was made from (its bytes, "
				 "with what is installed read as the original, hash to %.16s..., the plan's to "
				 "%.16s...): the target changed since planning",
				 mb->name, x->t.desc, dg, mb->digest);
			return -ESTALE;
		}
	}
	/* The entry block, for moving threads stopped inside the jump's bytes. */
	for (size_t i = 0; i < p->members[0].nblocks; i++)
		if (p->members[0].blocks[i].offset == 0 && p->members[0].blocks[i].size < x->entry_block_len)
			x->entry_block_len = p->members[0].blocks[i].size;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Direct call sites in the model (running addresses) of the n entries
 * (sorted): each site and the index in entries of the one it calls. A call
 * within the first 5 bytes of its own function is left alone: that
 * function's entry jump (of this install or a later one, e.g. counted
 * copies installed one by one) would cover part of it. */
static size_t call_sites(const struct hp_model *m, const uint64_t *entries, size_t nent, uint64_t **out,
			 uint32_t **which)
{
	size_t n = 0, cap = 0, cap2 = 0;
	*out = NULL;
	*which = NULL;
	for (size_t mi = 0; m && mi < m->nmods; mi++) {
		const struct hp_module *mod = &m->mods[mi];
		for (size_t c = 0; c < mod->ncalls; c++) {
			const uint64_t *e = bsearch(&mod->calls[c].target, entries, nent, sizeof(*entries), cmp_u64);
			if (!e)
				continue;
			/* The function owning the call: find by index ranges. */
			const struct hp_function *f = NULL;
			size_t lo = 0, hi = mod->nfuncs;
			while (lo < hi) {
				size_t mid = (lo + hi) / 2;
				const struct hp_function *g = &mod->funcs[mid];
				if (c < g->call_start)
					hi = mid;
				else if (c >= g->call_start + g->ncalls)
					lo = mid + 1;
				else {
					f = g;
					break;
				}
			}
			if (!f || mod->calls[c].site < 5)
				continue;
			uint64_t site = f->addr + mod->calls[c].site;
			if (HP_GROW(*out, cap, n + 1) || HP_GROW(*which, cap2, n + 1))
				return n;
			(*which)[n] = (uint32_t)(e - entries);
			(*out)[n++] = site;
		}
	}
	return n;
}

/* An entry written over another install's write of the same bytes keeps
 * that install's original bytes; one that would cover another's only in
 * part is refused (a revert of either would leave neither whole). */
static int entry_under_others(struct hp_op *x, struct hp_undo *u, const char *name, char *err, size_t errlen)
{
	if (hp_op_under_others(x, u) == 0)
		return 0;
	snprintf(err, errlen,
		 "%s's entry jump at 0x%" PRIx64
		 " would cover part of bytes another install patched: revert that "
		 "install first",
		 name, u->addr);
	hp_undo_free(u);
	return -EBUSY;
}

/* The install stopped after heap_place and before heap_map: give the place back (the kernel's
 * module allocated it already; a process's place is only an address). */
static void unplace(struct hp_op *x)
{
	if (x->t.ops->heap_unplace)
		x->t.ops->heap_unplace(&x->t, x->heap.addr);
}

static int install_inner(struct hp_op *x, char *err, size_t errlen)
{
	const struct hp_iplan *p = x->p;
	const struct hp_install_opts *o = x->o;
	struct hp_install_result *res = x->res;
	uint64_t entry = p->members[0].addr + (uint64_t)x->delta, *sites = NULL;
	size_t nsites = 0, nent = spliced(p);
	uint32_t *site_to = NULL; /* the member each site calls */
	double t0 = hp_now();
	int r;

	if ((r = x->t.ops->quiesce(&x->t, err, errlen)) < 0)
		return r;
	res->stopped_ms = x->t.quiesce_seconds * 1e3;
	hp_op_step(x, HP_STEP_STOPPED, x->t.desc);
	/* Scratch bytes the target needs to work. */
	if ((r = x->t.ops->prepare_scratch(&x->t, &x->scratch, err, errlen)) < 0)
		return r;
	if (x->scratch.big_len || x->scratch.len) {
		if ((r = hp_op_record(x, hp_undo_record(&x->scratch), err, errlen)) < 0)
			return r;
		x->scratch_applied = true; /* from here on it may be written */
		if ((r = x->t.ops->apply(&x->t, &x->scratch, NULL, NULL, err, errlen)) < 0)
			return r;
	}
	hp_op_step(x, HP_STEP_SCRATCH, NULL);
	/* The heap: within rel32 reach of every reference out of the copy and
	 * of the entry's jump; call sites join where they fit. */
	x->image_len = LEAD(p) + (p->unwind_len ? p->unwind_off + p->unwind_len : p->code_len);
	x->heap.len = (x->image_len + HEAP_ALIGN - 1) & ~(size_t)(HEAP_ALIGN - 1);
	if (p->counters_len) {
		/* The counter area right after the code, where its RIP-relative increments reach it. */
		if (p->counters_off < x->heap.len || p->counters_off % HEAP_ALIGN || p->counters_len % HEAP_ALIGN) {
			snprintf(err, errlen,
				 "the counter area at +0x%" PRIx64 " overlaps the copy or is not page aligned",
				 p->counters_off);
			return -EINVAL;
		}
		x->heap.rw_off = p->counters_off;
		x->heap.len = p->counters_off + p->counters_len;
	}
	int64_t lo = INT64_MIN, hi = INT64_MAX;
	int64_t span = (int64_t)x->heap.len + (1 << 20);
#define NEED(a)                                 \
	do {                                    \
		int64_t a_ = (int64_t)(a);      \
		if (a_ - REACH + span > lo)     \
			lo = a_ - REACH + span; \
		if (a_ + REACH - span < hi)     \
			hi = a_ + REACH - span; \
	} while (0)
	/* The spliced entries (running addresses), sorted, and their members. */
	uint64_t *ent = malloc((nent + 1) * sizeof(*ent)), *ent_sorted = malloc((nent + 1) * sizeof(*ent));
	uint32_t *ent_member = malloc((nent + 1) * sizeof(*ent_member));
	if (!ent || !ent_sorted || !ent_member) {
		free(ent);
		free(ent_sorted);
		free(ent_member);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t k = 0; k < nent; k++) {
		ent[k] = ent_sorted[k] = p->members[k].addr + (uint64_t)x->delta;
		NEED(ent[k]);
	}
	qsort(ent_sorted, nent, sizeof(*ent_sorted), cmp_u64);
	for (size_t k = 0; k < nent; k++)
		for (size_t j = 0; j < nent; j++)
			if (ent[j] == ent_sorted[k])
				ent_member[k] = (uint32_t)j;
	for (size_t i = 0; i < p->nrelocs; i++)
		if (p->relocs[i].kind != HP_RELOC_CODE64) /* in the code itself: it moves with it */
			NEED(p->relocs[i].target + (uint64_t)x->delta);
	/* A process's addresses are the lower half; the kernel's the upper,
	 * negative here, where the range is signed (heap_place compares so). */
	if (lo < 0 && strcmp(x->t.ops->kind, "kernel"))
		lo = 0;
	if (o->patch_calls && o->m) {
		uint64_t *all = NULL;
		uint32_t *to = NULL;
		size_t nall = call_sites(o->m, ent_sorted, nent, &all, &to);
		sites = malloc((nall + 1) * sizeof(*sites));
		site_to = malloc((nall + 1) * sizeof(*site_to));
		for (size_t i = 0; sites && site_to && i < nall; i++) {
			/* Inside an entry's jump, or out of reach: left calling the entry. */
			const uint64_t *in = NULL;
			for (size_t k = 0; k < nent && !in; k++)
				if (all[i] + 5 > ent_sorted[k] && all[i] < ent_sorted[k] + 5)
					in = &ent_sorted[k];
			if (in || (int64_t)all[i] - REACH + span > hi || (int64_t)all[i] + REACH - span < lo) {
				res->call_sites_skipped++;
				continue;
			}
			site_to[nsites] = ent_member[to[i]];
			sites[nsites++] = all[i];
		}
		free(all);
		free(to);
		for (size_t i = 0; i < nsites; i++)
			NEED(sites[i]);
	}
	free(ent_sorted);
	free(ent_member);
#undef NEED
	if (lo >= hi) {
		snprintf(err, errlen, "the copy's references span more than 2 GiB: no place reaches them all");
		free(sites);
		free(site_to);
		free(ent);
		return -ERANGE;
	}
	if ((r = x->t.ops->heap_place(&x->t, (uint64_t)lo, (uint64_t)hi, entry, x->heap.len, &x->heap.addr, err,
				      errlen)) < 0) {
		free(sites);
		free(site_to);
		free(ent);
		return r;
	}
	x->image = calloc(1, x->heap.len);
	struct hp_plan tmp = {
		.base = p->base, .code = p->code, .code_len = p->code_len, .relocs = p->relocs, .nrelocs = p->nrelocs
	};
	if (!x->image ||
	    hp_plan_relocate(&tmp, x->heap.addr + LEAD(p), x->delta, x->image + LEAD(p), err, errlen) < 0) {
		unplace(x);
		free(sites);
		free(site_to);
		free(ent);
		return x->image ? -ERANGE : -ENOMEM;
	}
	if (p->unwind_len)
		memcpy(x->image + LEAD(p) + p->unwind_off, p->unwind, p->unwind_len);
	/* A kernel copy's position map names the originals' addresses as planned:
	 * hotpath.ko reads their ORC entries there, so they move with the members. */
	if (p->unwind_len && !strcmp(x->t.ops->kind, "kernel") &&
	    hp_plan_kernel_map_rebase(x->image + LEAD(p) + p->unwind_off, p->unwind_len, x->delta) < 0) {
		unplace(x);
		free(sites);
		free(site_to);
		free(ent);
		snprintf(err, errlen, "the plan's position map (its unwind data) is malformed");
		return -EINVAL;
	}
	x->heap.data_len = p->unwind_len ? 1 : 0; /* asks for a data area; the target sizes it */
	x->heap.unwind = p->unwind_len ? x->heap.addr + LEAD(p) + p->unwind_off : 0;
	x->heap.unwind_len = p->unwind_len;
	if ((r = hp_op_record(x,
			      json_pack("{s:s, s:o, s:i, s:o, s:s}", "op", "heap", "addr", hp_jrec_hex(x->heap.addr),
					"len", (int)x->heap.len, "unwind", hp_jrec_hex(x->heap.unwind), "name",
					x->heap.name),
			      err, errlen)) < 0) {
		unplace(x);
		free(sites);
		free(site_to);
		free(ent);
		return r;
	}
	x->heap_mapped = true; /* may be, from here on */
	if ((r = x->t.ops->heap_map(&x->t, &x->heap, x->image, err, errlen)) < 0) {
		free(sites);
		free(site_to);
		free(ent);
		return r;
	}
	hp_op_record(x,
		     json_pack("{s:s, s:o, s:i}", "op", "heap_mapped", "data", hp_jrec_hex(x->heap.data), "data_len",
			       (int)x->heap.data_len),
		     err, errlen);
	res->heap = x->heap.addr;
	res->heap_len = x->heap.len;
	hp_op_step(x, HP_STEP_HEAP, NULL);
	/* Unwind data, registered where the process has an unwinder. */
	if (x->heap.unwind) {
		if ((r = hp_op_record(x, json_pack("{s:s}", "op", "unwind_register"), err, errlen)) < 0) {
			free(sites);
			free(site_to);
			free(ent);
			return r;
		}
		x->unwind_unknown = true;
		if ((r = x->t.ops->unwind_register(&x->t, &x->heap, err, errlen)) < 0) {
			/* Refused before the call was made (-EBUSY): nothing registered. */
			if (r == -EBUSY)
				x->unwind_unknown = false;
			free(sites);
			free(site_to);
			free(ent);
			return r;
		}
		x->unwind_unknown = false;
		hp_op_record(
			x, json_pack("{s:s, s:b}", "op", "unwind_registered", "registered", x->heap.unwind_registered),
			err, errlen);
		res->unwind_registered = x->heap.unwind_registered;
		bool kernel = !strcmp(x->t.ops->kind, "kernel");
		snprintf(res->unwind_note, sizeof(res->unwind_note), "%s",
			 kernel                    ? (x->heap.unwind_registered ?
							      "registered with hotpath.ko: the copy has the originals' ORC unwind entries "
							      "and names" :
							      "not registered: the kernel's ORC table is not in kallsyms "
							      "(CONFIG_KALLSYMS_ALL), so stack traces through the copy stop there") :
			 x->heap.unwind_registered ? "registered with the process's unwinder (__register_frame_info)" :
						     "the process has no unwinder loaded (libgcc_s): nothing to "
						     "register");
	} else {
		snprintf(res->unwind_note, sizeof(res->unwind_note), "the plan has no unwind data");
	}
	hp_op_step(x, HP_STEP_UNWIND, NULL);
	/* The entries: the root's (moving a thread stopped inside its jump's
	 * bytes), then a hot set's other members' (waiting for such a thread). */
	struct hp_undo u;
	uint64_t new_entry = x->heap.addr + (p->members[0].new_addr - ORIGIN(p));
	double te = hp_now();
	for (size_t k = 0; k < nent; k++) {
		uint64_t to = x->heap.addr + (p->members[k].new_addr - ORIGIN(p));
		if ((r = x->t.ops->prepare_entry(&x->t, ent[k], to, &u, err, errlen)) < 0 ||
		    (r = entry_under_others(x, &u, p->members[k].name, err, errlen)) < 0 ||
		    (r = hp_op_add_write(x, &u)) < 0 || (r = hp_op_record(x, hp_undo_record(&u), err, errlen)) < 0 ||
		    (r = x->t.ops->apply(&x->t, &x->writes[x->nwrites - 1], k ? NULL : map_pc, x, err, errlen)) < 0) {
			free(sites);
			free(site_to);
			free(ent);
			return r;
		}
		if (!k)
			res->entry_us = (hp_now() - te) * 1e6;
		res->entries++;
	}
	res->entry = entry;
	res->new_entry = new_entry;
	hp_op_step(x, HP_STEP_ENTRY, NULL);
	/* Call sites: journaled together, then written. */
	double tc = hp_now();
	size_t first = x->nwrites;
	json_t **recs = calloc(nsites + 1, sizeof(*recs));
	for (size_t i = 0; recs && i < nsites; i++) {
		uint64_t to = x->heap.addr + (p->members[site_to[i]].new_addr - ORIGIN(p));
		if (x->t.ops->prepare_call(&x->t, sites[i], to, &u, err, errlen) < 0 || hp_op_under_others(x, &u) < 0) {
			res->call_sites_skipped++;
			continue;
		}
		if ((r = hp_op_add_write(x, &u)) < 0)
			break;
		recs[x->nwrites - 1 - first] = hp_undo_record(&u);
	}
	free(sites);
	free(site_to);
	free(ent);
	if (!recs) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (x->nwrites > first) {
		r = hp_journal_append(&x->j, recs, x->nwrites - first, err, errlen);
		for (size_t i = 0; i < x->nwrites - first; i++)
			json_decref(recs[i]);
		if (r < 0) {
			/* Not journaled: not written. */
			for (size_t k = first; k < x->nwrites; k++)
				hp_undo_free(&x->writes[k]);
			x->nwrites = first;
			free(recs);
			return r;
		}
		for (size_t k = first; k < x->nwrites; k++)
			if ((r = x->t.ops->apply(&x->t, &x->writes[k], NULL, NULL, err, errlen)) < 0) {
				free(recs);
				return r;
			}
	}
	free(recs);
	res->call_sites = x->nwrites - first;
	res->calls_ms = (hp_now() - tc) * 1e3;
	hp_op_step(x, HP_STEP_CALLS, NULL);
	/* The scratch bytes go back; then the install is complete. */
	if (x->scratch_applied) {
		if ((r = x->t.ops->restore(&x->t, &x->scratch, err, errlen)) < 0)
			return r;
		x->scratch_applied = false;
	}
	if ((r = hp_op_record(x,
			      json_pack("{s:s, s:o, s:i}", "op", "installed", "new_entry", hp_jrec_hex(new_entry),
					"calls", (int)res->call_sites),
			      err, errlen)) < 0)
		return r;
	x->t.ops->resume(&x->t);
	res->pcs_moved = x->t.pcs_moved;
	res->waits = x->t.waits;
	res->total_ms = (hp_now() - t0) * 1e3;
	hp_op_step(x, HP_STEP_INSTALLED, NULL);
	return 0;
}

static void sanitize(const char *in, char *out, size_t len)
{
	size_t k = 0;
	for (; *in && k + 1 < len; in++)
		out[k++] = (*in >= 'a' && *in <= 'z') || (*in >= 'A' && *in <= 'Z') || (*in >= '0' && *in <= '9') ||
					   *in == '_' ?
				   *in :
				   '_';
	out[k] = 0;
}

bool hp_install_id_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (!n || n > HP_INSTALL_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '-' || s[i] == '_'))
			return false;
	return true;
}

int hp_install(const struct hp_iplan *p, const struct hp_install_opts *o, struct hp_install_result *res, char *err,
	       size_t errlen)
{
	struct hp_op x = { .p = p, .o = o, .res = res, .progress = o->progress, .pctx = o->progress_ctx };
	char dir[4096], name[128], rootname[24], path[4200];
	uint32_t rnd = 0;
	/* A kernel install is held by this process (its /dev/hotpath): its journal names it. */
	bool kernel = !strcmp(p->kind, "kernel");
	int pid = kernel ? getpid() : o->pid ? o->pid : p->pid, r;
	double t0 = hp_now();

	memset(res, 0, sizeof(*res));
	x.j.fd = -1;
	if (pid <= 0) {
		snprintf(err, errlen, "the plan names no process: give --pid");
		return -EINVAL;
	}
	if (o->id && !hp_install_id_valid(o->id)) {
		snprintf(err, errlen, "an install id is 1 to %d letters, digits, '-' or '_'", HP_INSTALL_ID_MAX);
		return -EINVAL;
	}
	if ((r = check_plan(&x, err, errlen)) < 0)
		return r;
	/* Heaps earlier reverts in this process kept are asked again first. */
	hp_release_kept(o->state_dir, pid, NULL, &res->kept_released, &res->kept_waiting);
	uint64_t planned_start = kernel ? 0 : o->pid && o->pid != p->pid ? 0 : p->start_time;
	if (kernel)
		hp_process_start_time(pid, &planned_start);
	if ((r = hp_op_open_target(&x, p->kind, pid, planned_start, err, errlen)) < 0)
		return r;
	snprintf(dir, sizeof(dir), "%s/replace", o->state_dir);
	/* One install per root and process. */
	uint64_t start = x.t.instance;
	bool installed = hp_journal_find(dir, pid, start, p->root, path, sizeof(path)) == 0;
	if (installed && !o->replace) {
		snprintf(err, errlen,
			 "%s is installed in %s already (%s): revert it first, or install a second pass with --replace",
			 p->root, x.t.desc, path);
		hp_op_free(&x);
		return -EEXIST;
	}
	/* A second pass reverts the installed copy first. (A heap a revert kept
	 * never blocks an install: asked again above, the install goes on whether
	 * it is freed or still kept, its journal staying for a later retry.) */
	if (installed) {
		struct hp_install_result rr;
		x.t.ops->close(&x.t);
		x.have_target = false;
		if ((r = hp_revert(o->state_dir, pid, p->root, &rr, o->progress, o->progress_ctx, err, errlen)) < 0)
			return r;
		res->kept_released += rr.kept_released; /* its revert asked again (its own kept heap counted) */
		res->kept_waiting = rr.kept_waiting;
		if ((r = hp_op_open_target(&x, p->kind, pid, start, err, errlen)) < 0)
			return r;
	}
	/* What the other installs in this process wrote: read as the original
	 * bytes by the plan's check, and written over (not under) by this one. */
	if ((r = hp_op_load_others(&x, dir, pid, start, NULL)) < 0) {
		snprintf(err, errlen, "cannot read the journals in %s: %s", dir, strerror(-r));
		hp_op_free(&x);
		return r;
	}
	if ((r = check_target(&x, err, errlen)) < 0) {
		hp_op_free(&x);
		return r;
	}
	res->check_ms = (hp_now() - t0) * 1e3;
	hp_op_step(&x, HP_STEP_CHECKED, x.t.desc);
	/* The journal and the plan, durable before anything changes. */
	if (o->id) {
		snprintf(res->id, sizeof(res->id), "%s", o->id);
	} else {
		getrandom(&rnd, sizeof(rnd), 0);
		sanitize(p->root, rootname, sizeof(rootname));
		snprintf(res->id, sizeof(res->id), "hotpath-%d-%s-%08x", pid, rootname, rnd);
	}
	snprintf(x.heap.name, sizeof(x.heap.name), "%s", res->id);
	snprintf(name, sizeof(name), "%s.journal", res->id);
	r = hp_journal_create(dir, name, &x.j, err, errlen);
	if (r == -EEXIST && o->id) {
		/* The id's earlier install, reverted with its heap kept: this one's
		 * journal and heap get a name of their own (the id stays the id). */
		getrandom(&rnd, sizeof(rnd), 0);
		snprintf(x.heap.name, sizeof(x.heap.name), "%.48s-%08x", res->id, rnd);
		snprintf(name, sizeof(name), "%s.journal", x.heap.name);
		r = hp_journal_create(dir, name, &x.j, err, errlen);
	}
	if (r < 0) {
		hp_op_free(&x);
		return r;
	}
	snprintf(res->journal, sizeof(res->journal), "%s", x.j.path);
	hp_journal_plan_path(x.j.path, path, sizeof(path));
	/* seq orders installs whose writes are the same bytes (a revert puts back the latest one under it). */
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	json_t *begin = json_pack(
		"{s:s, s:i, s:s, s:i, s:I, s:s, s:s, s:s, s:s, s:I, s:o, s:o, s:s, s:I}", "op", "begin", "version", 1,
		"id", res->id, "pid", pid, "start_time", (json_int_t)start, "root", p->root, "module", p->module,
		"build_id", p->build_id, "hash", p->computed, "delta", (json_int_t)x.delta, "entry",
		hp_jrec_hex(p->members[0].addr + (uint64_t)x.delta), "base", hp_jrec_hex(p->base), "target",
		x.t.ops->kind, "seq", (json_int_t)((int64_t)now.tv_sec * 1000000000 + now.tv_nsec));
	if ((r = hp_write_file_durably(path, p->text, p->text_len, err, errlen)) < 0 ||
	    (r = hp_op_record(&x, begin, err, errlen)) < 0) {
		unlink(path);
		hp_journal_retire(&x.j);
		hp_op_free(&x);
		return r;
	}
	hp_op_step(&x, HP_STEP_JOURNALED, x.j.path);
	r = install_inner(&x, err, errlen);
	if (r < 0) {
		/* Undo what was done, then say why it failed. */
		char e2[512];
		int alive = x.t.ops->alive(&x.t);
		int u = !alive ? 0 : x.t.ops->quiesce(&x.t, e2, sizeof(e2));
		if (alive && u == 0)
			u = hp_op_undo_all(&x, e2, sizeof(e2));
		x.t.ops->resume(&x.t);
		if (u == 0 && !(res->heap_kept)) {
			hp_op_record(&x, json_pack("{s:s}", "op", "reverted"), e2, sizeof(e2));
			hp_journal_retire(&x.j);
			unlink(path);
		} else if (u < 0) {
			size_t n = strlen(err);
			snprintf(err + n, errlen - n, "; undoing it failed too (%s): the journal %s keeps what to undo",
				 e2, x.j.path);
		}
		hp_op_free(&x);
		return r;
	}
	hp_op_free(&x);
	return 0;
}

int hp_install_members_original(const struct hp_iplan *p, const struct hp_install_opts *o, char *err, size_t errlen)
{
	struct hp_op x = { .p = p, .o = o };
	bool kernel = !strcmp(p->kind, "kernel");
	int pid = kernel ? getpid() : o->pid ? o->pid : p->pid, r;
	uint64_t start = 0;
	char dir[4096];

	x.j.fd = -1;
	if (kernel)
		hp_process_start_time(pid, &start);
	if ((r = hp_op_open_target(&x, p->kind, pid, start, err, errlen)) < 0)
		return r;
	snprintf(dir, sizeof(dir), "%s/replace", o->state_dir);
	if ((r = hp_op_load_others(&x, dir, pid, x.t.instance, NULL)) < 0)
		snprintf(err, errlen, "cannot read the journals in %s: %s", dir, strerror(-r));
	else
		r = check_target(&x, err, errlen);
	hp_op_free(&x);
	return r;
}
