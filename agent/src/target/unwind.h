/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Call-frame information (DWARF CFI in .eh_frame), read with libdw: for an
 * address, the row of the unwind table in effect there (how to find the
 * canonical frame address and where each register of the caller is kept)
 * and the range of addresses it covers. Opened from an ELF file, or from
 * .eh_frame bytes a plan generated for moved code (wrapped in an ELF image
 * in memory, so the same reader checks both).
 */
#ifndef HOTPATH_UNWIND_H
#define HOTPATH_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* DWARF registers 0..16 of x86-64: the general registers and the return address. */
#define HP_CFI_REGS 17

/* One DWARF expression operation as libdw gives it. */
struct hp_cfi_op {
	uint8_t atom;
	uint64_t number, number2;
};

enum hp_cfi_kind {
	HP_CFI_UNDEFINED = 0, /* the caller's value cannot be recovered */
	HP_CFI_SAME,          /* unchanged by this frame */
	HP_CFI_EXPR,          /* a location (or a value, ending in DW_OP_stack_value) from ops */
};

struct hp_cfi_rule {
	uint8_t kind;
	uint8_t nops;
	struct hp_cfi_op op[3];
};

struct hp_cfi_row {
	uint64_t start, end; /* the addresses it covers (at the table's addresses) */
	uint8_t ncfa;        /* 0: no CFA known */
	struct hp_cfi_op cfa[3];
	struct hp_cfi_rule reg[HP_CFI_REGS];
};

struct hp_cfi;

/* The table of the ELF file open on fd (taken over: closed with the table).
 * NULL when the file has no usable .eh_frame (fd closed). */
struct hp_cfi *hp_cfi_open_fd(int fd);
/* The table made of eh_frame bytes placed at addr (as a plan generated). */
struct hp_cfi *hp_cfi_open_blob(uint64_t addr, const uint8_t *eh_frame, size_t len);
void hp_cfi_close(struct hp_cfi *c);

/* The row at addr: 0, -ENOENT (no FDE covers addr) or -EOPNOTSUPP (a rule
 * longer than three operations, which plans do not reproduce). */
int hp_cfi_row(struct hp_cfi *c, uint64_t addr, struct hp_cfi_row *row);
/* The same rules (ranges aside). */
bool hp_cfi_same(const struct hp_cfi_row *a, const struct hp_cfi_row *b);

#endif
