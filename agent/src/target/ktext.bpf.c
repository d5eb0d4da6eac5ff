// SPDX-License-Identifier: Apache-2.0
/*
 * Reads kernel text for the code model. A BPF_PROG_TYPE_SYSCALL program run
 * on demand with BPF_PROG_TEST_RUN: user space sets the address and length,
 * runs the program, and finds the bytes (and the helper's result) in .bss.
 * No attachment, so no kprobe, fentry or module support is needed.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "target/ktext.h"

__u64 src_addr;
__u32 src_len;
long read_ret;
__u8 buf[KTEXT_CHUNK];

SEC("syscall")
int read_text(void *ctx)
{
	__u32 len = src_len;

	/* Bound the length so the verifier can prove the copy stays in buf. */
	if (len > KTEXT_CHUNK)
		len = KTEXT_CHUNK;
	read_ret = bpf_probe_read_kernel(buf, len, (const void *)src_addr);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
