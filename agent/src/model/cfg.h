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

/* Reads non-code bytes (switch tables) at an absolute address: 0 or a negative errno. */
typedef int (*hp_data_fn)(void *ctx, uint64_t addr, void *buf, size_t len);

/* What the CFG builder needs to know beyond a function's bytes. Address
 * arrays are sorted ascending. */
struct hp_cfg_env {
	/* Jumping to a return thunk is a return; jumping to (or calling) an
	 * indirect thunk is indirect. */
	const uint64_t *ret_thunks;
	size_t nret_thunks;
	const uint64_t *ind_thunks;
	size_t nind_thunks;
	/* Callees that never return: a call to one ends its block with no
	 * successor. hp_cfg_parse_module adds the module's functions named in
	 * noreturn_names (NULL-terminated; "name@plt" stubs match too) and
	 * those it proves never return. */
	const uint64_t *noreturn;
	size_t nnoreturn;
	const char *const *noreturn_names;
	/* Trap instructions after which execution continues (the kernel's
	 * WARN: its bug table marks them); traps_known says the other traps
	 * really end execution (BUG), else they are not trusted to. */
	const uint64_t *warn_traps;
	size_t nwarn_traps;
	bool traps_known;
	bool hlt_continues; /* kernel: hlt resumes at the next instruction */
	/* Addresses that start blocks although nothing in their own function
	 * branches there (jumps from another fragment of the same function). */
	const uint64_t *extra_leaders;
	size_t nextra_leaders;
	/* Jump-label sites (kernel static keys): JMPs the target rewrote to
	 * one canonical form (the jump to the site's target) whatever the
	 * key's state; each is modelled like a jcc, fallthrough and taken,
	 * and marks its function HP_FN_STATIC_BRANCH. */
	const uint64_t *static_branches;
	size_t nstatic_branches;
	/* Static call sites and trampolines (kernel): 5-byte direct calls
	 * and jumps the target rewrote to one form; their callee is set at
	 * run time, so each is modelled as an indirect call or jump and
	 * marks its function HP_FN_STATIC_CALL. */
	const uint64_t *static_calls;
	size_t nstatic_calls;
	/* Switch tables whose lea is hoisted out of the jump's window: the table
	 * (and the first lea setting its base) of each jump address, sorted by
	 * jump; hp_cfg_parse_module finds them and proves them over the CFG. */
	const struct hp_jt_hint {
		uint64_t jump, table, lea;
		uint16_t label_reg; /* a label table's base register; 0 for a switch table */
	} * jt_hints;
	size_t njt_hints;
	/* Reader for switch tables; NULL leaves table jumps unresolved. */
	hp_data_fn read_data;
	void *data_ctx;
};

/* Names of functions that never return, for user code (libc and friends)
 * and for the Linux kernel (the functions objtool treats as noreturn). */
extern const char *const hp_noreturn_user[];
extern const char *const hp_noreturn_kernel[];

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
	struct hp_jump_table *jtables;
	size_t njtables, cap_jtables;
	uint64_t *jt_targets;
	size_t njt_targets, cap_jt_targets;
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

/* Restricting a parse to some functions (the fast path for one function).
 * Their blocks must be the ones a whole-module parse gives them, so the
 * parse covers everything those blocks depend on: every function they reach
 * by direct calls and jumps (whether a callee never returns), transitively,
 * and the .cold fragments and main parts of each (their links and the
 * leaders the jumps between them make). Only the requested functions keep
 * their blocks; the rest of the module stays unparsed. */
struct hp_cfg_only {
	const char *name;      /* the functions of this name, if not NULL ... */
	const uint64_t *addrs; /* ... and those starting at these addresses (sorted) */
	size_t naddrs;
	/* A whole parse's result at hand (the kernel's noreturn cache): the
	 * functions of the module it proved never return (sorted). With it
	 * (complete), every other function returns or is named, so no callee
	 * joins the set (only .cold fragments and main parts do) and nothing
	 * new is proven: the requested functions get the whole parse's blocks
	 * from their own bytes. */
	bool complete;
	const uint64_t *proven;
	size_t nproven;
	/* Out: the direct call and jump targets of the parsed functions that no
	 * function of the module holds (sorted, malloc'd; the caller frees). */
	uint64_t *outside;
	size_t noutside;
};

/* Parse the functions of mod (all, or those only names) on threads threads
 * (0 = online CPUs) and fill the module's arrays. Then link .cold fragments
 * to their functions (re-parsing them with the leaders the other fragment
 * jumps to) and find the functions that never return (re-parsing their
 * callers) until nothing changes. Returns 0 or a negative errno. */
int hp_cfg_parse_module(struct hp_module *mod, const struct hp_cfg_env *env, hp_bytes_fn bytes, void *ctx, int threads,
			struct hp_cfg_only *only);

#endif
