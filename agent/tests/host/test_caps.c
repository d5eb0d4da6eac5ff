// SPDX-License-Identifier: Apache-2.0
/*
 * This host's capabilities, probed for real: every mechanism is in the list
 * whether available or not, each with a detail, and what the probes claim
 * agrees with what the kernel shows in sysfs (a uprobe PMU, a kprobe PMU)
 * and with a direct attempt (perf_event_open of cycles for the PMU).
 */
#include <unistd.h>

#include "harness.h"
#include "host/caps.h"

static struct hp_caps caps;

static void every_mechanism_is_listed(void)
{
	static const char *const names[] = { "kallsyms",
					     "bpf_text_read",
					     "perf_sampling",
					     "hardware_pmu",
					     "fentry",
					     "fexit",
					     "kprobes",
					     "kretprobes",
					     "tracepoints",
					     "raw_tracepoints",
					     "tp_btf",
					     "uprobes",
					     "uretprobes",
					     "uprobe_multi",
					     "ptrace",
					     "cgroup_v2",
					     "kernel_code_replacement" };
	EXPECT(caps.n == sizeof(names) / sizeof(names[0]), "%zu capabilities", caps.n);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const struct hp_cap *c = hp_caps_find(&caps, names[i]);
		EXPECT(c, "%s missing", names[i]);
		if (c)
			EXPECT(strlen(c->detail) > 10, "%s has no detail", names[i]);
	}
}

static void claims_agree_with_the_kernel(void)
{
	bool uprobe_pmu = access("/sys/bus/event_source/devices/uprobe", F_OK) == 0;
	bool kprobe_pmu = access("/sys/bus/event_source/devices/kprobe", F_OK) == 0;
	EXPECT(hp_caps_find(&caps, "uprobes")->available == uprobe_pmu, "uprobes %d, uprobe PMU %d",
	       hp_caps_find(&caps, "uprobes")->available, uprobe_pmu);
	if (!kprobe_pmu && access("/sys/kernel/tracing/kprobe_events", F_OK) &&
	    access("/sys/kernel/debug/tracing/kprobe_events", F_OK)) {
		EXPECT(!hp_caps_find(&caps, "kprobes")->available && !hp_caps_find(&caps, "kretprobes")->available,
		       "kprobes claimed without a kprobe PMU or kprobe_events");
		EXPECT(strstr(hp_caps_find(&caps, "kprobes")->detail, "no kprobe PMU"), "kprobes: %s",
		       hp_caps_find(&caps, "kprobes")->detail);
	}
	EXPECT(hp_caps_find(&caps, "hardware_pmu")->available == hp_probe_hw_cycles(NULL), "hardware_pmu disagrees");
	/* Pairs: an exit mechanism is never claimed where its entry is refused. */
	if (!hp_caps_find(&caps, "fentry")->available)
		EXPECT(!hp_caps_find(&caps, "fexit")->available, "fexit without fentry");
	/* A mechanism refused by the kernel names the refusal. */
	for (size_t i = 0; i < caps.n; i++)
		if (!caps.caps[i].available && strcmp(caps.caps[i].name, "bpf_text_read"))
			EXPECT(strstr(caps.caps[i].detail, "fail") || strstr(caps.caps[i].detail, "no ") ||
				       strstr(caps.caps[i].detail, "not"),
			       "%s refused without a reason: %s", caps.caps[i].name, caps.caps[i].detail);
}

static void uprobes_pass_cookies(void)
{
	const struct hp_cap *u = hp_caps_find(&caps, "uprobes");
	if (!u->available)
		SKIP("no uprobes here: %s", u->detail);
	EXPECT(strstr(u->detail, "cookie"), "uprobes: %s", u->detail);
	/* The uprobe fired on this function; it still works afterwards. */
	EXPECT(hp_caps_uprobe_target(41) == 42, "the probed function misbehaves");
}

int main(void)
{
	hp_caps_probe(&caps, true, "kernel text read checked by the target tests");
	RUN(every_mechanism_is_listed);
	RUN(claims_agree_with_the_kernel);
	RUN(uprobes_pass_cookies);
	TEST_EXIT();
}
