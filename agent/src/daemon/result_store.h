/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The results of the commands that change a process (InstallPlan,
 * RevertPlan), kept in the agent's state folder by command id, so a command
 * the backend sends again after a restart of the agent (its answer lost with
 * the stream) is answered with what it did the first time and never runs
 * twice. The worker's ring of results covers replays within one run.
 */
#ifndef HOTPATH_DAEMON_RESULT_STORE_H
#define HOTPATH_DAEMON_RESULT_STORE_H

#include <stddef.h>
#include <stdint.h>

/* Results kept at most; the oldest beyond it are removed. */
#define HP_RESULT_STORE_MAX 256

/* Keep the packed AgentMessage (a CommandResult) of command id, durably
 * (written, synced, renamed into place). 0, or a negative errno. */
int hp_result_store_put(const char *state_dir, const char *id, const uint8_t *buf, size_t len);

/* The kept result of command id into *buf (malloc'd) and *len: 0, -ENOENT
 * when none is kept, or another negative errno. */
int hp_result_store_get(const char *state_dir, const char *id, uint8_t **buf, size_t *len);

#endif
