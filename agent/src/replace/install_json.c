// SPDX-License-Identifier: Apache-2.0
/*
 * The install, revert and journal listing JSON (see install_json.h),
 * written once for `hotpathd install|revert|installed --json` and for the
 * daemon's InstallResult. Addresses are hex strings.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "base/json.h"
#include "replace/install_json.h"
#include "replace/patch_target.h"

static void khex(struct json *j, const char *k, uint64_t v)
{
	char b[32];
	snprintf(b, sizeof(b), "0x%" PRIx64, v);
	json_kstr(j, k, b);
}

static void kdouble(struct json *j, const char *k, double v, int decimals)
{
	json_key(j, k);
	json_double(j, v, decimals);
}

/* Heaps earlier reverts kept in the process, asked again by this install or revert. */
static void kept_heaps(struct json *j, const struct hp_install_result *res)
{
	json_key(j, "kept_heaps");
	json_obj_begin(j);
	json_ku64(j, "released", res->kept_released);
	json_ku64(j, "waiting", res->kept_waiting);
	json_obj_end(j);
}

void hp_install_json_installed(FILE *fp, const struct hp_iplan *plan, int pid, const struct hp_install_result *res)
{
	struct json j;

	json_init(&j, fp);
	json_obj_begin(&j);
	json_kstr(&j, "status", "installed");
	json_kstr(&j, "id", res->id);
	json_key(&j, "pid");
	json_u64(&j, (uint64_t)pid);
	json_kstr(&j, "root", plan->root);
	json_kstr(&j, "code_sha256", plan->computed);
	json_ku64(&j, "functions", plan->nmembers);
	khex(&j, "heap", res->heap);
	json_ku64(&j, "heap_bytes", res->heap_len);
	khex(&j, "entry", res->entry);
	khex(&j, "new_entry", res->new_entry);
	json_ku64(&j, "call_sites", res->call_sites);
	json_ku64(&j, "entries", res->entries);
	json_ku64(&j, "call_sites_skipped", res->call_sites_skipped);
	json_key(&j, "unwind");
	json_obj_begin(&j);
	json_key(&j, "registered");
	json_bool(&j, res->unwind_registered);
	json_kstr(&j, "note", res->unwind_note);
	json_obj_end(&j);
	json_key(&j, "timings");
	json_obj_begin(&j);
	kdouble(&j, "check_ms", res->check_ms, 3);
	kdouble(&j, "stopped_ms", res->stopped_ms, 3);
	kdouble(&j, "entry_us", res->entry_us, 1);
	kdouble(&j, "calls_ms", res->calls_ms, 3);
	kdouble(&j, "total_ms", res->total_ms, 3);
	json_obj_end(&j);
	json_kstr(&j, "journal", res->journal);
	kept_heaps(&j, res);
	json_obj_end(&j);
}

void hp_install_json_refused(FILE *fp, const char *root, const char *error)
{
	struct json j;

	json_init(&j, fp);
	json_obj_begin(&j);
	json_kstr(&j, "status", "refused");
	json_kstr(&j, "root", root);
	json_kstr(&j, "error", error);
	json_obj_end(&j);
}

const char *hp_revert_status(int r, const struct hp_install_result *res)
{
	return r < 0          ? (r == -ENOENT ? "nothing_installed" : "failed") :
	       res->heap_kept ? "reverted_heap_kept" :
				"reverted";
}

void hp_revert_json(FILE *fp, int r, int pid, const struct hp_install_result *res, const char *error)
{
	struct json j;

	json_init(&j, fp);
	json_obj_begin(&j);
	json_kstr(&j, "status", hp_revert_status(r, res));
	json_key(&j, "pid");
	json_u64(&j, (uint64_t)pid);
	if (r < 0)
		json_kstr(&j, "error", error);
	json_key(&j, "heap_kept");
	json_bool(&j, res->heap_kept);
	if (res->heap_kept)
		json_kstr(&j, "heap_note", res->heap_note);
	kdouble(&j, "revert_calls_ms", res->revert_calls_ms, 3);
	kdouble(&j, "revert_entry_us", res->revert_entry_us, 1);
	kdouble(&j, "revert_total_ms", res->revert_total_ms, 3);
	kept_heaps(&j, res);
	json_obj_end(&j);
}

void hp_installed_json(FILE *fp, const char *state_dir, const struct hp_installed *ins, size_t n, int pid)
{
	struct json j;

	json_init(&j, fp);
	json_obj_begin(&j);
	json_kstr(&j, "state_dir", state_dir);
	/* hotpath.ko's draining heaps (patch_target.h); null without the module. */
	long draining = hp_kernel_heaps_draining();
	json_key(&j, "kernel_heaps_draining");
	if (draining < 0)
		json_null(&j);
	else
		json_u64(&j, (uint64_t)draining);
	json_key(&j, "installed");
	json_arr_begin(&j);
	for (size_t i = 0; i < n; i++) {
		const struct hp_installed *h = &ins[i];
		if (pid > 0 && h->pid != pid)
			continue;
		json_obj_begin(&j);
		json_kstr(&j, "id", h->id);
		json_kstr(&j, "state", h->state);
		json_kstr(&j, "target", h->target);
		json_key(&j, "pid");
		json_u64(&j, (uint64_t)h->pid);
		json_ku64(&j, "start_time", h->start_time);
		json_kstr(&j, "root", h->root);
		json_kstr(&j, "module", h->module);
		json_kstr(&j, "code_sha256", h->hash);
		khex(&j, "heap", h->heap);
		json_ku64(&j, "heap_bytes", h->heap_len);
		khex(&j, "entry", h->entry);
		khex(&j, "new_entry", h->new_entry);
		json_ku64(&j, "writes", h->writes);
		json_kstr(&j, "detail", h->detail);
		json_kstr(&j, "journal", h->journal);
		json_kstr(&j, "plan", h->plan_path);
		json_obj_end(&j);
	}
	json_arr_end(&j);
	json_obj_end(&j);
}
