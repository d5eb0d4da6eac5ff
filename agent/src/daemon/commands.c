// SPDX-License-Identifier: Apache-2.0
/*
 * The commands (see commands.h). Modules are named by catalog digest and
 * looked up among the targets (the kernel's, or an attached process's), so
 * two processes mapping different files under one path are never confused.
 * Attaching by command name attaches each running process of that name as a
 * target of its own; detaching stops the target's measurements first.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/agent.h"
#include "daemon/commands.h"
#include "daemon/compare_command.h"
#include "daemon/log.h"
#include "daemon/measurements.h"
#include "daemon/plan_commands.h"
#include "daemon/targets.h"
#include "daemon/worker.h"

static void inspect_function(struct agent *ag, struct hp_job *job, const Hotpath__V1__InspectFunction *cmd)
{
	char err[512];
	size_t mi = 0;
	struct hp_target *t = hp_targets_by_digest(&ag->targets, cmd->digest ? cmd->digest : "", cmd->target, &mi);
	if (!t) {
		snprintf(err, sizeof(err), "no target of this agent has the module with catalog %.64s",
			 cmd->digest ? cmd->digest : "");
		hp_job_fail(ag, job, err);
		return;
	}
	const struct hp_module *mod = &t->model->mods[mi];
	if (cmd->function_index >= mod->nfuncs) {
		snprintf(err, sizeof(err), "function index %u out of range: module %s has %zu functions",
			 cmd->function_index, mod->name, mod->nfuncs);
		hp_targets_release(&ag->targets, t);
		hp_job_fail(ag, job, err);
		return;
	}
	const struct hp_function *f = &mod->funcs[cmd->function_index];
	struct hp_insn *insns = NULL;
	err[0] = '\0';
	int n = hp_function_disassemble(t->model, mod, f, &insns, err, sizeof(err));
	if (n < 0) {
		char msg[700];
		snprintf(msg, sizeof(msg), "cannot disassemble %s: %s", f->name, err[0] ? err : strerror(-n));
		hp_targets_release(&ag->targets, t);
		hp_job_fail(ag, job, msg);
		return;
	}
	Hotpath__V1__FunctionDisassembly d = HOTPATH__V1__FUNCTION_DISASSEMBLY__INIT;
	d.digest = (char *)mod->digest;
	d.function_index = cmd->function_index;
	d.address = f->addr;
	Hotpath__V1__Instruction *in = calloc(n ? (size_t)n : 1, sizeof(*in));
	Hotpath__V1__Instruction **inp = calloc(n ? (size_t)n : 1, sizeof(*inp));
	if (!in || !inp) {
		hp_job_fail(ag, job, "out of memory");
	} else {
		for (int i = 0; i < n; i++) {
			hotpath__v1__instruction__init(&in[i]);
			in[i].offset = (uint32_t)(insns[i].addr - f->addr);
			in[i].length = insns[i].len;
			in[i].text = insns[i].text;
			in[i].bytes.data = insns[i].bytes;
			in[i].bytes.len = insns[i].len;
			inp[i] = &in[i];
		}
		d.n_instructions = (size_t)n;
		d.instructions = inp;
		Hotpath__V1__CommandResult r = HOTPATH__V1__COMMAND_RESULT__INIT;
		r.ok = true;
		r.kind_case = HOTPATH__V1__COMMAND_RESULT__KIND_DISASSEMBLY;
		r.disassembly = &d;
		hp_job_result(ag, job, &r);
	}
	free(in);
	free(inp);
	free(insns);
	hp_targets_release(&ag->targets, t);
}

/* Answer with the targets named (after an attach or detach). */
static void targets_result(struct agent *ag, struct hp_job *job, struct hp_target *const *ts, size_t n)
{
	Hotpath__V1__TargetsUpdate u;
	void *mem = NULL;
	if (hp_targets_fill(&ag->targets, ts, n, &u, &mem) < 0) {
		hp_job_fail(ag, job, "out of memory");
		return;
	}
	Hotpath__V1__CommandResult r = HOTPATH__V1__COMMAND_RESULT__INIT;
	r.ok = true;
	r.kind_case = HOTPATH__V1__COMMAND_RESULT__KIND_TARGETS;
	r.targets = &u;
	hp_job_result(ag, job, &r);
	hp_targets_fill_free(&u, mem);
}

/* Tell the backend the whole list changed (it asks for the new catalog pieces). */
static void announce_targets(struct agent *ag)
{
	uint8_t *buf;
	size_t len;
	if (hp_targets_pack_update(&ag->targets, &buf, &len) < 0)
		return;
	Hotpath__V1__AgentMessage *m = hotpath__v1__agent_message__unpack(NULL, len, buf);
	if (m) {
		hp_replies_push(&ag->replies, m);
		hotpath__v1__agent_message__free_unpacked(m, NULL);
	}
	free(buf);
}

static void attach_target(struct agent *ag, struct hp_job *job, const Hotpath__V1__AttachTarget *cmd)
{
	char err[600];
	struct hp_target *got[HP_ATTACH_MAX_BY_COMM];
	int n;
	bool by_name = cmd->command && *cmd->command;
	if (by_name == (cmd->pid != 0)) {
		hp_job_fail(ag, job, "attach names either a pid or a command name");
		return;
	}
	char what[96];
	if (by_name)
		snprintf(what, sizeof(what), "reading the code of every process named %.20s", cmd->command);
	else
		snprintf(what, sizeof(what), "reading the code of process %u", cmd->pid);
	hp_job_progress(ag, job, 0.1, what);
	if (by_name) {
		n = hp_targets_attach_comm(&ag->targets, cmd->command, got, HP_ATTACH_MAX_BY_COMM, err, sizeof(err));
	} else if (cmd->pid > 0x3fffffffu) {
		snprintf(err, sizeof(err), "invalid process id %u", cmd->pid);
		n = -EINVAL;
	} else {
		n = hp_targets_attach_pid(&ag->targets, (int)cmd->pid, &got[0], err, sizeof(err));
		if (n == 0)
			n = 1;
	}
	if (n < 0) {
		hp_job_fail(ag, job, err);
		return;
	}
	if (hp_job_cancelled(job)) {
		/* Too late to undo cleanly for others who may use the target: report it as attached. */
		hp_log(true, "command %s was cancelled after the attach finished", job->id);
	}
	announce_targets(ag);
	targets_result(ag, job, got, (size_t)n);
	for (int i = 0; i < n; i++)
		hp_targets_release(&ag->targets, got[i]);
}

static void detach_target(struct agent *ag, struct hp_job *job, const Hotpath__V1__DetachTarget *cmd)
{
	char err[256];
	const char *id = cmd->target ? cmd->target : "";
	struct hp_target *t = hp_targets_get(&ag->targets, id);
	if (!t || strcmp(t->id, id) != 0) {
		hp_targets_release(&ag->targets, t);
		snprintf(err, sizeof(err), "no target %.60s", id);
		hp_job_fail(ag, job, err);
		return;
	}
	if (t->kind == HOTPATH__V1__TARGET_KIND__TARGET_KIND_KERNEL) {
		hp_targets_release(&ag->targets, t);
		hp_job_fail(ag, job, "the kernel target cannot be detached");
		return;
	}
	hp_measurements_stop_target(ag, id, "its target was detached");
	if (hp_targets_detach(&ag->targets, id, err, sizeof(err)) < 0) {
		hp_targets_release(&ag->targets, t);
		hp_job_fail(ag, job, err);
		return;
	}
	announce_targets(ag);
	targets_result(ag, job, &t, 1);
	hp_targets_release(&ag->targets, t);
}

static void measurement_result(struct agent *ag, struct hp_job *job, Hotpath__V1__MeasurementInfo *info)
{
	Hotpath__V1__CommandResult r = HOTPATH__V1__COMMAND_RESULT__INIT;
	r.ok = true;
	r.kind_case = HOTPATH__V1__COMMAND_RESULT__KIND_MEASUREMENT;
	r.measurement = info;
	hp_job_result(ag, job, &r);
	hotpath__v1__measurement_info__free_unpacked(info, NULL);
}

static void start_measurement(struct agent *ag, struct hp_job *job, const Hotpath__V1__StartMeasurement *cmd)
{
	char err[1024] = "";
	Hotpath__V1__MeasurementInfo *info = NULL;
	if (hp_measurements_start(ag, job, cmd, &info, err, sizeof(err)) < 0) {
		hp_job_fail(ag, job, err[0] ? err : "out of memory");
		return;
	}
	measurement_result(ag, job, info);
}

static void stop_measurement(struct agent *ag, struct hp_job *job, const Hotpath__V1__StopMeasurement *cmd)
{
	char err[256] = "";
	Hotpath__V1__MeasurementInfo *info = NULL;
	if (hp_measurements_stop(ag, cmd->measurement_id, &info, err, sizeof(err)) < 0) {
		hp_job_fail(ag, job, err[0] ? err : "out of memory");
		return;
	}
	measurement_result(ag, job, info);
}

void hp_run_command(struct agent *ag, struct hp_job *job)
{
	const Hotpath__V1__Command *c = job->cmd;
	switch (c->kind_case) {
	case HOTPATH__V1__COMMAND__KIND_INSPECT_FUNCTION:
		inspect_function(ag, job, c->inspect_function);
		break;
	case HOTPATH__V1__COMMAND__KIND_ATTACH_TARGET:
		attach_target(ag, job, c->attach_target);
		break;
	case HOTPATH__V1__COMMAND__KIND_DETACH_TARGET:
		detach_target(ag, job, c->detach_target);
		break;
	case HOTPATH__V1__COMMAND__KIND_START_MEASUREMENT:
		start_measurement(ag, job, c->start_measurement);
		break;
	case HOTPATH__V1__COMMAND__KIND_STOP_MEASUREMENT:
		stop_measurement(ag, job, c->stop_measurement);
		break;
	case HOTPATH__V1__COMMAND__KIND_MAKE_PLAN:
	case HOTPATH__V1__COMMAND__KIND_INSTALL_PLAN:
	case HOTPATH__V1__COMMAND__KIND_REVERT_PLAN:
	case HOTPATH__V1__COMMAND__KIND_LIST_INSTALLED:
		hp_run_plan_command(ag, job);
		break;
	case HOTPATH__V1__COMMAND__KIND_COMPARE_PLAN:
		hp_run_compare_command(ag, job);
		break;
	default:
		hp_job_fail(ag, job, "unsupported command");
		break;
	}
}
