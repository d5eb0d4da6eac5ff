// SPDX-License-Identifier: Apache-2.0
/*
 * A window of inline counters (counted_window.h): polled until the caller
 * ends it, every function's counts read with the process held, edges
 * derived (the counted ones exact), and the counts as a profile.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan/instrument.h"
#include "replace/counted_window.h"

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* With counters on edges, every derived edge whose ends are one counting
 * edge (two blocks, or the entry, or a block's only way out) takes its
 * count from the counters, exact, whatever the block counts alone allow
 * deriving. */
static void edges_as_counted(struct hp_edge_result *er, const struct hp_counter_edge *ce, uint32_t nce,
			     const uint64_t *ec)
{
	for (size_t k = 0; k < er->nedges; k++) {
		struct hp_edge *e = &er->edges[k];
		uint32_t from = e->from == HP_EDGE_NO_BLOCK ? HP_COUNTER_OUTSIDE : e->from,
			 to = e->to == HP_EDGE_NO_BLOCK ? HP_COUNTER_OUTSIDE : e->to;
		size_t same = 0;
		for (size_t j = 0; j < er->nedges; j++) {
			uint32_t f2 = er->edges[j].from == HP_EDGE_NO_BLOCK ? HP_COUNTER_OUTSIDE : er->edges[j].from,
				 t2 = er->edges[j].to == HP_EDGE_NO_BLOCK ? HP_COUNTER_OUTSIDE : er->edges[j].to;
			same += f2 == from && t2 == to;
		}
		if (same != 1 || (from == HP_COUNTER_OUTSIDE && e->kind != HP_EDGE_ENTRY))
			continue; /* two edges the counters see as one, or an indirect arrival */
		for (uint32_t j = 0; j < nce; j++)
			if (ce[j].from == from && ce[j].to == to) {
				if (e->how != HP_EDGE_EXACT)
					er->nexact++;
				e->count = e->low = e->high = ec[j];
				e->how = HP_EDGE_EXACT;
				break;
			}
	}
}

/* Function i's counts and edges, read now. */
static int read_one(const struct hp_counted *c, size_t i, struct hp_counted_counts *v, char *err, size_t errlen)
{
	const struct hp_counted_fn *cf = &c->fns[i];
	const struct hp_instrument *ins = cf->plan.instrument;
	uint64_t *ec = NULL;
	int r;

	v->blocks = calloc(cf->fn->nblocks + 1, sizeof(uint64_t));
	if (ins->edges)
		ec = calloc(ins->ncedges + 1, sizeof(uint64_t));
	if (!v->blocks || (ins->edges && !ec)) {
		free(ec);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if ((r = hp_counted_read(c, i, v->blocks, ec, err, errlen)) < 0) {
		free(ec);
		return r;
	}
	uint64_t entries = v->blocks[0];
	if (hp_edges_derive(cf->mod, cf->fn, v->blocks, NULL, &entries, &v->edges) < 0) {
		free(ec);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (ec && c->exact)
		edges_as_counted(&v->edges, ins->cedges, ins->ncedges, ec);
	free(ec);
	if (!c->exact) { /* from counts that may miss some */
		for (size_t k = 0; k < v->edges.nedges; k++) {
			v->edges.edges[k].how = HP_EDGE_ESTIMATE;
			v->edges.edges[k].high = UINT64_MAX;
		}
		v->edges.nexact = 0;
	}
	return 0;
}

int hp_counted_window(struct hp_counted *c, hp_counted_tick_fn tick, void *ctx, double *seconds,
		      struct hp_counted_counts **out, char *err, size_t errlen)
{
	double t0 = mono_s();
	int r = 0;

	*out = NULL;
	*seconds = 0;
	for (;;) {
		/* Short naps while watched: a signal to the process waits for the watch. */
		struct timespec nap = { 0, (c->watched ? 10 : 100) * 1000 * 1000 };
		nanosleep(&nap, NULL);
		if (hp_counted_poll(c) == -ESRCH || (kill(c->pid, 0) < 0 && errno == ESRCH)) {
			snprintf(err, errlen, "process %d exited during the window: its inline counters went with it",
				 c->pid);
			return -ESRCH;
		}
		if ((r = tick(ctx, c, mono_s() - t0)) != 0)
			break;
	}
	if (r < 0)
		return r;
	hp_counted_hold(c); /* the window ends with the process stopped */
	*seconds = mono_s() - t0;
	struct hp_counted_counts *v = calloc(c->n + 1, sizeof(*v));
	if (!v) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->n; i++)
		if ((r = read_one(c, i, &v[i], err, errlen)) < 0) {
			if (r == -ESRCH)
				snprintf(err, errlen,
					 "process %d exited during the window: its inline counters went with it",
					 c->pid);
			hp_counted_counts_free(v, c->n);
			return r;
		}
	*out = v;
	return 0;
}

void hp_counted_counts_free(struct hp_counted_counts *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++) {
		free(v[i].blocks);
		hp_edge_result_free(&v[i].edges);
	}
	free(v);
}

int hp_counted_profile(const struct hp_counted *c, const struct hp_counted_counts *v, struct hp_profile *out)
{
	if (!c->exact)
		out->estimated = true;
	for (size_t i = 0; i < c->n; i++) {
		const struct hp_module *mod = c->fns[i].mod;
		const struct hp_function *f = c->fns[i].fn;
		for (uint32_t b = 0; b < f->nblocks; b++)
			if (hp_profile_add(out, mod, f, mod->blocks[f->block_start + b].offset,
					   (double)v[i].blocks[b]) < 0)
				return -ENOMEM;
		for (size_t k = 0; c->exact && k < v[i].edges.nedges; k++) {
			const struct hp_edge *e = &v[i].edges.edges[k];
			if (e->from == HP_EDGE_NO_BLOCK || e->to == HP_EDGE_NO_BLOCK || e->how != HP_EDGE_EXACT)
				continue; /* the entry, an exit, or an approximation: derived again by the plan */
			if (hp_profile_add_edge(out, mod, f, mod->blocks[f->block_start + e->from].offset,
						mod->blocks[f->block_start + e->to].offset, (double)e->count) < 0)
				return -ENOMEM;
		}
	}
	return 0;
}
