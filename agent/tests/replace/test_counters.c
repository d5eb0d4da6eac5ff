// SPDX-License-Identifier: Apache-2.0
/*
 * Inline block counters (plan/instrument.h, replace/counters.h, `hotpathd
 * measure --blocks --inline`) on a real process: the fixture
 * (tests/fixtures/counted.c) runs two assembly functions whose block counts
 * are known exactly per line it is sent, one with a block whose first
 * instruction reads the flags the block before it set.
 *  - The model marks that block's flags live (and no other), and its
 *    instrumented copy keeps them there; the verifier refuses a copy whose
 *    counter was altered.
 *  - Counted on edges (a spanning tree's complement), fx_loop needs 3 counters
 *    for 7 blocks, and fx_crit's critical edges go through stubs, verified;
 *    fx_spin's one-block loop counts its self edge in its block, no stub.
 *  - Measured inline for a window, every block count and edge is exact, the
 *    program's output is unchanged, and the copy is gone afterwards (no
 *    heap, no journal) with the program still right. By default the
 *    single-threaded fixture is counted with plain increments, one thread
 *    proved; with a thread parked before, with locked ones, still exact;
 *    with a thread started during the window, plain, and the report says
 *    the counts are not exact and why; a forked child (its own memory)
 *    counts nothing of the parent's and leaves the proof standing.
 *  - A function too short for the entry jump, and a process that exited,
 *    are refused with the reason, nothing installed.
 *  - Copies counted together are one install (one heap, one journal), each
 *    copy right after the one before it (not all at +0, in the same cache
 *    sets).
 *  - A function whose first 5 bytes hold part of a call to another one is
 *    installed before it, whatever order they are given in: the callee's
 *    install, first, would have redirected that call, and the caller's entry
 *    jump, covering part of it, was refused (seen in Lua's hot set).
 *  - A revert knows its own bytes when they hold 0xcc (a rel32 byte of a
 *    redirected call), which the process target reads as a probe's int3
 *    and shows as the file's byte: seen with ~100 functions counted at once.
 *  - The agent killed while it installs, counts or reverts: the process
 *    stays right and `hotpathd revert` leaves nothing behind.
 *  - Counted copies carry their own unwind data: backtraces through counted
 *    frames of the threads fixture walk as many frames as the original's;
 *    and the functions counted together are counted over one window (its
 *    start taken once every copy is in, every thread stopped).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "harness.h"
#include "plan/instrument.h"
#include "replace/counters.h"
#include "replace/install_op.h"
#include "target/target.h"
#include "test_util.h"

static const char *hp(void)
{
	return getenv("HOTPATHD") ? getenv("HOTPATHD") : "build/hotpathd";
}

static const char *fixture(void)
{
	static const char *path;
	if (!path)
		path = tu_compile("counted.c", "counted", "-O2 -g -pthread");
	return path;
}

/* The fixture with a pipe to its stdin and one from its stdout. */
struct fx {
	pid_t pid;
	int in, out;
};

static int read_line(int fd, char *buf, size_t len, int timeout_ms)
{
	size_t n = 0;
	while (n + 1 < len) {
		struct pollfd p = { fd, POLLIN, 0 };
		if (poll(&p, 1, timeout_ms) <= 0 || read(fd, buf + n, 1) != 1)
			return -1;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = 0;
	return 0;
}

/* Program prog (with one argument, or none) started with the pipes, once it
 * printed "ready". */
static int fx_start_prog(struct fx *f, const char *prog, const char *arg)
{
	int i[2], o[2];
	char line[64];

	if (pipe(i) < 0 || pipe(o) < 0)
		return -1;
	f->pid = fork();
	if (f->pid == 0) {
		dup2(i[0], 0);
		dup2(o[1], 1);
		close(i[1]);
		close(o[0]);
		execl(prog, prog, arg, (char *)NULL);
		_exit(127);
	}
	close(i[0]);
	close(o[1]);
	f->in = i[1];
	f->out = o[0];
	return read_line(f->out, line, sizeof(line), 60000) == 0 && !strcmp(line, "ready") ? 0 : -1;
}

static int fx_start(struct fx *f)
{
	return fx_start_prog(f, fixture(), NULL);
}

/* One round of the fixture's work: its printed sum. */
static long fx_round(struct fx *f)
{
	char line[64];
	if (write(f->in, "go\n", 3) != 3 || read_line(f->out, line, sizeof(line), 60000) < 0)
		return -1;
	return strtol(line, NULL, 10);
}

static void fx_stop(struct fx *f)
{
	close(f->in);
	close(f->out);
	kill(f->pid, SIGKILL);
	waitpid(f->pid, NULL, 0);
}

static void t_flags_live_and_verified(void)
{
	struct hp_model *m = NULL;
	struct hp_open_opts oo = { .quiet = true };
	char err[512];

	REQUIRE(fixture(), "the fixture does not compile");
	REQUIRE(hp_model_open_elf(fixture(), &oo, &m, err, sizeof(err)) == 0, "model: %s", err);
	const struct hp_module *mod;
	bool amb;
	const struct hp_function *f = hp_model_find(m, "fx_flags", &mod, &amb);
	REQUIRE(f && f->nblocks == 5, "fx_flags has %u blocks, not 5", f ? f->nblocks : 0);
	uint8_t code[64];
	unsigned live[5];
	REQUIRE(m->read(m, f->addr, code, f->size) == 0, "reading fx_flags");
	REQUIRE(hp_flags_live_in(mod, f, code, live) == 0, "liveness");
	for (uint32_t b = 0; b < 5; b++) {
		uint32_t off = mod->blocks[f->block_start + b].offset;
		if (off == 9)
			EXPECT(live[b] & 0x880, "the jl block (+9) reads SF and OF, live %#x", live[b]);
		else
			EXPECT(!live[b], "fx_flags+0x%x has flags live (%#x): nothing there reads them", off, live[b]);
	}
	struct hp_plan p;
	REQUIRE(hp_instrument_plan(m, mod, f, true, true, 0, &p, err, sizeof(err)) == 0, "plan: %s", err);
	EXPECT(p.status == HP_PLAN_OK && p.verified, "not verified: %s", p.message);
	EXPECT(p.instrument->kept_flags == 1, "%u blocks keep the flags, not 1", p.instrument->kept_flags);
	/* The verifier can fail: an increment of another counter is refused. */
	p.code[p.instrument->disp[0]] ^= 8;
	EXPECT(!hp_plan_verify(m, &p), "a counter pointing elsewhere was verified");
	EXPECT(strstr(p.verify_error, "counter"), "why: %s", p.verify_error);
	hp_instrument_plan_free(&p);
	const struct hp_function *loop = hp_model_find(m, "fx_loop", &mod, &amb);
	REQUIRE(loop && hp_instrument_plan(m, mod, loop, false, true, 0, &p, err, sizeof(err)) == 0, "loop plan: %s",
		err);
	EXPECT(p.verified && p.instrument->kept_flags == 0, "fx_loop: verified %d, %u blocks keep flags", p.verified,
	       p.instrument->kept_flags);
	hp_instrument_plan_free(&p);
	/* On edges: fx_loop needs 3 counters for its 7 blocks (the loop's back
	 * edge in the tree), none on the loop head; fx_crit's critical edges
	 * need stubs, which verify; a stub pointing elsewhere is refused. */
	REQUIRE(hp_instrument_plan(m, mod, loop, true, false, 0, &p, err, sizeof(err)) == 0, "edges: %s", err);
	EXPECT(p.verified && p.instrument->edges && p.instrument->nslots == 3 && p.instrument->block_slot[1] < 0,
	       "fx_loop on edges: verified %d, edges %d, %u counters", p.verified, p.instrument->edges,
	       p.instrument->nslots);
	hp_instrument_plan_free(&p);
	const struct hp_function *crit = hp_model_find(m, "fx_crit", &mod, &amb);
	REQUIRE(crit && hp_instrument_plan(m, mod, crit, true, false, 0, &p, err, sizeof(err)) == 0, "crit: %s", err);
	EXPECT(p.verified && p.instrument->edges && p.instrument->nstubs > 0, "fx_crit: verified %d (%s), %u stubs",
	       p.verified, p.verify_error, p.instrument->nstubs);
	if (p.instrument->nstubs) {
		uint64_t a = p.instrument->stubs[0].addr - p.base;
		int len = (int)hp_instrument_prefix_len(&p, 0, p.instrument->nblocks);
		p.code[a + (uint64_t)len + 1] ^= 1; /* the stub's jump lands elsewhere */
		EXPECT(!hp_plan_verify(m, &p), "a stub jumping elsewhere was verified");
	}
	hp_instrument_plan_free(&p);
	/* fx_spin's one-block loop: its self edge has a counter (no spanning
	 * tree holds an edge from a block to itself), and it is the loop
	 * block's own, not a stub's the jnz would go through and jump back from. */
	const struct hp_function *spin = hp_model_find(m, "fx_spin", &mod, &amb);
	REQUIRE(spin && hp_instrument_plan(m, mod, spin, false, false, 0, &p, err, sizeof(err)) == 0, "spin: %s", err);
	EXPECT(p.verified && p.instrument->edges && p.instrument->nstubs == 0 && spin->nblocks == 3 &&
		       p.instrument->block_slot[1] >= 0,
	       "fx_spin: verified %d (%s), on edges %d, %u stubs, %u blocks, loop block's counter %d", p.verified,
	       p.verify_error, p.instrument->edges, p.instrument->nstubs, spin->nblocks,
	       spin->nblocks == 3 ? p.instrument->block_slot[1] : -2);
	hp_instrument_plan_free(&p);
	/* fx_switch: its table's edge into the block case 1 falls into has no
	 * place for a counter; in the tree it needs none, so the function is
	 * still counted on edges (before: a counter at every block). */
	const struct hp_function *sw = hp_model_find(m, "fx_switch", &mod, &amb);
	REQUIRE(sw && hp_instrument_plan(m, mod, sw, false, false, 0, &p, err, sizeof(err)) == 0, "switch: %s", err);
	EXPECT(p.verified && p.instrument->edges && p.instrument->nslots < sw->nblocks,
	       "fx_switch: verified %d (%s), on edges %d, %u counters for %u blocks", p.verified, p.verify_error,
	       p.instrument->edges, p.instrument->nslots, sw->nblocks);
	hp_instrument_plan_free(&p);
	hp_model_free(m);
}

/* Run `hotpathd measure ... --inline` in the background; its stdout and stderr on pipes. */
static pid_t measure_start(int pid, const char *state, bool every_block, int *out, int *errfd)
{
	int o[2], e[2];
	char p[16];

	if (pipe(o) < 0 || pipe(e) < 0)
		return -1;
	snprintf(p, sizeof(p), "%d", pid);
	pid_t c = fork();
	if (c == 0) {
		dup2(o[1], 1);
		dup2(e[1], 2);
		close(o[0]);
		close(e[0]);
		execl(hp(), hp(), "measure", "pid", p, "fx_flags", "fx_loop", "fx_crit", "fx_switch", "fx_spin",
		      "--blocks", "--inline", "--json", "--seconds", "3600", "--state-dir", state,
		      every_block ? "--every-block" : "--inline", (char *)NULL);
		_exit(127);
	}
	close(o[1]);
	close(e[1]);
	*out = o[0];
	*errfd = e[0];
	return c;
}

static uint64_t count_of(json_t *res, const char *fn, long off)
{
	size_t i;
	json_t *r;
	json_array_foreach(res, i, r)
	{
		json_t *bo = json_object_get(r, "block_offset");
		if (!strcmp(json_string_value(json_object_get(r, "function")), fn) &&
		    (off < 0 ? !bo : bo && json_integer_value(bo) == off))
			return (uint64_t)json_integer_value(json_object_get(json_object_get(r, "metrics"), "count"));
	}
	return UINT64_MAX;
}

/* The count of the edge from +from to +to of fn in the report, or UINT64_MAX. */
static uint64_t edge_of(json_t *j, const char *fn, long from, long to)
{
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(j, "edges"), i, e)
	{
		if (!strcmp(json_string_value(json_object_get(e, "function")), fn) &&
		    json_integer_value(json_object_get(e, "from_offset")) == from &&
		    json_integer_value(json_object_get(e, "to_offset")) == to)
			return (uint64_t)json_integer_value(json_object_get(e, "count"));
	}
	return UINT64_MAX;
}

static long fx_ask(struct fx *f, const char *line);

/* fx_switch's block counts, as counted on edges (the first exact run) and
 * at every block: gcc chooses its blocks, so the two are compared. */
static struct {
	int n;
	long off[64];
	uint64_t count[64];
} switch_counts;

static void check_switch(json_t *res, bool every_block)
{
	size_t i;
	json_t *r;
	int n = 0, same = 0;
	json_array_foreach(res, i, r)
	{
		json_t *bo = json_object_get(r, "block_offset");
		if (strcmp(json_string_value(json_object_get(r, "function")), "fx_switch") || !bo || n == 64)
			continue;
		long off = (long)json_integer_value(bo);
		uint64_t c = (uint64_t)json_integer_value(json_object_get(json_object_get(r, "metrics"), "count"));
		if (!every_block) {
			switch_counts.off[n] = off;
			switch_counts.count[n] = c;
		} else {
			same += n < switch_counts.n && switch_counts.off[n] == off && switch_counts.count[n] == c;
		}
		n++;
	}
	EXPECT(count_of(res, "fx_switch", -1) == 3000, "fx_switch called %" PRIu64 " times, not 3000",
	       count_of(res, "fx_switch", -1));
	if (!every_block)
		switch_counts.n = n;

	else if (switch_counts.n)
		EXPECT(n == switch_counts.n && same == n,
		       "fx_switch's %d block counts at every block differ from its %d counted on edges (%d the same)",
		       n, switch_counts.n, same);
}

/* The fixture's threads: its own only; one parked before the window (locked
 * increments chosen); one started in the window (plain, not exact). */
enum threads { ONE_THREAD, PARKED_BEFORE, STARTED_IN_WINDOW, FORKED_IN_WINDOW };

static void inline_counts(bool every_block, enum threads th)
{
	struct fx f;
	char state[300], line[512], cmd[600];

	REQUIRE(fixture(), "the fixture does not compile");
	snprintf(state, sizeof(state), "%s/state-exact%d%d", tu_tmpdir(), every_block, (int)th);
	REQUIRE(fx_start(&f) == 0, "the fixture did not start");
	EXPECT(fx_round(&f) == 83250, "the original's sum");
	if (th == PARKED_BEFORE)
		REQUIRE(write(f.in, "park\n", 5) == 5 && read_line(f.out, line, sizeof(line), 60000) == 0 &&
				!strcmp(line, "parked"),
			"the fixture did not park a thread");
	int out, errfd;
	pid_t mp = measure_start(f.pid, state, every_block, &out, &errfd);
	REQUIRE(mp > 0, "fork");
	bool armed = false;
	while (!armed && read_line(errfd, line, sizeof(line), 120000) == 0)
		armed = strstr(line, "armed") != NULL;
	if (!armed) {
		kill(mp, SIGKILL);
		waitpid(mp, NULL, 0);
		fx_stop(&f);
		REQUIRE(false, "the measurement was not armed: %s", line);
	}
	long sum = th == STARTED_IN_WINDOW ? fx_ask(&f, "thread\n") :
		   th == FORKED_IN_WINDOW  ? fx_ask(&f, "fork\n") :
					     fx_round(&f); /* ROUNDS rounds, counted */
	kill(mp, SIGINT);
	static char json[1 << 20];
	size_t n = 0;
	ssize_t k;
	while (n + 1 < sizeof(json) && (k = read(out, json + n, sizeof(json) - 1 - n)) > 0)
		n += (size_t)k;
	json[n] = 0;
	int st = 0;
	waitpid(mp, &st, 0);
	close(out);
	close(errfd);
	EXPECT(sum == 83250, "the program's output changed under the counters: %ld", sum);
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "measure exited %d", WEXITSTATUS(st));
	json_t *j = json_loads(json, 0, NULL);
	json_t *cnt = j ? json_object_get(j, "counting") : NULL;
	const char *detail = json_string_value(json_object_get(cnt, "detail"));
	if (j && th == STARTED_IN_WINDOW) {
		/* Plain increments, a thread started: never reported exact. */
		EXPECT(!strcmp(json_string_value(json_object_get(cnt, "increments")) ?: "", "plain") &&
			       json_is_false(json_object_get(cnt, "exact")) &&
			       json_is_false(json_object_get(cnt, "single_thread_proved")) && detail &&
			       strstr(detail, "thread") && strstr(detail, "started"),
		       "a thread started in the window, yet: %s", json_dumps(cnt, 0));
		json_t *res = json_object_get(j, "resources");
		json_t *r0 = json_array_get(res, 0);
		EXPECT(!strcmp(json_string_value(json_object_get(json_object_get(r0, "labels"), "count")) ?: "",
			       "estimate"),
		       "the counts are not labelled estimates");
		EXPECT(json_real_value(json_object_get(j, "exact_edge_share")) == 0.0, "edges called exact");
		json_decref(j);
	} else if (j) {
		json_t *res = json_object_get(j, "resources");
		const char *incs = th == PARKED_BEFORE ? "locked" : "plain";
		EXPECT(!strcmp(json_string_value(json_object_get(cnt, "increments")) ?: "", incs) &&
			       json_is_true(json_object_get(cnt, "exact")) &&
			       json_boolean_value(json_object_get(cnt, "single_thread_proved")) ==
				       (th != PARKED_BEFORE) &&
			       (th != PARKED_BEFORE || (detail && strstr(detail, "2 threads"))),
		       "counting: %s", json_dumps(cnt, 0));
		/* fx_flags: 3000 calls; 1000 each of a == b, a < b, a > b. */
		const long fo[] = { -1, 0, 9, 11, 17, 23 };
		const uint64_t fc[] = { 3000, 3000, 2000, 1000, 1000, 1000 };
		for (int i = 0; i < 6; i++)
			EXPECT(count_of(res, "fx_flags", fo[i]) == fc[i],
			       "fx_flags+%ld counted %" PRIu64 ", not %" PRIu64, fo[i],
			       count_of(res, "fx_flags", fo[i]), fc[i]);
		/* fx_loop(40), 3000 calls: 41 tests of the bound, 10 of 40 steps add. */
		const long lo[] = { -1, 0, 5, 9, 14, 19, 22, 26 };
		const uint64_t lc[] = { 3000, 3000, 123000, 120000, 30000, 90000, 120000, 3000 };
		for (int i = 0; i < 8; i++)
			EXPECT(count_of(res, "fx_loop", lo[i]) == lc[i],
			       "fx_loop+%ld counted %" PRIu64 ", not %" PRIu64, lo[i], count_of(res, "fx_loop", lo[i]),
			       lc[i]);
		/* fx_crit: 750 calls each of x = 0, 1, 2, 3. */
		const long co[] = { -1, 0, 13, 22, 25 };
		const uint64_t cc[] = { 3000, 3000, 1500, 2250, 3000 };
		for (int i = 0; i < 5; i++)
			EXPECT(count_of(res, "fx_crit", co[i]) == cc[i],
			       "fx_crit+%ld counted %" PRIu64 ", not %" PRIu64, co[i], count_of(res, "fx_crit", co[i]),
			       cc[i]);
		const long ef[] = { 0, 0, 13, 13, 22 }, et[] = { 13, 22, 22, 25, 25 };
		const uint64_t ec[] = { 1500, 1500, 750, 750, 2250 };
		for (int i = 0; i < 5; i++)
			EXPECT(edge_of(j, "fx_crit", ef[i], et[i]) == ec[i],
			       "fx_crit's edge +%ld -> +%ld counted %" PRIu64 ", not %" PRIu64, ef[i], et[i],
			       edge_of(j, "fx_crit", ef[i], et[i]), ec[i]);
		/* fx_spin(40), 3000 calls: its loop block 40 times a call, 39 of them
		 * from itself (on edges: its own block's counter less its entry). */
		const long so[] = { -1, 0, 7, 13 };
		const uint64_t sc[] = { 3000, 3000, 120000, 3000 };
		for (int i = 0; i < 4; i++)
			EXPECT(count_of(res, "fx_spin", so[i]) == sc[i],
			       "fx_spin+%ld counted %" PRIu64 ", not %" PRIu64, so[i], count_of(res, "fx_spin", so[i]),
			       sc[i]);
		const long sf[] = { 0, 7, 7 }, st[] = { 7, 7, 13 };
		const uint64_t se[] = { 3000, 117000, 3000 };
		for (int i = 0; i < 3; i++)
			EXPECT(edge_of(j, "fx_spin", sf[i], st[i]) == se[i],
			       "fx_spin's edge +%ld -> +%ld counted %" PRIu64 ", not %" PRIu64, sf[i], st[i],
			       edge_of(j, "fx_spin", sf[i], st[i]), se[i]);
		if (th == ONE_THREAD)
			check_switch(res, every_block);
		EXPECT(json_real_value(json_object_get(j, "exact_edge_share")) == 1.0, "not every edge exact");
		EXPECT(!strcmp(json_string_value(json_object_get(json_object_get(j, "mechanisms"), "block_count")),
			       "inline_counter"),
		       "mechanism");
		json_decref(j);
	} else {
		EXPECT(false, "measure printed no JSON: %.200s", json);
	}
	/* Reverted: no heap in the process, no journal, the original runs right. */
	snprintf(cmd, sizeof(cmd),
		 "grep -c 'memfd:hotpath' /proc/%d/maps >/dev/null || ls '%s'/replace | grep -q journal", f.pid, state);
	EXPECT(system(cmd) != 0, "something of the copy is left after the window");
	EXPECT(fx_round(&f) == 83250, "the sum after the revert");
	fx_stop(&f);
}

/* Counters on edges (the default); at every block, where fx_flags+0x9 (live
 * flags) has one. */
static void t_inline_counts_exact(void)
{
	inline_counts(false, ONE_THREAD);
}

static void t_inline_counts_exact_every_block(void)
{
	inline_counts(true, ONE_THREAD);
}

static void t_inline_parked_thread_counts_locked(void)
{
	inline_counts(false, PARKED_BEFORE);
}

static void t_inline_thread_in_window_not_exact(void)
{
	inline_counts(false, STARTED_IN_WINDOW);
}

static void t_inline_fork_in_window_exact(void)
{
	inline_counts(false, FORKED_IN_WINDOW);
}

static void t_inline_refusals(void)
{
	struct fx f;
	char state[300], cmd[900], out[2048] = "";

	REQUIRE(fixture(), "the fixture does not compile");
	snprintf(state, sizeof(state), "%s/state-refused", tu_tmpdir());
	REQUIRE(fx_start(&f) == 0, "the fixture did not start");
	snprintf(cmd, sizeof(cmd), "%s measure pid %d fx_tiny --blocks --inline --seconds 1 --state-dir '%s' 2>&1",
		 hp(), f.pid, state);
	FILE *fp = popen(cmd, "r");
	size_t n = fp ? fread(out, 1, sizeof(out) - 1, fp) : 0;
	out[n] = 0;
	int st = fp ? pclose(fp) : -1;
	EXPECT(WEXITSTATUS(st) == 1 && strstr(out, "fx_tiny") && strstr(out, "too short"),
	       "fx_tiny was not refused with the reason: %d %s", WEXITSTATUS(st), out);
	snprintf(cmd, sizeof(cmd), "grep -q 'memfd:hotpath' /proc/%d/maps", f.pid);
	EXPECT(system(cmd) != 0, "a heap was left by a refused install");
	EXPECT(fx_round(&f) == 83250, "the sum after the refusal");
	int dead = f.pid;
	fx_stop(&f);
	snprintf(cmd, sizeof(cmd), "%s measure pid %d fx_flags --blocks --inline --seconds 1 --state-dir '%s' 2>&1",
		 hp(), dead, state);
	fp = popen(cmd, "r");
	n = fp ? fread(out, 1, sizeof(out) - 1, fp) : 0;
	out[n] = 0;
	st = fp ? pclose(fp) : -1;
	EXPECT(WEXITSTATUS(st) == 3 && out[0], "a dead process: exit %d, %s", WEXITSTATUS(st), out);
}

/* The fixture's answer to one line (LINE "go\n" or "calls\n"), or -1. */
static long fx_ask(struct fx *f, const char *line)
{
	char out[64];
	if (write(f->in, line, strlen(line)) != (ssize_t)strlen(line) || read_line(f->out, out, sizeof(out), 60000) < 0)
		return -1;
	return strtol(out, NULL, 10);
}

/* Does [code, code+len) at running address at hold a 5-byte call to to? */
static bool calls_to(const uint8_t *code, size_t len, uint64_t at, uint64_t to)
{
	for (size_t k = 0; k + 5 <= len; k++) {
		int32_t rel;
		memcpy(&rel, code + k + 1, 4);
		if (code[k] == 0xe8 && at + k + 5 + (uint64_t)(int64_t)rel == to)
			return true;
	}
	return false;
}

/* fx_loop and CALLER (which calls it) counted at once with plain
 * increments, in that order, in a fixture that answers LINE with 20: check
 * runs while both are installed; before and after, LINE and the sum are
 * right. */
static void two_counted(const char *tag, const char *line, const char *caller,
			void (*check)(struct fx *f, struct hp_counted *c))
{
	struct fx f;
	char state[300], err[1024];
	struct hp_model *m = NULL;
	struct hp_counted c = { 0 };
	struct hp_open_opts oo = { .quiet = true };

	REQUIRE(fixture(), "the fixture does not compile");
	snprintf(state, sizeof(state), "%s/state-%s", tu_tmpdir(), tag);
	REQUIRE(fx_start(&f) == 0, "the fixture did not start");
	EXPECT(fx_ask(&f, line) == 20, "%s before", caller);
	REQUIRE(hp_model_open_pid(f.pid, &oo, &m, err, sizeof(err)) == 0, "model: %s", err);
	const struct hp_module *mods[2];
	const struct hp_function *fns[2] = { hp_model_find(m, "fx_loop", &mods[0], NULL),
					     hp_model_find(m, caller, &mods[1], NULL) };
	REQUIRE(fns[0] && fns[1], "the fixture's functions");
	int r = hp_counted_install(f.pid, m, state, fns, mods, 2, false, false, &c, err, sizeof(err));
	EXPECT(r == 0, "installing both: %s", err);
	if (r == 0) {
		check(&f, &c);
		EXPECT(fx_ask(&f, line) == 20, "%s counted", caller);
		EXPECT(fx_ask(&f, "go\n") == 83250, "the sum counted");
	}
	EXPECT(hp_counted_revert(&c, err, sizeof(err)) == 0, "revert: %s", err);
	EXPECT(fx_ask(&f, line) == 20, "%s after", caller);
	EXPECT(fx_ask(&f, "go\n") == 83250, "the sum after");
	hp_model_free(m);
	fx_stop(&f);
}

/* Two functions counted at once, one calling the other (fx_calls, then
 * fx_loop's call site in it): the second copy is made after the first
 * install redirected that call to the first copy. It must be made from the
 * original code, calling fx_loop's entry: made from the live bytes, it
 * called the first copy's heap directly, and where that call's rel32 held a
 * 0xcc byte the reader took it for a probe's int3 and gave the file's byte,
 * so the copy called an address in neither (the SQLite driver's crash with
 * ~100 functions counted at once). */
static void copy_from_original_code(struct fx *f, struct hp_counted *c)
{
	const struct hp_counted_fn *a = &c->fns[0], *b = &c->fns[1];
	const struct hp_install_result *in = &c->installs[b->install].res;
	static uint8_t copy[1 << 16];
	size_t len = in->heap_len < sizeof(copy) ? in->heap_len : sizeof(copy);
	struct iovec lo = { copy, len }, re = { (void *)(uintptr_t)in->heap, len };
	EXPECT(process_vm_readv(f->pid, &lo, 1, &re, 1, 0) == (ssize_t)len, "reading fx_calls' copy");
	EXPECT(calls_to(copy, len, in->heap, a->entry), "fx_calls' copy does not call fx_loop's entry 0x%" PRIx64,
	       a->entry);
	EXPECT(!calls_to(copy, len, in->heap, a->new_entry),
	       "fx_calls' copy calls fx_loop's copy 0x%" PRIx64 " directly (made from the patched bytes)",
	       a->new_entry);
	/* fx_loop's copy first, at the start of its page; fx_calls' right
	 * after it (16-byte aligned) in the same heap, as one stretch of code. */
	uint64_t gap = hp_instrument_next_base(&a->plan) - a->plan.base;
	EXPECT(a->new_entry % 4096 == 0 && b->new_entry == a->new_entry + gap,
	       "the copies start at 0x%" PRIx64 " and 0x%" PRIx64 ", not +0 into a page and %" PRIu64 " bytes after",
	       a->new_entry, b->new_entry, gap);
}

static void t_inline_copy_from_original_code(void)
{
	two_counted("two", "calls\n", "fx_calls", copy_from_original_code);
}

/* fx_first calls fx_loop at +1, and is given after it (as a hot set may
 * list them): it is installed first. */
static void entry_over_a_call(struct fx *f, struct hp_counted *c)
{
	const struct hp_function *fns[2] = { c->fns[0].fn, c->fns[1].fn };
	const struct hp_module *mods[2] = { c->fns[0].mod, c->fns[1].mod };
	size_t order[2];
	hp_counted_order(fns, mods, 2, order);
	EXPECT(order[0] == 1 && order[1] == 0, "install order %zu, %zu: fx_first goes first", order[0], order[1]);
	EXPECT(c->fns[0].installed && c->fns[1].installed, "both copies installed");
}

static void t_inline_entry_over_a_call(void)
{
	two_counted("first", "first\n", "fx_first", entry_over_a_call);
}

/* fx_calls_early calls fx_loop at +3, within the 5 bytes of its own entry
 * jump. Installed after fx_loop's copy redirected that call, its entry jump
 * was refused ("would cover part of bytes another install patched": Lua's
 * lua_rawget and index2value in bench/layout_vs_bolt); a call within its
 * function's first 5 bytes is now left calling the entry, whichever goes
 * first. And the two copies are one install: one heap in the process
 * (each copy was its own heap, quiesce, journal and unwinder registration,
 * ~277 of them for SQLite's hot set), one journal. */
static void both_installed(struct fx *f, struct hp_counted *c)
{
	char cmd[4400], line[512];
	EXPECT(c->fns[0].installed && c->fns[1].installed, "both copies installed");
	/* The heaps the process maps (a heap may be more than one mapping: its
	 * code read+exec, its counters read+write), by name. */
	snprintf(cmd, sizeof(cmd), "grep -o 'memfd:hotpath[^ ]*' /proc/%d/maps | grep -v -- '-data$' | sort -u | wc -l",
		 f->pid);
	FILE *fp = popen(cmd, "r");
	long heaps = fp && fgets(line, sizeof(line), fp) ? strtol(line, NULL, 10) : -1;
	if (fp)
		pclose(fp);
	EXPECT(heaps == 1, "%ld code heaps in the process for 2 counted copies", heaps);
	snprintf(cmd, sizeof(cmd), "ls '%s'/replace/*.journal | wc -l", c->state_dir);
	fp = popen(cmd, "r");
	long journals = fp && fgets(line, sizeof(line), fp) ? strtol(line, NULL, 10) : -1;
	if (fp)
		pclose(fp);
	EXPECT(journals == 1, "%ld journals for 2 counted copies", journals);
	EXPECT(c->ninstalls == 1 && c->fns[0].install == 0 && c->fns[1].install == 0, "%zu installs for 2 copies",
	       c->ninstalls);
}

static void t_inline_call_in_entry_bytes(void)
{
	two_counted("early", "early\n", "fx_calls_early", both_installed);
}

/* The agent killed (SIGKILL) while it installs the four counted copies (one
 * install), while it counts, and while it reverts: the process goes on
 * computing right, and `hotpathd revert` (exit 0, or 4 when the kill came
 * before anything was journaled) brings it back to clean from the journal:
 * no heap left, nothing installed. */
static void t_inline_killed(void)
{
	struct fx f;
	char state[300], cmd[900], line[256];

	REQUIRE(fixture(), "the fixture does not compile");
	snprintf(state, sizeof(state), "%s/state-killed", tu_tmpdir());
	REQUIRE(fx_start(&f) == 0, "the fixture did not start");
	srand(17);
	for (int k = 0; k < 8; k++) {
		int out, errfd;
		pid_t mp = measure_start(f.pid, state, false, &out, &errfd);
		REQUIRE(mp > 0, "fork");
		if (k < 4) {
			usleep((useconds_t)(rand() % 400000)); /* reading the model, planning or installing */
		} else {
			bool armed = false;
			while (!armed && read_line(errfd, line, sizeof(line), 120000) == 0)
				armed = strstr(line, "armed") != NULL;
			EXPECT(armed, "kill %d: the measurement was not armed", k);
			EXPECT(fx_round(&f) == 83250, "kill %d: the sum counted", k);
			if (k >= 6) { /* ends the window: the reads, then the revert */
				kill(mp, SIGINT);
				usleep((useconds_t)(rand() % 100000));
			}
		}
		kill(mp, SIGKILL);
		waitpid(mp, NULL, 0);
		close(out);
		close(errfd);
		EXPECT(fx_round(&f) == 83250, "after kill %d the sum", k);
		snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' >/dev/null 2>&1", hp(), f.pid, state);
		int st = system(cmd);
		EXPECT(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 4),
		       "the revert after kill %d exited %d", k, WEXITSTATUS(st));
		snprintf(cmd, sizeof(cmd), "grep -q 'memfd:hotpath' /proc/%d/maps", f.pid);
		EXPECT(system(cmd) != 0, "after kill %d and the revert, a code heap is left in the process", k);
		/* (A kill between creating the journal and its first record leaves
		 * that empty file: nothing was written, nothing is installed.) */
		snprintf(cmd, sizeof(cmd), "%s revert pid %d --state-dir '%s' >/dev/null 2>&1", hp(), f.pid, state);
		st = system(cmd);
		EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 4, "after kill %d and the revert, a second revert exited %d",
		       k, WEXITSTATUS(st));
		EXPECT(fx_round(&f) == 83250, "after kill %d and the revert the sum", k);
	}
	fx_stop(&f);
}

/* A process target's reads as process_target.c does them: read shows a 0xcc
 * in memory where the file has another byte as the file's byte (a probe's
 * int3 hidden); read_raw shows memory as it is. */
static uint8_t fake_mem[5], fake_file[5];

static int fake_read(struct hp_patch_target *t, uint64_t addr, void *buf, size_t len)
{
	uint8_t *b = buf;
	for (size_t k = 0; k < len; k++)
		b[k] = fake_mem[addr + k] == 0xcc && fake_file[addr + k] != 0xcc ? fake_file[addr + k] :
										   fake_mem[addr + k];
	return 0;
}

static int fake_read_raw(struct hp_patch_target *t, uint64_t addr, void *buf, size_t len)
{
	memcpy(buf, fake_mem + addr, len);
	return 0;
}

static void t_revert_knows_its_0xcc(void)
{
	static const struct hp_patch_ops ops = { .kind = "fake", .read = fake_read, .read_raw = fake_read_raw };
	struct hp_op x = { 0 };
	x.t.ops = &ops;
	/* The call at sqlite3_create_collation16+0x5f redirected to a heap whose
	 * rel32 has a 0xcc byte (as measured: reverting ~100 counted copies). */
	struct hp_undo u = { .kind = HP_UNDO_CALL, .len = 5, .addr = 0 };
	memcpy(u.orig, "\xe8\x9c\x79\xfc\xff", 5);
	memcpy(u.now, "\xe8\xcc\x47\xeb\xff", 5);
	memcpy(fake_file, u.orig, 5);
	memcpy(fake_mem, u.orig, 5);
	EXPECT(hp_op_live_state(&x, &u) == 0, "the original bytes read as original");
	memcpy(fake_mem, u.now, 5);
	EXPECT(hp_op_live_state(&x, &u) == 1, "the installed call with a 0xcc byte reads as someone else's");
	memcpy(fake_mem, "\xe8\xcc\x47\xeb\xfe", 5);
	EXPECT(hp_op_live_state(&x, &u) == 2, "bytes changed by someone else read as ours");
	memcpy(fake_mem, "\xe8\x11\x47\xeb\xff", 5);
	EXPECT(hp_op_live_state(&x, &u) == 2, "another byte where ours is 0xcc reads as ours");
}

/* A counted frame unwinds as its original's. The threads fixture
 * (threads.c) checks in every result the frames its unwinder walks from
 * pr_depth, which pr_twist calls, called through pr_mix's hook from
 * pr_root: pr_root, pr_mix and pr_twist are counted inline for a window
 * while two threads run them, and no result may differ (before counted
 * copies had unwind data of their own, pr_root's results came out three
 * frames short and the fixture exited 3 at once). */
static void t_inline_counted_frames_unwind(void)
{
	const char *prog = tu_compile("threads.c", "threads", "-O2 -pthread");
	char state[300], cmd[900], line[128], out[300];
	struct fx f;

	REQUIRE(prog, "the threads fixture does not compile");
	REQUIRE(fx_start_prog(&f, prog, "2") == 0, "the fixture did not start");
	pid_t fx = f.pid;
	snprintf(state, sizeof(state), "%s/state-unwind", tu_tmpdir());
	snprintf(out, sizeof(out), "%s/unwind.json", tu_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "%s measure pid %d pr_root pr_mix pr_twist --blocks --inline --seconds 2 --json --state-dir %s >%s",
		 hp(), fx, state, out);
	int st = system(cmd);
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "measure exited %d", WEXITSTATUS(st));
	json_error_t je;
	json_t *j = json_load_file(out, 0, &je), *res = json_object_get(j, "resources");
	EXPECT(!strcmp(json_string_value(json_object_get(json_object_get(j, "mechanisms"), "block_count")) ?: "",
		       "inline_counter"),
	       "not counted inline: %s", j ? json_dumps(json_object_get(j, "mechanisms"), 0) : je.text);
	uint64_t roots = count_of(res, "pr_root", -1), mixes = count_of(res, "pr_mix", -1),
		 twists = count_of(res, "pr_twist", -1);
	EXPECT(roots > 0 && roots != UINT64_MAX && twists > 0 && twists != UINT64_MAX,
	       "pr_root ran %" PRIu64 " times and pr_twist %" PRIu64 " in the window", roots, twists);
	/* One window for all three, whatever the order and time of their
	 * installs: pr_root ends in a jump to pr_mix, so their calls differ by at
	 * most the threads inside pr_root when the window began or ended (every
	 * thread is stopped for those reads), 2 + 2. */
	EXPECT(mixes != UINT64_MAX && mixes + 4 >= roots && roots + 4 >= mixes,
	       "pr_root was called %" PRIu64 " times and pr_mix %" PRIu64 " in the same window", roots, mixes);
	json_decref(j);
	/* Every result since the start, the window's included, was checked. */
	int ws = 0;
	EXPECT(waitpid(fx, &ws, WNOHANG) == 0, "the fixture exited (status %d): a result differed",
	       WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
	kill(fx, SIGTERM);
	EXPECT(read_line(f.out, line, sizeof(line), 60000) == 0 && !strncmp(line, "verified ", 9) &&
		       strtoul(line + 9, NULL, 10) > 0,
	       "the fixture's end: %s", line);
	waitpid(fx, &ws, 0);
	close(f.out);
	close(f.in);
	EXPECT(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the fixture's exit status %d", WEXITSTATUS(ws));
}

int main(void)
{
	RUN(t_revert_knows_its_0xcc);
	RUN(t_flags_live_and_verified);
	if (geteuid() != 0) {
		printf("ok - inline counters # SKIP needs root (ptrace of other processes)\n");
		tu_cleanup();
		TEST_EXIT();
	}
	RUN(t_inline_counts_exact);
	RUN(t_inline_counts_exact_every_block);
	RUN(t_inline_parked_thread_counts_locked);
	RUN(t_inline_thread_in_window_not_exact);
	RUN(t_inline_fork_in_window_exact);
	RUN(t_inline_refusals);
	RUN(t_inline_copy_from_original_code);
	RUN(t_inline_entry_over_a_call);
	RUN(t_inline_call_in_entry_bytes);
	RUN(t_inline_counted_frames_unwind);
	RUN(t_inline_killed);
	tu_cleanup();
	TEST_EXIT();
}
