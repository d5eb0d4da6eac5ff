/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Whole-system PC sampling mapped onto the code model. One perf event per
 * online CPU (cycles where a hardware PMU exists, else the cpu-clock software
 * event) writes IP+TID+CPU samples, and optionally their call chains, into an
 * mmap ring; a thread drains the rings and counts each kernel sample into its
 * (module, function, basic block, instruction), apart for the idle task, and
 * each call chain into the interval's table of distinct stacks
 * (measure/stack_table.h). Consumers take the counts interval by interval with
 * hp_sampler_take. With opts.pid, one process instead: one user-only event
 * per thread, its samples counted into that process's model.
 */
#ifndef HOTPATH_SAMPLER_H
#define HOTPATH_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "measure/stack_table.h"
#include "model/model.h"

struct hp_sampler;

/* Addresses [lo, hi) of a process's code. */
struct hp_pc_range {
	uint64_t lo, hi;
};

struct hp_sampler_opts {
	unsigned frequency;   /* samples per second per CPU; 0 = 997 */
	bool force_cpu_clock; /* use cpu-clock even if a PMU exists */
	unsigned ring_pages;  /* data pages per CPU ring, power of two; 0 = 16 (64 with stacks) */
	bool stacks;          /* also sample call chains: kernel always, user where frame pointers allow */
	unsigned stack_depth; /* frames kept per chain (kernel and user together); 0 = 64, at most 127 */
	/* A loaded BPF perf_event program attached to every CPU's event: a
	 * sample is kept only when it returns nonzero (a measurement's
	 * predicates). Used when use_filter is set. */
	bool use_filter;
	int filter_prog_fd;
	/* 0: the whole system (one event per CPU, kernel samples). Else one
	 * process: one user-only event per thread it has when the sampler
	 * opens, each user sample counted in m, which is that process's model. */
	int pid;
	/* A process's samples whose PC falls in one of these ranges are also
	 * counted apart (hp_sample_interval.in_ranges); the array is the
	 * caller's and must outlive the sampler. With ranges and without call
	 * chains, a process sampler may have no model (m NULL): it counts the
	 * totals and the ranges only. */
	const struct hp_pc_range *ranges;
	size_t nranges;
};

/* Samples of one instruction of a block: its offset from the block start. */
struct hp_pc_count {
	uint32_t offset;
	uint64_t count;
};

/* One basic block's samples in an interval. */
struct hp_block_count {
	uint32_t mod;    /* index into hp_model.mods */
	uint32_t fn;     /* index into that module's funcs */
	uint32_t offset; /* block offset from the function start */
	uint64_t count;
	bool idle;               /* taken in the idle task (pid 0); the same block may appear once each way */
	struct hp_pc_count *pcs; /* per instruction, by offset; counts sum to count (owned by the interval) */
	size_t npcs;
};

/* Everything sampled between two takes. */
struct hp_sample_interval {
	int64_t start_unix_ns;
	int64_t end_unix_ns;
	uint64_t total, user, unmapped, lost;
	uint64_t idle;                 /* samples of the idle task (pid 0), by context, whatever code they hit */
	uint64_t in_ranges;            /* samples in hp_sampler_opts.ranges */
	struct hp_block_count *blocks; /* owned by the interval; free with hp_sample_interval_free */
	size_t nblocks;
	struct hp_pc_count *pcs;    /* storage of every block's pcs */
	struct hp_stack_set stacks; /* distinct call stacks and their counts (empty without stacks) */
};

/*
 * Open one event per online CPU and start sampling. Returns NULL with a
 * one-line reason in err (naming the missing privilege on EACCES/EPERM).
 */
struct hp_sampler *hp_sampler_open(const struct hp_model *m, const struct hp_sampler_opts *o, char *err, size_t errlen);
/* "cycles" or "cpu-clock". */
const char *hp_sampler_event(const struct hp_sampler *s);
unsigned hp_sampler_ncpus(const struct hp_sampler *s);
/* Frames kept per call chain; 0 when call chains are not sampled. */
unsigned hp_sampler_stack_depth(const struct hp_sampler *s);
/* Drain the rings and move everything counted since the last take into *out. */
int hp_sampler_take(struct hp_sampler *s, struct hp_sample_interval *out);
/* Kernel copies installed now (hp_moved_copies' blocks, sorted by copy; the
 * sampler keeps its own copy of them): a kernel sample or frame in one is
 * counted at the original address it runs as, so it lands on the original
 * function and block, not on hotpath.ko's heap. n 0: none. 0 or -ENOMEM. */
struct hp_moved_block;
int hp_sampler_set_kernel_copies(struct hp_sampler *s, const struct hp_moved_block *b, size_t n);
void hp_sample_interval_free(struct hp_sample_interval *iv);
void hp_sampler_close(struct hp_sampler *s);

#endif
