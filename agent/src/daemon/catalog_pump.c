/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sending catalog pieces chunk by chunk. Welcome names the digests the backend
 * lacks; each is matched to a module of the model and encoded lazily by
 * daemon/catalog.c, at most CATALOG_QUEUE chunks ahead of the network.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/agent.h"
#include "daemon/catalog_pump.h"
#include "daemon/log.h"
#include "daemon/transport.h"

/* Catalog chunks queued ahead of the network: enough to keep it busy,
 * little enough not to hold a whole kernel's catalog in memory. */
#define CATALOG_QUEUE 4

void hp_catalog_pump_reset(struct agent *ag)
{
	ag->ncatalog = ag->catalog_pos = 0;
	ag->catalog_active = false;
}

void hp_catalog_pump_start(struct agent *ag, const Hotpath__V1__Welcome *w)
{
	free(ag->catalog_queue);
	ag->catalog_queue = calloc(w->n_missing_digests ? w->n_missing_digests : 1, sizeof(size_t));
	hp_catalog_pump_reset(ag);
	for (size_t i = 0; i < w->n_missing_digests && ag->catalog_queue; i++) {
		bool found = false;
		for (size_t m = 0; m < ag->model->nmods; m++) {
			if (strcmp(ag->model->mods[m].digest, w->missing_digests[i]) == 0) {
				ag->catalog_queue[ag->ncatalog++] = m;
				found = true;
				break;
			}
		}
		if (!found)
			hp_log(false, "the backend asked for catalog %.64s, which this agent does not have; ignored",
			       w->missing_digests[i]);
	}
	hp_log(true, "welcome: session %s, %zu catalog piece(s) to send", w->session_id, ag->ncatalog);
}

void hp_catalog_pump_request(struct agent *ag, const Hotpath__V1__CatalogRequest *r)
{
	for (size_t i = 0; i < r->n_digests; i++) {
		size_t m = 0;
		while (m < ag->model->nmods && strcmp(ag->model->mods[m].digest, r->digests[i]) != 0)
			m++;
		if (m == ag->model->nmods) {
			hp_log(false, "the backend asked for catalog %.64s, which this agent does not have; ignored",
			       r->digests[i]);
			continue;
		}
		bool queued = ag->catalog_active && ag->catalog_it.mod_idx == m;
		for (size_t q = ag->catalog_pos; q < ag->ncatalog && !queued; q++)
			queued = ag->catalog_queue[q] == m;
		if (queued)
			continue;
		size_t *grown = realloc(ag->catalog_queue, (ag->ncatalog + 1) * sizeof(*grown));
		if (!grown)
			return;
		ag->catalog_queue = grown;
		ag->catalog_queue[ag->ncatalog++] = m;
		hp_log(true, "the backend asked again for catalog %s", ag->model->mods[m].name);
	}
}

void hp_catalog_pump(struct agent *ag, struct hp_stream *st)
{
	while (hp_stream_pending(st) < CATALOG_QUEUE) {
		if (!ag->catalog_active) {
			if (ag->catalog_pos >= ag->ncatalog)
				return;
			hp_catalog_iter_init(&ag->catalog_it, ag->model, ag->catalog_queue[ag->catalog_pos++]);
			ag->catalog_active = true;
		}
		uint8_t *buf;
		size_t len;
		uint32_t nf;
		bool last;
		int r = hp_catalog_next_chunk(&ag->catalog_it, HP_CATALOG_CHUNK_FUNCS, HP_CATALOG_CHUNK_BYTES, &buf,
					      &len, &nf, &last);
		if (r < 0) {
			hp_log(false, "cannot build a catalog chunk of %s: %s",
			       ag->model->mods[ag->catalog_it.mod_idx].name, strerror(-r));
			ag->catalog_active = false;
			continue;
		}
		if (r == 0) {
			ag->catalog_active = false;
			continue;
		}
		hp_stream_send(st, buf, len);
		if (last) {
			const struct hp_module *m = &ag->model->mods[ag->catalog_it.mod_idx];
			hp_log(true, "catalog %s (%zu functions) queued in %u chunk(s)", m->name, m->nfuncs,
			       ag->catalog_it.seq);
			ag->catalog_active = false;
		}
	}
}
