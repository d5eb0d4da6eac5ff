// SPDX-License-Identifier: Apache-2.0
/*
 * Minimal programs for bench/probe_cost, one per probe kind, in the manner of
 * the kernel's BPF selftests trigger benchmarks: each counts the hits of this
 * benchmark's own process into a per-CPU counter and does nothing else, so
 * what is measured is the probe mechanism itself.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

const volatile __u32 bench_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

static __always_inline int count(void)
{
	__u32 zero = 0;
	if ((bpf_get_current_pid_tgid() >> 32) != bench_tgid)
		return 0;
	__u64 *h = bpf_map_lookup_elem(&hits, &zero);
	if (h)
		(*h)++;
	return 0;
}

/* uprobe, uretprobe, kprobe, kretprobe through perf events */
SEC("kprobe")
int on_probe(struct pt_regs *ctx)
{
	return count();
}

/* uprobe_multi / uretprobe_multi links */
SEC("kprobe")
int on_multi(struct pt_regs *ctx)
{
	return count();
}

SEC("raw_tp/sys_enter")
int on_raw_tp(void *ctx)
{
	return count();
}

SEC("tp_btf/sys_enter")
int on_tp_btf(void *ctx)
{
	return count();
}

SEC("tracepoint/syscalls/sys_enter_getpgid")
int on_tracepoint(void *ctx)
{
	return count();
}

SEC("fentry/__x64_sys_getpgid")
int BPF_PROG(on_fentry)
{
	return count();
}

SEC("fexit/__x64_sys_getpgid")
int BPF_PROG(on_fexit)
{
	return count();
}

char LICENSE[] SEC("license") = "GPL";
