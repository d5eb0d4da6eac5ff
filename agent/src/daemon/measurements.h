/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The daemon's measurements: the handles (measure/measure.h) it runs for the
 * backend, on the kernel or on attached processes. Their own thread reads
 * each one once per interval and queues a numbered MeasurementBatch in the
 * outbox, so intervals keep flowing whatever the command worker or the
 * stream is doing. A measurement ends when it is stopped, when its process
 * exits (its last batch says so; its data stays with the backend) or when
 * its target is detached. Each running measurement is written to the state
 * folder (<state>/measurements/<id>.pb: its MeasurementInfo as armed), so a
 * restarted agent arms it again, on the same rows, before it reconnects.
 */
#ifndef HOTPATH_DAEMON_MEASUREMENTS_H
#define HOTPATH_DAEMON_MEASUREMENTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotpath/v1/agent.pb-c.h"

struct agent;
struct hp_job;

/* Measurements kept (ended ones are forgotten first). */
#define HP_MEASUREMENTS_MAX   256
#define HP_MEASUREMENT_ID_MAX 64

struct hp_active;

struct hp_measurements {
	pthread_mutex_t lock;
	struct hp_active *v[HP_MEASUREMENTS_MAX];
	size_t n;
	char dir[4200]; /* "" = nothing persisted */
	pthread_t thread;
	bool thread_started;
	bool initialized;
	_Atomic bool stop; /* set by the stopping thread, read by the measurements' */
};

int hp_measurements_init(struct hp_measurements *ms, const char *state_dir);
/* Stop the thread (measurements stay persisted for the next run) and free. */
void hp_measurements_free(struct hp_measurements *ms);

/* Arm the measurements a previous run left in the state folder. Returns how many run. */
int hp_measurements_restore(struct agent *ag);
/* Start the thread that reads every measurement once per interval. */
int hp_measurements_run(struct agent *ag);

/*
 * Start a measurement (the command worker calls this). On success *info is
 * the armed MeasurementInfo (free with hotpath__v1__measurement_info__free_unpacked).
 * Returns 0, or a negative errno with the reason in err (-ECANCELED when the
 * job was cancelled meanwhile).
 */
int hp_measurements_start(struct agent *ag, struct hp_job *job, const Hotpath__V1__StartMeasurement *req,
			  Hotpath__V1__MeasurementInfo **info, char *err, size_t errlen);
/* Stop one: its last batch (state stopped) goes to the outbox. */
int hp_measurements_stop(struct agent *ag, const char *id, Hotpath__V1__MeasurementInfo **info, char *err,
			 size_t errlen);
/* Stop every measurement of a target (detached), with why. */
void hp_measurements_stop_target(struct agent *ag, const char *target_id, const char *why);

/* The block counts of measurement id (running: since it was armed; ended
 * during this run: until it ended) as a plan's profile, if it measured
 * target_id's blocks. 0, or a negative errno with the reason in err. */
struct hp_profile;
int hp_measurements_profile(struct agent *ag, const char *id, const char *target_id, struct hp_profile *out, char *err,
			    size_t errlen);

/* The original bytes under the breakpoints the running measurements of
 * process target target_id put in its code (uprobes show as int3 in the
 * process's memory), read from the mapped files: an overlay for reading
 * the process's code as it is without them. *out is malloc'd. 0. */
struct hp_byte_patch;
int hp_measurements_probe_bytes(struct agent *ag, const char *target_id, struct hp_byte_patch **out, size_t *n);

/* Arm the running measurements of process target target_id again on its
 * code as it runs now, after an install or a revert changed where their
 * functions run (the copy, or the original again): the new probes are
 * attached first, the old ones' last interval is sent, then they are
 * detached, so the counts go on without a gap or a double count. A
 * measurement whose rows would differ keeps its probes (logged). Returns
 * how many were armed again. The totals a plan reads from a measurement
 * (hp_measurements_profile) then start at the re-arm. */
int hp_measurements_rearm(struct agent *ag, const char *target_id);

/* Every measurement (running, and ended during this run) as MeasurementInfo
 * messages for Hello: *out is a malloc'd array of unpacked messages; free
 * with hp_measurements_infos_free. */
int hp_measurements_infos(struct hp_measurements *ms, Hotpath__V1__MeasurementInfo ***out, size_t *n);
void hp_measurements_infos_free(Hotpath__V1__MeasurementInfo **v, size_t n);

#endif
