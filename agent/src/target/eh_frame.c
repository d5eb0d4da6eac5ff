// SPDX-License-Identifier: Apache-2.0
/*
 * The .eh_frame walk (see eh_frame.h): CIEs are parsed for their
 * augmentation ("zPLR": personality, LSDA and FDE pointer encodings), FDEs
 * for their start, range and LSDA pointer. Pointers are absolute or
 * pc-relative, the only encodings .eh_frame uses on x86-64.
 */
#include <string.h>

#include "target/eh_frame.h"

/* A bounds-checked reader over .eh_frame bytes. */
struct ehr {
	const uint8_t *p, *end;
	uint64_t base; /* address of the section, for pc-relative pointers */
	const uint8_t *start;
	bool bad;
};

static uint64_t eh_uleb(struct ehr *r)
{
	uint64_t v = 0;
	int shift = 0;

	while (r->p < r->end) {
		uint8_t b = *r->p++;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80))
			return v;
	}
	r->bad = true;
	return 0;
}

static int64_t eh_sleb(struct ehr *r)
{
	uint64_t v = 0; /* unsigned: shifting into the sign bit is defined */
	int shift = 0;
	uint8_t b = 0;

	while (r->p < r->end) {
		b = *r->p++;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80)) {
			if (shift < 64 && (b & 0x40))
				v |= ~(uint64_t)0 << shift;
			return (int64_t)v;
		}
	}
	r->bad = true;
	return 0;
}

static uint64_t eh_fixed(struct ehr *r, int n)
{
	uint64_t v = 0;

	if (r->end - r->p < n) {
		r->bad = true;
		return 0;
	}
	for (int i = 0; i < n; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += n;
	return v;
}

/* Decode a pointer in DW_EH_PE encoding enc (pc-relative or absolute). */
static uint64_t eh_ptr(struct ehr *r, uint8_t enc, bool apply)
{
	uint64_t at = r->base + (r->p - r->start), v;

	if (enc == 0xff)
		return 0;
	switch (enc & 0x0f) {
	case 0x00:
		v = eh_fixed(r, 8);
		break;
	case 0x01:
		v = eh_uleb(r);
		break;
	case 0x02:
		v = eh_fixed(r, 2);
		break;
	case 0x03:
		v = eh_fixed(r, 4);
		break;
	case 0x04:
		v = eh_fixed(r, 8);
		break;
	case 0x09:
		v = (uint64_t)eh_sleb(r);
		break;
	case 0x0a:
		v = (uint64_t)(int64_t)(int16_t)eh_fixed(r, 2);
		break;
	case 0x0b:
		v = (uint64_t)(int64_t)(int32_t)eh_fixed(r, 4);
		break;
	case 0x0c:
		v = eh_fixed(r, 8);
		break;
	default:
		r->bad = true;
		return 0;
	}
	if (apply && (enc & 0x70) == 0x10)
		v += at;
	else if (apply && (enc & 0x70) != 0)
		r->bad = true; /* datarel/textrel/funcrel do not occur in .eh_frame */
	return v;
}

struct cie {
	uint8_t fde_enc, lsda_enc;
	bool lsda, personality;
};

/* The augmentation of the CIE at p: pointer encodings and what it names. */
static bool parse_cie(const struct ehr *sec, const uint8_t *p, struct cie *c)
{
	struct ehr r = *sec;
	uint64_t len;
	const char *aug;

	memset(c, 0, sizeof(*c));
	r.p = p;
	len = eh_fixed(&r, 4);
	if (r.bad || len == 0 || len == 0xffffffff || len > (uint64_t)(r.end - r.p))
		return false;
	r.end = r.p + len;
	if (eh_fixed(&r, 4) != 0) /* CIE id */
		return false;
	uint8_t version = eh_fixed(&r, 1);
	aug = (const char *)r.p;
	while (r.p < r.end && *r.p)
		r.p++;
	if (r.p >= r.end)
		return false;
	r.p++;
	if (strstr(aug, "eh"))
		return false;
	eh_uleb(&r);
	eh_sleb(&r);
	if (version == 1)
		eh_fixed(&r, 1);
	else
		eh_uleb(&r);
	if (aug[0] != 'z')
		return !r.bad;
	eh_uleb(&r);
	for (const char *a = aug + 1; *a && !r.bad; a++) {
		if (*a == 'R') {
			c->fde_enc = eh_fixed(&r, 1);
		} else if (*a == 'P') {
			uint8_t penc = eh_fixed(&r, 1);
			eh_ptr(&r, penc & 0x7f, false);
			c->personality = true;
		} else if (*a == 'L') {
			c->lsda_enc = eh_fixed(&r, 1);
			c->lsda = true;
		} else if (*a != 'S' && *a != 'B') {
			return false;
		}
	}
	return !r.bad;
}

int hp_eh_frame_walk(Elf *elf, int (*fn)(void *ctx, const struct hp_eh_fde *fde), void *ctx)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (elf_getshdrstrndx(elf, &shstrndx) < 0)
		return 0;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;
		const char *nm;

		if (!gelf_getshdr(scn, &sh) || !(nm = elf_strptr(elf, shstrndx, sh.sh_name)) ||
		    strcmp(nm, ".eh_frame") || !(d = elf_getdata(scn, NULL)) || !d->d_buf)
			continue;
		struct ehr sec = { d->d_buf, (const uint8_t *)d->d_buf + d->d_size, sh.sh_addr, d->d_buf, false };
		struct ehr r = sec;

		while (r.p + 8 <= r.end) {
			uint64_t len = eh_fixed(&r, 4);

			if (len == 0 || len == 0xffffffff || len > (uint64_t)(r.end - r.p))
				break; /* terminator, 64-bit lengths (not produced for x86-64), or corrupt */
			const uint8_t *next = r.p + len;
			const uint8_t *idp = r.p;
			uint32_t id = eh_fixed(&r, 4);
			struct cie c;

			if (id != 0 && id <= (uint64_t)(idp - sec.start) && parse_cie(&sec, idp - id, &c)) {
				struct ehr f = sec;
				f.p = r.p;
				f.end = next;
				struct hp_eh_fde fde = { 0 };
				fde.start = eh_ptr(&f, c.fde_enc, true);
				fde.range = eh_ptr(&f, c.fde_enc & 0x0f, false);
				fde.personality = c.personality;
				if (c.lsda) {
					uint64_t alen = eh_uleb(&f);
					const uint8_t *adata = f.p;
					if (alen && c.lsda_enc != 0xff)
						fde.lsda = eh_ptr(&f, c.lsda_enc & 0x7f, true);
					f.p = adata + alen <= f.end ? adata + alen : f.end;
				}
				if (!f.bad) {
					int rr = fn(ctx, &fde);
					if (rr < 0)
						return rr;
				}
			}
			r.p = next;
		}
	}
	return 0;
}
