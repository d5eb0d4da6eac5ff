/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The BPF side of one measurement, from user space: loads the programs and
 * maps (measure_probes.bpf.c, plus one measure_fentry.bpf.c object per kernel
 * function timed by trampolines), fills the probe table, attaches every probe
 * with its cookie (the probe's index in the table), and reads the counters,
 * frames and virtual clocks back. Knows nothing of resources or rows: the
 * caller (measure.c) decides which slot each probe counts into.
 */
#ifndef HOTPATH_MEASURE_PROBES_H
#define HOTPATH_MEASURE_PROBES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "measure/mechanism.h"
#include "measure/probe_abi.h"

struct hp_probe_set;

struct hp_probe_config {
	uint32_t nslots;          /* counters (rows) */
	uint32_t nprobes;         /* probe table entries */
	uint32_t max_frames;      /* threads x timed functions open at once; 0 = 65536 */
	enum hp_mech switch_hook; /* NONE unless a virtualized timer is measured */
	bool use_multi;           /* load the uprobe_multi program (user probes by uprobe_multi links) */
	bool sample_filter;       /* load the sampler's predicate program */
	bool tgid_on, comm_on, cgroup_on;
	uint32_t tgid;
	char comm[HP_MP_COMM_LEN];
	uint64_t cgroup_id;
	const int *target_tgids; /* process targets: only these processes count; NULL = any */
	size_t ntarget_tgids;
};

/* Load the main object sized for the config. NULL with the reason in err. */
struct hp_probe_set *hp_probes_open(const struct hp_probe_config *c, char *err, size_t errlen);

/* Set probe table entry idx (< nprobes). Returns 0 or a negative errno. */
int hp_probes_set(struct hp_probe_set *s, uint32_t idx, const struct hp_mp_probe *p);

/*
 * Queue probe idx for attachment:
 *  - user (uprobe_multi, uprobe, uretprobe_multi, uretprobe): the file at path
 *    at file_offset, in process pid (0: every process mapping the file);
 *  - kernel (kprobe, kretprobe): the absolute address addr, or func+offset by
 *    name when the kernel has no kprobe PMU (tracefs kprobe_events);
 *  - kernel (fentry, fexit): the function named func (unique in kallsyms).
 * Returns 0 or -ENOMEM.
 */
int hp_probes_add_user(struct hp_probe_set *s, uint32_t idx, enum hp_mech mech, const char *path, uint64_t file_offset,
		       int pid);
int hp_probes_add_kernel(struct hp_probe_set *s, uint32_t idx, enum hp_mech mech, const char *func, uint64_t offset,
			 uint64_t addr);

/*
 * Attach the sched_switch hook (first, so virtual clocks run before any
 * timer starts), then every queued probe. A probe the kernel refuses at its
 * location (an instruction uprobes cannot handle: ENOTSUPP; not an
 * instruction boundary: EILSEQ) is found even inside a uprobe_multi link (the
 * link is split until the refused offsets are isolated); with keep_going the
 * others stay attached and hp_probes_skipped lists the refused ones, else it
 * is an error. On failure nothing stays attached and err names the probe and
 * the kernel's answer; *failed_idx (if not NULL) gets the probe index that
 * failed, or UINT32_MAX.
 */
int hp_probes_attach(struct hp_probe_set *s, bool keep_going, uint32_t *failed_idx, char *err, size_t errlen);

struct hp_probe_failure {
	uint32_t idx; /* probe index */
	int err;      /* positive errno the kernel gave */
};
/* Probes the kernel refused at their location (after a keep_going attach). */
size_t hp_probes_skipped(const struct hp_probe_set *s, const struct hp_probe_failure **out);
/* A sentence for such a refusal. */
const char *hp_probes_refusal(int err);
/* Destroy every link (probes stop firing); the maps and their values stay. */
void hp_probes_detach(struct hp_probe_set *s);
/* The loaded sample_filter program, or -1. */
int hp_probes_sample_filter_fd(const struct hp_probe_set *s);
/* Stop counting process tgid (it exited): its hits no longer pass. */
void hp_probes_forget_tgid(struct hp_probe_set *s, int tgid);
void hp_probes_close(struct hp_probe_set *s);

/* Counters of every slot, summed over CPUs, into out[nslots]: the totals
 * since counting started, cut at one moment for every slot (each call
 * switches the half the probes count in, see measure.bpf.h). */
int hp_probes_read_counts(struct hp_probe_set *s, struct hp_mp_counts *out);
int hp_probes_read_stats(struct hp_probe_set *s, struct hp_mp_stats *out);

/* Open timer frames: fills up to max, returns how many (<= max) or a negative errno. */
struct hp_probe_frame {
	struct hp_mp_frame_key key;
	struct hp_mp_frame frame;
};
int hp_probes_read_frames(struct hp_probe_set *s, struct hp_probe_frame *out, size_t max);
int hp_probes_delete_frame(struct hp_probe_set *s, const struct hp_mp_frame_key *key);

/* The virtual clock of thread at monotonic time now_ns (ns on CPU while
 * tracked), or -ENOENT when the thread has no vtimed frame open. */
int hp_probes_vclock(struct hp_probe_set *s, uint32_t thread, uint64_t now_ns, const struct hp_mp_cpu *cpus, int ncpus,
		     uint64_t *out);
/* Per-CPU running-thread records, into out[ncpus] (ncpus = libbpf_num_possible_cpus()). */
int hp_probes_read_cpus(struct hp_probe_set *s, struct hp_mp_cpu *out, int ncpus);

#endif
