/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What hotpath.ko's parts share: a heap, the kernel functions found at load
 * (hotpath_main.c), and the copies' names and unwind entries
 * (hotpath_unwind.c).
 */
#ifndef HOTPATH_H
#define HOTPATH_H

#include <linux/types.h>

#include "hotpath_uapi.h"

struct module;
struct hp_unwind;

struct hp_heap {
	unsigned long addr; /* 0: slot free */
	unsigned long size; /* bytes, whole pages */
	bool sealed;
	bool draining;        /* freed by its opener, a task may still be inside: slot kept (hp_drain) */
	struct hp_unwind *uw; /* its copy's names and unwind entries; NULL: none given */
};

extern int (*hp_core_kernel_text)(unsigned long addr);
extern struct module *(*hp_module_text_address)(unsigned long addr);
extern unsigned long (*hp_lookup_name)(const char *name);

/* At load: this module's own ORC table and symbols are remembered, the
 * kernel's ORC table found. At unload: both put back. */
int hp_unwind_init(void);
void hp_unwind_exit(void);
/* Heap h (sealed, one of heaps[0..n)) gets the names and ORC entries its
 * position map (len bytes at offset in it) describes; every heap's are then
 * published as this module's. -EINVAL malformed map, -ENOENT an original
 * with no ORC entry. */
int hp_unwind_set(struct hp_heap *heaps, unsigned int n, struct hp_heap *h, u32 offset, u32 len);
/* Heap h's names and entries removed (nothing when it has none). */
void hp_unwind_drop(struct hp_heap *heaps, unsigned int n, struct hp_heap *h);

#endif
