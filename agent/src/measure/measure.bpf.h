/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel side of a measurement, shared by measure_probes.bpf.c (uprobes,
 * kprobes, sched_switch, the sampler's filter) and measure_fentry.bpf.c (one
 * object per kernel function timed by BPF trampolines, whose maps are the
 * first object's). A probe hit checks the predicates, bumps per-CPU counters
 * and, for timed functions, opens or closes a per-thread frame:
 *  - wall time: the outermost entry's bpf_ktime_get_ns until the matching
 *    exit; recursion only changes the frame's depth;
 *  - virtualized time (KernInst's vtimers): the same span on the thread's
 *    virtual clock, which sched_switch advances only while the thread is on a
 *    CPU. Per-CPU state says which thread runs on the CPU and since when; on
 *    switch-out the outgoing thread's clock takes the elapsed time.
 */
#ifndef HOTPATH_MEASURE_BPF_H
#define HOTPATH_MEASURE_BPF_H

#include "measure/probe_abi.h"

/* Predicates, set before load (0 / false: not applied). */
const volatile bool filter_tgid_on = false;
const volatile __u32 filter_tgid = 0;
const volatile bool filter_comm_on = false;
const volatile char filter_comm[HP_MP_COMM_LEN] = {};
const volatile bool filter_cgroup_on = false;
const volatile __u64 filter_cgroup = 0;
/* Process targets: only the processes in target_tgids. */
const volatile bool target_tgids_on = false;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1); /* set to twice the number of slots before load: two halves (see armed) */
	__type(key, __u32);
	__type(value, struct hp_mp_counts);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct hp_mp_frame_key);
	__type(value, struct hp_mp_frame);
} frames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct hp_mp_vthread);
} vthreads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hp_mp_cpu);
} cpu_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} target_tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hp_mp_stats);
} stats SEC(".maps");

/* Where hits count, set from user space (measure/probes.c): 0 until every
 * probe of the measurement is attached, then 1 + the first slot of the half
 * of `counts` that counts now. Probes attached one by one would otherwise
 * count while their neighbours are not there yet. User space cuts an
 * interval by switching halves with one write and reading the half it left:
 * every hit after the switch counts in the other half, so the blocks of a
 * function are cut at one moment and their counts differ only by the
 * executions in flight, which is what keeps an interval's flow conserved. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} armed SEC(".maps");

static __always_inline __u32 thread_key(__u32 tid)
{
	return tid ? tid : (HP_MP_IDLE_THREAD | bpf_get_smp_processor_id());
}

static __always_inline bool comm_matches(void)
{
	char comm[HP_MP_COMM_LEN];
	if (bpf_get_current_comm(comm, sizeof(comm)))
		return false;
	for (int i = 0; i < HP_MP_COMM_LEN; i++) {
		if (comm[i] != filter_comm[i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

/* Whether the current thread passes every predicate of the measurement. */
static __always_inline bool passes(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;
	if (target_tgids_on && !bpf_map_lookup_elem(&target_tgids, &tgid))
		return false;
	if (filter_tgid_on && tgid != filter_tgid)
		return false;
	if (filter_cgroup_on && bpf_get_current_cgroup_id() != filter_cgroup)
		return false;
	if (filter_comm_on && !comm_matches())
		return false;
	return true;
}

static __always_inline void stat_add(int which)
{
	__u32 zero = 0;
	struct hp_mp_stats *s = bpf_map_lookup_elem(&stats, &zero);
	if (!s)
		return;
	if (which == 0)
		__sync_fetch_and_add(&s->frames_dropped, 1);
	else if (which == 1)
		__sync_fetch_and_add(&s->vthreads_dropped, 1);
	else
		__sync_fetch_and_add(&s->exits_unmatched, 1);
}

/* The CPU's record of its running thread, corrected if this thread runs here
 * unannounced (it was switched in before the sched_switch program attached). */
static __always_inline struct hp_mp_cpu *running_here(__u32 thread, __u64 now)
{
	__u32 zero = 0;
	struct hp_mp_cpu *c = bpf_map_lookup_elem(&cpu_state, &zero);
	if (c && c->thread != thread) {
		c->thread = thread;
		c->since_ns = now;
	}
	return c;
}

/* The thread's virtual clock now, starting to track it if opening is set.
 * Returns false when it cannot be tracked (map full). */
static __always_inline bool vclock(__u32 thread, __u64 now, bool opening, __u64 *out)
{
	struct hp_mp_cpu *c = running_here(thread, now);
	struct hp_mp_vthread *v = bpf_map_lookup_elem(&vthreads, &thread);
	if (!c)
		return false;
	if (!v) {
		if (!opening)
			return false;
		struct hp_mp_vthread nv = { .nactive = 1 };
		if (bpf_map_update_elem(&vthreads, &thread, &nv, BPF_NOEXIST))
			return false;
		*out = now - c->since_ns;
		return true;
	}
	if (opening)
		v->nactive++;
	*out = v->vacc_ns + (now - c->since_ns);
	return true;
}

static __always_inline void vthread_release(__u32 thread)
{
	struct hp_mp_vthread *v = bpf_map_lookup_elem(&vthreads, &thread);
	if (v && v->nactive > 1)
		v->nactive--;
	else if (v)
		bpf_map_delete_elem(&vthreads, &thread);
}

static __always_inline void enter(__u32 slot, __u64 pid_tgid, bool vtime)
{
	struct hp_mp_frame_key key = { .thread = thread_key((__u32)pid_tgid), .slot = slot };
	struct hp_mp_frame *fr = bpf_map_lookup_elem(&frames, &key);
	if (fr) {
		fr->depth++;
		return;
	}
	__u64 now = bpf_ktime_get_ns();
	struct hp_mp_frame nf = { .entry_ns = now, .depth = 1, .tgid = pid_tgid >> 32 };
	if (vtime && !vclock(key.thread, now, true, &nf.entry_vclock)) {
		stat_add(1);
		return;
	}
	if (bpf_map_update_elem(&frames, &key, &nf, BPF_NOEXIST)) {
		stat_add(0);
		if (vtime)
			vthread_release(key.thread);
	}
}

static __always_inline void leave(__u32 slot, __u32 half, __u64 pid_tgid, bool vtime)
{
	struct hp_mp_frame_key key = { .thread = thread_key((__u32)pid_tgid), .slot = slot };
	struct hp_mp_frame *fr = bpf_map_lookup_elem(&frames, &key);
	if (!fr) {
		stat_add(2);
		return;
	}
	if (fr->depth > 1) {
		fr->depth--;
		return;
	}
	__u64 now = bpf_ktime_get_ns(), v = 0;
	__u32 at = half + slot;
	struct hp_mp_counts *c = bpf_map_lookup_elem(&counts, &at);
	if (c) {
		c->wall_ns += now - fr->entry_ns;
		c->exits++;
		if (vtime && vclock(key.thread, now, false, &v)) {
			c->vtime_ns += v - fr->entry_vclock;
			vthread_release(key.thread);
		}
	}
	bpf_map_delete_elem(&frames, &key);
}

static __always_inline int on_probe(const struct hp_mp_probe *p)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	bool vtime = p->flags & HP_MP_VTIME;
	__u32 zero = 0, *a = bpf_map_lookup_elem(&armed, &zero);
	/* Nothing counts or opens a timer before the whole measurement is armed. */
	if (!a || !*a)
		return 0;
	__u32 half = *a - 1;
	/* An exit belongs to an entry that already passed the predicates. */
	if (p->flags & HP_MP_LEAVE) {
		leave(p->timer_slot, half, pid_tgid, vtime);
		return 0;
	}
	if (!passes(pid_tgid))
		return 0;
	for (int i = 0; i < 2; i++) {
		__u32 slot = p->count_slot[i];
		if (slot == HP_MP_NO_SLOT)
			continue;
		slot += half;
		struct hp_mp_counts *c = bpf_map_lookup_elem(&counts, &slot);
		if (c)
			c->count++;
	}
	if (p->flags & HP_MP_ENTER)
		enter(p->timer_slot, pid_tgid, vtime);
	return 0;
}

#endif
