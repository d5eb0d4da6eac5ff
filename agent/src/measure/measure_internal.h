/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The measurement handle's insides, shared by the files that implement it:
 * measure.c (open, state, close), arm.c (metrics to mechanisms and probes
 * per row) and readout.c (counters to per-interval values, edges). Nothing
 * outside measure/ includes this.
 */
#ifndef HOTPATH_MEASURE_INTERNAL_H
#define HOTPATH_MEASURE_INTERNAL_H

#include <pthread.h>

#include "measure/measure.h"
#include "measure/probes.h"
#include "measure/resolve.h"
#include "measure/sampler.h"

/* Cumulative values of one row at one moment (since open). */
struct hp_cum {
	uint64_t count, exits, samples;
	double wall_ns, vtime_ns; /* completed calls plus the open part of running ones */
};

struct hp_measure {
	pthread_mutex_t lock;
	enum hp_measure_target_kind target;
	char target_desc[256];
	int *pids; /* PID/COMM targets */
	int *pidfds;
	bool *pid_gone;
	size_t npids;

	struct hp_model *model;
	bool own_model;
	struct hp_moved_code *moved; /* installed copies in the process (owned copy) */
	size_t nmoved;
	struct hp_caps caps;
	struct hp_mechanisms mech;
	uint32_t metrics;           /* measured: the requested ones, plus count with any timer */
	uint32_t requested_metrics; /* as requested */
	bool blocks;
	bool *word_blocks; /* per resource word: add its function's blocks; NULL = `blocks` for every word */

	struct hp_row *rows; /* resolution result; slot i counts row i */
	struct hp_measure_row *pub;
	size_t nrows;
	char **resources; /* copies of the request's words (parsed ones written canonically) */
	size_t nresources;
	/* Metric plans per row kind (function, block), shared by the rows. */
	struct hp_metric_plan plan[2][HP_METRIC_N];
	bool *sampled_row;             /* rows whose count comes from the sampler */
	uint8_t *row_entry, *row_exit; /* each row's probe mechanisms (enum hp_mech) */
	char **interned;               /* mechanism names and reasons, one copy each */
	size_t ninterned, cap_interned;

	struct hp_probe_set *probes;
	struct hp_sampler *sampler;
	uint64_t *samples; /* per row, cumulative */
	uint64_t samples_total, samples_lost;
	/* Sampled counts by (module, function, block offset) -> row. */
	uint64_t *sample_keys;
	uint32_t *sample_rows;
	size_t sample_cap;

	/* In-progress time of frames whose thread died, credited at removal (per slot). */
	double *dead_wall, *dead_vtime;
	struct hp_probe_frame *frames;
	size_t frames_cap;

	struct hp_cum *last;            /* at the previous hp_measure_read */
	struct hp_cum *final;           /* frozen when the target exited; NULL before */
	double t_open, t_last, t_final; /* CLOCK_MONOTONIC seconds */
	int64_t unix_open, unix_last, unix_final;

	enum hp_measure_state state;
	char detail[512];
};

/* arm.c: decide every row's metrics and build and attach its probes. */
int hp_measure_plan_rows(struct hp_measure *h, bool allow_partial, char *err, size_t errlen);
int hp_measure_arm(struct hp_measure *h, const struct hp_probe_config *base, unsigned sample_hz, bool allow_partial,
		   char *err, size_t errlen);

/* readout.c: cumulative values of every row now (or frozen at exit). */
int hp_measure_cumulative(struct hp_measure *h, struct hp_cum *out, double *t_mono, int64_t *t_unix);
int hp_measure_fill_reading(struct hp_measure *h, const struct hp_cum *from, const struct hp_cum *to, double t0,
			    double t1, int64_t u0, int64_t u1, struct hp_measure_reading *out);

double hp_mono_now(void);
int64_t hp_unix_now(void);

#endif
