/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The value profile of indirect call sites (issue 17's indirect-call
 * promotion): per site of a function (its offset), how often it ran and
 * which functions it called how often, as `hotpathd icalls --json`
 * measures them on an installed copy. The plan's promote pass
 * (icall_values.c) reads it through hp_plan_opts.icall_values.
 */
#ifndef HOTPATH_PLAN_ICALL_VALUES_H
#define HOTPATH_PLAN_ICALL_VALUES_H

#include <stddef.h>
#include <stdint.h>

struct hp_icall_value_target {
	char *function;
	double count; /* calls of it from the site, directly or through the pointer */
};

struct hp_icall_value_site {
	char *function;
	uint32_t site;                         /* offset of the call in the function */
	double calls;                          /* executions of the site measured; 0: not counted */
	struct hp_icall_value_target *targets; /* most first */
	size_t ntargets;
};

struct hp_icall_values {
	struct hp_icall_value_site *sites;
	size_t nsites;
};

/* Parse JSON text ({"sites": [{"function", "site", "calls", "targets":
 * [{"function", "indirect", "direct"} or {"function", "count"}]}]}):
 * 0, or a negative errno with err filled (input is checked: names are
 * strings, counts non-negative numbers, offsets below 2^32). */
int hp_icall_values_parse(const char *text, size_t len, struct hp_icall_values *out, char *err, size_t errlen);
void hp_icall_values_free(struct hp_icall_values *v);

#endif
