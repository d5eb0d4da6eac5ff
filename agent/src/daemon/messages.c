/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Building the AgentMessages the daemon sends on its own initiative: Hello
 * (who this host is and what it can do, this run's instance id and clock,
 * the targets it serves, the measurements it runs and the installs its
 * journals hold), handed to the stream,
 * and one MetricBatch per interval, numbered and kept in the outbox until the
 * backend acknowledges it. Samples name their module by its position in
 * Hello.modules.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/agent.h"
#include "daemon/agent_config.h"
#include "daemon/log.h"
#include "daemon/messages.h"
#include "daemon/plan_commands.h"
#include "daemon/transport.h"

int hp_send_msg(struct hp_stream *st, Hotpath__V1__AgentMessage *m)
{
	size_t n = hotpath__v1__agent_message__get_packed_size(m);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf)
		return -ENOMEM;
	hotpath__v1__agent_message__pack(m, buf);
	return hp_stream_send(st, buf, n);
}

int hp_send_hello(struct agent *ag, struct hp_stream *st)
{
	Hotpath__V1__Hello h = HOTPATH__V1__HELLO__INIT;
	Hotpath__V1__CacheGeometry l1i = HOTPATH__V1__CACHE_GEOMETRY__INIT;
	h.host_id = ag->host.host_id;
	h.hostname = ag->host.hostname;
	h.kernel_release = ag->host.release;
	h.kernel_build_id = ag->host.build_id;
	h.cpu_model = ag->host.cpu_model;
	h.cpu_count = ag->host.cpu_count;
	l1i.size_bytes = ag->host.l1i.size_bytes;
	l1i.line_bytes = ag->host.l1i.line_bytes;
	l1i.ways = ag->host.l1i.ways;
	h.l1i = &l1i;

	Hotpath__V1__Capability caps[HP_CAP_MAX], *capp[HP_CAP_MAX];
	for (size_t i = 0; i < ag->caps.n; i++) {
		hotpath__v1__capability__init(&caps[i]);
		caps[i].name = (char *)ag->caps.caps[i].name;
		caps[i].available = ag->caps.caps[i].available;
		caps[i].detail = ag->caps.caps[i].detail;
		capp[i] = &caps[i];
	}
	h.n_capabilities = ag->caps.n;
	h.capabilities = capp;

	size_t nm = ag->model->nmods;
	Hotpath__V1__ModuleRef *mods = calloc(nm ? nm : 1, sizeof(*mods));
	Hotpath__V1__ModuleRef **modp = calloc(nm ? nm : 1, sizeof(*modp));
	if (!mods || !modp) {
		free(mods);
		free(modp);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nm; i++) {
		const struct hp_module *m = &ag->model->mods[i];
		hotpath__v1__module_ref__init(&mods[i]);
		mods[i].name = m->name;
		mods[i].digest = (char *)m->digest;
		mods[i].base_address = m->base;
		mods[i].function_count = (uint32_t)m->nfuncs;
		mods[i].block_count = ag->block_counts[i];
		mods[i].build_id = (char *)m->build_id;
		modp[i] = &mods[i];
	}
	h.n_modules = nm;
	h.modules = modp;
	h.agent_version = (char *)HP_AGENT_VERSION;
	h.metric_interval_ms = ag->interval_ms;
	h.sample_frequency_hz = ag->frequency;
	h.sample_event = (char *)(ag->sampler ? hp_sampler_event(ag->sampler) : "");
	h.parse_seconds = ag->parse_seconds;
	h.instance_id = ag->outbox.instance;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	h.clock_unix_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;

	Hotpath__V1__TargetsUpdate targets;
	void *targets_mem = NULL;
	Hotpath__V1__MeasurementInfo **infos = NULL;
	size_t ninfos = 0;
	int r = -ENOMEM;
	if (hp_targets_fill(&ag->targets, NULL, 0, &targets, &targets_mem) < 0)
		goto out;
	h.n_targets = targets.n_targets;
	h.targets = targets.targets;
	if (hp_measurements_infos(&ag->measurements, &infos, &ninfos) < 0) {
		hp_targets_fill_free(&targets, targets_mem);
		goto out;
	}
	h.n_measurements = ninfos;
	h.measurements = infos;
	Hotpath__V1__InstalledPlan **installs = NULL;
	size_t ninstalls = 0;
	int listed = hp_plans_hello(ag, &installs, &ninstalls);
	if (listed < 0) {
		hp_targets_fill_free(&targets, targets_mem);
		hp_measurements_infos_free(infos, ninfos);
		goto out;
	}
	h.n_installs = ninstalls;
	h.installs = installs;
	h.installs_listed = listed > 0;

	/* The host's labels from the config file. */
	Hotpath__V1__Label labels[HP_MAX_LABELS], *labelp[HP_MAX_LABELS];
	size_t nlabels = ag->config ? ag->config->nlabels : 0;
	for (size_t i = 0; i < nlabels; i++) {
		hotpath__v1__label__init(&labels[i]);
		labels[i].key = (char *)ag->config->labels[i].key;
		labels[i].value = (char *)ag->config->labels[i].value;
		labelp[i] = &labels[i];
	}
	h.n_labels = nlabels;
	h.labels = labelp;

	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_HELLO;
	msg.hello = &h;
	r = hp_send_msg(st, &msg);
	hp_targets_fill_free(&targets, targets_mem);
	hp_measurements_infos_free(infos, ninfos);
	hp_plans_hello_free(installs, ninstalls);
out:
	free(mods);
	free(modp);
	return r;
}

/* Frames of stack definitions one batch carries at most, so a batch stays far below the 8 MiB message
 * limit; counts of stacks beyond it are reported as dropped samples. */
#define MAX_DEFINED_FRAMES 250000

/* A batch's StackSamples under construction; every array is freed by stacks_free. */
struct stacks_msg {
	Hotpath__V1__StackSamples ss;
	uint64_t *ids;
	Hotpath__V1__Stack *defs, **defp;
	Hotpath__V1__Frame *frames, **framep;
	Hotpath__V1__FrameModule *mods, **modp;
	Hotpath__V1__StackCount *counts, **countp;
	char **comms;
};

static void stacks_free(struct stacks_msg *sm)
{
	free(sm->ids);
	free(sm->defs);
	free(sm->defp);
	free(sm->frames);
	free(sm->framep);
	free(sm->mods);
	free(sm->modp);
	free(sm->counts);
	free(sm->countp);
	free(sm->comms);
}

/* Module position of a frame in the batch's list, added on first use. */
static uint32_t frame_module(struct agent *ag, const struct hp_stack_set *set, const struct hp_frame *f,
			     struct stacks_msg *sm, int32_t *kmap, int32_t *pmap, int32_t *addr_map)
{
	int32_t *slot = f->kind == HP_FRAME_KERNEL ? &kmap[f->mod] :
			f->kind == HP_FRAME_USER   ? &pmap[f->mod] :
						     &addr_map[f->kind == HP_FRAME_KERNEL_ADDR ? 0 : 1];
	if (*slot >= 0)
		return (uint32_t)*slot;
	Hotpath__V1__FrameModule *fm = &sm->mods[sm->ss.n_modules];
	hotpath__v1__frame_module__init(fm);
	fm->kind = f->kind;
	if (f->kind == HP_FRAME_KERNEL) {
		fm->digest = ag->model->mods[f->mod].digest;
		fm->name = ag->model->mods[f->mod].name;
	} else if (f->kind == HP_FRAME_USER) {
		fm->name = set->paths[f->mod];
	}
	sm->modp[sm->ss.n_modules] = fm;
	*slot = (int32_t)sm->ss.n_modules++;
	return (uint32_t)*slot;
}

/* Build the interval's StackSamples: every count, and the definitions the backend may lack. */
static int build_stacks(struct agent *ag, const struct hp_stack_set *set, struct stacks_msg *sm, int64_t now_ms)
{
	size_t ns = set->nstacks ? set->nstacks : 1, nm = set->npaths + ag->model->nmods + 2;
	memset(sm, 0, sizeof(*sm));
	hotpath__v1__stack_samples__init(&sm->ss);
	sm->ids = calloc(ns, sizeof(*sm->ids));
	sm->defs = calloc(ns, sizeof(*sm->defs));
	sm->defp = calloc(ns, sizeof(*sm->defp));
	sm->frames = calloc(set->nframes ? set->nframes : 1, sizeof(*sm->frames));
	sm->framep = calloc(set->nframes ? set->nframes : 1, sizeof(*sm->framep));
	sm->mods = calloc(nm, sizeof(*sm->mods));
	sm->modp = calloc(nm, sizeof(*sm->modp));
	sm->counts = calloc(set->ncounts ? set->ncounts : 1, sizeof(*sm->counts));
	sm->countp = calloc(set->ncounts ? set->ncounts : 1, sizeof(*sm->countp));
	sm->comms = calloc(set->ncomms ? set->ncomms : 1, sizeof(*sm->comms));
	int32_t *kmap = malloc(sizeof(int32_t) * (ag->model->nmods ? ag->model->nmods : 1));
	int32_t *pmap = malloc(sizeof(int32_t) * (set->npaths ? set->npaths : 1));
	int32_t addr_map[2] = { -1, -1 };
	if (!sm->ids || !sm->defs || !sm->defp || !sm->frames || !sm->framep || !sm->mods || !sm->modp || !sm->counts ||
	    !sm->countp || !sm->comms || !kmap || !pmap) {
		free(kmap);
		free(pmap);
		stacks_free(sm);
		return -ENOMEM;
	}
	memset(kmap, 0xff, sizeof(int32_t) * ag->model->nmods);
	memset(pmap, 0xff, sizeof(int32_t) * set->npaths);
	size_t nframes = 0;
	for (size_t i = 0; i < set->nstacks; i++) {
		const struct hp_stack *st = &set->stacks[i];
		sm->ids[i] = hp_stack_id(ag->model, set, st);
		if (!hp_stack_defs_needed(&ag->stack_defs, sm->ids[i], now_ms))
			continue;
		if (sm->ids[i] == 0 || nframes + st->nframes > MAX_DEFINED_FRAMES) {
			sm->ids[i] = 0; /* not defined in this batch: its samples are dropped */
			continue;
		}
		Hotpath__V1__Stack *d = &sm->defs[sm->ss.n_stacks];
		hotpath__v1__stack__init(d);
		d->id = sm->ids[i];
		d->frames = &sm->framep[nframes];
		d->n_frames = st->nframes;
		for (uint32_t k = 0; k < st->nframes; k++) {
			const struct hp_frame *f = &set->frames[st->first + k];
			Hotpath__V1__Frame *pf = &sm->frames[nframes];
			hotpath__v1__frame__init(pf);
			pf->module = frame_module(ag, set, f, sm, kmap, pmap, addr_map);
			pf->function_index = f->kind == HP_FRAME_KERNEL ? f->fn : 0;
			pf->offset = f->offset;
			sm->framep[nframes++] = pf;
		}
		sm->defp[sm->ss.n_stacks++] = d;
	}
	free(kmap);
	free(pmap);
	uint64_t dropped = set->dropped, counted = 0;
	for (size_t i = 0; i < set->ncounts; i++) {
		const struct hp_stack_count *c = &set->counts[i];
		if (sm->ids[c->stack] == 0) {
			dropped += c->count;
			continue;
		}
		Hotpath__V1__StackCount *pc = &sm->counts[sm->ss.n_counts];
		hotpath__v1__stack_count__init(pc);
		pc->stack_id = sm->ids[c->stack];
		pc->pid = c->pid;
		pc->comm = c->comm;
		pc->cpu = c->cpu;
		pc->count = c->count;
		counted += c->count;
		sm->countp[sm->ss.n_counts++] = pc;
	}
	for (size_t i = 0; i < set->ncomms; i++)
		sm->comms[i] = set->comms[i];
	sm->ss.stacks = sm->defp;
	sm->ss.modules = sm->modp;
	sm->ss.comms = sm->comms;
	sm->ss.n_comms = set->ncomms;
	sm->ss.counts = sm->countp;
	sm->ss.stack_samples = counted;
	sm->ss.dropped_samples = dropped;
	sm->ss.max_depth = hp_sampler_stack_depth(ag->sampler);
	sm->ss.depth_limited_samples = set->at_depth_limit;
	return 0;
}

int hp_queue_batch(struct agent *ag, const struct hp_sample_interval *iv)
{
	Hotpath__V1__MetricBatch b = HOTPATH__V1__METRIC_BATCH__INIT;
	b.interval_start_unix_ns = iv->start_unix_ns;
	b.interval_ms = (uint32_t)((iv->end_unix_ns - iv->start_unix_ns + 500000) / 1000000);
	b.total_samples = iv->total;
	b.user_samples = iv->user;
	b.unmapped_samples = iv->unmapped;
	b.lost_samples = iv->lost;
	b.idle_samples = iv->idle;
	b.idle_by_context = true;
	size_t n = iv->nblocks, npcs = 0;
	for (size_t i = 0; i < n; i++)
		npcs += iv->blocks[i].npcs;
	Hotpath__V1__BlockSamples *bs = calloc(n ? n : 1, sizeof(*bs));
	Hotpath__V1__BlockSamples **bp = calloc(n ? n : 1, sizeof(*bp));
	uint32_t *pc_off = calloc(npcs ? npcs : 1, sizeof(*pc_off));
	uint64_t *pc_count = calloc(npcs ? npcs : 1, sizeof(*pc_count));
	struct stacks_msg sm;
	bool with_stacks = ag->sampler && hp_sampler_stack_depth(ag->sampler) > 0;
	int64_t now_ms = hp_mono_ms();
	if (!bs || !bp || !pc_off || !pc_count || (with_stacks && build_stacks(ag, &iv->stacks, &sm, now_ms) < 0)) {
		free(bs);
		free(bp);
		free(pc_off);
		free(pc_count);
		return -ENOMEM;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		const struct hp_block_count *bc = &iv->blocks[i];
		hotpath__v1__block_samples__init(&bs[i]);
		bs[i].module_index = bc->mod;
		bs[i].function_index = bc->fn;
		bs[i].block_offset = bc->offset;
		bs[i].count = bc->count;
		bs[i].idle = bc->idle;
		bs[i].instruction_offsets = &pc_off[k];
		bs[i].instruction_counts = &pc_count[k];
		bs[i].n_instruction_offsets = bs[i].n_instruction_counts = bc->npcs;
		for (size_t j = 0; j < bc->npcs; j++, k++) {
			pc_off[k] = bc->pcs[j].offset;
			pc_count[k] = bc->pcs[j].count;
		}
		bp[i] = &bs[i];
	}
	b.n_blocks = n;
	b.blocks = bp;
	if (with_stacks)
		b.stacks = &sm.ss;
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_METRICS;
	msg.metrics = &b;
	uint64_t seq = ag->outbox.next_seq;
	int r = hp_outbox_add(&ag->outbox, &msg, iv->start_unix_ns, iv->end_unix_ns);
	if (r >= 0 && with_stacks)
		for (size_t i = 0; i < sm.ss.n_stacks; i++)
			hp_stack_defs_sent(&ag->stack_defs, sm.defs[i].id, seq);
	if (with_stacks)
		stacks_free(&sm);
	free(bs);
	free(bp);
	free(pc_off);
	free(pc_count);
	return r;
}
