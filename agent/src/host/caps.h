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
#include <stdint.h>

#define HP_CAP_MAX 32

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

/*
 * hp_caps_probe, with the BPF probes' answers (fentry through uprobe_multi,
 * in that order: caps_cache.h) taken from bpf instead of probed when bpf is
 * not NULL; every other probe runs. HOTPATH_DENY_MECHANISMS is not applied:
 * these are the kernel's answers (hp_caps_apply_denials applies it).
 */
void hp_caps_probe_with(struct hp_caps *c, bool model_ok, const char *model_detail, const struct hp_caps *bpf);

/* HOTPATH_DENY_MECHANISMS=fentry,fexit,...: those capabilities reported
 * unavailable, with what the probe said. */
void hp_caps_apply_denials(struct hp_caps *c);

/*
 * The capability names, in the order hp_caps_probe reports them: kallsyms,
 * bpf_text_read, perf_sampling, hardware_pmu, fentry, fexit, kprobes (entry and
 * func+off), kretprobes, tracepoints, raw_tracepoints, tp_btf, uprobes,
 * uretprobes, uprobe_multi (entry and return links), ptrace, cgroup_v2,
 * kernel_code_replacement. Each is present whether available or not.
 */

/* Whether perf_event_open(PERF_COUNT_HW_CPU_CYCLES) works system-wide;
 * when not, *err_out gets the errno. */
bool hp_probe_hw_cycles(int *err_out);

/*
 * Create a uprobe_multi link (Linux 6.6): prog_fd's program on cnt offsets of
 * the file at path, each with its cookie, return probes when retprobe, only
 * in process pid when pid > 0. Returns the link fd or a negative errno. The
 * program must have been loaded with expected attach type uprobe_multi (48).
 */
int hp_uprobe_multi_link(int prog_fd, const char *path, const uint64_t *offsets, const uint64_t *cookies, uint32_t cnt,
			 bool retprobe, int pid);
#define HP_ATTACH_UPROBE_MULTI 48

/* A function of the agent's own text that the uprobe capability probes attach to. */
int hp_caps_uprobe_target(int x);

#endif
