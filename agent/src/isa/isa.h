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
	HP_IC_TRAP,     /* ud2/ud0/ud1, int3: control does not continue (a kernel WARN's ud2 does) */
	HP_IC_HALT,     /* hlt: faults in user mode; in the kernel it resumes after an interrupt */
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
/*
 * Operand detail, for the few patterns the model recognizes (jump tables,
 * PLT stubs). Registers are the ISA's register numbers widened to the
 * enclosing 64-bit register, so eax and rax compare equal; 0 means none.
 */
enum hp_isa_mnem {
	HP_MN_OTHER = 0,
	HP_MN_LEA,
	HP_MN_MOV,
	HP_MN_MOVSXD,
	HP_MN_ADD,
	HP_MN_CMP,
	HP_MN_JMP,
	HP_MN_JA,  /* unsigned above: an index bound check "cmp i, n; ja default" */
	HP_MN_JAE, /* unsigned above or equal */
	HP_MN_CALL,
	HP_MN_NOP,
	HP_MN_MOVZX,
};

enum hp_isa_op_kind { HP_OP_NONE = 0, HP_OP_REG, HP_OP_MEM, HP_OP_IMM };

struct hp_isa_operand {
	uint8_t kind;         /* enum hp_isa_op_kind */
	uint8_t bytes;        /* operand size in bytes */
	uint16_t reg;         /* HP_OP_REG: widened register */
	uint16_t base, index; /* HP_OP_MEM: widened registers, 0 if absent */
	uint8_t scale;
	bool rip;     /* HP_OP_MEM relative to the instruction pointer */
	int64_t disp; /* HP_OP_MEM displacement; absolute address when rip */
	int64_t imm;  /* HP_OP_IMM */
};

struct hp_isa_detail {
	uint8_t len;
	uint8_t mnem; /* enum hp_isa_mnem */
	uint8_t nops; /* visible operands, at most 4 */
	struct hp_isa_operand op[4];
	bool has_rip_ref;    /* some operand addresses memory relative to rip */
	uint64_t rip_target; /* its absolute address */
};

/* Decode one instruction with its operands. Returns 0 or -1. Thread-safe. */
int hp_isa_decode_detail(const uint8_t *code, size_t len, uint64_t addr, struct hp_isa_detail *out);

/* Does the instruction at code write the register reg (a widened register as
 * in hp_isa_detail; a write to any part of it counts, implicit operands
 * too)? A call counts as writing the registers the x86-64 System V ABI
 * lets a callee change (rax, rcx, rdx, rsi, rdi, r8-r11). 1 yes, 0 no, -1
 * the bytes do not decode. Thread-safe. */
int hp_isa_writes_reg(const uint8_t *code, size_t len, uint16_t reg);

/* How the instruction at code moves rsp, into *delta (bytes, negative =
 * down): a push or pop of any kind (pushfq, popfq too) and "lea rsp,
 * [rsp+d]"; 0 for an instruction that leaves rsp alone. Returns 0, or -1
 * when it changes rsp any other way (a call, mov rsp, ...) or does not
 * decode. Thread-safe. */
int hp_isa_rsp_delta(const uint8_t *code, size_t len, int64_t *delta);

/*
 * Compare two instructions for the emitter's verifier: true when they are
 * the same operation on the same operands, where a rip-relative memory
 * operand counts by the absolute address it reaches and a relative branch or
 * call immediate by its absolute target (returned in a_target and b_target,
 * 0 when the instruction has none). Prefixes, operand sizes and
 * registers must agree.
 */
bool hp_isa_same_operation(const uint8_t *a, size_t alen, uint64_t aaddr, const uint8_t *b, size_t blen, uint64_t baddr,
			   uint64_t *a_target, uint64_t *b_target);

/*
 * Encoding, for the emitter (Zydis' encoder; no hand-written bytes).
 * A condition is the x86 condition number 0..15 of a jcc (o, no, b, ae, e,
 * ne, be, a, s, ns, p, np, l, ge, le, g); its inverse is cond ^ 1.
 */
enum hp_isa_width { HP_W_SHORT = 1, HP_W_NEAR = 4 };

/* Condition of the jcc at code (rel8 or rel32 forms); -1 for anything
 * else, including jcxz/loop/xbegin which have no inverse. */
int hp_isa_jcc_condition(const uint8_t *code, size_t len);
/* Encode "jcc target" (cond 0..15) or "jmp target" (cond -1) placed at
 * addr with the given displacement width. Returns the length, or -1 when
 * the target is out of reach for that width. */
int hp_isa_encode_branch(int cond, uint64_t addr, uint64_t target, enum hp_isa_width w, uint8_t *out, size_t outlen);
/* Length of such a branch: 2 short, 5 (jmp) or 6 (jcc) near. */
int hp_isa_branch_length(int cond, enum hp_isa_width w);
/*
 * Re-encode the instruction at code (originally at old_addr) to run at
 * new_addr: a rip-relative memory operand keeps its absolute address; a
 * relative call or jump goes to new_target. Instructions without relative
 * operands are copied unchanged. Returns the length or -1 when it cannot be
 * encoded (e.g. a target beyond +-2 GiB).
 */
int hp_isa_relocate(const uint8_t *code, size_t len, uint64_t old_addr, uint64_t new_addr, uint64_t new_target,
		    uint8_t *out, size_t outlen, uint8_t *rel_offset);
/* (rel_offset, if not NULL, receives the offset of the 32-bit relative
 * field in the output, or 0 when it has none: for relocation records.) */
/* Fill n bytes with the longest multi-byte nops. Returns 0 or -1. */
int hp_isa_nop_fill(uint8_t *out, size_t n);

/* The status flags (CF, PF, AF, ZF, SF, OF as their EFLAGS bits) the
 * instruction at code reads, and writes (a flag left undefined counts as
 * written). Returns 0 or -1 when the bytes do not decode. */
#define HP_ISA_STATUS_FLAGS 0x8d5u
int hp_isa_flags(const uint8_t *code, size_t len, unsigned *reads, unsigned *writes);
/*
 * A counter increment placed at addr: "inc qword [counter]" (rip-relative,
 * with a lock prefix when lock), and when keep_flags, wrapped so that the
 * status flags survive it: "lea rsp, [rsp-red_zone]; pushfq; inc; popfq;
 * lea rsp, [rsp+red_zone]" (red_zone 128 in user code, where the bytes
 * below rsp may be live; 0 in the kernel). Its length does not depend on
 * the addresses (the displacement is always 32 bits); *disp_at gets the
 * offset of that displacement in out. Returns the length or -1.
 */
int hp_isa_encode_counter(bool lock, bool keep_flags, uint32_t red_zone, uint64_t addr, uint64_t counter, uint8_t *out,
			  size_t outlen, uint32_t *disp_at);

/*
 * A key read placed at addr: "cmp dword [rip + key], 0" (a static key's
 * enabled count against zero). Its displacement is always 32 bits; *disp_at
 * gets its offset in out. Returns the length or -1 (key out of rel32 reach).
 */
int hp_isa_encode_key_read(uint64_t addr, uint64_t key, uint8_t *out, size_t outlen, uint32_t *disp_at);

/*
 * Indirect-call promotion (issue 17): the indirect call at code (originally
 * at old_addr: "call reg" or "call [mem]", 64-bit, no prefix but REX)
 * emitted at addr as a compare of its target with the 8 bytes at slot and
 * a direct call of direct when they are equal, else the call itself:
 *       mov r11, <the call's operand>   (left out when that is r11)
 *       cmp r11, [rip -> slot]
 *       jne .ind
 *       call direct
 *       jmp .next
 *  .ind: call r11
 * .next:
 * r11 is neither an argument register nor preserved by a call, so it is
 * dead at a call site; the operand is read once, before anything moves
 * rsp, and rsp is the same throughout. The length does not depend on the
 * addresses. Returns it, or -1 when the call has another form (pc, when
 * not NULL, gets the parts).
 */
struct hp_isa_promoted {
	uint8_t len;
	uint8_t rel_offset;  /* the mov's rip-relative displacement (data outside the code), or 0 */
	uint64_t rel_target; /* the address that displacement reaches */
	uint64_t slot;       /* the 8 bytes compared with */
	uint64_t direct;     /* the direct call's target */
	uint8_t direct_ret;  /* offset after the direct call: its return address */
	uint8_t indirect_at; /* offset of "call r11" (its return address is len) */
};
int hp_isa_encode_promoted_call(const uint8_t *code, size_t len, uint64_t old_addr, uint64_t addr, uint64_t slot,
				uint64_t direct, uint8_t *out, size_t outlen, struct hp_isa_promoted *pc);
/* Recognize that sequence at code (at addr), filling *pc. With orig (the
 * indirect call at orig_addr), its mov must also read exactly what that
 * call reads (the same register; or the same memory operand, a
 * rip-relative one by its absolute address), so that the fallback is that
 * call. Returns the length, or -1. */
int hp_isa_match_promoted_call(const uint8_t *code, size_t len, uint64_t addr, const uint8_t *orig, size_t olen,
			       uint64_t orig_addr, struct hp_isa_promoted *pc);

#endif
