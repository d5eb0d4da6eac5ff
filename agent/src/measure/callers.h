/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Who calls a function, exactly: uprobes that, at every hit, record the 8
 * bytes at the stack pointer. At a function's first instruction those are
 * the return address of the call that reached it, so (probe, return
 * address) pairs name the call sites and their targets: a value profile of
 * indirect calls (issue 17's indirect-call promotion). A probe elsewhere
 * just counts its hits. Each probe is a perf event of the uprobe PMU
 * (perf_event_open, one per online CPU, every hit a sample): the kernel
 * copies the stack's bytes itself (PERF_SAMPLE_STACK_USER), so no BPF
 * program is needed. Probes sit on (file, offset) as all uprobes do: on an
 * installed copy (a memfd) they probe the copy, which is what runs.
 */
#ifndef HOTPATH_MEASURE_CALLERS_H
#define HOTPATH_MEASURE_CALLERS_H

#include <stddef.h>
#include <stdint.h>

struct hp_caller_probe {
	const char *path;     /* the mapped file (a /proc/PID/map_files link) */
	uint64_t file_offset; /* of the instruction */
};

struct hp_caller_hit {
	uint32_t probe;
	uint64_t ret; /* the 8 bytes at the stack pointer when it hit */
	uint64_t count;
};

struct hp_callers {
	struct hp_caller_hit *hits; /* one per (probe, ret) seen */
	size_t nhits, cap;
	uint64_t samples; /* hits of process pid read */
	uint64_t lost;    /* hits the rings had no room for (the kernel's count) */
	uint64_t unread;  /* hits whose stack bytes the kernel could not copy */
	uint32_t refused; /* probes the kernel refused at their instruction (left out) */
};

/* Probe the n probes for seconds (1..3600) in every process, keeping the
 * hits of process pid: 0, or a negative errno with err filled (the uprobe
 * PMU missing, perf_event_open refused). */
int hp_callers_measure(const struct hp_caller_probe *probes, size_t n, int pid, unsigned seconds,
		       struct hp_callers *out, char *err, size_t errlen);
void hp_callers_free(struct hp_callers *c);

#endif
