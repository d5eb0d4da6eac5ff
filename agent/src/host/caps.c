/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Probes the kernel facilities Hotpath can use: /proc/kallsyms addresses, BPF
 * text reads (reported by the model), whole-system cpu-clock sampling, the
 * hardware PMU, every probe mechanism a measurement may use (fentry, fexit,
 * kprobes at func+off, kretprobes, tracepoints, raw tracepoints, tp_btf,
 * uprobes, uretprobes, uprobe_multi links), ptrace, cgroup v2 and kernel code
 * replacement (module loading plus livepatch). Every probe is a real call
 * whose result decides the answer: a probe mechanism counts as available only
 * when a BPF program attached with it actually ran (and saw its cookie where
 * the mechanism passes one). The detail explains the outcome in words a user
 * can act on, with the kernel's errno when something was refused.
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
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "host/caps.h"
#include "host/procmaps.h"
#include "caps.skel.h"

/* The kernel function the kernel-probe mechanisms are tried on, and how to run it. */
#define KPROBE_TARGET       "__x64_sys_getpgid"
/* BPF_TRACE_UPROBE_MULTI and its return flag (Linux 6.6); the system's UAPI headers may predate them. */
#define ATTACH_UPROBE_MULTI 48
#define UPROBE_MULTI_RETURN 1u
#define CAPS_COOKIE         0x5eedULL

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

static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return 0;
}

static const char *errname(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : "error";
}

/*
 * Open the probe object with only the program named prog enabled (a program
 * the kernel refuses would fail the whole load), set its expected attach type
 * and attach target where given, and load it. NULL with *err a positive errno.
 */
static struct caps_bpf *load_progs(const char *prog, const char *prog2, int attach_type, const char *attach_to,
				   int *err)
{
	struct caps_bpf *skel = caps_bpf__open();
	struct bpf_program *p;
	if (!skel) {
		*err = errno ? errno : ENOMEM;
		return NULL;
	}
	bpf_object__for_each_program(p, skel->obj)
	{
		bool mine = strcmp(bpf_program__name(p), prog) == 0 || (prog2 && !strcmp(bpf_program__name(p), prog2));
		bpf_program__set_autoload(p, mine);
		if (mine && attach_type >= 0)
			bpf_program__set_expected_attach_type(p, (enum bpf_attach_type)attach_type);
		if (mine && attach_to)
			bpf_program__set_attach_target(p, 0, attach_to);
	}
	int r = caps_bpf__load(skel);
	if (r) {
		*err = r < 0 ? -r : EPERM;
		caps_bpf__destroy(skel);
		return NULL;
	}
	return skel;
}

static struct caps_bpf *load_only(const char *prog, int attach_type, const char *attach_to, int *err)
{
	return load_progs(prog, NULL, attach_type, attach_to, err);
}

static struct bpf_program *prog_named(struct caps_bpf *skel, const char *name)
{
	return bpf_object__find_program_by_name(skel->obj, name);
}

/* Run the kernel function the kernel probes sit on. */
static void run_kprobe_target(void)
{
	syscall(SYS_getpgid, 0);
}

/* Wait for this thread to be switched out at least once. */
static void run_sched_switch(void)
{
	struct timespec ts = { 0, 2 * 1000 * 1000 };
	for (int i = 0; i < 3; i++)
		nanosleep(&ts, NULL);
}

/* The code the uprobe capabilities probe: this process's own text. */
__attribute__((noinline)) int hp_caps_uprobe_target(int x)
{
	__asm__ volatile("" : "+r"(x));
	return x + 1;
}

static void probe_uprobes(struct hp_caps *c, bool ret)
{
	const char *name = ret ? "uretprobes" : "uprobes";
	struct hp_code_location loc;
	int r = hp_code_location(0, (uint64_t)(uintptr_t)hp_caps_uprobe_target, &loc);
	if (r < 0) {
		add(c, name, false, "cannot find this agent's own code in /proc/self/maps: %s", strerror(-r));
		return;
	}
	int e = 0;
	struct caps_bpf *skel = load_only("on_probe", -1, NULL, &e);
	if (!skel) {
		add(c, name, false, "BPF_PROG_LOAD of a kprobe-type program failed: %s (%s)", errname(e), strerror(e));
		return;
	}
	LIBBPF_OPTS(bpf_uprobe_opts, o, .bpf_cookie = CAPS_COOKIE, .retprobe = ret);
	struct bpf_link *l =
		bpf_program__attach_uprobe_opts(skel->progs.on_probe, getpid(), loc.path, loc.file_offset, &o);
	if (!l) {
		e = errno;
		add(c, name, false, "%s at %s+0x%llx failed: %s (%s)%s", name, loc.file,
		    (unsigned long long)loc.file_offset, errname(e), strerror(e),
		    access("/sys/bus/event_source/devices/uprobe", F_OK) ? " (no uprobe PMU)" : "");
	} else {
		hp_caps_uprobe_target(1);
		if (skel->bss->hits == 1 && skel->bss->cookie == CAPS_COOKIE)
			add(c, name, true,
			    "a %s on this agent's own code fired once and passed its cookie (perf_event %s)",
			    ret ? "uretprobe" : "uprobe", ret ? "uretprobe" : "uprobe");
		else
			add(c, name, false, "a %s attached but fired %llu times (cookie %#llx) for one call",
			    ret ? "uretprobe" : "uprobe", (unsigned long long)skel->bss->hits,
			    (unsigned long long)skel->bss->cookie);
		bpf_link__destroy(l);
	}
	caps_bpf__destroy(skel);
}

/* BPF_LINK_CREATE of a uprobe_multi link, with the kernel's attribute layout
 * (the system's libbpf may predate uprobe_multi). Returns the link fd or -errno. */
int hp_uprobe_multi_link(int prog_fd, const char *path, const uint64_t *offsets, const uint64_t *cookies, uint32_t cnt,
			 bool retprobe, int pid)
{
	struct {
		uint32_t prog_fd, target_fd, attach_type, flags;
		uint64_t path, offsets, ref_ctr_offsets, cookies;
		uint32_t cnt, multi_flags, pid;
	} __attribute__((aligned(8))) a;
	union bpf_attr attr;
	_Static_assert(sizeof(a) <= sizeof(attr), "uprobe_multi attributes fit in union bpf_attr");
	memset(&attr, 0, sizeof(attr));
	memset(&a, 0, sizeof(a));
	a.prog_fd = (uint32_t)prog_fd;
	a.attach_type = ATTACH_UPROBE_MULTI;
	a.path = (uint64_t)(uintptr_t)path;
	a.offsets = (uint64_t)(uintptr_t)offsets;
	a.cookies = (uint64_t)(uintptr_t)cookies;
	a.cnt = cnt;
	a.multi_flags = retprobe ? UPROBE_MULTI_RETURN : 0;
	a.pid = (uint32_t)pid;
	memcpy(&attr, &a, sizeof(a));
	int fd = (int)syscall(SYS_bpf, BPF_LINK_CREATE, &attr, sizeof(attr));
	return fd < 0 ? -errno : fd;
}

static void probe_uprobe_multi(struct hp_caps *c)
{
	struct hp_code_location loc;
	int r = hp_code_location(0, (uint64_t)(uintptr_t)hp_caps_uprobe_target, &loc);
	if (r < 0) {
		add(c, "uprobe_multi", false, "cannot find this agent's own code in /proc/self/maps: %s", strerror(-r));
		return;
	}
	int e = 0;
	struct caps_bpf *skel = load_only("on_multi", ATTACH_UPROBE_MULTI, NULL, &e);
	if (!skel) {
		add(c, "uprobe_multi", false,
		    "BPF_PROG_LOAD with expected attach type uprobe_multi failed: %s (%s); needs Linux 6.6", errname(e),
		    strerror(e));
		return;
	}
	uint64_t off = loc.file_offset, cookie = CAPS_COOKIE;
	int prog = bpf_program__fd(skel->progs.on_multi);
	int entry = hp_uprobe_multi_link(prog, loc.path, &off, &cookie, 1, false, getpid());
	int ret = entry < 0 ? entry : hp_uprobe_multi_link(prog, loc.path, &off, &cookie, 1, true, getpid());
	if (entry < 0 || ret < 0) {
		e = -(entry < 0 ? entry : ret);
		add(c, "uprobe_multi", false, "BPF_LINK_CREATE of a %s link failed: %s (%s); needs Linux 6.6",
		    entry < 0 ? "uprobe_multi" : "uretprobe_multi", errname(e), strerror(e));
	} else {
		hp_caps_uprobe_target(1);
		if (skel->bss->hits == 2 && skel->bss->cookie == CAPS_COOKIE)
			add(c, "uprobe_multi", true,
			    "uprobe_multi and uretprobe_multi links fired once each and passed their cookies: many uprobes per link");
		else
			add(c, "uprobe_multi", false, "uprobe_multi links attached but fired %llu times for one call",
			    (unsigned long long)skel->bss->hits);
	}
	if (entry >= 0)
		close(entry);
	if (ret >= 0)
		close(ret);
	caps_bpf__destroy(skel);
}

static const char *kprobe_hint(void)
{
	bool pmu = access("/sys/bus/event_source/devices/kprobe", F_OK) == 0;
	bool events = access("/sys/kernel/tracing/kprobe_events", F_OK) == 0 ||
		      access("/sys/kernel/debug/tracing/kprobe_events", F_OK) == 0;
	if (!pmu && !events)
		return "; no kprobe PMU (/sys/bus/event_source/devices/kprobe) and no kprobe_events in tracefs";
	if (!pmu)
		return "; no kprobe PMU (/sys/bus/event_source/devices/kprobe)";
	return "";
}

static void probe_kprobes(struct hp_caps *c, bool ret)
{
	const char *name = ret ? "kretprobes" : "kprobes";
	int e = 0;
	struct caps_bpf *skel = load_only("on_probe", -1, NULL, &e);
	if (!skel) {
		add(c, name, false, "BPF_PROG_LOAD of a kprobe program failed: %s (%s)", errname(e), strerror(e));
		return;
	}
	LIBBPF_OPTS(bpf_kprobe_opts, o, .bpf_cookie = CAPS_COOKIE, .retprobe = ret);
	struct bpf_link *l = bpf_program__attach_kprobe_opts(skel->progs.on_probe, KPROBE_TARGET, &o);
	if (!l) {
		e = errno;
		add(c, name, false, "%s on %s failed: %s (%s)%s: kernel function timers%s unavailable",
		    ret ? "kretprobe" : "kprobe", KPROBE_TARGET, errname(e), strerror(e), kprobe_hint(),
		    ret ? "" : " and exact kernel block counts");
		caps_bpf__destroy(skel);
		return;
	}
	run_kprobe_target();
	bool fired = skel->bss->hits >= 1 && skel->bss->cookie == CAPS_COOKIE;
	bpf_link__destroy(l);
	if (!fired) {
		add(c, name, false, "a %s on %s attached but did not fire with its cookie",
		    ret ? "kretprobe" : "kprobe", KPROBE_TARGET);
		caps_bpf__destroy(skel);
		return;
	}
	if (ret) {
		add(c, name, true, "a kretprobe on %s fired and passed its cookie", KPROBE_TARGET);
		caps_bpf__destroy(skel);
		return;
	}
	/* func+off: the first instruction boundary after the entry; the kernel
	 * answers EILSEQ for an offset inside an instruction. */
	for (uint64_t off = 1; off < 16; off++) {
		LIBBPF_OPTS(bpf_kprobe_opts, oo, .bpf_cookie = CAPS_COOKIE + off, .offset = off);
		l = bpf_program__attach_kprobe_opts(skel->progs.on_probe, KPROBE_TARGET, &oo);
		if (!l && errno == EILSEQ)
			continue;
		if (!l) {
			e = errno;
			add(c, name, false, "a kprobe at %s+0 fired, but one at %s+0x%llx failed: %s (%s)",
			    KPROBE_TARGET, KPROBE_TARGET, (unsigned long long)off, errname(e), strerror(e));
			caps_bpf__destroy(skel);
			return;
		}
		uint64_t before = skel->bss->hits;
		run_kprobe_target();
		fired = skel->bss->hits > before && skel->bss->cookie == CAPS_COOKIE + off;
		bpf_link__destroy(l);
		add(c, name, fired, "kprobes at %s+0 and at %s+0x%llx (func+off) %s", KPROBE_TARGET, KPROBE_TARGET,
		    (unsigned long long)off, fired ? "fired and passed their cookies" : "attached but did not fire");
		caps_bpf__destroy(skel);
		return;
	}
	add(c, name, false, "a kprobe at %s+0 fired, but every offset 1..15 was refused as not an instruction boundary",
	    KPROBE_TARGET);
	caps_bpf__destroy(skel);
}

/* fentry or fexit: skel, when given, has both programs loaded (and stays the
 * caller's); else the one program is loaded here. */
static void probe_fentry(struct hp_caps *c, bool exit, struct caps_bpf *both)
{
	const char *name = exit ? "fexit" : "fentry", *prog = exit ? "on_fexit" : "on_fentry";
	int e = 0;
	struct caps_bpf *skel = both ? both : load_only(prog, -1, KPROBE_TARGET, &e);
	if (!skel) {
		add(c, name, false,
		    "BPF_PROG_LOAD of an %s program for %s failed: %s (%s)%s: kernel function timers by BPF trampoline unavailable",
		    name, KPROBE_TARGET, errname(e), strerror(e),
		    e == EPERM ? " before verification: this kernel forbids BPF trampolines" : "");
		return;
	}
	struct bpf_link *l = bpf_program__attach(prog_named(skel, prog));
	if (!l) {
		e = errno;
		add(c, name, false, "%s on %s loaded but did not attach: %s (%s)", name, KPROBE_TARGET, errname(e),
		    strerror(e));
		if (!both)
			caps_bpf__destroy(skel);
		return;
	}
	uint64_t before = skel->bss->hits;
	run_kprobe_target();
	bool fired = skel->bss->hits > before;
	bpf_link__destroy(l);
	add(c, name, fired, "an %s program on %s %s", name, KPROBE_TARGET,
	    fired ? "attached through a BPF trampoline and fired" : "attached but did not fire");
	if (!both)
		caps_bpf__destroy(skel);
}

/* fentry and fexit from one load of both programs: each load parses the
 * kernel's BTF for the attach target, seconds under emulation. Where the
 * pair does not load, each is tried alone, so each gets its own answer. */
static void probe_trampolines(struct hp_caps *c)
{
	int e = 0;
	struct caps_bpf *both = load_progs("on_fentry", "on_fexit", -1, KPROBE_TARGET, &e);
	probe_fentry(c, false, both);
	probe_fentry(c, true, both);
	if (both)
		caps_bpf__destroy(both);
}

/* Attach prog (a sched_switch program) and check it runs when this thread sleeps. */
static void probe_switch_program(struct hp_caps *c, const char *name, const char *prog, const char *how)
{
	int e = 0;
	struct caps_bpf *skel = load_only(prog, -1, NULL, &e);
	if (!skel) {
		add(c, name, false, "BPF_PROG_LOAD of a %s program on sched_switch failed: %s (%s)", how, errname(e),
		    strerror(e));
		return;
	}
	struct bpf_link *l = bpf_program__attach(prog_named(skel, prog));
	if (!l) {
		e = errno;
		add(c, name, false, "a %s program on sched_switch did not attach: %s (%s)%s", how, errname(e),
		    strerror(e),
		    strcmp(name, "tracepoints") == 0 && access("/sys/kernel/tracing/events", F_OK) &&
				    access("/sys/kernel/debug/tracing/events", F_OK) ?
			    " (tracefs is not mounted: classic tracepoints are found by their tracefs id)" :
			    "");
		caps_bpf__destroy(skel);
		return;
	}
	run_sched_switch();
	bool fired = skel->bss->hits >= 1;
	bpf_link__destroy(l);
	add(c, name, fired, "a %s program on sched_switch %s", how,
	    fired ? "attached and fired" : "attached but never fired");
	caps_bpf__destroy(skel);
}

static void probe_ptrace(struct hp_caps *c)
{
	/* A child that waits; attach, read a word of its text, detach. */
	pid_t child = fork();
	if (child < 0) {
		add(c, "ptrace", false, "fork failed: %s", strerror(errno));
		return;
	}
	if (child == 0) {
		for (;;)
			pause();
	}
	const char *what = "PTRACE_SEIZE";
	long r = ptrace(PTRACE_SEIZE, child, NULL, NULL);
	int e = r < 0 ? errno : 0, st = 0;
	if (!e) {
		what = "PTRACE_INTERRUPT";
		if (ptrace(PTRACE_INTERRUPT, child, NULL, NULL) < 0 || waitpid(child, &st, __WALL) < 0)
			e = errno;
	}
	long word = 0;
	if (!e) {
		what = "PTRACE_PEEKTEXT";
		errno = 0;
		word = ptrace(PTRACE_PEEKTEXT, child, (void *)(uintptr_t)hp_caps_uprobe_target, NULL);
		e = errno;
	}
	long mine;
	memcpy(&mine, (const void *)(uintptr_t)hp_caps_uprobe_target, sizeof(mine));
	kill(child, SIGKILL);
	waitpid(child, &st, __WALL);
	if (e)
		add(c, "ptrace", false, "%s of a child process failed: %s (%s)%s", what, errname(e), strerror(e),
		    e == EPERM ? ": needs CAP_SYS_PTRACE and a Yama ptrace_scope that allows it" : "");
	else
		add(c, "ptrace", word == mine,
		    "PTRACE_SEIZE, PTRACE_INTERRUPT and PTRACE_PEEKTEXT of a child's text %s",
		    word == mine ? "work" : "returned the wrong bytes");
}

static void probe_cgroup_v2(struct hp_caps *c)
{
	char line[4096], mnt[1024] = "";
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (f) {
		while (!mnt[0] && fgets(line, sizeof(line), f)) {
			char *sep = strstr(line, " - cgroup2 ");
			char point[1024];
			if (sep && sscanf(line, "%*s %*s %*s %*s %1023s", point) == 1)
				snprintf(mnt, sizeof(mnt), "%s", point);
		}
		fclose(f);
	}
	if (!mnt[0]) {
		add(c, "cgroup_v2", false, "no cgroup2 hierarchy mounted: cgroup predicates unavailable");
		return;
	}
	add(c, "cgroup_v2", true, "cgroup2 mounted at %s: cgroup predicates compare bpf_get_current_cgroup_id", mnt);
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

/* HOTPATH_DENY_MECHANISMS=fentry,fexit,...: report those capabilities unavailable (after probing
 * them), so one kernel can exercise every fallback; for tests and for operators who want a
 * mechanism left alone. */
void hp_caps_apply_denials(struct hp_caps *c)
{
	const char *deny = getenv("HOTPATH_DENY_MECHANISMS");
	if (!deny || !*deny)
		return;
	for (size_t i = 0; i < c->n; i++) {
		size_t n = strlen(c->caps[i].name);
		for (const char *p = deny; *p;) {
			size_t w = strcspn(p, ",");
			if (w == n && !strncmp(p, c->caps[i].name, n)) {
				char was[sizeof(c->caps[i].detail)];
				snprintf(was, sizeof(was), "%s", c->caps[i].detail);
				c->caps[i].available = false;
				snprintf(c->caps[i].detail, sizeof(c->caps[i].detail),
					 "disabled by HOTPATH_DENY_MECHANISMS (the probe said: %.200s)", was);
			}
			p += w + (p[w] == ',');
		}
	}
}

void hp_caps_probe_with(struct hp_caps *c, bool model_ok, const char *model_detail, const struct hp_caps *bpf)
{
	/* HOTPATH_TIMING=1 prints what each probe took. */
	bool timing = getenv("HOTPATH_TIMING") != NULL;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
#define TIMED(what, call)                                                                                   \
	do {                                                                                                \
		call;                                                                                       \
		if (timing) {                                                                               \
			clock_gettime(CLOCK_MONOTONIC, &t1);                                                \
			fprintf(stderr, "  caps %-16s %.3f s\n", what,                                      \
				(double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9); \
			t0 = t1;                                                                            \
		}                                                                                           \
	} while (0)
	memset(c, 0, sizeof(*c));
	TIMED("kallsyms", probe_kallsyms(c));
	add(c, "bpf_text_read", model_ok, "%s", model_detail ? model_detail : "");
	TIMED("sampling", probe_sampling(c));
	TIMED("pmu", probe_pmu(c));
	if (bpf) {
		/* The BPF probes' answers as given (the boot's cache), in their order. */
		for (size_t i = 0; i < bpf->n && c->n < HP_CAP_MAX; i++)
			c->caps[c->n++] = bpf->caps[i];
		TIMED("bpf (cached)", (void)0);
	} else {
		libbpf_print_fn_t old = libbpf_set_print(quiet_print);
		TIMED("fentry, fexit", probe_trampolines(c));
		TIMED("kprobes", probe_kprobes(c, false));
		TIMED("kretprobes", probe_kprobes(c, true));
		TIMED("tracepoints", probe_switch_program(c, "tracepoints", "on_tracepoint", "classic tracepoint"));
		TIMED("raw_tracepoints", probe_switch_program(c, "raw_tracepoints", "on_raw_tp", "raw tracepoint"));
		TIMED("tp_btf", probe_switch_program(c, "tp_btf", "on_tp_btf", "BTF tracepoint (tp_btf)"));
		TIMED("uprobes", probe_uprobes(c, false));
		TIMED("uretprobes", probe_uprobes(c, true));
		TIMED("uprobe_multi", probe_uprobe_multi(c));
		libbpf_set_print(old);
	}
	TIMED("ptrace", probe_ptrace(c));
	TIMED("cgroup_v2", probe_cgroup_v2(c));
	TIMED("code_replacement", probe_code_replacement(c));
#undef TIMED
}

void hp_caps_probe(struct hp_caps *c, bool model_ok, const char *model_detail)
{
	hp_caps_probe_with(c, model_ok, model_detail, NULL);
	hp_caps_apply_denials(c);
}

const struct hp_cap *hp_caps_find(const struct hp_caps *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->caps[i].name, name) == 0)
			return &c->caps[i];
	return NULL;
}
