/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cheapest working mechanism for each metric, chosen per host from the
 * capabilities probed at start (host/caps.c), and the reason a metric cannot
 * be served when nothing works. Cheapest first, from bench/probe_cost and
 * the published per-hit costs (FACTS.md):
 *  - process entries and blocks: uprobe_multi (one link for every probe),
 *    else uprobes through perf events; exits: uretprobe_multi, else uretprobes;
 *  - kernel entries and exits: fentry/fexit (BPF trampolines, ~7-15 ns),
 *    else kprobes/kretprobes (~18-45 ns); kernel blocks: kprobes at func+off,
 *    else whole-system PC sampling (labelled sampled, never exact);
 *  - the sched_switch hook of virtualized timers: tp_btf, else raw_tp, else
 *    the classic tracepoint;
 *  - hardware-event timers: unavailable without a PMU.
 * ptrace is probed and reported but measures nothing: a breakpoint through
 * ptrace stops the target for every hit, tens of microseconds each.
 */
#ifndef HOTPATH_MEASURE_MECHANISM_H
#define HOTPATH_MEASURE_MECHANISM_H

#include <stdbool.h>
#include <stddef.h>

#include "host/caps.h"
#include "measure/spec.h"

enum hp_mech {
	HP_MECH_NONE = 0,
	HP_MECH_UPROBE_MULTI,
	HP_MECH_UPROBE,
	HP_MECH_URETPROBE_MULTI,
	HP_MECH_URETPROBE,
	HP_MECH_FENTRY,
	HP_MECH_FEXIT,
	HP_MECH_KPROBE,
	HP_MECH_KRETPROBE,
	HP_MECH_TP_BTF,
	HP_MECH_RAW_TP,
	HP_MECH_TRACEPOINT,
	HP_MECH_SAMPLING,
	HP_MECH_INLINE_COUNTER, /* counters spliced into an installed copy (replace/counters.h) */
	HP_MECH_N
};
/* "uprobe_multi", "uprobe", ..., "tp_btf", "raw_tp", "tracepoint", "perf_sampling". */
const char *hp_mech_name(enum hp_mech m);

enum hp_value_label {
	HP_LABEL_EXACT = 0,    /* every event counted by a probe */
	HP_LABEL_SAMPLED = 1,  /* PC samples, not executions */
	HP_LABEL_ESTIMATE = 2, /* derived with an approximation */
};
const char *hp_label_name(enum hp_value_label l); /* "exact", "sampled", "estimate" */

/* One host's choices: a mechanism per role, or NONE with the reason. */
struct hp_mechanisms {
	enum hp_mech user_entry, user_exit, kernel_entry, kernel_exit, kernel_block, switch_hook;
	char why_no_user_entry[320], why_no_user_exit[320];
	char why_no_kernel_entry[640], why_no_kernel_exit[640], why_no_kernel_block[640];
	char why_no_switch[680], why_no_hardware[320], why_no_cgroup[320];
	bool cgroup_v2;
	/* Kernel mechanisms this host has, for per-function fallbacks (a function
	 * without an ftrace site takes kprobes where fentry is the host's choice). */
	bool have_fentry, have_fexit, have_kprobe, have_kretprobe, have_sampling;
};

void hp_mechanisms_choose(const struct hp_caps *caps, struct hp_mechanisms *out);

enum hp_measure_target_kind { HP_MEASURE_KERNEL, HP_MEASURE_PID, HP_MEASURE_COMM };

/* How one metric of one kind of row is served. */
struct hp_metric_plan {
	bool applicable; /* false: the metric means nothing for this row kind (a block's timers) */
	bool available;
	enum hp_value_label label;
	enum hp_mech entry, exit, switch_hook; /* the mechanisms involved (NONE where not) */
	char mechanism[96];                    /* "uprobe_multi+uretprobe_multi+tp_btf" */
	char reason[1024];                     /* when not available */
};

/*
 * Plan metric m for a function row (block_row false) or a block row of a
 * target kind. blocks: the request measures blocks too (kernel function rows
 * then fall back to the sum of their blocks' samples when nothing counts
 * entries). A metric that does not apply to the row kind (timers of a
 * block) comes back not applicable.
 */
void hp_metric_plan(const struct hp_mechanisms *mech, enum hp_measure_target_kind target, bool block_row, bool blocks,
		    enum hp_metric m, struct hp_metric_plan *out);

#endif
