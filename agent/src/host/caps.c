/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Probes the kernel facilities Hotpath can use: /proc/kallsyms addresses, BPF
 * text reads (reported by the model), whole-system cpu-clock sampling, the
 * hardware PMU, tracepoints, kprobes and kernel code replacement (module
 * loading plus livepatch). Every probe is a real call whose result decides
 * the answer; the detail explains the outcome in words a user can act on.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>

#include "host/caps.h"

static int perf_open(struct perf_event_attr *a, int pid, int cpu)
{
	return (int)syscall(SYS_perf_event_open, a, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

static struct hp_cap *add(struct hp_caps *c, const char *name, bool ok, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static struct hp_cap *add(struct hp_caps *c, const char *name, bool ok, const char *fmt, ...)
{
	if (c->n >= HP_CAP_MAX)
		return NULL;
	struct hp_cap *cap = &c->caps[c->n++];
	cap->name = name;
	cap->available = ok;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cap->detail, sizeof(cap->detail), fmt, ap);
	va_end(ap);
	return cap;
}

static const char *perm_hint(int e)
{
	if (e == EACCES || e == EPERM)
		return " (needs CAP_PERFMON or CAP_SYS_ADMIN, or kernel.perf_event_paranoid <= -1)";
	return "";
}

static void probe_kallsyms(struct hp_caps *c)
{
	FILE *f = fopen("/proc/kallsyms", "re");
	if (!f) {
		add(c, "kallsyms", false, "/proc/kallsyms unreadable: %s", strerror(errno));
		return;
	}
	char line[512];
	unsigned long nonzero = 0, seen = 0;
	/* A handful of text symbols is enough to tell real addresses from the
	 * zeros that kptr_restrict shows to unprivileged readers. */
	while (seen < 64 && fgets(line, sizeof(line), f)) {
		unsigned long long addr;
		char type;
		if (sscanf(line, "%llx %c", &addr, &type) != 2)
			continue;
		if (type != 't' && type != 'T')
			continue;
		seen++;
		if (addr)
			nonzero++;
	}
	fclose(f);
	char kr[16] = "?";
	FILE *k = fopen("/proc/sys/kernel/kptr_restrict", "re");
	if (k) {
		if (fgets(kr, sizeof(kr), k))
			kr[strcspn(kr, "\n")] = '\0';
		fclose(k);
	}
	if (seen && nonzero == seen)
		add(c, "kallsyms", true, "/proc/kallsyms shows real text addresses (kptr_restrict=%s)", kr);
	else
		add(c, "kallsyms", false,
		    "/proc/kallsyms shows %s addresses (kptr_restrict=%s); needs CAP_SYSLOG or kptr_restrict=0",
		    seen ? "zeroed" : "no text", kr);
}

static void probe_sampling(struct hp_caps *c)
{
	struct perf_event_attr a = { 0 };
	a.size = sizeof(a);
	a.type = PERF_TYPE_SOFTWARE;
	a.config = PERF_COUNT_SW_CPU_CLOCK;
	a.freq = 1;
	a.sample_freq = 997;
	a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID;
	a.disabled = 1;
	int fd = perf_open(&a, -1, 0);
	if (fd < 0) {
		int e = errno;
		add(c, "perf_sampling", false, "perf_event_open(cpu-clock, all tasks, cpu 0) failed: %s%s", strerror(e),
		    perm_hint(e));
		return;
	}
	close(fd);
	add(c, "perf_sampling", true,
	    "whole-system PC sampling with the software cpu-clock event (perf_event_open, IP+TID, mmap ring)");
}

bool hp_probe_hw_cycles(int *err_out)
{
	struct perf_event_attr a = { 0 };
	a.size = sizeof(a);
	a.type = PERF_TYPE_HARDWARE;
	a.config = PERF_COUNT_HW_CPU_CYCLES;
	a.disabled = 1;
	int fd = perf_open(&a, -1, 0);
	if (fd < 0) {
		if (err_out)
			*err_out = errno;
		return false;
	}
	close(fd);
	return true;
}

static void probe_pmu(struct hp_caps *c)
{
	int e = 0;
	if (hp_probe_hw_cycles(&e)) {
		add(c, "hardware_pmu", true, "perf_event_open(cycles) works: cycle-based sampling available");
		return;
	}
	const char *why =
		(e == ENOENT || e == EOPNOTSUPP || e == ENODEV) ? "no hardware PMU" : "hardware PMU not usable";
	add(c, "hardware_pmu", false,
	    "%s: perf_event_open(cycles) failed with %s (%s)%s; cycle, I-cache and branch-mispredict metrics unavailable",
	    why, strerrorname_np(e) ? strerrorname_np(e) : "error", strerror(e),
	    (e == ENOENT || e == EOPNOTSUPP) ? ", likely a virtualized CPU" : perm_hint(e));
}

/* Load a two-instruction BPF raw-tracepoint program and attach it to tp. */
static int raw_tp_probe(const char *tp, int *err_out)
{
	struct bpf_insn insns[2] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_RAW_TRACEPOINT;
	a.insns = (uint64_t)(uintptr_t)insns;
	a.insn_cnt = 2;
	a.license = (uint64_t)(uintptr_t) "GPL";
	int prog = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof(a));
	if (prog < 0) {
		*err_out = errno;
		return -1;
	}
	memset(&a, 0, sizeof(a));
	a.raw_tracepoint.name = (uint64_t)(uintptr_t)tp;
	a.raw_tracepoint.prog_fd = (uint32_t)prog;
	int link = (int)syscall(SYS_bpf, BPF_RAW_TRACEPOINT_OPEN, &a, sizeof(a));
	*err_out = errno;
	close(prog);
	if (link < 0)
		return -1;
	close(link);
	return 0;
}

static void probe_tracepoints(struct hp_caps *c)
{
	static const char *const roots[] = { "/sys/kernel/tracing", "/sys/kernel/debug/tracing" };
	char path[256], buf[32];
	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
		snprintf(path, sizeof(path), "%s/events/sched/sched_switch/id", roots[i]);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		bool got = fgets(buf, sizeof(buf), f) != NULL;
		fclose(f);
		if (!got)
			continue;
		struct perf_event_attr a = { 0 };
		a.size = sizeof(a);
		a.type = PERF_TYPE_TRACEPOINT;
		a.config = strtoull(buf, NULL, 10);
		a.disabled = 1;
		int fd = perf_open(&a, -1, 0);
		if (fd < 0) {
			int e = errno;
			add(c, "tracepoints", false,
			    "sched:sched_switch (id %llu) found but perf_event_open failed: %s%s",
			    (unsigned long long)a.config, strerror(e), perm_hint(e));
			return;
		}
		close(fd);
		add(c, "tracepoints", true, "sched:sched_switch opened through perf_event_open (tracefs at %s)",
		    roots[i]);
		return;
	}
	/* No tracefs: try a raw tracepoint, which needs no mounted file system. */
	int e = 0;
	if (raw_tp_probe("sched_switch", &e) == 0) {
		add(c, "tracepoints", true,
		    "raw tracepoint sched_switch attached with a BPF program (tracefs not mounted)");
		return;
	}
	add(c, "tracepoints", false, "tracefs not mounted and a BPF raw tracepoint on sched_switch failed: %s",
	    strerror(e));
}

static void probe_kprobes(struct hp_caps *c)
{
	char buf[32];
	FILE *f = fopen("/sys/bus/event_source/devices/kprobe/type", "re");
	if (!f) {
		add(c, "kprobes", false,
		    "no kprobe PMU (/sys/bus/event_source/devices/kprobe absent): exact block counts and function timers unavailable");
		return;
	}
	bool got = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	if (!got) {
		add(c, "kprobes", false, "kprobe PMU type unreadable");
		return;
	}
	struct perf_event_attr a = { 0 };
	a.size = sizeof(a);
	a.type = (uint32_t)strtoul(buf, NULL, 10);
	a.config1 = (uint64_t)(uintptr_t) "vfs_read"; /* kprobe_func */
	a.config2 = 0;                                /* probe_offset */
	a.disabled = 1;
	int fd = perf_open(&a, -1, 0);
	if (fd < 0) {
		int e = errno;
		add(c, "kprobes", false, "kprobe PMU present but a probe on vfs_read failed: %s%s", strerror(e),
		    perm_hint(e));
		return;
	}
	close(fd);
	add(c, "kprobes", true, "kprobe PMU: a probe on vfs_read opened through perf_event_open");
}

static void probe_code_replacement(struct hp_caps *c)
{
	/* finit_module(-1) fails with EBADF where module loading exists and
	 * ENOSYS where the kernel was built without it; it never loads anything. */
	long r = syscall(SYS_finit_module, -1, "", 0);
	int e = r < 0 ? errno : 0;
	struct stat st;
	bool proc_modules = stat("/proc/modules", &st) == 0;
	bool livepatch = stat("/sys/kernel/livepatch", &st) == 0;
	if (e == ENOSYS || !proc_modules) {
		add(c, "kernel_code_replacement", false,
		    "kernel modules unsupported (finit_module gives %s%s): code cannot be replaced in this kernel",
		    e == ENOSYS ? "ENOSYS" : strerror(e), proc_modules ? "" : ", no /proc/modules");
		return;
	}
	if (e == EPERM) {
		add(c, "kernel_code_replacement", false,
		    "loading modules is not permitted (finit_module gives EPERM): needs CAP_SYS_MODULE and no lockdown");
		return;
	}
	if (!livepatch) {
		add(c, "kernel_code_replacement", false,
		    "modules load but the kernel has no livepatch support (/sys/kernel/livepatch absent)");
		return;
	}
	add(c, "kernel_code_replacement", true,
	    "module loading reachable (finit_module gives %s) and livepatch present",
	    strerrorname_np(e) ? strerrorname_np(e) : "an error");
}

void hp_caps_probe(struct hp_caps *c, bool model_ok, const char *model_detail)
{
	memset(c, 0, sizeof(*c));
	probe_kallsyms(c);
	add(c, "bpf_text_read", model_ok, "%s", model_detail ? model_detail : "");
	probe_sampling(c);
	probe_pmu(c);
	probe_tracepoints(c);
	probe_kprobes(c);
	probe_code_replacement(c);
}

const struct hp_cap *hp_caps_find(const struct hp_caps *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->caps[i].name, name) == 0)
			return &c->caps[i];
	return NULL;
}
