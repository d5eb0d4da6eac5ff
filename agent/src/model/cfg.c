// SPDX-License-Identifier: Apache-2.0
/*
 * CFG construction. A linear sweep decodes the function once, marking
 * instruction starts and leaders (the entry, every direct branch target inside
 * the function, the instruction after every block-ending instruction); a second
 * pass over the decoded instructions cuts blocks at leaders and records
 * successors and call sites. Calls do not end blocks, except calls to
 * functions that never return. Resolved switch tables make their entries
 * leaders and successors. The module driver (hp_cfg_parse_module) then links
 * .cold fragments and proves which functions never return, re-parsing the
 * functions whose blocks those facts change.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/cfg.h"
#include "base/grow.h"
#include "isa/isa.h"
#include "model/jumptable.h"

struct hp_cfg_insn {
	uint32_t off;
	uint8_t len;
	uint8_t cls;
	bool has_target;
	uint64_t target;
};

enum { MARK_INSN = 1, MARK_LEADER = 2, MARK_TARGET = 4 };

/* Room for extra more elements in arr (n in use), or return -ENOMEM. */
#define GROW(arr, n, cap, extra)                          \
	do {                                              \
		if (HP_GROW((arr), (cap), (n) + (extra))) \
			return -ENOMEM;                   \
	} while (0)

static bool in_sorted(const uint64_t *v, size_t n, uint64_t x)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid] < x)
			lo = mid + 1;
		else if (v[mid] > x)
			hi = mid;
		else
			return true;
	}
	return false;
}

static int add_succ(struct hp_cfg_arena *a, uint8_t kind, uint64_t target)
{
	GROW(a->succs, a->nsuccs, a->cap_succs, 1);
	a->succs[a->nsuccs].kind = kind;
	a->succs[a->nsuccs].target = target;
	a->nsuccs++;
	return 0;
}

/* Successor for a direct branch to target (taken side). */
static int branch_succ(const struct hp_cfg_env *env, struct hp_cfg_arena *a, const struct hp_function *f,
		       uint64_t target, uint32_t limit)
{
	if (target >= f->addr && target < f->addr + limit && (a->marks[target - f->addr] & MARK_INSN))
		return add_succ(a, HP_SUCC_TAKEN, target - f->addr);
	if (env && in_sorted(env->ret_thunks, env->nret_thunks, target))
		return add_succ(a, HP_SUCC_RETURN, 0);
	if (env && in_sorted(env->ind_thunks, env->nind_thunks, target))
		return add_succ(a, HP_SUCC_INDIRECT, 0);
	/* Outside the function, or into the middle of an instruction of the
	 * linear sweep: a jump to code this function does not own as a block. */
	return add_succ(a, HP_SUCC_TAIL_CALL, target);
}

/* A call that never returns: to a function that never does. A call through
 * an indirect thunk is an indirect call, whatever the thunk's own code (it
 * never returns to it: may_return proves it "noreturn") says. */
static bool noreturn_call(const struct hp_cfg_env *env, const struct hp_cfg_insn *in)
{
	return env && in->cls == HP_IC_CALL && in->has_target && in_sorted(env->noreturn, env->nnoreturn, in->target) &&
	       !in_sorted(env->ind_thunks, env->nind_thunks, in->target);
}

/* Traps and halts that continue at the next instruction act like any other
 * instruction: a kernel WARN's ud2, and hlt in the kernel. */
static uint8_t effective_class(const struct hp_cfg_env *env, uint64_t addr, uint8_t cls)
{
	if (cls == HP_IC_TRAP && env && in_sorted(env->warn_traps, env->nwarn_traps, addr))
		return HP_IC_OTHER;
	if (cls == HP_IC_HALT)
		return env && env->hlt_continues ? HP_IC_OTHER : HP_IC_TRAP;
	return cls;
}

static bool ends_block(uint8_t cls)
{
	return cls == HP_IC_JCC || cls == HP_IC_JMP || cls == HP_IC_JMP_IND || cls == HP_IC_RET || cls == HP_IC_TRAP;
}

/* The hint for the table jump at address jump, or NULL. */
static const struct hp_jt_hint *jt_hint(const struct hp_cfg_env *env, uint64_t jump)
{
	size_t lo = 0, hi = env->njt_hints;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (env->jt_hints[mid].jump < jump)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < env->njt_hints && env->jt_hints[lo].jump == jump ? &env->jt_hints[lo] : NULL;
}

/* The entries of the label table at table (jumptable.h): the run of 8-byte
 * words from its start that land on instructions of f, ended by the first
 * word outside f (or the end of readable data). Every label a computed
 * goto of f can reach lies in f, so the run holds at least the program's
 * table (a plan keeps a function with a .cold part, where labels could
 * lie, in place: plan.c). A word inside f that is not an instruction's
 * start, or an empty run, is no label table: 0. */
static uint32_t label_run(const struct hp_cfg_env *env, const struct hp_function *f, const struct hp_cfg_arena *a,
			  uint64_t table, uint32_t limit)
{
	uint32_t k;

	for (k = 0; k < HP_JT_MAX_ENTRIES; k++) {
		uint8_t buf[8];
		uint64_t t = 0;

		if (env->read_data(env->data_ctx, table + (uint64_t)k * 8, buf, 8) < 0)
			break;
		for (int b = 7; b >= 0; b--)
			t = t << 8 | buf[b];
		if (t < f->addr || t >= f->addr + f->size)
			break;
		if (t >= f->addr + limit || !(a->marks[t - f->addr] & MARK_INSN))
			return 0;
	}
	return k < HP_JT_MAX_ENTRIES ? k : 0;
}

/* Try to resolve the indirect jump insns[j] as a switch table: on success
 * the table and its targets are appended to a and the targets marked as
 * leaders. Returns 1 resolved, 0 not a table, or -ENOMEM. */
static int resolve_table(const struct hp_cfg_env *env, const uint8_t *code, struct hp_function *f,
			 struct hp_cfg_arena *a, size_t j, uint32_t limit)
{
	uint32_t offs[16];
	size_t n = 0, lo = j >= 15 ? j - 15 : 0, k;
	struct hp_jt_match m;
	const struct hp_jt_hint *h = NULL;
	uint8_t buf[8];

	if (!env || !env->read_data)
		return 0;
	for (k = lo; k <= j; k++)
		offs[n++] = a->insns[k].off;
	if (!hp_jt_recognize(code, limit, f->addr, offs, n, &m))
		return 0;
	if (m.hoisted) {
		/* Its base is set before the window: only as hp_cfg_parse_module proved. */
		h = jt_hint(env, f->addr + a->insns[j].off);
		if (!h || h->lea < f->addr || h->lea >= f->addr + limit)
			return 0;
		m.table = h->table;
	}
	if (m.label && !(m.nentries = label_run(env, f, a, m.table, limit)))
		return 0;
	GROW(a->jt_targets, a->njt_targets, a->cap_jt_targets, m.nentries);
	for (k = 0; k < m.nentries; k++) {
		uint64_t t;

		if (env->read_data(env->data_ctx, m.table + k * m.entry_size, buf, m.entry_size) < 0)
			return 0;
		if (m.entry_size == 4)
			t = m.table + (uint64_t)(int64_t)(int32_t)((uint32_t)buf[0] | (uint32_t)buf[1] << 8 |
								   (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24);
		else {
			t = 0;
			for (int b = 7; b >= 0; b--)
				t = t << 8 | buf[b];
		}
		/* Every entry must land on an instruction of this function. */
		if (t < f->addr || t >= f->addr + limit || !(a->marks[t - f->addr] & MARK_INSN))
			return 0;
		a->jt_targets[a->njt_targets + k] = t;
	}
	for (k = 0; k < m.nentries; k++)
		a->marks[a->jt_targets[a->njt_targets + k] - f->addr] |= MARK_LEADER | MARK_TARGET;
	GROW(a->jtables, a->njtables, a->cap_jtables, 1);
	a->jtables[a->njtables++] =
		(struct hp_jump_table){ .site = a->insns[j].off,
					.nentries = m.nentries,
					.table_addr = m.table,
					.entry_size = m.entry_size,
					.relative = m.relative,
					.target_start = (uint32_t)a->njt_targets,
					.base_site = h ? (uint32_t)(h->lea - f->addr) : offs[m.base_at],
					.exact = m.exact,
					.hoisted = m.hoisted,
					.label = m.label };
	a->njt_targets += m.nentries;
	return 1;
}

/* Successor for running past the end of a block at offset next. */
static int fall_succ(struct hp_cfg_arena *a, const struct hp_function *f, uint32_t next)
{
	if (next < f->size)
		return add_succ(a, HP_SUCC_FALLTHROUGH, next);
	return add_succ(a, HP_SUCC_TAIL_CALL, f->addr + f->size);
}

int hp_cfg_build(const struct hp_cfg_env *env, const uint8_t *code, struct hp_function *f, struct hp_cfg_arena *a)
{
	uint32_t size = f->size, off = 0, limit;
	size_t ni = 0, i, jt0 = a->njtables, jt;
	int err;

	f->block_start = a->nblocks;
	f->call_start = a->ncalls;
	f->icall_start = a->nicalls;
	f->jt_start = a->njtables;
	f->nblocks = f->ncalls = f->nicalls = f->njt = 0;
	f->flags &= ~(HP_FN_UNRESOLVED_JUMP | HP_FN_STATIC_BRANCH | HP_FN_STATIC_CALL);
	if (size == 0)
		return 0;
	GROW(a->marks, 0, a->cap_marks, (size_t)size + 1);
	memset(a->marks, 0, (size_t)size + 1);

	/* Pass 1: linear sweep. */
	while (off < size) {
		struct hp_isa_insn d;

		if (hp_isa_decode(code + off, size - off, f->addr + off, &d) < 0) {
			f->flags |= HP_FN_UNDECODABLE;
			f->bad_offset = off;
			break;
		}
		d.cls = effective_class(env, f->addr + off, d.cls);
		/* A jump label goes either way depending on its key: a two-way
		 * branch, not the jump its canonical bytes spell. */
		if (d.cls == HP_IC_JMP && d.has_target && env &&
		    in_sorted(env->static_branches, env->nstatic_branches, f->addr + off)) {
			d.cls = HP_IC_JCC;
			f->flags |= HP_FN_STATIC_BRANCH;
		}
		/* A static call goes wherever it is set to: indirect. */
		if ((d.cls == HP_IC_CALL || d.cls == HP_IC_JMP) && d.has_target && env &&
		    in_sorted(env->static_calls, env->nstatic_calls, f->addr + off)) {
			d.cls = d.cls == HP_IC_CALL ? HP_IC_CALL_IND : HP_IC_JMP_IND;
			d.has_target = false;
			f->flags |= HP_FN_STATIC_CALL;
		}
		GROW(a->insns, ni, a->cap_insns, 1);
		a->insns[ni] = (struct hp_cfg_insn){ off, d.len, d.cls, d.has_target, d.target };
		a->marks[off] |= MARK_INSN;
		if ((d.cls == HP_IC_JCC || d.cls == HP_IC_JMP) && d.has_target && d.target >= f->addr &&
		    d.target < f->addr + size)
			a->marks[d.target - f->addr] |= MARK_LEADER | MARK_TARGET;
		if (ends_block(d.cls) || noreturn_call(env, &a->insns[ni]))
			a->marks[off + d.len] |= MARK_LEADER;
		ni++;
		off += d.len;
	}
	limit = off; /* decoded prefix; == size unless undecodable */
	a->marks[0] |= MARK_LEADER;
	if (env && env->nextra_leaders) {
		size_t lo = 0, hi = env->nextra_leaders;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (env->extra_leaders[mid] < f->addr)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < env->nextra_leaders && env->extra_leaders[lo] < f->addr + limit; lo++)
			if (a->marks[env->extra_leaders[lo] - f->addr] & MARK_INSN)
				a->marks[env->extra_leaders[lo] - f->addr] |= MARK_LEADER | MARK_TARGET;
	}
	/* Switch tables: their entries become leaders before blocks are cut. */
	for (i = 0; i < ni; i++) {
		if (a->insns[i].cls != HP_IC_JMP_IND ||
		    (env && in_sorted(env->static_calls, env->nstatic_calls, f->addr + a->insns[i].off)))
			continue;
		if ((err = resolve_table(env, code, f, a, i, limit)) < 0)
			return err;
		if (err == 0)
			f->flags |= HP_FN_UNRESOLVED_JUMP;
	}
	f->njt = a->njtables - jt0;

	/* Pass 2: cut blocks and record successors and calls. */
	jt = jt0;
	for (i = 0; i < ni;) {
		struct hp_block b = { .offset = a->insns[i].off };
		const struct hp_cfg_insn *last;

		for (;;) {
			const struct hp_cfg_insn *in = &a->insns[i];
			uint32_t next = in->off + in->len;

			b.ninsn++;
			if (in->cls == HP_IC_CALL && in->has_target) {
				if (env && in_sorted(env->ind_thunks, env->nind_thunks, in->target)) {
					GROW(a->icalls, a->nicalls, a->cap_icalls, 1);
					a->icalls[a->nicalls++] = in->off;
				} else {
					GROW(a->calls, a->ncalls, a->cap_calls, 1);
					a->calls[a->ncalls++] = (struct hp_call){ in->off, in->target };
				}
			} else if (in->cls == HP_IC_CALL_IND) {
				GROW(a->icalls, a->nicalls, a->cap_icalls, 1);
				a->icalls[a->nicalls++] = in->off;
			}
			i++;
			if (i >= ni)
				break;
			/* A run of int3 padding is one block: nothing can reach its
			 * inner bytes unless a branch targets them. */
			if (in->cls == HP_IC_TRAP && code[in->off] == 0xcc && code[next] == 0xcc &&
			    !(a->marks[next] & MARK_TARGET))
				continue;
			if ((a->marks[next] & MARK_LEADER) || ends_block(in->cls) || noreturn_call(env, in))
				break;
		}
		last = &a->insns[i - 1];
		b.size = last->off + last->len - b.offset;
		b.succ_start = a->nsuccs;
		switch (last->cls) {
		case HP_IC_JCC:
			if (last->has_target && (err = branch_succ(env, a, f, last->target, limit)))
				return err;
			if ((err = fall_succ(a, f, last->off + last->len)))
				return err;
			break;
		case HP_IC_JMP:
			if (last->has_target && (err = branch_succ(env, a, f, last->target, limit)))
				return err;
			break;
		case HP_IC_JMP_IND:
			while (jt < a->njtables && a->jtables[jt].site < last->off)
				jt++;
			if (jt < a->njtables && a->jtables[jt].site == last->off) {
				const struct hp_jump_table *t = &a->jtables[jt];
				/* One taken successor per distinct entry, in table order. */
				for (uint32_t e = 0; e < t->nentries; e++) {
					uint64_t to = a->jt_targets[t->target_start + e] - f->addr;
					bool seen = false;
					for (size_t q = b.succ_start; q < a->nsuccs; q++)
						seen |= a->succs[q].target == to;
					if (!seen && (err = add_succ(a, HP_SUCC_TAKEN, to)))
						return err;
				}
			} else if ((err = add_succ(a, HP_SUCC_INDIRECT, 0))) {
				return err;
			}
			break;
		case HP_IC_RET:
			if ((err = add_succ(a, HP_SUCC_RETURN, 0)))
				return err;
			break;
		case HP_IC_TRAP:
			break;
		default:
			if (noreturn_call(env, last))
				break;
			if ((err = fall_succ(a, f, last->off + last->len)))
				return err;
			break;
		}
		b.nsucc = a->nsuccs - b.succ_start;
		GROW(a->blocks, a->nblocks, a->cap_blocks, 1);
		a->blocks[a->nblocks++] = b;
	}
	/* The undecodable remainder is one block without instructions or
	 * successors, so blocks still tile the function. */
	if (limit < size) {
		GROW(a->blocks, a->nblocks, a->cap_blocks, 1);
		a->blocks[a->nblocks++] =
			(struct hp_block){ .offset = limit, .size = size - limit, .succ_start = a->nsuccs };
	}
	f->nblocks = a->nblocks - f->block_start;
	f->ncalls = a->ncalls - f->call_start;
	f->nicalls = a->nicalls - f->icall_start;
	return 0;
}

void hp_cfg_arena_free(struct hp_cfg_arena *a)
{
	free(a->blocks);
	free(a->succs);
	free(a->calls);
	free(a->icalls);
	free(a->jtables);
	free(a->jt_targets);
	free(a->marks);
	free(a->insns);
	memset(a, 0, sizeof(*a));
}

/* Parallel driver: functions are cut into fixed chunks handed out through an
 * atomic counter; each chunk has its own arena, so the result does not depend
 * on scheduling. */
#define CHUNK_FUNCS 256

struct parse_job {
	struct hp_module *mod;
	const struct hp_cfg_env *env;
	hp_bytes_fn bytes;
	void *ctx;
	struct hp_cfg_arena *chunks;
	size_t nchunks;
	atomic_size_t next;
	atomic_int err;
};

static void parse_chunk(struct parse_job *j, struct hp_cfg_arena *scratch, size_t c)
{
	struct hp_cfg_arena *out = &j->chunks[c];
	size_t lo = c * CHUNK_FUNCS, hi = lo + CHUNK_FUNCS, k;

	if (hi > j->mod->nfuncs)
		hi = j->mod->nfuncs;
	/* Reuse the thread's scratch so chunks do not each allocate it. */
	out->marks = scratch->marks;
	out->cap_marks = scratch->cap_marks;
	out->insns = scratch->insns;
	out->cap_insns = scratch->cap_insns;
	for (k = lo; k < hi; k++) {
		struct hp_function *f = &j->mod->funcs[k];
		const uint8_t *code;
		int e = 0;

		f->block_start = out->nblocks;
		f->call_start = out->ncalls;
		f->icall_start = out->nicalls;
		f->jt_start = out->njtables;
		f->nblocks = f->ncalls = f->nicalls = f->njt = 0;
		if (f->flags & HP_FN_UNREADABLE)
			continue;
		code = j->bytes(j->ctx, j->mod, f, &e);
		if (!code) {
			f->flags |= HP_FN_UNREADABLE;
			f->read_errno = e ? (e < 0 ? -e : e) : EIO;
			continue;
		}
		if (hp_cfg_build(j->env, code, f, out) < 0) {
			atomic_store(&j->err, -ENOMEM);
			break;
		}
	}
	scratch->marks = out->marks;
	scratch->cap_marks = out->cap_marks;
	scratch->insns = out->insns;
	scratch->cap_insns = out->cap_insns;
	out->marks = NULL;
	out->insns = NULL;
	out->cap_marks = out->cap_insns = 0;
}

static void *parse_worker(void *arg)
{
	struct parse_job *j = arg;
	struct hp_cfg_arena scratch = { 0 };
	size_t c;

	while ((c = atomic_fetch_add(&j->next, 1)) < j->nchunks && !atomic_load(&j->err))
		parse_chunk(j, &scratch, c);
	hp_cfg_arena_free(&scratch);
	return NULL;
}

/* Concatenate per-chunk arenas (chunk c holds functions [c*per, (c+1)*per))
 * or, with redo, rebuild the module's arrays taking the functions marked in
 * redo from arena 0 and every other function from the module itself. */
struct src_arrays {
	const struct hp_block *blocks;
	const struct hp_succ *succs;
	const struct hp_call *calls;
	const uint32_t *icalls;
	const struct hp_jump_table *jtables;
	const uint64_t *jt_targets;
};

static struct src_arrays arena_src(const struct hp_cfg_arena *a)
{
	/* rebuild(mod, NULL, ...) comes with a redo of zeros: no function reads chunks then. */
	// cppcheck-suppress nullPointer
	return (struct src_arrays){ a->blocks, a->succs, a->calls, a->icalls, a->jtables, a->jt_targets };
}

static int rebuild(struct hp_module *mod, const struct hp_cfg_arena *chunks, size_t per, const uint8_t *redo)
{
	struct src_arrays modsrc = { mod->blocks,      mod->succs,   mod->calls,
				     mod->icall_sites, mod->jtables, mod->jt_targets };
	size_t nb = 0, ns = 0, nc = 0, ni = 0, nj = 0, nt = 0, k;
	struct hp_block *blocks;
	struct hp_succ *succs;
	struct hp_call *calls;
	uint32_t *icalls;
	struct hp_jump_table *jtables;
	uint64_t *jt_targets;

	/* Sizes first. */
	for (k = 0; k < mod->nfuncs; k++) {
		const struct hp_function *f = &mod->funcs[k];
		struct src_arrays src = redo ? (redo[k] ? arena_src(&chunks[0]) : modsrc) : arena_src(&chunks[k / per]);

		nb += f->nblocks;
		for (uint32_t b = 0; b < f->nblocks; b++)
			ns += src.blocks[f->block_start + b].nsucc;
		nc += f->ncalls;
		ni += f->nicalls;
		nj += f->njt;
		for (uint32_t t = 0; t < f->njt; t++)
			nt += src.jtables[f->jt_start + t].nentries;
	}
	blocks = malloc((nb ? nb : 1) * sizeof(*blocks));
	succs = malloc((ns ? ns : 1) * sizeof(*succs));
	calls = malloc((nc ? nc : 1) * sizeof(*calls));
	icalls = malloc((ni ? ni : 1) * sizeof(*icalls));
	jtables = malloc((nj ? nj : 1) * sizeof(*jtables));
	jt_targets = malloc((nt ? nt : 1) * sizeof(*jt_targets));
	if (!blocks || !succs || !calls || !icalls || !jtables || !jt_targets) {
		free(blocks);
		free(succs);
		free(calls);
		free(icalls);
		free(jtables);
		free(jt_targets);
		return -ENOMEM;
	}
	nb = ns = nc = ni = nj = nt = 0;
	for (k = 0; k < mod->nfuncs; k++) {
		struct hp_function *f = &mod->funcs[k];
		struct src_arrays src = redo ? (redo[k] ? arena_src(&chunks[0]) : modsrc) : arena_src(&chunks[k / per]);

		for (uint32_t b = 0; b < f->nblocks; b++) {
			struct hp_block blk = src.blocks[f->block_start + b];
			if (blk.nsucc)
				memcpy(succs + ns, src.succs + blk.succ_start, blk.nsucc * sizeof(*succs));
			blk.succ_start = ns;
			ns += blk.nsucc;
			blocks[nb + b] = blk;
		}
		if (f->ncalls)
			memcpy(calls + nc, src.calls + f->call_start, f->ncalls * sizeof(*calls));
		if (f->nicalls)
			memcpy(icalls + ni, src.icalls + f->icall_start, f->nicalls * sizeof(*icalls));
		for (uint32_t t = 0; t < f->njt; t++) {
			struct hp_jump_table jt = src.jtables[f->jt_start + t];
			memcpy(jt_targets + nt, src.jt_targets + jt.target_start, jt.nentries * sizeof(*jt_targets));
			jt.target_start = nt;
			nt += jt.nentries;
			jtables[nj + t] = jt;
		}
		f->block_start = nb;
		f->call_start = nc;
		f->icall_start = ni;
		f->jt_start = nj;
		nb += f->nblocks;
		nc += f->ncalls;
		ni += f->nicalls;
		nj += f->njt;
	}
	free(mod->blocks);
	free(mod->succs);
	free(mod->calls);
	free(mod->icall_sites);
	free(mod->jtables);
	free(mod->jt_targets);
	mod->blocks = blocks;
	mod->succs = succs;
	mod->calls = calls;
	mod->icall_sites = icalls;
	mod->jtables = jtables;
	mod->jt_targets = jt_targets;
	mod->nblocks = nb;
	mod->nsuccs = ns;
	mod->ncalls = nc;
	mod->nicall_sites = ni;
	mod->njtables = nj;
	mod->njt_targets = nt;
	return 0;
}

/* Parse the functions marked in redo again with env, in place. */
static int reparse(struct hp_module *mod, const struct hp_cfg_env *env, hp_bytes_fn bytes, void *ctx,
		   const uint8_t *redo)
{
	struct hp_cfg_arena a = { 0 };
	struct hp_function *saved = malloc((mod->nfuncs ? mod->nfuncs : 1) * sizeof(*saved));
	int err = 0;

	if (!saved)
		return -ENOMEM;
	memcpy(saved, mod->funcs, mod->nfuncs * sizeof(*saved));
	for (size_t k = 0; k < mod->nfuncs && !err; k++) {
		struct hp_function *f = &mod->funcs[k];
		const uint8_t *code;
		int e = 0;

		if (!redo[k])
			continue;
		if (!(code = bytes(ctx, mod, f, &e))) {
			/* Readable the first time: keep what was parsed then. */
			*f = saved[k];
			continue;
		}
		f->flags &= ~HP_FN_UNDECODABLE;
		err = hp_cfg_build(env, code, f, &a);
	}
	if (!err)
		err = rebuild(mod, &a, 1, redo);
	if (err)
		memcpy(mod->funcs, saved, mod->nfuncs * sizeof(*saved));
	free(saved);
	hp_cfg_arena_free(&a);
	return err;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* A growable sorted-on-demand address list. */
struct addrs {
	uint64_t *v;
	size_t n, cap;
};

static int addrs_push(struct addrs *l, uint64_t x)
{
	GROW(l->v, l->n, l->cap, 1);
	l->v[l->n++] = x;
	return 0;
}

static void addrs_sort(struct addrs *l)
{
	size_t w = 0;

	if (l->n)
		qsort(l->v, l->n, sizeof(*l->v), cmp_u64);
	for (size_t i = 0; i < l->n; i++)
		if (!w || l->v[w - 1] != l->v[i])
			l->v[w++] = l->v[i];
	l->n = w;
}

/* Index of the function of mod that starts at addr, or -1. */
static ssize_t func_at(const struct hp_module *mod, uint64_t addr)
{
	size_t lo = 0, hi = mod->nfuncs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (mod->funcs[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < mod->nfuncs && mod->funcs[lo].addr == addr ? (ssize_t)lo : -1;
}

static bool named_noreturn(const char *const *names, const char *name)
{
	size_t n = strlen(name);

	if (n > 4 && !strcmp(name + n - 4, "@plt"))
		n -= 4;
	for (; names && *names; names++)
		if (strlen(*names) == n && !strncmp(*names, name, n))
			return true;
	return false;
}

/* The module's own function a PLT stub at stub goes to; NULL if none. */
static const struct hp_plt_target *plt_target(const struct hp_module *mod, uint64_t stub)
{
	size_t lo = 0, hi = mod->nplt_targets;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (mod->plt_targets[mid].stub < stub)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < mod->nplt_targets && mod->plt_targets[lo].stub == stub ? &mod->plt_targets[lo] : NULL;
}

/* Could f return to its caller? Looks only at blocks reachable from the
 * entry; anything unknown (indirect jumps, undecodable bytes, traps whose
 * meaning is not known, tail calls to a returning function) says yes. */
static bool may_return(const struct hp_module *mod, const struct hp_function *f, const struct hp_cfg_env *env,
		       uint8_t *seen, uint32_t *stack)
{
	size_t sp = 0;
	bool ret = false;

	/* A stub of the module's own function returns if that function does;
	 * any other stub goes who knows where. */
	if (f->flags & HP_FN_PLT) {
		const struct hp_plt_target *t = plt_target(mod, f->addr);
		return !t || !in_sorted(env->noreturn, env->nnoreturn, t->target);
	}
	if (!f->nblocks || (f->flags & (HP_FN_UNDECODABLE | HP_FN_UNREADABLE)))
		return true;
	memset(seen, 0, f->nblocks);
	seen[0] = 1;
	stack[sp++] = 0;
	while (sp && !ret) {
		const struct hp_block *b = &mod->blocks[f->block_start + stack[--sp]];

		if (!b->ninsn)
			return true;
		if (!b->nsucc) {
			/* Ends in a trap or in a call that never returns. */
			bool by_call = false;
			for (uint32_t c = 0; c < f->ncalls; c++) {
				const struct hp_call *cl = &mod->calls[f->call_start + c];
				if (cl->site >= b->offset && cl->site < b->offset + b->size &&
				    in_sorted(env->noreturn, env->nnoreturn, cl->target))
					by_call = true;
			}
			if (!by_call && !env->traps_known)
				return true;
			continue;
		}
		for (uint16_t s = 0; s < b->nsucc; s++) {
			const struct hp_succ *sc = &mod->succs[b->succ_start + s];

			if (sc->kind == HP_SUCC_FALLTHROUGH || sc->kind == HP_SUCC_TAKEN) {
				const struct hp_block *t = hp_function_block_at(mod, f, f->addr + sc->target);
				if (!t)
					return true;
				uint32_t ti = t - &mod->blocks[f->block_start];
				if (!seen[ti]) {
					seen[ti] = 1;
					stack[sp++] = ti;
				}
			} else if (sc->kind == HP_SUCC_TAIL_CALL) {
				if (!in_sorted(env->noreturn, env->nnoreturn, sc->target))
					return true;
			} else {
				return true;
			}
		}
	}
	return ret;
}

static size_t cold_base_len(const char *name)
{
	const char *c = strstr(name, ".cold");

	if (!c || c == name)
		return 0;
	for (const char *p = c + 5; *p; p++)
		if (*p != '.' && (*p < '0' || *p > '9'))
			return 0;
	return c - name;
}

/* Index of the function of mod holding addr, or -1. */
static ssize_t func_holding(const struct hp_module *mod, uint64_t addr)
{
	size_t lo = 0, hi = mod->nfuncs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (mod->funcs[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || addr - mod->funcs[lo - 1].addr >= mod->funcs[lo - 1].size)
		return -1;
	return (ssize_t)lo - 1;
}

/* The functions of a module in name order, to find fragments by name. */
struct by_name {
	const struct hp_module *mod;
	uint32_t *v;
};

/* By name, then by address (the functions' order), so that a name's
 * functions come in address order. */
static int cmp_by_name(const void *a, const void *b, void *arg)
{
	const struct hp_module *mod = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = strcmp(mod->funcs[x].name, mod->funcs[y].name);

	return c ? c : (x > y) - (x < y);
}

static int by_name_build(const struct hp_module *mod, struct by_name *bn)
{
	bn->mod = mod;
	bn->v = malloc((mod->nfuncs ? mod->nfuncs : 1) * sizeof(*bn->v));
	if (!bn->v)
		return -ENOMEM;
	for (size_t k = 0; k < mod->nfuncs; k++)
		bn->v[k] = (uint32_t)k;
	if (mod->nfuncs)
		qsort_r(bn->v, mod->nfuncs, sizeof(*bn->v), cmp_by_name, (void *)mod);
	return 0;
}

/* First position whose name does not sort before key[0, klen) as a prefix. */
static size_t by_name_prefix(const struct by_name *bn, const char *key, size_t klen)
{
	size_t lo = 0, hi = bn->mod->nfuncs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strncmp(bn->mod->funcs[bn->v[mid]].name, key, klen) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Link each .cold fragment to its function (the one of that name that jumps
 * into it) and collect the jump targets between fragments that do not yet
 * start a block; marks in redo the fragments to parse again. */
static int link_fragments(struct hp_module *mod, const struct by_name *bn, struct addrs *leaders, uint8_t *redo,
			  bool *any)
{
	for (size_t k = 0; k < mod->nfuncs; k++) {
		struct hp_function *c = &mod->funcs[k];
		size_t bl = cold_base_len(c->name);
		ssize_t best = -1;
		int cands = 0;

		if (!bl || !c->nblocks)
			continue;
		/* The functions named c's base, in address order. */
		for (size_t i = by_name_prefix(bn, c->name, bl);
		     i < mod->nfuncs && !strncmp(mod->funcs[bn->v[i]].name, c->name, bl); i++) {
			size_t p = bn->v[i];
			const struct hp_function *pf = &mod->funcs[p];
			if (p == k || pf->name[bl] || !pf->nblocks)
				continue;
			cands++;
			for (uint32_t b = 0; b < pf->nblocks && best != (ssize_t)p; b++) {
				const struct hp_block *blk = &mod->blocks[pf->block_start + b];
				for (uint16_t s = 0; s < blk->nsucc; s++) {
					const struct hp_succ *sc = &mod->succs[blk->succ_start + s];
					if (sc->kind == HP_SUCC_TAIL_CALL && sc->target >= c->addr &&
					    sc->target < c->addr + c->size)
						best = (ssize_t)p;
				}
			}
			if (best < 0 && cands == 1)
				best = -2 - (ssize_t)p; /* the only one so far */
		}
		if (best <= -2)
			best = cands == 1 ? -2 - best : -1;
		if (best < 0)
			continue;
		struct hp_function *pf = &mod->funcs[best];
		c->flags |= HP_FN_COLD_PART;
		c->parent = (uint32_t)best + 1;
		pf->cold = (uint32_t)k + 1;
		/* Jumps either way between the two fragments. */
		const struct hp_function *pair[2][2] = { { pf, c }, { c, pf } };
		for (int d = 0; d < 2; d++) {
			const struct hp_function *from = pair[d][0], *to = pair[d][1];
			for (uint32_t b = 0; b < from->nblocks; b++) {
				const struct hp_block *blk = &mod->blocks[from->block_start + b];
				for (uint16_t s = 0; s < blk->nsucc; s++) {
					const struct hp_succ *sc = &mod->succs[blk->succ_start + s];
					const struct hp_block *tb;
					if (sc->kind != HP_SUCC_TAIL_CALL || sc->target < to->addr ||
					    sc->target >= to->addr + to->size)
						continue;
					tb = hp_function_block_at(mod, to, sc->target);
					if (tb && to->addr + tb->offset == sc->target)
						continue;
					if (addrs_push(leaders, sc->target) < 0)
						return -ENOMEM;
					redo[to - mod->funcs] = 1;
					*any = true;
				}
			}
		}
	}
	return 0;
}

/* ---- Switch tables whose base is set outside the jump's block ----------
 * (SQLite's record-header loop: the lea before the loop, the jump at its
 * end.) First a guess per unresolved table jump: the leas its base comes
 * from, followed back over the CFG without the table's own edges (its
 * cases, only reached through it, are dead ends then). The functions are
 * parsed again with the guesses as hints, which makes their tables' targets
 * blocks; then each table is proved over the complete CFG, its own edges
 * included (by induction over the run: while every earlier dispatch read
 * this table, control followed these edges, so the next one reads it too).
 * A function whose proof fails is parsed again without its hints. */
struct hints {
	struct hp_jt_hint *v;
	size_t n, cap;
};

static int cmp_hint(const void *a, const void *b)
{
	uint64_t x = ((const struct hp_jt_hint *)a)->jump, y = ((const struct hp_jt_hint *)b)->jump;

	return x < y ? -1 : x > y;
}

/* f's instruction offsets (a linear sweep), *n of them; NULL when out of memory. */
static uint32_t *insn_offsets(const uint8_t *code, const struct hp_function *f, size_t *n)
{
	uint32_t *v = malloc(((size_t)f->size + 1) * sizeof(*v)), off = 0;
	struct hp_isa_insn d;

	*n = 0;
	while (v && off < f->size && hp_isa_decode(code + off, f->size - off, f->addr + off, &d) == 0) {
		v[(*n)++] = off;
		off += d.len;
	}
	return v;
}

/* The table jump ending block b of f (offs: its instructions): recognized
 * from the instructions before it; *jump gets its address. */
static bool table_jump(const uint8_t *code, const struct hp_function *f, const struct hp_block *bl,
		       const uint32_t *offs, size_t n, struct hp_jt_match *m, uint64_t *jump)
{
	size_t lo = 0, hi = n, i;

	/* The last instruction starting before the block's end. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (offs[mid] < bl->offset + bl->size)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || offs[lo - 1] < bl->offset)
		return false;
	i = lo - 1;
	*jump = f->addr + offs[i];
	return hp_jt_recognize(code, f->size, f->addr, offs + (i >= 15 ? i - 15 : 0), i >= 15 ? 16 : i + 1, m);
}

/* What following a function's base registers needs: its instructions and
 * its graph, made on first use; the module's jump and call targets, once. */
struct walk {
	const struct hp_module *mod;
	const struct hp_function *f;
	const uint8_t *code;
	uint32_t *offs;
	size_t n;
	struct hp_jt_graph g;
	bool ready;
	uint64_t **foreign;
	size_t *nforeign;
};

static int walk_ready(struct walk *w)
{
	if (w->ready)
		return 0;
	if (!*w->foreign && hp_jt_foreign(w->mod, w->foreign, w->nforeign) < 0)
		return -ENOMEM;
	if (!(w->offs = insn_offsets(w->code, w->f, &w->n)) ||
	    hp_jt_graph_of(w->mod, w->f, *w->foreign, *w->nforeign, &w->g) < 0)
		return -ENOMEM;
	w->g.code = w->code;
	w->g.addr = w->f->addr;
	w->g.len = w->f->size;
	w->ready = true;
	return 0;
}

static void walk_free(struct walk *w)
{
	if (w->ready)
		hp_jt_graph_free(&w->g);
	free(w->offs);
}

/* Guesses for w's function's unresolved table jumps (appended to h). 1 if
 * any, 0, or -ENOMEM. A label table's dispatch repeated at the end of its
 * handlers reads a base that nothing on the way back sets: the handlers are
 * reached only through the table, whose edges the graph does not have yet.
 * Such a jump reading the same register as a label table jump whose base was
 * found is guessed to read that table; prove_tables then checks every one
 * over the complete CFG. */
static int guess_tables(struct walk *w, struct hints *h)
{
	const struct hp_module *mod = w->mod;
	const struct hp_function *f = w->f;
	struct label_guess {
		uint64_t jump;
		uint16_t reg;
	} *later = NULL;
	size_t nlater = 0, cap_later = 0, first = h->n;
	int found = 0;

	for (uint32_t b = 0; b < f->nblocks; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];
		struct hp_jt_match m;
		uint64_t jump, table, lea;
		bool indirect = false;
		for (uint16_t s = 0; s < bl->nsucc; s++)
			indirect |= mod->succs[bl->succ_start + s].kind == HP_SUCC_INDIRECT;
		if (!indirect)
			continue;
		if (walk_ready(w) < 0 || HP_GROW(h->v, h->cap, h->n + 1))
			goto nomem;
		if (!table_jump(w->code, f, bl, w->offs, w->n, &m, &jump) || !m.hoisted)
			continue;
		int r = hp_jt_base_walk(&w->g, b, jump, m.base_reg, &table, &lea);
		if (r == 0 && m.label) {
			if (HP_GROW(later, cap_later, nlater + 1))
				goto nomem;
			later[nlater++] = (struct label_guess){ jump, m.base_reg };
		}
		if (r != 1)
			continue;
		h->v[h->n++] = (struct hp_jt_hint){ jump, table, lea, m.label ? m.base_reg : (uint16_t)0 };
		found = 1;
	}
	for (size_t i = 0; i < nlater; i++)
		for (size_t k = first; k < h->n; k++)
			if (h->v[k].label_reg == later[i].reg) {
				if (HP_GROW(h->v, h->cap, h->n + 1))
					goto nomem;
				h->v[h->n++] =
					(struct hp_jt_hint){ later[i].jump, h->v[k].table, h->v[k].lea, later[i].reg };
				break;
			}
	free(later);
	return found;
nomem:
	free(later);
	return -ENOMEM;
}

/* Every table of w's function whose base is set outside its jump's block
 * proved over the function's complete CFG (and so marked hoisted)? 1 or 0,
 * -ENOMEM when out of memory. */
static int prove_tables(struct walk *w, struct hp_module *mod)
{
	const struct hp_function *f = w->f;
	int ok = 1;

	for (uint32_t t = 0; t < f->njt && ok; t++) {
		struct hp_jump_table *jt = &mod->jtables[f->jt_start + t];
		const struct hp_block *bl = hp_function_block_at(mod, f, f->addr + jt->site);
		struct hp_jt_match m;
		uint64_t jump, table, lea;
		if (!(jt->relative || jt->label) ||
		    (hp_function_block_at(mod, f, f->addr + jt->base_site) == bl && !jt->hoisted))
			continue;
		if (walk_ready(w) < 0)
			return -ENOMEM;
		/* One table, two jumps: a lea naming it names the copy of the first
		 * (the emitter makes one copy of a table), which is right only if
		 * every jump reads the same entries (a label table's dispatch is
		 * usually repeated at the end of each handler). */
		for (uint32_t u = 0; u < f->njt; u++) {
			const struct hp_jump_table *o = &mod->jtables[f->jt_start + u];
			if (u != t && o->table_addr == jt->table_addr &&
			    (!jt->label || !o->label || o->nentries != jt->nentries))
				ok = 0;
		}
		ok = ok && w->g.complete && bl && table_jump(w->code, f, bl, w->offs, w->n, &m, &jump) &&
		     jump == f->addr + jt->site &&
		     hp_jt_base_reaches(&w->g, (size_t)(bl - &mod->blocks[f->block_start]), jump, m.base_reg, &table,
					&lea) &&
		     table == jt->table_addr;
		if (ok)
			jt->hoisted = 1;
	}
	return ok;
}

/* Has f a table whose base is set outside its jump's block? */
static bool base_elsewhere(const struct hp_module *mod, const struct hp_function *f)
{
	for (uint32_t t = 0; t < f->njt; t++) {
		const struct hp_jump_table *jt = &mod->jtables[f->jt_start + t];
		if (jt->hoisted || hp_function_block_at(mod, f, f->addr + jt->site) !=
					   hp_function_block_at(mod, f, f->addr + jt->base_site))
			return true;
	}
	return false;
}

static int hoist_tables(struct hp_module *mod, struct hp_cfg_env *env, hp_bytes_fn bytes, void *ctx, uint8_t *redo)
{
	struct hints h = { 0 };
	uint64_t *foreign = NULL;
	size_t nforeign = 0;
	bool any = false;
	int err = 0;

	memset(redo, 0, mod->nfuncs);
	for (size_t k = 0; k < mod->nfuncs && !err; k++) {
		struct hp_function *f = &mod->funcs[k];
		struct walk w = { mod, f, NULL, .foreign = &foreign, .nforeign = &nforeign };
		bool unresolved = f->flags & HP_FN_UNRESOLVED_JUMP, elsewhere = base_elsewhere(mod, f);
		int e = 0, r = 0;
		if (!f->nblocks || (f->flags & (HP_FN_UNDECODABLE | HP_FN_UNREADABLE)) || (!unresolved && !elsewhere) ||
		    !(w.code = bytes(ctx, mod, f, &e)))
			continue;
		/* Tables resolved in the window whose lea is in another block. */
		if (elsewhere && (r = prove_tables(&w, mod)) < 0)
			err = r;
		else if (unresolved && (r = guess_tables(&w, &h)) < 0)
			err = r;
		else if (unresolved && r)
			redo[k] = any = 1;
		walk_free(&w);
	}
	if (err || !any)
		goto out;
	qsort(h.v, h.n, sizeof(*h.v), cmp_hint);
	env->jt_hints = h.v;
	env->njt_hints = h.n;
	if ((err = reparse(mod, env, bytes, ctx, redo)) < 0)
		goto out;
	/* Proved, or parsed again without its hints. */
	any = false;
	for (size_t k = 0; k < mod->nfuncs && !err; k++) {
		struct hp_function *f = &mod->funcs[k];
		struct walk w = { mod, f, NULL, .foreign = &foreign, .nforeign = &nforeign };
		int e = 0, r = 0;
		if (!redo[k])
			continue;
		redo[k] = 0;
		if ((w.code = bytes(ctx, mod, f, &e)))
			r = prove_tables(&w, mod);
		walk_free(&w);
		if (r < 0)
			err = r;
		if (r != 0)
			continue;
		size_t keep = 0;
		for (size_t i = 0; i < h.n; i++)
			if (h.v[i].jump < f->addr || h.v[i].jump >= f->addr + f->size)
				h.v[keep++] = h.v[i];
		h.n = env->njt_hints = keep;
		redo[k] = any = 1;
	}
	if (!err && any)
		err = reparse(mod, env, bytes, ctx, redo);
out:
	env->jt_hints = NULL;
	env->njt_hints = 0;
	free(h.v);
	free(foreign);
	return err;
}

/* Everything after the first parse: fragments, then functions that never
 * return until a fixed point. */
static int refine(struct hp_module *mod, const struct by_name *bn, struct hp_cfg_env *env, struct addrs *noret,
		  hp_bytes_fn bytes, void *ctx, bool prove)
{
	struct addrs leaders = { 0 };
	uint8_t *redo = calloc(mod->nfuncs ? mod->nfuncs : 1, 1);
	uint8_t *seen = NULL;
	uint32_t *stack = NULL;
	size_t cap_seen = 0, cap_stack = 0;
	bool any = false;
	int err = 0;

	if (!redo)
		return -ENOMEM;
	if ((err = link_fragments(mod, bn, &leaders, redo, &any)) < 0)
		goto out;
	if (any) {
		addrs_sort(&leaders);
		env->extra_leaders = leaders.v;
		env->nextra_leaders = leaders.n;
		if ((err = reparse(mod, env, bytes, ctx, redo)) < 0)
			goto out;
	}
	/* Each round proves more functions never return and re-parses their
	 * callers, whose blocks now end at those calls (so a function may have
	 * more blocks in the next round: the scratch space follows). */
	for (int round = 0; prove && round < 16; round++) {
		size_t found = 0, need = 1;

		for (size_t k = 0; k < mod->nfuncs; k++)
			if (mod->funcs[k].nblocks > need)
				need = mod->funcs[k].nblocks;
		if (HP_GROW(seen, cap_seen, need) || HP_GROW(stack, cap_stack, need)) {
			err = -ENOMEM;
			goto out;
		}
		memset(redo, 0, mod->nfuncs);
		for (size_t k = 0; k < mod->nfuncs; k++) {
			struct hp_function *f = &mod->funcs[k];
			if ((f->flags & HP_FN_NORETURN) || may_return(mod, f, env, seen, stack))
				continue;
			f->flags |= HP_FN_NORETURN;
			if ((err = addrs_push(noret, f->addr)) < 0)
				goto out;
			found++;
		}
		if (!found)
			break;
		addrs_sort(noret);
		env->noreturn = noret->v;
		env->nnoreturn = noret->n;
		for (size_t k = 0; k < mod->nfuncs; k++) {
			const struct hp_function *f = &mod->funcs[k];
			for (uint32_t c = 0; c < f->ncalls && !redo[k]; c++) {
				ssize_t g = func_at(mod, mod->calls[f->call_start + c].target);
				if (g >= 0 && (mod->funcs[g].flags & HP_FN_NORETURN) &&
				    !(mod->funcs[g].flags & HP_FN_NORETURN_NAMED))
					redo[k] = 1;
			}
		}
		if ((err = reparse(mod, env, bytes, ctx, redo)) < 0)
			goto out;
	}
	err = hoist_tables(mod, env, bytes, ctx, redo);
out:
	env->extra_leaders = NULL;
	env->nextra_leaders = 0;
	free(leaders.v);
	free(redo);
	free(seen);
	free(stack);
	return err;
}

/* The parse of only some functions: grow the set from the requested ones
 * through direct calls, direct jumps and .cold fragment names, parsing each
 * newcomer once (their first parse, as in the whole-module parse), then
 * refine the set exactly as the whole module is refined: nothing outside
 * the set can change a fact about a function in it. Afterwards only the
 * requested functions keep blocks. */
static int parse_only(struct hp_module *mod, struct hp_cfg_env *env, struct addrs *noret, hp_bytes_fn bytes, void *ctx,
		      struct hp_cfg_only *only)
{
	size_t n = mod->nfuncs ? mod->nfuncs : 1, k;
	uint8_t *in = calloc(n, 1), *redo = calloc(n, 1), *next = calloc(n, 1), *keep = calloc(n, 1);
	struct by_name bn = { mod, NULL };
	struct addrs out = { 0 };
	struct hp_cfg_arena a = { 0 };
	char *key = NULL;
	size_t cap_key = 0;
	bool any = false;
	int err = 0;

#define ADD(g)                         \
	do {                           \
		if (!in[(g)]) {        \
			in[(g)] = 1;   \
			next[(g)] = 1; \
			any = true;    \
		}                      \
	} while (0)

	only->outside = NULL;
	only->noutside = 0;
	if (!in || !redo || !next || !keep || by_name_build(mod, &bn) < 0) {
		err = -ENOMEM;
		goto out;
	}
	for (k = 0; k < mod->nfuncs; k++) {
		struct hp_function *f = &mod->funcs[k];

		f->block_start = f->call_start = f->icall_start = f->jt_start = 0;
		f->nblocks = f->ncalls = f->nicalls = f->njt = 0;
		if ((only->name && !strcmp(f->name, only->name)) || in_sorted(only->addrs, only->naddrs, f->addr)) {
			keep[k] = 1;
			ADD(k);
		}
	}
	while (any) {
		uint8_t *t = redo;

		redo = next;
		next = t;
		memset(next, 0, n);
		any = false;
		for (k = 0; k < mod->nfuncs; k++) {
			struct hp_function *f = &mod->funcs[k];
			const uint8_t *code;
			ssize_t g;
			int e = 0;

			if (!redo[k] || (f->flags & HP_FN_UNREADABLE))
				continue;
			if (!(code = bytes(ctx, mod, f, &e))) {
				f->flags |= HP_FN_UNREADABLE;
				f->read_errno = e ? (e < 0 ? -e : e) : EIO;
				continue;
			}
			if ((err = hp_cfg_build(env, code, f, &a)) < 0)
				goto out;
			/* Callees and jump targets: whether they return (known
			 * already when the set is complete). */
			for (uint32_t c = 0; c < f->ncalls; c++) {
				uint64_t to = a.calls[f->call_start + c].target;
				if ((g = func_holding(mod, to)) >= 0) {
					if (!only->complete)
						ADD(g);
				} else if ((err = addrs_push(&out, to)) < 0)
					goto out;
			}
			for (uint32_t b = 0; b < f->nblocks; b++) {
				const struct hp_block *blk = &a.blocks[f->block_start + b];
				for (uint16_t s = 0; s < blk->nsucc; s++) {
					const struct hp_succ *sc = &a.succs[blk->succ_start + s];
					if (sc->kind != HP_SUCC_TAIL_CALL)
						continue;
					if ((g = func_holding(mod, sc->target)) >= 0) {
						if (!only->complete)
							ADD(g);
					} else if ((err = addrs_push(&out, sc->target)) < 0)
						goto out;
				}
			}
			/* A stub: the module's own function it goes to. */
			const struct hp_plt_target *pt = (f->flags & HP_FN_PLT) ? plt_target(mod, f->addr) : NULL;
			if (pt && (g = func_holding(mod, pt->target)) >= 0)
				ADD(g);
			/* Fragments: a .cold part's candidate main parts, and a
			 * function's .cold parts, decide links and leaders. */
			size_t bl = cold_base_len(f->name), len = strlen(f->name);
			if (bl) {
				for (size_t i = by_name_prefix(&bn, f->name, bl);
				     i < mod->nfuncs && !strncmp(mod->funcs[bn.v[i]].name, f->name, bl); i++)
					if (!mod->funcs[bn.v[i]].name[bl])
						ADD(bn.v[i]);
			}
			if (HP_GROW(key, cap_key, len + 6)) {
				err = -ENOMEM;
				goto out;
			}
			memcpy(key, f->name, len);
			memcpy(key + len, ".cold", 6);
			for (size_t i = by_name_prefix(&bn, key, len + 5);
			     i < mod->nfuncs && !strncmp(mod->funcs[bn.v[i]].name, key, len + 5); i++)
				if (cold_base_len(mod->funcs[bn.v[i]].name) == len)
					ADD(bn.v[i]);
		}
	}
	/* Into the module's arrays, as the first parse of the whole module. */
	if ((err = rebuild(mod, &a, 1, in)) < 0)
		goto out;
	hp_cfg_arena_free(&a);
	if ((err = refine(mod, &bn, env, noret, bytes, ctx, !only->complete)) < 0)
		goto out;
	/* Keep the requested functions' blocks (facts such as NORETURN and
	 * the fragment links stay on every function of the set). */
	for (k = 0; k < mod->nfuncs; k++)
		if (!keep[k]) {
			struct hp_function *f = &mod->funcs[k];
			f->nblocks = f->ncalls = f->nicalls = f->njt = 0;
		}
	memset(redo, 0, n);
	if ((err = rebuild(mod, NULL, 1, redo)) < 0)
		goto out;
	addrs_sort(&out);
	only->outside = out.v;
	only->noutside = out.n;
	out.v = NULL;
out:
#undef ADD
	hp_cfg_arena_free(&a);
	free(in);
	free(redo);
	free(next);
	free(keep);
	free(bn.v);
	free(key);
	free(out.v);
	return err;
}

int hp_cfg_parse_module(struct hp_module *mod, const struct hp_cfg_env *env_in, hp_bytes_fn bytes, void *ctx,
			int threads, struct hp_cfg_only *only)
{
	struct hp_cfg_env env = env_in ? *env_in : (struct hp_cfg_env){ 0 };
	struct parse_job j = { mod, &env, bytes, ctx };
	struct addrs noret = { 0 };
	size_t c, k;
	pthread_t *tids = NULL;
	int t, started = 0, err = 0;

	/* Functions named as never returning, before the first parse. */
	for (k = 0; k < env.nnoreturn; k++)
		if ((err = addrs_push(&noret, env.noreturn[k])) < 0)
			return err;
	for (k = 0; k < mod->nfuncs; k++) {
		struct hp_function *f = &mod->funcs[k];
		f->flags &= ~(HP_FN_NORETURN | HP_FN_NORETURN_NAMED | HP_FN_COLD_PART);
		f->parent = f->cold = 0;
		if (in_sorted(env.noreturn, env.nnoreturn, f->addr) || named_noreturn(env.noreturn_names, f->name)) {
			f->flags |= HP_FN_NORETURN | HP_FN_NORETURN_NAMED;
			if ((err = addrs_push(&noret, f->addr)) < 0)
				goto out;
		}
	}
	/* Those a whole parse proved (the set is complete). */
	for (k = 0; only && only->complete && k < mod->nfuncs; k++) {
		struct hp_function *f = &mod->funcs[k];
		if (!(f->flags & HP_FN_NORETURN) && in_sorted(only->proven, only->nproven, f->addr)) {
			f->flags |= HP_FN_NORETURN;
			if ((err = addrs_push(&noret, f->addr)) < 0)
				goto out;
		}
	}
	addrs_sort(&noret);
	env.noreturn = noret.v;
	env.nnoreturn = noret.n;
	if (only) {
		err = parse_only(mod, &env, &noret, bytes, ctx, only);
		goto out;
	}

	if (threads <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		threads = n > 0 ? (int)n : 1;
	}
	j.nchunks = (mod->nfuncs + CHUNK_FUNCS - 1) / CHUNK_FUNCS;
	if ((size_t)threads > j.nchunks)
		threads = j.nchunks ? (int)j.nchunks : 1;
	j.chunks = calloc(j.nchunks ? j.nchunks : 1, sizeof(*j.chunks));
	tids = calloc(threads, sizeof(*tids));
	if (!j.chunks || !tids) {
		err = -ENOMEM;
		goto out;
	}
	atomic_init(&j.next, 0);
	atomic_init(&j.err, 0);
	for (t = 1; t < threads; t++) {
		if (pthread_create(&tids[t], NULL, parse_worker, &j) != 0)
			break;
		started++;
	}
	parse_worker(&j);
	for (t = 1; t <= started; t++)
		pthread_join(tids[t], NULL);
	if ((err = atomic_load(&j.err)))
		goto out;
	/* Concatenate the chunks in function order. */
	if ((err = rebuild(mod, j.chunks, CHUNK_FUNCS, NULL)) < 0)
		goto out;
	struct by_name bn;
	if ((err = by_name_build(mod, &bn)) < 0)
		goto out;
	err = refine(mod, &bn, &env, &noret, bytes, ctx, true);
	free(bn.v);
out:
	if (j.chunks)
		for (c = 0; c < j.nchunks; c++)
			hp_cfg_arena_free(&j.chunks[c]);
	free(j.chunks);
	free(tids);
	free(noret.v);
	return err;
}
