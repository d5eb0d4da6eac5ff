// SPDX-License-Identifier: Apache-2.0
/*
 * Mechanism choice per metric. This host's own capabilities are checked in
 * tests/host/test_caps.c; here synthetic capability lists (fakes, since no
 * single machine has every combination: this one forbids kprobes and fentry)
 * show that each role takes the cheapest mechanism that works, that pairs
 * stay pairs, and that a refusal carries the probes' own details.
 */
#include "harness.h"
#include "measure/mechanism.h"

/* A synthetic capability list: the names given are available, the rest not. */
static void fake_caps(struct hp_caps *c, const char *const *yes)
{
	static const char *const all[] = { "kallsyms",    "bpf_text_read",   "perf_sampling", "hardware_pmu",
					   "fentry",      "fexit",           "kprobes",       "kretprobes",
					   "tracepoints", "raw_tracepoints", "tp_btf",        "uprobes",
					   "uretprobes",  "uprobe_multi",    "ptrace",        "cgroup_v2" };
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		struct hp_cap *cap = &c->caps[c->n++];
		cap->name = all[i];
		for (size_t k = 0; yes[k]; k++)
			cap->available |= !strcmp(yes[k], all[i]);
		snprintf(cap->detail, sizeof(cap->detail), "%s: synthetic %s", all[i], cap->available ? "yes" : "no");
	}
}

static void kernel_prefers_trampolines(void)
{
	struct hp_caps c;
	struct hp_mechanisms m;
	struct hp_metric_plan p;
	const char *const every[] = { "fentry",     "fexit",           "kprobes",       "kretprobes",
				      "tp_btf",     "raw_tracepoints", "tracepoints",   "uprobes",
				      "uretprobes", "uprobe_multi",    "perf_sampling", NULL };
	fake_caps(&c, every);
	hp_mechanisms_choose(&c, &m);
	EXPECT(m.kernel_entry == HP_MECH_FENTRY && m.kernel_exit == HP_MECH_FEXIT, "kernel pair %s+%s",
	       hp_mech_name(m.kernel_entry), hp_mech_name(m.kernel_exit));
	EXPECT(m.kernel_block == HP_MECH_KPROBE, "kernel blocks by %s", hp_mech_name(m.kernel_block));
	EXPECT(m.switch_hook == HP_MECH_TP_BTF, "switch hook %s", hp_mech_name(m.switch_hook));
	EXPECT(m.user_entry == HP_MECH_UPROBE_MULTI && m.user_exit == HP_MECH_URETPROBE_MULTI, "process %s+%s",
	       hp_mech_name(m.user_entry), hp_mech_name(m.user_exit));
	hp_metric_plan(&m, HP_MEASURE_KERNEL, false, false, HP_METRIC_VTIME, &p);
	EXPECT(p.available && !strcmp(p.mechanism, "fentry+fexit+tp_btf") && p.label == HP_LABEL_EXACT, "vtime by %s",
	       p.mechanism);
	hp_metric_plan(&m, HP_MEASURE_KERNEL, true, true, HP_METRIC_COUNT, &p);
	EXPECT(p.available && !strcmp(p.mechanism, "kprobe") && p.label == HP_LABEL_EXACT, "kernel blocks by %s",
	       p.mechanism);
	hp_metric_plan(&m, HP_MEASURE_KERNEL, true, true, HP_METRIC_WALL, &p);
	EXPECT(!p.applicable, "a block's wall timer is applicable");
}

static void kernel_falls_back_to_kprobes_then_samples(void)
{
	struct hp_caps c;
	struct hp_mechanisms m;
	struct hp_metric_plan p;
	const char *const kp[] = { "kprobes", "kretprobes", "raw_tracepoints", "perf_sampling", NULL };
	fake_caps(&c, kp);
	hp_mechanisms_choose(&c, &m);
	hp_metric_plan(&m, HP_MEASURE_KERNEL, false, false, HP_METRIC_WALL, &p);
	EXPECT(p.available && !strcmp(p.mechanism, "kprobe+kretprobe"), "wall by %s", p.mechanism);
	hp_metric_plan(&m, HP_MEASURE_KERNEL, false, false, HP_METRIC_VTIME, &p);
	EXPECT(p.available && !strcmp(p.mechanism, "kprobe+kretprobe+raw_tp"), "vtime by %s", p.mechanism);
	/* Only fentry: entries count, but timers need an exit too. */
	const char *const fe[] = { "fentry", "perf_sampling", NULL };
	fake_caps(&c, fe);
	hp_mechanisms_choose(&c, &m);
	hp_metric_plan(&m, HP_MEASURE_KERNEL, false, false, HP_METRIC_COUNT, &p);
	EXPECT(p.available && !strcmp(p.mechanism, "fentry"), "count by %s", p.mechanism);
	hp_metric_plan(&m, HP_MEASURE_KERNEL, false, false, HP_METRIC_WALL, &p);
	EXPECT(!p.available && strstr(p.reason, "fexit: synthetic no"), "wall: %s", p.reason);
	hp_metric_plan(&m, HP_MEASURE_KERNEL, true, true, HP_METRIC_COUNT, &p);
	EXPECT(p.available && p.label == HP_LABEL_SAMPLED && !strcmp(p.mechanism, "perf_sampling"), "blocks by %s",
	       p.mechanism);
	/* Nothing: refusals carry every probe's detail. */
	const char *const none[] = { NULL };
	fake_caps(&c, none);
	hp_mechanisms_choose(&c, &m);
	hp_metric_plan(&m, HP_MEASURE_KERNEL, false, true, HP_METRIC_COUNT, &p);
	EXPECT(!p.available && strstr(p.reason, "fentry: synthetic no") && strstr(p.reason, "kprobes: synthetic no"),
	       "count: %s", p.reason);
	hp_metric_plan(&m, HP_MEASURE_KERNEL, true, true, HP_METRIC_COUNT, &p);
	EXPECT(!p.available && strstr(p.reason, "perf_sampling: synthetic no"), "blocks: %s", p.reason);
}

static void process_and_hardware(void)
{
	struct hp_caps c;
	struct hp_mechanisms m;
	struct hp_metric_plan p;
	const char *const perf_only[] = { "uprobes", "uretprobes", "tracepoints", NULL };
	fake_caps(&c, perf_only);
	hp_mechanisms_choose(&c, &m);
	hp_metric_plan(&m, HP_MEASURE_PID, false, false, HP_METRIC_VTIME, &p);
	EXPECT(p.available && !strcmp(p.mechanism, "uprobe+uretprobe+tracepoint"), "vtime by %s", p.mechanism);
	hp_metric_plan(&m, HP_MEASURE_PID, false, false, HP_METRIC_CYCLES, &p);
	EXPECT(!p.available && strstr(p.reason, "hardware_pmu: synthetic no"), "cycles: %s", p.reason);
	const char *const pmu[] = { "hardware_pmu", "uprobes", "uretprobes", NULL };
	fake_caps(&c, pmu);
	hp_mechanisms_choose(&c, &m);
	hp_metric_plan(&m, HP_MEASURE_PID, false, false, HP_METRIC_ICACHE_STALL, &p);
	EXPECT(!p.available && strstr(p.reason, "not implemented"), "icache_stall with a PMU: %s", p.reason);
	hp_metric_plan(&m, HP_MEASURE_PID, false, false, HP_METRIC_VTIME, &p);
	EXPECT(!p.available && strstr(p.reason, "sched_switch"), "vtime without a switch hook: %s", p.reason);
}

int main(void)
{
	RUN(kernel_prefers_trampolines);
	RUN(kernel_falls_back_to_kprobes_then_samples);
	RUN(process_and_hardware);
	TEST_EXIT();
}
