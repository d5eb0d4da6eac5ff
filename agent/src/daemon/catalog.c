/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Content digests and CatalogChunk messages for the modules of a code model.
 * The digest's serialization is versioned ("hotpath-catalog-v1") and uses
 * fixed-width little-endian integers and NUL-terminated strings, so it is
 * unambiguous and stable across agents. References to other code (tail-call
 * and call targets) go in as "module:function+offset" rather than as absolute
 * addresses, which KASLR changes from boot to boot.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>

#include "base/hex.h"
#include "daemon/catalog.h"
#include "hotpath/v1/agent.pb-c.h"

/* Buffered feed into the hash so small fields do not cost a call each. */
struct hasher {
	EVP_MD_CTX *ctx;
	uint8_t buf[8192];
	size_t used;
};

static void h_flush(struct hasher *h)
{
	if (h->used)
		EVP_DigestUpdate(h->ctx, h->buf, h->used);
	h->used = 0;
}

static void h_bytes(struct hasher *h, const void *p, size_t n)
{
	if (n > sizeof(h->buf) - h->used) {
		h_flush(h);
		if (n > sizeof(h->buf)) {
			EVP_DigestUpdate(h->ctx, p, n);
			return;
		}
	}
	memcpy(h->buf + h->used, p, n);
	h->used += n;
}

static void h_u32(struct hasher *h, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
	h_bytes(h, b, 4);
}

static void h_u64(struct hasher *h, uint64_t v)
{
	h_u32(h, (uint32_t)v);
	h_u32(h, (uint32_t)(v >> 32));
}

static void h_str(struct hasher *h, const char *s)
{
	h_bytes(h, s ? s : "", strlen(s ? s : "") + 1);
}

/* A load-address independent name for an absolute code address; one outside
 * every known function is taken relative to outside_base. */
static void h_target(struct hasher *h, const struct hp_model *m, uint64_t addr, uint64_t outside_base)
{
	const struct hp_module *tm = NULL;
	const struct hp_function *tf = hp_model_lookup(m, addr, &tm);
	if (tf && tm) {
		h_str(h, tm->name);
		h_str(h, tf->name);
		h_u64(h, addr - tf->addr);
	} else {
		/* Outside every known function: relative to the core kernel, whose
		 * image moves as one piece under KASLR (for a process module, to
		 * the module itself, whatever else the process maps). */
		h_str(h, "?");
		h_str(h, "");
		h_u64(h, addr - outside_base);
	}
}

void hp_catalog_build_key(const struct hp_model *m, const struct hp_module *mod, char *out, size_t outlen)
{
	if (m->kind == HP_TARGET_KERNEL)
		snprintf(out, outlen, "%s", m->build_id[0] ? m->build_id : m->release);
	else
		snprintf(out, outlen, "elf:%s", mod->build_id);
}

int hp_catalog_digest(const struct hp_model *m, size_t mod_idx, char out[65])
{
	if (mod_idx >= m->nmods)
		return -EINVAL;
	const struct hp_module *mod = &m->mods[mod_idx];
	struct hasher h = { .ctx = EVP_MD_CTX_new() };
	if (!h.ctx || EVP_DigestInit_ex(h.ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(h.ctx);
		return -ENOMEM;
	}
	char build[160];
	uint64_t outside_base;
	hp_catalog_build_key(m, mod, build, sizeof(build));
	if (m->kind == HP_TARGET_KERNEL)
		outside_base = m->nmods ? m->mods[0].base : 0;
	else
		outside_base = mod->base;
	h_str(&h, "hotpath-catalog-v1");
	h_str(&h, build);
	h_str(&h, mod->name);
	h_u64(&h, mod->nfuncs);
	for (size_t i = 0; i < mod->nfuncs; i++) {
		const struct hp_function *f = &mod->funcs[i];
		h_str(&h, f->name);
		h_u64(&h, f->addr - mod->base);
		h_u32(&h, f->size);
		h_u32(&h, f->flags & HP_FN_UNDECODABLE ? 1 : 0);
		h_u32(&h, f->flags & HP_FN_UNDECODABLE ? f->bad_offset : 0);
		h_u32(&h, f->nblocks);
		for (uint32_t b = 0; b < f->nblocks; b++) {
			const struct hp_block *bl = &mod->blocks[f->block_start + b];
			h_u32(&h, bl->offset);
			h_u32(&h, bl->size);
			h_u32(&h, bl->ninsn);
			h_u32(&h, bl->nsucc);
			for (uint16_t s = 0; s < bl->nsucc; s++) {
				const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
				h_u32(&h, sc->kind);
				if (sc->kind == HP_SUCC_TAIL_CALL)
					h_target(&h, m, sc->target, outside_base);
				else
					h_u64(&h, sc->target);
			}
		}
		h_u32(&h, f->ncalls);
		for (uint32_t c = 0; c < f->ncalls; c++) {
			const struct hp_call *cl = &mod->calls[f->call_start + c];
			h_u32(&h, cl->site);
			h_target(&h, m, cl->target, outside_base);
		}
		h_u32(&h, f->nicalls);
		for (uint32_t c = 0; c < f->nicalls; c++)
			h_u32(&h, mod->icall_sites[f->icall_start + c]);
	}
	h_flush(&h);
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int ok = EVP_DigestFinal_ex(h.ctx, md, &mdlen);
	EVP_MD_CTX_free(h.ctx);
	if (ok != 1 || mdlen != 32)
		return -EIO;
	hp_hex(md, 32, out);
	return 0;
}

int hp_catalog_digest_all(struct hp_model *m)
{
	for (size_t i = 0; i < m->nmods; i++) {
		int r = hp_catalog_digest(m, i, m->mods[i].digest);
		if (r < 0)
			return r;
	}
	return 0;
}

size_t hp_catalog_block_count(const struct hp_module *mod)
{
	size_t n = 0;
	for (size_t i = 0; i < mod->nfuncs; i++)
		n += mod->funcs[i].nblocks;
	return n;
}

void hp_catalog_iter_init(struct hp_catalog_iter *it, const struct hp_model *m, size_t mod_idx)
{
	memset(it, 0, sizeof(*it));
	it->m = m;
	it->mod_idx = mod_idx;
	it->done = mod_idx >= m->nmods;
}

/*
 * Bump allocator for one chunk's message tree: a chunk has thousands of
 * small sub-messages, all freed together once the chunk is packed.
 */
struct arena {
	struct arena_blk {
		struct arena_blk *next;
		size_t used, cap;
	} * head;
};

static void *arena_alloc(struct arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (!a->head || a->head->cap - a->head->used < n) {
		size_t cap = n > (1u << 20) ? n : (1u << 20);
		struct arena_blk *b = malloc(sizeof(*b) + 16 + cap);
		if (!b)
			return NULL;
		b->next = a->head;
		b->used = 0;
		b->cap = cap;
		a->head = b;
	}
	void *p = (char *)(a->head + 1) + 16 + a->head->used;
	a->head->used += n;
	memset(p, 0, n);
	return p;
}

static void arena_free(struct arena *a)
{
	while (a->head) {
		struct arena_blk *n = a->head->next;
		free(a->head);
		a->head = n;
	}
}

static char *target_name(struct arena *a, const struct hp_model *m, uint64_t addr, const char **mod_name)
{
	const struct hp_module *tm = NULL;
	const struct hp_function *tf = hp_model_lookup(m, addr, &tm);
	if (mod_name)
		*mod_name = tm ? tm->name : "";
	if (!tf)
		return (char *)protobuf_c_empty_string;
	if (addr == tf->addr)
		return (char *)tf->name;
	char buf[320];
	int n = snprintf(buf, sizeof(buf), "%s+0x%llx", tf->name, (unsigned long long)(addr - tf->addr));
	char *s = arena_alloc(a, (size_t)n + 1);
	if (s)
		memcpy(s, buf, (size_t)n + 1);
	return s ? s : (char *)protobuf_c_empty_string;
}

static Hotpath__V1__Function *build_function(struct arena *a, const struct hp_model *m, const struct hp_module *mod,
					     size_t idx)
{
	const struct hp_function *f = &mod->funcs[idx];
	Hotpath__V1__Function *pf = arena_alloc(a, sizeof(*pf));
	if (!pf)
		return NULL;
	hotpath__v1__function__init(pf);
	pf->index = (uint32_t)idx;
	pf->name = (char *)(f->name ? f->name : "");
	pf->offset = f->addr - mod->base;
	pf->size = f->size;
	pf->undecodable = (f->flags & HP_FN_UNDECODABLE) != 0;
	pf->undecodable_offset = pf->undecodable ? f->bad_offset : 0;
	if (f->nblocks) {
		pf->n_blocks = f->nblocks;
		pf->blocks = arena_alloc(a, sizeof(*pf->blocks) * f->nblocks);
		Hotpath__V1__Block *blocks = arena_alloc(a, sizeof(*blocks) * f->nblocks);
		if (!pf->blocks || !blocks)
			return NULL;
		for (uint32_t b = 0; b < f->nblocks; b++) {
			const struct hp_block *bl = &mod->blocks[f->block_start + b];
			Hotpath__V1__Block *pb = &blocks[b];
			hotpath__v1__block__init(pb);
			pb->offset = bl->offset;
			pb->size = bl->size;
			pb->instruction_count = bl->ninsn;
			if (bl->nsucc) {
				pb->n_successors = bl->nsucc;
				pb->successors = arena_alloc(a, sizeof(*pb->successors) * bl->nsucc);
				Hotpath__V1__Successor *ss = arena_alloc(a, sizeof(*ss) * bl->nsucc);
				if (!pb->successors || !ss)
					return NULL;
				for (uint16_t s = 0; s < bl->nsucc; s++) {
					const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
					hotpath__v1__successor__init(&ss[s]);
					ss[s].kind = (Hotpath__V1__SuccessorKind)sc->kind;
					ss[s].target = sc->target;
					if (sc->kind == HP_SUCC_TAIL_CALL) {
						const char *tmod = "";
						ss[s].target_name = target_name(a, m, sc->target, &tmod);
						ss[s].target_module = (char *)tmod;
					}
					pb->successors[s] = &ss[s];
				}
			}
			pf->blocks[b] = pb;
		}
	}
	if (f->ncalls) {
		pf->n_calls = f->ncalls;
		pf->calls = arena_alloc(a, sizeof(*pf->calls) * f->ncalls);
		Hotpath__V1__Call *cs = arena_alloc(a, sizeof(*cs) * f->ncalls);
		if (!pf->calls || !cs)
			return NULL;
		for (uint32_t c = 0; c < f->ncalls; c++) {
			const struct hp_call *cl = &mod->calls[f->call_start + c];
			const char *tmod = "";
			hotpath__v1__call__init(&cs[c]);
			cs[c].site_offset = cl->site;
			cs[c].target = cl->target;
			cs[c].target_name = target_name(a, m, cl->target, &tmod);
			cs[c].target_module = (char *)tmod;
			pf->calls[c] = &cs[c];
		}
	}
	if (f->nicalls) {
		pf->n_indirect_call_sites = f->nicalls;
		pf->indirect_call_sites = &mod->icall_sites[f->icall_start];
	}
	return pf;
}

int hp_catalog_next_chunk(struct hp_catalog_iter *it, size_t max_funcs, size_t max_bytes, uint8_t **buf, size_t *len,
			  uint32_t *nfuncs, bool *last)
{
	if (it->done)
		return 0;
	const struct hp_module *mod = &it->m->mods[it->mod_idx];
	if (max_funcs == 0)
		max_funcs = HP_CATALOG_CHUNK_FUNCS;
	struct arena a = { 0 };
	Hotpath__V1__Function **funcs = calloc(max_funcs, sizeof(*funcs));
	if (!funcs)
		return -ENOMEM;
	size_t n = 0, bytes = 0;
	int ret = 0;
	while (it->next_fn < mod->nfuncs && n < max_funcs) {
		Hotpath__V1__Function *pf = build_function(&a, it->m, mod, it->next_fn);
		if (!pf) {
			ret = -ENOMEM;
			goto out;
		}
		size_t sz = protobuf_c_message_get_packed_size(&pf->base) + 6;
		if (n > 0 && bytes + sz > max_bytes)
			break; /* the function goes into the next chunk */
		funcs[n++] = pf;
		bytes += sz;
		it->next_fn++;
	}
	Hotpath__V1__CatalogChunk chunk = HOTPATH__V1__CATALOG_CHUNK__INIT;
	chunk.digest = (char *)mod->digest;
	chunk.module = mod->name;
	chunk.seq = it->seq;
	chunk.last = it->next_fn >= mod->nfuncs;
	chunk.n_functions = n;
	chunk.functions = funcs;
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_CATALOG_CHUNK;
	msg.catalog_chunk = &chunk;
	size_t total = hotpath__v1__agent_message__get_packed_size(&msg);
	uint8_t *out = malloc(total ? total : 1);
	if (!out) {
		ret = -ENOMEM;
		goto out;
	}
	hotpath__v1__agent_message__pack(&msg, out);
	*buf = out;
	*len = total;
	*nfuncs = (uint32_t)n;
	*last = chunk.last;
	it->seq++;
	it->done = chunk.last;
	ret = 1;
out:
	free(funcs);
	arena_free(&a);
	return ret;
}
