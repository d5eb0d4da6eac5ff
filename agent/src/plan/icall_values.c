// SPDX-License-Identifier: Apache-2.0
/*
 * Indirect-call promotion (issue 17), the plan's side. A call through a
 * pointer holds the original function's address, so in an installed copy
 * it lands on the original entry and jumps from there to the member's
 * copy: an extra jump, and a line and page of the original text, at every
 * call. With a value profile of the sites (icall_values.h, measured on an
 * installed copy by `hotpathd icalls`), the promote pass marks each site
 * whose most frequent target is a member taking at least promote_share of
 * its calls: the emitter then compares the call's target with that
 * member's original entry and calls its copy directly when they are equal,
 * making the call as it was otherwise (isa.h's hp_isa_promoted). Nothing
 * in the program's data is written, so pointers compare as before and a
 * revert has nothing more to undo. Sites without a profile, or whose call
 * has a form the sequence cannot read (a segment or other legacy prefix),
 * stay as they are, with the reason in the plan.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_get.h"
#include "isa/isa.h"
#include "plan/icall_values.h"
#include "plan/pass.h"
#include "plan/plan.h"

void hp_icall_values_free(struct hp_icall_values *v)
{
	for (size_t i = 0; v->sites && i < v->nsites; i++) {
		free(v->sites[i].function);
		for (size_t k = 0; k < v->sites[i].ntargets; k++)
			free(v->sites[i].targets[k].function);
		free(v->sites[i].targets);
	}
	free(v->sites);
	memset(v, 0, sizeof(*v));
}

static bool count_of(const json_t *o, const char *key, double *out)
{
	const json_t *x = json_object_get(o, key);
	if (!x) {
		*out = 0;
		return true;
	}
	*out = json_number_value(x);
	return json_is_number(x) && *out >= 0 && *out < 1e18;
}

static int by_count(const void *a, const void *b)
{
	const struct hp_icall_value_target *x = a, *y = b;
	return x->count < y->count ? 1 : x->count > y->count ? -1 : strcmp(x->function, y->function);
}

int hp_icall_values_parse(const char *text, size_t len, struct hp_icall_values *out, char *err, size_t errlen)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, 0, &je);
	const json_t *sites = json_object_get(root, "sites"), *s;
	size_t i;
	int r = -EINVAL;

	memset(out, 0, sizeof(*out));
	if (!json_is_array(sites)) {
		snprintf(err, errlen, "the indirect call targets are not a value profile (%s)",
			 root ? "no \"sites\" array" : je.text);
		goto out;
	}
	if (!(out->sites = calloc(json_array_size(sites) + 1, sizeof(*out->sites)))) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	json_array_foreach(sites, i, s)
	{
		struct hp_icall_value_site *v = &out->sites[out->nsites];
		const char *fn = json_string_value(json_object_get(s, "function"));
		const json_t *targets = json_object_get(s, "targets"), *t;
		uint64_t site;
		size_t k;
		if (!fn || !*fn || !hp_json_u64(json_object_get(s, "site"), &site) || site > UINT32_MAX ||
		    !count_of(s, "calls", &v->calls) || (targets && !json_is_array(targets))) {
			snprintf(err, errlen,
				 "site %zu of the value profile is malformed (function, site, calls, targets)", i);
			goto out;
		}
		out->nsites++;
		v->site = (uint32_t)site;
		if (!(v->function = strdup(fn)) ||
		    !(v->targets = calloc(json_array_size(targets) + 1, sizeof(*v->targets)))) {
			r = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		json_array_foreach(targets, k, t)
		{
			struct hp_icall_value_target *x = &v->targets[v->ntargets];
			const char *name = json_string_value(json_object_get(t, "function"));
			double a, b, c;
			if (!name || !*name || !count_of(t, "indirect", &a) || !count_of(t, "direct", &b) ||
			    !count_of(t, "count", &c)) {
				snprintf(err, errlen, "target %zu of site %zu of the value profile is malformed", k, i);
				goto out;
			}
			if (!(x->function = strdup(name))) {
				r = -ENOMEM;
				snprintf(err, errlen, "out of memory");
				goto out;
			}
			x->count = json_object_get(t, "count") ? c : a + b;
			v->ntargets++;
		}
		qsort(v->targets, v->ntargets, sizeof(*v->targets), by_count);
	}
	r = 0;
out:
	json_decref(root);
	if (r < 0)
		hp_icall_values_free(out);
	return r;
}

const struct hp_plan_icall *hp_plan_promotion(const struct hp_plan *p, const struct hp_function *f, uint32_t off)
{
	for (size_t k = 0; p->npromoted && k < p->nicalls; k++)
		if (p->icalls[k].promoted && p->icalls[k].fn == f && p->icalls[k].site == off)
			return &p->icalls[k];
	return NULL;
}

uint32_t hp_plan_promoted_bytes(const struct hp_plan *p, const struct hp_function *f, uint32_t from, uint32_t to)
{
	uint32_t n = 0;

	for (size_t k = 0; p->npromoted && k < p->nicalls; k++)
		if (p->icalls[k].promoted && p->icalls[k].fn == f && p->icalls[k].site >= from &&
		    p->icalls[k].site < to)
			n += p->icalls[k].grow;
	return n;
}

static const struct hp_icall_value_site *site_values(const struct hp_icall_values *v, const char *fn, uint32_t site)
{
	for (size_t i = 0; fn && i < v->nsites; i++)
		if (v->sites[i].site == site && !strcmp(v->sites[i].function, fn))
			return &v->sites[i];
	return NULL;
}

/* The member named name, or NULL. */
static const struct hp_function *member_named(const struct hp_plan *p, const char *name)
{
	for (size_t i = 0; i < p->nmembers; i++)
		if (p->members[i].fn->name && !strcmp(p->members[i].fn->name, name))
			return p->members[i].fn;
	return NULL;
}

/* Decide each measured site: promoted to its most frequent target, or why not. */
static int promote(struct hp_plan_ctx *c)
{
	struct hp_plan *p = c->p;
	const struct hp_icall_values *v = p->opts.icall_values;
	double share = p->opts.promote_share;

	p->npromoted = 0;
	for (size_t k = 0; v && k < p->nicalls; k++) {
		struct hp_plan_icall *ic = &p->icalls[k];
		const struct hp_icall_value_site *s = site_values(v, ic->fn->name, ic->site);
		const struct hp_function *to;
		double total = 0;
		uint8_t code[16] = { 0 };
		struct hp_isa_insn in = { 0 };
		uint64_t at = ic->fn->addr + ic->site;

		if (!s)
			continue;
		for (size_t t = 0; t < s->ntargets; t++) {
			total += s->targets[t].count;
			if (t < HP_ICALL_TARGETS) {
				ic->targets[t].function = s->targets[t].function;
				ic->targets[t].count = s->targets[t].count;
				ic->ntargets++;
			}
		}
		ic->measured_calls = s->calls > total ? s->calls : total;
		if (!s->ntargets || s->targets[0].count <= 0) {
			ic->why_not = "no call measured";
			continue;
		}
		if (!(to = member_named(p, s->targets[0].function))) {
			ic->why_not = "its most frequent target is not a member of the plan";
			continue;
		}
		if (s->targets[0].count < share * ic->measured_calls) {
			ic->why_not = "no target takes the promotion share of its calls";
			continue;
		}
		int n = -1;
		if (c->m->read(c->m, at, code,
			       sizeof(code) < ic->fn->size - ic->site ? sizeof(code) : ic->fn->size - ic->site) >= 0 &&
		    hp_isa_decode(code, sizeof(code), at, &in) == 0 && in.cls == HP_IC_CALL_IND) {
			uint8_t seq[64];
			n = hp_isa_encode_promoted_call(code, in.len, at, at, at, at, seq, sizeof(seq), NULL);
		}
		if (n < (int)in.len || n - in.len > UINT8_MAX) {
			ic->why_not =
				"the call's form cannot be promoted (a prefix other than REX, or not a 64-bit operand)";
			continue;
		}
		ic->promoted = to;
		ic->orig_len = in.len;
		ic->grow = (uint8_t)(n - in.len);
		p->npromoted++;
	}
	return HP_PASS_NEXT;
}

const struct hp_plan_pass hp_pass_promote = { "promote", promote };
