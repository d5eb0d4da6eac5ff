// SPDX-License-Identifier: Apache-2.0
/*
 * CFG construction. A linear sweep decodes the function once, marking
 * instruction starts and leaders (the entry, every direct branch target inside
 * the function, the instruction after every block-ending instruction); a second
 * pass over the decoded instructions cuts blocks at leaders and records
 * successors and call sites. Calls do not end blocks: they return.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/cfg.h"
#include "isa/isa.h"

struct hp_cfg_insn {
	uint32_t off;
	uint8_t len;
	uint8_t cls;
	bool has_target;
	uint64_t target;
};

enum { MARK_INSN = 1, MARK_LEADER = 2, MARK_TARGET = 4 };

#define GROW(arr, n, cap, extra)                                         \
	do {                                                             \
		if ((n) + (extra) > (cap)) {                             \
			size_t nc_ = (cap) ? (cap)*2 : 256;              \
			while (nc_ < (n) + (extra))                      \
				nc_ *= 2;                                \
			void *p_ = realloc((arr), nc_ * sizeof(*(arr))); \
			if (!p_)                                         \
				return -ENOMEM;                          \
			(arr) = p_;                                      \
			(cap) = nc_;                                     \
		}                                                        \
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
	size_t ni = 0, i;
	int err;

	f->block_start = a->nblocks;
	f->call_start = a->ncalls;
	f->icall_start = a->nicalls;
	f->nblocks = f->ncalls = f->nicalls = 0;
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
		GROW(a->insns, ni, a->cap_insns, 1);
		a->insns[ni] = (struct hp_cfg_insn){ off, d.len, d.cls, d.has_target, d.target };
		ni++;
		a->marks[off] |= MARK_INSN;
		if ((d.cls == HP_IC_JCC || d.cls == HP_IC_JMP) && d.has_target && d.target >= f->addr &&
		    d.target < f->addr + size)
			a->marks[d.target - f->addr] |= MARK_LEADER | MARK_TARGET;
		if (d.cls == HP_IC_JCC || d.cls == HP_IC_JMP || d.cls == HP_IC_JMP_IND || d.cls == HP_IC_RET ||
		    d.cls == HP_IC_TRAP)
			a->marks[off + d.len] |= MARK_LEADER;
		off += d.len;
	}
	limit = off; /* decoded prefix; == size unless undecodable */
	a->marks[0] |= MARK_LEADER;

	/* Pass 2: cut blocks and record successors and calls. */
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
			if ((a->marks[next] & MARK_LEADER) || in->cls == HP_IC_JCC || in->cls == HP_IC_JMP ||
			    in->cls == HP_IC_JMP_IND || in->cls == HP_IC_RET || in->cls == HP_IC_TRAP)
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
			if ((err = add_succ(a, HP_SUCC_INDIRECT, 0)))
				return err;
			break;
		case HP_IC_RET:
			if ((err = add_succ(a, HP_SUCC_RETURN, 0)))
				return err;
			break;
		case HP_IC_TRAP:
			break;
		default:
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
	const char *only_name;
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
		if (j->only_name && strcmp(f->name, j->only_name) != 0)
			continue;
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

int hp_cfg_parse_module(struct hp_module *mod, const struct hp_cfg_env *env, hp_bytes_fn bytes, void *ctx, int threads,
			const char *only_name)
{
	struct parse_job j = { mod, env, bytes, ctx, only_name };
	size_t nb = 0, ns = 0, nc = 0, ni = 0, c, k;
	pthread_t *tids = NULL;
	int t, started = 0, err = 0;

	if (threads <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		threads = n > 0 ? (int)n : 1;
	}
	j.nchunks = (mod->nfuncs + CHUNK_FUNCS - 1) / CHUNK_FUNCS;
	if ((size_t)threads > j.nchunks)
		threads = j.nchunks ? (int)j.nchunks : 1;
	if (only_name)
		threads = 1;
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

	/* Concatenate the chunks in order, rebasing each chunk's ranges. */
	for (c = 0; c < j.nchunks; c++) {
		nb += j.chunks[c].nblocks;
		ns += j.chunks[c].nsuccs;
		nc += j.chunks[c].ncalls;
		ni += j.chunks[c].nicalls;
	}
	free(mod->blocks);
	free(mod->succs);
	free(mod->calls);
	free(mod->icall_sites);
	mod->blocks = malloc((nb ? nb : 1) * sizeof(*mod->blocks));
	mod->succs = malloc((ns ? ns : 1) * sizeof(*mod->succs));
	mod->calls = malloc((nc ? nc : 1) * sizeof(*mod->calls));
	mod->icall_sites = malloc((ni ? ni : 1) * sizeof(*mod->icall_sites));
	if (!mod->blocks || !mod->succs || !mod->calls || !mod->icall_sites) {
		err = -ENOMEM;
		goto out;
	}
	nb = ns = nc = ni = 0;
	for (c = 0; c < j.nchunks; c++) {
		struct hp_cfg_arena *a = &j.chunks[c];
		size_t lo = c * CHUNK_FUNCS, hi = lo + CHUNK_FUNCS;

		if (hi > mod->nfuncs)
			hi = mod->nfuncs;
		for (k = lo; k < hi; k++) {
			mod->funcs[k].block_start += nb;
			mod->funcs[k].call_start += nc;
			mod->funcs[k].icall_start += ni;
		}
		for (k = 0; k < a->nblocks; k++) {
			mod->blocks[nb + k] = a->blocks[k];
			mod->blocks[nb + k].succ_start += ns;
		}
		if (a->nsuccs)
			memcpy(mod->succs + ns, a->succs, a->nsuccs * sizeof(*a->succs));
		if (a->ncalls)
			memcpy(mod->calls + nc, a->calls, a->ncalls * sizeof(*a->calls));
		if (a->nicalls)
			memcpy(mod->icall_sites + ni, a->icalls, a->nicalls * sizeof(*a->icalls));
		nb += a->nblocks;
		ns += a->nsuccs;
		nc += a->ncalls;
		ni += a->nicalls;
		hp_cfg_arena_free(a);
	}
	mod->nblocks = nb;
	mod->nsuccs = ns;
	mod->ncalls = nc;
	mod->nicall_sites = ni;
out:
	if (j.chunks)
		for (c = 0; c < j.nchunks; c++)
			hp_cfg_arena_free(&j.chunks[c]);
	free(j.chunks);
	free(tids);
	return err;
}
