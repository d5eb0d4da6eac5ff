// SPDX-License-Identifier: Apache-2.0
/*
 * bench/probe_cost: the cost of one hit of every probe kind this host allows,
 * counted the way the kernel's BPF selftests trigger benchmarks count it: one
 * thread triggers the probed code in a tight loop (a call to a tiny function
 * for uprobes, the getpgid system call for kernel probes), a minimal BPF
 * program counts the hits in a per-CPU counter, and the rate is hits per
 * second. Because these machines are shared and loaded, the headline figure is
 * CPU time rather than wall time: the triggering thread's CPU ns per hit, minus
 * its CPU ns per iteration of the same loop without the probe. The agent's own
 * measurement programs (count, and wall+vtime timers) are measured the same
 * way through the measurement API. Kinds this host refuses are listed with the
 * kernel's reason.
 *
 * Inline counters (replace/counters.h, `measure --blocks --inline`): a child
 * process runs a tight loop (one 4-instruction block per iteration) and
 * reports its CPU ns per iteration; the loop is run plain, with a counted
 * copy installed (counters on edges, the default: the loop's self edge is
 * counted in a stub) with locked increments, with plain ones, and with the
 * default's choice (auto: plain with the child's one thread proved by
 * ptrace; its reason printed), interleaved, twice each, the best kept; and
 * with uprobes at its blocks (the agent's block count). The cost of one
 * locked counter is the difference per iteration (one counter each), the
 * slowdowns are the ratios to the plain loop. The counted copy's count of
 * the loop block is checked against the iterations run, and a count not
 * proved exact gives no figure.
 *
 * usage: probe_cost [SECONDS_PER_KIND] [inline]   (default 2; inline: the
 * inline counters' figures alone, no probe on the kernel)
 */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <signal.h>
#include <sys/wait.h>

#include "host/caps.h"
#include "host/procmaps.h"
#include "measure/measure.h"
#include "replace/counters.h"
#include "target/target.h"
#include "trigger.skel.h"

/* The probed code: a nop (emulated by uprobes) and a lea (single-stepped out of line). */
__asm__(".text\n"
	".globl bench_nop\n.type bench_nop,@function\nbench_nop:\n\tnop\n\tret\n.size bench_nop, .-bench_nop\n"
	".globl bench_lea\n.type bench_lea,@function\nbench_lea:\n\tlea 1(%rdi),%rax\n\tret\n"
	".size bench_lea, .-bench_lea\n");
long bench_nop(long x);
long bench_lea(long x);
/* The tight loop: a 5-byte entry block (room for the entry jump), then one
 * block per iteration. Aligned to a cache line, so the loop's 11 bytes never
 * straddle one: straddling, the plain loop took two cycles per iteration
 * instead of one on this machine (0.65 against 0.32 ns), which halved every
 * ratio to it depending on where the linker put the function. */
__asm__(".p2align 6\n.globl bench_tight\n.type bench_tight,@function\nbench_tight:\n"
	"\txor %eax, %eax\n\txor %ecx, %ecx\n\tnop\n"
	"1:\tadd %rcx, %rax\n\tinc %rcx\n\tcmp %rdi, %rcx\n\tjb 1b\n\tret\n"
	".size bench_tight, .-bench_tight\n");
long bench_tight(long n);

enum trigger { CALL_NOP, CALL_LEA, SYSCALL };

static double seconds_per_kind = 2.0;
static volatile long sink;

static double now_s(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void trigger_n(enum trigger t, long n)
{
	long (*volatile nop)(long) = bench_nop, (*volatile lea)(long) = bench_lea;
	for (long i = 0; i < n; i++) {
		if (t == CALL_NOP)
			sink += nop(i);
		else if (t == CALL_LEA)
			sink += lea(i);
		else
			syscall(SYS_getpgid, 0);
	}
}

struct run {
	double iters, cpu_s, wall_s;
};

/* Trigger for seconds_per_kind (after a short warm-up), in batches. */
static struct run run_trigger(enum trigger t)
{
	struct run r = { 0 };
	trigger_n(t, 1000);
	double w0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	long batch = 1000;
	while (now_s(CLOCK_MONOTONIC) - w0 < seconds_per_kind) {
		trigger_n(t, batch);
		r.iters += (double)batch;
	}
	r.cpu_s = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	r.wall_s = now_s(CLOCK_MONOTONIC) - w0;
	return r;
}

static uint64_t read_hits(struct trigger_bpf *s)
{
	int n = libbpf_num_possible_cpus();
	uint64_t v[1024] = { 0 }, sum = 0;
	uint32_t zero = 0;
	if (n > 1024 || bpf_map_lookup_elem(bpf_map__fd(s->maps.hits), &zero, v) < 0)
		return 0;
	for (int i = 0; i < n; i++)
		sum += v[i];
	return sum;
}

static double base_cpu_ns[3];

struct kind {
	const char *key; /* for the summary line */
	const char *name;
	enum trigger trig;
	const char *prog;
	const char *reference;
};

static const char *errname(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : "error";
}

static int quiet(enum libbpf_print_level l, const char *f, va_list ap)
{
	return 0;
}

/* Attach kind k's program; a link or fd in *link / *fd. 0 or -errno with why. */
static int attach(struct trigger_bpf *s, const struct kind *k, struct bpf_link **link, int *fd, char *why, size_t len)
{
	struct bpf_program *p = bpf_object__find_program_by_name(s->obj, k->prog);
	struct hp_code_location loc;
	uint64_t target = (uint64_t)(uintptr_t)(k->trig == CALL_LEA ? (void *)bench_lea : (void *)bench_nop);
	bool user = k->trig != SYSCALL, ret = strstr(k->name, "uretprobe") || strstr(k->name, "kretprobe");
	if (user && hp_code_location(0, target, &loc) < 0) {
		snprintf(why, len, "cannot find the benchmark's own code in /proc/self/maps");
		return -ENOENT;
	}
	if (!strcmp(k->prog, "on_multi")) {
		uint64_t off = loc.file_offset, cookie = 0;
		*fd = hp_uprobe_multi_link(bpf_program__fd(p), loc.path, &off, &cookie, 1, ret, getpid());
		if (*fd < 0)
			snprintf(why, len, "BPF_LINK_CREATE: %s", errname(-*fd));
		return *fd < 0 ? *fd : 0;
	}
	if (user) {
		LIBBPF_OPTS(bpf_uprobe_opts, o, .retprobe = ret);
		*link = bpf_program__attach_uprobe_opts(p, getpid(), loc.path, loc.file_offset, &o);
	} else if (!strcmp(k->prog, "on_probe")) {
		LIBBPF_OPTS(bpf_kprobe_opts, o, .retprobe = ret);
		*link = bpf_program__attach_kprobe_opts(p, "__x64_sys_getpgid", &o);
	} else {
		*link = bpf_program__attach(p);
	}
	if (!*link) {
		int e = errno;
		snprintf(why, len, "attach: %s (%s)%s", errname(e), strerror(e),
			 !strcmp(k->prog, "on_tracepoint") ? "; classic tracepoints need tracefs mounted" : "");
		return -e;
	}
	return 0;
}

static void print_row(const char *name, const char *trig, double rate, double ns, const char *ref)
{
	printf("%-40s %-8s %10.3f %12.1f   %s\n", name, trig, rate / 1e6, ns, ref);
}

static double measure_kind(const struct kind *k)
{
	char why[256] = "";
	struct trigger_bpf *s = trigger_bpf__open();
	struct bpf_program *p;
	struct bpf_link *link = NULL;
	int fd = -1, r;
	double ns = NAN; /* unavailable until measured */
	if (!s) {
		printf("%-40s unavailable: cannot open the BPF object\n", k->name);
		return NAN;
	}
	bpf_object__for_each_program(p, s->obj)
	{
		bool mine = !strcmp(bpf_program__name(p), k->prog);
		bpf_program__set_autoload(p, mine);
		if (mine && !strcmp(k->prog, "on_multi"))
			bpf_program__set_expected_attach_type(p, HP_ATTACH_UPROBE_MULTI);
	}
	s->rodata->bench_tgid = (uint32_t)getpid();
	if ((r = trigger_bpf__load(s))) {
		printf("%-40s unavailable: BPF_PROG_LOAD: %s (%s)\n", k->name, errname(-r), strerror(-r));
		goto out;
	}
	if ((r = attach(s, k, &link, &fd, why, sizeof(why))) < 0) {
		printf("%-40s unavailable: %s\n", k->name, why);
		goto out;
	}
	uint64_t h0 = read_hits(s);
	struct run run = run_trigger(k->trig);
	uint64_t hits = read_hits(s) - h0;
	if (!hits) {
		printf("%-40s unavailable: attached but never fired\n", k->name);
		goto out;
	}
	ns = (run.cpu_s * 1e9 / run.iters - base_cpu_ns[k->trig]) * run.iters / (double)hits;
	print_row(k->name, k->trig == SYSCALL ? "getpgid" : "call", (double)hits / run.wall_s, ns, k->reference);
out:
	bpf_link__destroy(link);
	if (fd >= 0)
		close(fd);
	trigger_bpf__destroy(s);
	return ns;
}

/* The agent's own programs, attached by a measurement of this process. */
static double measure_agent(const char *name, uint32_t metrics, const char *ref)
{
	const char *res[] = { "bench_nop" };
	struct hp_measure_spec spec = {
		.target = HP_MEASURE_PID, .pid = getpid(), .resources = res, .nresources = 1, .metrics = metrics
	};
	struct hp_measure *h = NULL;
	char err[1024];
	if (hp_measure_open(&spec, NULL, &h, err, sizeof(err)) < 0) {
		printf("%-40s unavailable: %s\n", name, err);
		return NAN;
	}
	struct hp_measure_reading r0, r1;
	hp_measure_total(h, &r0);
	struct run run = run_trigger(CALL_NOP);
	hp_measure_total(h, &r1);
	uint64_t calls = r1.rows[0].v[HP_METRIC_COUNT].total - r0.rows[0].v[HP_METRIC_COUNT].total;
	hp_measure_reading_free(&r0);
	hp_measure_reading_free(&r1);
	char mech[96];
	snprintf(mech, sizeof(mech), "%s",
		 hp_measure_rows(h)[0]
			 .metric[metrics & HP_METRIC_BIT(HP_METRIC_VTIME) ? HP_METRIC_VTIME : HP_METRIC_COUNT]
			 .mechanism);
	hp_measure_close(h);
	if (!calls) {
		printf("%-40s unavailable: armed but counted nothing\n", name);
		return NAN;
	}
	double ns = (run.cpu_s * 1e9 / run.iters - base_cpu_ns[CALL_NOP]) * run.iters / (double)calls;
	char label[128];
	snprintf(label, sizeof(label), "%s [%s]", name, mech);
	print_row(label, "call", (double)calls / run.wall_s, ns, ref);
	return ns;
}

/* The child running the tight loop: for each n it reads, runs bench_tight(n)
 * and writes back its CPU ns. */
struct child {
	pid_t pid;
	int cmd, res;
};

static int child_start(struct child *c)
{
	int a[2], b[2];
	if (pipe(a) < 0 || pipe(b) < 0)
		return -1;
	c->pid = fork();
	if (c->pid == 0) {
		long n;
		close(a[1]);
		close(b[0]);
		while (read(a[0], &n, sizeof(n)) == sizeof(n)) {
			double c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
			sink += bench_tight(n);
			double ns = (now_s(CLOCK_THREAD_CPUTIME_ID) - c0) * 1e9;
			if (write(b[1], &ns, sizeof(ns)) != sizeof(ns))
				break;
		}
		_exit(0);
	}
	close(a[0]);
	close(b[1]);
	c->cmd = a[1];
	c->res = b[0];
	return c->pid > 0 ? 0 : -1;
}

/* CPU ns per iteration of the child's loop over n iterations (best of 3: the least disturbed). */
static double child_ns_per_iter(struct child *c, long n)
{
	double best = INFINITY;
	for (int i = 0; i < 3; i++) {
		double ns;
		if (write(c->cmd, &n, sizeof(n)) != sizeof(n) || read(c->res, &ns, sizeof(ns)) != sizeof(ns))
			return NAN;
		if (ns / (double)n < best)
			best = ns / (double)n;
	}
	return best;
}

struct inline_figures {
	double base_ns, inline_ns, plain_ns, auto_ns, uprobe_ns; /* per iteration; NAN when unavailable */
	char auto_how[400];                                      /* the default's choice, as the report says it */
	char why[512];
};

/* One counted window with the increments mode gives: install, run, check
 * the loop block's count, revert; how: the choice made (may be NULL). */
static double counted_run(struct child *c, struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
			  enum hp_count_mode mode, long n, char *how, size_t hlen, char *why, size_t wlen)
{
	char state[] = "/tmp/hotpath-probe-cost-XXXXXX", err[1024];
	struct hp_counted cn;
	if (!mkdtemp(state)) {
		snprintf(why, wlen, "no state folder");
		return NAN;
	}
	double ns = NAN;
	if (hp_counted_begin(c->pid, m, state, &f, &mod, 1, mode, false, &cn, err, sizeof(err)) < 0) {
		snprintf(why, wlen, "inline counters: %.400s", err);
	} else {
		ns = child_ns_per_iter(c, n);
		uint64_t counts[8] = { 0 };
		hp_counted_hold(&cn);
		if (how)
			snprintf(how, hlen, "%s", cn.how);
		if (!cn.exact) {
			snprintf(why, wlen, "inline counters: %.400s", cn.how);
			ns = NAN;
		} else if (f->nblocks > 8 || hp_counted_read(&cn, 0, counts, NULL, err, sizeof(err)) < 0) {
			snprintf(why, wlen, "inline counters: %.400s", f->nblocks > 8 ? "unexpected blocks" : err);
			ns = NAN;
		} else if (counts[1] != 3 * (uint64_t)n) {
			snprintf(why, wlen, "inline counters: the loop block counted %" PRIu64 ", not %ld", counts[1],
				 3 * n);
			ns = NAN;
		}
		if (hp_counted_revert(&cn, err, sizeof(err)) < 0) {
			snprintf(why, wlen, "inline counters: %.400s", err);
			ns = NAN;
		}
	}
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", state);
	return ns;
}

/* The smaller, or NAN when either run gave no figure. */
static double best_of(double a, double b)
{
	return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
}

static void measure_inline(struct inline_figures *r)
{
	struct child c;
	struct hp_model *m = NULL;
	char err[1024];
	long n = (long)(seconds_per_kind * 2e8); /* about a second per run unmeasured */

	r->base_ns = r->inline_ns = r->plain_ns = r->auto_ns = r->uprobe_ns = NAN;
	snprintf(r->auto_how, sizeof(r->auto_how), "not measured");
	snprintf(r->why, sizeof(r->why), "not measured");
	if (child_start(&c) < 0) {
		snprintf(r->why, sizeof(r->why), "fork: %s", strerror(errno));
		return;
	}
	struct hp_open_opts oo = { .only_function = "bench_tight", .quiet = true };
	const struct hp_module *mod = NULL;
	const struct hp_function *f = NULL;
	bool amb;
	if (hp_model_open_pid(c.pid, &oo, &m, err, sizeof(err)) < 0 ||
	    !(f = hp_model_find(m, "bench_tight", &mod, &amb))) {
		snprintf(r->why, sizeof(r->why), "no model of the loop: %.400s", m ? "bench_tight not found" : err);
		goto out;
	}
	/* Interleaved: each of the four in turn, twice, the best of each kept
	 * (load on the machine slows runs, never speeds them up). */
	r->base_ns = r->inline_ns = r->plain_ns = r->auto_ns = INFINITY;
	for (int round = 0; round < 2; round++) {
		r->base_ns = best_of(r->base_ns, child_ns_per_iter(&c, n));
		r->inline_ns = best_of(r->inline_ns,
				       counted_run(&c, m, mod, f, HP_COUNT_LOCKED, n, NULL, 0, r->why, sizeof(r->why)));
		r->plain_ns = best_of(r->plain_ns,
				      counted_run(&c, m, mod, f, HP_COUNT_PLAIN, n, NULL, 0, r->why, sizeof(r->why)));
		r->auto_ns = best_of(r->auto_ns, counted_run(&c, m, mod, f, HP_COUNT_AUTO, n, r->auto_how,
							     sizeof(r->auto_how), r->why, sizeof(r->why)));
	}
	/* Uprobes trap at every block: a thousandth of the iterations. */
	const char *res[] = { "bench_tight" };
	struct hp_measure_spec spec = { .target = HP_MEASURE_PID,
					.pid = c.pid,
					.resources = res,
					.nresources = 1,
					.blocks = true,
					.metrics = HP_METRIC_BIT(HP_METRIC_COUNT) };
	struct hp_measure *h = NULL;
	if (hp_measure_open(&spec, NULL, &h, err, sizeof(err)) < 0) {
		snprintf(r->why, sizeof(r->why), "uprobes: %.400s", err);
	} else {
		r->uprobe_ns = child_ns_per_iter(&c, n / 1000 > 1000 ? n / 1000 : 1000);
		hp_measure_close(h);
	}
	printf("\ninline counters: a tight loop (one block per iteration) in a child process, CPU ns per iteration\n");
	printf("%-40s %12.2f\n", "plain loop", r->base_ns);
	printf("%-40s %12.2f   %.2fx\n", "counted inline (lock inc)", r->inline_ns, r->inline_ns / r->base_ns);
	printf("%-40s %12.2f   %.2fx\n", "counted inline (plain inc)", r->plain_ns, r->plain_ns / r->base_ns);
	printf("%-40s %12.2f   %.2fx   %s\n", "counted inline (default: auto)", r->auto_ns, r->auto_ns / r->base_ns,
	       r->auto_how);
	printf("%-40s %12.2f   %.0fx\n", "counted by uprobes (--blocks)", r->uprobe_ns, r->uprobe_ns / r->base_ns);
out:
	hp_model_free(m);
	close(c.cmd);
	close(c.res);
	kill(c.pid, SIGKILL);
	waitpid(c.pid, NULL, 0);
}

static void print_x(const char *name, double ns, double base, const char *last)
{
	if (!isnan(ns) && !isnan(base) && base > 0)
		printf(" %s %.2fx%s", name, ns / base, last);
	else
		printf(" %s unavailable%s", name, last);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		seconds_per_kind = atof(argv[1]) > 0.1 ? atof(argv[1]) : 2.0;
	libbpf_set_print(quiet);
	if (argc > 2 && !strcmp(argv[2], "inline")) {
		struct inline_figures in;
		measure_inline(&in);
		if (isnan(in.inline_ns) || isnan(in.plain_ns) || isnan(in.auto_ns) || isnan(in.uprobe_ns))
			printf("inline counters: %s\n", in.why);
		return 0;
	}
	static const struct kind kinds[] = {
		{ "uprobe", "uprobe (nop: emulated)", CALL_NOP, "on_probe", "uprobe ~300-900 ns (2025 series)" },
		{ "uprobe_step", "uprobe (lea: single-stepped)", CALL_LEA, "on_probe",
		  "block starts are mostly of this kind" },
		{ "uretprobe", "uretprobe", CALL_NOP, "on_probe", "" },
		{ "uprobe_multi", "uprobe_multi (nop)", CALL_NOP, "on_multi", "same uprobe path, one link for many" },
		{ "uretprobe_multi", "uretprobe_multi", CALL_NOP, "on_multi", "" },
		{ "raw_tp", "raw_tp (sys_enter)", SYSCALL, "on_raw_tp", "rawtp ~5 ns (selftests trigger bench, 2025)" },
		{ "tp_btf", "tp_btf (sys_enter)", SYSCALL, "on_tp_btf", "same path as raw_tp" },
		{ "tracepoint", "tracepoint (syscalls:sys_enter_getpgid)", SYSCALL, "on_tracepoint",
		  "tracepoint ~13 ns" },
		{ "kprobe", "kprobe (__x64_sys_getpgid)", SYSCALL, "on_probe", "kprobe ~18 ns" },
		{ "kretprobe", "kretprobe (__x64_sys_getpgid)", SYSCALL, "on_probe", "kretprobe ~45 ns" },
		{ "fentry", "fentry (__x64_sys_getpgid)", SYSCALL, "on_fentry", "fentry ~7.5 ns" },
		{ "fexit", "fexit (__x64_sys_getpgid)", SYSCALL, "on_fexit", "fexit ~15 ns" },
	};
	const size_t nk = sizeof(kinds) / sizeof(kinds[0]);
	double ns[sizeof(kinds) / sizeof(kinds[0])];

	printf("probe_cost: %.1f s per kind; ns/hit = the triggering thread's CPU ns per hit minus its CPU ns per\n"
	       "iteration without the probe (load-independent); M hits/s = wall-clock rate as the selftests report it\n\n",
	       seconds_per_kind);
	printf("%-40s %-8s %10s %12s   %s\n", "probe kind", "trigger", "M hits/s", "ns/hit", "reference (FACTS.md)");
	for (int t = 0; t < 3; t++) {
		struct run b = run_trigger((enum trigger)t);
		base_cpu_ns[t] = b.cpu_s * 1e9 / b.iters;
		print_row(t == CALL_NOP ? "base: call of a nop function" :
			  t == CALL_LEA ? "base: call of a lea function" :
					  "base: getpgid system call",
			  t == SYSCALL ? "getpgid" : "call", b.iters / b.wall_s, base_cpu_ns[t],
			  "(ns per iteration, no probe)");
	}
	for (size_t i = 0; i < nk; i++)
		ns[i] = measure_kind(&kinds[i]);
	double count_ns = measure_agent("hotpathd count", HP_METRIC_BIT(HP_METRIC_COUNT), "agent program, per call");
	double timer_ns =
		measure_agent("hotpathd wall+vtime", HP_METRIC_BIT(HP_METRIC_WALL) | HP_METRIC_BIT(HP_METRIC_VTIME),
			      "agent programs, entry+exit per call");
	struct inline_figures in;
	measure_inline(&in);
	if (isnan(in.inline_ns) || isnan(in.plain_ns) || isnan(in.auto_ns) || isnan(in.uprobe_ns))
		printf("inline counters: %s\n", in.why);
	/* Only what was measured in this run gets a figure; the rest says unavailable (its row above
	 * says why). */
	printf("\nprobe_cost:");
	for (size_t i = 0; i < nk; i++) {
		if (!isnan(ns[i]))
			printf(" %s %.0f ns,", kinds[i].key, ns[i]);
		else
			printf(" %s unavailable,", kinds[i].key);
	}
	if (!isnan(count_ns))
		printf(" hotpathd count %.0f ns/call,", count_ns);
	else
		printf(" hotpathd count unavailable,");
	if (!isnan(timer_ns))
		printf(" wall+vtime %.0f ns/call,", timer_ns);
	else
		printf(" wall+vtime unavailable,");
	if (!isnan(in.inline_ns) && !isnan(in.base_ns))
		printf(" inline counter %.2f ns/block;", in.inline_ns - in.base_ns);
	else
		printf(" inline counter unavailable;");
	printf(" tight loop");
	print_x("inline", in.auto_ns, in.base_ns, ",");
	print_x("locked", in.inline_ns, in.base_ns, ",");
	print_x("plain", in.plain_ns, in.base_ns, ",");
	print_x("uprobes", in.uprobe_ns, in.base_ns, "\n");
	return 0;
}
