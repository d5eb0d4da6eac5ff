/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Answering the backend's commands. Today there is one kind, InspectFunction:
 * decode one function of the live model and return its instructions. An
 * unknown kind is answered with an error, never left without a result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/agent.h"
#include "daemon/commands.h"
#include "daemon/log.h"
#include "daemon/messages.h"

static void send_result(struct hp_stream *st, const char *id, bool ok, const char *error,
			Hotpath__V1__FunctionDisassembly *dis)
{
	Hotpath__V1__CommandResult r = HOTPATH__V1__COMMAND_RESULT__INIT;
	r.command_id = (char *)id;
	r.ok = ok;
	r.error = (char *)(error ? error : "");
	if (dis) {
		r.kind_case = HOTPATH__V1__COMMAND_RESULT__KIND_DISASSEMBLY;
		r.disassembly = dis;
	}
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_RESULT;
	msg.result = &r;
	if (hp_send_msg(st, &msg) < 0)
		hp_log(false, "out of memory sending the result of command %s", id);
}

static void inspect_function(struct agent *ag, struct hp_stream *st, const char *id,
			     const Hotpath__V1__InspectFunction *cmd)
{
	char err[256];
	const struct hp_module *mod = NULL;
	for (size_t i = 0; i < ag->model->nmods; i++)
		if (strcmp(ag->model->mods[i].name, cmd->module ? cmd->module : "") == 0)
			mod = &ag->model->mods[i];
	if (!mod) {
		snprintf(err, sizeof(err), "unknown module \"%.100s\"", cmd->module ? cmd->module : "");
		send_result(st, id, false, err, NULL);
		return;
	}
	if (cmd->function_index >= mod->nfuncs) {
		snprintf(err, sizeof(err), "function index %u out of range: module %s has %zu functions",
			 cmd->function_index, mod->name, mod->nfuncs);
		send_result(st, id, false, err, NULL);
		return;
	}
	const struct hp_function *f = &mod->funcs[cmd->function_index];
	struct hp_insn *insns = NULL;
	err[0] = '\0';
	int n = hp_function_disassemble(ag->model, mod, f, &insns, err, sizeof(err));
	if (n < 0) {
		char msg[400];
		snprintf(msg, sizeof(msg), "cannot disassemble %s: %s", f->name, err[0] ? err : strerror(-n));
		send_result(st, id, false, msg, NULL);
		return;
	}
	Hotpath__V1__FunctionDisassembly d = HOTPATH__V1__FUNCTION_DISASSEMBLY__INIT;
	d.module = mod->name;
	d.function_index = cmd->function_index;
	d.address = f->addr;
	Hotpath__V1__Instruction *in = calloc(n ? (size_t)n : 1, sizeof(*in));
	Hotpath__V1__Instruction **inp = calloc(n ? (size_t)n : 1, sizeof(*inp));
	if (!in || !inp) {
		send_result(st, id, false, "out of memory", NULL);
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
		send_result(st, id, true, NULL, &d);
	}
	free(in);
	free(inp);
	free(insns);
}

void hp_handle_command(struct agent *ag, struct hp_stream *st, const Hotpath__V1__Command *c)
{
	const char *id = c->id ? c->id : "";
	switch (c->kind_case) {
	case HOTPATH__V1__COMMAND__KIND_INSPECT_FUNCTION:
		inspect_function(ag, st, id, c->inspect_function);
		break;
	default:
		send_result(st, id, false, "unsupported command", NULL);
		break;
	}
}
