// SPDX-License-Identifier: Apache-2.0
/*
 * `hotpathd caps`: probes every capability of this host the way the agent
 * does at start (host/caps.c) and shows, per target and metric, the
 * mechanism a measurement would use here or why the metric is unavailable
 * (measure/mechanism.c). Text, or one JSON object with --json, from the same
 * walk.
 */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "base/json.h"
#include "host/caps.h"
#include "host/caps_cache.h"
#include "measure/mechanism.h"
#include "target/target.h"

static const char usage_text[] =
	"usage: hotpathd caps [--json]\n"
	"\n"
	"Probe this host's capabilities (each mechanism really tried: a BPF program\n"
	"attached with it must run) and show which mechanism each metric would use,\n"
	"cheapest first, or why it is unavailable.\n"
	"\n"
	"Every probe runs, and as root the answers of the BPF probes (fentry through\n"
	"uprobe_multi) are written to this boot's capability cache,\n"
	"" HP_CAPS_CACHE_DIR "/" HP_CAPS_CACHE_FILE
	" (root's, 0600), which the daemon and `measure` read\n"
	"instead of probing again while its key holds (boot, kernel, this agent build,\n"
	"lockdown, the BPF/perf/ftrace/JIT sysctls, kprobes enabled, tracing mounts, the\n"
	"caller's capabilities, seccomp and namespaces). HOTPATH_CAPS_CACHE=off in the\n"
	"environment bypasses it in every command (probe, neither read nor write).\n"
	"\n"
	"  --json   one JSON object: {\"capabilities\": [{name, available, detail}],\n"
	"           \"mechanisms\": {\"kernel\"|\"process\": {METRIC|block_count:\n"
	"           {available, mechanism, label, reason}}}}\n";

int cmd_caps(int argc, char **argv)
{
	bool as_json = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			as_json = true;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage_text, stdout);
			return HP_EXIT_OK;
		} else {
			fprintf(stderr, "hotpathd caps: unexpected argument '%s' (see 'hotpathd caps --help')\n",
				argv[i]);
			return HP_EXIT_USAGE;
		}
	}
	/* The kernel text reader, tried on one function as the daemon would on all. */
	char err[512] = "";
	struct hp_model *m = NULL;
	struct hp_open_opts oo = { .only_function = "vfs_read", .quiet = true };
	bool model_ok = hp_model_open_kernel(&oo, &m, err, sizeof(err)) == 0;
	hp_model_free(m);
	struct hp_caps caps;
	/* Every probe runs; the boot's cache is rewritten with their answers. */
	char note[512];
	hp_caps_get(&caps, model_ok, model_ok ? "kernel text read through a BPF syscall program" : err, NULL, true,
		    note, sizeof(note));
	if (note[0])
		fprintf(stderr, "hotpathd caps: %s\n", note);
	struct hp_mechanisms mech;
	hp_mechanisms_choose(&caps, &mech);

	struct json j;
	if (as_json) {
		json_init(&j, stdout);
		json_obj_begin(&j);
		json_key(&j, "capabilities");
		json_arr_begin(&j);
	} else {
		printf("capabilities:\n");
	}
	for (size_t i = 0; i < caps.n; i++) {
		const struct hp_cap *c = &caps.caps[i];
		if (!as_json) {
			printf("  %-24s %-3s %s\n", c->name, c->available ? "yes" : "no", c->detail);
			continue;
		}
		json_obj_begin(&j);
		json_kstr(&j, "name", c->name);
		json_key(&j, "available");
		json_bool(&j, c->available);
		json_kstr(&j, "detail", c->detail);
		json_obj_end(&j);
	}
	if (as_json) {
		json_arr_end(&j);
		json_key(&j, "mechanisms");
		json_obj_begin(&j);
	} else {
		printf("\nmechanism per metric (cheapest that works here):\n");
	}
	static const struct {
		enum hp_measure_target_kind kind;
		const char *name;
	} targets[] = { { HP_MEASURE_KERNEL, "kernel" }, { HP_MEASURE_PID, "process" } };
	for (size_t t = 0; t < 2; t++) {
		if (as_json) {
			json_key(&j, targets[t].name);
			json_obj_begin(&j);
		}
		for (int block = 0; block < 2; block++) {
			for (int k = 0; k < HP_METRIC_N; k++) {
				struct hp_metric_plan p;
				hp_metric_plan(&mech, targets[t].kind, block, block, (enum hp_metric)k, &p);
				if (!p.applicable)
					continue;
				char key[64];
				snprintf(key, sizeof(key), "%s%s", block ? "block_" : "",
					 hp_metric_name((enum hp_metric)k));
				if (!as_json) {
					if (p.available)
						printf("  %-8s %-26s %s (%s)\n", targets[t].name, key, p.mechanism,
						       hp_label_name(p.label));
					else
						printf("  %-8s %-26s unavailable: %s\n", targets[t].name, key,
						       p.reason);
					continue;
				}
				json_key(&j, key);
				json_obj_begin(&j);
				json_key(&j, "available");
				json_bool(&j, p.available);
				json_kstr(&j, "mechanism", p.available ? p.mechanism : NULL);
				json_kstr(&j, "label", p.available ? hp_label_name(p.label) : NULL);
				json_kstr(&j, "reason", p.available ? NULL : p.reason);
				json_obj_end(&j);
			}
		}
		if (as_json)
			json_obj_end(&j);
	}
	if (as_json) {
		json_obj_end(&j);
		json_obj_end(&j);
	}
	return HP_EXIT_OK;
}
