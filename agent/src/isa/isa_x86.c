// SPDX-License-Identifier: Apache-2.0
/*
 * x86-64 decoding over Zydis 4: classifies each instruction for the CFG
 * builder and formats Intel-syntax text for disassembly views. Decoding reads
 * only the instruction itself (no operand decoding) on the hot path, since a
 * whole-kernel parse decodes millions of instructions.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <Zycore/Format.h>
#include <Zydis/Zydis.h>

#include "isa/isa.h"

static ZydisDecoder decoder;      /* full: for formatting */
static ZydisDecoder fast_decoder; /* minimal: length, mnemonic, raw fields */
static ZydisFormatter formatter;
static ZydisFormatterFunc orig_print_abs;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

struct fmt_ctx {
	hp_isa_symbolizer sym;
	void *sym_ctx;
};

/* Print the absolute address as usual, then the callee's name if known. */
static ZyanStatus print_address_abs(const ZydisFormatter *f, ZydisFormatterBuffer *buffer,
				    ZydisFormatterContext *context)
{
	ZyanStatus st = orig_print_abs(f, buffer, context);
	struct fmt_ctx *fc = context->user_data;
	ZyanU64 addr;
	char name[128];
	ZyanString *s;

	if (!ZYAN_SUCCESS(st) || !fc || !fc->sym)
		return st;
	if (!ZYAN_SUCCESS(
		    ZydisCalcAbsoluteAddress(context->instruction, context->operand, context->runtime_address, &addr)))
		return st;
	if (!fc->sym(fc->sym_ctx, addr, name, sizeof(name)))
		return st;
	if (!ZYAN_SUCCESS(ZydisFormatterBufferAppend(buffer, ZYDIS_TOKEN_SYMBOL)) ||
	    !ZYAN_SUCCESS(ZydisFormatterBufferGetString(buffer, &s)))
		return st;
	return ZyanStringAppendFormat(s, " <%s>", name);
}

static void isa_init(void)
{
	ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
	ZydisDecoderInit(&fast_decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
	/* A whole-kernel parse needs lengths and branch targets only; skipping
	 * semantic analysis roughly halves decode time. */
	ZydisDecoderEnableMode(&fast_decoder, ZYDIS_DECODER_MODE_MINIMAL, ZYAN_TRUE);
	ZydisFormatterInit(&formatter, ZYDIS_FORMATTER_STYLE_INTEL);
	ZydisFormatterSetProperty(&formatter, ZYDIS_FORMATTER_PROP_FORCE_SIZE, ZYAN_FALSE);
	ZydisFormatterSetProperty(&formatter, ZYDIS_FORMATTER_PROP_HEX_UPPERCASE, ZYAN_FALSE);
	ZydisFormatterSetProperty(&formatter, ZYDIS_FORMATTER_PROP_ADDR_PADDING_ABSOLUTE, ZYDIS_PADDING_DISABLED);
	orig_print_abs = (ZydisFormatterFunc)&print_address_abs;
	ZydisFormatterSetHook(&formatter, ZYDIS_FORMATTER_FUNC_PRINT_ADDRESS_ABS, (const void **)&orig_print_abs);
}

static enum hp_insn_class classify(const ZydisDecodedInstruction *in)
{
	bool rel = in->raw.imm[0].is_relative;

	switch (in->mnemonic) {
	case ZYDIS_MNEMONIC_UD0:
	case ZYDIS_MNEMONIC_UD1:
	case ZYDIS_MNEMONIC_UD2:
	case ZYDIS_MNEMONIC_INT3:
		return HP_IC_TRAP;
	case ZYDIS_MNEMONIC_HLT:
		return HP_IC_HALT;
	case ZYDIS_MNEMONIC_RET:
	case ZYDIS_MNEMONIC_IRET:
	case ZYDIS_MNEMONIC_IRETD:
	case ZYDIS_MNEMONIC_IRETQ:
	case ZYDIS_MNEMONIC_SYSRET:
	case ZYDIS_MNEMONIC_SYSEXIT:
		return HP_IC_RET;
	case ZYDIS_MNEMONIC_JMP:
		return rel ? HP_IC_JMP : HP_IC_JMP_IND;
	case ZYDIS_MNEMONIC_CALL:
		return rel ? HP_IC_CALL : HP_IC_CALL_IND;
	/* Conditional direct branches; xbegin branches to its abort handler. */
	case ZYDIS_MNEMONIC_JB:
	case ZYDIS_MNEMONIC_JBE:
	case ZYDIS_MNEMONIC_JCXZ:
	case ZYDIS_MNEMONIC_JECXZ:
	case ZYDIS_MNEMONIC_JRCXZ:
	case ZYDIS_MNEMONIC_JL:
	case ZYDIS_MNEMONIC_JLE:
	case ZYDIS_MNEMONIC_JNB:
	case ZYDIS_MNEMONIC_JNBE:
	case ZYDIS_MNEMONIC_JNL:
	case ZYDIS_MNEMONIC_JNLE:
	case ZYDIS_MNEMONIC_JNO:
	case ZYDIS_MNEMONIC_JNP:
	case ZYDIS_MNEMONIC_JNS:
	case ZYDIS_MNEMONIC_JNZ:
	case ZYDIS_MNEMONIC_JO:
	case ZYDIS_MNEMONIC_JP:
	case ZYDIS_MNEMONIC_JS:
	case ZYDIS_MNEMONIC_JZ:
	case ZYDIS_MNEMONIC_LOOP:
	case ZYDIS_MNEMONIC_LOOPE:
	case ZYDIS_MNEMONIC_LOOPNE:
	case ZYDIS_MNEMONIC_XBEGIN:
	case ZYDIS_MNEMONIC_JKNZD:
	case ZYDIS_MNEMONIC_JKZD:
		return rel ? HP_IC_JCC : HP_IC_OTHER;
	default:
		break;
	}
	return HP_IC_OTHER;
}

static int32_t rel32(const uint8_t *p)
{
	return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Opcodes that need no ModRM and cannot carry a prefix here (they are the
 * first byte): their length and meaning are fixed, so the most frequent
 * control-flow and padding instructions skip the table-driven decoder. */
static bool decode_fast(const uint8_t *c, size_t len, uint64_t addr, struct hp_isa_insn *out)
{
	uint8_t op = c[0];

	out->has_target = false;
	out->target = 0;
	if (op == 0xcc) {
		*out = (struct hp_isa_insn){ .len = 1, .cls = HP_IC_TRAP };
	} else if (op == 0xc3) {
		*out = (struct hp_isa_insn){ .len = 1, .cls = HP_IC_RET };
	} else if ((op >= 0x50 && op <= 0x5f) || op == 0x90) {
		*out = (struct hp_isa_insn){ .len = 1, .cls = HP_IC_OTHER };
	} else if ((op == 0xe8 || op == 0xe9) && len >= 5) {
		*out = (struct hp_isa_insn){ .len = 5,
					     .cls = op == 0xe8 ? HP_IC_CALL : HP_IC_JMP,
					     .has_target = true,
					     .target = addr + 5 + (int64_t)rel32(c + 1) };
	} else if (op == 0xeb && len >= 2) {
		*out = (struct hp_isa_insn){
			.len = 2, .cls = HP_IC_JMP, .has_target = true, .target = addr + 2 + (int64_t)(int8_t)c[1]
		};
	} else if (op >= 0x70 && op <= 0x7f && len >= 2) {
		*out = (struct hp_isa_insn){
			.len = 2, .cls = HP_IC_JCC, .has_target = true, .target = addr + 2 + (int64_t)(int8_t)c[1]
		};
	} else if (op == 0x0f && len >= 6 && c[1] >= 0x80 && c[1] <= 0x8f) {
		*out = (struct hp_isa_insn){
			.len = 6, .cls = HP_IC_JCC, .has_target = true, .target = addr + 6 + (int64_t)rel32(c + 2)
		};
	} else {
		return false;
	}
	return true;
}

int hp_isa_decode(const uint8_t *code, size_t len, uint64_t addr, struct hp_isa_insn *out)
{
	ZydisDecoderContext ctx;
	ZydisDecodedInstruction in;

	if (len && decode_fast(code, len, addr, out))
		return 0;
	pthread_once(&init_once, isa_init);
	if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&fast_decoder, &ctx, code, len, &in)))
		return -1;
	out->len = in.length;
	out->cls = classify(&in);
	out->has_target = false;
	out->target = 0;
	if ((out->cls == HP_IC_JCC || out->cls == HP_IC_JMP || out->cls == HP_IC_CALL) && in.raw.imm[0].is_relative) {
		out->has_target = true;
		out->target = addr + in.length + (uint64_t)in.raw.imm[0].value.s;
	}
	return 0;
}

int hp_isa_format(const uint8_t *code, size_t len, uint64_t addr, char *text, size_t textlen, hp_isa_symbolizer sym,
		  void *sym_ctx)
{
	ZydisDecodedInstruction in;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	struct fmt_ctx fc = { sym, sym_ctx };

	pthread_once(&init_once, isa_init);
	if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, code, len, &in, ops)))
		return -1;
	if (!ZYAN_SUCCESS(ZydisFormatterFormatInstruction(&formatter, &in, ops, in.operand_count_visible, text, textlen,
							  addr, &fc)))
		snprintf(text, textlen, "(unformattable)");
	return in.length;
}

int hp_isa_traits(const uint8_t *code, size_t len, unsigned *traits)
{
	ZydisDecoderContext ctx;
	ZydisDecodedInstruction in;

	pthread_once(&init_once, isa_init);
	if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&decoder, &ctx, code, len, &in)))
		return -1;
	unsigned t = 0;
	if (in.attributes & ZYDIS_ATTRIB_HAS_LOCK)
		t |= HP_ISA_LOCK;
	if (in.attributes & (ZYDIS_ATTRIB_HAS_SEGMENT_ES | ZYDIS_ATTRIB_HAS_SEGMENT_CS | ZYDIS_ATTRIB_HAS_SEGMENT_SS |
			     ZYDIS_ATTRIB_HAS_SEGMENT_DS | ZYDIS_ATTRIB_HAS_NOTRACK))
		t |= HP_ISA_SEG_LEGACY;
	switch (in.mnemonic) {
	case ZYDIS_MNEMONIC_INT3:
	case ZYDIS_MNEMONIC_INT:
	case ZYDIS_MNEMONIC_INT1:
	case ZYDIS_MNEMONIC_INTO:
	case ZYDIS_MNEMONIC_HLT:
	case ZYDIS_MNEMONIC_UD0:
	case ZYDIS_MNEMONIC_UD1:
	case ZYDIS_MNEMONIC_UD2:
		t |= HP_ISA_TRAP;
		break;
	case ZYDIS_MNEMONIC_IN:
	case ZYDIS_MNEMONIC_OUT:
	case ZYDIS_MNEMONIC_INSB:
	case ZYDIS_MNEMONIC_INSW:
	case ZYDIS_MNEMONIC_INSD:
	case ZYDIS_MNEMONIC_OUTSB:
	case ZYDIS_MNEMONIC_OUTSW:
	case ZYDIS_MNEMONIC_OUTSD:
		t |= HP_ISA_IO;
		break;
	case ZYDIS_MNEMONIC_CLI:
	case ZYDIS_MNEMONIC_STI:
	case ZYDIS_MNEMONIC_IRET:
	case ZYDIS_MNEMONIC_IRETD:
	case ZYDIS_MNEMONIC_IRETQ:
		t |= HP_ISA_INTERRUPTS;
		break;
	default:
		break;
	}
	*traits = t;
	return 0;
}

int hp_isa_flags(const uint8_t *code, size_t len, unsigned *reads, unsigned *writes)
{
	ZydisDecoderContext ctx;
	ZydisDecodedInstruction in;

	pthread_once(&init_once, isa_init);
	if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&decoder, &ctx, code, len, &in)))
		return -1;
	*reads = *writes = 0;
	if (in.cpu_flags) {
		*reads = in.cpu_flags->tested & HP_ISA_STATUS_FLAGS;
		*writes =
			(in.cpu_flags->modified | in.cpu_flags->set_0 | in.cpu_flags->set_1 | in.cpu_flags->undefined) &
			HP_ISA_STATUS_FLAGS;
	}
	/* pushf reads every flag, popf writes every one (Zydis lists them
	 * among the modified/tested flags as well; this keeps it explicit). */
	if (in.mnemonic == ZYDIS_MNEMONIC_PUSHFQ || in.mnemonic == ZYDIS_MNEMONIC_PUSHF ||
	    in.mnemonic == ZYDIS_MNEMONIC_LAHF)
		*reads |= HP_ISA_STATUS_FLAGS;
	return 0;
}
