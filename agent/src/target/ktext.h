/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared between ktext.bpf.c and target_kernel.c: the size of one read of
 * kernel text. The BPF program copies up to this many bytes per run into a
 * global buffer that user space reads through the skeleton's mmap'd .bss.
 */
#ifndef HOTPATH_KTEXT_H
#define HOTPATH_KTEXT_H

#define KTEXT_CHUNK (1u << 20)

#endif
