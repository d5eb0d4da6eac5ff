/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plan commands, run on the command worker's thread (daemon/worker.h):
 * MakePlan, InstallPlan, RevertPlan and ListInstalled (agent.proto), over
 * the plan and replace layers, answering with the JSON `hotpathd plan`,
 * `install`, `revert` and `installed` print. And the replace layer's
 * recovery at start-up, before any command runs.
 */
#ifndef HOTPATH_DAEMON_PLANS_H
#define HOTPATH_DAEMON_PLANS_H

struct agent;
struct hp_job;

void hp_run_plan_command(struct agent *ag, struct hp_job *job);
/* Bring every journal an earlier run left unfinished to a clean state
 * (replace/install.h, hp_replace_recover), logging each. Returns how many. */
int hp_plans_recover(struct agent *ag);

#endif
