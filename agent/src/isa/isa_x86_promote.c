// SPDX-License-Identifier: Apache-2.0
/*
 * Indirect-call promotion on x86-64 (isa.h): an indirect call re-emitted as
 * "its target is this function's original entry? then call the copy
 * directly, else make the call as it was", and that sequence recognized
 * again for the verifier, which also proves the fallback reads exactly
 * what the original call read. Every instruction is encoded by Zydis from
 * a request; none is written by hand.
 */
#include <pthread.h>
#include <string.h>
#include <Zydis/Zydis.h>

#include "isa/isa.h"

static ZydisDecoder decoder;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void promote_init(void)
{
	ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
}

/* Prefixes other than REX: a segment, notrack, bnd, an operand or address size. */
static bool legacy_prefixes(const ZydisDecodedInstruction *in)
{
	return in->raw.prefix_count > ((in->attributes & ZYDIS_ATTRIB_HAS_REX) ? 1 : 0);
}

/* An indirect near call whose 64-bit operand a mov can read as it is. */
static bool promotable(const ZydisDecodedInstruction *in, const ZydisDecodedOperand *op)
{
	if (in->mnemonic != ZYDIS_MNEMONIC_CALL || in->operand_count_visible != 1 || legacy_prefixes(in) ||
	    op->size != 64)
		return false;
	if (op->type == ZYDIS_OPERAND_TYPE_REGISTER)
		return ZydisRegisterGetWidth(ZYDIS_MACHINE_MODE_LONG_64, op->reg.value) == 64;
	return op->type == ZYDIS_OPERAND_TYPE_MEMORY && op->mem.type == ZYDIS_MEMOP_TYPE_MEM;
}

static int encode_at(ZydisEncoderRequest *req, uint64_t addr, uint8_t *out, size_t outlen)
{
	ZyanUSize n = outlen;

	req->machine_mode = ZYDIS_MACHINE_MODE_LONG_64;
	if (!ZYAN_SUCCESS(ZydisEncoderEncodeInstructionAbsolute(req, out, &n, addr)))
		return -1;
	return (int)n;
}

static int encode_call_r11(uint64_t addr, uint8_t *out, size_t outlen)
{
	ZydisEncoderRequest req;

	memset(&req, 0, sizeof(req));
	req.mnemonic = ZYDIS_MNEMONIC_CALL;
	req.operand_count = 1;
	req.operands[0].type = ZYDIS_OPERAND_TYPE_REGISTER;
	req.operands[0].reg.value = ZYDIS_REGISTER_R11;
	return encode_at(&req, addr, out, outlen);
}

int hp_isa_encode_promoted_call(const uint8_t *code, size_t len, uint64_t old_addr, uint64_t addr, uint64_t slot,
				uint64_t direct, uint8_t *out, size_t outlen, struct hp_isa_promoted *pc)
{
	ZydisDecodedInstruction in;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	ZydisEncoderRequest req;
	struct hp_isa_promoted p = { 0 };
	uint8_t tail[16];
	size_t at = 0;
	int n, tail_len;

	pthread_once(&init_once, promote_init);
	if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, code, len, &in, ops)) || !promotable(&in, &ops[0]))
		return -1;
#define PUT(expr)                     \
	do {                          \
		if ((n = (expr)) < 0) \
			return -1;    \
		at += (size_t)n;      \
	} while (0)
	if (!(ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER && ops[0].reg.value == ZYDIS_REGISTER_R11)) {
		memset(&req, 0, sizeof(req));
		req.mnemonic = ZYDIS_MNEMONIC_MOV;
		req.operand_count = 2;
		req.operands[0].type = ZYDIS_OPERAND_TYPE_REGISTER;
		req.operands[0].reg.value = ZYDIS_REGISTER_R11;
		/* The call's operand as the encoder takes it, read by a mov instead. */
		ZydisEncoderRequest call;
		if (!ZYAN_SUCCESS(
			    ZydisEncoderDecodedInstructionToEncoderRequest(&in, ops, in.operand_count_visible, &call)))
			return -1;
		req.operands[1] = call.operands[0];
		if (ops[0].type == ZYDIS_OPERAND_TYPE_MEMORY) {
			req.operands[1].mem.size = 8;
			if (ops[0].mem.base == ZYDIS_REGISTER_RIP) {
				ZyanU64 abs;
				if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&in, &ops[0], old_addr, &abs)))
					return -1;
				req.operands[1].mem.displacement = (ZyanI64)abs;
				p.rel_target = abs;
			}
		}
		PUT(encode_at(&req, addr, out, outlen));
		if (p.rel_target) {
			ZydisDecodedInstruction mv;
			ZydisDecodedOperand mops[ZYDIS_MAX_OPERAND_COUNT];
			if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, out, at, &mv, mops)) ||
			    mv.raw.disp.size != 32)
				return -1;
			p.rel_offset = mv.raw.disp.offset;
		}
	}
	memset(&req, 0, sizeof(req));
	req.mnemonic = ZYDIS_MNEMONIC_CMP;
	req.operand_count = 2;
	req.operands[0].type = ZYDIS_OPERAND_TYPE_REGISTER;
	req.operands[0].reg.value = ZYDIS_REGISTER_R11;
	req.operands[1].type = ZYDIS_OPERAND_TYPE_MEMORY;
	req.operands[1].mem.base = ZYDIS_REGISTER_RIP;
	req.operands[1].mem.displacement = (ZyanI64)slot;
	req.operands[1].mem.size = 8;
	PUT(encode_at(&req, addr + at, out + at, outlen - at));
	/* jne over the direct call and the jmp (both of fixed length) to "call r11". */
	memset(&req, 0, sizeof(req));
	req.mnemonic = ZYDIS_MNEMONIC_CALL;
	req.branch_type = ZYDIS_BRANCH_TYPE_NEAR;
	req.branch_width = ZYDIS_BRANCH_WIDTH_32;
	req.operand_count = 1;
	req.operands[0].type = ZYDIS_OPERAND_TYPE_IMMEDIATE;
	req.operands[0].imm.s = (ZyanI64)direct;
	size_t call_at = at + (size_t)hp_isa_branch_length(5, HP_W_SHORT);
	size_t jmp_at = call_at + 5, ind_at = jmp_at + (size_t)hp_isa_branch_length(-1, HP_W_SHORT);
	if ((tail_len = encode_call_r11(addr + ind_at, tail, sizeof(tail))) < 0 || outlen < ind_at + (size_t)tail_len)
		return -1;
	PUT(hp_isa_encode_branch(5, addr + at, addr + ind_at, HP_W_SHORT, out + at, outlen - at));
	PUT(encode_at(&req, addr + at, out + at, outlen - at));
	if (at != jmp_at)
		return -1;
	p.direct_ret = (uint8_t)at;
	PUT(hp_isa_encode_branch(-1, addr + at, addr + ind_at + (size_t)tail_len, HP_W_SHORT, out + at, outlen - at));
	p.indirect_at = (uint8_t)at;
	memcpy(out + at, tail, (size_t)tail_len);
	at += (size_t)tail_len;
#undef PUT
	p.len = (uint8_t)at;
	p.slot = slot;
	p.direct = direct;
	if (pc)
		*pc = p;
	return (int)at;
}

/* Decode one instruction of the sequence at code + at: false when it does
 * not decode or carries a prefix other than REX. */
static bool next(const uint8_t *code, size_t len, size_t at, ZydisDecodedInstruction *in, ZydisDecodedOperand *ops)
{
	return at < len && ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, code + at, len - at, in, ops)) &&
	       !legacy_prefixes(in);
}

static bool is_r11(const ZydisDecodedOperand *op)
{
	return op->type == ZYDIS_OPERAND_TYPE_REGISTER && op->reg.value == ZYDIS_REGISTER_R11;
}

/* The absolute address of a relative operand or a rip-relative one. */
static bool absolute(const ZydisDecodedInstruction *in, const ZydisDecodedOperand *op, uint64_t addr, uint64_t *out)
{
	ZyanU64 a;

	if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(in, op, addr, &a)))
		return false;
	*out = a;
	return true;
}

int hp_isa_match_promoted_call(const uint8_t *code, size_t len, uint64_t addr, const uint8_t *orig, size_t olen,
			       uint64_t orig_addr, struct hp_isa_promoted *pc)
{
	ZydisDecodedInstruction in, mv = { 0 };
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT], src = { 0 };
	struct hp_isa_promoted p = { 0 };
	bool has_mov = false;
	uint64_t ind = 0, after = 0;
	size_t at = 0;

	pthread_once(&init_once, promote_init);
	if (!next(code, len, at, &in, ops))
		return -1;
	if (in.mnemonic == ZYDIS_MNEMONIC_MOV && in.operand_count_visible == 2 && is_r11(&ops[0]) &&
	    ops[1].size == 64 &&
	    (ops[1].type == ZYDIS_OPERAND_TYPE_REGISTER ||
	     (ops[1].type == ZYDIS_OPERAND_TYPE_MEMORY && ops[1].mem.type == ZYDIS_MEMOP_TYPE_MEM))) {
		has_mov = true;
		mv = in;
		src = ops[1];
		if (src.type == ZYDIS_OPERAND_TYPE_MEMORY && src.mem.base == ZYDIS_REGISTER_RIP) {
			if (!absolute(&in, &src, addr, &p.rel_target) || in.raw.disp.size != 32)
				return -1;
			p.rel_offset = in.raw.disp.offset;
		}
		at += in.length;
		if (!next(code, len, at, &in, ops))
			return -1;
	}
	if (in.mnemonic != ZYDIS_MNEMONIC_CMP || in.operand_count_visible != 2 || !is_r11(&ops[0]) ||
	    ops[1].type != ZYDIS_OPERAND_TYPE_MEMORY || ops[1].mem.base != ZYDIS_REGISTER_RIP || ops[1].size != 64 ||
	    !absolute(&in, &ops[1], addr + at, &p.slot))
		return -1;
	at += in.length;
	if (!next(code, len, at, &in, ops) || in.mnemonic != ZYDIS_MNEMONIC_JNZ ||
	    !absolute(&in, &ops[0], addr + at, &ind))
		return -1;
	at += in.length;
	if (!next(code, len, at, &in, ops) || in.mnemonic != ZYDIS_MNEMONIC_CALL ||
	    ops[0].type != ZYDIS_OPERAND_TYPE_IMMEDIATE || !ops[0].imm.is_relative ||
	    !absolute(&in, &ops[0], addr + at, &p.direct))
		return -1;
	at += in.length;
	p.direct_ret = (uint8_t)at;
	if (!next(code, len, at, &in, ops) || in.mnemonic != ZYDIS_MNEMONIC_JMP ||
	    ops[0].type != ZYDIS_OPERAND_TYPE_IMMEDIATE || !absolute(&in, &ops[0], addr + at, &after))
		return -1;
	at += in.length;
	p.indirect_at = (uint8_t)at;
	if (!next(code, len, at, &in, ops) || in.mnemonic != ZYDIS_MNEMONIC_CALL || in.operand_count_visible != 1 ||
	    !is_r11(&ops[0]))
		return -1;
	at += in.length;
	p.len = (uint8_t)at;
	if (ind != addr + p.indirect_at || after != addr + p.len)
		return -1;
	if (orig) {
		/* The fallback is the original call: r11 holds what it read. */
		ZydisDecodedInstruction oi;
		ZydisDecodedOperand oops[ZYDIS_MAX_OPERAND_COUNT];
		const ZydisDecodedOperand *o = &oops[0];
		if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, orig, olen, &oi, oops)) || !promotable(&oi, o))
			return -1;
		if (o->type == ZYDIS_OPERAND_TYPE_REGISTER) {
			bool same = has_mov ? src.type == ZYDIS_OPERAND_TYPE_REGISTER && src.reg.value == o->reg.value :
					      o->reg.value == ZYDIS_REGISTER_R11;
			if (!same)
				return -1;
		} else {
			uint64_t oa = 0, na = 0;
			if (!has_mov || src.type != ZYDIS_OPERAND_TYPE_MEMORY || src.mem.base != o->mem.base ||
			    src.mem.index != o->mem.index || src.mem.segment != o->mem.segment ||
			    (o->mem.index && src.mem.scale != o->mem.scale))
				return -1;
			if (o->mem.base == ZYDIS_REGISTER_RIP) {
				if (!absolute(&oi, o, orig_addr, &oa) || !absolute(&mv, &src, addr, &na) || oa != na)
					return -1;
			} else if (src.mem.disp.value != o->mem.disp.value) {
				return -1;
			}
		}
	}
	if (pc)
		*pc = p;
	return (int)at;
}
