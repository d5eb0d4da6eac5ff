// SPDX-License-Identifier: Apache-2.0
/*
 * The plan: bottleneck check, group, counts and edges, procedure splitting,
 * chains, ordering, then emission, verification and the I-cache figures.
 *  - Group: breadth-first over the direct calls and tail calls of blocks
 *    that ran; a callee joins when one of its blocks ran more than
 *    join_fraction times as often as the root was called; callees that
 *    cannot move are kept in place with their rule; then, with exact
 *    counts, members less than min_caller_share of whose calls come from
 *    the group leave it (drop_shared).
 *  - Edges: measured where the profile has them, else derived from block
 *    counts by flow conservation (KernInst section 4: exact where one edge
 *    of a block is unknown), the rest split by the targets' counts and
 *    marked estimated.
 *  - Splitting: blocks that ran are hot (the entry always; in a hot set,
 *    those that ran at least opts.cold_rate times per billion instructions
 *    of the work); every member's hot chunk comes before every cold chunk.
 *  - Order: root first, then the member most called from those placed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "host/caps.h"
#include "isa/isa.h"
#include "model/jumptable.h"
#include "plan/chains.h"
#include "plan/ext_tsp.h"
#include "plan/pass.h"
#include "plan/plan.h"
#include "plan/static_calls.h"
#include "target/target.h"

void hp_plan_opts_default(struct hp_plan_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->join_fraction = 0.05;
	o->min_caller_share = 0.5;
	o->stall_threshold = 0.10;
	o->fetch_block = 16;
	o->max_pad = 7;
	o->max_pad_share = 0.05;
	o->max_functions = 64;
	o->small_block = 8;
	o->hot_share = 1;
	o->cold_rate = 100;
	o->promote_share = 0.75;
}

static const char *const returns_twice[] = { "setjmp", "_setjmp",    "sigsetjmp", "__sigsetjmp",
					     "vfork",  "getcontext", "savectx",   NULL };

static bool name_is(const char *name, const char *const *list)
{
	size_t n = strlen(name);

	if (n > 4 && !strcmp(name + n - 4, "@plt"))
		n -= 4;
	for (; *list; list++)
		if (strlen(*list) == n && !strncmp(*list, name, n))
			return true;
	return false;
}

/* The copy's tables are reached only through the lea of each jump's
 * block (of a hoisted table: the leas of its address), which the emitter
 * retargets: any other rip-relative reference to a table would read the
 * original's. */
static const char *table_reference_rule(const struct hp_module *mod, const struct hp_function *f, const uint8_t *code,
					uint32_t off)
{
	struct hp_isa_detail d;

	if (hp_isa_decode_detail(code + off, f->size - off, f->addr + off, &d) < 0 || !d.has_rip_ref)
		return NULL;
	for (uint32_t t = 0; t < f->njt; t++) {
		const struct hp_jump_table *jt = &mod->jtables[f->jt_start + t];
		int u = hp_jt_base_of(mod, f, code, off); /* jumps of one table share its copy */
		if (d.rip_target >= jt->table_addr && d.rip_target < jt->table_addr + jt->nentries * jt->entry_size &&
		    (u < 0 || mod->jtables[f->jt_start + u].table_addr != jt->table_addr))
			return "switch or label table read by an instruction other than its jump's lea";
	}
	return NULL;
}

/* Is the indirect jump at off (in block b) a tail call through a pointer
 * loaded from memory? Its operand is a memory operand without an index
 * register, or a register its own block last wrote by such a load (a
 * function pointer in a struct or a global: "mov 0x80(%rax),%rcx; ...;
 * jmp *%rcx"). A switch's dispatch indexes its table (absolute entries) or
 * adds an entry to the table's base (relative ones). */
static bool pointer_tail_jump(const struct hp_function *f, const struct hp_block *b, const uint8_t *code, uint32_t off)
{
	struct hp_isa_detail d;
	uint32_t writer = UINT32_MAX;

	if (hp_isa_decode_detail(code + off, f->size - off, f->addr + off, &d) < 0 || d.nops < 1)
		return false;
	if (d.op[0].kind == HP_OP_MEM)
		return !d.op[0].index;
	if (d.op[0].kind != HP_OP_REG)
		return false;
	for (uint32_t o = b->offset; o < off;) {
		struct hp_isa_insn in;
		if (hp_isa_decode(code + o, f->size - o, f->addr + o, &in) < 0)
			return false;
		if (hp_isa_writes_reg(code + o, f->size - o, d.op[0].reg) != 0)
			writer = o;
		o += in.len;
	}
	struct hp_isa_detail w;
	return writer != UINT32_MAX &&
	       hp_isa_decode_detail(code + writer, f->size - writer, f->addr + writer, &w) == 0 &&
	       w.mnem == HP_MN_MOV && w.nops >= 2 && w.op[0].kind == HP_OP_REG && w.op[0].reg == d.op[0].reg &&
	       w.op[0].bytes == 8 && w.op[1].kind == HP_OP_MEM && !w.op[1].index;
}

/* A process's function with an indirect jump the model did not resolve as
 * a switch table moves when every such jump is a tail call through a
 * loaded pointer (pointer_tail_jump): from the copy it goes where it went
 * from the original. A pointer into the function itself would be an
 * address inside it stored in data, which keeps it by the rule before;
 * and were one ever reached, it would run the original code, intact but
 * for the entry jump's bytes. The offset of the first other indirect jump,
 * or UINT32_MAX when there is none. */
static uint32_t pointer_tail_jumps_only(const struct hp_module *mod, const struct hp_function *f, const uint8_t *code)
{
	for (uint32_t i = 0; i < f->nblocks; i++) {
		const struct hp_block *b = &mod->blocks[f->block_start + i];
		uint32_t off = b->offset, last = off;
		struct hp_isa_insn in = { 0 };
		for (uint32_t k = 0; k < b->ninsn && off < f->size; k++) {
			if (hp_isa_decode(code + off, f->size - off, f->addr + off, &in) < 0)
				return b->offset;
			last = off;
			off += in.len;
		}
		if (in.cls != HP_IC_JMP_IND)
			continue;
		bool table = false;
		for (uint32_t t = 0; t < f->njt && !table; t++)
			table = mod->jtables[f->jt_start + t].site == last;
		if (!table && !pointer_tail_jump(f, b, code, last))
			return last;
	}
	return UINT32_MAX;
}

const char *hp_plan_kept_rule(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
			      char *detail, size_t dlen)
{
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	uint8_t *code;
	const char *rule = NULL;

	detail[0] = 0;
	if (f->flags & HP_FN_PLT)
		return "PLT stub: the callee is in another object";
	if (f->flags & (HP_FN_UNDECODABLE | HP_FN_UNREADABLE) || !f->nblocks)
		return "bytes not readable or not decodable";
	if (f->flags & HP_FN_COLD_PART)
		return ".cold fragment: stays in place, its function's jumps reach it as before";
	if (m->kind != HP_TARGET_KERNEL && (f->flags & HP_FN_INNER_REF))
		return "an address inside it is stored in data (a label table or a resume address): control would "
		       "come back to the original";
	if (m->kind == HP_TARGET_KERNEL && (f->flags & HP_FN_UNRESOLVED_JUMP))
		return "indirect jump that is not a resolved switch table";
	for (uint32_t t = 0; t < f->njt; t++) {
		const struct hp_jump_table *jt = &mod->jtables[f->jt_start + t];
		const struct hp_block *at_jump = hp_function_block_at(mod, f, f->addr + jt->site);
		snprintf(detail, dlen, "the table at 0x%" PRIx64 ", its jump at +0x%x", jt->table_addr, jt->site);
		if (jt->label) {
			/* Re-emitted for the copy with the copy's addresses (emit.c). */
			if (m->kind == HP_TARGET_KERNEL)
				return "label table (computed goto) in the kernel: such tables are not rewritten there";
			if (f->cold)
				return "label table in a function with a .cold part: labels there would end its table "
				       "early, so its size is not known";
			if (!at_jump ||
			    (hp_function_block_at(mod, f, f->addr + jt->base_site) != at_jump && !jt->hoisted))
				return "label table whose base is set outside its jump's block";
			continue;
		}
		if (!jt->relative || jt->entry_size != 4)
			return "switch table of absolute addresses: such tables are not rewritten, so the function is not "
			       "moved";
		if (!jt->exact)
			return "switch table whose bound check is not on its index register: its size is not known "
			       "exactly";
		if (!at_jump || (hp_function_block_at(mod, f, f->addr + jt->base_site) != at_jump && !jt->hoisted))
			return "switch table whose base is set outside its jump's block";
	}
	detail[0] = 0;
	/* Static call sites are written as calls of their trampolines
	 * (static_calls.h) where the trampoline is known. */
	if (kf && (rule = hp_plan_call_sites_rule(m, f, detail, dlen)))
		return rule;
	if (kf) {
		for (size_t i = 0; i < kf->npinned; i++)
			if (kf->pinned[i].lo < f->addr + f->size && kf->pinned[i].hi > f->addr) {
				snprintf(detail, dlen, "at 0x%" PRIx64, kf->pinned[i].lo);
				return kf->pinned[i].rule;
			}
	}
	if (!(code = malloc(f->size)))
		return "out of memory";
	if (m->read(m, f->addr, code, f->size) < 0) {
		free(code);
		return "bytes not readable";
	}
	if (kf) {
		struct hp_isa_insn in;
		struct hp_isa_detail d;
		bool site = hp_isa_decode(code, f->size, f->addr, &in) == 0 && in.len == 5 &&
			    ((in.cls == HP_IC_CALL && in.has_target && in.target == kf->fentry) ||
			     (hp_isa_decode_detail(code, f->size, f->addr, &d) == 0 && d.mnem == HP_MN_NOP));
		if (!site)
			rule = "no ftrace site at the entry: the entry cannot be redirected";
	}
	/* Jump-label sites are written as reads of their keys (static_keys.h)
	 * where the status flags allow it. */
	if (!rule && (f->flags & HP_FN_STATIC_BRANCH))
		rule = hp_plan_key_sites_rule(m, mod, f, code, detail, dlen);
	if (!rule && (f->flags & HP_FN_UNRESOLVED_JUMP)) {
		uint32_t at = pointer_tail_jumps_only(mod, f, code);
		if (at != UINT32_MAX) {
			snprintf(detail, dlen, "at +0x%x", at);
			rule = "indirect jump that is not a resolved switch table";
		}
	}
	for (uint32_t off = 0; !rule && off < f->size;) {
		struct hp_isa_insn in;
		if (hp_isa_decode(code + off, f->size - off, f->addr + off, &in) < 0)
			break;
		if (in.cls == HP_IC_JCC && hp_isa_jcc_condition(code + off, f->size - off) < 0) {
			snprintf(detail, dlen, "at +0x%x", off);
			rule = "branch without an inverse or a near form (loop, jrcxz, xbegin)";
		}
		if (f->njt && !rule && (rule = table_reference_rule(mod, f, code, off)))
			snprintf(detail, dlen, "at +0x%x", off);
		off += in.len;
	}
	free(code);
	if (rule)
		return rule;
	if (m->kind != HP_TARGET_KERNEL && (f->flags & HP_FN_LSDA))
		return "exception landing pads (.gcc_except_table): the unwinder finds them by the original call "
		       "sites";
	if (m->kind != HP_TARGET_KERNEL && (rule = hp_plan_unwind_rule(mod, f, detail, dlen)))
		return rule;
	if (m->kind != HP_TARGET_KERNEL)
		for (uint32_t c = 0; c < f->ncalls; c++) {
			const struct hp_function *g = hp_model_lookup(m, mod->calls[f->call_start + c].target, NULL);
			if (g && name_is(g->name, returns_twice)) {
				snprintf(detail, dlen, "calls %s", g->name);
				return "calls a function that returns twice (setjmp): its saved return address is the original code";
			}
		}
	return NULL;
}

static void add_edge(struct hp_plan_member *mb, uint32_t from, uint32_t to)
{
	for (size_t i = 0; i < mb->nedges; i++)
		if (mb->edges[i].from == from && mb->edges[i].to == to)
			return;
	mb->edges[mb->nedges++] = (struct hp_plan_edge){ from, to, -1, HP_EDGES_ESTIMATED };
}

static uint32_t block_index(const struct hp_module *mod, const struct hp_function *f, uint64_t off)
{
	const struct hp_block *b = hp_function_block_at(mod, f, f->addr + off);
	return b ? (uint32_t)(b - &mod->blocks[f->block_start]) : UINT32_MAX;
}

/* Sampled counts miss blocks that surely ran: a block whose only way out
 * leads to one block of the function makes that block run at least as
 * often, and a block (not the entry) with only one way in makes its
 * predecessor run at least as often. Exact counts satisfy both already;
 * estimates are raised to satisfy them, so a sampled path is not cut into
 * hot and cold pieces where no sample happened to land. */
static int forced_flow(const struct hp_module *mod, const struct hp_function *f, double *count)
{
	uint32_t n = f->nblocks, *npred = calloc(n + 1, sizeof(*npred)), *pred = calloc(n + 1, sizeof(*pred));
	int32_t *only = malloc((n + 1) * sizeof(*only));

	if (!npred || !pred || !only) {
		free(npred);
		free(pred);
		free(only);
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < n; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		only[b] = -1;
		for (uint16_t s = 0; s < bl->nsucc; s++) {
			const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
			uint32_t t = sc->kind == HP_SUCC_FALLTHROUGH || sc->kind == HP_SUCC_TAKEN ?
					     block_index(mod, f, sc->target) :
					     UINT32_MAX;
			if (t == UINT32_MAX) {
				only[b] = -2; /* leaves the function too */
				continue;
			}
			npred[t]++;
			pred[t] = b;
			only[b] = only[b] == -1 ? (int32_t)t : -2;
		}
	}
	for (bool changed = true; changed;) {
		changed = false;
		for (uint32_t b = 0; b < n; b++) {
			if (only[b] >= 0 && count[only[b]] < count[b]) {
				count[only[b]] = count[b];
				changed = true;
			}
			if (b && !f->cold && npred[b] == 1 && count[pred[b]] < count[b]) {
				count[pred[b]] = count[b];
				changed = true;
			}
		}
	}
	free(npred);
	free(pred);
	free(only);
	return 0;
}

/* Block counts from the profile, and edge counts measured or derived. */
static int member_counts(struct hp_plan_member *mb, const struct hp_prof_fn *pf, bool estimated)
{
	const struct hp_module *mod = mb->mod;
	const struct hp_function *f = mb->fn;
	size_t maxe = 0;
	int r;

	mb->count = calloc(f->nblocks + 1, sizeof(double));
	for (uint32_t b = 0; b < f->nblocks; b++)
		maxe += mod->blocks[f->block_start + b].nsucc;
	mb->edges = calloc(maxe + 1, sizeof(*mb->edges));
	if (!mb->count || !mb->edges)
		return -ENOMEM;
	for (size_t i = 0; pf && i < pf->nblocks; i++) {
		uint32_t bi = block_index(mod, f, pf->blocks[i].offset);
		if (bi != UINT32_MAX)
			mb->count[bi] += pf->blocks[i].count;
	}
	if (estimated && (r = forced_flow(mod, f, mb->count)) < 0)
		return r;
	for (uint32_t b = 0; b < f->nblocks; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		for (uint16_t s = 0; s < bl->nsucc; s++) {
			const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
			if (sc->kind == HP_SUCC_FALLTHROUGH || sc->kind == HP_SUCC_TAKEN) {
				uint32_t t = block_index(mod, f, sc->target);
				if (t != UINT32_MAX)
					add_edge(mb, b, t);
			}
		}
	}
	/* Measured edges. */
	for (size_t i = 0; pf && i < pf->nedges; i++) {
		uint32_t a = block_index(mod, f, pf->edges[i].from), t = block_index(mod, f, pf->edges[i].to);
		for (size_t k = 0; k < mb->nedges; k++)
			if (mb->edges[k].from == a && mb->edges[k].to == t) {
				mb->edges[k].count = pf->edges[i].count;
				mb->edges[k].source = HP_EDGES_MEASURED;
			}
	}
	/* Flow conservation: a block whose successors are all in the function
	 * sends its count along its edges; every block but the entry gets its
	 * count along its incoming edges. One unknown edge in either sum is
	 * then exact. */
	bool *out_closed = calloc(f->nblocks + 1, sizeof(bool));
	if (!out_closed)
		return -ENOMEM;
	for (uint32_t b = 0; b < f->nblocks; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		out_closed[b] = bl->nsucc > 0;
		for (uint16_t s = 0; s < bl->nsucc; s++) {
			uint8_t k = mod->succs[bl->succ_start + s].kind;
			if (k != HP_SUCC_FALLTHROUGH && k != HP_SUCC_TAKEN)
				out_closed[b] = false;
		}
	}
	for (bool changed = true; changed;) {
		changed = false;
		for (uint32_t b = 0; b < f->nblocks; b++)
			for (int dir = 0; dir < 2; dir++) {
				if ((dir == 0 && !out_closed[b]) || (dir == 1 && (b == 0 || f->cold)))
					continue;
				double known = 0;
				size_t unknown = 0, which = 0;
				for (size_t k = 0; k < mb->nedges; k++) {
					const struct hp_plan_edge *e = &mb->edges[k];
					if ((dir == 0 ? e->from : e->to) != b)
						continue;
					if (e->count < 0) {
						unknown++;
						which = k;
					} else {
						known += e->count;
					}
				}
				if (unknown == 1) {
					double v = mb->count[b] - known;
					mb->edges[which].count = v > 0 ? v : 0;
					mb->edges[which].source = HP_EDGES_DERIVED_EXACT;
					changed = true;
				}
			}
	}
	free(out_closed);
	/* The rest: a block's remaining count split over its unknown edges by
	 * their targets' counts. */
	for (uint32_t b = 0; b < f->nblocks; b++) {
		double known = 0, tw = 0;
		for (size_t k = 0; k < mb->nedges; k++)
			if (mb->edges[k].from == b) {
				if (mb->edges[k].count >= 0)
					known += mb->edges[k].count;
				else
					tw += mb->count[mb->edges[k].to];
			}
		double rest = mb->count[b] - known;
		for (size_t k = 0; k < mb->nedges; k++)
			if (mb->edges[k].from == b && mb->edges[k].count < 0)
				mb->edges[k].count = rest > 0 && tw > 0 ? rest * mb->count[mb->edges[k].to] / tw : 0;
	}
	for (size_t k = 0; k < mb->nedges; k++) {
		if (estimated && mb->edges[k].source == HP_EDGES_DERIVED_EXACT)
			mb->edges[k].source = HP_EDGES_ESTIMATED; /* exact arithmetic on estimates */
		mb->exact_edges += mb->edges[k].source != HP_EDGES_ESTIMATED;
	}
	double in_entry = 0;
	for (size_t k = 0; k < mb->nedges; k++)
		if (mb->edges[k].to == 0)
			in_entry += mb->edges[k].count;
	mb->calls = mb->count[0] - in_entry > 0 ? mb->count[0] - in_entry : mb->count[0];
	return 0;
}

static const char *const layout_names[] = { "auto", "pettis-hansen", "ext-tsp" };

const char *hp_block_layout_name(enum hp_block_layout l)
{
	return (unsigned)l < 3 ? layout_names[l] : "auto";
}

int hp_block_layout_parse(const char *name)
{
	for (int i = 0; i < 3; i++)
		if (!strcmp(name, layout_names[i]))
			return i;
	return -1;
}

/* The taken branches of order[0..nhot) as member_layout lays it out: the
 * hot blocks no chain reached after it, then the cold ones in address
 * order, apart (order's tail is written). */
static double taken_with(const struct hp_chain_block *cb, uint32_t n, const struct hp_chain_edge *ce, size_t ne,
			 uint32_t *order, const int32_t *chain_of, int nhot)
{
	uint32_t k = (uint32_t)nhot, brk;

	for (uint32_t b = 0; b < n; b++)
		if (cb[b].hot && chain_of[b] < 0)
			order[k++] = b;
	brk = k;
	for (uint32_t b = 0; b < n; b++)
		if (!cb[b].hot)
			order[k++] = b;
	return hp_layout_taken(n, ce, ne, order, k, brk);
}

/* The member's hot chunk by the layout o asks for, or (auto) the one that
 * leaves fewer taken branches, Pettis-Hansen's on a tie; its taken
 * branches before (the original order). As hp_chains_build. */
static int choose_layout(struct hp_plan_member *mb, const struct hp_plan_opts *o, const struct hp_chain_block *cb,
			 const struct hp_chain_edge *ce, uint32_t *order, int32_t *chain_of, uint32_t *nch)
{
	uint32_t n = mb->fn->nblocks, nch2 = 0;
	uint32_t *order2 = calloc(n + 1, sizeof(*order2));
	int32_t *chain_of2 = calloc(n + 1, sizeof(*chain_of2));
	int nhot = -1, nhot2;

	if (!order2 || !chain_of2)
		goto out;
	for (uint32_t b = 0; b < n; b++)
		order2[b] = b;
	mb->taken_before = hp_layout_taken(n, ce, mb->nedges, order2, n, n);
	mb->layout = HP_LAYOUT_PETTIS_HANSEN;
	if (o->block_layout != HP_LAYOUT_EXT_TSP &&
	    (nhot = hp_chains_build(cb, n, ce, mb->nedges, 0, o->small_block, order, chain_of, nch)) < 0)
		goto out;
	if (o->block_layout == HP_LAYOUT_PETTIS_HANSEN)
		goto out;
	if ((nhot2 = hp_ext_tsp_build(cb, n, ce, mb->nedges, 0, order2, chain_of2, &nch2)) < 0) {
		nhot = -1;
		goto out;
	}
	if (o->block_layout == HP_LAYOUT_AUTO) {
		double ph = taken_with(cb, n, ce, mb->nedges, order, chain_of, nhot);
		double ext = taken_with(cb, n, ce, mb->nedges, order2, chain_of2, nhot2);
		if (!(ext < ph))
			goto out;
	}
	memcpy(order, order2, (size_t)n * sizeof(*order));
	memcpy(chain_of, chain_of2, (size_t)n * sizeof(*chain_of));
	*nch = nch2;
	nhot = nhot2;
	mb->layout = HP_LAYOUT_EXT_TSP;
out:
	free(order2);
	free(chain_of2);
	return nhot;
}

/* Hot chunk chains and the member's block order. */
static int member_layout(struct hp_plan_member *mb, const struct hp_plan_opts *o, double cold_below)
{
	const struct hp_module *mod = mb->mod;
	const struct hp_function *f = mb->fn;
	uint32_t n = f->nblocks, nch = 0;
	size_t cap_chains = 0;
	struct hp_chain_block *cb = calloc(n + 1, sizeof(*cb));
	struct hp_chain_edge *ce = calloc(mb->nedges + 1, sizeof(*ce));
	uint32_t *order = calloc(n + 1, sizeof(*order));
	int32_t *chain_of = calloc(n + 1, sizeof(*chain_of));
	int r = -ENOMEM, nhot;

	mb->blocks = calloc(n + 1, sizeof(*mb->blocks));
	if (!cb || !ce || !order || !chain_of || !mb->blocks)
		goto out;
	for (uint32_t b = 0; b < n; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		cb[b] = (struct hp_chain_block){ mb->count[b], bl->size, hp_plan_block_hot(mb->count[b], cold_below, b),
						 -1 };
		if (bl->nsucc == 1 && mod->succs[bl->succ_start].kind == HP_SUCC_FALLTHROUGH)
			cb[b].falls_to = (int32_t)block_index(mod, f, mod->succs[bl->succ_start].target);
		if (cb[b].hot)
			mb->hot_bytes += bl->size;
		else
			mb->cold_bytes += bl->size;
	}
	for (size_t k = 0; k < mb->nedges; k++)
		ce[k] = (struct hp_chain_edge){ mb->edges[k].from, mb->edges[k].to, mb->edges[k].count };
	nhot = choose_layout(mb, o, cb, ce, order, chain_of, &nch);
	if (nhot < 0)
		goto out;
	mb->nhot = (uint32_t)nhot;
	mb->chains = calloc(nch + 1, sizeof(*mb->chains));
	if (!mb->chains)
		goto out;
	cap_chains = nch + 1;
	mb->nchains = nch;
	for (uint32_t i = 0; i < mb->nhot; i++) {
		uint32_t b = order[i];
		struct hp_plan_chain *c = &mb->chains[chain_of[b]];
		if (!c->n)
			c->first = i;
		c->n++;
		c->bytes += mod->blocks[f->block_start + b].size;
		if (mb->count[b] > c->weight)
			c->weight = mb->count[b];
		mb->blocks[i] =
			(struct hp_plan_block){ .index = b, .count = mb->count[b], .hot = true, .chain = chain_of[b] };
	}
	/* Hot blocks no chain reached (unreachable from the chains' order)
	 * still belong to the hot chunk, each its own chain at the end. */
	uint32_t k = mb->nhot;
	for (uint32_t b = 0; b < n; b++)
		if (cb[b].hot && chain_of[b] < 0) {
			if (HP_GROW(mb->chains, cap_chains, mb->nchains + 1))
				goto out;
			mb->chains[mb->nchains] =
				(struct hp_plan_chain){ k, 1, mb->count[b], mod->blocks[f->block_start + b].size };
			mb->blocks[k++] = (struct hp_plan_block){
				.index = b, .count = mb->count[b], .hot = true, .chain = (int32_t)mb->nchains++
			};
		}
	mb->nhot = k;
	for (uint32_t b = 0; b < n; b++)
		if (!cb[b].hot)
			mb->blocks[k++] =
				(struct hp_plan_block){ .index = b, .count = mb->count[b], .hot = false, .chain = -1 };
	mb->nblocks = k;
	for (uint32_t i = 0; i < k; i++)
		order[i] = mb->blocks[i].index;
	mb->taken_after = hp_layout_taken(n, ce, mb->nedges, order, k, mb->nhot);
	for (uint32_t t = 0; t < f->njt; t++) {
		const struct hp_jump_table *jt = &mod->jtables[f->jt_start + t];
		mb->jt_bytes += jt->nentries * jt->entry_size;
	}
	r = 0;
out:
	free(cb);
	free(ce);
	free(order);
	free(chain_of);
	return r;
}

static ssize_t member_of(const struct hp_plan *p, const struct hp_function *f)
{
	for (size_t i = 0; i < p->nmembers; i++)
		if (p->members[i].fn == f)
			return (ssize_t)i;
	return -1;
}

static bool is_kept(const struct hp_plan *p, const struct hp_function *f)
{
	for (size_t i = 0; i < p->nkept; i++)
		if (p->kept[i].fn == f)
			return true;
	return false;
}

static double max_count(const struct hp_prof_fn *pf)
{
	double m = 0;
	for (size_t i = 0; pf && i < pf->nblocks; i++)
		if (pf->blocks[i].count > m)
			m = pf->blocks[i].count;
	return m;
}

int hp_plan_keep(struct hp_plan_ctx *c, const struct hp_function *f, const char *rule, const char *detail)
{
	struct hp_plan *p = c->p;

	if (HP_GROW(p->kept, c->cap_kept, p->nkept + 1))
		return -ENOMEM;
	p->kept[p->nkept] = (struct hp_plan_kept){ f, rule, "" };
	snprintf(p->kept[p->nkept++].detail, sizeof(p->kept->detail), "%s", detail);
	return 0;
}

/* Consider callee g reached from member `from`; it joins or is kept. */
static int consider(struct hp_plan_ctx *c, uint32_t from, const struct hp_function *g)
{
	struct hp_model *m = c->m;
	struct hp_plan *p = c->p;
	const struct hp_profile *prof = c->prof;
	const struct hp_module *gmod;
	const struct hp_prof_fn *pf;
	char detail[160];
	const char *rule;

	if (!g || member_of(p, g) >= 0 || is_kept(p, g))
		return 0;
	pf = hp_profile_find(prof, g->addr);
	if (max_count(pf) <= p->opts.join_fraction * c->root_calls)
		return 0;
	if (!hp_model_lookup(m, g->addr, &gmod))
		return 0;
	rule = hp_plan_kept_rule(m, gmod, g, detail, sizeof(detail));
	if (!rule && p->nmembers >= p->opts.max_functions)
		rule = "the group is full (--max-functions)";
	if (rule)
		return hp_plan_keep(c, g, rule, detail);
	return hp_plan_add_member(c, gmod, g, p->members[from].fn, pf);
}

int hp_plan_add_member(struct hp_plan_ctx *c, const struct hp_module *mod, const struct hp_function *f,
		       const struct hp_function *parent, const struct hp_prof_fn *pf)
{
	struct hp_plan *p = c->p;

	if (HP_GROW(p->members, c->cap_members, p->nmembers + 1))
		return -ENOMEM;
	struct hp_plan_member *v = &p->members[p->nmembers++];
	memset(v, 0, sizeof(*v));
	v->mod = mod;
	v->fn = f;
	v->parent = parent;
	return member_counts(v, pf, c->prof->estimated);
}

double hp_plan_calls_to(const struct hp_plan_member *a, uint64_t addr)
{
	const struct hp_module *mod = a->mod;
	const struct hp_function *f = a->fn;
	double w = 0;

	for (uint32_t c = 0; c < f->ncalls; c++) {
		const struct hp_call *cl = &mod->calls[f->call_start + c];
		if (cl->target == addr)
			w += a->count[block_index(mod, f, cl->site)];
	}
	for (uint32_t bi = 0; bi < f->nblocks; bi++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + bi];
		for (uint16_t s = 0; s < bl->nsucc; s++)
			if (mod->succs[bl->succ_start + s].kind == HP_SUCC_TAIL_CALL &&
			    mod->succs[bl->succ_start + s].target == addr)
				w += a->count[bi];
	}
	return w;
}

/* Call affinity: counts of the blocks of a that call or tail-call b. */
static double affinity(const struct hp_plan_member *a, const struct hp_plan_member *b)
{
	return hp_plan_calls_to(a, b->fn->addr);
}

/* Shared callees leave the group: with exact counts, a member (not the
 * root) less than min_caller_share of whose calls come from the group's
 * blocks (its own included: recursion) is kept in place, since callers
 * outside keep running the original and a copy would put its hot code in
 * the I-cache twice. Repeated until nothing leaves, as a member's leaving
 * takes its calls out of the group. */
static int drop_shared(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	char detail[160];
	int r;

	/* Only with exact counts, and not with --min-share 0. */
	if (c->prof->estimated || !(p->opts.min_caller_share > 0))
		return HP_PASS_NEXT;
	for (bool again = true; again;) {
		again = false;
		for (size_t i = 1; i < p->nmembers; i++) {
			struct hp_plan_member *g = &p->members[i];
			uint32_t entry = block_index(g->mod, g->fn, 0);
			if (entry == UINT32_MAX)
				continue;
			double calls = g->count[entry], from_group = 0;
			for (size_t j = 0; j < p->nmembers; j++)
				from_group += hp_plan_calls_to(&p->members[j], g->fn->addr);
			if (calls <= 0 || from_group >= p->opts.min_caller_share * calls)
				continue;
			snprintf(detail, sizeof(detail),
				 "%.0f of its %.0f calls (%.0f%%) come from the group; a copy would leave its hot "
				 "code in the I-cache twice",
				 from_group, calls, 100.0 * from_group / calls);
			if ((r = hp_plan_keep(c, g->fn, "shared with callers outside the group (--min-share)",
					      detail)) < 0)
				return r;
			size_t w = 0;
			for (size_t k = 0; k < p->nicalls; k++)
				if (p->icalls[k].fn != g->fn)
					p->icalls[w++] = p->icalls[k];
			p->nicalls = w;
			free(g->count);
			free(g->edges);
			memmove(g, g + 1, (p->nmembers - i - 1) * sizeof(*g));
			p->nmembers--;
			again = true;
			break;
		}
	}
	return 0;
}

static int order_members(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	size_t n = p->nmembers;
	struct hp_plan_member *v = malloc((n + 1) * sizeof(*v));
	uint8_t *placed = calloc(n + 1, 1);

	if (!v || !placed) {
		free(v);
		free(placed);
		return -ENOMEM;
	}
	v[0] = p->members[0];
	placed[0] = 1;
	for (size_t k = 1; k < n; k++) {
		size_t best = 0;
		double bw = -1;
		for (size_t j = 0; j < n; j++) {
			if (placed[j])
				continue;
			double w = 0;
			for (size_t i = 0; i < n; i++)
				if (placed[i])
					w += affinity(&p->members[i], &p->members[j]);
			if (w > bw) {
				bw = w;
				best = j;
			}
		}
		placed[best] = 1;
		v[k] = p->members[best];
	}
	free(p->members);
	p->members = v;
	c->cap_members = n + 1;
	free(placed);
	hp_plan_renumber_icalls(p);
	return 0;
}

void hp_plan_renumber_icalls(struct hp_plan *p)
{
	for (size_t i = 0; i < p->nicalls; i++)
		p->icalls[i].member = (uint32_t)member_of(p, p->icalls[i].fn);
}

/* The L1i geometry the I-cache figures are for: the options' or the host's. */
static int cache_geometry(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;

	if (!p->opts.l1i.line_bytes) {
		struct hp_hostinfo hi;
		char e2[200];
		if (hp_hostinfo_collect(&hi, "plan", e2, sizeof(e2)) == 0)
			p->opts.l1i = hi.l1i;
	}
	if (!p->opts.l1i.line_bytes || !p->opts.l1i.ways || !p->opts.l1i.size_bytes) {
		snprintf(
			c->err, sizeof(c->err),
			"the L1 instruction cache geometry is unknown (no sysfs cache entry): give --l1i SIZE,WAYS,LINE");
		return -ENODATA;
	}
	return HP_PASS_NEXT;
}

/* Bottleneck check: whether I-cache stalls can be measured here. */
static int bottleneck(struct hp_plan_ctx *c)
{
	static _Atomic int has_pmu = -1; /* probed once per process */
	struct hp_plan *p = c->p;
	int perr = 0;

	if (has_pmu < 0)
		has_pmu = hp_probe_hw_cycles(&perr);
	p->stall_measurable = false;
	snprintf(p->stall_note, sizeof(p->stall_note), "%s",
		 has_pmu ? "I-cache stall cycles are not measured yet: the check is not made" :
			   "not measurable: no hardware PMU on this host (I-cache stall cycles unavailable); "
			   "planning anyway");
	return HP_PASS_NEXT;
}

/* Counts for the root: the plan stops here when there are none, when the
 * root did not run or cannot move; else the root is the first member. */
static int root(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	const struct hp_profile *prof = c->prof;
	const struct hp_function *root = c->root;
	const struct hp_prof_fn *rpf = hp_profile_find(prof, root->addr);
	char detail[160];
	const char *rule;
	int r;

	if (!prof || !rpf) {
		p->status = HP_PLAN_NO_COUNTS;
		snprintf(p->message, sizeof(p->message),
			 "no block counts for %s: measure it first (hotpathd measure, or sample for estimated counts) "
			 "and pass --profile",
			 root->name);
		return HP_PASS_DONE;
	}
	if (max_count(rpf) <= 0) {
		p->status = HP_PLAN_NOT_HOT;
		snprintf(p->message, sizeof(p->message), "%s did not run in the profile (%s): nothing to optimize",
			 root->name, prof->source);
		return HP_PASS_DONE;
	}
	if ((rule = hp_plan_kept_rule(c->m, c->root_mod, root, detail, sizeof(detail)))) {
		p->status = HP_PLAN_ROOT_KEPT;
		snprintf(p->message, sizeof(p->message), "%s cannot move: %s%s%s", root->name, rule,
			 detail[0] ? " " : "", detail);
		return HP_PASS_DONE;
	}
	if ((r = hp_plan_add_member(c, c->root_mod, root, NULL, rpf)) < 0)
		return r;
	c->root_calls = p->members[0].calls;
	return HP_PASS_NEXT;
}

/* Group, breadth first over the calls, tail calls and indirect call sites
 * of blocks that ran. */
static int group(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	struct hp_model *m = c->m;
	int r;

	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_module *mod = p->members[i].mod;
		const struct hp_function *f = p->members[i].fn;

		for (uint32_t k = 0; k < f->ncalls; k++) {
			const struct hp_call *cl = &mod->calls[f->call_start + k];
			const struct hp_function *g;
			if (p->members[i].count[block_index(mod, f, cl->site)] <= 0)
				continue; /* pruned: reached only from blocks that never ran */
			g = hp_model_lookup(m, cl->target, NULL);
			if (g && g->addr == cl->target && (r = consider(c, (uint32_t)i, g)) < 0)
				return r;
			f = p->members[i].fn; /* members may have moved */
			mod = p->members[i].mod;
		}
		for (uint32_t b = 0; b < f->nblocks; b++) {
			const struct hp_block *bl = &mod->blocks[f->block_start + b];
			if (p->members[i].count[b] <= 0)
				continue;
			for (uint16_t s = 0; s < bl->nsucc; s++) {
				const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
				const struct hp_function *g;
				if (sc->kind != HP_SUCC_TAIL_CALL)
					continue;
				g = hp_model_lookup(m, sc->target, NULL);
				if (g && g->addr == sc->target && g != f && (r = consider(c, (uint32_t)i, g)) < 0)
					return r;
				f = p->members[i].fn;
				mod = p->members[i].mod;
			}
		}
		if ((r = hp_plan_member_icalls(c, i)) < 0)
			return r;
	}
	return HP_PASS_NEXT;
}

int hp_plan_member_icalls(struct hp_plan_ctx *c, size_t i)
{
	struct hp_plan *p = c->p;
	const struct hp_module *mod = p->members[i].mod;
	const struct hp_function *f = p->members[i].fn;

	for (uint32_t k = 0; k < f->nicalls; k++) {
		uint32_t site = mod->icall_sites[f->icall_start + k];
		double cnt = p->members[i].count[block_index(mod, f, site)];
		if (cnt <= 0)
			continue;
		if (HP_GROW(p->icalls, c->cap_icalls, p->nicalls + 1))
			return -ENOMEM;
		p->icalls[p->nicalls++] = (struct hp_plan_icall){ f, (uint32_t)i, site, cnt };
	}
	return 0;
}

/* Split each member into hot and cold chunks and chain its hot blocks. */
static int layout(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	int r;

	for (size_t i = 0; i < p->nmembers; i++) {
		hp_cfg_signature(p->members[i].mod, p->members[i].fn, p->members[i].signature);
		if ((r = member_layout(&p->members[i], &p->opts, p->cold_below)) < 0)
			return r;
	}
	return HP_PASS_NEXT;
}

static void note(struct hp_plan *p, const char *s)
{
	if (p->nnotes < 8)
		p->notes[p->nnotes++] = s;
}

/* What the reader of the plan should know about its counts and unwind data. */
static int notes(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	const struct hp_profile *prof = c->prof;

	if (prof->scope[0]) {
		snprintf(p->scope_note, sizeof(p->scope_note),
			 "second pass: counts include only %.150s, measured on the installed copy", prof->scope);
		note(p, p->scope_note);
	}
	if (prof->estimated)
		note(p, prof->scope[0] ? "some counts are estimates: blocks the installed layout emptied have no bytes "
					 "to count at, their counts are derived from their predecessors" :
					 "block counts are estimates from PC samples (samples per block divided by its "
					 "instructions)");
	if (c->m->kind != HP_TARGET_KERNEL)
		note(p,
		     "the copy's unwind rows are in its own .eh_frame (code.unwind), to be registered with the "
		     "code; functions with landing pads or rules it cannot reproduce stay in place");
	else
		note(p,
		     "the copy's position map (code.unwind, format kernel-map) gives it the originals' ORC unwind "
		     "entries and names when hotpath.ko registers it at install, so stack traces through the copy "
		     "continue and name the original functions");
	return HP_PASS_NEXT;
}

const struct hp_plan_pass hp_pass_cache_geometry = { "cache-geometry", cache_geometry };
const struct hp_plan_pass hp_pass_bottleneck = { "bottleneck", bottleneck };
const struct hp_plan_pass hp_pass_root = { "root", root };
const struct hp_plan_pass hp_pass_group = { "group", group };
const struct hp_plan_pass hp_pass_drop_shared = { "drop-shared", drop_shared };
const struct hp_plan_pass hp_pass_order = { "order", order_members };
const struct hp_plan_pass hp_pass_layout = { "layout", layout };
const struct hp_plan_pass hp_pass_notes = { "notes", notes };

/* The passes of every plan, in order. */
static const struct hp_plan_pass *const passes[] = {
	&hp_pass_cache_geometry, &hp_pass_bottleneck, &hp_pass_root,   &hp_pass_group,   &hp_pass_drop_shared,
	&hp_pass_order,          &hp_pass_layout,     &hp_pass_notes,  &hp_pass_promote, &hp_pass_emit,
	&hp_pass_unwind,         &hp_pass_verify,     &hp_pass_icache,
};

/* A whole hot set's: its members chosen from the profile, C3 order, the
 * copy's start placed against the hot code that stays. */
static const struct hp_plan_pass *const hot_set_passes[] = {
	&hp_pass_cache_geometry, &hp_pass_bottleneck, &hp_pass_hot_set, &hp_pass_c3,
	&hp_pass_layout,         &hp_pass_place,      &hp_pass_notes,   &hp_pass_promote,
	&hp_pass_emit,           &hp_pass_unwind,     &hp_pass_verify,  &hp_pass_icache,
};

int hp_plan_make(struct hp_model *m, const struct hp_function *root, const struct hp_module *root_mod,
		 const struct hp_profile *prof, const struct hp_plan_opts *o, struct hp_plan *p, char *err,
		 size_t errlen)
{
	struct hp_plan_ctx c = { .m = m, .root = root, .root_mod = root_mod, .prof = prof, .p = p };
	double t0 = hp_now();

	memset(p, 0, sizeof(*p));
	if (o)
		p->opts = *o;
	else
		hp_plan_opts_default(&p->opts);
	p->profile = prof;
	const struct hp_plan_pass *const *list = p->opts.hot_set ? hot_set_passes : passes;
	size_t npasses = p->opts.hot_set ? sizeof(hot_set_passes) / sizeof(hot_set_passes[0]) :
					   sizeof(passes) / sizeof(passes[0]);
	for (size_t i = 0; i < npasses; i++) {
		int r = list[i]->run(&c);
		if (r == HP_PASS_DONE)
			return 0;
		if (r < 0) {
			if (!c.err[0]) {
				snprintf(err, errlen, "out of memory while planning");
				return -ENOMEM;
			}
			snprintf(err, errlen, "%s", c.err);
			return r;
		}
	}
	p->seconds = hp_now() - t0;
	return 0;
}

void hp_plan_free(struct hp_plan *p)
{
	for (size_t i = 0; i < p->nmembers; i++) {
		free(p->members[i].count);
		free(p->members[i].edges);
		free(p->members[i].blocks);
		free(p->members[i].chains);
	}
	free(p->members);
	free(p->kept);
	free(p->icalls);
	free(p->code);
	free(p->unwind);
	free(p->relocs);
	hp_icache_free(&p->before);
	hp_icache_free(&p->after);
	memset(p, 0, sizeof(*p));
}
