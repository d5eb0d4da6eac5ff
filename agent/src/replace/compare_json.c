// SPDX-License-Identifier: Apache-2.0
/*
 * The JSON of an interleaved comparison (compare.h), written once for
 * `hotpathd compare --json` and the daemon's CompareResult.detail_json;
 * its keys are the contract the backend reads (docs/agent-cli.md,
 * "hotpathd compare").
 */
#include <stdio.h>

#include "base/json.h"
#include "replace/compare.h"

static void kdouble(struct json *j, const char *k, double v, int decimals)
{
	json_key(j, k);
	json_double(j, v, decimals);
}

void hp_compare_json(FILE *fp, const struct hp_compare *c)
{
	const struct hp_compare_summary *s = &c->summary;
	struct json j;

	json_init(&j, fp);
	json_obj_begin(&j);
	json_kstr(&j, "id", c->id);
	json_key(&j, "pid");
	json_i64(&j, c->pid);
	json_kstr(&j, "root", c->root);
	json_ku64(&j, "members", c->members);
	json_ku64(&j, "pairs", c->pairs);
	kdouble(&j, "window_seconds", c->window_seconds, 3);
	json_ku64(&j, "sample_hz", c->sample_hz);
	json_key(&j, "windows");
	json_arr_begin(&j);
	for (size_t k = 0; k < c->nwindows; k++) {
		const struct hp_compare_window *w = &c->windows[k];
		json_obj_begin(&j);
		json_ku64(&j, "pair", w->pair);
		json_kstr(&j, "arm", w->installed ? "installed" : "original");
		json_key(&j, "start_unix_ns");
		json_i64(&j, w->start_unix_ns);
		kdouble(&j, "seconds", w->seconds, 3);
		json_ku64(&j, "samples", w->samples);
		json_ku64(&j, "samples_in_plan", w->samples_in_plan);
		kdouble(&j, "cpu_seconds", w->cpu_seconds, 3);
		json_obj_end(&j);
	}
	json_arr_end(&j);
	json_key(&j, "summary");
	json_obj_begin(&j);
	kdouble(&j, "share_original", s->share_original, 4);
	kdouble(&j, "share_installed", s->share_installed, 4);
	json_key(&j, "change");
	if (s->sufficient)
		json_double(&j, s->change, 4);
	else
		json_null(&j);
	json_key(&j, "interval");
	if (s->sufficient) {
		json_arr_begin(&j);
		json_double(&j, s->lo, 4);
		json_double(&j, s->hi, 4);
		json_arr_end(&j);
	} else {
		json_null(&j);
	}
	kdouble(&j, "confidence", s->confidence, 2);
	json_kstr(&j, "verdict", s->verdict);
	json_obj_end(&j);
	json_key(&j, "toggle_ms");
	json_obj_begin(&j);
	kdouble(&j, "revert", c->revert_ms, 1);
	kdouble(&j, "install", c->install_ms, 1);
	json_obj_end(&j);
	json_kstr(&j, "state", c->state);
	json_obj_end(&j);
}
