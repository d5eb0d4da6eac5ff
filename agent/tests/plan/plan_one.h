/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel plan tests' one-function plan: f alone (max_functions 1), every
 * block counted 10, a 32 KiB 8-way L1i of 64-byte lines.
 */
#ifndef HOTPATH_TESTS_PLAN_ONE_H
#define HOTPATH_TESTS_PLAN_ONE_H

#include "plan/plan.h"
#include "plan/profile.h"

static inline int plan_one(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
			   struct hp_plan *p, char *err, size_t errlen)
{
	struct hp_plan_opts o;
	struct hp_profile prof = { 0 };
	int r;

	for (uint32_t b = 0; b < f->nblocks; b++)
		hp_profile_add(&prof, mod, f, mod->blocks[f->block_start + b].offset, 10);
	hp_plan_opts_default(&o);
	o.l1i = (struct hp_cache_geometry){ 32768, 64, 8 };
	o.max_functions = 1;
	r = hp_plan_make(m, f, mod, &prof, &o, p, err, errlen);
	hp_profile_free(&prof);
	return r;
}

#endif
