// SPDX-License-Identifier: Apache-2.0
/*
 * From kernel counters to values. A timer's cumulative value at time t is
 *   W(t) = (exit - entry of every completed call) + (t - entry of every open one)
 * so W is continuous and grows by exactly the thread-time spent inside during
 * any interval; the interval's value is W(t1) - W(t0) and its concurrency
 * (threads inside, averaged) is that divided by t1 - t0. Open frames come from
 * the frame map; their virtual part from the thread's virtual clock (the
 * time accumulated at its switch-outs plus, if it runs now, the time since its
 * switch-in). A frame whose thread died inside the function is credited up to
 * the read that notices it and removed. Reading the counters and the frames
 * is not atomic: a call that ends in between is counted once in each or in
 * neither, an error of at most one call's duration that the next interval
 * gives back. Sampled rows take their samples from the sampler.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <bpf/libbpf.h>

#include "base/grow.h"
#include "host/processes.h"
#include "measure/measure_internal.h"

double hp_mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t hp_unix_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t sample_key(uint32_t mod, uint32_t fn, uint32_t off, bool function)
{
	return ((uint64_t)(mod + 1) << 48) ^ ((uint64_t)fn << 24) ^ off ^ (function ? 1ull << 63 : 0);
}

static uint64_t mix(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return k;
}

/* Index of the sampled rows by (module, function, block offset), built once. */
static int build_sample_index(struct hp_measure *h)
{
	size_t cap = 16;
	while (cap < h->nrows * 2 + 2)
		cap *= 2;
	h->sample_keys = calloc(cap, sizeof(uint64_t));
	h->sample_rows = calloc(cap, sizeof(uint32_t));
	if (!h->sample_keys || !h->sample_rows)
		return -ENOMEM;
	h->sample_cap = cap;
	for (size_t i = 0; i < h->nrows; i++) {
		if (!h->sampled_row[i])
			continue;
		const struct hp_row *r = &h->rows[i];
		bool fn = r->kind == HP_ROW_FUNCTION;
		uint32_t off = fn ? 0 : h->pub[i].block_offset;
		uint64_t key = sample_key(r->mod, r->fn, off, fn);
		size_t s = mix(key) & (cap - 1);
		while (h->sample_keys[s])
			s = (s + 1) & (cap - 1);
		h->sample_keys[s] = key;
		h->sample_rows[s] = (uint32_t)i;
	}
	return 0;
}

static uint32_t sample_row(const struct hp_measure *h, uint64_t key)
{
	size_t s = mix(key) & (h->sample_cap - 1);
	while (h->sample_keys[s]) {
		if (h->sample_keys[s] == key)
			return h->sample_rows[s];
		s = (s + 1) & (h->sample_cap - 1);
	}
	return HP_ROW_NONE;
}

static int take_samples(struct hp_measure *h)
{
	struct hp_sample_interval iv;
	if (!h->sample_keys && build_sample_index(h) < 0)
		return -ENOMEM;
	int r = hp_sampler_take(h->sampler, &iv);
	if (r < 0)
		return r;
	h->samples_total += iv.total;
	h->samples_lost += iv.lost;
	for (size_t i = 0; i < iv.nblocks; i++) {
		const struct hp_block_count *bc = &iv.blocks[i];
		uint32_t row = sample_row(h, sample_key(bc->mod, bc->fn, bc->offset, false));
		if (row != HP_ROW_NONE)
			h->samples[row] += bc->count;
		row = sample_row(h, sample_key(bc->mod, bc->fn, 0, true));
		if (row != HP_ROW_NONE)
			h->samples[row] += bc->count;
	}
	hp_sample_interval_free(&iv);
	return 0;
}

static bool vtimed(const struct hp_measure *h, uint32_t slot)
{
	const struct hp_metric_info *mi = &h->pub[slot].metric[HP_METRIC_VTIME];
	return mi->requested && mi->available;
}

/* Add the open part of every running timer at now_ns into out. */
static int add_open_frames(struct hp_measure *h, struct hp_cum *out, uint64_t now_ns)
{
	int ncpus = libbpf_num_possible_cpus();
	struct hp_mp_cpu *cpus = calloc(ncpus > 0 ? (size_t)ncpus : 1, sizeof(*cpus));
	if (!cpus)
		return -ENOMEM;
	if (hp_probes_read_cpus(h->probes, cpus, ncpus) < 0)
		memset(cpus, 0, (size_t)ncpus * sizeof(*cpus));
	if (!h->frames) {
		h->frames_cap = 65536;
		if (!(h->frames = malloc(h->frames_cap * sizeof(*h->frames)))) {
			free(cpus);
			return -ENOMEM;
		}
	}
	int n = hp_probes_read_frames(h->probes, h->frames, h->frames_cap);
	for (int i = 0; i < n; i++) {
		const struct hp_probe_frame *fr = &h->frames[i];
		uint32_t slot = fr->key.slot;
		if (slot >= h->nrows)
			continue;
		double wall = now_ns > fr->frame.entry_ns ? (double)(now_ns - fr->frame.entry_ns) : 0;
		double vt = 0;
		uint64_t v;
		if (vtimed(h, slot) && hp_probes_vclock(h->probes, fr->key.thread, now_ns, cpus, ncpus, &v) == 0 &&
		    v > fr->frame.entry_vclock)
			vt = (double)(v - fr->frame.entry_vclock);
		bool idle = fr->key.thread & HP_MP_IDLE_THREAD;
		if (!idle && !hp_thread_alive((int)fr->frame.tgid, (int)fr->key.thread)) {
			h->dead_wall[slot] += wall;
			h->dead_vtime[slot] += vt;
			hp_probes_delete_frame(h->probes, &fr->key);
			continue;
		}
		out[slot].wall_ns += wall;
		out[slot].vtime_ns += vt;
	}
	free(cpus);
	return n < 0 ? n : 0;
}

int hp_measure_cumulative(struct hp_measure *h, struct hp_cum *out, double *t_mono, int64_t *t_unix)
{
	if (h->final) {
		memcpy(out, h->final, h->nrows * sizeof(*out));
		*t_mono = h->t_final;
		*t_unix = h->unix_final;
		return 0;
	}
	memset(out, 0, h->nrows * sizeof(*out));
	uint64_t now_ns = mono_ns();
	*t_mono = (double)now_ns / 1e9;
	*t_unix = hp_unix_now();
	if (h->probes) {
		struct hp_mp_counts *c = calloc(h->nrows ? h->nrows : 1, sizeof(*c));
		if (!c)
			return -ENOMEM;
		int r = hp_probes_read_counts(h->probes, c);
		for (size_t i = 0; !r && i < h->nrows; i++) {
			out[i].count = c[i].count;
			out[i].exits = c[i].exits;
			out[i].wall_ns = (double)c[i].wall_ns + h->dead_wall[i];
			out[i].vtime_ns = (double)c[i].vtime_ns + h->dead_vtime[i];
		}
		free(c);
		if (r < 0)
			return r;
		if ((r = add_open_frames(h, out, now_ns)) < 0)
			return r;
	}
	if (h->sampler) {
		int r = take_samples(h);
		if (r < 0)
			return r;
		for (size_t i = 0; i < h->nrows; i++)
			if (h->sampled_row[i])
				out[i].count = out[i].samples = h->samples[i];
	}
	return 0;
}

static uint64_t du(uint64_t a, uint64_t b)
{
	return b > a ? b - a : 0;
}

static double dd(double a, double b)
{
	return b > a ? b - a : 0;
}

static void set_value(struct hp_metric_value *v, const struct hp_metric_info *mi, const char *unit, double value,
		      uint64_t total)
{
	v->present = true;
	v->value = value;
	v->total = total;
	v->unit = unit;
	v->label = mi->label;
	v->mechanism = mi->mechanism;
}

int hp_measure_fill_reading(struct hp_measure *h, const struct hp_cum *from, const struct hp_cum *to, double t0,
			    double t1, int64_t u0, int64_t u1, struct hp_measure_reading *out)
{
	memset(out, 0, sizeof(*out));
	out->start_unix_ns = u0;
	out->end_unix_ns = u1;
	out->seconds = t1 > t0 ? t1 - t0 : 0;
	out->state = h->state;
	out->nrows = h->nrows;
	out->rows = calloc(h->nrows ? h->nrows : 1, sizeof(*out->rows));
	if (!out->rows)
		return -ENOMEM;
	double span_ns = out->seconds * 1e9;
	for (size_t i = 0; i < h->nrows; i++) {
		const struct hp_measure_row *p = &h->pub[i];
		struct hp_measure_row_values *rv = &out->rows[i];
		bool block = p->kind == HP_ROW_BLOCK;
		uint64_t count = du(from[i].count, to[i].count);
		double wall = dd(from[i].wall_ns, to[i].wall_ns), vtime = dd(from[i].vtime_ns, to[i].vtime_ns);
		rv->exits = du(from[i].exits, to[i].exits);
		rv->samples = du(from[i].samples, to[i].samples);
		for (int m = 0; m < HP_METRIC_N; m++) {
			const struct hp_metric_info *mi = &p->metric[m];
			const char *unit = hp_metric_unit((enum hp_metric)m, block);
			if (!mi->requested || !mi->available)
				continue;
			switch (m) {
			case HP_METRIC_COUNT:
				set_value(&rv->v[m], mi, h->sampled_row[i] ? "samples" : unit, (double)count, count);
				break;
			case HP_METRIC_WALL:
				set_value(&rv->v[m], mi, unit, wall, (uint64_t)(wall + 0.5));
				break;
			case HP_METRIC_VTIME:
				set_value(&rv->v[m], mi, unit, vtime, (uint64_t)(vtime + 0.5));
				break;
			case HP_METRIC_CONCURRENCY:
				set_value(&rv->v[m], mi, unit, span_ns > 0 ? wall / span_ns : 0, 0);
				break;
			}
		}
		const struct hp_metric_info *cm = &p->metric[HP_METRIC_COUNT];
		bool calls = cm->requested && cm->available && !h->sampled_row[i] && count > 0;
		if (calls && rv->v[HP_METRIC_WALL].present)
			set_value(&rv->wall_per_call, &p->metric[HP_METRIC_WALL], "ns/call", wall / (double)count, 0);
		if (calls && rv->v[HP_METRIC_VTIME].present)
			set_value(&rv->vtime_per_call, &p->metric[HP_METRIC_VTIME], "ns/call", vtime / (double)count,
				  0);
	}
	if (h->probes) {
		struct hp_mp_stats st;
		if (hp_probes_read_stats(h->probes, &st) == 0) {
			out->frames_dropped = st.frames_dropped + st.vthreads_dropped;
			out->exits_unmatched = st.exits_unmatched;
		}
	}
	out->samples_total = h->samples_total;
	out->samples_lost = h->samples_lost;
	return 0;
}

void hp_measure_reading_free(struct hp_measure_reading *r)
{
	free(r->rows);
	r->rows = NULL;
	r->nrows = 0;
}

int hp_measure_edges(struct hp_measure *h, const struct hp_measure_reading *r, struct hp_function_edges **out,
		     size_t *nout)
{
	return hp_measure_edges_from(h, r, false, out, nout);
}

int hp_measure_edges_from(struct hp_measure *h, const struct hp_measure_reading *r, bool from_sampled,
			  struct hp_function_edges **out, size_t *nout)
{
	struct hp_function_edges *v = NULL;
	size_t n = 0, cap = 0;
	*out = NULL;
	*nout = 0;
	/* Each function row's block rows, as linked lists through next_block. */
	uint32_t *first_block = malloc((h->nrows + 1) * sizeof(uint32_t));
	uint32_t *next_block = malloc((h->nrows + 1) * sizeof(uint32_t));
	if (!first_block || !next_block) {
		free(first_block);
		free(next_block);
		return -ENOMEM;
	}
	for (size_t j = 0; j < h->nrows; j++)
		first_block[j] = next_block[j] = HP_ROW_NONE;
	for (size_t j = h->nrows; j-- > 0;) {
		uint32_t fr = h->pub[j].function_row;
		if (h->pub[j].kind == HP_ROW_BLOCK && fr != HP_ROW_NONE) {
			next_block[j] = first_block[fr];
			first_block[fr] = (uint32_t)j;
		}
	}
	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->nrows && i < r->nrows; i++) {
		if (h->pub[i].kind != HP_ROW_FUNCTION)
			continue;
		const struct hp_row *fr = &h->rows[i];
		const struct hp_module *mod = &h->model->mods[fr->mod];
		const struct hp_function *f = &mod->funcs[fr->fn];
		uint32_t *brows = malloc((f->nblocks ? f->nblocks : 1) * sizeof(uint32_t));
		uint64_t *counts = calloc(f->nblocks ? f->nblocks : 1, sizeof(uint64_t));
		if (!brows || !counts) {
			free(brows);
			free(counts);
			goto nomem;
		}
		for (uint32_t b = 0; b < f->nblocks; b++)
			brows[b] = HP_ROW_NONE;
		for (uint32_t j = first_block[i]; j != HP_ROW_NONE; j = next_block[j])
			brows[h->rows[j].block] = j;
		/* Blocks with exact counts, plus unreachable traps (0 by construction);
		 * others (refused by the kernel) are unknowns of the flow network. */
		bool *measured = calloc(f->nblocks ? f->nblocks : 1, sizeof(bool));
		bool any = false, sampled = false;
		for (uint32_t b = 0; measured && b < f->nblocks; b++) {
			if (brows[b] == HP_ROW_NONE) {
				measured[b] = hp_block_unreachable_trap(h->model, mod, f, b);
				counts[b] = 0;
				continue;
			}
			const struct hp_metric_value *c = &r->rows[brows[b]].v[HP_METRIC_COUNT];
			measured[b] = c->present && c->label == HP_LABEL_EXACT;
			sampled |= c->present && c->label == HP_LABEL_SAMPLED;
			any |= measured[b];
			counts[b] = measured[b] ? c->total : 0;
		}
		bool all = measured && any && !sampled;
		/* Sampled block counts (where the kernel refuses probes): the
		 * same network over sample counts, every edge an estimate. */
		bool by_samples = measured && from_sampled && sampled && !any;
		for (uint32_t b = 0; by_samples && b < f->nblocks; b++) {
			if (brows[b] == HP_ROW_NONE)
				continue;
			const struct hp_metric_value *c = &r->rows[brows[b]].v[HP_METRIC_COUNT];
			measured[b] = c->present && c->label == HP_LABEL_SAMPLED;
			counts[b] = measured[b] ? c->total : 0;
		}
		if (!all && !by_samples) {
			free(brows);
			free(counts);
			free(measured);
			continue;
		}
		const struct hp_metric_value *ec = &r->rows[i].v[HP_METRIC_COUNT];
		uint64_t entries = ec->total;
		if (HP_GROW(v, cap, n + 1)) {
			free(brows);
			free(counts);
			free(measured);
			goto nomem;
		}
		v[n].function_row = i;
		v[n].sampled = by_samples;
		v[n].block_rows = brows;
		v[n].nblocks = f->nblocks;
		v[n].block_offsets = malloc((f->nblocks ? f->nblocks : 1) * sizeof(uint32_t));
		for (uint32_t b = 0; v[n].block_offsets && b < f->nblocks; b++)
			v[n].block_offsets[b] = mod->blocks[f->block_start + b].offset;
		int e = v[n].block_offsets ?
				hp_edges_derive(mod, f, counts, measured,
						!by_samples && ec->present && ec->label == HP_LABEL_EXACT ? &entries :
													    NULL,
						&v[n].edges) :
				-ENOMEM;
		free(measured);
		free(counts);
		n++;
		if (e < 0)
			goto nomem;
	}
	pthread_mutex_unlock(&h->lock);
	free(first_block);
	free(next_block);
	*out = v;
	*nout = n;
	return 0;
nomem:
	pthread_mutex_unlock(&h->lock);
	free(first_block);
	free(next_block);
	hp_measure_edges_free(v, n);
	return -ENOMEM;
}

void hp_measure_edges_free(struct hp_function_edges *e, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		hp_edge_result_free(&e[i].edges);
		free(e[i].block_rows);
		free(e[i].block_offsets);
	}
	free(e);
}
