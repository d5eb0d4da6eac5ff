// SPDX-License-Identifier: Apache-2.0
/*
 * A kernel function measured through BPF trampolines (fentry at the entry,
 * fexit at every exit): one object per function, its probe table entries set
 * as read-only data before load and its maps replaced by those of the
 * measurement's main object (measure_probes.bpf.c), so every function's hits
 * land in the same counters and frames. The attach target is set at load.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "measure/measure.bpf.h"

const volatile struct hp_mp_probe entry_probe = { { HP_MP_NO_SLOT, HP_MP_NO_SLOT }, HP_MP_NO_SLOT, 0 };
const volatile struct hp_mp_probe exit_probe = { { HP_MP_NO_SLOT, HP_MP_NO_SLOT }, HP_MP_NO_SLOT, 0 };

SEC("fentry/vfs_read")
int BPF_PROG(fentry_hit)
{
	struct hp_mp_probe p = entry_probe;
	return on_probe(&p);
}

SEC("fexit/vfs_read")
int BPF_PROG(fexit_hit)
{
	struct hp_mp_probe p = exit_probe;
	return on_probe(&p);
}

char LICENSE[] SEC("license") = "GPL";
