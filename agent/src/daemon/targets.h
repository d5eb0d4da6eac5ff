/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The targets the daemon serves: the live kernel (always, id "kernel") and
 * the processes it was asked to attach, each with its own code model and
 * catalog digests. A process target is named "p<pid>-<start time>" so a
 * recycled pid is never the same target; its exit is seen through a pidfd.
 * Targets are shared by the stream loop (Hello, catalog pieces), the command
 * worker (attach, detach, inspect, measurements) and the measurement thread
 * (exits), so the registry has a lock and each target a reference count: a
 * process's model is freed only when it is detached or gone and no
 * measurement or catalog upload still uses it. Attached processes are
 * remembered in the state folder, so a restarted agent attaches them again.
 */
#ifndef HOTPATH_DAEMON_TARGETS_H
#define HOTPATH_DAEMON_TARGETS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotpath/v1/agent.pb-c.h"
#include "model/model.h"

#define HP_TARGET_ID_LEN      48
/* Processes one command name attaches at most. */
#define HP_ATTACH_MAX_BY_COMM 16
/* Targets kept (ended ones are forgotten first). */
#define HP_TARGETS_MAX        256

/* A module as a target announces it (kept after the model is freed). */
struct hp_target_module {
	char *name;
	char digest[65];
	char build_id[65];
	uint64_t base;
	uint32_t nfuncs, nblocks;
};

struct hp_target {
	char id[HP_TARGET_ID_LEN];
	int kind; /* HOTPATH__V1__TARGET_KIND__* */
	int pid;
	unsigned long long start_ticks;
	char comm[16];
	char exe[512];
	struct hp_model *model;        /* the kernel's is the daemon's; a process's is owned (NULL once freed) */
	struct hp_target_module *mods; /* process targets: what they announce */
	size_t nmods;
	int pidfd;
	int state; /* HOTPATH__V1__TARGET_STATE__* */
	char detail[256];
	int64_t attached_ns, ended_ns;
	int refs; /* the registry's own, plus one per user */
};

struct hp_targets {
	pthread_mutex_t lock;
	struct hp_target *v[HP_TARGETS_MAX];
	size_t n;
	char dir[4200];   /* state folder for attached processes; "" = none */
	char state[4096]; /* the agent's state folder (its installs' journals); "" = none */
	uint64_t changes; /* bumped on every attach, exit and detach */
};

/* Start with the kernel's target (its model is the caller's and outlives
 * the registry). state_dir may be NULL. */
int hp_targets_init(struct hp_targets *ts, struct hp_model *kernel, const char *state_dir);
void hp_targets_free(struct hp_targets *ts);

/*
 * Attach process pid (parses its code model, slow) unless it is attached
 * already; *out gets the target with a reference held (release it). Returns
 * 0, or a negative errno with the reason in err.
 */
int hp_targets_attach_pid(struct hp_targets *ts, int pid, struct hp_target **out, char *err, size_t errlen);
/* Attach every running process named comm (at most HP_ATTACH_MAX_BY_COMM);
 * fills out[] with references and returns how many, or a negative errno. */
int hp_targets_attach_comm(struct hp_targets *ts, const char *comm, struct hp_target **out, size_t max, char *err,
			   size_t errlen);
/* Attach again the processes a previous run remembered (those still running
 * with the same start time); forget the others. Returns how many. */
int hp_targets_restore(struct hp_targets *ts);

/* The target with this id ("" or "kernel" is the kernel), with a reference; NULL if none. */
struct hp_target *hp_targets_get(struct hp_targets *ts, const char *id);
/* The target serving the module with this digest (preferring id when given,
 * and attached targets), with a reference and the module's index; NULL if none. */
struct hp_target *hp_targets_by_digest(struct hp_targets *ts, const char *digest, const char *prefer_id,
				       size_t *mod_idx);
void hp_targets_release(struct hp_targets *ts, struct hp_target *t);

/* Detach a process target: 0, -ENOENT, or -EINVAL for the kernel. */
int hp_targets_detach(struct hp_targets *ts, const char *id, char *err, size_t errlen);
/* Notice processes that exited; returns true when some target changed. */
bool hp_targets_poll_exits(struct hp_targets *ts);

/*
 * Fill u with every target (only != NULL: just those) as Target messages, the
 * kernel's without modules (Hello lists them). Everything the messages point
 * to is copied into one malloc'd block returned in *mem: free it after
 * packing (then free u->targets too). 0 or -ENOMEM.
 */
int hp_targets_fill(struct hp_targets *ts, struct hp_target *const *only, size_t nonly, Hotpath__V1__TargetsUpdate *u,
		    void **mem);
void hp_targets_fill_free(Hotpath__V1__TargetsUpdate *u, void *mem);
/* A packed AgentMessage{targets} with every target (malloc'd): 0 or -ENOMEM. */
int hp_targets_pack_update(struct hp_targets *ts, uint8_t **buf, size_t *len);

#endif
