/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Basic blocks and control-flow graphs from a function's bytes, and the
 * parallel driver that builds them for every function of a module. Output
 * goes into per-chunk arenas that are concatenated in function order, so the
 * module ends up with one array each of blocks, successors and call sites.
 */
#ifndef HOTPATH_CFG_H
#define HOTPATH_CFG_H

#include "model/model.h"

/* Addresses with a special meaning as branch targets: jumping to a return
 * thunk is a return, jumping to (or calling) an indirect thunk is indirect.
 * Both arrays sorted ascending. */
struct hp_cfg_env {
	const uint64_t *ret_thunks;
	size_t nret_thunks;
	const uint64_t *ind_thunks;
	size_t nind_thunks;
};

/* Growable output of the CFG builder plus its per-function scratch space. */
struct hp_cfg_arena {
	struct hp_block *blocks;
	size_t nblocks, cap_blocks;
	struct hp_succ *succs;
	size_t nsuccs, cap_succs;
	struct hp_call *calls;
	size_t ncalls, cap_calls;
	uint32_t *icalls;
	size_t nicalls, cap_icalls;
	/* scratch */
	uint8_t *marks;
	size_t cap_marks;
	struct hp_cfg_insn *insns;
	size_t cap_insns;
};

/* Build f's blocks from code[0, f->size) at f->addr, appending to a; sets
 * f's ranges (relative to a) and the UNDECODABLE flag. Returns 0 or -ENOMEM. */
int hp_cfg_build(const struct hp_cfg_env *env, const uint8_t *code, struct hp_function *f, struct hp_cfg_arena *a);
void hp_cfg_arena_free(struct hp_cfg_arena *a);

/* Where a function's bytes are: a pointer valid for the whole parse, or NULL
 * with *err set (the function is then marked UNREADABLE). */
typedef const uint8_t *(*hp_bytes_fn)(void *ctx, const struct hp_module *mod, const struct hp_function *f, int *err);

/* Parse the functions of mod (all, or only those named only_name) on
 * threads threads (0 = online CPUs) and fill the module's arrays.
 * Returns 0 or a negative errno. */
int hp_cfg_parse_module(struct hp_module *mod, const struct hp_cfg_env *env, hp_bytes_fn bytes, void *ctx, int threads,
			const char *only_name);

#endif
