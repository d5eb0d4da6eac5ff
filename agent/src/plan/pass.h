/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plan's passes (BOLT's BinaryFunctionPass and pass manager are the
 * model): hp_plan_make runs the passes of one list in order over a shared
 * context, each a name and a run function. A new step (another layout
 * algorithm, say) is one file defining a struct hp_plan_pass, its
 * declaration here and its line in the list in plan.c.
 */
#ifndef HOTPATH_PLAN_PASS_H
#define HOTPATH_PLAN_PASS_H

#include <stddef.h>

#include "plan/plan.h"

/* What the passes share while one plan is made. */
struct hp_plan_ctx {
	struct hp_model *m;
	const struct hp_function *root;
	const struct hp_module *root_mod;
	const struct hp_profile *prof; /* NULL: none measured */
	struct hp_plan *p;
	double root_calls;                        /* the root's entries (after the root pass) */
	size_t cap_members, cap_kept, cap_icalls; /* room in p's arrays (base/grow.h) */
	char err[512];                            /* a failing pass's reason; "" means out of memory */
};

/* A pass's run returns one of these, or a negative errno (c->err filled,
 * or left "" for out of memory), which ends the plan with that error. */
enum hp_pass_result {
	HP_PASS_NEXT = 0, /* go on with the next pass */
	HP_PASS_DONE = 1, /* the plan is complete here: p->status and p->message say why */
};

struct hp_plan_pass {
	const char *name;
	int (*run)(struct hp_plan_ctx *c);
};

/* In the order of the list (plan.c). */
extern const struct hp_plan_pass hp_pass_cache_geometry, hp_pass_bottleneck, hp_pass_root, hp_pass_group,
	hp_pass_drop_shared, hp_pass_order, hp_pass_layout, hp_pass_notes; /* plan.c */
extern const struct hp_plan_pass hp_pass_promote;                          /* icall_values.c */
extern const struct hp_plan_pass hp_pass_emit;                             /* emit.c */
extern const struct hp_plan_pass hp_pass_unwind;                           /* unwind.c */
extern const struct hp_plan_pass hp_pass_verify;                           /* verify.c */
extern const struct hp_plan_pass hp_pass_icache;                           /* icache.c */
/* Hot-set plans run hot_set in place of root, group and drop_shared, and c3 in place of order. */
extern const struct hp_plan_pass hp_pass_hot_set; /* hot_set.c */
extern const struct hp_plan_pass hp_pass_c3;      /* c3.c */
extern const struct hp_plan_pass hp_pass_place;   /* c3.c */

/* Shared by the passes (plan.c). */
/* A new member for f of mod with profile pf (NULL: no counts), its counts
 * and edges made: 0 or -ENOMEM. parent: the member that reached it. */
int hp_plan_add_member(struct hp_plan_ctx *c, const struct hp_module *mod, const struct hp_function *f,
		       const struct hp_function *parent, const struct hp_prof_fn *pf);
/* Keep f in place with its rule: 0 or -ENOMEM. */
int hp_plan_keep(struct hp_plan_ctx *c, const struct hp_function *f, const char *rule, const char *detail);
/* Member i's indirect call sites that ran, into p->icalls: 0 or -ENOMEM. */
int hp_plan_member_icalls(struct hp_plan_ctx *c, size_t i);
/* Counts of the blocks of member a that call or tail-call the function at addr. */
double hp_plan_calls_to(const struct hp_plan_member *a, uint64_t addr);
/* Point p->icalls at the members' places after a reorder. */
void hp_plan_renumber_icalls(struct hp_plan *p);

#endif
