// SPDX-License-Identifier: Apache-2.0
/*
 * Reading, checking and merging profiles (see profile.h). JSON is parsed
 * with jansson. Two inputs are understood: the report of
 * `hotpathd measure --json` (see read_measure) and the "hotpath-profile/1"
 * object a plan saves (functions with their CFG signature, block offsets
 * and counts, edges). A plan's own JSON is accepted too: its "profile"
 * member is read.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "base/json_get.h"
#include "plan/profile.h"

/* FNV-1a over the CFG's shape: a change detector, not a security hash. */
static uint64_t fnv(uint64_t h, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		h ^= (v >> (8 * i)) & 0xff;
		h *= 0x100000001b3ull;
	}
	return h;
}

void hp_cfg_signature(const struct hp_module *mod, const struct hp_function *f, char out[17])
{
	uint64_t h = 0xcbf29ce484222325ull;

	h = fnv(h, f->nblocks);
	for (uint32_t b = 0; b < f->nblocks; b++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + b];

		h = fnv(fnv(fnv(fnv(h, bl->offset), bl->size), bl->ninsn), bl->nsucc);
		for (uint16_t s = 0; s < bl->nsucc; s++) {
			const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
			h = fnv(fnv(h, sc->kind),
				sc->kind == HP_SUCC_FALLTHROUGH || sc->kind == HP_SUCC_TAKEN ? sc->target : 0);
		}
	}
	snprintf(out, 17, "%016" PRIx64, h);
}

static struct hp_prof_fn *fn_for(struct hp_profile *p, const struct hp_module *mod, const struct hp_function *f)
{
	for (size_t i = p->nfns; i-- > 0;)
		if (p->fns[i].addr == f->addr)
			return &p->fns[i];
	if (HP_GROW(p->fns, p->cap_fns, p->nfns + 1))
		return NULL;
	struct hp_prof_fn *n = &p->fns[p->nfns];
	memset(n, 0, sizeof(*n));
	if (!(n->name = strdup(f->name)))
		return NULL;
	n->addr = f->addr;
	hp_cfg_signature(mod, f, n->signature);
	p->nfns++;
	return n;
}

int hp_profile_add(struct hp_profile *p, const struct hp_module *mod, const struct hp_function *f, uint32_t off,
		   double count)
{
	struct hp_prof_fn *pf = fn_for(p, mod, f);

	if (!pf)
		return -ENOMEM;
	for (size_t i = 0; i < pf->nblocks; i++)
		if (pf->blocks[i].offset == off) {
			pf->blocks[i].count += count;
			return 0;
		}
	if (HP_GROW(pf->blocks, pf->cap_blocks, pf->nblocks + 1))
		return -ENOMEM;
	pf->blocks[pf->nblocks++] = (struct hp_prof_block){ off, count };
	return 0;
}

int hp_profile_add_edge(struct hp_profile *p, const struct hp_module *mod, const struct hp_function *f, uint32_t from,
			uint32_t to, double count)
{
	struct hp_prof_fn *pf = fn_for(p, mod, f);

	if (!pf)
		return -ENOMEM;
	for (size_t i = 0; i < pf->nedges; i++)
		if (pf->edges[i].from == from && pf->edges[i].to == to) {
			pf->edges[i].count += count;
			return 0;
		}
	if (HP_GROW(pf->edges, pf->cap_edges, pf->nedges + 1))
		return -ENOMEM;
	pf->edges[pf->nedges++] = (struct hp_prof_edge){ from, to, count };
	return 0;
}

const struct hp_prof_fn *hp_profile_find(const struct hp_profile *p, uint64_t addr)
{
	for (size_t i = 0; p && i < p->nfns; i++)
		if (p->fns[i].addr == addr)
			return &p->fns[i];
	return NULL;
}

int hp_profile_copy(const struct hp_profile *in, struct hp_profile *out)
{
	*out = *in;
	out->fns = calloc(in->nfns ? in->nfns : 1, sizeof(*out->fns));
	out->nfns = out->cap_fns = 0; /* 0: no room known, the next push grows */
	if (!out->fns)
		return -ENOMEM;
	for (size_t i = 0; i < in->nfns; i++) {
		const struct hp_prof_fn *a = &in->fns[i];
		struct hp_prof_fn *b = &out->fns[out->nfns++];
		*b = *a;
		b->cap_blocks = b->cap_edges = 0;
		b->name = strdup(a->name ? a->name : "");
		b->blocks = malloc((a->nblocks ? a->nblocks : 1) * sizeof(*b->blocks));
		b->edges = malloc((a->nedges ? a->nedges : 1) * sizeof(*b->edges));
		if (!b->name || !b->blocks || !b->edges) {
			hp_profile_free(out);
			return -ENOMEM;
		}
		memcpy(b->blocks, a->blocks, a->nblocks * sizeof(*b->blocks));
		memcpy(b->edges, a->edges, a->nedges * sizeof(*b->edges));
	}
	return 0;
}

void hp_profile_free(struct hp_profile *p)
{
	for (size_t i = 0; p && i < p->nfns; i++) {
		free(p->fns[i].name);
		free(p->fns[i].blocks);
		free(p->fns[i].edges);
	}
	if (p)
		free(p->fns);
	if (p)
		memset(p, 0, sizeof(*p));
}

static bool json_count(const json_t *o, double *out)
{
	const json_t *c = json_object_get(o, "count");

	if (!c && json_is_object(json_object_get(o, "metrics")))
		c = json_object_get(json_object_get(o, "metrics"), "count");
	if (!json_is_number(c) || json_number_value(c) < 0)
		return false;
	*out = json_number_value(c);
	return true;
}

/* The block of the model starting at absolute addr: its function, or NULL
 * with err saying why (not code of this target, or not a block start). */
static const struct hp_function *block_start(const struct hp_model *m, uint64_t addr, const struct hp_module **mod,
					     char *err, size_t errlen)
{
	const struct hp_function *f = hp_model_lookup(m, addr, mod);
	const struct hp_block *b = f ? hp_function_block_at(*mod, f, addr) : NULL;

	if (!f) {
		snprintf(err, errlen, "the profile counts address 0x%" PRIx64 ", which is no function of this target",
			 addr);
		return NULL;
	}
	if (!b || f->addr + b->offset != addr) {
		snprintf(err, errlen,
			 "stale profile: %s was measured on different code (0x%" PRIx64
			 " is not one of its block starts)",
			 f->name, addr);
		return NULL;
	}
	return f;
}

/* The report of `hotpathd measure --json` (docs/agent-cli.md): rows in
 * "resources", block rows with "block" (absolute), "metrics".count and
 * "labels".count (exact, sampled or estimate); function rows (no "block")
 * are skipped, and so are rows a probe could not serve ("unavailable",
 * no count). A row's function_address and function_size must still be
 * the function's here. Of "edges" (between two blocks of one function:
 * from, to, count, exact) those derived exactly are taken; estimates, and
 * "boundary_edges" (entry, exits), are left for the plan to derive.
 * Sampled counts are samples, not executions: like the agent's own
 * sampling they become samples per instruction, and the profile (as the
 * report's "estimated" says) is an estimate. */
static int read_measure(const json_t *root, const struct hp_model *m, struct hp_profile *p, char *err, size_t errlen)
{
	static const char *const arrays[] = { "resources", "blocks", "metrics", "counts" };
	const json_t *arr = NULL, *o;
	size_t i;

	for (i = 0; i < 4 && !json_is_array(arr); i++)
		arr = json_object_get(root, arrays[i]);
	if (!json_is_array(arr)) {
		snprintf(err, errlen,
			 "no block counts in the profile (expected \"resources\" with \"block\" and metrics.count)");
		return -EINVAL;
	}
	json_array_foreach(arr, i, o)
	{
		const struct hp_module *mod;
		const struct hp_function *f;
		const char *label = json_string_value(json_object_get(json_object_get(o, "labels"), "count"));
		uint64_t at, faddr, fsize;
		double c;

		if (!hp_json_u64(json_object_get(o, "block"), &at))
			continue; /* function rows carry no block */
		if (!json_count(o, &c)) {
			if (json_object_get(o, "unavailable"))
				continue; /* a block the probes could not take: no count */
			snprintf(err, errlen, "profile record %zu has no count", i);
			return -EINVAL;
		}
		if (!(f = block_start(m, at, &mod, err, errlen)))
			return -ESTALE;
		if (hp_json_u64(json_object_get(o, "function_address"), &faddr) &&
		    hp_json_u64(json_object_get(o, "function_size"), &fsize) &&
		    (faddr != f->addr || fsize != f->size)) {
			snprintf(err, errlen,
				 "stale profile: %s was measured on different code (%" PRIu64 " bytes at 0x%" PRIx64
				 ", now %u at 0x%" PRIx64 ")",
				 f->name, fsize, faddr, f->size, f->addr);
			return -ESTALE;
		}
		if (label && strcmp(label, "exact")) {
			const struct hp_block *b = hp_function_block_at(mod, f, at);
			p->estimated = true;
			if (!strcmp(label, "sampled") && b && b->ninsn)
				c /= b->ninsn;
		}
		if (hp_profile_add(p, mod, f, (uint32_t)(at - f->addr), c) < 0)
			return -ENOMEM;
	}
	json_array_foreach(json_object_get(root, "edges"), i, o)
	{
		const struct hp_module *mod, *mod2;
		const struct hp_function *f, *g;
		const json_t *exact = json_object_get(o, "exact");
		uint64_t a, b;
		double c;

		if (json_is_null(json_object_get(o, "from")) || json_is_null(json_object_get(o, "to")) ||
		    json_is_false(exact))
			continue; /* the entry, an exit, or an approximation: derived again by the plan */
		if (!hp_json_u64(json_object_get(o, "from"), &a) || !hp_json_u64(json_object_get(o, "to"), &b) ||
		    !json_count(o, &c)) {
			snprintf(err, errlen, "edge record %zu needs from, to and a count", i);
			return -EINVAL;
		}
		if (!(f = hp_model_lookup(m, a, &mod)) || !(g = hp_model_lookup(m, b, &mod2)) || f != g)
			continue; /* a tail call: not an edge inside a function */
		if (!block_start(m, a, &mod, err, errlen) || !block_start(m, b, &mod2, err, errlen))
			return -ESTALE;
		if (hp_profile_add_edge(p, mod, f, (uint32_t)(a - f->addr), (uint32_t)(b - f->addr), c) < 0)
			return -ENOMEM;
	}
	if (json_is_true(json_object_get(root, "estimated")))
		p->estimated = true;
	return 0;
}

static int read_saved(const json_t *root, const struct hp_model *m, struct hp_profile *p, char *err, size_t errlen)
{
	const json_t *fo, *o;
	size_t i, j;

	json_array_foreach(json_object_get(root, "functions"), i, fo)
	{
		const char *name = json_string_value(json_object_get(fo, "name"));
		const char *sig = json_string_value(json_object_get(fo, "signature"));
		const struct hp_module *mod;
		const struct hp_function *f;
		uint64_t addr;
		char now[17];

		if (!name || !hp_json_u64(json_object_get(fo, "address"), &addr)) {
			snprintf(err, errlen, "profile function %zu needs a name and an address", i);
			return -EINVAL;
		}
		f = hp_model_lookup(m, addr, &mod);
		if (!f || f->addr != addr || strcmp(f->name, name)) {
			snprintf(err, errlen, "stale profile: %s is not at 0x%" PRIx64 " in this target", name, addr);
			return -ESTALE;
		}
		hp_cfg_signature(mod, f, now);
		if (sig && strcmp(sig, now)) {
			snprintf(err, errlen,
				 "stale profile: %s was measured on different code (CFG signature %s, now %s)", name,
				 sig, now);
			return -ESTALE;
		}
		json_array_foreach(json_object_get(fo, "blocks"), j, o)
		{
			uint64_t off;
			double c;
			const struct hp_block *b;

			if (!hp_json_u64(json_object_get(o, "offset"), &off) || !json_count(o, &c) ||
			    !(b = hp_function_block_at(mod, f, addr + off)) || b->offset != off) {
				snprintf(err, errlen, "stale profile: %s has no block at +0x%" PRIx64, name, off);
				return -ESTALE;
			}
			if (hp_profile_add(p, mod, f, (uint32_t)off, c) < 0)
				return -ENOMEM;
		}
		json_array_foreach(json_object_get(fo, "edges"), j, o)
		{
			uint64_t a, b;
			double c;

			if (!hp_json_u64(json_object_get(o, "from"), &a) ||
			    !hp_json_u64(json_object_get(o, "to"), &b) || !json_count(o, &c)) {
				snprintf(err, errlen, "profile edge %zu of %s needs from, to and a count", j, name);
				return -EINVAL;
			}
			if (hp_profile_add_edge(p, mod, f, (uint32_t)a, (uint32_t)b, c) < 0)
				return -ENOMEM;
		}
	}
	if (json_is_true(json_object_get(root, "estimated")))
		p->estimated = true;
	return 0;
}

/* A saved profile's "resident" functions (block counts only), skipping
 * those not at their address in m or no longer with those blocks. */
static int read_resident(const json_t *root, const struct hp_model *m, struct hp_profile *p, char *err, size_t errlen)
{
	const json_t *fo, *o;
	size_t i, j;

	json_array_foreach(json_object_get(root, "resident"), i, fo)
	{
		const char *name = json_string_value(json_object_get(fo, "name"));
		const struct hp_module *mod;
		const struct hp_function *f;
		uint64_t addr;

		if (!name || !hp_json_u64(json_object_get(fo, "address"), &addr)) {
			snprintf(err, errlen, "resident function %zu needs a name and an address", i);
			return -EINVAL;
		}
		if (!(f = hp_model_lookup(m, addr, &mod)) || f->addr != addr || strcmp(f->name, name))
			continue;
		json_array_foreach(json_object_get(fo, "blocks"), j, o)
		{
			uint64_t off;
			double c;
			const struct hp_block *b;

			if (hp_json_u64(json_object_get(o, "offset"), &off) && json_count(o, &c) &&
			    (b = hp_function_block_at(mod, f, addr + off)) && b->offset == off &&
			    hp_profile_add(p, mod, f, (uint32_t)off, c) < 0)
				return -ENOMEM;
		}
	}
	return 0;
}

static int parse(const char *text, size_t len, const struct hp_model *m, struct hp_profile *out, bool resident,
		 char *err, size_t errlen);

int hp_profile_parse(const char *text, size_t len, const struct hp_model *m, struct hp_profile *out, char *err,
		     size_t errlen)
{
	return parse(text, len, m, out, false, err, errlen);
}

static int parse(const char *text, size_t len, const struct hp_model *m, struct hp_profile *out, bool resident,
		 char *err, size_t errlen)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je), *inner;
	const char *fmt;
	int r;

	memset(out, 0, sizeof(*out));
	out->weight = 1;
	if (!root || !json_is_object(root)) {
		if (root)
			snprintf(err, errlen, "profile is not a JSON object");
		else
			snprintf(err, errlen, "profile is not valid JSON (line %d: %s)", je.line, je.text);
		json_decref(root);
		return -EINVAL;
	}
	/* A plan carries the profile it was made from. */
	if (json_is_object(inner = json_object_get(root, "profile"))) {
		json_incref(inner);
		json_decref(root);
		root = inner;
	}
	fmt = json_string_value(json_object_get(root, "format"));
	if (fmt && !strcmp(fmt, "hotpath-profile/1")) {
		r = read_saved(root, m, out, err, errlen);
		if (r == 0 && resident)
			r = read_resident(root, m, out, err, errlen);
	} else
		r = read_measure(root, m, out, err, errlen);
	if (r == 0 && json_is_string(json_object_get(root, "source")))
		snprintf(out->source, sizeof(out->source), "%s", json_string_value(json_object_get(root, "source")));
	if (r == 0 && json_is_string(json_object_get(root, "scope")))
		snprintf(out->scope, sizeof(out->scope), "%s", json_string_value(json_object_get(root, "scope")));
	json_decref(root);
	if (r < 0)
		hp_profile_free(out);
	return r;
}

static int read_file(const char *path, const struct hp_model *m, struct hp_profile *out, bool resident, char *err,
		     size_t errlen);

int hp_profile_read(const char *path, const struct hp_model *m, struct hp_profile *out, char *err, size_t errlen)
{
	return read_file(path, m, out, false, err, errlen);
}

int hp_profile_read_resident(const char *path, const struct hp_model *m, struct hp_profile *out, char *err,
			     size_t errlen)
{
	return read_file(path, m, out, true, err, errlen);
}

/* The whole of the file at path into *buf (malloc'd, NULL when empty) and
 * *len: 0, or a negative errno with the reason in err. */
static int read_all(const char *path, char **buf, size_t *len, char *err, size_t errlen)
{
	FILE *fp = fopen(path, "r");
	size_t cap = 0, n;
	int r;

	*buf = NULL;
	*len = 0;
	if (!fp) {
		r = -errno;
		snprintf(err, errlen, "cannot open profile %s: %s", path, strerror(errno));
		return r;
	}
	do {
		if (HP_GROW(*buf, cap, *len + 65536)) {
			free(*buf);
			*buf = NULL;
			fclose(fp);
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		n = fread(*buf + *len, 1, cap - *len, fp);
		*len += n;
	} while (n > 0 && *len < (256u << 20));
	fclose(fp);
	return 0;
}

static int read_file(const char *path, const struct hp_model *m, struct hp_profile *out, bool resident, char *err,
		     size_t errlen)
{
	char *buf;
	size_t len;
	int r;

	if ((r = read_all(path, &buf, &len, err, errlen)) < 0)
		return r;
	r = parse(buf ? buf : "", len, m, out, resident, err, errlen);
	if (r == 0 && !out->source[0])
		snprintf(out->source, sizeof(out->source), "%s", path);
	free(buf);
	return r;
}

static int push_addr(uint64_t **v, size_t *n, size_t *cap, const json_t *j)
{
	uint64_t a;

	if (!hp_json_u64(j, &a))
		return 0;
	if (HP_GROW(*v, *cap, *n + 1))
		return -ENOMEM;
	(*v)[(*n)++] = a;
	return 0;
}

int hp_profile_read_addresses(const char *path, uint64_t **out, size_t *nout, char *err, size_t errlen)
{
	static const char *const arrays[] = { "resources", "blocks", "metrics", "counts" };
	const json_t *root, *arr = NULL, *o;
	json_t *top;
	json_error_t je;
	uint64_t *v = NULL;
	size_t n = 0, cap = 0, i;
	char *buf;
	size_t len;
	int r;

	*out = NULL;
	*nout = 0;
	if ((r = read_all(path, &buf, &len, err, errlen)) < 0)
		return r;
	top = json_loadb(buf ? buf : "", len, JSON_REJECT_DUPLICATES, &je);
	free(buf);
	if (!json_is_object(top)) {
		snprintf(err, errlen, "profile %s is not a JSON object", path);
		json_decref(top);
		return -EINVAL;
	}
	root = json_is_object(json_object_get(top, "profile")) ? json_object_get(top, "profile") : top;
	/* A saved profile's functions, or measure output's blocks and edges. */
	json_array_foreach(json_object_get(root, "functions"), i, o)
	{
		if ((r = push_addr(&v, &n, &cap, json_object_get(o, "address"))) < 0)
			goto out;
	}
	for (i = 0; i < 4 && !json_is_array(arr); i++)
		arr = json_object_get(root, arrays[i]);
	json_array_foreach(arr, i, o)
	{
		if ((r = push_addr(&v, &n, &cap, json_object_get(o, "block"))) < 0)
			goto out;
	}
	json_array_foreach(json_object_get(root, "edges"), i, o)
	{
		if ((r = push_addr(&v, &n, &cap, json_object_get(o, "from"))) < 0 ||
		    (r = push_addr(&v, &n, &cap, json_object_get(o, "to"))) < 0)
			goto out;
	}
	*out = v;
	*nout = n;
	v = NULL;
out:
	if (r < 0)
		snprintf(err, errlen, "out of memory");
	free(v);
	json_decref(top);
	return r;
}

int hp_profile_merge(const struct hp_profile *in, size_t n, struct hp_profile *out)
{
	memset(out, 0, sizeof(*out));
	out->weight = 1;
	for (size_t k = 1; k < n; k++)
		if (strcmp(in[k].scope, in[0].scope))
			return -EINVAL;
	if (n)
		memcpy(out->scope, in[0].scope, sizeof(out->scope));
	for (size_t k = 0; k < n; k++) {
		double total = 0, scale;

		for (size_t i = 0; i < in[k].nfns; i++)
			for (size_t b = 0; b < in[k].fns[i].nblocks; b++)
				total += in[k].fns[i].blocks[b].count;
		scale = total > 0 ? 1e6 / total * in[k].weight : 0;
		out->estimated |= in[k].estimated;
		for (size_t i = 0; i < in[k].nfns; i++) {
			const struct hp_prof_fn *f = &in[k].fns[i];
			struct hp_prof_fn *o = NULL;

			for (size_t j = 0; j < out->nfns && !o; j++)
				if (out->fns[j].addr == f->addr)
					o = &out->fns[j];
			if (!o) {
				if (HP_GROW(out->fns, out->cap_fns, out->nfns + 1))
					return -ENOMEM;
				o = &out->fns[out->nfns++];
				memset(o, 0, sizeof(*o));
				o->name = strdup(f->name);
				o->addr = f->addr;
				memcpy(o->signature, f->signature, sizeof(o->signature));
			}
			for (size_t b = 0; b < f->nblocks; b++) {
				size_t j;
				for (j = 0; j < o->nblocks && o->blocks[j].offset != f->blocks[b].offset; j++)
					;
				if (j == o->nblocks) {
					if (HP_GROW(o->blocks, o->cap_blocks, o->nblocks + 1))
						return -ENOMEM;
					o->blocks[o->nblocks++] = (struct hp_prof_block){ f->blocks[b].offset, 0 };
				}
				o->blocks[j].count += f->blocks[b].count * scale;
			}
			for (size_t e = 0; e < f->nedges; e++) {
				size_t j;
				for (j = 0; j < o->nedges &&
					    (o->edges[j].from != f->edges[e].from || o->edges[j].to != f->edges[e].to);
				     j++)
					;
				if (j == o->nedges) {
					if (HP_GROW(o->edges, o->cap_edges, o->nedges + 1))
						return -ENOMEM;
					o->edges[o->nedges++] =
						(struct hp_prof_edge){ f->edges[e].from, f->edges[e].to, 0 };
				}
				o->edges[j].count += f->edges[e].count * scale;
			}
		}
	}
	snprintf(out->source, sizeof(out->source), "%zu workloads merged", n);
	return 0;
}
