/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The catalog pump: sends the catalog pieces the backend asked for in
 * Welcome, a few chunks ahead of the network at a time, so a whole kernel's
 * catalog is never held in memory at once.
 */
#ifndef HOTPATH_DAEMON_CATALOG_PUMP_H
#define HOTPATH_DAEMON_CATALOG_PUMP_H

#include "hotpath/v1/agent.pb-c.h"

struct agent;
struct hp_stream;

/* Queue the pieces named in w's missing_digests. */
void hp_catalog_pump_start(struct agent *ag, const Hotpath__V1__Welcome *w);
/* Forget what is queued (a new stream starts). */
void hp_catalog_pump_reset(struct agent *ag);
/* Queue the pieces a CatalogRequest names (after the Welcome), unless queued already. */
void hp_catalog_pump_request(struct agent *ag, const Hotpath__V1__CatalogRequest *r);
/* Queue chunks while the stream's send queue has room. */
void hp_catalog_pump(struct agent *ag, struct hp_stream *st);

#endif
