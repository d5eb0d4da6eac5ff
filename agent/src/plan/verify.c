// SPDX-License-Identifier: Apache-2.0
/*
 * The verifier: decodes the emitted code again, independently of how it was
 * made, and checks it is the group's CFGs re-laid-out. For every block of
 * every member: the emitted instructions are the original ones, operation
 * for operation (rip-relative data at the same absolute address, calls to
 * the same callee or to its copy), followed by at most a jcc and a jmp;
 * and the emitted block's successors map back to the original's (a jcc
 * may be inverted with its targets swapped). The blocks tile the code in
 * the plan's layout order with only nops between them. A block that was
 * only a jump to the block now after it takes no bytes: control reaching
 * its place must lead, through such empty blocks in layout order, to the
 * block that really runs there. A switch table's jump is recognized again in
 * the copy: its block's lea (for a table whose lea the model proved hoisted
 * out of that block, the leas found by following the base register back
 * over the copy) names a table after the instructions whose every entry
 * reaches the copy of the original entry's target (a label table's entries
 * are the copies' addresses themselves, each relocated with the code). A block ending in a
 * kernel jump-label site must end in the read of that site's key and a jcc
 * with the entry's condition (static_keys.h). A promoted indirect
 * call (icall_values.c) is recognized as its sequence: its fallback reads
 * exactly the original call's operand and calls through it, its compare
 * slot (after the tables) holds the promoted member's original entry and
 * is relocated as that address, and its direct call reaches that member's
 * copy: equal pointers call the copy of the same function, any other
 * pointer is called as before. A kernel static call site must be a call of
 * its static call's trampoline (a tail-call site a jump to it, ending its
 * block: static_calls.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa/isa.h"
#include "model/jumptable.h"
#include "plan/instrument.h"
#include "plan/pass.h"
#include "plan/plan.h"
#include "plan/static_calls.h"
#include "plan/static_keys.h"

struct nmap {
	uint64_t new_addr, orig;
	uint32_t size, seq; /* seq: position in the layout */
};

static int cmp_nmap(const void *a, const void *b)
{
	const struct nmap *x = a, *y = b;
	if (x->new_addr != y->new_addr)
		return x->new_addr < y->new_addr ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

struct vctx {
	struct hp_plan *p;
	struct nmap *map;
	size_t n;
};

/* The first block laid out at a (several when the layout emptied blocks:
 * a block that was only a jump to the next one takes no bytes), or n. */
static size_t first_at(const struct vctx *v, uint64_t a)
{
	size_t lo = 0, hi = v->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (v->map[mid].new_addr < a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < v->n && v->map[lo].new_addr == a ? lo : v->n;
}

static bool in_code(const struct hp_plan *p, uint64_t a)
{
	return a >= p->base && a < p->base + p->code_len;
}

/* Does control that reaches emitted address a go where original address o
 * went? Outside the group a must be o itself. Inside, o must be one of the
 * blocks laid out at a, later in the layout than after_seq: an empty block
 * stands for the block after it, and it was itself checked to lead there
 * (its successor laid out later at the same address), so the chain of
 * empty blocks ends in the block that really runs. */
static bool lands(const struct vctx *v, uint64_t a, uint64_t o, int64_t after_seq)
{
	if (!in_code(v->p, a))
		return a == o;
	for (size_t k = first_at(v, a); k < v->n && v->map[k].new_addr == a; k++)
		if (v->map[k].orig == o && (int64_t)v->map[k].seq > after_seq)
			return true;
	return false;
}

/* Position of block j of member i in the layout (see hp_plan_verify). */
static uint32_t seq_of(const struct hp_plan *p, size_t i, uint32_t j)
{
	uint32_t seq = 0;

	for (size_t k = 0; k < p->nmembers; k++) {
		if (j < p->members[i].nhot && k < i)
			seq += p->members[k].nhot;
		if (j >= p->members[i].nhot)
			seq += k < i ? p->members[k].nblocks : p->members[k].nhot;
	}
	return seq + (j < p->members[i].nhot ? j : j - p->members[i].nhot);
}

/* The copy of a callee that is a member, or the callee. */
static uint64_t copy_of(const struct hp_plan *p, uint64_t a)
{
	for (size_t k = 0; k < p->nmembers; k++)
		if (p->members[k].fn->addr == a)
			return p->members[k].new_entry;
	return a;
}

/* A promoted call's sequence q (for ic) against the plan: why not, or NULL. */
static const char *check_promotion(const struct hp_plan *p, const struct hp_plan_icall *ic,
				   const struct hp_isa_promoted *q)
{
	uint64_t v;
	bool reloc = false;

	if (q->slot < hp_plan_text_end(p) || q->slot + 8 > p->base + p->code_len)
		return "compares with bytes that are not a slot after the instructions";
	memcpy(&v, p->code + (q->slot - p->base), 8);
	for (size_t i = 0; i < p->nrelocs; i++)
		reloc |= p->relocs[i].kind == HP_RELOC_ABS64 && p->relocs[i].offset == q->slot - p->base &&
			 p->relocs[i].target == ic->promoted->addr;
	if (v != ic->promoted->addr || !reloc)
		return "compares with something other than the promoted member's original entry";
	if (copy_of(p, ic->promoted->addr) == ic->promoted->addr || q->direct != copy_of(p, ic->promoted->addr))
		return "calls something other than the promoted member's copy";
	return NULL;
}

/* The table of f whose jump is at off, or NULL. */
/* One original instruction (olen bytes at *oa) verified as the copy's nlen
 * bytes at *na: counted, the copy's offset kept among the block's last 16
 * (noffs, *nn of them; a table's lea is looked for there), and both moved on. */
static void verified(struct hp_plan *p, uint32_t noffs[16], size_t *nn, uint64_t *o_last, uint64_t *oa, uint64_t *na,
		     unsigned olen, unsigned nlen)
{
	p->verified_insns++;
	if (*nn == 16)
		memmove(noffs, noffs + 1, --*nn * sizeof(*noffs));
	noffs[(*nn)++] = (uint32_t)(*na - p->base);
	*o_last = *oa;
	*oa += olen;
	*na += nlen;
}

static const struct hp_jump_table *table_of(const struct hp_plan_member *mb, uint32_t off)
{
	for (uint32_t t = 0; t < mb->fn->njt; t++) {
		const struct hp_jump_table *jt = &mb->mod->jtables[mb->fn->jt_start + t];
		if (jt->site == off)
			return jt;
	}
	return NULL;
}

/* Both "lea reg, [rip + disp32]", the same bytes but the displacement;
 * *ta and *tb get the addresses they name. */
static bool same_lea(const uint8_t *a, size_t alen, uint64_t aaddr, const uint8_t *b, size_t blen, uint64_t baddr,
		     uint64_t *ta, uint64_t *tb)
{
	struct hp_isa_detail x, y;

	if (hp_isa_decode_detail(a, alen, aaddr, &x) < 0 || hp_isa_decode_detail(b, blen, baddr, &y) < 0 ||
	    x.mnem != HP_MN_LEA || y.mnem != HP_MN_LEA || x.len != y.len || x.len < 4 || !x.has_rip_ref ||
	    !y.has_rip_ref || memcmp(a, b, x.len - 4u))
		return false;
	*ta = x.rip_target;
	*tb = y.rip_target;
	return true;
}

/* The copy's table at the jump ending a block, recognized from the copy's
 * instructions at offs (offsets in the code, the jump last): it must lie
 * after the instructions, and each entry must reach the copy of the
 * original entry's target. NULL, or why not. */
static const char *check_table(const struct vctx *v, const struct hp_plan_member *mb, const struct hp_jump_table *jt,
			       const uint32_t *offs, size_t n, uint32_t bi)
{
	const struct hp_plan *p = v->p;
	struct hp_jt_match m;

	if (!hp_jt_recognize_shape(p->code, (uint32_t)p->code_len, p->base, offs, n, &m) || m.label != !!jt->label ||
	    (jt->label ? m.entry_size != 8 : !m.relative || m.entry_size != 4))
		return "is no longer a recognizable table jump";
	if (m.hoisted) {
		/* Its base set in other blocks: followed back over the copy as the
		 * model did over the original (the copy's edges are checked to be
		 * the original's), every lea on the way naming one table. */
		struct hp_jt_graph g;
		uint64_t lea;
		bool ok;
		if (!jt->hoisted)
			return "reads a base set outside its block, which the model did not prove";
		if (hp_jt_graph_of(mb->mod, mb->fn, NULL, 0, &g) < 0)
			return "cannot be followed back (out of memory)";
		g.code = p->code;
		g.addr = p->base;
		g.len = p->code_len;
		for (uint32_t j = 0; j < mb->nblocks; j++) {
			g.start[mb->blocks[j].index] = mb->blocks[j].new_addr;
			g.end[mb->blocks[j].index] = mb->blocks[j].new_addr + mb->blocks[j].new_size;
		}
		ok = mb->nblocks == g.nblocks &&
		     hp_jt_base_reaches(&g, bi, p->base + offs[n - 1], m.base_reg, &m.table, &lea);
		hp_jt_graph_free(&g);
		if (!ok)
			return "reads a base that is not set by leas of one table on every path to it";
	}
	if (m.table < hp_plan_text_end(p) ||
	    m.table + (uint64_t)jt->nentries * (jt->label ? 8 : 4) > p->base + p->code_len)
		return "reads a table that is not after the instructions";
	for (uint32_t k = 0; jt->label && k < jt->nentries; k++) {
		uint64_t a, at = m.table - p->base + 8 * (uint64_t)k;
		bool reloc = false;
		memcpy(&a, p->code + at, 8);
		for (size_t i = 0; i < p->nrelocs && !reloc; i++)
			reloc = p->relocs[i].kind == HP_RELOC_CODE64 && p->relocs[i].offset == at &&
				p->relocs[i].target == a;
		if (!lands(v, a, mb->mod->jt_targets[jt->target_start + k], -1))
			return "has an entry that does not reach the copy of its original target";
		if (!reloc)
			return "has an entry that is not relocated with the code";
	}
	for (uint32_t k = 0; !jt->label && k < jt->nentries; k++) {
		int32_t e;
		memcpy(&e, p->code + (m.table - p->base) + 4 * k, 4);
		if (!lands(v, m.table + (uint64_t)(int64_t)e, mb->mod->jt_targets[jt->target_start + k], -1))
			return "has an entry that does not reach the copy of its original target";
	}
	return NULL;
}

/* Record why the code is refused and stop. */
#define FAIL(...)                                                                \
	do {                                                                     \
		snprintf(p->verify_error, sizeof(p->verify_error), __VA_ARGS__); \
		goto out;                                                        \
	} while (0)

bool hp_plan_verify(struct hp_model *m, struct hp_plan *p)
{
	struct vctx v = { p, NULL, 0 };
	size_t total = 0;
	bool ok = false;
	uint8_t *orig = NULL;

	for (size_t i = 0; i < p->nmembers; i++)
		total += p->members[i].nblocks;
	v.map = calloc(total + 1, sizeof(*v.map));
	p->verified_blocks = p->verified_edges = p->verified_insns = 0;
	if (!v.map || !p->code)
		FAIL("out of memory");
	/* The layout's order: every member's hot blocks, then every member's
	 * cold blocks. */
	for (int cold = 0; cold < 2; cold++)
		for (size_t i = 0; i < p->nmembers; i++) {
			const struct hp_plan_member *mb = &p->members[i];
			for (uint32_t j = cold ? mb->nhot : 0; j < (cold ? mb->nblocks : mb->nhot); j++) {
				const struct hp_block *bl = &mb->mod->blocks[mb->fn->block_start + mb->blocks[j].index];
				v.map[v.n] = (struct nmap){ mb->blocks[j].new_addr, mb->fn->addr + bl->offset,
							    mb->blocks[j].new_size, (uint32_t)v.n };
				v.n++;
			}
		}
	if (v.n != total)
		FAIL("hot blocks beyond a member's hot chunk");
	qsort(v.map, v.n, sizeof(*v.map), cmp_nmap);
	/* The blocks tile the code in layout order; between them only padding. */
	uint64_t at = p->base;
	for (size_t k = 0; k < v.n; k++) {
		while (at < v.map[k].new_addr) {
			struct hp_isa_detail d;
			if (hp_isa_decode_detail(p->code + (at - p->base), v.map[k].new_addr - at, at, &d) < 0 ||
			    d.mnem != HP_MN_NOP)
				FAIL("bytes at 0x%" PRIx64 " between blocks are not padding", at);
			at += d.len;
		}
		if (at != v.map[k].new_addr || (k && v.map[k].seq < v.map[k - 1].seq))
			FAIL("the block at 0x%" PRIx64 " overlaps another or is out of the layout's order",
			     v.map[k].new_addr);
		at += v.map[k].size;
	}
	if (at != hp_instrument_blocks_end(p) || hp_plan_text_end(p) > p->base + p->code_len)
		FAIL("the code ends at 0x%" PRIx64 ", the blocks at 0x%" PRIx64, hp_instrument_blocks_end(p), at);
	if (p->instrument && !hp_instrument_verify_stubs(p, p->verify_error, sizeof(p->verify_error)))
		goto out;

	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_plan_member *mb = &p->members[i];
		const struct hp_function *f = mb->fn;
		free(orig);
		if (!(orig = malloc(f->size + 16)) || m->read(m, f->addr, orig, f->size) < 0)
			FAIL("cannot read %s", f->name);
		memset(orig + f->size, 0, 16);
		for (uint32_t j = 0; j < mb->nblocks; j++) {
			const struct hp_block *bl = &mb->mod->blocks[f->block_start + mb->blocks[j].index];
			uint64_t na = mb->blocks[j].new_addr, nend = na + mb->blocks[j].new_size;
			uint64_t oa = f->addr + bl->offset, oend = oa + bl->size;
			struct hp_isa_insn oi = { 0 }, ni;
			uint64_t o_taken = 0, o_last = 0;
			uint32_t noffs[16];
			size_t nn = 0;
			int o_cond = -2;                /* -2 none, -1 jmp, else jcc condition */
			uint64_t o_key = 0, o_site = 0; /* a jump-label site's key, and the site */
			/* An instrumented copy's counter increment comes first. */
			int pre = hp_instrument_check(p, (uint32_t)i, mb->blocks[j].index, na);
			if (pre < 0)
				FAIL("%s: block 0x%" PRIx64 " does not start with its counter", f->name, oa);
			na += (uint64_t)pre;

			/* Body: every original instruction but a final direct branch. */
			while (oa < oend) {
				const uint8_t *ob = orig + (oa - f->addr);
				if (hp_isa_decode(ob, f->addr + f->size - oa, oa, &oi) < 0)
					FAIL("%s: original 0x%" PRIx64 " does not decode", f->name, oa);
				const struct hp_static_call *sc =
					oi.has_target && (oi.cls == HP_IC_CALL || oi.cls == HP_IC_JMP) ?
						hp_call_site(m, oa) :
						NULL;
				if (sc) {
					/* A static call site: a call of (a jump to) its trampoline,
					 * the jump ending its block as the site did. */
					const struct hp_static_call *mv = hp_call_site_movable(m, oa);
					const uint8_t *nb = p->code + (na - p->base);
					if (!mv || na >= nend || hp_isa_decode(nb, nend - na, na, &ni) < 0 ||
					    ni.cls != oi.cls || ni.len != 5 || !ni.has_target ||
					    ni.target != mv->tramp || (oi.cls == HP_IC_JMP) != (mv->tail != 0) ||
					    (oi.cls == HP_IC_JMP && oa + oi.len != oend))
						FAIL("%s: the static call site at 0x%" PRIx64
						     " is not a %s of its trampoline at 0x%" PRIx64 " in the copy",
						     f->name, oa, oi.cls == HP_IC_JMP ? "jump" : "call",
						     mv ? mv->tramp : 0);
					verified(p, noffs, &nn, &o_last, &oa, &na, oi.len, ni.len);
					continue;
				}
				if (oa + oi.len == oend && oi.has_target &&
				    (oi.cls == HP_IC_JCC || oi.cls == HP_IC_JMP)) {
					o_cond = oi.cls == HP_IC_JMP ? -1 : hp_isa_jcc_condition(ob, oi.len);
					o_taken = oi.target;
					/* A jump-label site goes either way, by its key. */
					const struct hp_static_branch *ks =
						oi.cls == HP_IC_JMP ? hp_key_site(m, oa) : NULL;
					if (ks) {
						o_cond = hp_key_site_cond(ks);
						o_key = ks->key;
						o_site = oa;
					}
					break;
				}
				if (na >= nend)
					FAIL("%s: block 0x%" PRIx64 " lost instructions", f->name,
					     f->addr + bl->offset);
				const uint8_t *nb = p->code + (na - p->base);
				const struct hp_plan_icall *ic = hp_plan_promotion(p, f, (uint32_t)(oa - f->addr));
				if (ic) {
					struct hp_isa_promoted q = { 0 };
					const char *why = NULL;
					if (hp_isa_match_promoted_call(nb, nend - na, na, ob, oi.len, oa, &q) < 0)
						why = "is not emitted as its promotion";
					else
						why = check_promotion(p, ic, &q);
					if (why)
						FAIL("%s: the promoted call at 0x%" PRIx64 " %s", f->name, oa, why);
					verified(p, noffs, &nn, &o_last, &oa, &na, oi.len, q.len);
					continue;
				}
				uint64_t ta, tb;
				int bt = hp_jt_base_of(mb->mod, f, orig, (uint32_t)(oa - f->addr));
				const struct hp_jump_table *jt = bt >= 0 ? &mb->mod->jtables[f->jt_start + bt] : NULL;
				bool table_base = false;
				if (hp_isa_decode(nb, nend - na, na, &ni) < 0 ||
				    !(hp_isa_same_operation(ob, oi.len, oa, nb, ni.len, na, &ta, &tb) ||
				      (jt && (table_base = same_lea(ob, oi.len, oa, nb, ni.len, na, &ta, &tb)))))
					FAIL("%s: 0x%" PRIx64 " is not emitted as the same operation at 0x%" PRIx64,
					     f->name, oa, na);
				/* A table's lea names the copy's table (checked at its jump). */
				if (table_base &&
				    (ta != jt->table_addr || tb < hp_plan_text_end(p) || tb >= p->base + p->code_len))
					FAIL("%s: the lea of the table at 0x%" PRIx64 " names 0x%" PRIx64
					     ", not a table after the copy's instructions",
					     f->name, jt->table_addr, tb);
				if (ta && !table_base && tb != (oi.cls == HP_IC_CALL ? copy_of(p, ta) : ta))
					FAIL("%s: 0x%" PRIx64 " reaches 0x%" PRIx64 " in the copy, 0x%" PRIx64
					     " originally",
					     f->name, oa, tb, ta);
				verified(p, noffs, &nn, &o_last, &oa, &na, oi.len, ni.len);
			}
			const struct hp_jump_table *jt = nn ? table_of(mb, (uint32_t)(o_last - f->addr)) : NULL;
			const char *why = jt ? check_table(&v, mb, jt, noffs, nn, mb->blocks[j].index) : NULL;
			if (why)
				FAIL("%s: the table jump at 0x%" PRIx64 " %s", f->name, o_last, why);
			if (jt)
				p->verified_edges += jt->nentries;
			/* Successors. */
			bool o_falls = false;
			for (uint16_t s = 0; s < bl->nsucc; s++) {
				const struct hp_succ *sc = &mb->mod->succs[bl->succ_start + s];
				o_falls |= sc->kind == HP_SUCC_FALLTHROUGH ||
					   (sc->kind == HP_SUCC_TAIL_CALL && sc->target == oend && o_cond == -2);
			}
			if (o_cond >= -1 && o_cond != -1)
				o_falls = true;
			uint64_t e_dest[2] = { 0, 0 };
			int e_cond = -2, nd = 0;
			if (o_key) {
				/* The site's key read: "cmp dword [rip + key], 0". */
				struct hp_isa_detail d;
				if (hp_isa_decode_detail(p->code + (na - p->base), nend - na, na, &d) < 0 ||
				    d.mnem != HP_MN_CMP || d.nops != 2 || d.op[0].kind != HP_OP_MEM || !d.op[0].rip ||
				    d.op[0].bytes != 4 || d.rip_target != o_key || d.op[1].kind != HP_OP_IMM ||
				    d.op[1].imm != 0)
					FAIL("%s: the jump label at 0x%" PRIx64
					     " is not a read of its key at 0x%" PRIx64 " in the copy",
					     f->name, o_site, o_key);
				na += d.len;
				p->verified_insns++;
			}
			while (na < nend && nd < 2) {
				const uint8_t *nb = p->code + (na - p->base);
				if (hp_isa_decode(nb, nend - na, na, &ni) < 0 || !ni.has_target ||
				    (ni.cls != HP_IC_JCC && ni.cls != HP_IC_JMP))
					FAIL("%s: unexpected instruction at 0x%" PRIx64 " ending block 0x%" PRIx64,
					     f->name, na, f->addr + bl->offset);
				if (ni.cls == HP_IC_JCC) {
					if (nd)
						FAIL("%s: two conditional branches end a block", f->name);
					e_cond = hp_isa_jcc_condition(nb, ni.len);
				}
				e_dest[nd++] = ni.target;
				na += ni.len;
				if (ni.cls == HP_IC_JMP)
					break;
			}
			if (na != nend)
				FAIL("%s: block 0x%" PRIx64 " has extra bytes", f->name, f->addr + bl->offset);
			for (int k = 0; k < nd; k++) /* a counted edge goes through its stub */
				e_dest[k] = hp_instrument_through_stub(p, mb->blocks[j].index, e_dest[k]);
			if (e_cond >= 0 && nd == 1)
				e_dest[nd++] = nend; /* the jcc's fallthrough */
			else if (nd == 0 && (o_falls || o_cond == -1))
				e_dest[nd++] = nend;
			/* An emptied block's successor must come after it at the same place. */
			int64_t after = mb->blocks[j].new_size ? -1 : (int64_t)seq_of(p, i, j);
			for (int k = 0; k < nd; k++)
				if (in_code(p, e_dest[k]) && first_at(&v, e_dest[k]) == v.n)
					FAIL("%s: a branch of block 0x%" PRIx64 " lands inside a block", f->name,
					     f->addr + bl->offset);
			bool good;
			if (o_cond >= 0)
				good = nd == 2 && ((e_cond == o_cond && lands(&v, e_dest[0], o_taken, after) &&
						    lands(&v, e_dest[1], oend, after)) ||
						   (e_cond == (o_cond ^ 1) && lands(&v, e_dest[0], oend, after) &&
						    lands(&v, e_dest[1], o_taken, after)));
			else if (o_cond == -1)
				good = nd == 1 && e_cond < 0 && lands(&v, e_dest[0], o_taken, after);
			else if (o_falls)
				good = nd == 1 && e_cond < 0 && lands(&v, e_dest[0], oend, after);
			else
				good = nd == 0;
			if (!good)
				FAIL("%s: block 0x%" PRIx64 " does not keep its successors", f->name,
				     f->addr + bl->offset);
			p->verified_edges += (size_t)(o_cond >= 0 ? 2 : (o_cond == -1 || o_falls) ? 1 : 0);
			p->verified_blocks++;
		}
	}
	ok = true;
out:
	free(orig);
	free(v.map);
	return ok;
}

/* Code and unwind data that fail verification are refused, not an error. */
static int verify_pass(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;

	p->verified = hp_plan_verify(c->m, p) && hp_plan_verify_unwind(c->m, p);
	if (!p->verified) {
		p->status = HP_PLAN_REFUSED;
		snprintf(p->message, sizeof(p->message), "the emitted code failed verification: %s", p->verify_error);
	}
	return HP_PASS_NEXT;
}

const struct hp_plan_pass hp_pass_verify = { "verify", verify_pass };
