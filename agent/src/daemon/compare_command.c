// SPDX-License-Identifier: Apache-2.0
/*
 * ComparePlan (see compare_command.h): the plan's install (named by the
 * plan's id, as InstallPlan names it) must be in the named target's
 * process; the comparison runs as `hotpathd compare` runs it, the target's
 * measurements re-armed after every revert and install (their probes
 * follow the code), and its JSON answers, also when it ended early (the
 * windows measured, the state the plan is in).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/agent.h"
#include "daemon/compare_command.h"
#include "daemon/log.h"
#include "daemon/measurements.h"
#include "daemon/targets.h"
#include "daemon/worker.h"
#include "replace/compare.h"
#include "replace/install.h"

struct compare_ctx {
	struct agent *ag;
	struct hp_job *job;
	const char *target;
};

/* Progress after every window; a cancel stops the comparison there. */
static int window_done(void *ctx, const struct hp_compare *c)
{
	struct compare_ctx *x = ctx;
	char line[256];
	hp_compare_window_line(c, c->nwindows - 1, line, sizeof(line));
	hp_job_progress(x->ag, x->job, 0.02 + 0.96 * (double)c->nwindows / (2.0 * c->pairs), line);
	return hp_job_cancelled(x->job);
}

static void toggled(void *ctx, bool installed)
{
	struct compare_ctx *x = ctx;
	hp_measurements_rearm(x->ag, x->target);
}

static void answer(struct agent *ag, struct hp_job *job, int r, const char *error, const char *plan_id, char *detail)
{
	Hotpath__V1__CompareResult cr = HOTPATH__V1__COMPARE_RESULT__INIT;
	cr.plan_id = (char *)(plan_id ? plan_id : "");
	cr.detail_json = detail ? detail : "";
	Hotpath__V1__CommandResult res = HOTPATH__V1__COMMAND_RESULT__INIT;
	res.ok = r == 0;
	res.error = (char *)(r == 0 ? "" : error);
	res.cancelled = r == -ECANCELED;
	res.kind_case = HOTPATH__V1__COMMAND_RESULT__KIND_COMPARE;
	res.compare = &cr;
	hp_job_result(ag, job, &res);
}

/* The install of plan_id is in target t's process: 0, or -ENOENT, -ESRCH with err. */
static int install_in_target(struct agent *ag, const char *plan_id, const struct hp_target *t, char *err, size_t errlen)
{
	struct hp_installed *ins = NULL;
	size_t n = 0;
	int r = -ENOENT;
	if (hp_installed_list(ag->state_dir, &ins, &n, err, errlen) < 0)
		return -EIO;
	snprintf(err, errlen, "plan %s is not installed (see ListInstalled)", plan_id);
	for (size_t i = 0; i < n && r; i++)
		if (!strcmp(ins[i].id, plan_id)) {
			r = 0;
			if (ins[i].pid != t->pid || ins[i].start_time != (uint64_t)t->start_ticks) {
				snprintf(err, errlen, "plan %s is installed in process %d, not in target %s", plan_id,
					 ins[i].pid, t->id);
				r = -ENOENT;
				break;
			}
		}
	free(ins);
	return r;
}

void hp_run_compare_command(struct agent *ag, struct hp_job *job)
{
	const Hotpath__V1__ComparePlan *c = job->cmd->compare_plan;
	char err[1024] = "", *detail = NULL;
	size_t dlen = 0;

	if (!ag->state_dir) {
		hp_job_fail(ag, job, "the agent runs without a state folder: nothing is installed");
		return;
	}
	if (!hp_install_id_valid(c->plan_id)) {
		snprintf(err, sizeof(err), "a plan id is 1 to %d letters, digits, '-' or '_'", HP_INSTALL_ID_MAX);
		hp_job_fail(ag, job, err);
		return;
	}
	if (!c->target || !*c->target || !strcmp(c->target, "kernel")) {
		hp_job_fail(ag, job,
			    "kernel installs are not compared here: the interleaved comparison samples a process's "
			    "threads; a kernel plan's before/after is its install's two windows");
		return;
	}
	if ((c->pairs && (c->pairs < HP_COMPARE_PAIRS_MIN || c->pairs > HP_COMPARE_PAIRS_MAX)) ||
	    (c->window_seconds != 0 &&
	     !(c->window_seconds >= HP_COMPARE_WINDOW_MIN && c->window_seconds <= HP_COMPARE_WINDOW_MAX))) {
		snprintf(err, sizeof(err),
			 "pairs are %d..%d and a window %.1f..%.0f seconds (0: the defaults, %d and %.0f)",
			 HP_COMPARE_PAIRS_MIN, HP_COMPARE_PAIRS_MAX, HP_COMPARE_WINDOW_MIN, HP_COMPARE_WINDOW_MAX,
			 HP_COMPARE_PAIRS_DEFAULT, HP_COMPARE_WINDOW_DEFAULT);
		hp_job_fail(ag, job, err);
		return;
	}
	struct hp_target *t = hp_targets_get(&ag->targets, c->target);
	int r = 0;
	if (!t || strcmp(t->id, c->target)) {
		snprintf(err, sizeof(err), "no target %.60s", c->target);
		r = -ENOENT;
	} else if (t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED) {
		snprintf(err, sizeof(err), "the process is gone: target %s has ended: %s", t->id, t->detail);
		r = -ESRCH;
	} else {
		r = install_in_target(ag, c->plan_id, t, err, sizeof(err));
	}
	hp_targets_release(&ag->targets, t);
	if (r < 0) {
		hp_job_fail(ag, job, err);
		return;
	}
	if (hp_job_cancelled(job)) {
		hp_job_fail(ag, job, "cancelled");
		return;
	}
	hp_job_progress(ag, job, 0.01, "reading the install's journal and plan");
	struct compare_ctx cx = { ag, job, c->target };
	struct hp_compare_opts o = { .state_dir = ag->state_dir,
				     .id = c->plan_id,
				     .pairs = c->pairs,
				     .window_seconds = c->window_seconds,
				     .window_done = window_done,
				     .toggled = toggled,
				     .ctx = &cx };
	struct hp_compare cmp;
	r = hp_compare_run(&o, &cmp, err, sizeof(err));
	FILE *fp = open_memstream(&detail, &dlen);
	if (fp) {
		hp_compare_json(fp, &cmp);
		fclose(fp);
	}
	answer(ag, job, r, err, c->plan_id, detail);
	char line[300];
	hp_compare_summary_line(&cmp.summary, line, sizeof(line));
	hp_log(true, "comparison of plan %s in %s: %s%s%s (plan %s)", c->plan_id, c->target, r < 0 ? "" : line,
	       r < 0 ? "ended early: " : "", r < 0 ? err : "", cmp.state);
	hp_compare_free(&cmp);
	free(detail);
}
