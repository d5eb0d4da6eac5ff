/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading .eh_frame (the call-frame information every x86-64 ELF object
 * carries for unwinding): each FDE's code range, its LSDA (exception
 * landing pads in .gcc_except_table) and whether its CIE names a
 * personality routine. Bounds-checked; a corrupt entry ends the walk.
 */
#ifndef HOTPATH_EH_FRAME_H
#define HOTPATH_EH_FRAME_H

#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdint.h>

struct hp_eh_fde {
	uint64_t start, range; /* the code it covers, at file addresses */
	uint64_t lsda;         /* its language-specific data area, 0 if none */
	bool personality;      /* its CIE names a personality routine */
};

/* Call fn for every FDE of elf's .eh_frame. Returns the first negative
 * value fn returns, else 0. */
int hp_eh_frame_walk(Elf *elf, int (*fn)(void *ctx, const struct hp_eh_fde *fde), void *ctx);

#endif
