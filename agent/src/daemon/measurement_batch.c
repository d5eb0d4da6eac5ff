// SPDX-License-Identifier: Apache-2.0
/*
 * One interval of a measurement as a MeasurementBatch (see
 * measurement_batch.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/measurement_batch.h"
#include "daemon/measurement_proto.h"
#include "measure/edges.h"

/* Strings a batch names by position. */
struct interned {
	const char *s[64];
	size_t n;
};

static uint32_t intern(struct interned *t, const char *s)
{
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->s[i], s) == 0)
			return (uint32_t)i;
	if (t->n == sizeof(t->s) / sizeof(t->s[0]))
		return 0;
	t->s[t->n] = s;
	return (uint32_t)t->n++;
}

static bool add_value(Hotpath__V1__MetricValue *slot, const struct hp_metric_value *v, Hotpath__V1__Metric metric,
		      struct interned *units, struct interned *mechs)
{
	if (!v->present)
		return false;
	hotpath__v1__metric_value__init(slot);
	slot->metric = metric;
	slot->value = v->value;
	slot->total = v->total;
	slot->unit = intern(units, v->unit ? v->unit : "");
	slot->label = (Hotpath__V1__ValueLabel)(v->label + 1);
	slot->mechanism = intern(mechs, v->mechanism ? v->mechanism : "");
	return true;
}

int hp_measurement_queue_batch(struct hp_outbox *outbox, const char *id, struct hp_measure *h,
			       const struct hp_measure_reading *r, int state, const char *detail)
{
	size_t n = r->nrows, per = HP_METRIC_N + 2;
	Hotpath__V1__ResourceValues *rv = calloc(n ? n : 1, sizeof(*rv));
	Hotpath__V1__ResourceValues **rvp = calloc(n ? n : 1, sizeof(*rvp));
	Hotpath__V1__MetricValue *vals = calloc(n ? n * per : 1, sizeof(*vals));
	Hotpath__V1__MetricValue **valp = calloc(n ? n * per : 1, sizeof(*valp));
	Hotpath__V1__EdgeCount *ec = NULL, **ecp = NULL;
	int ret = -ENOMEM;
	if (!rv || !rvp || !vals || !valp)
		goto out;
	struct interned units = { 0 }, mechs = { 0 };
	size_t nrv = 0;
	for (size_t i = 0; i < n; i++) {
		const struct hp_measure_row_values *row = &r->rows[i];
		Hotpath__V1__MetricValue *v = &vals[i * per];
		Hotpath__V1__MetricValue **vp = &valp[i * per];
		size_t k = 0;
		bool nonzero = row->samples || row->exits;
		for (int m = 0; m < HP_METRIC_N; m++)
			if (add_value(&v[k], &row->v[m], hp_metric_proto(m), &units, &mechs)) {
				nonzero |= v[k].value != 0;
				vp[k] = &v[k];
				k++;
			}
		if (add_value(&v[k], &row->wall_per_call, HOTPATH__V1__METRIC__METRIC_WALL_PER_CALL_NS, &units, &mechs))
			vp[k] = &v[k], k++;
		if (add_value(&v[k], &row->vtime_per_call, HOTPATH__V1__METRIC__METRIC_VTIME_PER_CALL_NS, &units,
			      &mechs))
			vp[k] = &v[k], k++;
		if (!k || !nonzero)
			continue;
		hotpath__v1__resource_values__init(&rv[nrv]);
		rv[nrv].resource = (uint32_t)i;
		rv[nrv].n_values = k;
		rv[nrv].values = vp;
		rv[nrv].samples = row->samples;
		rv[nrv].exits = row->exits;
		rvp[nrv] = &rv[nrv];
		nrv++;
	}
	Hotpath__V1__MeasurementBatch b = HOTPATH__V1__MEASUREMENT_BATCH__INIT;
	b.measurement_id = (char *)id;
	b.interval_start_unix_ns = r->start_unix_ns;
	b.interval_end_unix_ns = r->end_unix_ns > r->start_unix_ns ? r->end_unix_ns : r->start_unix_ns + 1;
	b.state = (Hotpath__V1__MeasurementState)state;
	b.detail = (char *)(detail ? detail : "");
	b.n_resources = nrv;
	b.resources = rvp;
	b.n_units = units.n;
	b.units = (char **)units.s;
	b.n_mechanisms = mechs.n;
	b.mechanisms = (char **)mechs.s;
	b.samples_total = r->samples_total;
	b.samples_lost = r->samples_lost;
	b.frames_dropped = r->frames_dropped;
	b.exits_unmatched = r->exits_unmatched;
	/* Edges of the functions measured with their blocks (measure/edges.c);
	 * edges that carried nothing in the interval are left out. */
	struct hp_function_edges *fe = NULL;
	size_t nfe = 0, nedges = 0;
	if (hp_measure_edges_from(h, r, true, &fe, &nfe) < 0)
		goto out;
	for (size_t i = 0; i < nfe; i++)
		nedges += fe[i].edges.nedges;
	ec = calloc(nedges ? nedges : 1, sizeof(*ec));
	ecp = calloc(nedges ? nedges : 1, sizeof(*ecp));
	if (!ec || !ecp)
		goto out_edges;
	size_t k = 0;
	for (size_t i = 0; i < nfe; i++)
		for (size_t j = 0; j < fe[i].edges.nedges; j++) {
			const struct hp_edge *e = &fe[i].edges.edges[j];
			if (!e->count)
				continue; /* absent means none in this interval, as for values */
			hotpath__v1__edge_count__init(&ec[k]);
			ec[k].function_row = (uint32_t)fe[i].function_row;
			ec[k].from_offset = e->from < fe[i].nblocks ? fe[i].block_offsets[e->from] : 0;
			ec[k].to_offset = e->to < fe[i].nblocks ? fe[i].block_offsets[e->to] : 0;
			ec[k].count = e->count;
			ec[k].kind = (Hotpath__V1__EdgeKind)(e->kind + 1);
			ec[k].label = fe[i].sampled           ? HOTPATH__V1__EDGE_LABEL__EDGE_LABEL_SAMPLED_ESTIMATE :
				      e->how == HP_EDGE_EXACT ? HOTPATH__V1__EDGE_LABEL__EDGE_LABEL_EXACT_DERIVED :
								HOTPATH__V1__EDGE_LABEL__EDGE_LABEL_ESTIMATED;
			ecp[k] = &ec[k];
			k++;
		}
	b.n_edges = k;
	b.edges = ecp;
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_MEASUREMENT;
	msg.measurement = &b;
	ret = hp_outbox_add(outbox, &msg, b.interval_start_unix_ns, b.interval_end_unix_ns);
out_edges:
	hp_measure_edges_free(fe, nfe);
out:
	free(ec);
	free(ecp);
	free(rv);
	free(rvp);
	free(vals);
	free(valp);
	return ret;
}
