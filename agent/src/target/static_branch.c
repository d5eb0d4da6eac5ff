// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel's jump table and static call site table, and the canonical form
 * of their sites (see static_branch.h): entries decoded from their relative
 * fields, and each site's bytes replaced by one form before the CFG sees them.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "isa/isa.h"
#include "target/static_branch.h"

static int32_t le32(const uint8_t *p)
{
	return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static int cmp_site(const void *a, const void *b)
{
	const struct hp_static_branch *x = a, *y = b;

	return x->code < y->code ? -1 : x->code > y->code;
}

long hp_jump_table_parse(const uint8_t *tab, size_t len, uint64_t table_addr, uint64_t lo, uint64_t hi,
			 struct hp_static_branch **out)
{
	size_t n = len / HP_JUMP_ENTRY_SIZE, k = 0;
	struct hp_static_branch *v;

	*out = NULL;
	if (len % HP_JUMP_ENTRY_SIZE)
		return -EINVAL;
	if (!(v = malloc((n ? n : 1) * sizeof(*v))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint64_t at = table_addr + i * HP_JUMP_ENTRY_SIZE;
		uint64_t code = at + (int64_t)le32(tab + i * HP_JUMP_ENTRY_SIZE);
		uint64_t target = at + 4 + (int64_t)le32(tab + i * HP_JUMP_ENTRY_SIZE + 4);
		uint64_t key = 0;
		for (int b = 7; b >= 0; b--)
			key = key << 8 | tab[i * HP_JUMP_ENTRY_SIZE + 8 + b];
		uint8_t branch = (uint8_t)(key & 1);
		key = (at + 8 + key) & ~(uint64_t)3;

		/* Sites in freed init text or outside the text asked for are skipped. */
		if (code < lo || code >= hi)
			continue;
		v[k++] = (struct hp_static_branch){ code, target, key, branch };
	}
	qsort(v, k, sizeof(*v), cmp_site);
	/* One entry per site: two keys never share a site, but a damaged table
	 * must not make one site count twice. */
	size_t u = 0;
	for (size_t i = 0; i < k; i++)
		if (!u || v[u - 1].code != v[i].code)
			v[u++] = v[i];
	*out = v;
	return (long)u;
}

size_t hp_jump_table_own_prefix(const uint8_t *tab, size_t len, uint64_t table_addr, uint64_t lo, uint64_t hi)
{
	size_t i = 0;

	for (; i + HP_JUMP_ENTRY_SIZE <= len; i += HP_JUMP_ENTRY_SIZE) {
		uint64_t at = table_addr + i;
		uint64_t code = at + (int64_t)le32(tab + i), target = at + 4 + (int64_t)le32(tab + i + 4);
		if (code < lo || code >= hi || target < lo || target >= hi)
			break;
	}
	return i;
}

static unsigned settled_site_length(const uint8_t *p, size_t room, const struct hp_static_branch *s)
{
	struct hp_isa_insn in;
	struct hp_isa_detail d;

	if (hp_isa_decode(p, room, s->code, &in) < 0 || (in.len != 2 && in.len != 5))
		return 0;
	if (in.cls == HP_IC_JMP && in.has_target)
		return in.target == s->target ? in.len : 0;
	if (hp_isa_decode_detail(p, room, s->code, &d) == 0 && d.mnem == HP_MN_NOP)
		return in.len;
	return 0;
}

/* Is the instruction at p (of room bytes) the site's NOP or its JMP? Returns
 * its length (2 or 5), else 0. A site the kernel is patching when the text is
 * read (a key flipping: text_poke_bp writes an int3 over the first byte, then
 * the new tail, then the new first byte) starts with 0xcc and holds the old
 * or the new tail: it is the form whose first byte makes a whole site of it
 * (a JMP to the site's target, or a NOP), so that a parse during a flip
 * gives the same catalog as any other. */
static unsigned site_length(const uint8_t *p, size_t room, const struct hp_static_branch *s)
{
	static const uint8_t firsts[] = { 0xe9, 0xeb, 0x0f, 0x66 }; /* jmp rel32, jmp rel8, nop5, nop2 */
	uint8_t tmp[5];

	if (p[0] != 0xcc || room < 2)
		return settled_site_length(p, room, s);
	size_t n = room < sizeof(tmp) ? room : sizeof(tmp);
	memcpy(tmp, p, n);
	for (size_t i = 0; i < sizeof(firsts); i++) {
		tmp[0] = firsts[i];
		unsigned l = settled_site_length(tmp, n, s);
		if (l)
			return l;
	}
	return 0;
}

size_t hp_static_branch_canonicalize(uint8_t *buf, uint64_t lo, size_t len, const struct hp_static_branch *v, size_t n,
				     uint64_t *sites, struct hp_static_branch_stats *st)
{
	uint64_t prev_end = 0;
	size_t ns = 0;

	memset(st, 0, sizeof(*st));
	for (size_t i = 0; i < n; i++) {
		const struct hp_static_branch *s = &v[i];
		if (s->code < lo || s->code - lo >= len)
			continue;
		uint8_t *p = buf + (s->code - lo);
		size_t room = len - (s->code - lo);
		unsigned l = site_length(p, room, s);
		int64_t rel = (int64_t)(s->target - (s->code + l));

		/* Sites never overlap in a real table; if they did, the second
		 * would read bytes the first rewrote. */
		if (!l || s->code < prev_end || (l == 2 && (rel < -128 || rel > 127)) ||
		    (l == 5 && (rel < INT32_MIN || rel > INT32_MAX))) {
			st->foreign++;
			continue;
		}
		if (p[0] == 0xcc)
			st->mid_patch++;
		else if (p[0] != 0xe9 && p[0] != 0xeb)
			st->were_nop++;
		if (l == 5) {
			uint32_t r = (uint32_t)(int32_t)rel;
			p[0] = 0xe9;
			p[1] = (uint8_t)r;
			p[2] = (uint8_t)(r >> 8);
			p[3] = (uint8_t)(r >> 16);
			p[4] = (uint8_t)(r >> 24);
		} else {
			p[0] = 0xeb;
			p[1] = (uint8_t)(int8_t)rel;
		}
		sites[ns++] = s->code;
		prev_end = s->code + l;
		st->rewritten++;
	}
	return ns;
}

static int cmp_call(const void *a, const void *b)
{
	const struct hp_static_call *x = a, *y = b;

	return x->code < y->code ? -1 : x->code > y->code;
}

long hp_static_call_parse(const uint8_t *tab, size_t len, uint64_t table_addr, uint64_t lo, uint64_t hi,
			  struct hp_static_call **out)
{
	size_t n = len / HP_STATIC_CALL_SITE_SIZE, k = 0, u = 0;
	struct hp_static_call *v;

	*out = NULL;
	if (len % HP_STATIC_CALL_SITE_SIZE)
		return -EINVAL;
	if (!(v = malloc((n ? n : 1) * sizeof(*v))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint64_t at = table_addr + i * HP_STATIC_CALL_SITE_SIZE;
		uint64_t code = at + (int64_t)le32(tab + i * HP_STATIC_CALL_SITE_SIZE);
		int32_t key = le32(tab + i * HP_STATIC_CALL_SITE_SIZE + 4);

		if (code < lo || code >= hi)
			continue;
		v[k++] = (struct hp_static_call){ .code = code,
						  .tail = (uint8_t)(key & 1),
						  .key = (at + 4 + (uint64_t)(int64_t)key) & ~(uint64_t)3 };
	}
	qsort(v, k, sizeof(*v), cmp_call);
	for (size_t i = 0; i < k; i++)
		if (!u || v[u - 1].code != v[i].code)
			v[u++] = v[i];
	*out = v;
	return (long)u;
}

size_t hp_static_call_own_prefix(const uint8_t *tab, size_t len, uint64_t table_addr, uint64_t lo, uint64_t hi)
{
	size_t i = 0;

	for (; i + HP_STATIC_CALL_SITE_SIZE <= len; i += HP_STATIC_CALL_SITE_SIZE) {
		uint64_t at = table_addr + i;
		uint64_t code = at + (int64_t)le32(tab + i);
		uint64_t key = (at + 4 + (uint64_t)(int64_t)le32(tab + i + 4)) & ~(uint64_t)3;
		if (code < lo || code >= hi || (key >= lo && key < hi))
			break;
	}
	return i;
}

/* One of the 5-byte forms the kernel writes at a static call site or at the
 * start of a trampoline. */
static bool static_call_form(const uint8_t *p, uint64_t addr)
{
	static const uint8_t xor_eax[5] = { 0x2e, 0x2e, 0x2e, 0x31, 0xc0 }, ret[5] = { 0xc3, 0xcc, 0xcc, 0xcc, 0xcc };
	struct hp_isa_insn in;
	struct hp_isa_detail d;

	/* 0xcc: the kernel is patching the site (text_poke_bp's int3 over its
	 * first byte) as the text is read; its form is the canonical one anyway. */
	if (p[0] == 0xe8 || p[0] == 0xe9 || p[0] == 0xcc || !memcmp(p, xor_eax, 5) || !memcmp(p, ret, 5))
		return true;
	return hp_isa_decode(p, 5, addr, &in) == 0 && in.len == 5 && hp_isa_decode_detail(p, 5, addr, &d) == 0 &&
	       d.mnem == HP_MN_NOP;
}

size_t hp_static_call_canonicalize(uint8_t *buf, uint64_t lo, size_t len, const struct hp_static_call *v, size_t n,
				   uint64_t *sites, struct hp_static_branch_stats *st)
{
	uint64_t prev_end = 0;
	size_t ns = 0;

	memset(st, 0, sizeof(*st));
	for (size_t i = 0; i < n; i++) {
		const struct hp_static_call *s = &v[i];
		if (s->code < lo || s->code - lo >= len || len - (s->code - lo) < 5)
			continue;
		uint8_t *p = buf + (s->code - lo);
		if (s->code < prev_end || !static_call_form(p, s->code)) {
			st->foreign++;
			continue;
		}
		if (p[0] == 0xcc)
			st->mid_patch++;
		else if (p[0] != 0xe8 && p[0] != 0xe9)
			st->were_nop++;
		p[0] = s->tail ? 0xe9 : 0xe8;
		memset(p + 1, 0, 4);
		sites[ns++] = s->code;
		prev_end = s->code + 5;
		st->rewritten++;
	}
	return ns;
}

size_t hp_sites_from(const void *entries, size_t n, size_t stride, uint64_t addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t code;
		memcpy(&code, (const uint8_t *)entries + mid * stride, sizeof(code));
		if (code < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}
