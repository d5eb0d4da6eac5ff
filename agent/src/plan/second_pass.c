// SPDX-License-Identifier: Apache-2.0
/*
 * The second pass (KernInst section 2): once a group is installed, its copy
 * runs only when the root's copy calls into it, so counts measured on the
 * copy include only calls under the root. Planning again from them is the
 * optimization of the optimized code. Two steps live here:
 *  - the installed plan is made again from the inputs its JSON saved (root,
 *    options, profile) and must come out byte for byte as it was, which
 *    proves the layout used to read the counts is the installed one;
 *  - counts taken at the copy's block starts are mapped back to the blocks
 *    they were copied from, giving a profile of the group's functions whose
 *    scope is "calls under the root".
 * A block the layout emptied (a jump to the block placed after it) has no
 * bytes, so nothing can be counted there: its count is the flow into it
 * from its predecessors, exact where their counts determine it, else an
 * estimate (and the profile says so).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hex.h"
#include "base/json_get.h"
#include "plan/plan.h"

/* The plan's options as its JSON saved them; absent ones keep defaults. */
static void opts_from_json(const json_t *o, const json_t *code, struct hp_plan_opts *opts)
{
	uint64_t u;

	hp_plan_opts_default(opts);
	if (json_is_number(json_object_get(o, "join_fraction")))
		opts->join_fraction = json_number_value(json_object_get(o, "join_fraction"));
	/* Plans made before the shared-callee rule saved no share: made again without it. */
	opts->min_caller_share = json_is_number(json_object_get(o, "min_caller_share")) ?
					 json_number_value(json_object_get(o, "min_caller_share")) :
					 0;
	if (json_is_number(json_object_get(o, "stall_threshold")))
		opts->stall_threshold = json_number_value(json_object_get(o, "stall_threshold"));
	if (json_is_number(json_object_get(o, "max_pad_share")))
		opts->max_pad_share = json_number_value(json_object_get(o, "max_pad_share"));
	if (hp_json_u64(json_object_get(o, "fetch_block"), &u))
		opts->fetch_block = (uint32_t)u;
	if (hp_json_u64(json_object_get(o, "max_pad"), &u))
		opts->max_pad = (uint32_t)u;
	if (hp_json_u64(json_object_get(o, "max_functions"), &u))
		opts->max_functions = (uint32_t)u;
	if (hp_json_u64(json_object_get(o, "small_block"), &u))
		opts->small_block = (uint32_t)u;
	if (hp_json_u64(json_object_get(o, "l1i_size"), &u))
		opts->l1i.size_bytes = (uint32_t)u;
	if (hp_json_u64(json_object_get(o, "l1i_ways"), &u))
		opts->l1i.ways = (uint32_t)u;
	if (hp_json_u64(json_object_get(o, "l1i_line"), &u))
		opts->l1i.line_bytes = (uint32_t)u;
	opts->no_align = json_is_false(json_object_get(o, "align"));
	if (hp_json_u64(json_object_get(code, "base"), &u))
		opts->base = u;
}

int hp_plan_remake(struct hp_model *m, const char *text, size_t len, struct hp_profile *prof, struct hp_plan *out,
		   char *err, size_t errlen)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, 0, &je);
	const json_t *code;
	const char *name, *hex;
	const struct hp_module *mod;
	const struct hp_function *f;
	struct hp_plan_opts opts;
	int r = -EINVAL;

	memset(out, 0, sizeof(*out));
	memset(prof, 0, sizeof(*prof));
	if (!json_is_object(root)) {
		snprintf(err, errlen, "the installed plan is not a plan's JSON (%s)", root ? "not an object" : je.text);
		goto out;
	}
	code = json_object_get(root, "code");
	name = json_string_value(json_object_get(root, "root"));
	hex = json_string_value(json_object_get(code, "hex"));
	if (!name || !hex || !json_is_object(json_object_get(root, "profile"))) {
		snprintf(err, errlen, "the installed plan's JSON lacks its root, code or profile");
		goto out;
	}
	if (!(f = hp_model_find(m, name, &mod, NULL))) {
		snprintf(err, errlen, "the installed plan's root %s is not in this target", name);
		r = -ENOENT;
		goto out;
	}
	if ((r = hp_profile_parse(text, len, m, prof, err, errlen)) < 0)
		goto out;
	opts_from_json(json_object_get(root, "options"), code, &opts);
	if ((r = hp_plan_make(m, f, mod, prof, &opts, out, err, errlen)) < 0)
		goto out;
	/* The same inputs must give the same code, byte for byte. */
	size_t n = strlen(hex);
	bool same = out->status == HP_PLAN_OK && n == 2 * out->code_len;
	for (size_t i = 0; same && i < out->code_len; i++) {
		uint8_t b;
		same = hp_unhex(hex + 2 * i, 1, &b) == 0 && b == out->code[i];
	}
	if (!same) {
		snprintf(err, errlen,
			 "the installed plan of %s cannot be made again from its saved inputs (%s): the code or the "
			 "planner changed since",
			 name, out->status == HP_PLAN_OK ? "its code differs" : out->message);
		r = -ESTALE;
		goto out;
	}
	r = 0;
out:
	json_decref(root);
	if (r < 0) {
		hp_plan_free(out);
		hp_profile_free(prof);
	}
	return r;
}

/* Where block j of member i of the installed plan was laid out. */
struct placed {
	uint64_t addr; /* in the running copy */
	uint32_t member, j;
	uint32_t size;
};

static bool member_named(const struct hp_plan *p, const char *name)
{
	for (size_t i = 0; i < p->nmembers; i++)
		if (p->members[i].fn->name && !strcmp(p->members[i].fn->name, name))
			return true;
	return false;
}

static int cmp_placed(const void *a, const void *b)
{
	const struct placed *x = a, *y = b;
	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	return x->size < y->size ? -1 : x->size > y->size; /* emptied blocks first */
}

/* Count of an emptied block z of member mb: what flows into it. */
static double flow_into(const struct hp_plan_member *mb, uint32_t z, const double *count, const bool *known,
			bool *exact)
{
	const struct hp_module *mod = mb->mod;
	const struct hp_function *f = mb->fn;
	double sum = 0;

	if (f->cold || z == 0)
		*exact = false; /* flow also comes from the .cold fragment, or from callers */
	for (uint32_t p = 0; p < f->nblocks; p++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + p];
		uint32_t nin = 0, other = UINT32_MAX;
		bool to_z = false, leaves = false;
		for (uint16_t s = 0; s < bl->nsucc; s++) {
			const struct hp_succ *sc = &mod->succs[bl->succ_start + s];
			if (sc->kind != HP_SUCC_FALLTHROUGH && sc->kind != HP_SUCC_TAKEN) {
				leaves = true;
				continue;
			}
			const struct hp_block *t = hp_function_block_at(mod, f, f->addr + sc->target);
			uint32_t ti = t ? (uint32_t)(t - &mod->blocks[f->block_start]) : UINT32_MAX;
			nin++;
			if (ti == z)
				to_z = true;
			else
				other = ti;
		}
		if (!to_z)
			continue;
		if (!known[p]) {
			*exact = false;
			continue;
		}
		if (!leaves && (nin == 1 || other == UINT32_MAX)) {
			sum += count[p]; /* z is its only way on */
			continue;
		}
		/* p -> {z, other}: exact when other has no other way in. */
		uint32_t into_other = 0;
		for (uint32_t q = 0; other != UINT32_MAX && q < f->nblocks; q++) {
			const struct hp_block *ql = &mod->blocks[f->block_start + q];
			for (uint16_t s = 0; s < ql->nsucc; s++) {
				const struct hp_succ *sc = &mod->succs[ql->succ_start + s];
				if ((sc->kind == HP_SUCC_FALLTHROUGH || sc->kind == HP_SUCC_TAKEN) &&
				    hp_function_block_at(mod, f, f->addr + sc->target) ==
					    &mod->blocks[f->block_start + other])
					into_other++;
			}
		}
		if (!leaves && nin == 2 && other != UINT32_MAX && other != 0 && into_other == 1 && known[other]) {
			sum += count[p] > count[other] ? count[p] - count[other] : 0;
		} else {
			sum += count[p] / (nin + leaves);
			*exact = false;
		}
	}
	return sum;
}

int hp_profile_under_root(const struct hp_plan *first, uint64_t installed_base, const char *text, size_t len,
			  struct hp_profile *out, char *err, size_t errlen)
{
	static const char *const arrays[] = { "resources", "blocks", "metrics", "counts" };
	json_error_t je;
	json_t *root = json_loadb(text, len, 0, &je);
	const json_t *arr = NULL, *o;
	struct placed *pl = NULL;
	double **count = NULL;
	bool **known = NULL;
	size_t n = 0, i;
	int r = -EINVAL;

	memset(out, 0, sizeof(*out));
	out->weight = 1;
	if (!json_is_object(root)) {
		snprintf(err, errlen, "the copy's counts are not a JSON object (%s)", root ? "" : je.text);
		goto out;
	}
	for (i = 0; i < 4 && !json_is_array(arr); i++)
		arr = json_object_get(root, arrays[i]);
	if (!json_is_array(arr)) {
		snprintf(err, errlen, "no block counts for the copy (expected records with \"block\" and a count)");
		goto out;
	}
	for (i = 0; i < first->nmembers; i++)
		n += first->members[i].nblocks;
	/* Where the copy's code runs: installed_base is its heap (a page
	 * boundary) or the plan's base, and the code starts base's offset in
	 * its page into the heap (install_engine.c). */
	uint64_t origin = (installed_base & ~0xfffull) + (first->base & 0xfffull);
	pl = calloc(n + 1, sizeof(*pl));
	count = calloc(first->nmembers + 1, sizeof(*count));
	known = calloc(first->nmembers + 1, sizeof(*known));
	if (!pl || !count || !known)
		goto nomem;
	n = 0;
	for (i = 0; i < first->nmembers; i++) {
		const struct hp_plan_member *mb = &first->members[i];
		count[i] = calloc(mb->fn->nblocks + 1, sizeof(double));
		known[i] = calloc(mb->fn->nblocks + 1, sizeof(bool));
		if (!count[i] || !known[i])
			goto nomem;
		for (uint32_t j = 0; j < mb->nblocks; j++) {
			pl[n++] = (struct placed){ mb->blocks[j].new_addr - first->base + origin, (uint32_t)i, j,
						   mb->blocks[j].new_size };
			known[i][mb->blocks[j].index] = mb->blocks[j].new_size > 0;
		}
	}
	qsort(pl, n, sizeof(*pl), cmp_placed);
	/* Counts at block starts of the copy: the block that runs there. */
	json_array_foreach(arr, i, o)
	{
		const json_t *c = json_object_get(o, "count");
		uint64_t at;
		if (!c && json_is_object(json_object_get(o, "metrics")))
			c = json_object_get(json_object_get(o, "metrics"), "count");
		/* A measure report of the installed process names the copy's block
		 * (installed_copy) beside the original it counts for. */
		if (!hp_json_u64(json_object_get(o, "installed_copy"), &at) &&
		    !hp_json_u64(json_object_get(o, "block"), &at))
			continue;
		if (!json_object_get(o, "block") && !json_object_get(o, "installed_copy"))
			continue;
		/* A function the first plan did not move (its count is at its own
		 * code, no installed_copy): code that stays in place, which this
		 * pass does not lay out. Which callees a plan takes depends on the
		 * counts it was made from, so a report of named functions may hold
		 * some that stayed. */
		const char *fname = json_string_value(json_object_get(o, "function"));
		if (fname && !json_object_get(o, "installed_copy") && !member_named(first, fname))
			continue;
		if (!json_is_number(c) || json_number_value(c) < 0) {
			snprintf(err, errlen, "count record %zu of the copy has no count", i);
			goto out;
		}
		size_t lo = 0, hi = n;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (pl[mid].addr < at || (pl[mid].addr == at && !pl[mid].size))
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo == n || pl[lo].addr != at) {
			snprintf(err, errlen,
				 "0x%" PRIx64 " is no block start of the installed copy (laid out at 0x%" PRIx64
				 ", installed at 0x%" PRIx64 ")",
				 at, first->base, installed_base);
			r = -ESTALE;
			goto out;
		}
		count[pl[lo].member][first->members[pl[lo].member].blocks[pl[lo].j].index] += json_number_value(c);
	}
	/* Emptied blocks: the flow into them, predecessors first. */
	bool exact = true;
	for (i = 0; i < first->nmembers; i++) {
		const struct hp_plan_member *mb = &first->members[i];
		for (uint32_t round = 0; round <= mb->nblocks; round++) {
			bool more = false;
			for (uint32_t j = 0; j < mb->nblocks; j++) {
				uint32_t z = mb->blocks[j].index;
				if (known[i][z])
					continue;
				bool ex = true;
				double v = flow_into(mb, z, count[i], known[i], &ex);
				if (ex || round == mb->nblocks) {
					count[i][z] = v;
					known[i][z] = true;
					exact &= ex;
				} else {
					more = true;
				}
			}
			if (!more)
				break;
		}
	}
	for (i = 0; i < first->nmembers; i++) {
		const struct hp_plan_member *mb = &first->members[i];
		for (uint32_t b = 0; b < mb->fn->nblocks; b++)
			if (count[i][b] > 0 &&
			    hp_profile_add(out, mb->mod, mb->fn, mb->mod->blocks[mb->fn->block_start + b].offset,
					   count[i][b]) < 0)
				goto nomem;
	}
	out->estimated = !exact || json_is_true(json_object_get(root, "estimated"));
	snprintf(out->scope, sizeof(out->scope), "calls under %s", first->members[0].fn->name);
	snprintf(out->source, sizeof(out->source), "counts on the installed copy of %s's group at 0x%" PRIx64,
		 first->members[0].fn->name, installed_base);
	r = 0;
	goto out;
nomem:
	snprintf(err, errlen, "out of memory");
	r = -ENOMEM;
out:
	for (i = 0; count && i < first->nmembers; i++) {
		free(count[i]);
		free(known[i]);
	}
	free(count);
	free(known);
	free(pl);
	json_decref(root);
	if (r < 0)
		hp_profile_free(out);
	return r;
}
