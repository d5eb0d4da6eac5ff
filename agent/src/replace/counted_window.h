/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A window of inline block counters (replace/counters.h) and what it
 * gives: the window itself (the watched process polled, its end chosen by
 * the caller, the process held for the reads), every counted function's
 * block counts with the edges derived from them (the counted edges exact),
 * and those counts as a profile (plan/profile.h) a plan is made from. One
 * piece for `hotpathd measure --blocks --inline` and for the daemon's
 * MakePlan, so the two do not each write it.
 */
#ifndef HOTPATH_REPLACE_COUNTED_WINDOW_H
#define HOTPATH_REPLACE_COUNTED_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "measure/edges.h"
#include "plan/profile.h"
#include "replace/counters.h"

/*
 * Called at every poll of the window (every 10 ms while the process is
 * watched, else every 100 ms) with the seconds since it began: 0 goes on,
 * 1 ends the window (the counts are read), a negative errno abandons it
 * (nothing is read; hp_counted_window returns it).
 */
typedef int (*hp_counted_tick_fn)(void *ctx, const struct hp_counted *c, double elapsed);

/* One counted function's counts at the end of the window. */
struct hp_counted_counts {
	uint64_t *blocks;            /* [fn->nblocks] */
	struct hp_edge_result edges; /* derived from blocks; each counted edge exact when the counts are */
};

/*
 * Run the window of c (installed by hp_counted_begin) until tick ends it,
 * then hold the process and read every function's counts into *out
 * (c->n of them, free with hp_counted_counts_free); *seconds gets the
 * window's length. 0, or -ESRCH with err filled when the process exited
 * (its counters went with it), or tick's negative errno, or another
 * negative errno with err filled. c stays installed: the caller reverts.
 */
int hp_counted_window(struct hp_counted *c, hp_counted_tick_fn tick, void *ctx, double *seconds,
		      struct hp_counted_counts **out, char *err, size_t errlen);
void hp_counted_counts_free(struct hp_counted_counts *v, size_t n);

/*
 * Add the counts v[0..c->n) to profile out: every block's count, and the
 * exact edges between two blocks of a function (as hp_profile_from_reading
 * adds a measurement's). Counts that are not exact (c->exact false: plain
 * increments with more than one thread) make the profile an estimate.
 * 0 or -ENOMEM.
 */
int hp_counted_profile(const struct hp_counted *c, const struct hp_counted_counts *v, struct hp_profile *out);

#endif
