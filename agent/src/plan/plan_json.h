/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A plan's report (plan_json.c): the JSON `hotpathd plan --json` prints and
 * the daemon's PlanResult carries, written by one function for both, and
 * its indented text form. Format: docs/agent-cli.md, "hotpathd plan".
 */
#ifndef HOTPATH_PLAN_JSON_H
#define HOTPATH_PLAN_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "model/model.h"
#include "plan/plan.h"

/* Write plan p of root (made on model m; pid for process targets, else 0)
 * to fp: one JSON object and a newline, or the text form. */
void hp_plan_report(FILE *fp, bool json, struct hp_model *m, const struct hp_plan *p, const struct hp_function *root,
		    int pid);
/* The same JSON in a malloc'd string (*len bytes, NUL-terminated): 0 or -ENOMEM. */
int hp_plan_json(struct hp_model *m, const struct hp_plan *p, const struct hp_function *root, int pid, char **out,
		 size_t *len);
/* The plan's code hash (code.sha256): 0, or -EINVAL when the code is not verified. */
int hp_plan_code_sha256(const struct hp_plan *p, char out[65]);
/* The GNU build id of the root's module as an installer checks it: for a
 * process, of the file the process maps at addr; "" when unknown. */
void hp_plan_module_build_id(const struct hp_model *m, const struct hp_module *mod, int pid, uint64_t addr,
			     char out[65]);

#endif
