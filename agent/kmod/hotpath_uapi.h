/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The ABI of /dev/hotpath (hotpath.ko): ioctls on a root-only misc device,
 * one opener at a time. Shared by the module and its users (the agent's
 * kernel target, the lane's guest/kmodtest.c); README.md beside it says what
 * each request checks and which errno it answers.
 *
 * Versioning: HOTPATH_INFO returns abi_version. A change that alters a
 * struct's layout or a request's meaning raises HOTPATH_ABI_VERSION; every
 * flags and reserved field must be 0 today (EINVAL otherwise), so later
 * versions can give them meaning without a new request number.
 */
#ifndef HOTPATH_UAPI_H
#define HOTPATH_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define HOTPATH_ABI_VERSION 3
#define HOTPATH_DEVICE      "/dev/hotpath"

#define HOTPATH_READ_MAX      4096u   /* bytes per HOTPATH_READ */
#define HOTPATH_HEAP_MAX      65536u  /* bytes per heap (a multiple of the page size) */
#define HOTPATH_HEAPS_MAX     16u     /* heaps per opener */
#define HOTPATH_REDIRECTS_MAX 64u     /* redirected entries per opener */
#define HOTPATH_EXPECT_MAX    32u     /* expected original bytes per HOTPATH_REDIRECT */
#define HOTPATH_CALLS_MAX     1024u   /* patched call sites per opener */
#define HOTPATH_CALL_LEN      5u      /* a call rel32: e8 and its displacement */
#define HOTPATH_MAP_MAX       262144u /* bytes of a copy's position map (HOTPATH_HEAP_UNWIND) */

struct hotpath_info {
	__u32 abi_version;   /* out: HOTPATH_ABI_VERSION of the module */
	__u32 read_max;      /* out: HOTPATH_READ_MAX */
	__u32 heap_max;      /* out: HOTPATH_HEAP_MAX */
	__u32 heaps_max;     /* out: HOTPATH_HEAPS_MAX */
	__u32 redirects_max; /* out: HOTPATH_REDIRECTS_MAX */
	__u32 calls_max;     /* out: HOTPATH_CALLS_MAX (ABI 2) */
	char release[65];    /* out: the running kernel's release (uname -r) */
	char pad[7];
};

/* Copy len bytes of kernel text at addr (inside the core kernel's text, one
 * module's text, or one of the opener's heaps) to the user buffer buf. */
struct hotpath_read {
	__u64 addr;
	__u64 buf; /* user pointer */
	__u32 len; /* 1..HOTPATH_READ_MAX */
	__u32 flags;
};

/* A code heap in module space (within rel32 reach of kernel text), filled
 * with int3, writable and not executable until HOTPATH_HEAP_SEAL. */
struct hotpath_heap_alloc {
	__u32 size;  /* in: bytes, 1..HOTPATH_HEAP_MAX (rounded up to pages) */
	__u32 id;    /* out: the heap's id for later requests */
	__u64 addr;  /* out: where it lies */
	__u32 flags; /* in: 0 */
	__u32 reserved;
};

/* Copy len bytes from buf into heap id at offset (before the seal only). */
struct hotpath_heap_write {
	__u32 id;
	__u32 offset;
	__u64 buf; /* user pointer */
	__u32 len;
	__u32 flags;
};

/* HOTPATH_HEAP_SEAL (read-only + executable) and HOTPATH_HEAP_FREE. */
struct hotpath_heap_id {
	__u32 id;
	__u32 flags;
};

/* Redirect calls of the function at entry (an ftrace site: a traceable
 * function's first byte) to target, inside a sealed heap of the opener.
 * When expect_len > 0 the expect_len bytes at entry must equal expect. */
struct hotpath_redirect {
	__u64 entry;
	__u64 target;
	__u64 expect;     /* user pointer, or 0 */
	__u32 expect_len; /* 0..HOTPATH_EXPECT_MAX */
	__u32 flags;
};

/* Remove the opener's redirect of entry. */
struct hotpath_undo {
	__u64 entry;
	__u32 flags;
	__u32 reserved;
};

/* Make the direct call at site (call rel32, e8, in kernel text: the core
 * kernel's or one module's) call target, inside a sealed heap of the opener,
 * through the kernel's text_poke_bp. The 5 bytes at site must equal expect
 * (e8 and the old rel32) first. HOTPATH_CALL_UNDO writes them back. */
struct hotpath_call {
	__u64 site;
	__u64 target;
	__u8 expect[HOTPATH_CALL_LEN];
	__u8 pad[3]; /* 0 */
	__u32 flags;
	__u32 reserved;
};

/* Restore the call site the opener patched at site. */
struct hotpath_call_undo {
	__u64 site;
	__u32 flags;
	__u32 reserved;
};

/*
 * A copy's position map (ABI 3), which the agent's plan puts after the copy's
 * code in its heap (plan/kernel_map.c): which original code each byte of the
 * copy runs as. HOTPATH_HEAP_UNWIND reads it from the sealed heap and gives
 * the copy the original's ORC unwind entries and names (kallsyms, as the
 * module's own symbols), so stack traces through the copy continue and name
 * the original function. All fields little-endian; the records are read
 * unaligned. Layout: the head, nsyms syms, nruns runs, strtab_len bytes of
 * NUL-terminated names.
 */
#define HOTPATH_MAP_MAGIC   0x4d4b5048u /* "HPKM" */
#define HOTPATH_MAP_VERSION 1u

struct hotpath_map_head {
	__u32 magic;       /* HOTPATH_MAP_MAGIC */
	__u16 version;     /* HOTPATH_MAP_VERSION */
	__u16 flags;       /* 0 */
	__u32 code_to_map; /* bytes from the copy's first byte to this head */
	__u32 nsyms, nruns, strtab_len;
};

/* A function's copy (hot or cold part): bytes [off, off + size) from the
 * copy's first byte, named as the original (name: offset into the names). */
struct hotpath_map_sym {
	__u32 off, size, name;
};

enum hotpath_map_run_kind {
	HOTPATH_RUN_SAME = 0,     /* the original's instructions at orig, one for one, same lengths */
	HOTPATH_RUN_STATE_AT = 1, /* added bytes (a branch): they run in the state of the original at orig */
};

struct hotpath_map_run {
	__u32 off, len; /* bytes [off, off + len) from the copy's first byte */
	__u64 orig;     /* the original address they run as */
	__u32 kind;     /* enum hotpath_map_run_kind */
	__u32 reserved; /* 0 */
};

/* Give the copy in heap id the unwind entries and names its position map
 * (len bytes at offset in the heap) describes (ABI 3). */
struct hotpath_heap_unwind {
	__u32 id;
	__u32 offset;
	__u32 len;
	__u32 flags;
};

#define HOTPATH_IOC_MAGIC        0xb7
#define HOTPATH_INFO             _IOR(HOTPATH_IOC_MAGIC, 0, struct hotpath_info)
#define HOTPATH_READ             _IOW(HOTPATH_IOC_MAGIC, 1, struct hotpath_read)
#define HOTPATH_HEAP_ALLOC       _IOWR(HOTPATH_IOC_MAGIC, 2, struct hotpath_heap_alloc)
#define HOTPATH_HEAP_WRITE       _IOW(HOTPATH_IOC_MAGIC, 3, struct hotpath_heap_write)
#define HOTPATH_HEAP_SEAL        _IOW(HOTPATH_IOC_MAGIC, 4, struct hotpath_heap_id)
#define HOTPATH_REDIRECT         _IOW(HOTPATH_IOC_MAGIC, 5, struct hotpath_redirect)
#define HOTPATH_UNDO             _IOW(HOTPATH_IOC_MAGIC, 6, struct hotpath_undo)
#define HOTPATH_HEAP_FREE        _IOW(HOTPATH_IOC_MAGIC, 7, struct hotpath_heap_id)
#define HOTPATH_CALL_PATCH       _IOW(HOTPATH_IOC_MAGIC, 8, struct hotpath_call)
#define HOTPATH_CALL_UNDO        _IOW(HOTPATH_IOC_MAGIC, 9, struct hotpath_call_undo)
#define HOTPATH_HEAP_UNWIND      _IOW(HOTPATH_IOC_MAGIC, 10, struct hotpath_heap_unwind)
#define HOTPATH_HEAP_UNWIND_DROP _IOW(HOTPATH_IOC_MAGIC, 11, struct hotpath_heap_id)

#endif
