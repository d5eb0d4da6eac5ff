/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Whole-system PC sampling mapped onto the code model. One perf event per
 * online CPU (cycles where a hardware PMU exists, else the cpu-clock software
 * event) writes IP+TID samples into an mmap ring; a thread drains the rings
 * and counts each kernel sample into its (module, function, basic block).
 * Consumers take the counts interval by interval with hp_sampler_take.
 */
#ifndef HOTPATH_SAMPLER_H
#define HOTPATH_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

struct hp_sampler;

struct hp_sampler_opts {
	unsigned frequency;   /* samples per second per CPU; 0 = 997 */
	bool force_cpu_clock; /* use cpu-clock even if a PMU exists */
	unsigned ring_pages;  /* data pages per CPU ring, power of two; 0 = 16 */
	/* A loaded BPF perf_event program attached to every CPU's event: a
	 * sample is kept only when it returns nonzero (a measurement's
	 * predicates). Used when use_filter is set. */
	bool use_filter;
	int filter_prog_fd;
};

/* One basic block's samples in an interval. */
struct hp_block_count {
	uint32_t mod;    /* index into hp_model.mods */
	uint32_t fn;     /* index into that module's funcs */
	uint32_t offset; /* block offset from the function start */
	uint64_t count;
};

/* Everything sampled between two takes. */
struct hp_sample_interval {
	int64_t start_unix_ns;
	int64_t end_unix_ns;
	uint64_t total, user, unmapped, lost;
	struct hp_block_count *blocks; /* owned by the interval; free with hp_sample_interval_free */
	size_t nblocks;
};

/*
 * Open one event per online CPU and start sampling. Returns NULL with a
 * one-line reason in err (naming the missing privilege on EACCES/EPERM).
 */
struct hp_sampler *hp_sampler_open(const struct hp_model *m, const struct hp_sampler_opts *o, char *err, size_t errlen);
/* "cycles" or "cpu-clock". */
const char *hp_sampler_event(const struct hp_sampler *s);
unsigned hp_sampler_ncpus(const struct hp_sampler *s);
/* Drain the rings and move everything counted since the last take into *out. */
int hp_sampler_take(struct hp_sampler *s, struct hp_sample_interval *out);
void hp_sample_interval_free(struct hp_sample_interval *iv);
void hp_sampler_close(struct hp_sampler *s);

#endif
