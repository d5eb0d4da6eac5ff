// SPDX-License-Identifier: Apache-2.0
/*
 * The programs the capability probes load and fire, one per mechanism: each
 * counts its hits and keeps the attach cookie it saw, so a probe proves the
 * mechanism really runs (and hands cookies through) rather than only that
 * an attach call returned. User space loads one program at a time, since a
 * mechanism the kernel forbids fails the whole object's load.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

__u64 hits;
__u64 cookie;

static __always_inline int seen(void *ctx, bool has_cookie)
{
	__sync_fetch_and_add(&hits, 1);
	if (has_cookie)
		cookie = bpf_get_attach_cookie(ctx);
	return 0;
}

/* kprobe, kretprobe, uprobe, uretprobe through perf events (one program type). */
SEC("kprobe")
int on_probe(struct pt_regs *ctx)
{
	return seen(ctx, true);
}

/* uprobe_multi / uretprobe_multi links (loaded with that expected attach type). */
SEC("kprobe")
int on_multi(struct pt_regs *ctx)
{
	return seen(ctx, true);
}

/* fentry and fexit: the target function is set before load. */
SEC("fentry/__x64_sys_getpgid")
int BPF_PROG(on_fentry)
{
	return seen(ctx, false);
}

SEC("fexit/__x64_sys_getpgid")
int BPF_PROG(on_fexit)
{
	return seen(ctx, false);
}

SEC("tracepoint/sched/sched_switch")
int on_tracepoint(void *ctx)
{
	return seen(ctx, false);
}

SEC("raw_tp/sched_switch")
int on_raw_tp(void *ctx)
{
	return seen(ctx, false);
}

SEC("tp_btf/sched_switch")
int on_tp_btf(void *ctx)
{
	return seen(ctx, false);
}

char LICENSE[] SEC("license") = "GPL";
