// SPDX-License-Identifier: Apache-2.0
/*
 * x86-64 encoding for the emitter, over Zydis 4's encoder: branches built
 * from a condition, a target and a width; instructions moved to a new
 * address with their relative operands kept pointing where they pointed (or
 * re-targeted); nop padding. No instruction bytes are written by hand here:
 * an instruction without relative operands is copied as it was, every other
 * one is encoded by Zydis from its decoded form.
 */
#include <pthread.h>
#include <string.h>
#include <Zydis/Zydis.h>

#include "isa/isa.h"

static ZydisDecoder decoder;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void encode_init(void)
{
	ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
}

/* The jcc mnemonics by x86 condition number. */
static const ZydisMnemonic jcc_by_cond[16] = {
	ZYDIS_MNEMONIC_JO, ZYDIS_MNEMONIC_JNO, ZYDIS_MNEMONIC_JB,  ZYDIS_MNEMONIC_JNB,
	ZYDIS_MNEMONIC_JZ, ZYDIS_MNEMONIC_JNZ, ZYDIS_MNEMONIC_JBE, ZYDIS_MNEMONIC_JNBE,
	ZYDIS_MNEMONIC_JS, ZYDIS_MNEMONIC_JNS, ZYDIS_MNEMONIC_JP,  ZYDIS_MNEMONIC_JNP,
	ZYDIS_MNEMONIC_JL, ZYDIS_MNEMONIC_JNL, ZYDIS_MNEMONIC_JLE, ZYDIS_MNEMONIC_JNLE,
};

int hp_isa_jcc_condition(const uint8_t *code, size_t len)
{
	ZydisDecodedInstruction in;
	ZydisDecoderContext ctx;

	pthread_once(&init_once, encode_init);
	if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&decoder, &ctx, code, len, &in)))
		return -1;
	for (int c = 0; c < 16; c++)
		if (in.mnemonic == jcc_by_cond[c])
			return c;
	return -1;
}

int hp_isa_branch_length(int cond, enum hp_isa_width w)
{
	if (w == HP_W_SHORT)
		return 2;
	return cond < 0 ? 5 : 6;
}

int hp_isa_encode_branch(int cond, uint64_t addr, uint64_t target, enum hp_isa_width w, uint8_t *out, size_t outlen)
{
	ZydisEncoderRequest req;
	ZyanUSize n = outlen;
	int64_t rel = (int64_t)(target - (addr + (uint64_t)hp_isa_branch_length(cond, w)));

	if (cond > 15)
		return -1;
	if (w == HP_W_SHORT ? (rel < -128 || rel > 127) : (rel < INT32_MIN || rel > INT32_MAX))
		return -1;
	memset(&req, 0, sizeof(req));
	req.machine_mode = ZYDIS_MACHINE_MODE_LONG_64;
	req.mnemonic = cond < 0 ? ZYDIS_MNEMONIC_JMP : jcc_by_cond[cond];
	req.branch_type = w == HP_W_SHORT ? ZYDIS_BRANCH_TYPE_SHORT : ZYDIS_BRANCH_TYPE_NEAR;
	req.branch_width = w == HP_W_SHORT ? ZYDIS_BRANCH_WIDTH_8 : ZYDIS_BRANCH_WIDTH_32;
	req.operand_count = 1;
	req.operands[0].type = ZYDIS_OPERAND_TYPE_IMMEDIATE;
	req.operands[0].imm.s = (ZyanI64)target;
	if (!ZYAN_SUCCESS(ZydisEncoderEncodeInstructionAbsolute(&req, out, &n, addr)))
		return -1;
	return (int)n;
}

int hp_isa_relocate(const uint8_t *code, size_t len, uint64_t old_addr, uint64_t new_addr, uint64_t new_target,
		    uint8_t *out, size_t outlen, uint8_t *rel_offset)
{
	ZydisDecodedInstruction in;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	ZydisEncoderRequest req;
	ZyanUSize n = outlen;
	bool relative = false, rel_imm = false;

	if (rel_offset)
		*rel_offset = 0;
	pthread_once(&init_once, encode_init);
	if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, code, len, &in, ops)))
		return -1;
	for (int i = 0; i < in.operand_count; i++)
		if (ops[i].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && ops[i].imm.is_relative)
			relative = rel_imm = true;
		else if (ops[i].type == ZYDIS_OPERAND_TYPE_MEMORY && ops[i].mem.base == ZYDIS_REGISTER_RIP)
			relative = true;
	if (!relative) {
		if (in.length > outlen)
			return -1;
		memcpy(out, code, in.length);
		return in.length;
	}
	/* A branch with a 32-bit displacement keeps its bytes, prefixes
	 * included (GCC's -mindirect-branch-cs-prefix puts a CS prefix on calls
	 * and jumps to retpoline thunks, which the encoder would drop): only
	 * its displacement changes. */
	if (rel_imm && in.raw.imm[0].is_relative && in.raw.imm[0].size == 32 &&
	    in.raw.imm[0].offset + 4u == in.length && in.length <= outlen) {
		int64_t d = (int64_t)(new_target - (new_addr + in.length));
		int32_t v = (int32_t)d;
		if (d < INT32_MIN || d > INT32_MAX)
			return -1;
		memcpy(out, code, in.length);
		memcpy(out + in.raw.imm[0].offset, &v, 4);
		if (rel_offset)
			*rel_offset = in.raw.imm[0].offset;
		return in.length;
	}
	if (!ZYAN_SUCCESS(ZydisEncoderDecodedInstructionToEncoderRequest(&in, ops, in.operand_count_visible, &req)))
		return -1;
	/* The absolute form of the request: targets and rip-relative addresses
	 * as absolute values, from which Zydis computes the new displacements. */
	for (int i = 0; i < req.operand_count; i++) {
		ZydisEncoderOperand *o = &req.operands[i];
		const ZydisDecodedOperand *d = &ops[i];
		ZyanU64 abs;

		if (d->type == ZYDIS_OPERAND_TYPE_IMMEDIATE && d->imm.is_relative) {
			o->imm.s = (ZyanI64)new_target;
		} else if (d->type == ZYDIS_OPERAND_TYPE_MEMORY && d->mem.base == ZYDIS_REGISTER_RIP) {
			if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&in, d, old_addr, &abs)))
				return -1;
			o->mem.displacement = (ZyanI64)abs;
		}
	}
	/* Relative branches keep a 32-bit displacement: the emitter lays out
	 * with that length, and short forms are its own choice. (An indirect
	 * call or jump through rip-relative memory has no displacement width
	 * of its own: its request stays as decoded.) */
	if (rel_imm && in.meta.branch_type != ZYDIS_BRANCH_TYPE_NONE) {
		req.branch_type = ZYDIS_BRANCH_TYPE_NEAR;
		req.branch_width = ZYDIS_BRANCH_WIDTH_32;
	}
	if (!ZYAN_SUCCESS(ZydisEncoderEncodeInstructionAbsolute(&req, out, &n, new_addr)))
		return -1;
	if (rel_offset && ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, out, n, &in, ops))) {
		if (in.raw.disp.size == 32 && in.attributes & ZYDIS_ATTRIB_IS_RELATIVE && in.raw.modrm.mod == 0 &&
		    in.raw.modrm.rm == 5)
			*rel_offset = in.raw.disp.offset;
		for (int i = 0; i < 2; i++)
			if (in.raw.imm[i].is_relative && in.raw.imm[i].size == 32)
				*rel_offset = in.raw.imm[i].offset;
	}
	return (int)n;
}

int hp_isa_nop_fill(uint8_t *out, size_t n)
{
	return n == 0 || ZYAN_SUCCESS(ZydisEncoderNopFill(out, n)) ? 0 : -1;
}

/* One instruction of the counter sequence: encoded by Zydis at addr. */
static int encode_one(ZydisEncoderRequest *req, uint64_t addr, uint8_t *out, size_t outlen)
{
	ZyanUSize n = outlen;

	req->machine_mode = ZYDIS_MACHINE_MODE_LONG_64;
	if (!ZYAN_SUCCESS(ZydisEncoderEncodeInstructionAbsolute(req, out, &n, addr)))
		return -1;
	return (int)n;
}

static int encode_lea_rsp(int32_t delta, uint64_t addr, uint8_t *out, size_t outlen)
{
	ZydisEncoderRequest req;

	memset(&req, 0, sizeof(req));
	req.mnemonic = ZYDIS_MNEMONIC_LEA;
	req.operand_count = 2;
	req.operands[0].type = ZYDIS_OPERAND_TYPE_REGISTER;
	req.operands[0].reg.value = ZYDIS_REGISTER_RSP;
	req.operands[1].type = ZYDIS_OPERAND_TYPE_MEMORY;
	req.operands[1].mem.base = ZYDIS_REGISTER_RSP;
	req.operands[1].mem.displacement = delta;
	req.operands[1].mem.size = 8;
	return encode_one(&req, addr, out, outlen);
}

static int encode_plain(ZydisMnemonic mn, uint64_t addr, uint8_t *out, size_t outlen)
{
	ZydisEncoderRequest req;

	memset(&req, 0, sizeof(req));
	req.mnemonic = mn;
	return encode_one(&req, addr, out, outlen);
}

int hp_isa_encode_counter(bool lock, bool keep_flags, uint32_t red_zone, uint64_t addr, uint64_t counter, uint8_t *out,
			  size_t outlen, uint32_t *disp_at)
{
	ZydisEncoderRequest req;
	size_t at = 0;
	int n;

	pthread_once(&init_once, encode_init);
#define PUT(expr)                     \
	do {                          \
		if ((n = (expr)) < 0) \
			return -1;    \
		at += (size_t)n;      \
	} while (0)
	if (keep_flags && red_zone)
		PUT(encode_lea_rsp(-(int32_t)red_zone, addr + at, out + at, outlen - at));
	if (keep_flags)
		PUT(encode_plain(ZYDIS_MNEMONIC_PUSHFQ, addr + at, out + at, outlen - at));
	memset(&req, 0, sizeof(req));
	req.mnemonic = ZYDIS_MNEMONIC_INC;
	req.prefixes = lock ? ZYDIS_ATTRIB_HAS_LOCK : 0;
	req.operand_count = 1;
	req.operands[0].type = ZYDIS_OPERAND_TYPE_MEMORY;
	req.operands[0].mem.base = ZYDIS_REGISTER_RIP;
	req.operands[0].mem.displacement = (ZyanI64)counter;
	req.operands[0].mem.size = 8;
	PUT(encode_one(&req, addr + at, out + at, outlen - at));
	*disp_at = (uint32_t)(at - 4); /* inc m64 has no immediate: the displacement ends it */
	if (keep_flags)
		PUT(encode_plain(ZYDIS_MNEMONIC_POPFQ, addr + at, out + at, outlen - at));
	if (keep_flags && red_zone)
		PUT(encode_lea_rsp((int32_t)red_zone, addr + at, out + at, outlen - at));
#undef PUT
	return (int)at;
}

int hp_isa_encode_key_read(uint64_t addr, uint64_t key, uint8_t *out, size_t outlen, uint32_t *disp_at)
{
	ZydisEncoderRequest req;
	int n;

	pthread_once(&init_once, encode_init);
	memset(&req, 0, sizeof(req));
	req.mnemonic = ZYDIS_MNEMONIC_CMP;
	req.operand_count = 2;
	req.operands[0].type = ZYDIS_OPERAND_TYPE_MEMORY;
	req.operands[0].mem.base = ZYDIS_REGISTER_RIP;
	req.operands[0].mem.displacement = (ZyanI64)key;
	req.operands[0].mem.size = 4;
	req.operands[1].type = ZYDIS_OPERAND_TYPE_IMMEDIATE;
	req.operands[1].imm.s = 0;
	if ((n = encode_one(&req, addr, out, outlen)) < 0)
		return -1;
	*disp_at = (uint32_t)n - 5; /* the displacement, then the 8-bit immediate */
	return n;
}
