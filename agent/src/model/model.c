// SPDX-License-Identifier: Apache-2.0
/*
 * Target-independent parts of the code model: the string pool, building and
 * normalizing modules, the address and name indexes, lookups, symbolization,
 * on-demand disassembly and freeing. After hp_model_open_* returns, nothing
 * here writes to the model, so any number of threads may read it at once.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/grow.h"
#include "isa/isa.h"
#include "model/model.h"

/* A bump allocator for the many small strings of a model. */
struct hp_pool {
	struct hp_pool *next;
	size_t used, cap;
	char data[];
};

#define POOL_CHUNK (1u << 20)

double hp_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

const char *hp_succ_kind_name(enum hp_succ_kind k)
{
	switch (k) {
	case HP_SUCC_FALLTHROUGH:
		return "fallthrough";
	case HP_SUCC_TAKEN:
		return "taken";
	case HP_SUCC_TAIL_CALL:
		return "tail_call";
	case HP_SUCC_INDIRECT:
		return "indirect";
	case HP_SUCC_RETURN:
		return "return";
	}
	return "unknown";
}

struct hp_model *hp_model_new(enum hp_target_kind kind)
{
	struct hp_model *m = calloc(1, sizeof(*m));

	if (m)
		m->kind = kind;
	return m;
}

const char *hp_model_strdup(struct hp_model *m, const char *s)
{
	size_t n = strlen(s) + 1;
	struct hp_pool *p = m->pool;

	if (!p || p->cap - p->used < n) {
		size_t cap = n > POOL_CHUNK ? n : POOL_CHUNK;

		p = malloc(sizeof(*p) + cap);
		if (!p)
			return NULL;
		p->next = m->pool;
		p->used = 0;
		p->cap = cap;
		m->pool = p;
	}
	memcpy(p->data + p->used, s, n);
	p->used += n;
	return p->data + p->used - n;
}

struct hp_module *hp_model_add_module(struct hp_model *m, const char *name, uint64_t base)
{
	struct hp_module *mod;

	if (HP_GROW(m->mods, m->cap_mods, m->nmods + 1))
		return NULL;
	mod = &m->mods[m->nmods];
	memset(mod, 0, sizeof(*mod));
	mod->name = strdup(name);
	if (!mod->name)
		return NULL;
	mod->base = base;
	m->nmods++;
	return mod;
}

int hp_module_add_function(struct hp_module *mod, const char *name, uint64_t addr, uint64_t size, uint32_t flags)
{
	if (!name)
		return -ENOMEM;
	if (HP_GROW(mod->funcs, mod->cap_funcs, mod->nfuncs + 1))
		return -ENOMEM;
	if (size > UINT32_MAX)
		size = UINT32_MAX;
	mod->funcs[mod->nfuncs++] =
		(struct hp_function){ .name = name, .addr = addr, .size = (uint32_t)size, .flags = flags };
	return 0;
}

static int cmp_fn_build(const void *a, const void *b)
{
	const struct hp_function *x = a, *y = b;
	int gx = !!(x->flags & HP_FN_BUILD_GLOBAL), gy = !!(y->flags & HP_FN_BUILD_GLOBAL);
	int ax = !!(x->flags & HP_FN_BUILD_GENERIC), ay = !!(y->flags & HP_FN_BUILD_GENERIC);

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (ax != ay)
		return ax - ay;
	if (gx != gy)
		return gy - gx;
	/* Among equals prefer the larger size, then a name without leading
	 * underscores, so the choice is deterministic. */
	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int add_alias(struct hp_model *m, const char *name, uint32_t mod, uint32_t fn)
{
	if (HP_GROW(m->aliases, m->cap_aliases, m->naliases + 1))
		return -ENOMEM;
	m->aliases[m->naliases++] = (struct hp_name_ent){ name, mod, fn };
	return 0;
}

int hp_module_normalize(struct hp_model *m, struct hp_module *mod)
{
	uint32_t modi = mod - m->mods;
	size_t i, n = 0;

	if (mod->nfuncs)
		qsort(mod->funcs, mod->nfuncs, sizeof(*mod->funcs), cmp_fn_build);
	for (i = 0; i < mod->nfuncs; i++) {
		struct hp_function f = mod->funcs[i];

		if (f.size == 0)
			continue;
		if (n && mod->funcs[n - 1].addr == f.addr) {
			if (strcmp(mod->funcs[n - 1].name, f.name) != 0 && add_alias(m, f.name, modi, n - 1) < 0)
				return -ENOMEM;
			continue;
		}
		mod->funcs[n++] = f;
	}
	mod->nfuncs = n;
	for (i = 0; i < n; i++) {
		mod->funcs[i].flags &= ~(HP_FN_BUILD_GLOBAL | HP_FN_BUILD_GENERIC | HP_FN_BUILD_IFUNC);
		if (i + 1 < n && mod->funcs[i].addr + mod->funcs[i].size > mod->funcs[i + 1].addr)
			mod->funcs[i].size = mod->funcs[i + 1].addr - mod->funcs[i].addr;
	}
	return 0;
}

static int cmp_index(const void *a, const void *b)
{
	const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_name(const void *a, const void *b)
{
	const struct hp_name_ent *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	if (x->mod != y->mod)
		return x->mod < y->mod ? -1 : 1;
	return x->fn < y->fn ? -1 : x->fn > y->fn;
}

int hp_model_build_index(struct hp_model *m)
{
	size_t total = 0, k = 0, i, j;

	for (i = 0; i < m->nmods; i++)
		total += m->mods[i].nfuncs;
	free(m->index);
	free(m->names);
	m->index = malloc((total ? total : 1) * sizeof(*m->index));
	m->names = malloc((total + m->naliases + 1) * sizeof(*m->names));
	if (!m->index || !m->names)
		return -ENOMEM;
	for (i = 0; i < m->nmods; i++)
		for (j = 0; j < m->mods[i].nfuncs; j++) {
			m->index[k].addr = m->mods[i].funcs[j].addr;
			m->index[k].mod = i;
			m->index[k].fn = j;
			m->names[k] = (struct hp_name_ent){ m->mods[i].funcs[j].name, i, j };
			k++;
		}
	m->nindex = total;
	qsort(m->index, total, sizeof(*m->index), cmp_index);
	if (m->naliases)
		memcpy(m->names + total, m->aliases, m->naliases * sizeof(*m->aliases));
	m->nnames = total + m->naliases;
	qsort(m->names, m->nnames, sizeof(*m->names), cmp_name);
	return 0;
}

const struct hp_function *hp_model_lookup(const struct hp_model *m, uint64_t addr, const struct hp_module **mod_out)
{
	size_t lo = 0, hi = m->nindex;
	const struct hp_module *mod;
	const struct hp_function *f;

	/* Last entry with index.addr <= addr. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->index[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	mod = &m->mods[m->index[lo - 1].mod];
	f = &mod->funcs[m->index[lo - 1].fn];
	if (addr - f->addr >= f->size)
		return NULL;
	if (mod_out)
		*mod_out = mod;
	return f;
}

const struct hp_block *hp_function_block_at(const struct hp_module *mod, const struct hp_function *f, uint64_t addr)
{
	size_t lo = 0, hi;
	uint64_t off;

	if (!mod || !f || addr < f->addr || addr - f->addr >= f->size || !f->nblocks)
		return NULL;
	hi = f->nblocks;
	off = addr - f->addr;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (mod->blocks[f->block_start + mid].offset <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct hp_block *b = &mod->blocks[f->block_start + lo - 1];
	return off - b->offset < b->size ? b : NULL;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

static bool module_matches(const struct hp_module *mod, const char *q, size_t qlen)
{
	const char *b = base_name(mod->name);

	return (strlen(mod->name) == qlen && !strncmp(mod->name, q, qlen)) ||
	       (strlen(b) == qlen && !strncmp(b, q, qlen));
}

/* First name-index entry equal to name, or m->nnames. */
static size_t name_lower_bound(const struct hp_model *m, const char *name)
{
	size_t lo = 0, hi = m->nnames;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(m->names[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static size_t find_plain(const struct hp_model *m, const char *name, const char *modq, size_t modlen,
			 struct hp_find_hit *hits, size_t max)
{
	size_t i, n = 0;

	for (i = name_lower_bound(m, name); i < m->nnames && !strcmp(m->names[i].name, name); i++) {
		const struct hp_module *mod = &m->mods[m->names[i].mod];
		const struct hp_function *f = &mod->funcs[m->names[i].fn];
		size_t k;
		bool dup = false;

		if (modq && !module_matches(mod, modq, modlen))
			continue;
		/* Two aliases of one function are one hit. */
		for (k = 0; k < n && k < max; k++)
			if (hits[k].fn == f)
				dup = true;
		if (dup)
			continue;
		if (n < max)
			hits[n] = (struct hp_find_hit){ mod, f };
		n++;
	}
	return n;
}

size_t hp_model_find_all(const struct hp_model *m, const char *name, struct hp_find_hit *hits, size_t max)
{
	const char *colon;
	size_t n;

	if (!m || !name || !*name)
		return 0;
	n = find_plain(m, name, NULL, 0, hits, max);
	if (n)
		return n;
	colon = strrchr(name, ':');
	if (!colon || colon == name || !colon[1])
		return 0;
	return find_plain(m, colon + 1, name, colon - name, hits, max);
}

const struct hp_function *hp_model_find(const struct hp_model *m, const char *name, const struct hp_module **mod_out,
					bool *ambiguous)
{
	struct hp_find_hit hit;
	size_t n = hp_model_find_all(m, name, &hit, 1);

	if (ambiguous)
		*ambiguous = n > 1;
	if (n != 1)
		return NULL;
	if (mod_out)
		*mod_out = hit.mod;
	return hit.fn;
}

const char *hp_model_symbolize(const struct hp_model *m, uint64_t addr, char *buf, size_t len)
{
	const struct hp_function *f = hp_model_lookup(m, addr, NULL);

	if (!f || !buf || !len)
		return NULL;
	if (addr == f->addr)
		snprintf(buf, len, "%s", f->name);
	else
		snprintf(buf, len, "%s+0x%" PRIx64, f->name, addr - f->addr);
	return buf;
}

void hp_model_stats(const struct hp_model *m, struct hp_model_stats *st)
{
	size_t i, j;

	memset(st, 0, sizeof(*st));
	for (i = 0; i < m->nmods; i++) {
		const struct hp_module *mod = &m->mods[i];

		st->functions += mod->nfuncs;
		st->blocks += mod->nblocks;
		st->succs += mod->nsuccs;
		st->calls += mod->ncalls;
		st->icalls += mod->nicall_sites;
		for (j = 0; j < mod->nfuncs; j++) {
			st->undecodable += !!(mod->funcs[j].flags & HP_FN_UNDECODABLE);
			st->unreadable += !!(mod->funcs[j].flags & HP_FN_UNREADABLE);
		}
	}
}

static bool symbolize_cb(void *ctx, uint64_t addr, char *buf, size_t len)
{
	return hp_model_symbolize(ctx, addr, buf, len) != NULL;
}

int hp_function_disassemble(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
			    struct hp_insn **out, char *err, size_t errlen)
{
	uint8_t *code;
	struct hp_insn *v;
	uint32_t off = 0;
	int n = 0, r;

	*out = NULL;
	if (!m || !f || !m->read) {
		snprintf(err, errlen, "no function to disassemble");
		return -EINVAL;
	}
	if (f->flags & HP_FN_UNREADABLE) {
		int e = f->read_errno ? f->read_errno : EFAULT;
		snprintf(err, errlen, "the bytes of %s could not be read: %s", f->name, strerror(e));
		return -e;
	}
	if (f->size > HP_MAX_DISASSEMBLY_BYTES) {
		snprintf(err, errlen, "%s is %u bytes, more than the %u this command disassembles", f->name, f->size,
			 HP_MAX_DISASSEMBLY_BYTES);
		return -EFBIG;
	}
	code = malloc(f->size ? f->size : 1);
	/* An instruction is at least one byte, so size bounds the count. */
	v = calloc(f->size ? f->size : 1, sizeof(*v));
	if (!code || !v) {
		free(code);
		free(v);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r = m->read(m, f->addr, code, f->size);
	if (r < 0) {
		snprintf(err, errlen, "reading %u bytes of %s at 0x%" PRIx64 ": %s", f->size, f->name, f->addr,
			 strerror(-r));
		free(code);
		free(v);
		return r;
	}
	while (off < f->size) {
		struct hp_insn *in = &v[n];
		int len = hp_isa_format(code + off, f->size - off, f->addr + off, in->text, sizeof(in->text),
					symbolize_cb, m);

		if (len <= 0)
			break; /* the undecodable remainder has no instructions */
		in->addr = f->addr + off;
		in->len = len;
		memcpy(in->bytes, code + off, len);
		off += len;
		n++;
	}
	free(code);
	*out = v;
	return n;
}

void hp_model_free(struct hp_model *m)
{
	size_t i;

	if (!m)
		return;
	if (m->free_priv)
		m->free_priv(m);
	for (i = 0; i < m->nmods; i++) {
		free(m->mods[i].name);
		free(m->mods[i].funcs);
		free(m->mods[i].blocks);
		free(m->mods[i].succs);
		free(m->mods[i].calls);
		free(m->mods[i].icall_sites);
		free(m->mods[i].jtables);
		free(m->mods[i].jt_targets);
		free(m->mods[i].plt_targets);
	}
	free(m->mods);
	free(m->index);
	free(m->names);
	free(m->aliases);
	while (m->pool) {
		struct hp_pool *p = m->pool->next;
		free(m->pool);
		m->pool = p;
	}
	free(m);
}
