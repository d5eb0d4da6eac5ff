// SPDX-License-Identifier: Apache-2.0
/*
 * Profiles straight from the measure layer, for callers that measured in
 * the same process (the daemon's MakePlan, `hotpathd plan kernel --sample`):
 * a measurement's block counts with the edges derived exactly from them,
 * read as profile.c reads the same numbers from `hotpathd measure --json`
 * (exact counts as they are, sampled counts as samples per instruction and
 * the profile an estimate, rows no probe served skipped, only edges derived
 * exactly between two blocks of one function); and an interval of PC
 * samples as estimated block counts (samples per block / its instructions),
 * or such samples taken now.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "measure/measure.h"
#include "measure/sampler.h"
#include "plan/profile.h"
#include "plan/profile_measured.h"

int hp_profile_from_reading(struct hp_measure *h, const struct hp_measure_reading *rd, struct hp_profile *out,
			    size_t *nblocks, char *err, size_t errlen)
{
	const struct hp_model *m = hp_measure_model(h);
	const struct hp_measure_row *rows = hp_measure_rows(h);
	struct hp_function_edges *fe = NULL;
	size_t nfe = 0, n = 0;
	bool exact_only = true;

	*nblocks = 0;
	for (size_t i = 0; i < rd->nrows && i < hp_measure_nrows(h); i++) {
		const struct hp_measure_row *row = &rows[i];
		const struct hp_metric_value *v = &rd->rows[i].v[HP_METRIC_COUNT];
		const struct hp_module *mod;
		const struct hp_function *f;
		double c;

		if (row->kind != HP_ROW_BLOCK || !row->metric[HP_METRIC_COUNT].available || !v->present)
			continue;
		if (!(f = hp_model_lookup(m, row->block_address, &mod)) || f->addr != row->function_address) {
			snprintf(err, errlen, "%s's block at +0x%x is not in the code model", row->function,
				 row->block_offset);
			return -ESTALE;
		}
		c = (double)v->total;
		if (v->label != HP_LABEL_EXACT) {
			const struct hp_block *b = hp_function_block_at(mod, f, row->block_address);
			exact_only = false;
			out->estimated = true;
			if (v->label == HP_LABEL_SAMPLED && b && b->ninsn)
				c /= b->ninsn;
		}
		if (hp_profile_add(out, mod, f, row->block_offset, c) < 0)
			return -ENOMEM;
		n++;
	}
	*nblocks = n;
	if (!exact_only || !n)
		return 0;
	if (hp_measure_edges(h, rd, &fe, &nfe) < 0) {
		snprintf(err, errlen, "out of memory deriving edges");
		return -ENOMEM;
	}
	for (size_t i = 0; i < nfe; i++) {
		const struct hp_measure_row *fr = &rows[fe[i].function_row];
		const struct hp_module *mod;
		const struct hp_function *f = hp_model_lookup(m, fr->function_address, &mod);
		for (size_t k = 0; f && k < fe[i].edges.nedges; k++) {
			const struct hp_edge *e = &fe[i].edges.edges[k];
			if (e->from == HP_EDGE_NO_BLOCK || e->to == HP_EDGE_NO_BLOCK || e->how != HP_EDGE_EXACT)
				continue; /* the entry, an exit, or an approximation: derived again by the plan */
			if (hp_profile_add_edge(out, mod, f, fe[i].block_offsets[e->from], fe[i].block_offsets[e->to],
						(double)e->count) < 0) {
				hp_measure_edges_free(fe, nfe);
				return -ENOMEM;
			}
		}
	}
	hp_measure_edges_free(fe, nfe);
	return 0;
}

int hp_profile_from_samples(const struct hp_model *m, const struct hp_sample_interval *iv, struct hp_profile *out)
{
	out->estimated = true;
	for (size_t i = 0; i < iv->nblocks; i++) {
		const struct hp_module *mod = &m->mods[iv->blocks[i].mod];
		const struct hp_function *f = &mod->funcs[iv->blocks[i].fn];
		const struct hp_block *b = hp_function_block_at(mod, f, f->addr + iv->blocks[i].offset);
		if (b &&
		    hp_profile_add(out, mod, f, b->offset, (double)iv->blocks[i].count / (b->ninsn ? b->ninsn : 1)) < 0)
			return -ENOMEM;
	}
	return 0;
}

int hp_profile_sample(const struct hp_model *m, int pid, unsigned secs, unsigned hz, hp_sample_wait_fn wait, void *ctx,
		      struct hp_profile *out, char *err, size_t errlen)
{
	struct hp_sampler_opts so = { .pid = pid, .frequency = hz };
	struct hp_sampler *s;
	struct hp_sample_interval iv;
	int r = 0;

	memset(out, 0, sizeof(*out));
	out->weight = 1;
	out->estimated = true;
	s = hp_sampler_open(m, &so, err, errlen);
	if (!s)
		return -EPERM;
	if (wait)
		r = wait(ctx, secs);
	else
		sleep(secs);
	if (r < 0) {
		hp_sampler_close(s);
		return r;
	}
	if (hp_sampler_take(s, &iv) < 0) {
		hp_sampler_close(s);
		snprintf(err, errlen, "sampling failed");
		return -EIO;
	}
	r = hp_profile_from_samples(m, &iv, out);
	if (pid)
		snprintf(out->source, sizeof(out->source), "%u s of %s PC samples of process %d (%" PRIu64 " at %u Hz)",
			 secs, hp_sampler_event(s), pid, iv.total, hz);
	else
		snprintf(out->source, sizeof(out->source), "%u s of %s PC samples", secs, hp_sampler_event(s));
	hp_sample_interval_free(&iv);
	hp_sampler_close(s);
	if (r < 0)
		snprintf(err, errlen, "out of memory");
	return r;
}
