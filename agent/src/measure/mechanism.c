// SPDX-License-Identifier: Apache-2.0
/*
 * Mechanism choice (see mechanism.h): walks each role's candidates from the
 * cheapest and keeps the first whose capability was proven on this host; a
 * role left without a mechanism keeps the probes' own details as its reason,
 * so a refused measurement says exactly what the kernel refused.
 */
#include <stdio.h>
#include <string.h>

#include "measure/mechanism.h"

const char *hp_mech_name(enum hp_mech m)
{
	static const char *const names[HP_MECH_N] = {
		[HP_MECH_NONE] = "none",
		[HP_MECH_UPROBE_MULTI] = "uprobe_multi",
		[HP_MECH_UPROBE] = "uprobe",
		[HP_MECH_URETPROBE_MULTI] = "uretprobe_multi",
		[HP_MECH_URETPROBE] = "uretprobe",
		[HP_MECH_FENTRY] = "fentry",
		[HP_MECH_FEXIT] = "fexit",
		[HP_MECH_KPROBE] = "kprobe",
		[HP_MECH_KRETPROBE] = "kretprobe",
		[HP_MECH_TP_BTF] = "tp_btf",
		[HP_MECH_RAW_TP] = "raw_tp",
		[HP_MECH_TRACEPOINT] = "tracepoint",
		[HP_MECH_SAMPLING] = "perf_sampling",
		[HP_MECH_INLINE_COUNTER] = "inline_counter",
	};
	return (unsigned)m < HP_MECH_N ? names[m] : "?";
}

const char *hp_label_name(enum hp_value_label l)
{
	return l == HP_LABEL_SAMPLED ? "sampled" : l == HP_LABEL_ESTIMATE ? "estimate" : "exact";
}

static bool has(const struct hp_caps *c, const char *name)
{
	const struct hp_cap *cap = hp_caps_find(c, name);
	return cap && cap->available;
}

static const char *detail(const struct hp_caps *c, const char *name)
{
	const struct hp_cap *cap = hp_caps_find(c, name);
	return cap ? cap->detail : "not probed";
}

void hp_mechanisms_choose(const struct hp_caps *c, struct hp_mechanisms *o)
{
	memset(o, 0, sizeof(*o));
	o->user_entry = has(c, "uprobe_multi") ? HP_MECH_UPROBE_MULTI :
			has(c, "uprobes")      ? HP_MECH_UPROBE :
						 HP_MECH_NONE;
	o->user_exit = has(c, "uprobe_multi") ? HP_MECH_URETPROBE_MULTI :
		       has(c, "uretprobes")   ? HP_MECH_URETPROBE :
						HP_MECH_NONE;
	/* uprobe_multi attaches entries and returns alike; a host with uprobes
	 * but without uprobe_multi uses perf-event uprobes for both. */
	if (o->user_entry == HP_MECH_UPROBE_MULTI && o->user_exit != HP_MECH_URETPROBE_MULTI)
		o->user_entry = HP_MECH_UPROBE;
	snprintf(o->why_no_user_entry, sizeof(o->why_no_user_entry), "uprobes: %.250s", detail(c, "uprobes"));
	snprintf(o->why_no_user_exit, sizeof(o->why_no_user_exit), "uretprobes: %.250s", detail(c, "uretprobes"));

	/* Entries and exits come in pairs of one kind: fentry+fexit or kprobe+kretprobe. */
	if (has(c, "fentry") && has(c, "fexit")) {
		o->kernel_entry = HP_MECH_FENTRY;
		o->kernel_exit = HP_MECH_FEXIT;
	} else if (has(c, "kprobes") && has(c, "kretprobes")) {
		o->kernel_entry = HP_MECH_KPROBE;
		o->kernel_exit = HP_MECH_KRETPROBE;
	} else if (has(c, "fentry")) {
		o->kernel_entry = HP_MECH_FENTRY;
	} else if (has(c, "kprobes")) {
		o->kernel_entry = HP_MECH_KPROBE;
	}
	snprintf(o->why_no_kernel_entry, sizeof(o->why_no_kernel_entry), "fentry: %.250s; kprobes: %.250s",
		 detail(c, "fentry"), detail(c, "kprobes"));
	snprintf(o->why_no_kernel_exit, sizeof(o->why_no_kernel_exit), "fexit: %.250s; kretprobes: %.250s",
		 detail(c, "fexit"), detail(c, "kretprobes"));
	o->kernel_block = has(c, "kprobes")       ? HP_MECH_KPROBE :
			  has(c, "perf_sampling") ? HP_MECH_SAMPLING :
						    HP_MECH_NONE;
	snprintf(o->why_no_kernel_block, sizeof(o->why_no_kernel_block), "kprobes: %.250s; perf_sampling: %.250s",
		 detail(c, "kprobes"), detail(c, "perf_sampling"));

	o->switch_hook = has(c, "tp_btf")          ? HP_MECH_TP_BTF :
			 has(c, "raw_tracepoints") ? HP_MECH_RAW_TP :
			 has(c, "tracepoints")     ? HP_MECH_TRACEPOINT :
						     HP_MECH_NONE;
	snprintf(o->why_no_switch, sizeof(o->why_no_switch),
		 "tp_btf: %.200s; raw_tracepoints: %.200s; tracepoints: %.200s", detail(c, "tp_btf"),
		 detail(c, "raw_tracepoints"), detail(c, "tracepoints"));
	if (has(c, "hardware_pmu"))
		snprintf(o->why_no_hardware, sizeof(o->why_no_hardware),
			 "hardware-event timers are not implemented in this agent version (the host has a PMU)");
	else
		snprintf(o->why_no_hardware, sizeof(o->why_no_hardware), "%s", detail(c, "hardware_pmu"));
	o->cgroup_v2 = has(c, "cgroup_v2");
	o->have_fentry = has(c, "fentry");
	o->have_fexit = has(c, "fexit");
	o->have_kprobe = has(c, "kprobes");
	o->have_kretprobe = has(c, "kretprobes");
	o->have_sampling = has(c, "perf_sampling");
	snprintf(o->why_no_cgroup, sizeof(o->why_no_cgroup), "%s", detail(c, "cgroup_v2"));
}

static void name_plan(struct hp_metric_plan *p)
{
	const enum hp_mech parts[3] = { p->entry, p->exit, p->switch_hook };
	size_t used = 0;
	p->mechanism[0] = '\0';
	for (int i = 0; i < 3; i++) {
		if (parts[i] == HP_MECH_NONE)
			continue;
		int n = snprintf(p->mechanism + used, sizeof(p->mechanism) - used, "%s%s", used ? "+" : "",
				 hp_mech_name(parts[i]));
		if (n > 0 && (size_t)n < sizeof(p->mechanism) - used)
			used += (size_t)n;
	}
}

static void refuse(struct hp_metric_plan *p, const char *fmt, const char *a, const char *b)
{
	p->available = false;
	snprintf(p->reason, sizeof(p->reason), fmt, a, b);
}

void hp_metric_plan(const struct hp_mechanisms *mech, enum hp_measure_target_kind target, bool block_row, bool blocks,
		    enum hp_metric m, struct hp_metric_plan *out)
{
	memset(out, 0, sizeof(*out));
	out->applicable = true;
	out->available = true;
	bool kernel = target == HP_MEASURE_KERNEL;
	const char *where = kernel ? "kernel" : "process";

	if ((HP_METRIC_BIT(m) & HP_METRICS_HARDWARE)) {
		out->applicable = !block_row;
		refuse(out, "%s%s", hp_metric_name(m), "");
		snprintf(out->reason, sizeof(out->reason), "%s timer unavailable: %.320s", hp_metric_name(m),
			 mech->why_no_hardware);
		return;
	}
	if (m == HP_METRIC_COUNT) {
		if (kernel && block_row) {
			out->entry = mech->kernel_block;
			out->label = out->entry == HP_MECH_SAMPLING ? HP_LABEL_SAMPLED : HP_LABEL_EXACT;
			if (out->entry == HP_MECH_NONE)
				refuse(out, "kernel block counts unavailable: %s%s", mech->why_no_kernel_block, "");
		} else if (kernel) {
			out->entry = mech->kernel_entry;
			if (out->entry == HP_MECH_NONE && blocks && mech->kernel_block == HP_MECH_SAMPLING) {
				/* The function's row sums its blocks' samples. */
				out->entry = HP_MECH_SAMPLING;
				out->label = HP_LABEL_SAMPLED;
			} else if (out->entry == HP_MECH_NONE) {
				refuse(out,
				       "counting kernel function entries needs fentry or kprobes, and this host has "
				       "neither (%s); add --blocks for sampled block counts%s",
				       mech->why_no_kernel_entry, "");
			}
		} else {
			out->entry = mech->user_entry;
			if (out->entry == HP_MECH_NONE)
				refuse(out, "counting process %s needs uprobes (%s)", block_row ? "blocks" : "entries",
				       mech->why_no_user_entry);
		}
		name_plan(out);
		return;
	}
	/* Timers and concurrency: a function's entries and exits. */
	if (block_row) {
		out->applicable = false;
		out->available = false;
		snprintf(out->reason, sizeof(out->reason), "%s applies to functions, not blocks", hp_metric_name(m));
		return;
	}
	out->entry = kernel ? mech->kernel_entry : mech->user_entry;
	out->exit = kernel ? mech->kernel_exit : mech->user_exit;
	if (out->entry == HP_MECH_NONE || out->exit == HP_MECH_NONE) {
		refuse(out, "%s timers need a probe at the entry and at every exit of a %s function", hp_metric_name(m),
		       where);
		size_t n = strlen(out->reason);
		snprintf(out->reason + n, sizeof(out->reason) - n, ", and this host has none (%.640s)",
			 kernel ? (out->entry == HP_MECH_NONE ? mech->why_no_kernel_entry : mech->why_no_kernel_exit) :
				  (out->entry == HP_MECH_NONE ? mech->why_no_user_entry : mech->why_no_user_exit));
		out->entry = out->exit = HP_MECH_NONE;
		return;
	}
	if (m == HP_METRIC_VTIME) {
		out->switch_hook = mech->switch_hook;
		if (out->switch_hook == HP_MECH_NONE) {
			refuse(out, "virtualized timers need a sched_switch hook and this host has none (%s)%s",
			       mech->why_no_switch, "");
			return;
		}
	}
	name_plan(out);
}
