/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiles from the measure layer in the same process (profile_measured.c):
 * a measurement's block counts, or an interval of PC samples, or PC
 * samples taken now.
 */
#ifndef HOTPATH_PROFILE_MEASURED_H
#define HOTPATH_PROFILE_MEASURED_H

#include <stddef.h>

#include "measure/measure.h"
#include "measure/sampler.h"
#include "plan/profile.h"

/* Add the block counts of reading rd of measurement h (and, when every
 * count is exact, the edges derived exactly from them) to out; *nblocks
 * gets how many block counts were read. 0, or a negative errno with err
 * filled (-ESTALE: a row is no longer in the code model). */
int hp_profile_from_reading(struct hp_measure *h, const struct hp_measure_reading *rd, struct hp_profile *out,
			    size_t *nblocks, char *err, size_t errlen);
/* Add interval iv's PC samples as estimated block counts (samples per
 * block / its instructions). 0 or -ENOMEM. */
int hp_profile_from_samples(const struct hp_model *m, const struct hp_sample_interval *iv, struct hp_profile *out);

/* A process's threads are sampled more often than the whole system: one
 * process's code, sampled at 997 Hz for seconds, leaves blocks that run
 * without a sample, and a plan then lays them out cold. */
#define HP_PROCESS_SAMPLE_HZ 9973u

/* Waits secs seconds while samples are taken; 0, or a negative errno that
 * stops the sampling (-ECANCELED, -ESRCH) and is returned. */
typedef int (*hp_sample_wait_fn)(void *ctx, unsigned secs);

/* Estimated block counts (out, an estimate of weight 1, its source named)
 * from PC samples of process pid's threads (pid 0: the kernel, every CPU)
 * taken now for secs seconds at hz per second (0: the sampler's default).
 * wait waits the seconds (NULL: sleep). 0, or a negative errno with err
 * filled (or wait's). The daemon's MakePlan and `hotpathd plan --sample`. */
int hp_profile_sample(const struct hp_model *m, int pid, unsigned secs, unsigned hz, hp_sample_wait_fn wait, void *ctx,
		      struct hp_profile *out, char *err, size_t errlen);

#endif
