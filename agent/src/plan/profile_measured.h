/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiles from the measure layer in the same process (profile_measured.c):
 * a measurement's block counts, or an interval of PC samples.
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

#endif
