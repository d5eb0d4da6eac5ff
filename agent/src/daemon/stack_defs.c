/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stack ids (SHA-256 of the canonical frame encoding, OpenSSL) and the table
 * of definitions sent and acknowledged on the current stream (see
 * stack_defs.h). The table is open addressing on the id; when it fills up it
 * is cleared, which only means some definitions are sent once more.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/stack_defs.h"

#define SLOTS (1u << 17)
#define LIMIT (SLOTS / 4 * 3)

static size_t put_le(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return (size_t)bytes;
}

uint64_t hp_stack_id(const struct hp_model *m, const struct hp_stack_set *set, const struct hp_stack *st)
{
	/* Encode the frames, then hash them in one call. */
	size_t need = 0;
	for (uint32_t i = 0; i < st->nframes; i++) {
		const struct hp_frame *f = &set->frames[st->first + i];
		need += 17 + (f->kind == HP_FRAME_KERNEL ? 64 :
			      f->kind == HP_FRAME_USER   ? strlen(set->paths[f->mod]) :
							   0);
	}
	uint8_t stackbuf[4096];
	uint8_t *buf = need <= sizeof(stackbuf) ? stackbuf : malloc(need);
	if (!buf)
		return 0;
	size_t n = 0;
	for (uint32_t i = 0; i < st->nframes; i++) {
		const struct hp_frame *f = &set->frames[st->first + i];
		const char *key = "";
		if (f->kind == HP_FRAME_KERNEL)
			key = m->mods[f->mod].digest;
		else if (f->kind == HP_FRAME_USER)
			key = set->paths[f->mod];
		size_t klen = strlen(key);
		buf[n++] = f->kind;
		n += put_le(buf + n, klen, 4);
		memcpy(buf + n, key, klen);
		n += klen;
		n += put_le(buf + n, f->kind == HP_FRAME_KERNEL ? f->fn : 0, 4);
		n += put_le(buf + n, f->offset, 8);
	}
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	int ok = EVP_Digest(buf, n, md, &mdlen, EVP_sha256(), NULL);
	if (buf != stackbuf)
		free(buf);
	if (ok != 1 || mdlen < 8)
		return 0;
	uint64_t id = 0;
	for (int i = 7; i >= 0; i--)
		id = (id << 8) | md[i];
	return id;
}

int hp_stack_defs_init(struct hp_stack_defs *d)
{
	memset(d, 0, sizeof(*d));
	d->slots = calloc(SLOTS, sizeof(*d->slots));
	if (!d->slots)
		return -ENOMEM;
	d->nslots = SLOTS;
	return 0;
}

void hp_stack_defs_free(struct hp_stack_defs *d)
{
	free(d->slots);
	memset(d, 0, sizeof(*d));
}

void hp_stack_defs_reset(struct hp_stack_defs *d)
{
	if (d->slots && d->nused)
		memset(d->slots, 0, d->nslots * sizeof(*d->slots));
	d->nused = d->pending = 0;
}

static struct hp_stack_def_slot *find(const struct hp_stack_defs *d, uint64_t id)
{
	if (!d->slots || id == 0)
		return NULL;
	size_t i = (size_t)((id ^ (id >> 29)) & (d->nslots - 1));
	for (;;) {
		struct hp_stack_def_slot *s = &d->slots[i];
		if (s->id == id || s->id == 0)
			return s;
		i = (i + 1) & (d->nslots - 1);
	}
}

bool hp_stack_defs_needed(const struct hp_stack_defs *d, uint64_t id, int64_t now_ms)
{
	const struct hp_stack_def_slot *s = find(d, id);
	return !s || s->id != id || !s->acked_ms || now_ms - s->acked_ms > HP_STACK_DEF_TTL_MS;
}

void hp_stack_defs_sent(struct hp_stack_defs *d, uint64_t id, uint64_t seq)
{
	if (d->nused >= LIMIT)
		hp_stack_defs_reset(d);
	struct hp_stack_def_slot *s = find(d, id);
	if (!s)
		return;
	if (s->id == 0) {
		s->id = id;
		d->nused++;
	}
	if (!s->sent_seq)
		d->pending++;
	s->sent_seq = seq;
	s->acked_ms = 0;
}

void hp_stack_defs_ack(struct hp_stack_defs *d, uint64_t seq, int64_t now_ms)
{
	if (!d->pending)
		return;
	for (size_t i = 0; i < d->nslots; i++) {
		struct hp_stack_def_slot *s = &d->slots[i];
		if (s->id && s->sent_seq && s->sent_seq <= seq) {
			s->sent_seq = 0;
			s->acked_ms = now_ms;
			d->pending--;
		}
	}
}
