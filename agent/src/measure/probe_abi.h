/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the measurement's BPF programs and user space share: the probe table
 * entry a probe's cookie selects, the per-slot counters, the per-thread
 * frames of running timers and the state behind virtualized timers. Plain
 * fixed-size structs, included by the BPF side (measure.bpf.h) and by
 * measure/probes.c.
 */
#ifndef HOTPATH_MEASURE_PROBE_ABI_H
#define HOTPATH_MEASURE_PROBE_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define HP_MP_NO_SLOT 0xffffffffu

/* What a probe does when it fires (hp_mp_probe.flags). */
#define HP_MP_ENTER (1u << 0) /* start the timers of timer_slot (function entry) */
#define HP_MP_LEAVE (1u << 1) /* stop them (function exit) */
#define HP_MP_VTIME (1u << 2) /* the timers include the virtualized timer */

/* One probe point: up to two counters to bump (a function's entries and its
 * first block share the entry probe) and the timers it starts or stops. */
struct hp_mp_probe {
	__u32 count_slot[2]; /* HP_MP_NO_SLOT when unused */
	__u32 timer_slot;    /* HP_MP_NO_SLOT when the probe has no timer */
	__u32 flags;
};

/* Per slot (a measured function or block), per CPU. */
struct hp_mp_counts {
	__u64 count;    /* entries or executions */
	__u64 wall_ns;  /* completed outermost calls: exit - entry */
	__u64 vtime_ns; /* the same on the thread's virtual (on-CPU) clock */
	__u64 exits;    /* completed outermost calls */
};

/* A thread inside a timed function. Recursion only deepens the frame. */
struct hp_mp_frame_key {
	__u32 thread; /* tid, or 0x80000000 | cpu for a CPU's idle task */
	__u32 slot;
};
struct hp_mp_frame {
	__u64 entry_ns;     /* bpf_ktime_get_ns at the outermost entry */
	__u64 entry_vclock; /* the thread's virtual clock then */
	__u32 depth;
	__u32 tgid;
};

/* The virtual clock of a thread inside vtimed functions: on-CPU ns
 * accumulated at each switch-out since it was first tracked. */
struct hp_mp_vthread {
	__u64 vacc_ns;
	__u32 nactive; /* open vtimed frames; the entry is deleted at 0 */
	__u32 pad;
};

/* Per CPU: who runs here and since when (set by sched_switch). */
struct hp_mp_cpu {
	__u32 thread;
	__u32 pad;
	__u64 since_ns;
};

/* Global health counters (.bss). */
struct hp_mp_stats {
	__u64 frames_dropped;   /* frame map full: a call went untimed */
	__u64 vthreads_dropped; /* vthread map full: a call's vtime is missing */
	__u64 exits_unmatched;  /* an exit without its entry (the call began before the probes) */
};

#define HP_MP_COMM_LEN    16
#define HP_MP_IDLE_THREAD 0x80000000u

#endif
