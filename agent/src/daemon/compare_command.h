/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ComparePlan (agent.proto), run on the command worker's thread
 * (daemon/worker.h): the interleaved before/after of an installed plan
 * (replace/compare.h) in the target's process, Progress after every window,
 * a cancel honoured between windows (the plan installed again first),
 * answered by CompareResult with the JSON `hotpathd compare --json` prints.
 */
#ifndef HOTPATH_DAEMON_COMPARE_COMMAND_H
#define HOTPATH_DAEMON_COMPARE_COMMAND_H

struct agent;
struct hp_job;

void hp_run_compare_command(struct agent *ag, struct hp_job *job);

#endif
