// SPDX-License-Identifier: Apache-2.0
/*
 * The BPF programs of a measurement (see measure.bpf.h for what a hit does):
 *  - hit: uprobes, uretprobes, kprobes and kretprobes attached through perf
 *    events; the attach cookie is the index of the probe in the probes table;
 *  - hit_multi: the same for uprobe_multi / uretprobe_multi links (loaded
 *    with that expected attach type, which perf-event attachment refuses);
 *  - the sched_switch hook that drives virtualized timers, in the three forms
 *    a kernel may allow (tp_btf, raw_tp, classic tracepoint), one loaded;
 *  - sample_filter: applied to the whole-system sampler's perf events when a
 *    measurement falls back to sampled block counts, so predicates hold for
 *    samples too (a perf_event program returning 0 drops the sample).
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "measure/measure.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set to the number of probes before load */
	__type(key, __u32);
	__type(value, struct hp_mp_probe);
} probes SEC(".maps");

static __always_inline int probe_hit(void *ctx)
{
	__u32 idx = (__u32)bpf_get_attach_cookie(ctx);
	struct hp_mp_probe *p = bpf_map_lookup_elem(&probes, &idx);
	return p ? on_probe(p) : 0;
}

SEC("kprobe")
int hit(struct pt_regs *ctx)
{
	return probe_hit(ctx);
}

SEC("kprobe")
int hit_multi(struct pt_regs *ctx)
{
	return probe_hit(ctx);
}

/* The outgoing thread's virtual clock takes the time it ran here. */
static __always_inline int switched(__u32 prev_tid, __u32 next_tid)
{
	__u32 zero = 0, prev = thread_key(prev_tid);
	__u64 now = bpf_ktime_get_ns();
	struct hp_mp_cpu *c = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!c)
		return 0;
	struct hp_mp_vthread *v = bpf_map_lookup_elem(&vthreads, &prev);
	if (v && c->thread == prev)
		v->vacc_ns += now - c->since_ns;
	c->thread = thread_key(next_tid);
	c->since_ns = now;
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return switched(prev->pid, next->pid);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return switched(BPF_CORE_READ(prev, pid), BPF_CORE_READ(next, pid));
}

SEC("tracepoint/sched/sched_switch")
int switch_tp(struct trace_event_raw_sched_switch *ctx)
{
	return switched(ctx->prev_pid, ctx->next_pid);
}

SEC("perf_event")
int sample_filter(struct bpf_perf_event_data *ctx)
{
	return passes(bpf_get_current_pid_tgid()) ? 1 : 0;
}

char LICENSE[] SEC("license") = "GPL";
