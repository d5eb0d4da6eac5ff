/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What each command does, run on the command worker's thread (see
 * daemon/worker.h): inspect a function, attach or detach a process target,
 * start or stop a measurement. Every command ends with exactly one result
 * (hp_job_result); an unknown kind is answered with an error.
 */
#ifndef HOTPATH_DAEMON_COMMANDS_H
#define HOTPATH_DAEMON_COMMANDS_H

struct agent;
struct hp_job;

void hp_run_command(struct agent *ag, struct hp_job *job);

#endif
