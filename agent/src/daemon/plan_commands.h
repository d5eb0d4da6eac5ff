/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plan commands, run on the command worker's thread (daemon/worker.h):
 * MakePlan, InstallPlan, RevertPlan and ListInstalled (agent.proto), over
 * the plan and replace layers, answering with the JSON `hotpathd plan`,
 * `install`, `revert` and `installed` print. And the replace layer's
 * recovery at start-up, before any command runs.
 */
#ifndef HOTPATH_DAEMON_PLAN_COMMANDS_H
#define HOTPATH_DAEMON_PLAN_COMMANDS_H

#include <stddef.h>

#include "hotpath/v1/agent.pb-c.h"

struct agent;
struct hp_job;

/* The largest plan JSON a PlanResult or InstallPlan carries (agent.proto). */
#define HP_PLAN_JSON_MAX     (16u << 20)
/* The largest message the agent receives: an InstallPlan of the largest
 * plan with room for the rest of the message. */
#define HP_MAX_RECEIVE_BYTES (HP_PLAN_JSON_MAX + (1u << 20))

void hp_run_plan_command(struct agent *ag, struct hp_job *job);
/* Bring every journal an earlier run left unfinished to a clean state
 * (replace/install.h, hp_replace_recover), logging each. Returns how many. */
int hp_plans_recover(struct agent *ag);

/* Heaps reverts kept mapped (a thread could still be in the copy) are asked
 * again when the command worker has been idle this long (replace/install.h,
 * hp_release_kept), besides at every install and revert. */
#define HP_PLANS_IDLE_MS 10000
/* The worker's idle call: every process's kept heaps asked again, releases logged. */
void hp_plans_idle(struct agent *ag);

/* The installs the journals hold, for Hello.installs: *out (an array of n
 * pointers, freed with hp_plans_hello_free). 1 when that is the complete
 * list (Hello.installs_listed), 0 when the journals could not be read (or
 * there is no state folder), or a negative errno. */
int hp_plans_hello(struct agent *ag, Hotpath__V1__InstalledPlan ***out, size_t *n);
void hp_plans_hello_free(Hotpath__V1__InstalledPlan **v, size_t n);

#endif
