/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The instruction-set interface of the agent. Everything that looks at
 * machine-code bytes goes through here: instruction length, the control-flow
 * class the CFG builder needs, the direct branch target, and Intel-syntax
 * text. The only implementation is x86-64 over Zydis (isa_x86.c).
 */
#ifndef HOTPATH_ISA_H
#define HOTPATH_ISA_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum hp_insn_class {
	HP_IC_OTHER = 0,
	HP_IC_JCC,      /* conditional direct branch (jcc, loop, jrcxz) */
	HP_IC_JMP,      /* unconditional direct jump */
	HP_IC_JMP_IND,  /* jump through a register or memory */
	HP_IC_CALL,     /* direct call */
	HP_IC_CALL_IND, /* call through a register or memory */
	HP_IC_RET,      /* ret, iret, sysret, sysexit */
	HP_IC_TRAP,     /* ud2/ud0/ud1, int3, hlt: control does not continue */
};

struct hp_isa_insn {
	uint8_t len;
	uint8_t cls;     /* enum hp_insn_class */
	bool has_target; /* direct branch or call */
	uint64_t target; /* absolute target when has_target */
};

/* Decode one instruction at addr. Returns 0, or -1 if the bytes do not form
 * a valid instruction within len. Thread-safe. */
int hp_isa_decode(const uint8_t *code, size_t len, uint64_t addr, struct hp_isa_insn *out);

/* Name for a target address, for symbolized disassembly: fills buf and
 * returns true if the address has a name. */
typedef bool (*hp_isa_symbolizer)(void *ctx, uint64_t addr, char *buf, size_t len);

/* Decode one instruction and render it in Intel syntax into text; direct
 * targets get a " <name>" suffix from sym when it knows them. Returns the
 * length (> 0) or -1 if undecodable. Thread-safe. */
int hp_isa_format(const uint8_t *code, size_t len, uint64_t addr, char *text, size_t textlen, hp_isa_symbolizer sym,
		  void *sym_ctx);

const char *hp_insn_class_name(enum hp_insn_class c);

/* Facts about one instruction that decide whether a kernel can probe it. */
enum hp_isa_trait {
	HP_ISA_LOCK = 1u << 0,       /* lock prefix */
	HP_ISA_SEG_LEGACY = 1u << 1, /* es, cs, ss or ds segment prefix (ds also as notrack) */
	HP_ISA_TRAP = 1u << 2,       /* int3, int n, into, hlt, ud0/ud1/ud2 */
	HP_ISA_IO = 1u << 3,         /* in, out, ins, outs */
	HP_ISA_INTERRUPTS = 1u << 4, /* cli, sti, iret */
};

/* The traits (enum hp_isa_trait bits) of the instruction at code, or -1 if
 * the bytes do not decode. Thread-safe. */
int hp_isa_traits(const uint8_t *code, size_t len, unsigned *traits);

#endif
