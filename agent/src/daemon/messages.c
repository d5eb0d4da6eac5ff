/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Building the AgentMessages the daemon sends on its own initiative: Hello
 * (who this host is and what it can do, this run's instance id and clock),
 * handed to the stream, and one MetricBatch per interval, numbered and kept
 * in the outbox until the backend acknowledges it.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "daemon/agent.h"
#include "daemon/messages.h"
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

	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_HELLO;
	msg.hello = &h;
	int r = hp_send_msg(st, &msg);
	free(mods);
	free(modp);
	return r;
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
	size_t n = iv->nblocks;
	Hotpath__V1__BlockSamples *bs = calloc(n ? n : 1, sizeof(*bs));
	Hotpath__V1__BlockSamples **bp = calloc(n ? n : 1, sizeof(*bp));
	if (!bs || !bp) {
		free(bs);
		free(bp);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		hotpath__v1__block_samples__init(&bs[i]);
		bs[i].module = ag->model->mods[iv->blocks[i].mod].name;
		bs[i].function_index = iv->blocks[i].fn;
		bs[i].block_offset = iv->blocks[i].offset;
		bs[i].count = iv->blocks[i].count;
		bp[i] = &bs[i];
	}
	b.n_blocks = n;
	b.blocks = bp;
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_METRICS;
	msg.metrics = &b;
	int r = hp_outbox_add(&ag->outbox, &msg, iv->start_unix_ns, iv->end_unix_ns);
	free(bs);
	free(bp);
	return r;
}
