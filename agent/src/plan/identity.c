// SPDX-License-Identifier: Apache-2.0
/*
 * What a plan is, as the installer checks it: the code hash (SHA-256 over
 * the emitted code, its unwind data, where it is laid out and every
 * relocation, in one canonical form) that an approval names and an
 * installer recomputes, so an altered plan is refused; and a digest of each
 * member's original bytes, so a plan is refused when the code it was made
 * from has changed since.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hex.h"
#include "plan/plan.h"

static void put64(EVP_MD_CTX *c, uint64_t v)
{
	uint8_t b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	EVP_DigestUpdate(c, b, 8);
}

int hp_code_hash(const struct hp_code_image *ci, char out[65])
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned n = 0;
	static const char tag[] = "hotpath-code/1";

	out[0] = 0;
	if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(c);
		return -ENOMEM;
	}
	EVP_DigestUpdate(c, tag, sizeof(tag));
	put64(c, ci->base);
	put64(c, ci->code_len);
	EVP_DigestUpdate(c, ci->code, ci->code_len);
	put64(c, ci->unwind_off);
	put64(c, ci->unwind_len);
	if (ci->unwind_len)
		EVP_DigestUpdate(c, ci->unwind, ci->unwind_len);
	put64(c, ci->nrelocs);
	for (size_t i = 0; i < ci->nrelocs; i++) {
		/* An absolute relocation's kind above its offset (rel32's is 0:
		 * hashes of plans without one are as they were). */
		put64(c, ci->relocs[i].offset | (uint64_t)ci->relocs[i].kind << 32);
		put64(c, ci->relocs[i].target);
	}
	int ok = EVP_DigestFinal_ex(c, md, &n);
	EVP_MD_CTX_free(c);
	if (ok != 1)
		return -EIO;
	hp_hex(md, n, out);
	return 0;
}

int hp_bytes_digest(const uint8_t *bytes, size_t len, char out[65])
{
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned n = 0;

	if (EVP_Digest(bytes, len, md, &n, EVP_sha256(), NULL) != 1) {
		out[0] = 0;
		return -EIO;
	}
	hp_hex(md, n, out);
	return 0;
}

int hp_plan_member_digest(struct hp_model *m, const struct hp_function *f, char out[65])
{
	uint8_t *b = malloc(f->size ? f->size : 1);
	int r;

	if (!b)
		return -ENOMEM;
	r = m->read ? m->read(m, f->addr, b, f->size) : -ENOSYS;
	if (r == 0)
		r = hp_bytes_digest(b, f->size, out);
	free(b);
	return r;
}

void hp_plan_code_image(const struct hp_plan *p, struct hp_code_image *ci)
{
	*ci = (struct hp_code_image){ .base = p->base,
				      .code = p->code,
				      .code_len = p->code_len,
				      .unwind = p->unwind,
				      .unwind_len = p->unwind ? p->unwind_len : 0,
				      .unwind_off = p->unwind ? p->unwind_off : 0,
				      .relocs = p->relocs,
				      .nrelocs = p->nrelocs };
}
