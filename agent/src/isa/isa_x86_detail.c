// SPDX-License-Identifier: Apache-2.0
/*
 * x86-64 operand detail over Zydis 4: the operand view the model uses to
 * recognize jump tables and PLT stubs, and the instruction comparison the
 * emitter's verifier uses to prove that re-laid-out code performs the same
 * operations as the original. Full decoding is slower than isa_x86.c's
 * minimal mode, so only these few callers use it.
 */
#include <pthread.h>
#include <string.h>
#include <Zydis/Zydis.h>

#include "isa/isa.h"

static ZydisDecoder decoder;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void detail_init(void)
{
	ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
}

static uint16_t widen(ZydisRegister r)
{
	if (r == ZYDIS_REGISTER_NONE)
		return 0;
	ZydisRegister w = ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, r);
	return (uint16_t)(w == ZYDIS_REGISTER_NONE ? r : w);
}

static uint8_t mnem_of(const ZydisDecodedInstruction *in)
{
	switch (in->mnemonic) {
	case ZYDIS_MNEMONIC_LEA:
		return HP_MN_LEA;
	case ZYDIS_MNEMONIC_MOV:
		return HP_MN_MOV;
	case ZYDIS_MNEMONIC_MOVSXD:
		return HP_MN_MOVSXD;
	case ZYDIS_MNEMONIC_ADD:
		return HP_MN_ADD;
	case ZYDIS_MNEMONIC_CMP:
		return HP_MN_CMP;
	case ZYDIS_MNEMONIC_JMP:
		return HP_MN_JMP;
	case ZYDIS_MNEMONIC_JNBE:
		return HP_MN_JA;
	case ZYDIS_MNEMONIC_JNB:
		return HP_MN_JAE;
	case ZYDIS_MNEMONIC_CALL:
		return HP_MN_CALL;
	case ZYDIS_MNEMONIC_NOP:
		return HP_MN_NOP;
	case ZYDIS_MNEMONIC_MOVZX:
		return HP_MN_MOVZX;
	default:
		return HP_MN_OTHER;
	}
}

static int decode_full(const uint8_t *code, size_t len, ZydisDecodedInstruction *in, ZydisDecodedOperand *ops)
{
	pthread_once(&init_once, detail_init);
	return ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, code, len, in, ops)) ? 0 : -1;
}

int hp_isa_decode_detail(const uint8_t *code, size_t len, uint64_t addr, struct hp_isa_detail *out)
{
	ZydisDecodedInstruction in;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];

	memset(out, 0, sizeof(*out));
	if (decode_full(code, len, &in, ops) < 0)
		return -1;
	out->len = in.length;
	out->mnem = mnem_of(&in);
	for (int i = 0; i < in.operand_count_visible && out->nops < 4; i++) {
		const ZydisDecodedOperand *o = &ops[i];
		struct hp_isa_operand *d = &out->op[out->nops++];

		d->bytes = (uint8_t)(o->size / 8);
		switch (o->type) {
		case ZYDIS_OPERAND_TYPE_REGISTER:
			d->kind = HP_OP_REG;
			d->reg = widen(o->reg.value);
			break;
		case ZYDIS_OPERAND_TYPE_MEMORY:
			d->kind = HP_OP_MEM;
			d->base = widen(o->mem.base);
			d->index = widen(o->mem.index);
			d->scale = o->mem.scale;
			d->disp = o->mem.disp.has_displacement ? o->mem.disp.value : 0;
			if (o->mem.base == ZYDIS_REGISTER_RIP) {
				ZyanU64 abs;
				d->rip = true;
				d->base = 0;
				if (ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&in, o, addr, &abs))) {
					d->disp = (int64_t)abs;
					out->has_rip_ref = true;
					out->rip_target = abs;
				}
			}
			break;
		case ZYDIS_OPERAND_TYPE_IMMEDIATE:
			d->kind = HP_OP_IMM;
			d->imm = o->imm.is_signed ? o->imm.value.s : (int64_t)o->imm.value.u;
			if (o->imm.is_relative)
				d->imm = (int64_t)(addr + in.length + (uint64_t)o->imm.value.s);
			break;
		default:
			d->kind = HP_OP_NONE;
			break;
		}
	}
	return 0;
}

int hp_isa_writes_reg(const uint8_t *code, size_t len, uint16_t reg)
{
	static const ZydisRegister clobbered[] = { ZYDIS_REGISTER_RAX, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_RDX,
						   ZYDIS_REGISTER_RSI, ZYDIS_REGISTER_RDI, ZYDIS_REGISTER_R8,
						   ZYDIS_REGISTER_R9,  ZYDIS_REGISTER_R10, ZYDIS_REGISTER_R11 };
	ZydisDecodedInstruction in;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];

	if (decode_full(code, len, &in, ops) < 0)
		return -1;
	if (in.meta.category == ZYDIS_CATEGORY_CALL)
		for (size_t i = 0; i < sizeof(clobbered) / sizeof(clobbered[0]); i++)
			if (reg == clobbered[i])
				return 1;
	for (int i = 0; i < in.operand_count; i++)
		if (ops[i].type == ZYDIS_OPERAND_TYPE_REGISTER && (ops[i].actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) &&
		    widen(ops[i].reg.value) == reg)
			return 1;
	return 0;
}

int hp_isa_rsp_delta(const uint8_t *code, size_t len, int64_t *delta)
{
	ZydisDecodedInstruction in;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];

	*delta = 0;
	if (decode_full(code, len, &in, ops) < 0)
		return -1;
	switch (in.mnemonic) {
	case ZYDIS_MNEMONIC_PUSH:
	case ZYDIS_MNEMONIC_PUSHFQ:
		*delta = -(int64_t)(in.operand_width / 8);
		return 0;
	case ZYDIS_MNEMONIC_POP:
	case ZYDIS_MNEMONIC_POPFQ:
		*delta = (int64_t)(in.operand_width / 8);
		return 0;
	case ZYDIS_MNEMONIC_LEA:
		if (ops[0].reg.value == ZYDIS_REGISTER_RSP && ops[1].mem.base == ZYDIS_REGISTER_RSP &&
		    ops[1].mem.index == ZYDIS_REGISTER_NONE) {
			*delta = ops[1].mem.disp.has_displacement ? ops[1].mem.disp.value : 0;
			return 0;
		}
		break;
	default:
		break;
	}
	for (int i = 0; i < in.operand_count; i++)
		if (ops[i].type == ZYDIS_OPERAND_TYPE_REGISTER && (ops[i].actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) &&
		    widen(ops[i].reg.value) == ZYDIS_REGISTER_RSP)
			return -1;
	return 0;
}

/* Absolute target of a relative immediate (branch or call), or 0. */
static uint64_t rel_target(const ZydisDecodedInstruction *in, const ZydisDecodedOperand *ops, uint64_t addr)
{
	for (int i = 0; i < in->operand_count_visible; i++)
		if (ops[i].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && ops[i].imm.is_relative)
			return addr + in->length + (uint64_t)ops[i].imm.value.s;
	return 0;
}

static bool same_operand(const ZydisDecodedInstruction *ia, const ZydisDecodedOperand *a, uint64_t aaddr,
			 const ZydisDecodedInstruction *ib, const ZydisDecodedOperand *b, uint64_t baddr)
{
	if (a->type != b->type || a->size != b->size || a->visibility != b->visibility)
		return false;
	switch (a->type) {
	case ZYDIS_OPERAND_TYPE_REGISTER:
		return a->reg.value == b->reg.value;
	case ZYDIS_OPERAND_TYPE_MEMORY: {
		if (a->mem.type != b->mem.type || a->mem.segment != b->mem.segment || a->mem.base != b->mem.base ||
		    a->mem.index != b->mem.index || a->mem.scale != b->mem.scale)
			return false;
		if (a->mem.base == ZYDIS_REGISTER_RIP) {
			ZyanU64 x, y;
			return ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(ia, a, aaddr, &x)) &&
			       ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(ib, b, baddr, &y)) && x == y;
		}
		return a->mem.disp.value == b->mem.disp.value;
	}
	case ZYDIS_OPERAND_TYPE_IMMEDIATE:
		if (a->imm.is_relative != b->imm.is_relative)
			return false;
		return a->imm.is_relative || a->imm.value.u == b->imm.value.u;
	case ZYDIS_OPERAND_TYPE_POINTER:
		return a->ptr.segment == b->ptr.segment && a->ptr.offset == b->ptr.offset;
	default:
		return true;
	}
}

/* Prefix attributes that change what an instruction does. */
#define MEANINGFUL_ATTRIBS                                                                               \
	(ZYDIS_ATTRIB_HAS_LOCK | ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE | \
	 ZYDIS_ATTRIB_HAS_NOTRACK | ZYDIS_ATTRIB_HAS_XACQUIRE | ZYDIS_ATTRIB_HAS_XRELEASE)

bool hp_isa_same_operation(const uint8_t *a, size_t alen, uint64_t aaddr, const uint8_t *b, size_t blen, uint64_t baddr,
			   uint64_t *a_target, uint64_t *b_target)
{
	ZydisDecodedInstruction ia, ib;
	ZydisDecodedOperand oa[ZYDIS_MAX_OPERAND_COUNT], ob[ZYDIS_MAX_OPERAND_COUNT];

	*a_target = *b_target = 0;
	if (decode_full(a, alen, &ia, oa) < 0 || decode_full(b, blen, &ib, ob) < 0)
		return false;
	*a_target = rel_target(&ia, oa, aaddr);
	*b_target = rel_target(&ib, ob, baddr);
	if (ia.mnemonic != ib.mnemonic || ia.operand_count != ib.operand_count ||
	    ia.operand_width != ib.operand_width || ia.address_width != ib.address_width ||
	    (ia.attributes & MEANINGFUL_ATTRIBS) != (ib.attributes & MEANINGFUL_ATTRIBS))
		return false;
	for (int i = 0; i < ia.operand_count; i++)
		if (!same_operand(&ia, &oa[i], aaddr, &ib, &ob[i], baddr))
			return false;
	return true;
}
