// SPDX-License-Identifier: Apache-2.0
/*
 * The daemon's measurements in the protocol's terms (see measurement_proto.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/measurement_proto.h"

int64_t hp_unix_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

Hotpath__V1__MeasurementState hp_measurement_state_proto(enum hp_measure_state s)
{
	switch (s) {
	case HP_MEASURE_ARMED:
		return HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_ARMED;
	case HP_MEASURE_RUNNING:
		return HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_RUNNING;
	case HP_MEASURE_TARGET_EXITED:
		return HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_TARGET_EXITED;
	default:
		return HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_FAILED;
	}
}

/* The proto's metric for a measure-layer metric. */
Hotpath__V1__Metric hp_metric_proto(int m)
{
	static const Hotpath__V1__Metric map[HP_METRIC_N] = {
		[HP_METRIC_COUNT] = HOTPATH__V1__METRIC__METRIC_COUNT,
		[HP_METRIC_WALL] = HOTPATH__V1__METRIC__METRIC_WALL_NS,
		[HP_METRIC_VTIME] = HOTPATH__V1__METRIC__METRIC_VTIME_NS,
		[HP_METRIC_CONCURRENCY] = HOTPATH__V1__METRIC__METRIC_CONCURRENCY,
		[HP_METRIC_CYCLES] = HOTPATH__V1__METRIC__METRIC_CYCLES,
		[HP_METRIC_INSTRUCTIONS] = HOTPATH__V1__METRIC__METRIC_INSTRUCTIONS,
		[HP_METRIC_ICACHE_STALL] = HOTPATH__V1__METRIC__METRIC_ICACHE_STALL,
		[HP_METRIC_BRANCH_MISPREDICT] = HOTPATH__V1__METRIC__METRIC_BRANCH_MISPREDICT,
	};
	return m >= 0 && m < HP_METRIC_N ? map[m] : HOTPATH__V1__METRIC__METRIC_UNSPECIFIED;
}

void hp_measurement_info_set_detail(Hotpath__V1__MeasurementInfo *info, const char *s)
{
	if (info->detail && info->detail != protobuf_c_empty_string)
		free(info->detail);
	info->detail = strdup(s ? s : "");
}

/* A request's resources for the measure layer, as addresses in the target's
 * model: a function or an instruction address by its address, a block as
 * its function's address and the block's offset. */
int hp_measurement_request_resources(const struct hp_model *m, const Hotpath__V1__StartMeasurement *req,
				     struct hp_resource_spec **res_out, bool **blocks_out, char *err, size_t errlen)
{
	size_t n = req->n_resources;
	struct hp_resource_spec *res = calloc(n ? n : 1, sizeof(*res));
	bool *blocks = calloc(n ? n : 1, sizeof(bool));
	if (!res || !blocks) {
		free(res);
		free(blocks);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	int ret = 0;
	for (size_t i = 0; i < n && !ret; i++) {
		const Hotpath__V1__ResourceRef *rr = req->resources[i];
		const struct hp_module *mod = NULL;
		for (size_t k = 0; k < m->nmods && !mod; k++)
			if (strcmp(m->mods[k].digest, rr->digest ? rr->digest : "") == 0)
				mod = &m->mods[k];
		if (!mod) {
			snprintf(err, errlen, "resource %zu: the target has no module with catalog %.16s", i,
				 rr->digest ? rr->digest : "");
			ret = -ENOENT;
			break;
		}
		if (rr->function_index >= mod->nfuncs) {
			snprintf(err, errlen, "resource %zu: function %u of %s does not exist (%zu functions)", i,
				 rr->function_index, mod->name, mod->nfuncs);
			ret = -ENOENT;
			break;
		}
		const struct hp_function *f = &mod->funcs[rr->function_index];
		res[i].is_address = true;
		res[i].address = f->addr;
		switch (rr->kind) {
		case HOTPATH__V1__RESOURCE_KIND__RESOURCE_KIND_FUNCTION:
			blocks[i] = rr->blocks;
			break;
		case HOTPATH__V1__RESOURCE_KIND__RESOURCE_KIND_BLOCK:
			res[i].has_offset = true;
			res[i].offset = rr->offset;
			break;
		case HOTPATH__V1__RESOURCE_KIND__RESOURCE_KIND_ADDRESS:
			if (rr->offset >= f->size) {
				snprintf(err, errlen, "resource %zu: offset 0x%x is outside %s (size 0x%x)", i,
					 rr->offset, f->name, f->size);
				ret = -ENOENT;
				break;
			}
			res[i].address = f->addr + rr->offset;
			break;
		default:
			snprintf(err, errlen, "resource %zu: unknown resource kind %d", i, (int)rr->kind);
			ret = -EINVAL;
			break;
		}
	}
	if (ret) {
		free(res);
		free(blocks);
		return ret;
	}
	*res_out = res;
	*blocks_out = blocks;
	return 0;
}

/* The armed measurement described as MeasurementInfo (unpacked and owned). */
Hotpath__V1__MeasurementInfo *hp_measurement_describe(struct hp_measure *h, const struct hp_model *m,
						      const char *target_id, const Hotpath__V1__StartMeasurement *req,
						      unsigned interval_ms)
{
	size_t n = hp_measure_nrows(h);
	const struct hp_measure_row *rows = hp_measure_rows(h);
	Hotpath__V1__MeasuredResource *res = calloc(n ? n : 1, sizeof(*res));
	Hotpath__V1__MeasuredResource **resp = calloc(n ? n : 1, sizeof(*resp));
	Hotpath__V1__MetricPlan *plans = calloc(n ? n * HP_METRIC_N : 1, sizeof(*plans));
	Hotpath__V1__MetricPlan **planp = calloc(n ? n * HP_METRIC_N : 1, sizeof(*planp));
	uint32_t pids32[HP_MEASURE_MAX_PIDS];
	int pids[HP_MEASURE_MAX_PIDS];
	Hotpath__V1__MeasurementInfo *out = NULL;
	if (!res || !resp || !plans || !planp)
		goto done;
	for (size_t i = 0; i < n; i++) {
		const struct hp_measure_row *row = &rows[i];
		Hotpath__V1__MeasuredResource *r = &res[i];
		hotpath__v1__measured_resource__init(r);
		r->digest = (char *)m->mods[row->module_index].digest;
		r->function_index = row->function_index;
		bool block = row->kind == HP_ROW_BLOCK;
		r->kind = block ? HOTPATH__V1__RESOURCE_KIND__RESOURCE_KIND_BLOCK :
				  HOTPATH__V1__RESOURCE_KIND__RESOURCE_KIND_FUNCTION;
		r->block_offset = block ? row->block_offset : 0;
		r->function = (char *)row->function;
		r->address = block ? row->block_address : row->function_address;
		r->size = block ? row->block_size : row->function_size;
		r->function_row = block && row->function_row != HP_ROW_NONE ? row->function_row + 1 : 0;
		r->metrics = &planp[i * HP_METRIC_N];
		for (int k = 0; k < HP_METRIC_N; k++) {
			const struct hp_metric_info *mi = &row->metric[k];
			if (!mi->requested)
				continue;
			Hotpath__V1__MetricPlan *p = &plans[i * HP_METRIC_N + k];
			hotpath__v1__metric_plan__init(p);
			p->metric = hp_metric_proto(k);
			p->available = mi->available;
			p->label = (Hotpath__V1__ValueLabel)(mi->label + 1);
			p->mechanism = (char *)(mi->mechanism ? mi->mechanism : "");
			p->reason = (char *)(mi->reason ? mi->reason : "");
			p->unit = (char *)(k == HP_METRIC_COUNT && mi->label == HP_LABEL_SAMPLED ?
						   "samples" :
						   hp_metric_unit((enum hp_metric)k, block));
			r->metrics[r->n_metrics++] = p;
		}
		resp[i] = r;
	}
	Hotpath__V1__MeasurementInfo info = HOTPATH__V1__MEASUREMENT_INFO__INIT;
	info.measurement_id = req->measurement_id;
	info.target = (char *)target_id;
	info.state = HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_ARMED;
	info.detail = (char *)hp_measure_target_desc(h);
	info.n_resources = n;
	info.resources = resp;
	info.interval_ms = interval_ms;
	info.started_unix_ns = hp_unix_ns();
	info.request = (Hotpath__V1__StartMeasurement *)req;
	size_t np = hp_measure_pids(h, pids, HP_MEASURE_MAX_PIDS);
	for (size_t i = 0; i < np && i < HP_MEASURE_MAX_PIDS; i++)
		pids32[i] = (uint32_t)pids[i];
	info.n_pids = np < HP_MEASURE_MAX_PIDS ? np : HP_MEASURE_MAX_PIDS;
	info.pids = pids32;
	/* Pack and unpack: one owned copy that outlives the handle. */
	size_t len = hotpath__v1__measurement_info__get_packed_size(&info);
	uint8_t *buf = malloc(len ? len : 1);
	if (buf) {
		hotpath__v1__measurement_info__pack(&info, buf);
		out = hotpath__v1__measurement_info__unpack(NULL, len, buf);
		free(buf);
	}
done:
	free(res);
	free(resp);
	free(plans);
	free(planp);
	return out;
}

/* Whether two descriptions measure the same rows. */
bool hp_measurement_same_rows(const Hotpath__V1__MeasurementInfo *a, const Hotpath__V1__MeasurementInfo *b)
{
	if (a->n_resources != b->n_resources)
		return false;
	for (size_t i = 0; i < a->n_resources; i++) {
		const Hotpath__V1__MeasuredResource *x = a->resources[i], *y = b->resources[i];
		if (strcmp(x->digest, y->digest) || x->function_index != y->function_index || x->kind != y->kind ||
		    x->block_offset != y->block_offset)
			return false;
	}
	return true;
}

Hotpath__V1__MeasurementInfo *hp_measurement_info_copy(const Hotpath__V1__MeasurementInfo *info)
{
	size_t len = hotpath__v1__measurement_info__get_packed_size(info);
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return NULL;
	hotpath__v1__measurement_info__pack(info, buf);
	Hotpath__V1__MeasurementInfo *c = hotpath__v1__measurement_info__unpack(NULL, len, buf);
	free(buf);
	return c;
}
