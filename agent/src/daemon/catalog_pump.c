/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sending catalog pieces chunk by chunk. Welcome (or a later CatalogRequest,
 * for instance after a process was attached) names the digests the backend
 * lacks; each is found among the targets' modules (the kernel's or an
 * attached process's) and encoded lazily by daemon/catalog.c, at most
 * CATALOG_QUEUE chunks ahead of the network. The target being sent is
 * referenced, so a process that exits meanwhile keeps its model until its
 * piece is out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "daemon/agent.h"
#include "daemon/catalog_pump.h"
#include "daemon/log.h"
#include "daemon/transport.h"

/* Catalog chunks queued ahead of the network: enough to keep it busy,
 * little enough not to hold a whole kernel's catalog in memory. */
#define CATALOG_QUEUE 4

static void end_piece(struct agent *ag)
{
	hp_targets_release(&ag->targets, ag->catalog_target);
	ag->catalog_target = NULL;
	ag->catalog_active = false;
}

void hp_catalog_pump_reset(struct agent *ag)
{
	if (ag->catalog_active)
		end_piece(ag);
	ag->ncatalog = ag->catalog_pos = 0;
}

/* Queue one digest unless queued or being sent; false if no target has it. */
static bool enqueue(struct agent *ag, const char *digest)
{
	size_t mi;
	struct hp_target *t = hp_targets_by_digest(&ag->targets, digest, NULL, &mi);
	if (!t)
		return false;
	hp_targets_release(&ag->targets, t);
	if (ag->catalog_active && strcmp(ag->catalog_target->model->mods[ag->catalog_it.mod_idx].digest, digest) == 0)
		return true;
	for (size_t q = ag->catalog_pos; q < ag->ncatalog; q++)
		if (strcmp(ag->catalog_queue[q], digest) == 0)
			return true;
	if (HP_GROW(ag->catalog_queue, ag->cap_catalog, ag->ncatalog + 1))
		return true;
	snprintf(ag->catalog_queue[ag->ncatalog++], sizeof(*ag->catalog_queue), "%s", digest);
	return true;
}

void hp_catalog_pump_start(struct agent *ag, const Hotpath__V1__Welcome *w)
{
	hp_catalog_pump_reset(ag);
	for (size_t i = 0; i < w->n_missing_digests; i++)
		if (!enqueue(ag, w->missing_digests[i]))
			hp_log(false, "the backend asked for catalog %.64s, which this agent does not have; ignored",
			       w->missing_digests[i]);
	hp_log(true, "welcome: session %s, %zu catalog piece(s) to send", w->session_id, ag->ncatalog);
}

void hp_catalog_pump_request(struct agent *ag, const Hotpath__V1__CatalogRequest *r)
{
	for (size_t i = 0; i < r->n_digests; i++) {
		if (!enqueue(ag, r->digests[i]))
			hp_log(false, "the backend asked for catalog %.64s, which this agent does not have; ignored",
			       r->digests[i]);
		else
			hp_log(true, "the backend asked for catalog %.16s", r->digests[i]);
	}
}

void hp_catalog_pump(struct agent *ag, struct hp_stream *st)
{
	while (hp_stream_pending(st) < CATALOG_QUEUE) {
		if (!ag->catalog_active) {
			if (ag->catalog_pos >= ag->ncatalog)
				return;
			size_t mi;
			struct hp_target *t =
				hp_targets_by_digest(&ag->targets, ag->catalog_queue[ag->catalog_pos++], NULL, &mi);
			if (!t)
				continue; /* its process is gone and nobody uses the model any more */
			ag->catalog_target = t;
			hp_catalog_iter_init(&ag->catalog_it, t->model, mi);
			ag->catalog_active = true;
		}
		const struct hp_model *model = ag->catalog_target->model;
		uint8_t *buf;
		size_t len;
		uint32_t nf;
		bool last;
		int r = hp_catalog_next_chunk(&ag->catalog_it, HP_CATALOG_CHUNK_FUNCS, HP_CATALOG_CHUNK_BYTES, &buf,
					      &len, &nf, &last);
		if (r < 0) {
			hp_log(false, "cannot build a catalog chunk of %s: %s",
			       model->mods[ag->catalog_it.mod_idx].name, strerror(-r));
			end_piece(ag);
			continue;
		}
		if (r == 0) {
			end_piece(ag);
			continue;
		}
		hp_stream_send(st, buf, len);
		if (last) {
			const struct hp_module *m = &model->mods[ag->catalog_it.mod_idx];
			hp_log(true, "catalog %s (%zu functions) queued in %u chunk(s)", m->name, m->nfuncs,
			       ag->catalog_it.seq);
			end_piece(ag);
		}
	}
}
