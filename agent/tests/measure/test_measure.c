// SPDX-License-Identifier: Apache-2.0
/*
 * Measurements of real processes through the measurement API, against this
 * machine's live kernel: a fixture compiled here (tests/fixtures/measured.c)
 * calls functions a known number of times, takes a branch with a known split,
 * spends a known share of a function's time on a CPU and recurses. The
 * probes must count exactly, time recursion once, virtualize time by the
 * thread's own CPU time, derive every edge of the fixture's functions with
 * flow conservation holding, end cleanly when the process exits, apply
 * predicates in the kernel, and refuse what cannot be measured with the
 * reason. Timing checks compare with the fixture's own clocks, so a loaded
 * machine changes both sides alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "measure/measure.h"
#include "target/target.h"
#include "test_util.h"

static const char *fixture, *fixture_o0, *manyblocks;
static struct hp_caps caps;

struct child {
	pid_t pid;
	FILE *out; /* its stdout */
};

/* Start the fixture with args and wait for its "ready" line. */
static bool spawn(const char *path, const char *const *args, struct child *c)
{
	int fds[2];
	if (pipe(fds) < 0)
		return false;
	c->pid = fork();
	if (c->pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		const char *argv[8] = { path };
		for (int i = 0; args[i] && i < 6; i++)
			argv[i + 1] = args[i];
		execv(path, (char *const *)argv);
		_exit(127);
	}
	close(fds[1]);
	c->out = fdopen(fds[0], "r");
	char line[128];
	return c->pid > 0 && c->out && fgets(line, sizeof(line), c->out) && !strncmp(line, "ready", 5);
}

/* The child's last output line, after it exits. */
static bool finish(struct child *c, char *line, size_t len)
{
	bool got = false;
	while (fgets(line, (int)len, c->out))
		got = true;
	fclose(c->out);
	waitpid(c->pid, NULL, 0);
	return got;
}

static void kill_child(struct child *c)
{
	kill(c->pid, SIGKILL);
	if (c->out)
		fclose(c->out);
	waitpid(c->pid, NULL, 0);
}

static int open_pid(pid_t pid, const char *const *res, size_t n, uint32_t metrics, bool blocks, struct hp_measure **h,
		    char *err, size_t errlen)
{
	struct hp_measure_spec s = { .target = HP_MEASURE_PID,
				     .pid = pid,
				     .resources = res,
				     .nresources = n,
				     .metrics = metrics,
				     .blocks = blocks };
	struct hp_measure_env env = { .caps = &caps };
	return hp_measure_open(&s, &env, h, err, errlen);
}

/* Wait (up to 30 s) for the measured process to exit. */
static bool wait_exit(struct hp_measure *h)
{
	for (int i = 0; i < 300; i++) {
		if (hp_measure_wait(h, 100) == 1 || hp_measure_state(h, NULL, 0) == HP_MEASURE_TARGET_EXITED)
			return true;
	}
	return false;
}

static size_t row_of(struct hp_measure *h, const char *function, int kind, uint32_t block_offset)
{
	const struct hp_measure_row *r = hp_measure_rows(h);
	for (size_t i = 0; i < hp_measure_nrows(h); i++)
		if (!strcmp(r[i].function, function) && (int)r[i].kind == kind &&
		    (kind == HP_ROW_FUNCTION || r[i].block_offset == block_offset))
			return i;
	return SIZE_MAX;
}

static uint64_t count_of(const struct hp_measure_reading *r, size_t row)
{
	return row < r->nrows ? r->rows[row].v[HP_METRIC_COUNT].total : UINT64_MAX;
}

static void counts_are_exact(void)
{
	REQUIRE(fixture, "fixture did not compile");
	struct child c;
	const char *args[] = { "calls", "1000", NULL };
	REQUIRE(spawn(fixture, args, &c), "fixture did not start");
	const char *res[] = { "mx_call", "mx_leaf" };
	struct hp_measure *h = NULL;
	char err[1024];
	int r = open_pid(c.pid, res, 2, HP_METRIC_BIT(HP_METRIC_COUNT), false, &h, err, sizeof(err));
	if (r < 0)
		kill_child(&c);
	REQUIRE(r == 0, "open: %s", err);
	struct hp_measure_reading rd;
	REQUIRE(hp_measure_read(h, &rd) == 0, "first read failed");
	EXPECT(rd.state == HP_MEASURE_ARMED, "state %s before the code ran", hp_measure_state_name(rd.state));
	EXPECT(count_of(&rd, 0) == 0, "counted %llu before the code ran", (unsigned long long)count_of(&rd, 0));
	hp_measure_reading_free(&rd);
	kill(c.pid, SIGUSR1);
	char line[128];
	EXPECT(wait_exit(h), "the exit of the fixture was not noticed");
	REQUIRE(finish(&c, line, sizeof(line)), "no output from the fixture");
	REQUIRE(hp_measure_total(h, &rd) == 0, "total failed");
	EXPECT(count_of(&rd, row_of(h, "mx_call", HP_ROW_FUNCTION, 0)) == 1000, "mx_call counted %llu, called 1000",
	       (unsigned long long)count_of(&rd, row_of(h, "mx_call", HP_ROW_FUNCTION, 0)));
	EXPECT(count_of(&rd, row_of(h, "mx_leaf", HP_ROW_FUNCTION, 0)) == 2000, "mx_leaf counted %llu, called 2000",
	       (unsigned long long)count_of(&rd, row_of(h, "mx_leaf", HP_ROW_FUNCTION, 0)));
	EXPECT(rd.state == HP_MEASURE_TARGET_EXITED, "state %s after exit", hp_measure_state_name(rd.state));
	EXPECT(rd.rows[0].v[HP_METRIC_COUNT].label == HP_LABEL_EXACT, "count not labelled exact");
	hp_measure_reading_free(&rd);
	hp_measure_close(h);
}

/* The fallbacks count the same: perf-event uprobes instead of uprobe_multi links, raw_tp instead of tp_btf. */
static void fallback_mechanisms_count_the_same(void)
{
	REQUIRE(fixture, "fixture did not compile");
	struct hp_caps fallback;
	setenv("HOTPATH_DENY_MECHANISMS", "uprobe_multi,tp_btf", 1);
	hp_caps_probe(&fallback, true, "not used by these tests");
	unsetenv("HOTPATH_DENY_MECHANISMS");
	REQUIRE(!hp_caps_find(&fallback, "uprobe_multi")->available &&
			strstr(hp_caps_find(&fallback, "tp_btf")->detail, "HOTPATH_DENY_MECHANISMS"),
		"the denial did not apply");
	if (!hp_caps_find(&fallback, "uprobes")->available || !hp_caps_find(&fallback, "raw_tracepoints")->available)
		SKIP("no perf-event uprobes or raw tracepoints here");
	struct child c;
	const char *args[] = { "calls", "400", NULL };
	REQUIRE(spawn(fixture, args, &c), "fixture did not start");
	const char *res[] = { "mx_call", "mx_branch" };
	struct hp_measure_spec s = { .target = HP_MEASURE_PID,
				     .pid = c.pid,
				     .resources = res,
				     .nresources = 2,
				     .metrics = HP_METRIC_BIT(HP_METRIC_VTIME),
				     .blocks = true };
	struct hp_measure_env env = { .caps = &fallback };
	struct hp_measure *h = NULL;
	char err[1024], line[128];
	int r = hp_measure_open(&s, &env, &h, err, sizeof(err));
	if (r < 0)
		kill_child(&c);
	REQUIRE(r == 0, "open: %s", err);
	kill(c.pid, SIGUSR1);
	EXPECT(wait_exit(h), "exit not noticed");
	finish(&c, line, sizeof(line));
	struct hp_measure_reading rd;
	REQUIRE(hp_measure_total(h, &rd) == 0, "total failed");
	size_t call = row_of(h, "mx_call", HP_ROW_FUNCTION, 0);
	const struct hp_measure_row *rows = hp_measure_rows(h);
	EXPECT(count_of(&rd, call) == 400 && rd.rows[call].exits == 400, "mx_call: %llu calls, %llu timed",
	       (unsigned long long)count_of(&rd, call), (unsigned long long)rd.rows[call].exits);
	EXPECT(!strcmp(rows[call].metric[HP_METRIC_VTIME].mechanism, "uprobe+uretprobe+raw_tp"), "vtime by %s",
	       rows[call].metric[HP_METRIC_VTIME].mechanism);
	EXPECT(rd.rows[call].v[HP_METRIC_VTIME].value > 0, "no vtime");
	bool quarter = false;
	for (size_t i = 0; i < rd.nrows; i++)
		quarter |= rows[i].kind == HP_ROW_BLOCK && !strcmp(rows[i].function, "mx_branch") &&
			   count_of(&rd, i) == 100;
	EXPECT(quarter, "no block of mx_branch counted 100 (i %% 4 == 0 of 400)");
	hp_measure_reading_free(&rd);
	hp_measure_close(h);
}

/* Every derived edge exact, conservation intact, and the branch's two sides 250/750. */
static void branch_split_is_exact(void)
{
	REQUIRE(fixture, "fixture did not compile");
	struct child c;
	const char *args[] = { "calls", "1000", NULL };
	REQUIRE(spawn(fixture, args, &c), "fixture did not start");
	const char *res[] = { "mx_branch" };
	struct hp_measure *h = NULL;
	char err[1024], line[128];
	int r = open_pid(c.pid, res, 1, HP_METRIC_BIT(HP_METRIC_COUNT), true, &h, err, sizeof(err));
	if (r < 0)
		kill_child(&c);
	REQUIRE(r == 0, "open: %s", err);
	kill(c.pid, SIGUSR1);
	EXPECT(wait_exit(h), "exit not noticed");
	finish(&c, line, sizeof(line));
	struct hp_measure_reading rd;
	REQUIRE(hp_measure_total(h, &rd) == 0, "total failed");
	const struct hp_measure_row *rows = hp_measure_rows(h);
	size_t fn = row_of(h, "mx_branch", HP_ROW_FUNCTION, 0);
	REQUIRE(fn != SIZE_MAX, "no function row");
	EXPECT(count_of(&rd, fn) == 1000, "entries %llu", (unsigned long long)count_of(&rd, fn));
	EXPECT(count_of(&rd, row_of(h, "mx_branch", HP_ROW_BLOCK, 0)) == 1000, "entry block %llu",
	       (unsigned long long)count_of(&rd, row_of(h, "mx_branch", HP_ROW_BLOCK, 0)));
	bool quarter = false, rest = false;
	for (size_t i = 0; i < rd.nrows; i++) {
		if (rows[i].kind != HP_ROW_BLOCK)
			continue;
		quarter |= count_of(&rd, i) == 250;
		rest |= count_of(&rd, i) == 750;
	}
	EXPECT(quarter && rest, "no blocks counted exactly 250 and 750 (i %% 4 == 0 and the rest)");
	struct hp_function_edges *fe = NULL;
	size_t nfe = 0;
	REQUIRE(hp_measure_edges(h, &rd, &fe, &nfe) == 0 && nfe == 1, "edges of %zu functions", nfe);
	const struct hp_edge_result *er = &fe[0].edges;
	EXPECT(er->nexact == er->nedges, "%zu of %zu edges exact", er->nexact, er->nedges);
	EXPECT(er->violations == 0, "%zu conservation violations", er->violations);
	uint64_t out_of_entry[2] = { 0, 0 };
	size_t k = 0;
	for (size_t i = 0; i < er->nedges; i++)
		if (er->edges[i].from == 0 && k < 2)
			out_of_entry[k++] = er->edges[i].count;
	EXPECT(k == 2 && out_of_entry[0] + out_of_entry[1] == 1000 &&
		       (out_of_entry[0] == 250 || out_of_entry[1] == 250),
	       "edges out of the entry block: %llu and %llu", (unsigned long long)out_of_entry[0],
	       (unsigned long long)out_of_entry[1]);
	hp_measure_edges_free(fe, nfe);
	hp_measure_reading_free(&rd);
	hp_measure_close(h);
}

/* Every function of a program's own executable, blocks and all. */
static void conservation_on_every_function(const char *path, const char *const *args, const char *what)
{
	struct child c;
	REQUIRE(spawn(path, args, &c), "%s did not start", what);
	struct hp_model *m = NULL;
	char err[1024], line[256];
	struct hp_open_opts oo = { .quiet = true };
	if (hp_model_open_pid(c.pid, &oo, &m, err, sizeof(err)) < 0) {
		kill_child(&c);
		REQUIRE(false, "model: %s", err);
	}
	const struct hp_module *exe = NULL;
	for (size_t i = 0; i < m->nmods; i++)
		if (!strcmp(m->mods[i].name, path))
			exe = &m->mods[i];
	const char **res = calloc(exe ? exe->nfuncs + 1 : 1, sizeof(char *));
	size_t n = 0;
	char(*names)[300] = calloc(exe ? exe->nfuncs + 1 : 1, sizeof(*names));
	for (size_t i = 0; exe && res && names && i < exe->nfuncs; i++) {
		snprintf(names[n], sizeof(names[n]), "0x%llx", (unsigned long long)exe->funcs[i].addr);
		res[n] = names[n];
		n++;
	}
	hp_model_free(m);
	struct hp_measure *h = NULL;
	int r = n ? open_pid(c.pid, res, n, HP_METRIC_BIT(HP_METRIC_COUNT), true, &h, err, sizeof(err)) : -1;
	if (r < 0)
		kill_child(&c);
	free(res);
	free(names);
	REQUIRE(r == 0, "%s: open of %zu functions: %s", what, n, err);
	kill(c.pid, SIGUSR1);
	EXPECT(wait_exit(h), "exit not noticed");
	finish(&c, line, sizeof(line));
	struct hp_measure_reading rd;
	REQUIRE(hp_measure_total(h, &rd) == 0, "total failed");
	struct hp_function_edges *fe = NULL;
	size_t nfe = 0, executed = 0, edges = 0, exact = 0;
	REQUIRE(hp_measure_edges(h, &rd, &fe, &nfe) == 0, "edges failed");
	const struct hp_measure_row *rows = hp_measure_rows(h);
	for (size_t i = 0; i < nfe; i++) {
		const struct hp_edge_result *er = &fe[i].edges;
		const char *name = rows[fe[i].function_row].function;
		executed += count_of(&rd, fe[i].function_row) > 0;
		edges += er->nedges;
		exact += er->nexact;
		/* main was already running when the probes armed (it waits for the
		 * signal inside): its entry was not seen, one call's flow is missing. */
		uint64_t in_progress = !strcmp(name, "main") ? 1 : 0;
		EXPECT(er->violation_flow <= 2 * in_progress, "%s: %s: %zu conservation violations (flow %llu)", what,
		       name, er->violations, (unsigned long long)er->violation_flow);
	}
	EXPECT(nfe >= 8, "%s: edges derived for only %zu functions", what, nfe);
	EXPECT(executed >= 3, "%s: only %zu functions ran", what, executed);
	printf("# %s: %zu functions, %zu ran, %zu edges, %.1f%% derived exactly, conservation holds\n", what, nfe,
	       executed, edges, edges ? 100.0 * exact / edges : 0);
	hp_measure_edges_free(fe, nfe);
	hp_measure_reading_free(&rd);
	hp_measure_close(h);
}

static void conservation_holds_measured_o2(void)
{
	REQUIRE(fixture, "fixture did not compile");
	const char *args[] = { "calls", "500", NULL };
	conservation_on_every_function(fixture, args, "measured -O2");
}

static void conservation_holds_measured_o0(void)
{
	REQUIRE(fixture_o0, "fixture did not compile");
	const char *args[] = { "calls", "500", NULL };
	conservation_on_every_function(fixture_o0, args, "measured -O0");
}

/* Time the CPUs spent, summed over them, in interrupts and stolen by the hypervisor (/proc/stat's irq,
 * softirq and steal, in ns), and how many CPUs the line sums. The scheduler leaves that time out of a
 * thread's CPU time; time between sched_switch stamps includes it. */
static long long irq_steal_ns(int *ncpu)
{
	FILE *f = fopen("/proc/stat", "r");
	char line[512];
	unsigned long long v[8] = { 0 };
	*ncpu = 0;
	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f))
		sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
		       &v[6], &v[7]);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "cpu", 3) && line[3] >= '0' && line[3] <= '9')
			(*ncpu)++;
	fclose(f);
	return (long long)(v[5] + v[6] + v[7]) * (1000000000LL / sysconf(_SC_CLK_TCK));
}

/* vtime follows the thread's own CPU time inside the function; wall its wall time. */
static void vtime_follows_cpu_time(void)
{
	REQUIRE(fixture, "fixture did not compile");
	struct child c;
	const char *args[] = { "duty", "1000", NULL };
	REQUIRE(spawn(fixture, args, &c), "fixture did not start");
	const char *res[] = { "mx_duty" };
	struct hp_measure *h = NULL;
	char err[1024], line[256];
	uint32_t metrics =
		HP_METRIC_BIT(HP_METRIC_WALL) | HP_METRIC_BIT(HP_METRIC_VTIME) | HP_METRIC_BIT(HP_METRIC_CONCURRENCY);
	int r = open_pid(c.pid, res, 1, metrics, false, &h, err, sizeof(err));
	if (r < 0)
		kill_child(&c);
	REQUIRE(r == 0, "open: %s", err);
	int ncpu;
	long long taken = -irq_steal_ns(&ncpu);
	kill(c.pid, SIGUSR1);
	EXPECT(wait_exit(h), "exit not noticed");
	REQUIRE(finish(&c, line, sizeof(line)), "no output");
	taken += irq_steal_ns(&ncpu);
	long long wall_ns = 0, cpu_ns = 0, outer_ns = 0, outer_cpu_ns = 0;
	REQUIRE(sscanf(line, "duty wall_ns %lld cpu_ns %lld outer_wall_ns %lld outer_cpu_ns %lld", &wall_ns, &cpu_ns,
		       &outer_ns, &outer_cpu_ns) == 4,
		"fixture said '%s'", line);
	struct hp_measure_reading rd;
	REQUIRE(hp_measure_total(h, &rd) == 0, "total failed");
	double wall = rd.rows[0].v[HP_METRIC_WALL].value, vt = rd.rows[0].v[HP_METRIC_VTIME].value;
	double duty = (double)cpu_ns / (double)wall_ns, ratio = wall > 0 ? vt / wall : 0;
	/* Interrupt and stolen time on every CPU over the window (each of the three counters read as whole
	 * ticks, so up to a tick more per counter and CPU): at most this much of the thread's time between
	 * its switches is not in its CPU time. */
	double lent = (double)taken + 3.0 * ncpu * (1e9 / sysconf(_SC_CLK_TCK));
	printf("# fixture: %.3f ms on CPU of %.1f ms (duty %.3f; %.3f ms, %.1f ms around the call); measured vtime "
	       "%.3f ms of wall %.1f ms (%.3f); interrupts and steal on the %d CPUs %.0f ms (bound %.0f ms)\n",
	       cpu_ns / 1e6, wall_ns / 1e6, duty, outer_cpu_ns / 1e6, outer_ns / 1e6, vt / 1e6, wall / 1e6, ratio, ncpu,
	       taken / 1e6, lent / 1e6);
	/* Wall: the probes fire after the caller reads its clock and before the fixture reads its own inside
	 * the function, and the other way round at the return (CLOCK_MONOTONIC on both sides), so the measured
	 * wall lies between the fixture's two readings exactly, however long a preemption between a probe and
	 * a clock read lasts on a loaded machine. (A +5% bound broke when one lasted 50 ms.) */
	EXPECT(wall >= wall_ns && wall <= outer_ns, "wall %.0f ns outside the fixture's %lld..%lld ns", wall, wall_ns,
	       outer_ns);
	/* vtime counts the thread's CPU time between the probes from sched_switch: at least the CPU time the
	 * fixture reads inside the function, at most what its caller reads around the call (which includes
	 * the probe handlers; a preemption adds CPU time to none of them) plus the interrupt and stolen time
	 * of the window, which the scheduler leaves out of CPU time but the stamps of sched_switch do not (a
	 * loaded VM: 19 ms of 236 ms, 8%). The 5% covers only the difference between sched_switch's stamps
	 * and the scheduler's runtime: the fixture spins at least once for 5 ms of CPU time, so 5% is >= 250
	 * us, against < 0.1 ms seen here under stress-ng (10.0 ms inside, 10.1 ms measured). */
	EXPECT(vt > cpu_ns * 0.95 && vt < outer_cpu_ns * 1.05 + lent,
	       "vtime %.0f ns vs the thread's CPU time %lld..%lld ns (+ %.0f ns of interrupts and steal)", vt, cpu_ns,
	       outer_cpu_ns, lent);
	/* Follows from the two above: the shares differ by at most 5% of a duty of at most 1/2, and the
	 * interrupt and stolen time's share of the wall time. */
	EXPECT(ratio > duty - 0.05 && ratio < duty + 0.05 + lent / wall,
	       "vtime/wall %.3f, the thread's on-CPU share %.3f", ratio, duty);
	/* One thread inside for most of the window. */
	EXPECT(rd.rows[0].v[HP_METRIC_CONCURRENCY].value > 0.3 && rd.rows[0].v[HP_METRIC_CONCURRENCY].value <= 1.01,
	       "concurrency %.3f", rd.rows[0].v[HP_METRIC_CONCURRENCY].value);
	EXPECT(rd.rows[0].wall_per_call.present && rd.rows[0].v[HP_METRIC_COUNT].total == 1, "one call, per-call wall");
	hp_measure_reading_free(&rd);
	hp_measure_close(h);
}

/* Recursion opens one timer per thread: wall is the outermost calls' time. */
static void recursion_is_timed_once(void)
{
	REQUIRE(fixture, "fixture did not compile");
	struct child c;
	const char *args[] = { "recurse", "20", "4", NULL };
	REQUIRE(spawn(fixture, args, &c), "fixture did not start");
	const char *res[] = { "mx_recurse" };
	struct hp_measure *h = NULL;
	char err[1024], line[256];
	int r = open_pid(c.pid, res, 1, HP_METRIC_BIT(HP_METRIC_WALL), false, &h, err, sizeof(err));
	if (r < 0)
		kill_child(&c);
	REQUIRE(r == 0, "open: %s", err);
	kill(c.pid, SIGUSR1);
	EXPECT(wait_exit(h), "exit not noticed");
	REQUIRE(finish(&c, line, sizeof(line)), "no output");
	long long outer = 0, inner = 0;
	long n = 0, depth = 0;
	REQUIRE(sscanf(line, "recurse %ld depth %ld outer_wall_ns %lld inner_wall_ns %lld", &n, &depth, &outer,
		       &inner) == 4,
		"fixture said '%s'", line);
	struct hp_measure_reading rd;
	REQUIRE(hp_measure_total(h, &rd) == 0, "total failed");
	EXPECT(rd.rows[0].v[HP_METRIC_COUNT].total == (uint64_t)(n * (depth + 1)), "entries %llu, expected %ld",
	       (unsigned long long)rd.rows[0].v[HP_METRIC_COUNT].total, n * (depth + 1));
	EXPECT(rd.rows[0].exits == (uint64_t)n, "%llu timed calls, expected the %ld outermost",
	       (unsigned long long)rd.rows[0].exits, n);
	/* The probes of each outermost call fire between the caller's clock readings and the function's own
	 * (same clock): the wall lies between their sums exactly, under any load; timing the inner calls too
	 * would count each sleep five times and leave the range. (A +-10% bound could break when a preemption
	 * of a few ms fell between a probe and a clock read.) */
	double wall = rd.rows[0].v[HP_METRIC_WALL].value;
	printf("# recursion: wall %.3f ms, the outermost calls took %.3f..%.3f ms\n", wall / 1e6, inner / 1e6,
	       outer / 1e6);
	EXPECT(wall >= inner && wall <= outer, "wall %.0f ns, outermost calls took %lld..%lld ns", wall, inner, outer);
	hp_measure_reading_free(&rd);
	hp_measure_close(h);
}

/* A process that is killed: the measurement ends, the counts stay, reads add up. */
static void target_exit_keeps_data(void)
{
	REQUIRE(fixture, "fixture did not compile");
	struct child c;
	const char *args[] = { "loop", NULL };
	REQUIRE(spawn(fixture, args, &c), "fixture did not start");
	const char *res[] = { "mx_call" };
	struct hp_measure *h = NULL;
	char err[1024];
	int r = open_pid(c.pid, res, 1, HP_METRIC_BIT(HP_METRIC_COUNT), false, &h, err, sizeof(err));
	if (r < 0)
		kill_child(&c);
	REQUIRE(r == 0, "open: %s", err);
	uint64_t sum = 0;
	struct hp_measure_reading rd;
	for (int i = 0; i < 3; i++) {
		struct timespec ts = { 0, 150 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		REQUIRE(hp_measure_read(h, &rd) == 0, "read failed");
		sum += count_of(&rd, 0);
		hp_measure_reading_free(&rd);
	}
	EXPECT(sum > 0, "the loop's calls were not counted");
	kill_child(&c);
	EXPECT(wait_exit(h), "the kill was not noticed");
	char detail[512];
	EXPECT(hp_measure_state(h, detail, sizeof(detail)) == HP_MEASURE_TARGET_EXITED && strstr(detail, "exited"),
	       "state after the kill: %s", detail);
	REQUIRE(hp_measure_read(h, &rd) == 0, "read after exit failed");
	sum += count_of(&rd, 0);
	hp_measure_reading_free(&rd);
	REQUIRE(hp_measure_read(h, &rd) == 0, "second read after exit failed");
	EXPECT(count_of(&rd, 0) == 0, "counts grew after the exit");
	hp_measure_reading_free(&rd);
	REQUIRE(hp_measure_total(h, &rd) == 0, "total after exit failed");
	EXPECT(count_of(&rd, 0) == sum, "intervals add up to %llu, total %llu", (unsigned long long)sum,
	       (unsigned long long)count_of(&rd, 0));
	hp_measure_reading_free(&rd);
	hp_measure_close(h);
}

/* Predicates decide in the kernel which hits count. */
static uint64_t count_with(pid_t pid, int where_pid, const char *where_comm, const char *where_cgroup)
{
	const char *res[] = { "mx_call" };
	struct hp_measure_spec s = { .target = HP_MEASURE_PID,
				     .pid = pid,
				     .resources = res,
				     .nresources = 1,
				     .metrics = HP_METRIC_BIT(HP_METRIC_COUNT),
				     .where_pid = where_pid,
				     .where_comm = where_comm,
				     .where_cgroup = where_cgroup };
	struct hp_measure_env env = { .caps = &caps };
	struct hp_measure *h = NULL;
	char err[1024];
	if (hp_measure_open(&s, &env, &h, err, sizeof(err)) < 0) {
		printf("# open: %s\n", err);
		return UINT64_MAX;
	}
	struct timespec ts = { 0, 300 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	struct hp_measure_reading rd;
	uint64_t n = UINT64_MAX;
	if (hp_measure_total(h, &rd) == 0)
		n = count_of(&rd, 0);
	hp_measure_reading_free(&rd);
	hp_measure_close(h);
	return n;
}

static void predicates_filter_in_the_kernel(void)
{
	REQUIRE(fixture, "fixture did not compile");
	struct child c;
	const char *args[] = { "loop", NULL };
	REQUIRE(spawn(fixture, args, &c), "fixture did not start");
	uint64_t all = count_with(c.pid, 0, NULL, NULL), same_pid = count_with(c.pid, c.pid, NULL, NULL),
		 other_pid = count_with(c.pid, getpid(), NULL, NULL),
		 same_comm = count_with(c.pid, 0, "measured", NULL),
		 other_comm = count_with(c.pid, 0, "not-measured", NULL);
	EXPECT(all > 0 && all != UINT64_MAX, "no predicate: %llu", (unsigned long long)all);
	EXPECT(same_pid > 0 && same_pid != UINT64_MAX, "--pid of the process: %llu", (unsigned long long)same_pid);
	EXPECT(other_pid == 0, "--pid of another process: %llu", (unsigned long long)other_pid);
	EXPECT(same_comm > 0 && same_comm != UINT64_MAX, "--comm measured: %llu", (unsigned long long)same_comm);
	EXPECT(other_comm == 0, "--comm of another name: %llu", (unsigned long long)other_comm);
	/* A cgroup of its own for the fixture. */
	char dir[256], procs[300], pidtxt[32];
	snprintf(dir, sizeof(dir), "/sys/fs/cgroup/unified/hotpath-test-%d", getpid());
	if (mkdir(dir, 0755) < 0) {
		kill_child(&c);
		SKIP("cannot create a cgroup v2 at %s: %s", dir, strerror(errno));
	}
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
	int fd = open(procs, O_WRONLY);
	int n = snprintf(pidtxt, sizeof(pidtxt), "%d", c.pid);
	bool moved = fd >= 0 && write(fd, pidtxt, (size_t)n) == n;
	if (fd >= 0)
		close(fd);
	uint64_t in_cg = moved ? count_with(c.pid, 0, NULL, dir) : UINT64_MAX;
	uint64_t root_cg = moved ? count_with(c.pid, 0, NULL, "/") : UINT64_MAX;
	kill_child(&c);
	rmdir(dir);
	EXPECT(moved, "could not move the fixture into %s", dir);
	EXPECT(in_cg > 0 && in_cg != UINT64_MAX, "--cgroup of the process: %llu", (unsigned long long)in_cg);
	EXPECT(root_cg == 0, "--cgroup of the root: %llu", (unsigned long long)root_cg);
}

/* A command name covers every process with it. The fixture gets a name of its
 * own here, so processes of other test runs on the machine do not join. */
static void comm_target_covers_every_process(void)
{
	char comm[16];
	snprintf(comm, sizeof(comm), "msr%d", (int)getpid() % 1000000);
	const char *own = tu_compile("measured.c", comm, "-O2 -g -pthread");
	REQUIRE(own, "fixture did not compile");
	struct child a, b;
	const char *args[] = { "calls", "300", NULL };
	REQUIRE(spawn(own, args, &a), "first fixture did not start");
	if (!spawn(own, args, &b)) {
		kill_child(&a);
		REQUIRE(false, "second fixture did not start");
	}
	const char *res[] = { "mx_call" };
	struct hp_measure_spec s = { .target = HP_MEASURE_COMM,
				     .comm = comm,
				     .resources = res,
				     .nresources = 1,
				     .metrics = HP_METRIC_BIT(HP_METRIC_COUNT) };
	struct hp_measure_env env = { .caps = &caps };
	struct hp_measure *h = NULL;
	char err[1024], line[128];
	int r = hp_measure_open(&s, &env, &h, err, sizeof(err));
	if (r < 0) {
		kill_child(&a);
		kill_child(&b);
	}
	REQUIRE(r == 0, "open: %s", err);
	int pids[HP_MEASURE_MAX_PIDS];
	size_t np = hp_measure_pids(h, pids, HP_MEASURE_MAX_PIDS);
	kill(a.pid, SIGUSR1);
	kill(b.pid, SIGUSR1);
	finish(&a, line, sizeof(line));
	finish(&b, line, sizeof(line));
	EXPECT(wait_exit(h), "exits not noticed");
	struct hp_measure_reading rd;
	REQUIRE(hp_measure_total(h, &rd) == 0, "total failed");
	EXPECT(np == 2, "%zu processes found", np);
	EXPECT(count_of(&rd, 0) == 600, "counted %llu of the two processes' 600 calls",
	       (unsigned long long)count_of(&rd, 0));
	hp_measure_reading_free(&rd);
	hp_measure_close(h);
}

static void expect_refused(pid_t pid, const char *const *res, size_t n, uint32_t metrics, bool blocks, int code,
			   const char *needle, const char *what)
{
	struct hp_measure *h = NULL;
	char err[2048] = "";
	int r = open_pid(pid, res, n, metrics, blocks, &h, err, sizeof(err));
	EXPECT(r == -code, "%s: returned %d (%s), expected %d", what, r, err, -code);
	EXPECT(strstr(err, needle), "%s: the reason does not mention '%s': %s", what, needle, err);
	hp_measure_close(h);
}

static void bad_input_is_refused_with_the_reason(void)
{
	REQUIRE(fixture, "fixture did not compile");
	struct child c;
	const char *args[] = { "loop", NULL };
	REQUIRE(spawn(fixture, args, &c), "fixture did not start");
	const char *inside[] = { "mx_branch+0x1" }, *unknown[] = { "no_such_function_xyz" }, *okres[] = { "mx_call" },
		   *badword[] = { "mx call" };
	expect_refused(c.pid, inside, 1, HP_METRIC_BIT(HP_METRIC_COUNT), false, HP_MEASURE_E_NOT_FOUND,
		       "not the start of a basic block", "an offset inside a block");
	expect_refused(c.pid, unknown, 1, HP_METRIC_BIT(HP_METRIC_COUNT), false, HP_MEASURE_E_NOT_FOUND,
		       "no function 'no_such_function_xyz'", "an unknown function");
	expect_refused(c.pid, okres, 1, HP_METRIC_BIT(HP_METRIC_CYCLES), false, HP_MEASURE_E_UNAVAILABLE,
		       hp_caps_find(&caps, "hardware_pmu")->available ? "not implemented" : "PMU", "a hardware metric");
	expect_refused(c.pid, badword, 1, HP_METRIC_BIT(HP_METRIC_COUNT), false, HP_MEASURE_E_USAGE, "space",
		       "a resource with a space");
	kill_child(&c);
	expect_refused(c.pid, okres, 1, HP_METRIC_BIT(HP_METRIC_COUNT), false, HP_MEASURE_E_NOT_FOUND, "no process",
		       "a process that is gone");
}

/* Resources given parsed (the daemon's addresses) arm the rows their words
 * would, named by the words written canonically; a request gives words or
 * parsed resources, not both; the first bad resource is the one reported,
 * whether it is malformed or unknown. */
static void parsed_resources_arm_the_same_rows(void)
{
	REQUIRE(fixture, "fixture did not compile");
	struct child c;
	const char *args[] = { "calls", "10", NULL };
	REQUIRE(spawn(fixture, args, &c), "fixture did not start");
	const char *words[] = { "mx_call", "mx_branch" };
	struct hp_measure *h = NULL;
	char err[1024];
	int r = open_pid(c.pid, words, 2, HP_METRIC_BIT(HP_METRIC_COUNT), true, &h, err, sizeof(err));
	if (r < 0)
		kill_child(&c);
	REQUIRE(r == 0, "open by words: %s", err);
	const struct hp_measure_row *wr = hp_measure_rows(h);
	size_t nw = hp_measure_nrows(h), blk = SIZE_MAX;
	for (size_t i = 0; i < nw && blk == SIZE_MAX; i++)
		if (wr[i].kind == HP_ROW_BLOCK && !strcmp(wr[i].function, "mx_branch") && wr[i].block_offset)
			blk = i;
	if (blk == SIZE_MAX)
		kill_child(&c);
	REQUIRE(blk != SIZE_MAX, "no block of mx_branch past its entry among %zu rows", nw);
	struct hp_resource_spec res[2] = {
		{ .is_address = true, .address = wr[row_of(h, "mx_call", HP_ROW_FUNCTION, 0)].function_address },
		{ .is_address = true,
		  .address = wr[blk].function_address,
		  .has_offset = true,
		  .offset = wr[blk].block_offset },
	};
	uint32_t want_off = wr[blk].block_offset;
	char want0[32], want1[48];
	snprintf(want0, sizeof(want0), "0x%" PRIx64, res[0].address);
	snprintf(want1, sizeof(want1), "0x%" PRIx64 "+0x%" PRIx32, res[1].address, want_off);
	struct hp_measure_spec s = { .target = HP_MEASURE_PID,
				     .pid = c.pid,
				     .resource_specs = res,
				     .nresources = 2,
				     .metrics = HP_METRIC_BIT(HP_METRIC_COUNT) };
	struct hp_measure_env env = { .caps = &caps };
	struct hp_measure *p = NULL;
	r = hp_measure_open(&s, &env, &p, err, sizeof(err));
	EXPECT(r == 0, "open by parsed resources: %s", err);
	if (r == 0) {
		const struct hp_measure_row *pr = hp_measure_rows(p);
		EXPECT(hp_measure_nrows(p) == 2, "%zu rows for a function and a block", hp_measure_nrows(p));
		EXPECT(hp_measure_nrows(p) >= 1 && pr[0].kind == HP_ROW_FUNCTION &&
			       !strcmp(pr[0].function, "mx_call") && !strcmp(pr[0].resource, want0),
		       "row 0 is %s named %s, not mx_call named %s", hp_measure_nrows(p) ? pr[0].function : "-",
		       hp_measure_nrows(p) ? pr[0].resource : "-", want0);
		EXPECT(hp_measure_nrows(p) >= 2 && pr[1].kind == HP_ROW_BLOCK && !strcmp(pr[1].function, "mx_branch") &&
			       pr[1].block_offset == want_off && !strcmp(pr[1].resource, want1),
		       "row 1 is not mx_branch's block at +0x%x named %s", want_off, want1);
	}
	hp_measure_close(p);
	hp_measure_close(h);
	p = NULL;
	s.resources = words;
	r = hp_measure_open(&s, &env, &p, err, sizeof(err));
	EXPECT(r == -HP_MEASURE_E_USAGE, "words and parsed resources together: %d (%s)", r, err);
	hp_measure_close(p);
	const char *unknown_first[] = { "no_such_function_xyz", "mx call" },
		   *bad_first[] = { "mx call", "no_such_function_xyz" };
	expect_refused(c.pid, unknown_first, 2, HP_METRIC_BIT(HP_METRIC_COUNT), false, HP_MEASURE_E_NOT_FOUND,
		       "no_such_function_xyz", "an unknown name before a malformed word");
	expect_refused(c.pid, bad_first, 2, HP_METRIC_BIT(HP_METRIC_COUNT), false, HP_MEASURE_E_USAGE, "space",
		       "a malformed word before an unknown name");
	kill_child(&c);
}

/* Kernel measurements this host cannot make are refused naming the capability and the function's own rules. */
static void kernel_refusals_name_the_reason(void)
{
	const char *res[] = { "do_syscall_64" }, *vr[] = { "vfs_read" };
	struct hp_measure_spec s = { .target = HP_MEASURE_KERNEL,
				     .resources = res,
				     .nresources = 1,
				     .metrics = HP_METRIC_BIT(HP_METRIC_COUNT) };
	struct hp_measure_env env = { .caps = &caps };
	struct hp_measure *h = NULL;
	char err[2048] = "";
	bool probes = hp_caps_find(&caps, "kprobes")->available || hp_caps_find(&caps, "fentry")->available;
	int r = hp_measure_open(&s, &env, &h, err, sizeof(err));
	EXPECT(r == -HP_MEASURE_E_UNAVAILABLE, "do_syscall_64 (noinstr): %d %s", r, err);
	EXPECT(strstr(err, "noinstr") && strstr(err, "ftrace site"),
	       "the reason does not name the function's rules: %s", err);
	hp_measure_close(h);
	h = NULL;
	s.resources = vr;
	s.metrics = HP_METRIC_BIT(HP_METRIC_WALL);
	r = hp_measure_open(&s, &env, &h, err, sizeof(err));
	if (probes) {
		EXPECT(r == 0, "vfs_read wall on a host with kernel probes: %s", err);
	} else {
		EXPECT(r == -HP_MEASURE_E_UNAVAILABLE, "vfs_read wall without fentry and kprobes: %d", r);
		EXPECT(strstr(err, "fentry") && strstr(err, "kprobe"), "the reason does not name the mechanisms: %s",
		       err);
	}
	hp_measure_close(h);
}

/* 10,000 distinct block starts in one request: served (or refused for its size) in bounded time. */
static void ten_thousand_resources(void)
{
	REQUIRE(manyblocks, "manyblocks fixture did not compile");
	struct child c;
	const char *args[] = { NULL };
	REQUIRE(spawn(manyblocks, args, &c), "fixture did not start");
	struct hp_model *m = NULL;
	char err[1024];
	struct hp_open_opts oo = { .quiet = true, .only_function = "mb_many" };
	if (hp_model_open_pid(c.pid, &oo, &m, err, sizeof(err)) < 0) {
		kill_child(&c);
		REQUIRE(false, "model: %s", err);
	}
	const struct hp_module *mod = NULL;
	const struct hp_function *fn = hp_model_find(m, "mb_many", &mod, NULL);
	char(*words)[24] = calloc(10000, sizeof(*words));
	const char **res = calloc(10000, sizeof(char *));
	size_t n = 0;
	for (uint32_t b = 1; fn && words && res && b < fn->nblocks && n < 10000; b++) {
		snprintf(words[n], sizeof(words[n]), "0x%llx",
			 (unsigned long long)(fn->addr + mod->blocks[fn->block_start + b].offset));
		res[n] = words[n];
		n++;
	}
	hp_model_free(m);
	struct hp_measure *h = NULL;
	double t0 = hp_now();
	int r = n == 10000 ? open_pid(c.pid, res, n, HP_METRIC_BIT(HP_METRIC_COUNT), false, &h, err, sizeof(err)) : -1;
	double opened = hp_now() - t0;
	struct hp_measure_reading rd = { 0 };
	uint64_t counted = 0;
	if (r == 0) {
		struct timespec ts = { 0, 300 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		EXPECT(hp_measure_nrows(h) == 10000, "%zu rows", hp_measure_nrows(h));
		EXPECT(hp_measure_read(h, &rd) == 0 && rd.nrows == 10000, "read of 10,000 rows failed");
		for (size_t i = 0; i < rd.nrows; i++)
			counted += count_of(&rd, i);
		hp_measure_reading_free(&rd);
	}
	hp_measure_close(h);
	double total = hp_now() - t0;
	kill_child(&c);
	free(words);
	free(res);
	REQUIRE(n == 10000, "mb_many has %zu blocks", n);
	printf("# 10,000 block starts: %s in %.2f s (armed in %.2f s), %llu executions counted%s%s\n",
	       r == 0 ? "served" : "refused", total, opened, (unsigned long long)counted, r ? ": " : "", r ? err : "");
	EXPECT(r == 0 || r == -HP_MEASURE_E_LIMIT, "neither served nor refused for its size: %s", err);
	EXPECT(r || counted > 0, "10,000 probes armed but nothing counted");
	/* Bound: one uprobe_multi link and 10,000 counter reads take well under a
	 * second on an idle machine; a hang would never end. */
	EXPECT(total < 60, "took %.1f s", total);
}

/* A library mapped by many processes: the kernel refuses some of its block
 * starts (lock prefixes, traps); with --partial they are listed, not fatal. */
static void refused_locations_are_named(void)
{
	REQUIRE(fixture, "fixture did not compile");
	struct child c;
	const char *args[] = { "loop", NULL };
	REQUIRE(spawn(fixture, args, &c), "fixture did not start");
	struct hp_model *m = NULL;
	char err[1024];
	struct hp_open_opts oo = { .quiet = true, .only_function = "abort" };
	if (hp_model_open_pid(c.pid, &oo, &m, err, sizeof(err)) < 0) {
		kill_child(&c);
		REQUIRE(false, "model: %s", err);
	}
	/* libc's abort takes a lock (lock cmpxchg) and ends in hlt: blocks uprobes refuse. */
	const struct hp_module *mod = NULL;
	const struct hp_function *fn = hp_model_find(m, "abort", &mod, NULL);
	char words[64][24];
	const char *res[64];
	size_t n = 0;
	for (uint32_t b = 0; fn && b < fn->nblocks && n < 64; b++) {
		snprintf(words[n], sizeof(words[n]), "0x%llx",
			 (unsigned long long)(fn->addr + mod->blocks[fn->block_start + b].offset));
		res[n] = words[n];
		n++;
	}
	hp_model_free(m);
	struct hp_measure *h = NULL;
	int r = n ? open_pid(c.pid, res, n, HP_METRIC_BIT(HP_METRIC_COUNT), false, &h, err, sizeof(err)) : -1;
	hp_measure_close(h);
	h = NULL;
	struct hp_measure_spec s = { .target = HP_MEASURE_PID,
				     .pid = c.pid,
				     .resources = res,
				     .nresources = n,
				     .metrics = HP_METRIC_BIT(HP_METRIC_COUNT),
				     .allow_partial = true };
	struct hp_measure_env env = { .caps = &caps };
	char perr[1024];
	int pr = n ? hp_measure_open(&s, &env, &h, perr, sizeof(perr)) : -1;
	size_t refused = 0, served = 0;
	for (size_t i = 0; pr == 0 && i < hp_measure_nrows(h); i++) {
		const struct hp_metric_info *mi = &hp_measure_rows(h)[i].metric[HP_METRIC_COUNT];
		refused += !mi->available;
		served += mi->available;
		if (!mi->available)
			EXPECT(strstr(mi->reason, "uprobes cannot probe") || strstr(mi->reason, "kernel"), "reason: %s",
			       mi->reason);
	}
	hp_measure_close(h);
	kill_child(&c);
	REQUIRE(n > 2, "abort has %zu blocks", n);
	if (r == 0)
		SKIP("every block of this libc's abort can be probed");
	EXPECT(r == -HP_MEASURE_E_UNAVAILABLE && strstr(err, "uprobes cannot probe"), "without --partial: %d %s", r,
	       err);
	EXPECT(pr == 0 && refused > 0 && served > 0, "with --partial: %d (%s), %zu refused, %zu served", pr, perr,
	       refused, served);
}

/* More rows than a measurement holds: refused at once, before anything is probed. */
static void too_many_rows_are_refused(void)
{
	struct hp_model *m = NULL;
	char err[1024];
	struct hp_open_opts oo = { .quiet = true };
	REQUIRE(hp_model_open_kernel(&oo, &m, err, sizeof(err)) == 0, "kernel model: %s", err);
	const struct hp_module *vm = &m->mods[0];
	size_t n = 0, rows = 0;
	char(*words)[24] = calloc(vm->nfuncs, sizeof(*words));
	const char **res = calloc(vm->nfuncs, sizeof(char *));
	/* Twice the limit in blocks: some are padding --blocks leaves out. */
	for (size_t f = 0; words && res && f < vm->nfuncs && rows <= 2 * HP_MEASURE_MAX_ROWS; f++) {
		snprintf(words[n], sizeof(words[n]), "0x%llx", (unsigned long long)vm->funcs[f].addr);
		res[n] = words[n];
		n++;
		rows += 1 + vm->funcs[f].nblocks;
	}
	struct hp_measure_spec s = { .target = HP_MEASURE_KERNEL,
				     .resources = res,
				     .nresources = n,
				     .metrics = HP_METRIC_BIT(HP_METRIC_COUNT),
				     .blocks = true };
	struct hp_measure_env env = { .caps = &caps, .kernel = m };
	struct hp_measure *h = NULL;
	double t0 = hp_now();
	int r = hp_measure_open(&s, &env, &h, err, sizeof(err));
	double took = hp_now() - t0;
	hp_measure_close(h);
	hp_model_free(m);
	free(words);
	free(res);
	EXPECT(r == -HP_MEASURE_E_LIMIT, "%zu kernel functions with --blocks (%zu rows): %d %s", n, rows, r, err);
	EXPECT(strstr(err, "rows"), "reason: %s", err);
	EXPECT(took < 10, "refusal took %.1f s", took);
}

int main(void)
{
	fixture = tu_compile("measured.c", "measured", "-O2 -g -pthread");
	fixture_o0 = tu_compile("measured.c", "measured-o0", "-O0 -pthread");
	manyblocks = tu_compile("manyblocks.c", "manyblocks", "-O0");
	hp_caps_probe(&caps, true, "not used by these tests");
	RUN(counts_are_exact);
	RUN(branch_split_is_exact);
	RUN(fallback_mechanisms_count_the_same);
	RUN(conservation_holds_measured_o2);
	RUN(conservation_holds_measured_o0);
	RUN(vtime_follows_cpu_time);
	RUN(recursion_is_timed_once);
	RUN(target_exit_keeps_data);
	RUN(predicates_filter_in_the_kernel);
	RUN(comm_target_covers_every_process);
	RUN(bad_input_is_refused_with_the_reason);
	RUN(parsed_resources_arm_the_same_rows);
	RUN(kernel_refusals_name_the_reason);
	RUN(ten_thousand_resources);
	RUN(refused_locations_are_named);
	RUN(too_many_rows_are_refused);
	tu_cleanup();
	TEST_EXIT();
}
