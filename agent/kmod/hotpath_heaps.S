/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The code heaps' place: HOTPATH_HEAPS_MAX slots of HOTPATH_HEAP_MAX bytes in
 * hotpath.ko's own text, so that the copies are module text to the kernel:
 * kallsyms names them through the module's symbols, the ORC unwinder finds
 * their entries in the module's table, kprobes may be placed in them
 * (hotpath_main.c). NOBITS: the loader zeroes it (the module fills it with
 * int3 at init). Kbuild keeps objtool away from this object: there are no
 * instructions here to check, and no bytes in the file to read.
 */
#include <linux/linkage.h>

/* HOTPATH_HEAPS_MAX x HOTPATH_HEAP_MAX (hotpath_uapi.h, whose u-suffixed
 * numbers the assembler does not read): hp_init checks the two agree, by
 * hotpath_heap_area_bytes (data: a label at the area's end would be one
 * more text symbol, which kallsyms would list as a function). */
#define HP_AREA_BYTES (16 * 65536)

	.pushsection .hotpath_heaps, "ax", @nobits
	.balign 4096
SYM_DATA_START(hotpath_heap_area)
	.skip HP_AREA_BYTES
SYM_DATA_END(hotpath_heap_area)
	.popsection

	.pushsection .rodata, "a"
	.balign 8
SYM_DATA(hotpath_heap_area_bytes, .quad HP_AREA_BYTES)
	.popsection
