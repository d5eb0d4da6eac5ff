// SPDX-License-Identifier: Apache-2.0
/*
 * Replacement in live processes. The fixture (tests/fixtures/threads.c)
 * runs group.c's pr_root and its callees in several threads at once and
 * checks every result against a table the original code made, exiting
 * with MISMATCH at the first difference; results include the frames the
 * unwinder walks, so the copy's unwind data must be registered too. Its
 * plan comes from `hotpathd measure --blocks` and `hotpathd plan`.
 *  - hotpathd install / installed / revert: the copy runs (memfd heap, entry
 *    jump, call sites), and everything is put back (bytes, heap, journal).
 *  - A function with a switch table (fixtures/dispatch.c), one whose
 *    table's lea is hoisted before its loop (fixtures/hoisted.c), and an
 *    interpreter loop dispatching through a computed-goto label table
 *    (fixtures/labels.c): its copy, with its own table, installed and
 *    reverted while every case is checked.
 *  - A whole hot set (plan --hot-set): one heap, every member's entry
 *    jumping to its copy, install/revert cycles, bytes as before.
 *  - A revert knows its own written bytes when they hold 0xcc (a rel32 of
 *    a call site often does), which a read that hides uprobes' int3 bytes
 *    would show as the file's: they are restored, not left as "changed by
 *    something else", and bytes something else did change keep the heap
 *    mapped (they may still reach it) until a later revert finishes.
 *  - Cycles of install and revert through the library under load, with
 *    threads inside the root at the stops, results checked throughout,
 *    original bytes at the end (HOTPATH_REPLACE_CYCLES, default 300;
 *    bench/replace_cycles runs 1,000); and through `hotpathd install
 *    --cycles`: its lines, its check command, SIGTERM and SIGKILL mid-loop.
 *  - Installs that compose: a plan made before or after another install in
 *    the process installs over it (the bytes that install patched read as
 *    the original), two installs that write the same bytes (a hot set and
 *    pr_mix's plan) reverted in either order, the text as the file's after.
 *  - A heap kept by a revert while a worker is parked in the copy blocks
 *    neither the same plan (same id) nor another; once the worker has left,
 *    a later revert or the daemon's periodic retry releases it. Reverting
 *    all of a process's installs when one heap is kept retires the others.
 *  - The agent killed (SIGKILL) at every step of install and revert and at
 *    random moments: the process stays correct, `hotpathd installed` shows
 *    what is left, `hotpathd revert` brings it back to clean.
 *  - The root measured in windows armed while its threads run, before and
 *    after the install: every call counted is timed, once, at the same
 *    probe cost per call on both sides.
 *  - Bad input: an altered plan, an unapproved hash, a plan for another
 *    binary, a rebuilt binary, code changed since planning, a process that
 *    exited, a full journal disk, another tracer: refused with the reason,
 *    nothing changed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"
#include "plan/plan.h"
#include "replace/install.h"
#include "replace/install_op.h"
#include "replace/world.h"
#include "target/target.h"
#include "test_util.h"

static const char *hp(void)
{
	return getenv("HOTPATHD") ? getenv("HOTPATHD") : "build/hotpathd";
}

/* A running fixture with its stdout and stderr on pipes. */
struct fx {
	pid_t pid;
	int out, errfd;
	char errbuf[4096];
	size_t errlen;
};

/* mode NULL, or "gated" (its workers call the root only when let, SIGUSR1)
 * or "park" (one parks inside pr_mix at SIGUSR2 until SIGHUP), see threads.c. */
static int fx_start_mode(struct fx *f, const char *path, int threads, const char *mode)
{
	int o[2], e[2];
	char n[16];

	memset(f, 0, sizeof(*f));
	if (pipe(o) < 0 || pipe(e) < 0)
		return -1;
	snprintf(n, sizeof(n), "%d", threads);
	f->pid = fork();
	if (f->pid == 0) {
		dup2(o[1], 1);
		dup2(e[1], 2);
		close(o[0]);
		close(e[0]);
		execl(path, path, "threads", n, mode, (char *)NULL);
		_exit(127);
	}
	close(o[1]);
	close(e[1]);
	f->out = o[0];
	f->errfd = e[0];
	fcntl(f->errfd, F_SETFL, O_NONBLOCK);
	/* "ready" once every thread made its table. */
	struct pollfd p = { f->out, POLLIN, 0 };
	char buf[64] = "";
	if (poll(&p, 1, 20000) <= 0 || read(f->out, buf, sizeof(buf) - 1) <= 0 || strncmp(buf, "ready", 5))
		return -1;
	return 0;
}

static int fx_start(struct fx *f, const char *path, int threads)
{
	return fx_start_mode(f, path, threads, NULL);
}

/* 1 while the fixture runs and has reported nothing wrong. */
static int fx_ok(struct fx *f)
{
	ssize_t n;
	int st;

	while ((n = read(f->errfd, f->errbuf + f->errlen, sizeof(f->errbuf) - 1 - f->errlen)) > 0)
		f->errlen += (size_t)n;
	f->errbuf[f->errlen] = 0;
	if (strstr(f->errbuf, "MISMATCH"))
		return 0;
	if (waitpid(f->pid, &st, WNOHANG) == f->pid) {
		snprintf(f->errbuf + f->errlen, sizeof(f->errbuf) - f->errlen, " [exited: status %d, signal %d]",
			 WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
		f->pid = 0;
		return 0;
	}
	return f->pid > 0;
}

/* Stop the fixture: SIGTERM makes it print the calls it verified. */
static unsigned long fx_stop(struct fx *f)
{
	char buf[128] = "";
	unsigned long v = 0;
	ssize_t n = 0;

	if (f->pid > 0) {
		kill(f->pid, SIGTERM);
		struct pollfd p = { f->out, POLLIN, 0 };
		if (poll(&p, 1, 5000) > 0)
			n = read(f->out, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = 0;
		sscanf(buf, "verified %lu", &v);
		kill(f->pid, SIGKILL);
		waitpid(f->pid, NULL, 0);
		f->pid = 0;
	}
	close(f->out);
	close(f->errfd);
	return v;
}

static const char *fixture(void)
{
	static const char *path;
	if (!path)
		path = tu_compile("threads.c", "threads", "-O2 -pthread");
	return path;
}

/* The same without the unwinder's frame count in its results: a uretprobe
 * puts its own return address on the stack, so timed calls walk other
 * frames (as the console's plan flow builds it). */
static const char *fixture_timed(void)
{
	static const char *path;
	if (!path)
		path = tu_compile("threads.c", "threads-timed", "-O2 -pthread -DPR_NO_UNWIND");
	return path;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "r");
	char *b = NULL;
	long n;

	*len = 0;
	if (fp && fseek(fp, 0, SEEK_END) == 0 && (n = ftell(fp)) >= 0 && (b = malloc((size_t)n + 1))) {
		rewind(fp);
		*len = fread(b, 1, (size_t)n, fp);
		b[*len] = 0;
	}
	if (fp)
		fclose(fp);
	return b;
}

/* The fixture measured and planned by the command line for WHAT (a root, or
 * --hot-set); path of the plan. */
static const char *make_plan_for(pid_t pid, const char *name, const char *what)
{
	static char plan[16][400];
	static int slot;
	char *p = plan[slot++ % 16], prof[400], cmd[2048];

	snprintf(prof, sizeof(prof), "%s/%s.profile.json", tu_tmpdir(), name);
	snprintf(p, 400, "%s/%s.plan.json", tu_tmpdir(), name);
	snprintf(cmd, sizeof(cmd),
		 "%s measure pid %d pr_root pr_op pr_hash pr_mix pr_fib pr_even pr_odd pr_search pr_check --blocks "
		 "--seconds 1 --json > '%s' 2>/dev/null && %s plan pid %d %s --profile '%s' --json > '%s'",
		 hp(), pid, prof, hp(), pid, what, prof, p);
	return system(cmd) == 0 ? p : NULL;
}

static const char *make_plan(pid_t pid, const char *name)
{
	return make_plan_for(pid, name, "pr_root");
}

static const char *state_dir(const char *name)
{
	static char d[16][300];
	static int slot;
	char *p = d[slot++ % 16];
	snprintf(p, 300, "%s/state-%s", tu_tmpdir(), name);
	return p;
}

/* Run a command, capturing stdout into out; returns the exit status. */
static int run(const char *cmd, char *out, size_t outlen)
{
	FILE *fp = popen(cmd, "r");
	size_t n = 0;
	int st;

	if (!fp)
		return -1;
	if (out) {
		n = fread(out, 1, outlen - 1, fp);
		out[n] = 0;
	} else {
		char sink[4096];
		while (fread(sink, 1, sizeof(sink), fp) > 0)
			;
	}
	st = pclose(fp);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Whether pid maps a code heap of ours. */
static int heaps_mapped(pid_t pid)
{
	char path[64], line[512];
	FILE *fp;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	if (!(fp = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), fp))
		n += strstr(line, "memfd:hotpath-") != NULL;
	fclose(fp);
	return n;
}

/* Every member's bytes in the process hash to what the plan was made from. */
static int members_original(pid_t pid, const struct hp_iplan *p, char *why, size_t wl)
{
	char path[64];
	int fd, bad = 0;

	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	if ((fd = open(path, O_RDONLY)) < 0)
		return -1;
	for (size_t i = 0; i < p->nmembers; i++) {
		uint8_t *b = malloc(p->members[i].size);
		char dg[65] = "";
		if (b && pread(fd, b, p->members[i].size, (off_t)p->members[i].addr) == (ssize_t)p->members[i].size)
			hp_bytes_digest(b, p->members[i].size, dg);
		if (strcmp(dg, p->members[i].digest) && !bad++)
			snprintf(why, wl, "%s's bytes are not the original ones", p->members[i].name);
		free(b);
	}
	close(fd);
	return bad;
}

static int load_plan(const char *path, struct hp_iplan *p, char *err, size_t el)
{
	size_t len;
	char *t = slurp(path, &len);
	int r = t ? hp_iplan_parse(t, len, p, err, el) : -1;
	free(t);
	return r;
}

static size_t journals(const char *state)
{
	struct hp_installed *ins;
	size_t n = 0;
	char err[256];
	if (hp_installed_list(state, &ins, &n, err, sizeof(err)) == 0)
		free(ins);
	return n;
}

/* ---- The command line ---------------------------------------------------- */

static void t_install_revert_cli(void)
{
	struct fx f;
	struct hp_iplan p;
	char cmd[2048], out[16384], err[512], why[256] = "";
	const char *st = state_dir("cli");

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 3) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "cli");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan: %s", err);
	}
	snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --json --quiet", hp(), plan, st);
	int rc = run(cmd, out, sizeof(out));
	json_error_t je;
	json_t *j = json_loads(out, 0, &je);
	EXPECT(rc == 0 && j && !strcmp(json_string_value(json_object_get(j, "status")) ?: "", "installed"),
	       "install failed (%d): %s", rc, out);
	EXPECT(json_is_true(json_object_get(json_object_get(j, "unwind"), "registered")),
	       "the copy's unwind data was not registered: %s", out);
	EXPECT(json_integer_value(json_object_get(j, "call_sites")) >= 1, "no call site was patched: %s", out);
	uint64_t heap = strtoull(json_string_value(json_object_get(j, "heap")) ?: "0", NULL, 0);
	json_decref(j);
	EXPECT(heaps_mapped(f.pid) == 1, "the code heap is not mapped");
	/* The entry jumps into the heap. */
	uint8_t b[5];
	char mp[64];
	snprintf(mp, sizeof(mp), "/proc/%d/mem", f.pid);
	int fd = open(mp, O_RDONLY);
	EXPECT(fd >= 0 && pread(fd, b, 5, (off_t)p.members[0].addr) == 5 && b[0] == 0xe9 &&
		       p.members[0].addr + 5 + (uint64_t)(int64_t) * (int32_t *)(b + 1) == heap,
	       "pr_root's entry does not jump to the copy at 0x%" PRIx64, heap);
	if (fd >= 0)
		close(fd);
	usleep(300000);
	EXPECT(fx_ok(&f), "the process went wrong with the copy installed: %s", f.errbuf);
	snprintf(cmd, sizeof(cmd), "%s installed --state-dir '%s' --json", hp(), st);
	run(cmd, out, sizeof(out));
	EXPECT(strstr(out, "\"state\": \"installed\"") || strstr(out, "\"state\":\"installed\""),
	       "installed does not list it: %s", out);
	/* A second install of the same root is refused. */
	snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet 2>&1", hp(), plan, st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 4 && strstr(out, "installed in process"), "a second install was not refused (%d): %s", rc, out);
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --json --quiet", hp(), f.pid, st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 0 && strstr(out, "\"reverted\""), "revert failed (%d): %s", rc, out);
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "%s", why);
	EXPECT(heaps_mapped(f.pid) == 0, "the code heap is still mapped after the revert");
	EXPECT(journals(st) == 0, "a journal is left after the revert");
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 4, "reverting again did not say nothing is installed (%d)", rc);
	usleep(100000);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	unsigned long v = fx_stop(&f);
	EXPECT(v > 1000, "the fixture verified only %lu calls", v);
	printf("# cli: %zu functions installed and reverted, %lu calls verified\n", p.nmembers, v);
	hp_iplan_free(&p);
}

/* n cycles of install and revert of plan (p) in the running fixture f:
 * every member's entry jumping to its copy in one heap, results checked,
 * and every byte, heap and journal gone after each revert. */
static void install_revert_cycles(struct fx *f, const struct hp_iplan *p, const char *plan, const char *st, int n)
{
	char cmd[4096], out[16384], why[256] = "";

	for (int cycle = 0; cycle < n; cycle++) {
		snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --json --quiet", hp(), plan, st);
		int rc = run(cmd, out, sizeof(out));
		json_error_t je;
		json_t *j = json_loads(out, 0, &je);
		EXPECT(rc == 0 && j && json_integer_value(json_object_get(j, "entries")) == (json_int_t)p->nmembers,
		       "cycle %d: install failed or did not splice every entry (%d): %s", cycle, rc, out);
		uint64_t heap = strtoull(json_string_value(json_object_get(j, "heap")) ?: "0", NULL, 0);
		json_decref(j);
		/* Every member's entry jumps to its copy in the one heap. */
		char mp[64];
		snprintf(mp, sizeof(mp), "/proc/%d/mem", f->pid);
		int fd = open(mp, O_RDONLY), bad = 0;
		for (size_t i = 0; fd >= 0 && i < p->nmembers; i++) {
			uint8_t b[5];
			uint64_t want = heap + (p->members[i].new_addr - p->base);
			if (pread(fd, b, 5, (off_t)p->members[i].addr) != 5 || b[0] != 0xe9 ||
			    p->members[i].addr + 5 + (uint64_t)(int64_t) * (int32_t *)(b + 1) != want)
				EXPECT(bad++, "cycle %d: %s's entry does not jump to its copy", cycle,
				       p->members[i].name);
		}
		if (fd >= 0)
			close(fd);
		EXPECT(heaps_mapped(f->pid) == 1, "cycle %d: %d heaps mapped, want one", cycle, heaps_mapped(f->pid));
		usleep(100000);
		EXPECT(fx_ok(f), "cycle %d: the process went wrong with the copy installed: %s", cycle, f->errbuf);
		snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --json --quiet", hp(), f->pid, st);
		rc = run(cmd, out, sizeof(out));
		EXPECT(rc == 0 && strstr(out, "\"reverted\""), "cycle %d: revert failed (%d): %s", cycle, rc, out);
		EXPECT(members_original(f->pid, p, why, sizeof(why)) == 0, "cycle %d: %s", cycle, why);
		if (!fx_ok(f))
			break;
	}
	EXPECT(heaps_mapped(f->pid) == 0, "a code heap is still mapped after the revert");
	EXPECT(journals(st) == 0, "a journal is left after the revert");
}

/* A whole hot set: planned from the fixture's exact counts with --hot-set
 * (no root), installed as one heap with every member's entry jumping to its
 * copy, results checked, several install/revert cycles, and every byte as
 * before at the end. */
static void t_hot_set_install_revert(void)
{
	struct fx f;
	struct hp_iplan p;
	char err[512] = "";
	const char *st = state_dir("hotset");

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 3) == 0, "the fixture did not start");
	const char *plan = make_plan_for(f.pid, "hotset", "--hot-set");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no hot-set plan: %s", err);
	}
	EXPECT(p.hot_set && p.nmembers >= 5, "a hot set of %zu members (hot_set %d)", p.nmembers, p.hot_set);
	install_revert_cycles(&f, &p, plan, st, 10);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	unsigned long v = fx_stop(&f);
	EXPECT(v > 1000, "the fixture verified only %lu calls", v);
	printf("# hot set: %zu functions, one heap, 10 install/revert cycles, %lu calls verified\n", p.nmembers, v);
	hp_iplan_free(&p);
}

/* Bytes we wrote that hold 0xcc (a call site's rel32 to the heap often
 * does) are ours, not a breakpoint: a revert must see them as written.
 * Before the fix the target's read (which shows a uprobe's int3 as the
 * file's byte) made them "neither original nor installed", and a hot set's
 * revert (thousands of call sites) left some redirected. */
static void t_own_bytes_holding_int3_values(void)
{
	struct fx f;
	struct hp_iplan p;
	struct hp_op x;
	struct hp_undo u;
	char err[512] = "";

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 1) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "int3");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan: %s", err);
	}
	memset(&x, 0, sizeof(x));
	memset(&u, 0, sizeof(u));
	int r = hp_patch_target_process(f.pid, 0, &x.t, err, sizeof(err));
	EXPECT(r == 0, "no process target: %s", err);
	if (r == 0 && (r = x.t.ops->quiesce(&x.t, err, sizeof(err))) == 0) {
		/* The root's entry, while every thread is stopped: a call whose
		 * rel32 is 0xcc bytes, then put back before anything runs. */
		u.kind = HP_UNDO_CALL;
		u.len = 5;
		u.addr = p.members[0].addr;
		EXPECT(x.t.ops->read(&x.t, u.addr, u.orig, u.len) == 0, "cannot read the root's bytes");
		const uint8_t now[5] = { 0xe8, 0xcc, 0x10, 0xcc, 0xff };
		memcpy(u.now, now, sizeof(now));
		EXPECT(hp_op_live_state(&x, &u) == 0, "the untouched bytes are not the original ones");
		EXPECT(x.t.ops->apply(&x.t, &u, NULL, NULL, err, sizeof(err)) == 0, "write: %s", err);
		int s = hp_op_live_state(&x, &u);
		EXPECT(s == 1, "bytes written with 0xcc in them read as state %d (want 1, ours)", s);
		EXPECT(x.t.ops->restore(&x.t, &u, err, sizeof(err)) == 0, "restore: %s", err);
		EXPECT(hp_op_live_state(&x, &u) == 0, "the restored bytes are not the original ones");
		x.t.ops->resume(&x.t);
	} else if (r == 0) {
		EXPECT(0, "cannot stop the fixture: %s", err);
	}
	if (x.t.ops)
		x.t.ops->close(&x.t);
	usleep(100000);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	fx_stop(&f);
	hp_iplan_free(&p);
}

/* Patched bytes that something else changed are left alone by a revert,
 * and the heap they may still reach stays mapped: the revert fails with the
 * reason, and a later revert, once the bytes are ours again, finishes. The
 * fixture is gated: its workers sleep outside the copy (so only the changed
 * bytes can keep the heap) and never run the entry while it holds bytes no
 * one may run. Before the fix the first revert released the heap. */
static void t_revert_keeps_the_heap_when_bytes_were_changed(void)
{
	struct fx f;
	struct hp_iplan p;
	char cmd[2048], out[16384], err[512] = "", why[256] = "", mp[64];
	const char *st = state_dir("changed");
	uint8_t ours[5], other[5] = { 0xe9, 0, 0, 0, 0 };

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 2) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "changed");
	fx_stop(&f);
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0)
		REQUIRE(0, "no plan: %s", err);
	REQUIRE(fx_start_mode(&f, fixture(), 2, "gated") == 0, "the gated fixture did not start");
	snprintf(cmd, sizeof(cmd), "%s install '%s' --pid %d --state-dir '%s' --json --quiet", hp(), plan, f.pid, st);
	int rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 0, "install failed (%d): %s", rc, out);
	/* Another process of the same binary: its own load address. */
	json_error_t je;
	json_t *j = json_loads(out, 0, &je);
	uint64_t entry = strtoull(json_string_value(json_object_get(j, "entry")) ?: "0", NULL, 0);
	json_decref(j);
	uint64_t delta = entry ? entry - p.members[0].addr : 0;
	for (size_t i = 0; i < p.nmembers; i++)
		p.members[i].addr += delta;
	snprintf(mp, sizeof(mp), "/proc/%d/mem", f.pid);
	int fd = open(mp, O_RDWR);
	EXPECT(fd >= 0 && pread(fd, ours, 5, (off_t)p.members[0].addr) == 5 && ours[0] == 0xe9,
	       "the root's entry does not jump to the copy");
	EXPECT(fd >= 0 && pwrite(fd, other, 5, (off_t)p.members[0].addr) == 5, "cannot change the entry");
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --json --quiet 2>&1", hp(), f.pid, st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc != 0 && strstr(out, "neither the original nor the installed"),
	       "a revert over changed bytes did not fail with the reason (%d): %s", rc, out);
	EXPECT(heaps_mapped(f.pid) == 1, "the heap was released while changed bytes may still reach it");
	/* The bytes are ours again: a revert finishes. */
	EXPECT(fd >= 0 && pwrite(fd, ours, 5, (off_t)p.members[0].addr) == 5, "cannot put the entry back");
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 0, "the second revert failed (%d): %s", rc, out);
	EXPECT(heaps_mapped(f.pid) == 0, "the heap is still mapped after the second revert");
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "%s", why);
	EXPECT(journals(st) == 0, "a journal is left after the second revert");
	if (fd >= 0)
		close(fd);
	kill(f.pid, SIGUSR1); /* one round of calls through the original code */
	usleep(300000);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	fx_stop(&f);
	hp_iplan_free(&p);
}

/* fn of fixture src (compiled -O2 -fPIE) measured, planned, installed
 * into the running fixture and reverted, three times, while the fixture
 * checks its results against the original's; every byte as before at the
 * end. */
static void table_install_revert(const char *src, const char *name, const char *fn)
{
	struct fx f;
	struct hp_iplan p;
	char cmd[4096], err[512] = "", prof[400], plan[400];
	const char *st = state_dir(name);
	const char *bin = tu_compile(src, name, "-O2 -fPIE -pie");

	REQUIRE(bin, "gcc failed");
	REQUIRE(fx_start(&f, bin, 0) == 0, "the fixture did not start");
	snprintf(prof, sizeof(prof), "%s/%s.profile.json", tu_tmpdir(), name);
	snprintf(plan, sizeof(plan), "%s/%s.plan.json", tu_tmpdir(), name);
	snprintf(cmd, sizeof(cmd),
		 "%s measure pid %d %s --blocks --seconds 1 --json > '%s' 2>/dev/null && %s plan pid %d %s "
		 "--profile '%s' --json > '%s'",
		 hp(), f.pid, fn, prof, hp(), f.pid, fn, prof, plan);
	if (system(cmd) != 0 || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan for %s: %s", fn, err);
	}
	EXPECT(p.nmembers == 1 && !strcmp(p.members[0].name, fn), "the plan has %zu members", p.nmembers);
	install_revert_cycles(&f, &p, plan, st, 3);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	unsigned long v = fx_stop(&f);
	EXPECT(v > 1000, "the fixture verified only %lu calls", v);
	printf("# %s: %s installed and reverted 3 times, %lu calls verified\n", name, fn, v);
	hp_iplan_free(&p);
}

/* A function dispatching through a switch table (dispatch.c, -fPIE: a
 * table of 4-byte offsets): its copy runs through its own table while the
 * fixture checks every case (and indexes beyond the bound). */
static void t_switch_table_install_revert(void)
{
	table_install_revert("dispatch.c", "switch", "dp_op");
}

/* A switch whose table's lea is hoisted before its loop (hoisted.c): the
 * copy's lea before the loop names the copy's table. */
static void t_hoisted_table_install_revert(void)
{
	table_install_revert("hoisted.c", "hoisted", "hs_run");
}

/* An interpreter's dispatch loop through a computed-goto label table
 * (labels.c, -fPIE: the table's lea before the loop, the dispatch repeated
 * at the end of the handlers): its copy dispatches through its own table of
 * the copies' addresses while the fixture checks every program's result. */
static void t_label_table_install_revert(void)
{
	table_install_revert("labels.c", "labels", "lb_run");
}

/* ---- Cycles under load ---------------------------------------------------- */

static double cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void t_cycles(void)
{
	struct fx f;
	struct hp_iplan p;
	char err[512], why[256] = "";
	const char *st = state_dir("cycles");
	int cycles = getenv("HOTPATH_REPLACE_CYCLES") ? atoi(getenv("HOTPATH_REPLACE_CYCLES")) : 300;
	int done = 0, inside = 0, stops = 0, kept = 0;
	unsigned moved = 0, waits = 0;
	double ins_ms = 0, rev_ms = 0, t0 = hp_now(), c0 = cpu_seconds();

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 4) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "cycles");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan: %s", err);
	}
	struct hp_open_opts oo = { .quiet = true };
	struct hp_model *m = NULL;
	if (hp_model_open_pid(f.pid, &oo, &m, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "%s", err);
	}
	struct hp_install_opts o = { .state_dir = st, .patch_calls = true, .m = m };
	for (; done < cycles; done++) {
		struct hp_install_result res, rr;
		/* How often a thread is inside the root when the world stops. */
		if (done % 10 == 0) {
			struct hp_world w;
			if (hp_world_stop(f.pid, &w, err, sizeof(err)) == 0) {
				/* Inside: running it, or in a callee with it on the stack. */
				for (size_t i = 0; i < w.n; i++) {
					struct hp_world one = w;
					char where[200];
					one.t = &w.t[i];
					one.n = 1;
					inside += hp_world_inside(&one, p.members[0].addr,
								  p.members[0].addr + p.members[0].size, 1 << 20, where,
								  sizeof(where)) >= 0;
				}
				stops++;
				hp_world_release(&w);
			}
		}
		if (hp_install(&p, &o, &res, err, sizeof(err)) < 0) {
			EXPECT(0, "install %d: %s", done, err);
			break;
		}
		ins_ms += res.total_ms;
		moved += res.pcs_moved;
		waits += res.waits;
		if (hp_revert(st, f.pid, NULL, &rr, NULL, NULL, err, sizeof(err)) < 0) {
			EXPECT(0, "revert %d: %s", done, err);
			break;
		}
		rev_ms += rr.revert_total_ms;
		kept += rr.heap_kept;
		if (!fx_ok(&f)) {
			EXPECT(0, "after cycle %d the process went wrong: %s", done, f.errbuf);
			break;
		}
	}
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "%s", why);
	/* Heaps a thread was still in at its revert are freed by the next revert: what is left
	 * after the last one is at most what reverts kept, and each heap still mapped keeps
	 * exactly one journal (a journal without its heap, or a heap without its journal, is a
	 * leak the next revert could not undo). */
	int mapped = heaps_mapped(f.pid);
	size_t left = journals(st);
	EXPECT(mapped <= kept, "%d code heaps are still mapped, %d reverts kept one", mapped, kept);
	EXPECT(left == (size_t)mapped, "%zu journals are left for %d code heaps still mapped", left, mapped);
	EXPECT(stops == 0 || inside > 0, "no thread was ever inside pr_root when the process stopped");
	unsigned long v = fx_stop(&f);
	EXPECT(v > 10000, "the fixture verified only %lu calls", v);
	printf("# %d install/revert cycles in %.1f s (agent CPU %.1f s): install %.2f ms, revert %.2f ms on "
	       "average; at %d sampled stops %d threads were inside pr_root or its callees; threads inside the "
	       "entry's 5 bytes: %u moved to the copy, %u waits; %d reverts left the heap to a later one; %lu results "
	       "verified\n",
	       done, hp_now() - t0, cpu_seconds() - c0, done ? ins_ms / done : 0, done ? rev_ms / done : 0, stops,
	       inside, moved, waits, kept, v);
	hp_model_free(m);
	hp_iplan_free(&p);
}

/* A revert that restored the code but had to keep the heap (a thread still in the copy; here the
 * test hook HOTPATH_TEST_HEAP_BUSY stands in for that thread) does not block the next install of
 * the same root, and the next revert frees both heaps. */
static void t_install_after_a_kept_heap(void)
{
	struct fx f;
	struct hp_iplan p;
	char cmd[2048], out[16384], err[512], why[256] = "";
	const char *st = state_dir("kept");

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 2) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "kept");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan: %s", err);
	}
	snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet 2>&1", hp(), plan, st);
	int rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 0, "install failed (%d): %s", rc, out);
	snprintf(cmd, sizeof(cmd), "HOTPATH_TEST_HEAP_BUSY=1 %s revert pid %d --state-dir '%s' --json 2>&1", hp(),
		 f.pid, st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 0 && strstr(out, "reverted_heap_kept"), "the revert did not keep the heap (%d): %s", rc, out);
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "after the revert that kept the heap: %s", why);
	EXPECT(heaps_mapped(f.pid) == 1 && journals(st) == 1, "%d heaps, %zu journals after the kept revert",
	       heaps_mapped(f.pid), journals(st));
	snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet 2>&1", hp(), plan, st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 0, "the install after a revert that kept its heap failed (%d): %s", rc, out);
	usleep(200000);
	EXPECT(fx_ok(&f), "the process went wrong with the copy installed again: %s", f.errbuf);
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --json 2>&1", hp(), f.pid, st);
	/* Freed once no thread is in a copy: as in t_kill_agent, revert again while one is kept (30 s bound). */
	rc = run(cmd, out, sizeof(out));
	for (double end = hp_now() + 30; rc == 0 && (heaps_mapped(f.pid) || journals(st)) && hp_now() < end;) {
		usleep(100000);
		rc = run(cmd, out, sizeof(out));
	}
	EXPECT(rc == 0 || rc == 4, "the last revert failed (%d): %s", rc, out);
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "after the last revert: %s", why);
	EXPECT(heaps_mapped(f.pid) == 0 && journals(st) == 0, "not clean: %d heaps, %zu journals: %s",
	       heaps_mapped(f.pid), journals(st), out);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	fx_stop(&f);
	hp_iplan_free(&p);
}

/* ---- Installs that compose ---------------------------------------------- */

/* WHAT (a root, or --hot-set) measured and planned by the command line with
 * the installs of state folder st read as the original code (NULL: none). */
static const char *make_plan_st(pid_t pid, const char *name, const char *what, const char *st)
{
	static char plan[8][400];
	static int slot;
	char *p = plan[slot++ % 8], prof[400], cmd[4096], sd[400] = "";

	if (st)
		snprintf(sd, sizeof(sd), " --state-dir '%s'", st);
	snprintf(prof, sizeof(prof), "%s/%s.profile.json", tu_tmpdir(), name);
	snprintf(p, 400, "%s/%s.plan.json", tu_tmpdir(), name);
	snprintf(cmd, sizeof(cmd),
		 "%s measure pid %d pr_root pr_op pr_hash pr_mix pr_fib pr_even pr_odd pr_search pr_check --blocks "
		 "--seconds 1 --json%s > '%s' 2>/dev/null && %s plan pid %d %s --profile '%s'%s --json > '%s'",
		 hp(), pid, sd, prof, hp(), pid, what, prof, sd, p);
	return system(cmd) == 0 ? p : NULL;
}

/* The process's executable mapping of its own binary is the file's bytes,
 * byte for byte (every patch, scratch byte and probe gone). */
static int text_is_the_files(pid_t pid, char *why, size_t wl)
{
	char path[64], line[1024], exe[512] = "";
	uint64_t lo = 0, hi = 0, off = 0;
	ssize_t el;

	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	if ((el = readlink(path, exe, sizeof(exe) - 1)) <= 0)
		return snprintf(why, wl, "no executable"), 1;
	exe[el] = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	FILE *fp = fopen(path, "r");
	while (fp && fgets(line, sizeof(line), fp)) {
		char perms[8], file[600] = "";
		uint64_t a, b, o;
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s %599[^\n]", &a, &b, perms, &o,
			   file) == 5 &&
		    perms[2] == 'x' && !strcmp(file, exe)) {
			lo = a, hi = b, off = o;
			break;
		}
	}
	if (fp)
		fclose(fp);
	if (!lo)
		return snprintf(why, wl, "no executable mapping of %s", exe), 1;
	off_t fsz = tu_file_size(exe);
	size_t len = (size_t)(hi - lo);
	if ((off_t)(off + len) > fsz)
		len = (size_t)(fsz - (off_t)off);
	uint8_t *a = malloc(len), *b = malloc(len);
	int fd = open(exe, O_RDONLY), md;
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	md = open(path, O_RDONLY);
	int bad = !a || !b || fd < 0 || md < 0 || pread(fd, a, len, (off_t)off) != (ssize_t)len ||
		  pread(md, b, len, (off_t)lo) != (ssize_t)len;
	if (bad)
		snprintf(why, wl, "cannot read the text");
	for (size_t i = 0; !bad && i < len; i++)
		if (a[i] != b[i]) {
			snprintf(why, wl, "the text differs from the file at 0x%" PRIx64 " (+0x%zx)", lo + i, i);
			bad = 1;
		}
	free(a);
	free(b);
	if (fd >= 0)
		close(fd);
	if (md >= 0)
		close(md);
	return bad;
}

/* `hotpathd install PLAN --json`: its exit status, with the install's id. */
static int install_cli(const char *plan, const char *st, char *id, size_t idlen, char *out, size_t outlen)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --json --quiet 2>&1", hp(), plan, st);
	int rc = run(cmd, out, outlen);
	json_t *j = json_loads(out, JSON_DISABLE_EOF_CHECK, NULL);
	snprintf(id, idlen, "%s", json_string_value(json_object_get(j, "id")) ?: "");
	json_decref(j);
	return rc;
}

/* Whether fn's entry (at addr in the process) jumps into [heap, heap + len). */
static bool entry_jumps_into(pid_t pid, uint64_t addr, uint64_t heap, uint64_t len)
{
	char mp[64];
	uint8_t b[5];
	snprintf(mp, sizeof(mp), "/proc/%d/mem", pid);
	int fd = open(mp, O_RDONLY);
	bool ok = fd >= 0 && pread(fd, b, 5, (off_t)addr) == 5 && b[0] == 0xe9;
	uint64_t to = ok ? addr + 5 + (uint64_t)(int64_t) * (int32_t *)(b + 1) : 0;
	if (fd >= 0)
		close(fd);
	return ok && to >= heap && to < heap + len;
}

static const struct hp_installed *find_installed(const struct hp_installed *ins, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(ins[i].id, id))
			return &ins[i];
	return NULL;
}

/* Two plans whose code overlaps, installed one after the other: a plan made
 * before the first install (its identity check reads what is installed as
 * the original bytes) and one made after it both install over it and run
 * right; reverts in either order leave the other install working and, at
 * the end, the text exactly the file's. The hot set (every member's entry
 * spliced, every call to a member redirected) and pr_mix's plan write the
 * same bytes (pr_mix's entry, its call site in pr_root): the later install's
 * revert puts the earlier one's bytes back, the earlier one's leaves the
 * later one's alone. pr_root's plan has pr_mix among its members, whose
 * entry and call site pr_mix's install patched. Before composing, every
 * second install was refused: "not the code the plan was made from". */
static void t_installs_compose(void)
{
	struct fx f;
	struct hp_iplan hot, mix;
	char out[16384], err[512] = "", why[256] = "", id_hot[64], id_mix[64], id_root[64];
	const char *st = state_dir("compose");

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 3) == 0, "the fixture did not start");
	const char *p_hot = make_plan_st(f.pid, "compose-hot", "--hot-set", NULL);
	const char *p_mix = make_plan_st(f.pid, "compose-mix", "pr_mix", NULL);
	const char *p_root_before = make_plan_st(f.pid, "compose-root-before", "pr_root", NULL);
	if (!p_hot || !p_mix || !p_root_before || load_plan(p_hot, &hot, err, sizeof(err)) < 0 ||
	    load_plan(p_mix, &mix, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plans: %s", err);
	}
	/* 1. pr_mix installed; pr_root planned before it and after it: both install over it. */
	int rc = install_cli(p_mix, st, id_mix, sizeof(id_mix), out, sizeof(out));
	EXPECT(rc == 0, "pr_mix's install failed (%d): %s", rc, out);
	const char *p_root_after = make_plan_st(f.pid, "compose-root-after", "pr_root", st);
	EXPECT(p_root_after, "pr_root was not planned with pr_mix installed");
	const char *roots[2] = { p_root_before, p_root_after };
	for (int k = 0; k < 2 && roots[k]; k++) {
		struct hp_install_result rr;
		int pid;
		rc = install_cli(roots[k], st, id_root, sizeof(id_root), out, sizeof(out));
		EXPECT(rc == 0, "pr_root planned %s pr_mix's install did not install over it (%d): %s",
		       k ? "after" : "before", rc, out);
		usleep(200000);
		EXPECT(fx_ok(&f), "the process went wrong with both installed: %s", f.errbuf);
		if (rc == 0)
			EXPECT(hp_revert_id(st, id_root, &pid, &rr, NULL, NULL, err, sizeof(err)) == 0 && !rr.heap_kept,
			       "pr_root's revert: %s", err);
		EXPECT(entry_jumps_into(f.pid, mix.members[0].addr, 0, UINT64_MAX),
		       "pr_mix's entry no longer jumps to its copy after pr_root's revert");
	}
	snprintf(out, sizeof(out), "%s revert pid %d --state-dir '%s' --quiet", hp(), f.pid, st);
	EXPECT(run(out, NULL, 0) == 0, "pr_mix's revert failed");
	EXPECT(text_is_the_files(f.pid, why, sizeof(why)) == 0, "after the reverts: %s", why);
	/* 2. The same bytes written by two installs, reverted in either order. */
	for (int order = 0; order < 2; order++) {
		struct hp_install_result rr;
		struct hp_installed *ins = NULL;
		size_t n = 0;
		int pid;
		rc = install_cli(p_hot, st, id_hot, sizeof(id_hot), out, sizeof(out));
		EXPECT(rc == 0, "order %d: the hot set's install failed (%d): %s", order, rc, out);
		rc = install_cli(p_mix, st, id_mix, sizeof(id_mix), out, sizeof(out));
		EXPECT(rc == 0,
		       "order %d: pr_mix (planned before the hot set's install) was not installed over it (%d): %s",
		       order, rc, out);
		hp_installed_list(st, &ins, &n, err, sizeof(err));
		const struct hp_installed *ih = find_installed(ins, n, id_hot), *im = find_installed(ins, n, id_mix);
		EXPECT(ih && im, "order %d: %zu installs listed", order, n);
		struct hp_installed h = ih ? *ih : (struct hp_installed){ 0 },
				    m = im ? *im : (struct hp_installed){ 0 };
		free(ins);
		EXPECT(entry_jumps_into(f.pid, mix.members[0].addr, m.heap, m.heap_len),
		       "order %d: pr_mix's entry does not jump to the later install's copy", order);
		usleep(200000);
		EXPECT(fx_ok(&f), "order %d: the process went wrong with both installed: %s", order, f.errbuf);
		const char *first = order ? id_hot : id_mix, *second = order ? id_mix : id_hot;
		EXPECT(hp_revert_id(st, first, &pid, &rr, NULL, NULL, err, sizeof(err)) == 0,
		       "order %d: the first revert (%s) failed: %s", order, first, err);
		/* The other install is whole: pr_mix's entry jumps to its copy. */
		const struct hp_installed *left = order ? &m : &h;
		EXPECT(entry_jumps_into(f.pid, mix.members[0].addr, left->heap, left->heap_len),
		       "order %d: after reverting %s, pr_mix's entry does not jump into %s's copy", order, first,
		       second);
		usleep(200000);
		EXPECT(fx_ok(&f), "order %d: the process went wrong after the first revert: %s", order, f.errbuf);
		EXPECT(hp_revert_id(st, second, &pid, &rr, NULL, NULL, err, sizeof(err)) == 0,
		       "order %d: the second revert (%s) failed: %s", order, second, err);
		/* Heaps a thread was in at a revert are freed by a later one. */
		for (double end = hp_now() + 30; (heaps_mapped(f.pid) || journals(st)) && hp_now() < end;) {
			size_t rel, wait;
			usleep(100000);
			hp_release_kept(st, f.pid, NULL, &rel, &wait);
		}
		EXPECT(text_is_the_files(f.pid, why, sizeof(why)) == 0, "order %d, after both reverts: %s", order, why);
		EXPECT(members_original(f.pid, &hot, why, sizeof(why)) == 0, "order %d: %s", order, why);
		EXPECT(heaps_mapped(f.pid) == 0 && journals(st) == 0, "order %d: %d heaps, %zu journals left", order,
		       heaps_mapped(f.pid), journals(st));
		usleep(100000);
		EXPECT(fx_ok(&f), "order %d: the process went wrong after both reverts: %s", order, f.errbuf);
	}
	unsigned long v = fx_stop(&f);
	EXPECT(v > 1000, "the fixture verified only %lu calls", v);
	printf("# composed: pr_root over pr_mix (planned before and after it), the hot set and pr_mix reverted in both "
	       "orders, text as the file's; %lu calls verified\n",
	       v);
	hp_iplan_free(&hot);
	hp_iplan_free(&mix);
}

/* Read the fixture's stdout until a line holds want (bounded wait: a hang, not a timing, fails it);
 * the line into line (may be NULL). */
static bool fx_wait_line(struct fx *f, const char *want, char *line, size_t ll)
{
	char buf[256];
	size_t n = 0;
	for (double end = hp_now() + 60; hp_now() < end;) {
		struct pollfd p = { f->out, POLLIN, 0 };
		if (poll(&p, 1, 1000) <= 0)
			continue;
		ssize_t k = read(f->out, buf + n, 1);
		if (k <= 0)
			return false;
		if (buf[n] == '\n' || n + 2 >= sizeof(buf)) {
			buf[n] = 0;
			if (strstr(buf, want)) {
				if (line)
					snprintf(line, ll, "%.*s", (int)(ll > 1 ? ll - 1 : 0), buf);
				return true;
			}
			n = 0;
		} else {
			n++;
		}
	}
	return false;
}

static bool fx_wait_for(struct fx *f, const char *want)
{
	return fx_wait_line(f, want, NULL, 0);
}

/* Park a worker of the "park" fixture where its stack holds a return address
 * into [heap, heap + len): asked again (let go, parked anew) while the one that
 * parked first called pr_mix elsewhere, at most 20 times. */
static bool park_in_copy(struct fx *f, uint64_t heap, uint64_t len)
{
	for (int k = 0; k < 20; k++) {
		char line[64], err[256], where[200];
		int tid = 0;
		struct hp_world w;
		kill(f->pid, SIGUSR2);
		if (!fx_wait_line(f, "parked", line, sizeof(line)) || sscanf(line, "parked %d", &tid) != 1)
			return false;
		bool in = false;
		if (hp_world_stop(f->pid, &w, err, sizeof(err)) == 0) {
			ssize_t i = hp_world_index(&w, tid);
			if (i >= 0) {
				struct hp_world one = w;
				one.t = &w.t[i];
				one.n = 1;
				in = hp_world_inside(&one, heap, heap + len, 256 << 10, where, sizeof(where)) >= 0;
			}
			hp_world_release(&w);
		}
		if (in)
			return true;
		printf("# worker %d parked outside the copy; again\n", tid);
		kill(f->pid, SIGHUP);
		if (!fx_wait_for(f, "left"))
			return false;
	}
	return false;
}

/* The "park" fixture with two plans made for it (pr_root's, pr_search's, named
 * TAG-root and TAG-search) and its model: 0, or -1 with why (the fixture stopped). */
static int park_fixture_with_two_plans(struct fx *f, const char *tag, struct hp_iplan *p, struct hp_iplan *q,
				       struct hp_model **m, char *err, size_t errlen)
{
	char a[64], b[64];
	struct hp_open_opts oo = { .quiet = true };

	if (fx_start_mode(f, fixture(), 3, "park") != 0) {
		snprintf(err, errlen, "the fixture did not start");
		return -1;
	}
	snprintf(a, sizeof(a), "%s-root", tag);
	snprintf(b, sizeof(b), "%s-search", tag);
	const char *plan = make_plan_st(f->pid, a, "pr_root", NULL);
	const char *plan2 = make_plan_st(f->pid, b, "pr_search", NULL);
	if (!plan || !plan2 || load_plan(plan, p, err, errlen) < 0 || load_plan(plan2, q, err, errlen) < 0) {
		if (!plan || !plan2)
			snprintf(err, errlen, "no plans");
		fx_stop(f);
		return -1;
	}
	if (hp_model_open_pid(f->pid, &oo, m, err, errlen) < 0) {
		fx_stop(f);
		return -1;
	}
	return 0;
}

/* Reverting every install of a process (hp_revert without a root) when the
 * first journal's heap is kept (a worker parked in its copy) and the next
 * one's is freed: each journal is judged alone. Before, the first's kept
 * heap made the revert leave the second's journal behind (reverted, heap
 * freed, never retired), where it blocked that root's next install for good
 * (CI saw "0 heaps, 1 journals" at the end of t_kept_heap_retried). */
static void t_revert_all_with_a_heap_kept(void)
{
	struct fx f;
	struct hp_iplan p, q;
	char err[512] = "", why[256] = "";
	const char *st = state_dir("all");
	struct hp_install_result ra, rb, rr;
	struct hp_installed *ins = NULL;
	size_t n = 0;
	struct hp_model *m = NULL;

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(park_fixture_with_two_plans(&f, "all", &p, &q, &m, err, sizeof(err)) == 0, "%s", err);
	/* Journals are listed in name order: ...-a-kept is reverted before ...-b-freed. */
	struct hp_install_opts oa = { .state_dir = st, .patch_calls = true, .m = m, .id = "hotpath-a-kept" };
	struct hp_install_opts ob = { .state_dir = st, .patch_calls = true, .m = m, .id = "hotpath-b-freed" };
	int r = hp_install(&p, &oa, &ra, err, sizeof(err));
	EXPECT(r == 0, "install of pr_root: %s", err);
	int r2 = r == 0 ? hp_install(&q, &ob, &rb, err, sizeof(err)) : -1;
	EXPECT(r2 == 0, "install of pr_search: %s", err);
	bool parked = r == 0 && r2 == 0 && park_in_copy(&f, ra.heap, ra.heap_len);
	EXPECT(parked, "no worker parked inside pr_root's copy");
	if (parked) {
		EXPECT(hp_revert(st, f.pid, NULL, &rr, NULL, NULL, err, sizeof(err)) == 0 && rr.heap_kept,
		       "the revert of both: kept %d: %s", rr.heap_kept, err);
		/* Every journal left is a kept heap's, waiting for release (pr_search's may
		 * be kept too, if a worker was inside its copy); none is a finished revert. */
		EXPECT(hp_installed_list(st, &ins, &n, err, sizeof(err)) == 0 && n >= 1, "installed: %s", err);
		for (size_t i = 0; ins && i < n; i++)
			EXPECT(!strcmp(ins[i].state, "heap_kept"), "the journal of %s is left in the state %s: %s",
			       ins[i].id, ins[i].state, ins[i].detail);
		EXPECT(heaps_mapped(f.pid) == (int)n, "%d heaps mapped for %zu journals", heaps_mapped(f.pid), n);
		free(ins);
		/* pr_search installs again at once. */
		struct hp_install_opts oc = { .state_dir = st, .patch_calls = true, .m = m, .id = "hotpath-c-again" };
		EXPECT(hp_install(&q, &oc, &rb, err, sizeof(err)) == 0, "pr_search's install after the revert: %s",
		       err);
		int pid = 0;
		EXPECT(hp_revert_id(st, "hotpath-c-again", &pid, &rr, NULL, NULL, err, sizeof(err)) == 0,
		       "its revert: %s", err);
		kill(f.pid, SIGHUP);
		EXPECT(fx_wait_for(&f, "left"), "the parked worker did not leave");
	}
	size_t rel = 0, wait = 1;
	for (double end = hp_now() + 30; wait && hp_now() < end; usleep(100000))
		hp_release_kept(st, f.pid, NULL, &rel, &wait);
	EXPECT(heaps_mapped(f.pid) == 0 && journals(st) == 0, "%d heaps, %zu journals at the end", heaps_mapped(f.pid),
	       journals(st));
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "%s", why);
	EXPECT(text_is_the_files(f.pid, why, sizeof(why)) == 0, "at the end: %s", why);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	unsigned long v = fx_stop(&f);
	EXPECT(v > 1000, "the fixture verified only %lu calls", v);
	hp_model_free(m);
	hp_iplan_free(&p);
	hp_iplan_free(&q);
}

/* A revert while a thread is parked inside the copy (return addresses into
 * it on its stack) restores the bytes and keeps the heap; that kept heap
 * blocks nothing (the same plan installed again under the same id, as the
 * daemon does, and another plan), every install and revert asks about it
 * again, and once the thread has left, the next revert (and the daemon's
 * periodic retry, hp_release_kept) releases it. Before, the same id's
 * second install was refused (its journal's name was taken). */
static void t_kept_heap_retried(void)
{
	struct fx f;
	struct hp_iplan p, q;
	char cmd[2048], out[16384], err[512] = "", why[256] = "";
	const char *st = state_dir("retry");
	struct hp_install_result res, rr;
	int pid;
	struct hp_model *m = NULL;

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(park_fixture_with_two_plans(&f, "retry", &p, &q, &m, err, sizeof(err)) == 0, "%s", err);
	struct hp_install_opts o = { .state_dir = st, .patch_calls = true, .m = m, .id = "hotpath-retry-plan" };
	struct hp_install_opts o2 = { .state_dir = st, .patch_calls = true, .m = m, .id = "hotpath-retry-other" };
	int r = hp_install(&p, &o, &res, err, sizeof(err));
	EXPECT(r == 0, "install: %s", err);
	for (int round = 0; r == 0 && round < 2; round++) {
		/* A worker parks inside the copy; the revert keeps its heap. */
		EXPECT(park_in_copy(&f, res.heap, res.heap_len), "round %d: no worker parked inside the copy", round);
		r = hp_revert_id(st, "hotpath-retry-plan", &pid, &rr, NULL, NULL, err, sizeof(err));
		EXPECT(r == 0 && rr.heap_kept && rr.kept_waiting == 1,
		       "round %d: the revert with a worker parked in the copy did not keep the heap (%d, kept %d, "
		       "waiting %zu): %s",
		       round, r, rr.heap_kept, rr.kept_waiting, err);
		EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "round %d: %s", round, why);
		snprintf(cmd, sizeof(cmd), "%s installed --state-dir '%s'", hp(), st);
		run(cmd, out, sizeof(out));
		EXPECT(strstr(out, "heap_kept") && strstr(out, "waiting for release"),
		       "round %d: installed does not show the kept heap: %s", round, out);
		const char *freed_by = "";
		size_t rel = 0, wait = 0;
		if (round == 0) {
			/* The same plan again, under the same id, and another plan: neither blocked. */
			r = hp_install(&p, &o, &res, err, sizeof(err));
			EXPECT(r == 0 && res.kept_waiting == 1,
			       "the same plan's install after a kept heap: %d (waiting %zu): %s", r, res.kept_waiting,
			       err);
			struct hp_install_result res2;
			int r2 = hp_install(&q, &o2, &res2, err, sizeof(err));
			EXPECT(r2 == 0 && res2.kept_waiting == 1, "another plan's install after a kept heap: %d: %s",
			       r2, err);
			usleep(200000);
			EXPECT(fx_ok(&f), "the process went wrong with a heap kept: %s", f.errbuf);
			EXPECT(heaps_mapped(f.pid) == 3, "%d heaps mapped, want 3 (kept, reinstalled, other)",
			       heaps_mapped(f.pid));
			kill(f.pid, SIGHUP);
			EXPECT(fx_wait_for(&f, "left"), "the parked worker did not leave");
			/* A later revert (of the other plan) asks again. */
			EXPECT(r2 == 0 &&
				       hp_revert_id(st, "hotpath-retry-other", &pid, &rr, NULL, NULL, err,
						    sizeof(err)) == 0 &&
				       rr.kept_released + rr.kept_waiting == 1,
			       "the other plan's revert did not ask about the kept heap (released %zu, waiting %zu): %s",
			       rr.kept_released, rr.kept_waiting, err);
			rel = rr.kept_released;
			wait = rr.kept_waiting;
			freed_by = rel ? "the next revert" : "";
		} else {
			kill(f.pid, SIGHUP);
			EXPECT(fx_wait_for(&f, "left"), "the parked worker did not leave");
			wait = 1;
		}
		/* What the daemon's periodic retry calls (for every process), until the workers' stacks
		 * hold no stale word into the copy either (the scan errs towards "in use"); 30 s bound. */
		int retries = 0;
		for (double end = hp_now() + 30; wait && hp_now() < end; retries++) {
			hp_release_kept(st, 0, NULL, &rel, &wait);
			if (rel)
				freed_by = "the periodic retry";
			else
				usleep(100000);
		}
		EXPECT(rel == 1 && wait == 0, "round %d: the kept heap was not released (%zu waiting)", round, wait);
		EXPECT(heaps_mapped(f.pid) == (round == 0) && journals(st) == (size_t)(round == 0),
		       "round %d: %d heaps, %zu journals after the retry", round, heaps_mapped(f.pid), journals(st));
		printf("# kept heap, round %d: kept while a worker was parked in the copy, released by %s (periodic "
		       "retries: %d)\n",
		       round, freed_by, retries);
	}
	/* A second pass (--replace) whose revert of the first keeps its heap (the test hook stands in
	 * for a thread in it) counts that heap once among those waiting. */
	setenv("HOTPATH_TEST_HEAP_BUSY", "1", 1);
	struct hp_install_opts o3 = { .state_dir = st, .patch_calls = true, .m = m, .replace = true };
	r = hp_install(&p, &o3, &res, err, sizeof(err));
	EXPECT(r == 0 && res.kept_waiting == 0, "the first pass: %d, %zu heaps waiting: %s", r, res.kept_waiting, err);
	r = hp_install(&p, &o3, &res, err, sizeof(err));
	EXPECT(r == 0 && res.kept_waiting == 1, "the second pass: %d, %zu heaps waiting (want 1): %s", r,
	       res.kept_waiting, err);
	unsetenv("HOTPATH_TEST_HEAP_BUSY");
	EXPECT(hp_revert(st, f.pid, NULL, &rr, NULL, NULL, err, sizeof(err)) == 0, "the last revert: %s", err);
	size_t rel = 0, wait = 1;
	for (double end = hp_now() + 30; wait && hp_now() < end; usleep(100000))
		hp_release_kept(st, f.pid, NULL, &rel, &wait);
	EXPECT(heaps_mapped(f.pid) == 0 && journals(st) == 0, "%d heaps, %zu journals at the end", heaps_mapped(f.pid),
	       journals(st));
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "%s", why);
	EXPECT(text_is_the_files(f.pid, why, sizeof(why)) == 0, "at the end: %s", why);
	usleep(100000);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	unsigned long v = fx_stop(&f);
	EXPECT(v > 1000, "the fixture verified only %lu calls", v);
	hp_model_free(m);
	hp_iplan_free(&p);
	hp_iplan_free(&q);
}

/* ---- The agent killed midway ------------------------------------------- */

/* hotpathd install, killed by its test hook when it reaches step kill_at. */
static int kill_run(const char *st, const char *plan, const char *kill_at, char *out, size_t outlen)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "HOTPATH_TEST_KILL_AT=%s %s install '%s' --state-dir '%s' --quiet 2>&1", kill_at,
		 hp(), plan, st);
	return run(cmd, out, outlen);
}

static void t_kill_agent(void)
{
	static const char *const install_steps[] = { "journaled", "stopped", "scratch",   "heap", "unwind",
						     "entry",     "calls",   "installed", NULL };
	static const char *const revert_steps[] = { "revert_calls", "revert_entry", "revert_heap", NULL };
	struct fx f;
	struct hp_iplan p;
	char cmd[2048], out[8192], err[512], why[256] = "";
	const char *st = state_dir("kill");
	int kills = 0, recovered = 0, random_kills = 0;

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 3) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "kill");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan: %s", err);
	}
	/* Killed at each step of an install. */
	for (const char *const *s = install_steps; *s; s++) {
		int rc = kill_run(st, plan, *s, out, sizeof(out));
		kills++;
		EXPECT(rc != 0, "the install was not killed at %s", *s);
		usleep(50000);
		if (!fx_ok(&f)) {
			EXPECT(0, "killed at %s, the process went wrong: %s", *s, f.errbuf);
			break;
		}
		EXPECT(journals(st) == 1, "killed at %s: %zu journals, want 1", *s, journals(st));
		snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --quiet 2>&1", hp(), f.pid, st);
		rc = run(cmd, out, sizeof(out));
		EXPECT(rc == 0, "after a kill at %s the revert failed (%d): %s", *s, rc, out);
		EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "killed at %s: %s", *s, why);
		EXPECT(heaps_mapped(f.pid) == 0, "killed at %s: a heap is still mapped", *s);
		EXPECT(journals(st) == 0, "killed at %s: a journal is left", *s);
		recovered += rc == 0;
	}
	/* Killed at each step of a revert. */
	for (const char *const *s = revert_steps; *s && fx_ok(&f); s++) {
		snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet", hp(), plan, st);
		EXPECT(run(cmd, NULL, 0) == 0, "install before the revert kill failed");
		snprintf(cmd, sizeof(cmd), "HOTPATH_TEST_KILL_AT=%s %s revert pid %d --state-dir '%s' --quiet", *s,
			 hp(), f.pid, st);
		kills++;
		EXPECT(run(cmd, NULL, 0) != 0, "the revert was not killed at %s", *s);
		usleep(50000);
		EXPECT(fx_ok(&f), "revert killed at %s, the process went wrong: %s", *s, f.errbuf);
		snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --quiet 2>&1", hp(), f.pid, st);
		int rc = run(cmd, out, sizeof(out));
		EXPECT(rc == 0, "after a kill at %s the revert failed (%d): %s", *s, rc, out);
		EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "revert killed at %s: %s", *s, why);
		EXPECT(heaps_mapped(f.pid) == 0 && journals(st) == 0, "revert killed at %s: not clean", *s);
		recovered += rc == 0;
	}
	/* Killed while the process's unwinder call runs (the thread finishes it
	 * alone): registering at install, deregistering at revert. The revert
	 * after it tells from the call's done flag whether it finished: it
	 * neither keeps the heap for ever nor deregisters twice. */
	for (int dereg = 0; dereg < 2 && fx_ok(&f); dereg++) {
		if (dereg) {
			snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet", hp(), plan, st);
			EXPECT(run(cmd, NULL, 0) == 0, "install before the deregistration kill failed");
			snprintf(cmd, sizeof(cmd),
				 "HOTPATH_TEST_KILL_IN_CALL=1 %s revert pid %d --state-dir '%s' --quiet", hp(), f.pid,
				 st);
		} else {
			snprintf(cmd, sizeof(cmd),
				 "HOTPATH_TEST_KILL_IN_CALL=1 %s install '%s' --state-dir '%s' --quiet", hp(), plan,
				 st);
		}
		kills++;
		EXPECT(run(cmd, NULL, 0) != 0, "the %s was not killed in the unwinder call",
		       dereg ? "revert" : "install");
		usleep(50000);
		EXPECT(fx_ok(&f), "killed in the unwinder call, the process went wrong: %s", f.errbuf);
		snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --json 2>&1", hp(), f.pid, st);
		int rc = run(cmd, out, sizeof(out));
		EXPECT(rc == 0, "after a kill in the unwinder call the revert failed (%d): %s", rc, out);
		EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "killed in the unwinder call: %s", why);
		EXPECT(heaps_mapped(f.pid) == 0 && journals(st) == 0, "killed in the %s call: not clean: %s",
		       dereg ? "deregistration" : "registration", out);
		usleep(50000);
		EXPECT(fx_ok(&f), "after the revert, the process went wrong: %s", f.errbuf);
		recovered += rc == 0;
	}
	/* Killed at random moments (inside injected calls and system calls too). */
	srand((unsigned)time(NULL));
	for (int k = 0; k < 24 && fx_ok(&f); k++) {
		pid_t c = fork();
		if (c == 0) {
			int nul = open("/dev/null", O_WRONLY);
			dup2(nul, 1);
			dup2(nul, 2);
			char ps[16];
			snprintf(ps, sizeof(ps), "%d", f.pid);
			if (k % 2)
				execl(hp(), hp(), "revert", "pid", ps, "--state-dir", st, (char *)NULL);
			else
				execl(hp(), hp(), "install", plan, "--state-dir", st, (char *)NULL);
			_exit(127);
		}
		usleep((useconds_t)(rand() % 40000));
		kill(c, SIGKILL);
		int ws;
		waitpid(c, &ws, 0);
		random_kills += WIFSIGNALED(ws);
		usleep(20000);
		EXPECT(fx_ok(&f), "after a random kill (%d) the process went wrong: %s", k, f.errbuf);
	}
	/* The final revert restores every byte at once. Its heap is freed only
	 * once no thread is in the copy: on a loaded machine a thread preempted
	 * inside it may not run during the revert's ~100 ms of waiting, and then
	 * the heap is kept (still correct code) with its journal, as designed
	 * (docs/agent-cli.md, revert): the next revert tries again. So the check
	 * reverts again until clean, each time exit 0 and the bytes original,
	 * within a bound far above any scheduling delay (30 s). */
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --json 2>&1", hp(), f.pid, st);
	int rc = run(cmd, out, sizeof(out)), again = 0;
	EXPECT(rc == 0 || rc == 4, "the final revert failed (%d): %s", rc, out);
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "after random kills: %s", why);
	for (double end = hp_now() + 30; rc == 0 && (heaps_mapped(f.pid) || journals(st)) && hp_now() < end; again++) {
		EXPECT(strstr(out, "reverted_heap_kept") != NULL, "not clean, yet the revert did not keep a heap: %s",
		       out);
		usleep(100000);
		rc = run(cmd, out, sizeof(out));
		EXPECT(rc == 0 || rc == 4, "revert %d after the final one failed (%d): %s", again + 1, rc, out);
		EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "after random kills: %s", why);
	}
	for (char *nl = out; (nl = strchr(nl, '\n'));)
		*nl = ' ';
	EXPECT(heaps_mapped(f.pid) == 0 && journals(st) == 0,
	       "after random kills: not clean (%d heaps, %zu journals) after %d more reverts: %s", heaps_mapped(f.pid),
	       journals(st), again, out);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	unsigned long v = fx_stop(&f);
	printf("# agent killed at %d steps (%d recovered to clean) and at %d random moments; %lu results verified; "
	       "%d more reverts freed a kept heap\n",
	       kills, recovered, random_kills, v, again);
	hp_iplan_free(&p);
}

/* ---- Bad input --------------------------------------------------------- */

static int expect_refused(const char *cmd, int want_rc, const char *want_text, char *out, size_t outlen)
{
	int rc = run(cmd, out, outlen);
	return rc == want_rc && strstr(out, want_text) ? 0 : rc;
}

static void t_bad_input(void)
{
	struct fx f, idle;
	struct hp_iplan p;
	char cmd[4096], out[8192], err[512], why[256] = "", altered[400], tiny[300];
	const char *st = state_dir("bad");
	int rc;

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 2) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "bad");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan: %s", err);
	}
	/* An altered plan: one byte of code changed. */
	size_t len;
	char *text = slurp(plan, &len), *hex = text ? strstr(text, "\"hex\":\"") : NULL;
	snprintf(altered, sizeof(altered), "%s/altered.json", tu_tmpdir());
	if (hex) {
		hex[7] = hex[7] == '9' ? '8' : '9';
		FILE *fp = fopen(altered, "w");
		fwrite(text, 1, len, fp);
		fclose(fp);
	}
	free(text);
	snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet 2>&1", hp(), altered, st);
	rc = expect_refused(cmd, 5, "altered", out, sizeof(out));
	EXPECT(rc == 0, "an altered plan was not refused (%d): %s", rc, out);
	/* Not the approved hash. */
	snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet --approved-hash %064d 2>&1", hp(), plan,
		 st, 0);
	rc = expect_refused(cmd, 5, "not the approved hash", out, sizeof(out));
	EXPECT(rc == 0, "an unapproved plan was not refused (%d): %s", rc, out);
	/* Another binary: the loop fixture does not map the planned file. */
	const char *loop = tu_compile("loop.c", "loop", "-O2");
	pid_t other = loop ? fork() : -1;
	if (other == 0) {
		execl(loop, loop, (char *)NULL);
		_exit(127);
	}
	usleep(100000);
	snprintf(cmd, sizeof(cmd), "%s install '%s' --pid %d --state-dir '%s' --quiet 2>&1", hp(), plan, other, st);
	rc = expect_refused(cmd, 5, "another binary", out, sizeof(out));
	EXPECT(rc == 0, "a plan for another binary was not refused (%d): %s", rc, out);
	kill(other, SIGKILL);
	waitpid(other, NULL, 0);
	/* Code changed since planning: an idle process of the same binary (no
	 * workers run the group) with one byte of pr_check changed. */
	REQUIRE(fx_start(&idle, fixture(), 0) == 0, "the idle fixture did not start");
	uint64_t bias = 0;
	{
		/* The idle process's load bias relative to the planned one. */
		struct hp_open_opts oo = { .quiet = true, .only_function = "pr_root" };
		struct hp_model *m2 = NULL;
		const struct hp_function *r2;
		if (hp_model_open_pid(idle.pid, &oo, &m2, err, sizeof(err)) == 0 &&
		    (r2 = hp_model_find(m2, "pr_root", NULL, NULL)))
			bias = r2->addr - p.members[0].addr;
		hp_model_free(m2);
	}
	snprintf(cmd, sizeof(cmd), "%s install '%s' --pid %d --state-dir '%s' --quiet --json", hp(), plan, idle.pid,
		 st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 0, "installing into another process of the same build failed (%d): %s", rc, out);
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --quiet", hp(), idle.pid, st);
	EXPECT(run(cmd, NULL, 0) == 0, "revert in the idle process failed");
	const struct hp_imember *chk = NULL;
	for (size_t i = 0; i < p.nmembers; i++)
		if (!strcmp(p.members[i].name, "pr_check"))
			chk = &p.members[i];
	if (chk) {
		char mp[64];
		uint8_t b;
		snprintf(mp, sizeof(mp), "/proc/%d/mem", idle.pid);
		int fd = open(mp, O_RDWR);
		off_t at = (off_t)(chk->addr + bias + chk->size - 1);
		if (fd >= 0 && pread(fd, &b, 1, at) == 1) {
			b ^= 0x01;
			EXPECT(pwrite(fd, &b, 1, at) == 1, "could not change pr_check");
		}
		if (fd >= 0)
			close(fd);
		snprintf(cmd, sizeof(cmd), "%s install '%s' --pid %d --state-dir '%s' --quiet 2>&1", hp(), plan,
			 idle.pid, st);
		rc = expect_refused(cmd, 5, "changed since planning", out, sizeof(out));
		EXPECT(rc == 0, "a plan whose code changed was not refused (%d): %s", rc, out);
		EXPECT(heaps_mapped(idle.pid) == 0 && journals(st) == 0, "a refused install left something behind");
	}
	/* Another tracer holds the process. */
	if (ptrace(PTRACE_SEIZE, idle.pid, 0, 0) == 0) {
		snprintf(cmd, sizeof(cmd), "%s install '%s' --pid %d --state-dir '%s' --quiet 2>&1", hp(), plan,
			 idle.pid, st);
		rc = run(cmd, out, sizeof(out));
		EXPECT(rc != 0 && (strstr(out, "already traced") || strstr(out, "changed since planning")),
		       "an install under another tracer was not refused (%d): %s", rc, out);
		ptrace(PTRACE_DETACH, idle.pid, 0, 0);
	}
	fx_stop(&idle);
	/* The tracer case on a process whose code is as planned. */
	if (ptrace(PTRACE_SEIZE, f.pid, 0, 0) == 0) {
		snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet 2>&1", hp(), plan, st);
		rc = expect_refused(cmd, 5, "already traced by process", out, sizeof(out));
		EXPECT(rc == 0, "an install under another tracer was not refused (%d): %s", rc, out);
		ptrace(PTRACE_DETACH, f.pid, 0, 0);
	}
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0 && heaps_mapped(f.pid) == 0,
	       "a refused install changed the process: %s", why);
	/* Yama: only where the kernel has it. */
	if (access("/proc/sys/kernel/yama/ptrace_scope", F_OK) < 0)
		printf("# Yama is not in this kernel (no /proc/sys/kernel/yama): its refusal is not exercised\n");
	/* A full journal disk: a 16 KiB tmpfs holds neither the journal's reserve nor the plan. */
	snprintf(tiny, sizeof(tiny), "%s/tiny", tu_tmpdir());
	mkdir(tiny, 0700);
	if (mount("tmpfs", tiny, "tmpfs", 0, "size=16k") == 0) {
		snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet 2>&1", hp(), plan, tiny);
		rc = run(cmd, out, sizeof(out));
		EXPECT(rc == 1 && strstr(out, "disk is full"), "a full journal disk was not refused (%d): %s", rc, out);
		EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0 && heaps_mapped(f.pid) == 0,
		       "the refused install changed the process");
		umount2(tiny, MNT_DETACH);
	} else {
		printf("# no tmpfs could be mounted here (%s): the full-disk case is not exercised\n", strerror(errno));
	}
	/* A process that exited: the plan names the fixture, which is gone now. */
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	fx_stop(&f);
	snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet 2>&1", hp(), plan, st);
	rc = expect_refused(cmd, 3, "does not exist", out, sizeof(out));
	EXPECT(rc == 0, "a plan for an exited process was not refused (%d): %s", rc, out);
	hp_iplan_free(&p);
}

/* ---- Installed code measured, and planned again ------------------------ */

/* A kernel plan where hotpath.ko is not loaded (HOTPATH_KERNEL_DEVICE names
 * a device that is not there): refused with the module named, nothing
 * journaled; `hotpathd revert kernel` has nothing to do. The kernel plan is
 * a process plan with its target's kind changed: it is refused before its
 * code or module is looked at. */
static void t_kernel_plan_without_module(void)
{
	struct fx f;
	char cmd[4096], out[8192], kplan[400], journals[400];
	const char *st = state_dir("kernel");
	int rc;

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 2) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "kernel");
	size_t len;
	char *raw = plan ? slurp(plan, &len) : NULL;
	/* Room for "pid" -> "kernel" (3 bytes more than slurp's buffer holds). */
	char *text = raw ? realloc(raw, len + 4) : NULL, *kind = text ? strstr(text, "\"kind\":\"pid\"") : NULL;
	fx_stop(&f);
	if (!text)
		free(raw);
	REQUIRE(kind, "no plan with a pid target");
	memmove(kind + 14, kind + 11, strlen(kind + 11) + 1); /* "pid" -> "kernel" */
	memcpy(kind + 8, "kernel", 6);
	snprintf(kplan, sizeof(kplan), "%s/kernel-plan.json", tu_tmpdir());
	FILE *fp = fopen(kplan, "w");
	REQUIRE(fp, "cannot write %s", kplan);
	fputs(text, fp);
	fclose(fp);
	free(text);
	snprintf(cmd, sizeof(cmd), "HOTPATH_KERNEL_DEVICE=%s/no-such-device %s install '%s' --state-dir '%s' 2>&1",
		 tu_tmpdir(), hp(), kplan, st);
	rc = expect_refused(cmd, 5, "load hotpath.ko (agent/kmod)", out, sizeof(out));
	EXPECT(rc == 0, "a kernel plan without hotpath.ko was not refused naming it (%d): %s", rc, out);
	snprintf(journals, sizeof(journals), "ls '%s/replace' 2>/dev/null | grep -c journal", st);
	EXPECT(run(journals, out, sizeof(out)) != 0 && atoi(out) == 0, "a refused kernel install left a journal: %s",
	       out);
	snprintf(cmd, sizeof(cmd), "%s revert kernel --state-dir '%s' 2>&1", hp(), st);
	rc = expect_refused(cmd, 4, "nothing is installed in the kernel", out, sizeof(out));
	EXPECT(rc == 0, "revert kernel with nothing installed: %d: %s", rc, out);
}

static void t_measure_and_second_pass(void)
{
	struct fx f;
	struct hp_iplan p;
	char cmd[8192], out[8192], err[512], why[256] = "", copy[400], plan2[400];
	const char *st = state_dir("second");

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 3) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "second");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan: %s", err);
	}
	snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet --json", hp(), plan, st);
	REQUIRE(run(cmd, out, sizeof(out)) == 0, "install failed: %s", out);
	json_t *j = json_loads(out, 0, NULL);
	uint64_t heap = strtoull(json_string_value(json_object_get(j, "heap")) ?: "0", NULL, 0);
	json_decref(j);
	/*
	 * The root measured: its probes are in the copy, counts on its rows. How many calls a window sees
	 * depends on how much CPU the fixture's threads get (every block traps into a uprobe, ~2.3 us a hit,
	 * ~30 hits a call): unloaded, 1 s gives thousands; with the machine's cores taken by other work it
	 * gave 98 once. So the window doubles (1, 2, 4, 8 s) until the root has more than 100 calls, the
	 * least the second pass's profile needs; a copy whose probes do not count stays at 0 however long.
	 */
	snprintf(copy, sizeof(copy), "%s/copy-counts.json", tu_tmpdir());
	size_t in_copy = 0, counted = 0;
	uint64_t root_calls = 0;
	for (int seconds = 1; seconds <= 8 && root_calls <= 100; seconds *= 2) {
		snprintf(cmd, sizeof(cmd),
			 "%s measure pid %d pr_root pr_op pr_hash pr_mix pr_fib pr_even pr_odd pr_search pr_check "
			 "--blocks --seconds %d --json --state-dir '%s' > '%s' 2>/dev/null",
			 hp(), f.pid, seconds, st, copy);
		EXPECT(system(cmd) == 0, "measuring the installed process failed");
		size_t len;
		char *copy_text = slurp(copy, &len);
		j = copy_text ? json_loads(copy_text, 0, NULL) : NULL;
		free(copy_text);
		in_copy = counted = 0;
		root_calls = 0;
		json_t *row;
		size_t k;
		json_array_foreach(json_object_get(j, "resources"), k, row)
		{
			uint64_t c =
				(uint64_t)json_integer_value(json_object_get(json_object_get(row, "metrics"), "count"));
			uint64_t at = (uint64_t)json_integer_value(json_object_get(row, "installed_copy"));
			if (at) {
				in_copy++;
				EXPECT(at >= heap && at < heap + 65536,
				       "a row is probed at 0x%" PRIx64 ", outside the heap", at);
				counted += c > 0;
			}
			if (!json_object_get(row, "block") &&
			    !strcmp(json_string_value(json_object_get(row, "function")) ?: "", "pr_root"))
				root_calls = c;
		}
		json_decref(j);
	}
	EXPECT(in_copy > 20 && counted > 10, "the copy's blocks were not measured (%zu rows in the copy, %zu counted)",
	       in_copy, counted);
	EXPECT(root_calls > 100, "pr_root's calls were not counted in its copy (%" PRIu64 ")", root_calls);
	/* The second pass: planned from the copy's counts, installed over the first. */
	snprintf(plan2, sizeof(plan2), "%s/second.plan.json", tu_tmpdir());
	struct hp_installed *ins = NULL;
	size_t n = 0;
	hp_installed_list(st, &ins, &n, err, sizeof(err));
	REQUIRE(n == 1, "installed lists %zu installs", n);
	snprintf(cmd, sizeof(cmd),
		 "%s plan pid %d pr_root --second-pass '%s' --profile '%s' --installed-base 0x%" PRIx64
		 " --state-dir '%s' --json > '%s'",
		 hp(), f.pid, ins[0].plan_path, copy, heap, st, plan2);
	free(ins);
	EXPECT(system(cmd) == 0, "the second pass did not plan: %s", cmd);
	size_t len;
	char *text = slurp(plan2, &len);
	EXPECT(text && strstr(text, "calls under pr_root"), "the second plan's profile is not scoped to the root");
	free(text);
	snprintf(cmd, sizeof(cmd), "%s install '%s' --replace --state-dir '%s' --quiet --json", hp(), plan2, st);
	EXPECT(run(cmd, out, sizeof(out)) == 0 && strstr(out, "\"installed\""), "the second pass did not install: %s",
	       out);
	EXPECT(journals(st) == 1 && heaps_mapped(f.pid) == 1, "after the second pass: %zu journals, %d heaps",
	       journals(st), heaps_mapped(f.pid));
	usleep(200000);
	EXPECT(fx_ok(&f), "the process went wrong with the second pass: %s", f.errbuf);
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --quiet", hp(), f.pid, st);
	EXPECT(run(cmd, NULL, 0) == 0, "revert failed");
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0 && heaps_mapped(f.pid) == 0, "not clean: %s", why);
	unsigned long v = fx_stop(&f);
	printf("# measured in the copy: %zu rows, pr_root called %" PRIu64
	       " times; second pass installed over the "
	       "first; %lu results verified\n",
	       in_copy, root_calls, v);
	hp_iplan_free(&p);
}

/* ---- The root measured the same way before and after the install ------ */

/* Where the fixture's own count of pr_root calls (threads.c's `verified`:
 * one per call returned and checked) is in the process: pr_root's address
 * there plus the two symbols' distance in the file; 0 if not found. */
static uint64_t verified_addr(const char *file, uint64_t root_addr)
{
	char cmd[600], line[256];
	uint64_t root = 0, ver = 0;
	snprintf(cmd, sizeof(cmd), "nm '%s'", file);
	FILE *nm = popen(cmd, "r");
	while (nm && fgets(line, sizeof(line), nm)) {
		unsigned long long a;
		char kind, name[200];
		if (sscanf(line, "%llx %c %199s", &a, &kind, name) != 3)
			continue;
		if (!strcmp(name, "pr_root"))
			root = a;
		else if (!strcmp(name, "verified"))
			ver = a;
	}
	if (nm)
		pclose(nm);
	return root && ver ? root_addr - root + ver : 0;
}

/* The fixture's count, read from the process's memory at addr. */
static bool verified_of(pid_t pid, uint64_t addr, uint64_t *v)
{
	char mp[64];
	snprintf(mp, sizeof(mp), "/proc/%d/mem", (int)pid);
	int fd = addr ? open(mp, O_RDONLY) : -1;
	bool ok = fd >= 0 && pread(fd, v, sizeof(*v), (off_t)addr) == (ssize_t)sizeof(*v);
	if (fd >= 0)
		close(fd);
	return ok;
}

/* Every thread of pid stopped (after a SIGSTOP): none can enter or leave the
 * root until SIGCONT. */
static bool all_stopped(pid_t pid)
{
	for (int tries = 0; tries < 30000; tries++) {
		char path[64], buf[512];
		snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
		DIR *d = opendir(path);
		if (!d)
			return false;
		bool all = true;
		struct dirent *e;
		while (all && (e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char sp[320];
			snprintf(sp, sizeof(sp), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
			FILE *fp = fopen(sp, "r");
			size_t n = fp ? fread(buf, 1, sizeof(buf) - 1, fp) : 0;
			if (fp)
				fclose(fp);
			buf[n] = 0;
			char *p = strrchr(buf, ')');
			all = p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
		}
		closedir(d);
		if (all)
			return true;
		usleep(1000);
	}
	return false;
}

struct root_window {
	uint64_t count, timed, unmatched, returned;
	double vtime_per_call, wall_per_timed;
};

/* One `hotpathd measure` window of pr_root (count, wall, vtime) while the
 * fixture's threads call it without pause, bracketed by the fixture's own
 * count of calls: the process is stopped (every thread) while the window is
 * armed and its count read, runs for a second, is stopped again and its count
 * read, and only then is the window ended (SIGINT ends it early). So the
 * calls the window saw are the calls the fixture made in that second, but
 * for those a thread was inside of at either stop: the same figure whatever
 * the machine's load. */
static bool root_window(struct fx *f, uint64_t verified_at, const char *st, struct root_window *w)
{
	char path[400], pidarg[16], line[1024] = "";
	pid_t pid = f->pid;
	snprintf(path, sizeof(path), "%s/root-window.json", tu_tmpdir());
	snprintf(pidarg, sizeof(pidarg), "%d", (int)pid);
	kill(pid, SIGSTOP);
	if (!all_stopped(pid)) {
		kill(pid, SIGCONT);
		printf("# the fixture's threads did not stop\n");
		return false;
	}
	int errp[2];
	if (pipe(errp) < 0) {
		kill(pid, SIGCONT);
		return false;
	}
	pid_t child = fork();
	if (child == 0) {
		int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (out < 0 || dup2(out, 1) < 0 || dup2(errp[1], 2) < 0)
			_exit(127);
		close(errp[0]);
		execl(hp(), hp(), "measure", "pid", pidarg, "pr_root", "--metrics", "count,wall,vtime", "--seconds",
		      "600", "--json", "--state-dir", st, (char *)NULL);
		_exit(127);
	}
	close(errp[1]);
	FILE *err = child > 0 ? fdopen(errp[0], "r") : NULL;
	bool armed = false;
	while (err && fgets(line, sizeof(line), err))
		if (strstr(line, " armed for ")) {
			armed = true;
			break;
		}
	uint64_t v0 = 0, v1 = 0;
	bool counted = armed && verified_of(pid, verified_at, &v0);
	kill(pid, SIGCONT);
	if (counted) {
		struct timespec one = { 1, 0 };
		nanosleep(&one, NULL);
		kill(pid, SIGSTOP);
		counted = all_stopped(pid) && verified_of(pid, verified_at, &v1);
	}
	if (child > 0)
		kill(child, SIGINT);
	while (err && fgets(line + strlen(line) / 2, sizeof(line) / 2, err))
		;
	if (err)
		fclose(err);
	else
		close(errp[0]);
	int status = -1;
	if (child > 0)
		waitpid(child, &status, 0);
	kill(pid, SIGCONT);
	if (!armed || !counted || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		printf("# hotpathd measure pid %d pr_root: armed %d, fixture's count read %d, exit status %d (%s)\n",
		       (int)pid, armed, counted, status, line);
		return false;
	}
	size_t len;
	char *text = slurp(path, &len);
	json_t *j = text ? json_loads(text, 0, NULL) : NULL;
	free(text);
	json_t *row = json_array_get(json_object_get(j, "resources"), 0), *m = json_object_get(row, "metrics");
	*w = (struct root_window){
		.count = (uint64_t)json_integer_value(json_object_get(m, "count")),
		.timed = (uint64_t)json_integer_value(json_object_get(row, "completed_calls")),
		.unmatched =
			(uint64_t)json_integer_value(json_object_get(json_object_get(j, "totals"), "exits_unmatched")),
		.returned = v1 - v0,
	};
	double wall = json_number_value(json_object_get(m, "wall_ns")),
	       vt = json_number_value(json_object_get(m, "vtime_ns"));
	json_decref(j);
	if (!w->count) {
		printf("# hotpathd measure pid %d pr_root: no call counted\n", (int)pid);
		return false;
	}
	w->vtime_per_call = vt / (double)w->count;
	w->wall_per_timed = w->timed ? wall / (double)w->timed : 0;
	return true;
}

/* Windows armed while three threads run the root: every call counted is
 * timed (no thread left with a timer whose exit never comes), the copy's
 * calls are counted once each (the window's count is the fixture's own count
 * of its calls, give or take a call per thread at each end), and the probes
 * cost the same per call on both sides. */
static void t_root_measured_alike_before_and_after(void)
{
	enum { THREADS = 3, WINDOWS = 3 };
	struct fx f;
	struct hp_iplan p;
	char cmd[8192], out[8192], err[512], why[256] = "";
	const char *st = state_dir("alike");
	struct root_window w[2][WINDOWS];

	REQUIRE(fixture_timed(), "gcc failed");
	REQUIRE(fx_start(&f, fixture_timed(), THREADS) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "alike");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan: %s", err);
	}
	uint64_t root_addr = 0;
	for (size_t i = 0; i < p.nmembers; i++)
		if (!strcmp(p.members[i].name, "pr_root"))
			root_addr = p.members[i].addr;
	uint64_t verified_at = root_addr ? verified_addr(fixture_timed(), root_addr) : 0;
	bool ok = verified_at != 0;
	EXPECT(ok, "pr_root is not in the plan, or the fixture has no `verified` symbol");
	for (int side = 0; side < 2 && ok; side++) {
		if (side == 1) {
			snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --quiet", hp(), plan, st);
			ok = run(cmd, out, sizeof(out)) == 0;
			EXPECT(ok, "install failed: %s", out);
		}
		for (int i = 0; i < WINDOWS && ok; i++) {
			ok = root_window(&f, verified_at, st, &w[side][i]);
			EXPECT(ok, "window %d %s the install was not measured", i, side ? "after" : "before");
		}
	}
	double vt[2] = { 0, 0 };
	for (int side = 0; side < 2 && ok; side++) {
		for (int i = 0; i < WINDOWS; i++) {
			struct root_window *x = &w[side][i];
			printf("# %s, window %d: %" PRIu64 " calls, %" PRIu64 " timed (%" PRIu64
			       " exits unmatched), %" PRIu64
			       " returned by the fixture's count, vtime %.1f ns per call, "
			       "wall %.1f ns per timed call\n",
			       side ? "after" : "before", i, x->count, x->timed, x->unmatched, x->returned,
			       x->vtime_per_call, x->wall_per_timed);
			/* A call still inside at the end is counted, not yet timed: at most one per thread.
			 * (Calls that entered while only the return probes were armed are neither counted
			 * nor timed: their exits are the unmatched ones.) */
			EXPECT(x->timed <= x->count && x->count - x->timed <= THREADS,
			       "%s, window %d: %" PRIu64 " calls counted, %" PRIu64 " timed", side ? "after" : "before",
			       i, x->count, x->timed);
			/* Each call counted once: a call a thread was inside of when the
			 * process stopped is counted by one side only, at most one per
			 * thread at each end. Counted twice (or by two probe pairs), the
			 * window would say twice the fixture's figure. */
			EXPECT(x->count + THREADS >= x->returned && x->count <= x->returned + THREADS,
			       "%s, window %d: %" PRIu64 " calls counted, the fixture returned from %" PRIu64,
			       side ? "after" : "before", i, x->count, x->returned);
			vt[side] += x->vtime_per_call / WINDOWS;
		}
	}
	if (ok) {
		/* Virtualized time counts only the threads' own time on a CPU, so the
		 * machine's load moves it little (within 5% in runs at load 15);
		 * two probe pairs per call would double it. */
		EXPECT(vt[1] > 0.6 * vt[0] && vt[1] < 1.6 * vt[0], "vtime per call %.1f ns before, %.1f ns after",
		       vt[0], vt[1]);
	}
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --quiet", hp(), f.pid, st);
	if (ok)
		EXPECT(run(cmd, NULL, 0) == 0, "revert failed");
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0 && heaps_mapped(f.pid) == 0, "not clean: %s", why);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	fx_stop(&f);
	hp_iplan_free(&p);
}

/* ---- The interleaved comparison (hotpathd compare) ---------------------- */

/* The arm of window k of the comparison's order: pair k/2 runs original
 * then installed when even, installed then original when odd. */
static const char *arm_of(size_t k)
{
	return ((k / 2) % 2 == 0) == (k % 2 == 1) ? "installed" : "original";
}

/* An installed plan compared in 3 pairs of windows while the fixture's
 * threads check every result: 6 windows in the order O I I O O I, each with
 * samples (unless the machine gave the process no CPU in it), those in the
 * plan's code among them; the plan installed at the
 * end (its entry jumping into the heap the journal names, `installed`
 * listing it), the JSON with the contract's keys. A compare of an id that
 * is not installed, and bad options, are refused. */
static void t_compare(void)
{
	struct fx f;
	struct hp_iplan p;
	char cmd[2048], out[32768], err[512] = "", id[64];
	const char *st = state_dir("compare");

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 3) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "compare");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan: %s", err);
	}
	int rc = install_cli(plan, st, id, sizeof(id), out, sizeof(out));
	if (rc != 0 || !id[0]) {
		fx_stop(&f);
		hp_iplan_free(&p);
		REQUIRE(0, "install failed (%d): %s", rc, out);
	}
	snprintf(cmd, sizeof(cmd), "%s compare --id %s --pairs 3 --window 0.5 --json --state-dir '%s' 2>/dev/null",
		 hp(), id, st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(fx_ok(&f), "the process went wrong during the comparison: %s", f.errbuf);
	json_t *j = json_loads(out, 0, NULL);
	EXPECT(rc == 0 && j, "compare failed (%d): %s", rc, out);
	static const char *const keys[] = { "id",        "pid",     "root",    "members",   "pairs", "window_seconds",
					    "sample_hz", "windows", "summary", "toggle_ms", "state" };
	for (size_t k = 0; j && k < sizeof(keys) / sizeof(keys[0]); k++)
		EXPECT(json_object_get(j, keys[k]), "no %s in %s", keys[k], out);
	EXPECT(j && json_object_size(j) == sizeof(keys) / sizeof(keys[0]), "other keys than the contract's: %s", out);
	EXPECT(!strcmp(json_string_value(json_object_get(j, "id")) ?: "", id) &&
		       json_integer_value(json_object_get(j, "pid")) == f.pid &&
		       !strcmp(json_string_value(json_object_get(j, "root")) ?: "", "pr_root") &&
		       json_integer_value(json_object_get(j, "members")) == (json_int_t)p.nmembers &&
		       json_integer_value(json_object_get(j, "pairs")) == 3,
	       "the comparison names another install: %s", out);
	EXPECT(!strcmp(json_string_value(json_object_get(j, "state")) ?: "", "installed"), "state: %s", out);
	json_t *ws = json_object_get(j, "windows");
	EXPECT(json_array_size(ws) == 6, "%zu windows, not 6", json_array_size(ws));
	int64_t last = 0;
	for (size_t k = 0; k < json_array_size(ws); k++) {
		json_t *w = json_array_get(ws, k);
		json_int_t n = json_integer_value(json_object_get(w, "samples"));
		json_int_t in = json_integer_value(json_object_get(w, "samples_in_plan"));
		int64_t start = (int64_t)json_integer_value(json_object_get(w, "start_unix_ns"));
		EXPECT(json_integer_value(json_object_get(w, "pair")) == (json_int_t)(k / 2) &&
			       !strcmp(json_string_value(json_object_get(w, "arm")) ?: "", arm_of(k)),
		       "window %zu is not pair %zu's %s one", k, k / 2, arm_of(k));
		/* Sampled at 997 Hz of the threads' own CPU time (cpu-clock), a window
		 * in which the process ran gets samples. On a loaded machine the
		 * process may get no CPU in a window at all, which the comparison
		 * handles (its pair is dropped, test_compare.c): a window without
		 * samples is wrong only when the process ran at least 0.1 s (100
		 * samples' worth and 10 clock ticks) between the CPU readings around
		 * it, more than it can run in the few ms outside the sampled span. */
		double cpu = json_real_value(json_object_get(w, "cpu_seconds"));
		EXPECT(in <= n && (n > 0 || cpu < 0.1),
		       "window %zu: %lld samples, %lld in the plan's code, in %.3f s of which the process ran %.3f s: %s",
		       k, (long long)n, (long long)in, json_real_value(json_object_get(w, "seconds")), cpu, out);
		EXPECT(json_real_value(json_object_get(w, "seconds")) > 0 && start > last,
		       "window %zu does not follow the one before", k);
		EXPECT(json_real_value(json_object_get(w, "cpu_seconds")) >= 0, "window %zu: negative CPU time", k);
		last = start;
	}
	json_t *sm = json_object_get(j, "summary");
	const char *verdict = json_string_value(json_object_get(sm, "verdict")) ?: "";
	EXPECT(!strcmp(verdict, "faster") || !strcmp(verdict, "slower") || !strcmp(verdict, "within_noise") ||
		       !strcmp(verdict, "insufficient"),
	       "verdict %s", verdict);
	EXPECT(json_is_null(json_object_get(sm, "change")) == !strcmp(verdict, "insufficient") &&
		       (json_is_null(json_object_get(sm, "interval")) ||
			json_array_size(json_object_get(sm, "interval")) == 2),
	       "summary: %s", out);
	json_decref(j);
	/* Installed as it was: the journal's heap is where the entry jumps. */
	struct hp_installed *ins = NULL;
	size_t n = 0;
	hp_installed_list(st, &ins, &n, err, sizeof(err));
	const struct hp_installed *h = find_installed(ins, n, id);
	EXPECT(h && !strcmp(h->state, "installed") && h->calls > 0, "%s is not installed after the comparison", id);
	EXPECT(h && entry_jumps_into(f.pid, p.members[0].addr, h->heap, h->heap_len),
	       "pr_root's entry does not jump into the copy after the comparison");
	free(ins);
	/* The human form: a line per window and the sentence. */
	snprintf(cmd, sizeof(cmd), "%s compare --id %s --pairs 2 --window 0.2 --state-dir '%s' 2>&1", hp(), id, st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 0 && strstr(out, "pair 2/2: original, ") &&
		       (strstr(out, "of the process's samples") || strstr(out, "insufficient")),
	       "compare (%d): %s", rc, out);
	EXPECT(strstr(out, "the plan is installed"), "compare's text: %s", out);
	/* Refused: an id not installed, bad options. */
	snprintf(cmd, sizeof(cmd), "%s compare --id no-such-plan --state-dir '%s' 2>&1", hp(), st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 4 && strstr(out, "no-such-plan is not installed"), "(%d) %s", rc, out);
	snprintf(cmd, sizeof(cmd), "%s compare --id %s --pairs 1 --state-dir '%s' 2>&1", hp(), id, st);
	EXPECT(run(cmd, out, sizeof(out)) == 2 && strstr(out, "2..50"), "one pair was accepted: %s", out);
	snprintf(cmd, sizeof(cmd), "%s compare --id %s --window 0.1 --state-dir '%s' 2>&1", hp(), id, st);
	EXPECT(run(cmd, out, sizeof(out)) == 2, "a 0.1 s window was accepted: %s", out);
	usleep(100000);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --quiet", hp(), f.pid, st);
	EXPECT(run(cmd, NULL, 0) == 0, "the revert after the comparison failed");
	EXPECT(journals(st) == 0, "a journal is left after the revert");
	unsigned long v = fx_stop(&f);
	EXPECT(v > 1000, "the fixture verified only %lu calls", v);
	printf("# compare: %zu functions, 6 + 4 windows, %lu calls verified\n", p.nmembers, v);
	hp_iplan_free(&p);
}

/* The process killed during a comparison: exit status 3, the windows
 * measured so far in the JSON with state process_gone, and the journals
 * consistent: `hotpathd installed` shows the install as process_gone (or
 * nothing, when it was reverted at the time), `hotpathd revert` clears it. */
static void t_compare_process_gone(void)
{
	struct fx f;
	char cmd[2048], out[32768], id[64];
	const char *st = state_dir("compare-gone");

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 2) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "compare-gone");
	int rc = plan ? install_cli(plan, st, id, sizeof(id), out, sizeof(out)) : -1;
	if (rc != 0 || !id[0]) {
		fx_stop(&f);
		REQUIRE(0, "no install (%d): %s", rc, out);
	}
	pid_t pid = f.pid;
	snprintf(cmd, sizeof(cmd), "%s compare --id %s --pairs 10 --window 0.4 --json --state-dir '%s' 2>/dev/null",
		 hp(), id, st);
	FILE *fp = popen(cmd, "r");
	REQUIRE(fp, "popen failed");
	usleep(1500000);
	/* Reaped only after the comparison: a zombie is a process gone too. */
	kill(pid, SIGKILL);
	size_t len = fread(out, 1, sizeof(out) - 1, fp);
	out[len] = 0;
	int status = pclose(fp);
	rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	waitpid(pid, NULL, 0);
	f.pid = 0;
	fx_stop(&f);
	json_t *j = json_loads(out, 0, NULL);
	EXPECT(rc == 3 && j, "compare did not say the process is gone (%d): %s", rc, out);
	EXPECT(!strcmp(json_string_value(json_object_get(j, "state")) ?: "", "process_gone"), "state: %s", out);
	EXPECT(json_array_size(json_object_get(j, "windows")) < 20, "every window was measured: %s", out);
	json_decref(j);
	struct hp_installed *ins = NULL;
	size_t n = 0;
	char err[256];
	EXPECT(hp_installed_list(st, &ins, &n, err, sizeof(err)) == 0, "installed: %s", err);
	for (size_t i = 0; i < n; i++)
		EXPECT(!strcmp(ins[i].state, "process_gone"), "install %s is %s after its process died", ins[i].id,
		       ins[i].state);
	free(ins);
	snprintf(cmd, sizeof(cmd), "%s installed --state-dir '%s'", hp(), st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 0 && (n ? strstr(out, "process_gone") != NULL : strstr(out, "nothing installed") != NULL),
	       "installed (%d): %s", rc, out);
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --quiet 2>&1", hp(), pid, st);
	run(cmd, NULL, 0);
	EXPECT(journals(st) == 0, "a journal of the exited process is left after a revert");
}

/* ---- Indirect-call promotion ---------------------------------------------- */

/* stdout of cmd parsed as JSON (NULL when it fails or is no JSON). */
static json_t *run_json(const char *cmd)
{
	static char out[1 << 20];
	json_error_t je;

	if (run(cmd, out, sizeof(out)) != 0)
		return NULL;
	return json_loads(out, 0, &je);
}

/* The calls of site (an "icalls --json" site) to fn: through the pointer and directly. */
static void site_target(const json_t *site, const char *fn, uint64_t *indirect, uint64_t *direct)
{
	size_t i;
	const json_t *t;

	*indirect = *direct = 0;
	json_array_foreach(json_object_get(site, "targets"), i,
			   t) if (!strcmp(json_string_value(json_object_get(t, "function")) ?: "", fn))
	{
		*indirect = (uint64_t)json_integer_value(json_object_get(t, "indirect"));
		*direct = (uint64_t)json_integer_value(json_object_get(t, "direct"));
	}
}

/* The fixture's sites (icall.c): one named by function and offset in report rep. */
static const json_t *site_of(const json_t *rep, const char *fn, const char *off)
{
	size_t i;
	const json_t *s;

	json_array_foreach(json_object_get(rep, "sites"), i,
			   s) if (!strcmp(json_string_value(json_object_get(s, "function")) ?: "", fn) &&
				  !strcmp(json_string_value(json_object_get(s, "site")) ?: "", off)) return s;
	return NULL;
}

/* The plan's indirect_calls entry for "fn+off", or NULL. */
static const json_t *plan_icall(const json_t *plan, const char *fn, const char *off)
{
	char want[160];
	size_t i;
	const json_t *c;

	snprintf(want, sizeof(want), "%s+%s", fn, off);
	json_array_foreach(json_object_get(plan, "indirect_calls"), i,
			   c) if (!strcmp(json_string_value(json_object_get(c, "site")) ?: "", want)) return c;
	return NULL;
}

/* Install plan (a file) into f with state st: 0, or -1 with why. */
static int install_plan_cli(struct fx *f, const char *plan, const char *st, char *why, size_t wl)
{
	char cmd[2048], out[16384];
	snprintf(cmd, sizeof(cmd), "%s install '%s' --state-dir '%s' --json --quiet", hp(), plan, st);
	int rc = run(cmd, out, sizeof(out));
	if (rc != 0 || !strstr(out, "\"installed\"")) {
		snprintf(why, wl, "install of %s failed (%d): %.400s", plan, rc, out);
		return -1;
	}
	(void)f;
	return 0;
}

static int revert_cli(struct fx *f, const char *st)
{
	char cmd[1024], out[4096];
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --json --quiet", hp(), f->pid, st);
	return run(cmd, out, sizeof(out)) == 0 && strstr(out, "\"reverted\"") ? 0 : -1;
}

/*
 * Indirect-call promotion in a real process (fixtures/icall.c, -O2 -fPIE).
 * Its hot set installed, `hotpathd icalls` measures every indirect call
 * site of the copy: ic_one's field and ic_via's register reach only ic_add
 * (every call through the pointer: the original entry, then its jump),
 * the table's two pointers ic_add and ic_mul half and half. Planned again
 * with those targets, the two one-target sites are promoted and the 50/50
 * one is not; installed, the same measurement shows the promoted sites
 * calling ic_add's copy directly and none of their calls going through
 * the pointer any more (measured: 0, not assumed), the 50/50 site as
 * before. With a promotion share below one half the 50/50 site is promoted
 * to its commoner target too, and its other target runs by the fallback.
 * Results are checked by the fixture throughout, pointers compare as
 * before (a result), and every byte is as before after each revert.
 */
static void t_icall_promotion(void)
{
	struct fx f;
	struct hp_iplan p1 = { 0 }, p2 = { 0 };
	char cmd[4096], err[512] = "", why[512] = "", prof[400], plan1[400], plan2[400], plan3[400], v1[400], v2[400],
			v3[400];
	const char *st = state_dir("icall");
	const char *bin = tu_compile("icall.c", "icall", "-O2 -fPIE -pie");
	json_t *r1 = NULL, *r2 = NULL, *r3 = NULL, *j2 = NULL, *j3 = NULL;
	char one[24] = "", via[24] = "", two[24] = "";

	REQUIRE(bin, "gcc failed");
	REQUIRE(fx_start(&f, bin, 0) == 0, "the fixture did not start");
	snprintf(prof, sizeof(prof), "%s/icall.profile.json", tu_tmpdir());
	snprintf(plan1, sizeof(plan1), "%s/icall.plan1.json", tu_tmpdir());
	snprintf(plan2, sizeof(plan2), "%s/icall.plan2.json", tu_tmpdir());
	snprintf(plan3, sizeof(plan3), "%s/icall.plan3.json", tu_tmpdir());
	snprintf(v1, sizeof(v1), "%s/icall.targets1.json", tu_tmpdir());
	snprintf(v2, sizeof(v2), "%s/icall.targets2.json", tu_tmpdir());
	snprintf(v3, sizeof(v3), "%s/icall.targets3.json", tu_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "%s measure pid %d ic_run ic_via ic_add ic_mul --blocks --seconds 1 --json > '%s' 2>/dev/null && "
		 "%s plan pid %d --hot-set --profile '%s' --json > '%s'",
		 hp(), f.pid, prof, hp(), f.pid, prof, plan1);
	if (system(cmd) != 0 || load_plan(plan1, &p1, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no hot-set plan: %s", err);
	}
	EXPECT(p1.nmembers == 4, "a hot set of %zu members, not ic_run, ic_via, ic_add and ic_mul", p1.nmembers);
	/* 1. The first install's value profile. */
	if (install_plan_cli(&f, plan1, st, why, sizeof(why)) < 0)
		goto out;
	snprintf(cmd, sizeof(cmd), "%s icalls pid %d --seconds 1 --state-dir '%s' --json > '%s' && cat '%s'", hp(),
		 f.pid, st, v1, v1);
	r1 = run_json(cmd);
	EXPECT(r1 && json_array_size(json_object_get(r1, "sites")) == 3, "icalls did not report 3 sites: %s", v1);
	size_t i;
	const json_t *s;
	json_array_foreach(json_object_get(r1, "sites"), i, s)
	{
		const char *fn = json_string_value(json_object_get(s, "function")) ?: "";
		const char *off = json_string_value(json_object_get(s, "site")) ?: "";
		uint64_t calls = (uint64_t)json_integer_value(json_object_get(s, "calls")), ai, ad, mi, md;
		site_target(s, "ic_add", &ai, &ad);
		site_target(s, "ic_mul", &mi, &md);
		EXPECT(!json_is_true(json_object_get(s, "promoted")) && ad == 0 && md == 0,
		       "%s+%s is promoted before any plan promoted it", fn, off);
		/* Every call of a site reaches a member here: its targets' calls are its executions. */
		EXPECT(calls > 100 && ai + mi + calls / 100 + 16 >= calls && ai + mi <= calls + calls / 100 + 16,
		       "%s+%s ran %" PRIu64 " times, its targets %" PRIu64, fn, off, calls, ai + mi);
		if (!strcmp(fn, "ic_via"))
			snprintf(via, sizeof(via), "%s", off);
		else if (mi == 0)
			snprintf(one, sizeof(one), "%s", off);
		else
			snprintf(two, sizeof(two), "%s", off);
		if (mi) /* the table alternates; the odd lengths add one call of ic_add per run */
			EXPECT((ai > mi ? ai - mi : mi - ai) <= calls / 100 + 16,
			       "the 50/50 site: ic_add %" PRIu64 ", ic_mul %" PRIu64, ai, mi);
	}
	EXPECT(one[0] && via[0] && two[0], "the fixture's three sites were not told apart (%s, %s, %s)", one, via, two);
	EXPECT(revert_cli(&f, st) == 0, "the revert of the first install failed");
	EXPECT(members_original(f.pid, &p1, why, sizeof(why)) == 0, "%s", why);
	/* 2. Planned again with the targets: the one-target sites promoted, the 50/50 one not. */
	snprintf(cmd, sizeof(cmd),
		 "%s plan pid %d --hot-set --profile '%s' --icall-targets '%s' --json > '%s' && cat '%s'", hp(), f.pid,
		 prof, v1, plan2, plan2);
	j2 = run_json(cmd);
	if (!j2 || load_plan(plan2, &p2, err, sizeof(err)) < 0) {
		snprintf(why, sizeof(why), "no plan with the targets: %s", err);
		goto out;
	}
	const json_t *c1 = plan_icall(j2, "ic_run", one), *cv = plan_icall(j2, "ic_via", via),
		     *c2 = plan_icall(j2, "ic_run", two);
	EXPECT(c1 && !strcmp(json_string_value(json_object_get(json_object_get(c1, "promoted"), "target")) ?: "",
			     "ic_add"),
	       "ic_run+%s (one target) is not promoted to ic_add", one);
	EXPECT(cv && json_object_get(cv, "promoted"), "ic_via+%s (one target, a register) is not promoted", via);
	EXPECT(c2 && !json_object_get(c2, "promoted") && json_is_string(json_object_get(c2, "not_promoted")),
	       "ic_run+%s (two targets, 50/50) is promoted", two);
	EXPECT(json_integer_value(json_object_get(json_object_get(j2, "totals"), "promoted_calls")) == 2,
	       "the plan does not count 2 promoted calls");
	EXPECT(json_is_true(json_object_get(json_object_get(j2, "code"), "verified")),
	       "the promoted plan is not verified");
	if (install_plan_cli(&f, plan2, st, why, sizeof(why)) < 0)
		goto out;
	usleep(200000);
	EXPECT(fx_ok(&f), "the process went wrong with the promoted copy: %s", f.errbuf);
	snprintf(cmd, sizeof(cmd), "%s icalls pid %d --seconds 1 --state-dir '%s' --json > '%s' && cat '%s'", hp(),
		 f.pid, st, v2, v2);
	r2 = run_json(cmd);
	const json_t *s1 = site_of(r2, "ic_run", one), *sv = site_of(r2, "ic_via", via),
		     *s2 = site_of(r2, "ic_run", two);
	uint64_t ai, ad, mi, md;
	site_target(s1, "ic_add", &ai, &ad);
	EXPECT(s1 && json_is_true(json_object_get(s1, "promoted")) && ai == 0 && ad > 100,
	       "ic_run+%s: %" PRIu64 " calls still through the pointer, %" PRIu64 " direct", one, ai, ad);
	site_target(sv, "ic_add", &ai, &ad);
	EXPECT(sv && json_is_true(json_object_get(sv, "promoted")) && ai == 0 && ad > 100,
	       "ic_via+%s: %" PRIu64 " calls still through the pointer, %" PRIu64 " direct", via, ai, ad);
	site_target(s2, "ic_add", &ai, &ad);
	site_target(s2, "ic_mul", &mi, &md);
	EXPECT(s2 && !json_is_true(json_object_get(s2, "promoted")) && ai > 100 && mi > 100 && ad == 0 && md == 0,
	       "ic_run+%s (not promoted): ic_add %" PRIu64 "/%" PRIu64 ", ic_mul %" PRIu64 "/%" PRIu64, two, ai, ad, mi,
	       md);
	EXPECT(revert_cli(&f, st) == 0, "the revert of the promoted install failed");
	EXPECT(members_original(f.pid, &p2, why, sizeof(why)) == 0, "%s", why);
	EXPECT(heaps_mapped(f.pid) == 0, "the code heap is still mapped after the revert");
	/* 3. Promoted below one half: the 50/50 site calls ic_add's copy directly, ic_mul by the fallback. */
	snprintf(cmd, sizeof(cmd),
		 "%s plan pid %d --hot-set --profile '%s' --icall-targets '%s' --promote-share 0.4 --json > '%s' && "
		 "cat '%s'",
		 hp(), f.pid, prof, v1, plan3, plan3);
	j3 = run_json(cmd);
	c2 = plan_icall(j3, "ic_run", two);
	EXPECT(c2 && json_object_get(c2, "promoted"), "ic_run+%s is not promoted at a share of 0.4", two);
	/* Its commoner target in the first measurement; the other one runs by the fallback. */
	const char *to = json_string_value(json_object_get(json_object_get(c2, "promoted"), "target")) ?: "";
	const char *other = !strcmp(to, "ic_add") ? "ic_mul" : "ic_add";
	if (install_plan_cli(&f, plan3, st, why, sizeof(why)) < 0)
		goto out;
	snprintf(cmd, sizeof(cmd), "%s icalls pid %d --seconds 1 --state-dir '%s' --json > '%s' 2>'%s.err' && cat '%s'",
		 hp(), f.pid, st, v3, v3, v3);
	r3 = run_json(cmd);
	if (!r3) {
		size_t elen;
		char ep[420];
		snprintf(ep, sizeof(ep), "%s.err", v3);
		char *e = slurp(ep, &elen);
		EXPECT(0, "icalls of the third install failed: %s", e ? e : "");
		free(e);
	}
	s2 = site_of(r3, "ic_run", two);
	site_target(s2, to, &ai, &ad);
	site_target(s2, other, &mi, &md);
	EXPECT(s2 && ai == 0 && ad > 100 && mi > 100 && md == 0,
	       "ic_run+%s promoted to %s: %" PRIu64 " through the pointer, %" PRIu64 " direct; %s %" PRIu64
	       " by the fallback, %" PRIu64 " direct",
	       two, to, ai, ad, other, mi, md);
	usleep(200000);
	EXPECT(fx_ok(&f), "the process went wrong with the fallback taken: %s", f.errbuf);
	EXPECT(revert_cli(&f, st) == 0, "the revert of the third install failed");
	EXPECT(members_original(f.pid, &p2, why, sizeof(why)) == 0, "%s", why);
	why[0] = 0;
out:
	EXPECT(!why[0], "%s", why);
	if (journals(st))
		revert_cli(&f, st);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);
	unsigned long v = fx_stop(&f);
	EXPECT(v > 100, "the fixture verified only %lu runs", v);
	printf("# icall promotion: sites %s (ic_run), %s (ic_via) promoted, %s (50/50) not; %lu runs verified\n", one,
	       via, two, v);
	json_decref(r1);
	json_decref(r2);
	json_decref(r3);
	json_decref(j2);
	json_decref(j3);
	hp_iplan_free(&p1);
	hp_iplan_free(&p2);
}

/* Lines of file that contain want. */
static int lines_with(const char *file, const char *want)
{
	char line[8192];
	int n = 0;
	FILE *fp = fopen(file, "r");
	if (!fp)
		return 0;
	while (fgets(line, sizeof(line), fp))
		n += strstr(line, want) != NULL;
	fclose(fp);
	return n;
}

/* The last line of file holding want, parsed as JSON (NULL: none). */
static json_t *last_json_with(const char *file, const char *want)
{
	char line[8192], keep[8192] = "";
	FILE *fp = fopen(file, "r");
	if (!fp)
		return NULL;
	while (fgets(line, sizeof(line), fp))
		if (strstr(line, want))
			snprintf(keep, sizeof(keep), "%s", line);
	fclose(fp);
	json_error_t je;
	return keep[0] ? json_loads(keep, 0, &je) : NULL;
}

/* `hotpathd install PLAN --cycles N --check CMD` on the process target: N whole installs and reverts in
 * one process, each line's figures and checks, the check command run while installed (the heap it is
 * told of mapped in the process) and once reverted, nothing left after; a check that fails makes the
 * cycles wrong (exit 1); SIGTERM ends the loop after the cycle in progress with nothing installed;
 * SIGKILL inside an install leaves a journal `hotpathd revert` finishes; bad arguments are refused. */
static void t_cycles_cli(void)
{
	struct fx f;
	struct hp_iplan p;
	char cmd[4096], out[16384], err[512] = "", why[256] = "", script[400], log[400], res[400];
	const char *st = state_dir("cyclescli");
	const int n = 20;

	REQUIRE(fixture(), "gcc failed");
	REQUIRE(fx_start(&f, fixture(), 3) == 0, "the fixture did not start");
	const char *plan = make_plan(f.pid, "cyclescli");
	if (!plan || load_plan(plan, &p, err, sizeof(err)) < 0) {
		fx_stop(&f);
		REQUIRE(0, "no plan: %s", err);
	}
	snprintf(script, sizeof(script), "%s/cycles-check.sh", tu_tmpdir());
	snprintf(log, sizeof(log), "%s/cycles-check.log", tu_tmpdir());
	snprintf(res, sizeof(res), "%s/cycles.out", tu_tmpdir());
	FILE *sf = fopen(script, "w");
	REQUIRE(sf, "cannot write %s", script);
	/* While installed the heap it is told of is mapped in the fixture (its memfd heap starts there). */
	fprintf(sf,
		"echo \"$HOTPATH_CYCLE $HOTPATH_INSTALLED $HOTPATH_HEAP $HOTPATH_HEAP_BYTES $HOTPATH_CALL_SITES\" >> '%s'\n"
		"[ \"$HOTPATH_INSTALLED\" = 0 ] && exit 0\n"
		"grep -q \"^${HOTPATH_HEAP#0x}-.*memfd:hotpath-\" /proc/%d/maps\n",
		log, (int)f.pid);
	fclose(sf);
	unlink(log);

	snprintf(cmd, sizeof(cmd), "%s install '%s' --cycles %d --check 'sh %s' --state-dir '%s' --json --quiet > '%s'",
		 hp(), plan, n, script, st, res);
	int rc = system(cmd);
	rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
	json_t *sum = last_json_with(res, "\"status\"");
	EXPECT(rc == 0 && sum && !strcmp(json_string_value(json_object_get(sum, "status")) ?: "", "cycled") &&
		       json_integer_value(json_object_get(sum, "done")) == n &&
		       json_integer_value(json_object_get(sum, "wrong")) == 0,
	       "the cycles did not all pass (status %d)", rc);
	EXPECT(json_real_value(json_object_get(sum, "call_sites")) >= 1, "no call site was patched per install");
	EXPECT(json_real_value(json_object_get(sum, "install_us_per_entry")) > 0 &&
		       json_real_value(json_object_get(sum, "revert_ms")) > 0,
	       "the summary has no install or revert time");
	json_decref(sum);
	EXPECT(lines_with(res, "\"cycle\"") == n, "%d cycle lines, want %d", lines_with(res, "\"cycle\""), n);
	EXPECT(lines_with(res, "\"bytes_wrong\":0,") == n && lines_with(res, "\"members_original\":true") == n &&
		       lines_with(res, "\"check_installed\":\"ok\"") == n &&
		       lines_with(res, "\"check_reverted\":\"ok\"") == n,
	       "not every cycle restored its bytes and passed its checks");
	EXPECT(lines_with(log, " 1 0x") == n && lines_with(log, " 0 0x") == n,
	       "the check ran %d times installed and %d reverted, want %d each", lines_with(log, " 1 0x"),
	       lines_with(log, " 0 0x"), n);
	EXPECT(fx_ok(&f), "the process went wrong during the cycles: %s", f.errbuf);
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "after the cycles: %s", why);
	hp_release_kept(st, f.pid, NULL, &(size_t){ 0 }, &(size_t){ 0 });
	EXPECT(heaps_mapped(f.pid) == (int)journals(st), "%d heaps mapped, %zu journals left", heaps_mapped(f.pid),
	       journals(st));

	/* A check that fails: every cycle is wrong, exit 1, and still nothing left installed. */
	snprintf(
		cmd, sizeof(cmd),
		"%s install '%s' --cycles 2 --check 'test $HOTPATH_INSTALLED = 0' --state-dir '%s' --json --quiet > '%s'",
		hp(), plan, st, res);
	rc = system(cmd);
	rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
	sum = last_json_with(res, "\"status\"");
	EXPECT(rc == 1 && sum && !strcmp(json_string_value(json_object_get(sum, "status")) ?: "", "wrong") &&
		       json_integer_value(json_object_get(sum, "wrong")) == 2,
	       "a failing check did not make the cycles wrong (status %d)", rc);
	json_decref(sum);
	EXPECT(lines_with(res, "\"check_installed\":\"failed\"") == 2, "the failed checks are not in the cycle lines");
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "after the failed checks: %s", why);

	/* SIGTERM mid-loop: the cycle in progress ends reverted, then the loop stops. */
	pid_t k = fork();
	if (k == 0) {
		int fd = open(res, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		execl(hp(), hp(), "install", plan, "--cycles", "1000000", "--state-dir", st, "--json", "--quiet",
		      (char *)NULL);
		_exit(127);
	}
	/* A hang bound, not a timing: the lines arrive as fast as the cycles run. */
	for (int i = 0; i < 6000 && lines_with(res, "\"cycle\"") < 3; i++)
		usleep(10000);
	kill(k, SIGTERM);
	int ws;
	waitpid(k, &ws, 0);
	sum = last_json_with(res, "\"status\"");
	int done = (int)json_integer_value(json_object_get(sum, "done"));
	EXPECT(WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && sum && json_is_true(json_object_get(sum, "stopped")) &&
		       done >= 3 && done < 1000000 && json_integer_value(json_object_get(sum, "wrong")) == 0,
	       "SIGTERM did not end the loop cleanly (exit %d, %d cycles)", WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, done);
	json_decref(sum);
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "after SIGTERM: %s", why);
	hp_release_kept(st, f.pid, NULL, &(size_t){ 0 }, &(size_t){ 0 });
	EXPECT(journals(st) == (size_t)heaps_mapped(f.pid), "after SIGTERM: %zu journals for %d heaps mapped",
	       journals(st), heaps_mapped(f.pid));

	/* SIGKILL inside the first install (its call sites written, not yet done): the journal says so, and a
	 * revert finishes it. */
	snprintf(cmd, sizeof(cmd),
		 "HOTPATH_TEST_KILL_AT=calls %s install '%s' --cycles 5 --state-dir '%s' --quiet 2>&1", hp(), plan, st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc != 0, "the agent was not killed in its install");
	snprintf(cmd, sizeof(cmd), "%s installed --state-dir '%s'", hp(), st);
	run(cmd, out, sizeof(out));
	EXPECT(strstr(out, "installing"), "the killed cycle's install is not listed as installing: %s", out);
	snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' --quiet", hp(), f.pid, st);
	rc = run(cmd, out, sizeof(out));
	EXPECT(rc == 0, "the revert of the killed cycle failed (%d): %s", rc, out);
	EXPECT(members_original(f.pid, &p, why, sizeof(why)) == 0, "after the killed cycle's revert: %s", why);
	EXPECT(fx_ok(&f), "the process went wrong: %s", f.errbuf);

	/* Refused arguments: nothing runs. */
	static const char *const bad[] = { "--cycles 0",           "--cycles x",       "--check true",
					   "--cycles 2 --replace", "--cycles 2000000", NULL };
	for (int i = 0; bad[i]; i++) {
		snprintf(cmd, sizeof(cmd), "%s install '%s' %s --state-dir '%s' --quiet 2>&1", hp(), plan, bad[i], st);
		rc = run(cmd, out, sizeof(out));
		EXPECT(rc == 2, "'%s' was not refused as usage (%d): %s", bad[i], rc, out);
	}
	unsigned long v = fx_stop(&f);
	EXPECT(v > 1000, "the fixture verified only %lu calls", v);
	printf("# --cycles: %d cycles of %zu functions in one process, %lu calls verified\n", n, p.nmembers, v);
	hp_iplan_free(&p);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("ok - replace # SKIP needs root (ptrace of other processes, tmpfs)\n");
		return 0;
	}
	/* bench/replace_cycles runs the cycles alone, 1,000 of them. */
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "cycles")) {
		RUN(t_cycles);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "cyclescli")) {
		RUN(t_cycles_cli);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "kept")) {
		RUN(t_install_after_a_kept_heap);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "compose")) {
		RUN(t_installs_compose);
		RUN(t_kept_heap_retried);
		RUN(t_revert_all_with_a_heap_kept);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "kill")) {
		RUN(t_kill_agent);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "int3")) {
		RUN(t_own_bytes_holding_int3_values);
		RUN(t_revert_keeps_the_heap_when_bytes_were_changed);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "hotset")) {
		RUN(t_hot_set_install_revert);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "icall")) {
		RUN(t_icall_promotion);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "switch")) {
		RUN(t_switch_table_install_revert);
		RUN(t_hoisted_table_install_revert);
		RUN(t_label_table_install_revert);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "compare")) {
		RUN(t_compare);
		RUN(t_compare_process_gone);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "kernel")) {
		RUN(t_kernel_plan_without_module);
		tu_cleanup();
		TEST_EXIT();
	}
	if (getenv("HOTPATH_REPLACE_ONLY") && !strcmp(getenv("HOTPATH_REPLACE_ONLY"), "measured")) {
		RUN(t_root_measured_alike_before_and_after);
		tu_cleanup();
		TEST_EXIT();
	}
	RUN(t_install_revert_cli);
	RUN(t_own_bytes_holding_int3_values);
	RUN(t_revert_keeps_the_heap_when_bytes_were_changed);
	RUN(t_hot_set_install_revert);
	RUN(t_switch_table_install_revert);
	RUN(t_hoisted_table_install_revert);
	RUN(t_label_table_install_revert);
	RUN(t_icall_promotion);
	RUN(t_kernel_plan_without_module);
	RUN(t_measure_and_second_pass);
	RUN(t_root_measured_alike_before_and_after);
	RUN(t_cycles);
	RUN(t_cycles_cli);
	RUN(t_install_after_a_kept_heap);
	RUN(t_installs_compose);
	RUN(t_kept_heap_retried);
	RUN(t_revert_all_with_a_heap_kept);
	RUN(t_kill_agent);
	RUN(t_bad_input);
	RUN(t_compare);
	RUN(t_compare_process_gone);
	tu_cleanup();
	TEST_EXIT();
}
