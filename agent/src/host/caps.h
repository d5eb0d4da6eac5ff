/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Capability probes: each one really tries the kernel interface it names
 * (open a perf event, read a tracefs id, call finit_module) and records
 * whether it worked and why not. The agent never claims a capability it did
 * not exercise; the detail strings go to the backend and to users unchanged.
 */
#ifndef HOTPATH_CAPS_H
#define HOTPATH_CAPS_H

#include <stdbool.h>
#include <stddef.h>

#define HP_CAP_MAX 16

struct hp_cap {
	const char *name; /* static */
	bool available;
	char detail[256];
};

struct hp_caps {
	struct hp_cap caps[HP_CAP_MAX];
	size_t n;
};

/*
 * Probe every capability. model_ok/model_detail describe the outcome of
 * opening the kernel model (kernel text read through BPF), which the caller
 * has already attempted.
 */
void hp_caps_probe(struct hp_caps *c, bool model_ok, const char *model_detail);
const struct hp_cap *hp_caps_find(const struct hp_caps *c, const char *name);

/* Whether perf_event_open(PERF_COUNT_HW_CPU_CYCLES) works system-wide;
 * when not, *err_out gets the errno. */
bool hp_probe_hw_cycles(int *err_out);

#endif
