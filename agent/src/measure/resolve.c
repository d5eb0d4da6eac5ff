// SPDX-License-Identifier: Apache-2.0
/*
 * Resource resolution (see resolve.h). Duplicates are found with a hash of
 * (module, function, block) so a request of thousands of words stays linear.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "isa/isa.h"
#include "measure/resolve.h"
#include "measure/spec.h"

struct rows {
	struct hp_row *v;
	size_t n, cap, max;
	uint64_t *seen; /* open addressing: key+1 per occupied slot */
	uint32_t *seen_row;
	size_t seen_cap;
};

static uint64_t row_key(uint32_t kind, uint32_t mod, uint32_t fn, uint32_t block)
{
	return ((uint64_t)mod << 48) ^ ((uint64_t)fn << 24) ^ ((uint64_t)kind << 63) ^ block;
}

static uint64_t mix(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return k;
}

/* Row index of key, or HP_ROW_NONE; *slot_out gets where to insert. */
static uint32_t seen_find(const struct rows *r, uint64_t key, size_t *slot_out)
{
	size_t i = mix(key) & (r->seen_cap - 1);
	while (r->seen[i]) {
		if (r->seen[i] == key + 1)
			return r->seen_row[i];
		i = (i + 1) & (r->seen_cap - 1);
	}
	*slot_out = i;
	return HP_ROW_NONE;
}

static int seen_grow(struct rows *r)
{
	size_t cap = r->seen_cap ? r->seen_cap * 2 : 1024;
	uint64_t *k = calloc(cap, sizeof(*k));
	uint32_t *v = calloc(cap, sizeof(*v));
	if (!k || !v) {
		free(k);
		free(v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->seen_cap; i++) {
		if (!r->seen[i])
			continue;
		size_t j = mix(r->seen[i] - 1) & (cap - 1);
		while (k[j])
			j = (j + 1) & (cap - 1);
		k[j] = r->seen[i];
		v[j] = r->seen_row[i];
	}
	free(r->seen);
	free(r->seen_row);
	r->seen = k;
	r->seen_row = v;
	r->seen_cap = cap;
	return 0;
}

/* Add a row unless it exists; returns its index, HP_ROW_NONE when over the limit, or -ENOMEM as (uint32_t)-2. */
static int add_row(struct rows *r, struct hp_row row, uint32_t *index)
{
	if ((r->n + 1) * 2 > r->seen_cap && seen_grow(r) < 0)
		return -ENOMEM;
	size_t slot = 0;
	uint64_t key = row_key(row.kind, row.mod, row.fn, row.block);
	uint32_t have = seen_find(r, key, &slot);
	if (have != HP_ROW_NONE) {
		*index = have;
		return 0;
	}
	if (r->n >= r->max)
		return -E2BIG;
	if (HP_GROW(r->v, r->cap, r->n + 1))
		return -ENOMEM;
	r->seen[slot] = key + 1;
	r->seen_row[slot] = (uint32_t)r->n;
	*index = (uint32_t)r->n;
	r->v[r->n++] = row;
	return 0;
}

static uint32_t block_of(const struct hp_module *mod, const struct hp_function *f, uint64_t off, bool *at_start)
{
	const struct hp_block *b = hp_function_block_at(mod, f, f->addr + off);
	if (!b)
		return HP_ROW_NONE;
	*at_start = b->offset == off;
	return (uint32_t)(b - &mod->blocks[f->block_start]);
}

/* Whether block b starts with a trap instruction. */
static bool starts_with_trap(const struct hp_model *m, const struct hp_function *f, const struct hp_block *bl)
{
	uint8_t code[16];
	unsigned traits = 0;
	size_t len = bl->size < sizeof(code) ? bl->size : sizeof(code);
	if (!m->read || m->read((struct hp_model *)m, f->addr + bl->offset, code, len) < 0 ||
	    hp_isa_traits(code, len, &traits) < 0)
		return false;
	return traits & HP_ISA_TRAP;
}

/* reached[b]: some block of f jumps or falls into block b (the entry counts as reached). */
static bool *reached_blocks(const struct hp_module *mod, const struct hp_function *f)
{
	bool *reached = calloc(f->nblocks ? f->nblocks : 1, sizeof(bool));
	if (!reached)
		return NULL;
	if (f->nblocks)
		reached[0] = true;
	for (uint32_t x = 0; x < f->nblocks; x++) {
		const struct hp_block *o = &mod->blocks[f->block_start + x];
		for (uint32_t k = 0; k < o->nsucc; k++) {
			const struct hp_succ *s = &mod->succs[o->succ_start + k];
			if (s->kind != HP_SUCC_FALLTHROUGH && s->kind != HP_SUCC_TAKEN)
				continue;
			const struct hp_block *t = hp_function_block_at(mod, f, f->addr + s->target);
			if (t)
				reached[t - &mod->blocks[f->block_start]] = true;
		}
	}
	return reached;
}

bool hp_block_unreachable_trap(const struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
			       uint32_t b)
{
	bool *reached = reached_blocks(mod, f);
	bool r = reached && b < f->nblocks && !reached[b] && starts_with_trap(m, f, &mod->blocks[f->block_start + b]);
	free(reached);
	return r;
}

/* Blocks a probe may go to: decoded code, not bytes after an undecodable spot. */
static bool probeable_block(const struct hp_function *f, const struct hp_block *b)
{
	return !(f->flags & HP_FN_UNREADABLE) && !((f->flags & HP_FN_UNDECODABLE) && b->offset >= f->bad_offset);
}

int hp_resolve(const struct hp_model *m, const struct hp_resource_spec *res, const char *const *labels, size_t n,
	       bool all_blocks, const bool *word_blocks, size_t max_rows, struct hp_row **rows_out, size_t *nrows,
	       int *why, char *err, size_t errlen)
{
	struct rows r = { .max = max_rows };
	int ret = 0;
	*why = 0;
	*rows_out = NULL;
	*nrows = 0;
	for (size_t w = 0; w < n; w++) {
		const struct hp_resource_spec *rs = &res[w];
		const struct hp_module *mod = NULL;
		const struct hp_function *f = NULL;
		uint64_t off = 0;
		bool by_offset = rs->has_offset;
		if (rs->is_address) {
			f = hp_model_lookup(m, rs->address, &mod);
			if (!f) {
				*why = HP_RESOLVE_NOT_FOUND;
				snprintf(err, errlen, "no function at address 0x%" PRIx64, rs->address);
				ret = -EINVAL;
				goto out;
			}
			if (rs->has_offset) {
				/* 0xADDR+OFF: OFF from the start of the function holding ADDR. */
				off = rs->offset;
				by_offset = true;
			} else {
				off = rs->address - f->addr;
				by_offset = off != 0;
			}
		} else {
			struct hp_find_hit hits[4];
			size_t nh = hp_model_find_all(m, rs->name, hits, 4);
			if (nh != 1) {
				*why = HP_RESOLVE_NOT_FOUND;
				if (!nh) {
					snprintf(err, errlen, "no function '%s'", rs->name);
				} else {
					int k = snprintf(
						err, errlen,
						"'%s' names %zu functions; say which with module:name or an address:",
						rs->name, nh);
					for (size_t i = 0; i < nh && i < 4 && k > 0 && (size_t)k < errlen; i++)
						k += snprintf(err + k, errlen - (size_t)k, " %s:%s at 0x%" PRIx64,
							      hits[i].mod->name, hits[i].fn->name, hits[i].fn->addr);
				}
				ret = -EINVAL;
				goto out;
			}
			mod = hits[0].mod;
			f = hits[0].fn;
			off = rs->offset;
		}
		uint32_t mi = (uint32_t)(mod - m->mods), fi = (uint32_t)(f - mod->funcs), idx;
		bool blocks = all_blocks || (word_blocks && word_blocks[w]);
		if (by_offset) {
			bool at_start = false;
			uint32_t b = off < f->size ? block_of(mod, f, off, &at_start) : HP_ROW_NONE;
			if (b == HP_ROW_NONE) {
				*why = HP_RESOLVE_NOT_FOUND;
				snprintf(err, errlen, "%s: offset 0x%" PRIx64 " is outside %s (size 0x%x)", labels[w],
					 off, f->name, f->size);
				ret = -EINVAL;
				goto out;
			}
			const struct hp_block *bl = &mod->blocks[f->block_start + b];
			if (!at_start || !probeable_block(f, bl)) {
				*why = HP_RESOLVE_NOT_A_BLOCK;
				if (!at_start)
					snprintf(err, errlen,
						 "%s is not the start of a basic block: it is inside the block %s+0x%x "
						 "(0x%" PRIx64 ", %u bytes); blocks are measured at their start",
						 labels[w], f->name, bl->offset, f->addr + bl->offset, bl->size);
				else
					snprintf(
						err, errlen,
						"%s+0x%x is not decoded code (%s does not decode from +0x%x): it cannot be probed",
						f->name, bl->offset, f->name, f->bad_offset);
				ret = -EINVAL;
				goto out;
			}
			ret = add_row(&r, (struct hp_row){ HP_ROW_BLOCK, mi, fi, b, (uint32_t)w, HP_ROW_NONE, false },
				      &idx);
			if (!ret)
				r.v[idx].implicit = false; /* named, even if --blocks added it before */
		} else {
			uint32_t frow;
			ret = add_row(&r, (struct hp_row){ HP_ROW_FUNCTION, mi, fi, 0, (uint32_t)w, HP_ROW_NONE },
				      &frow);
			bool *reached = blocks ? reached_blocks(mod, f) : NULL;
			if (blocks && !reached)
				ret = -ENOMEM;
			for (uint32_t b = 0; !ret && blocks && b < f->nblocks; b++) {
				const struct hp_block *bl = &mod->blocks[f->block_start + b];
				if (!probeable_block(f, bl) || (!reached[b] && starts_with_trap(m, f, bl)))
					continue;
				ret = add_row(&r, (struct hp_row){ HP_ROW_BLOCK, mi, fi, b, (uint32_t)w, frow, true },
					      &idx);
				if (!ret)
					r.v[idx].func_row = frow;
			}
			free(reached);
		}
		if (ret == -E2BIG) {
			*why = HP_RESOLVE_TOO_MANY;
			snprintf(
				err, errlen,
				"the request needs more than %zu rows (functions and blocks); measure fewer resources at once",
				max_rows);
			ret = -EINVAL;
			goto out;
		}
		if (ret < 0) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
	}
	/* A block row whose function is also a row belongs to it. */
	for (size_t i = 0; i < r.n; i++) {
		if (r.v[i].kind != HP_ROW_BLOCK || r.v[i].func_row != HP_ROW_NONE)
			continue;
		size_t slot;
		r.v[i].func_row = seen_find(&r, row_key(HP_ROW_FUNCTION, r.v[i].mod, r.v[i].fn, 0), &slot);
	}
	*rows_out = r.v;
	*nrows = r.n;
	r.v = NULL;
out:
	free(r.v);
	free(r.seen);
	free(r.seen_row);
	return ret;
}
