/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helper: a process under ptrace for the plan tests. It starts a
 * fixture traced (or seizes a running process), maps executable memory into
 * it at a chosen address with an injected mmap, writes bytes through
 * /proc/PID/mem, and calls functions in it with up to six integer
 * arguments, giving back rax or how the process ended (exit status, or the
 * signal and where it struck). Calls return to an int3 in the mapped
 * memory.
 *
 * It also counts block executions exactly, for tests that need exact
 * profiles of compiled programs: an int3 at every block start; a hit is
 * counted, the original byte put back for one single step, and the int3
 * put back again. This is a test helper, slow (several system calls per
 * executed block) and single-threaded; it is not the agent's measurement.
 */
#ifndef HOTPATH_TEST_TRACEE_H
#define HOTPATH_TEST_TRACEE_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

struct tracee {
	pid_t pid;
	int mem; /* /proc/PID/mem */
	struct user_regs_struct saved;
	struct user_fpregs_struct saved_fp;
	uint64_t trap; /* an int3: the return address of calls */
	/* Breakpoints, sorted by address. */
	uint64_t *bp;
	uint8_t *bp_orig;
	uint64_t *bp_hits;
	size_t nbp;
	bool gone; /* exited or killed */
	int exit_status, term_signal;
	char why[256];
};

enum tr_result { TR_RETURNED = 0, TR_EXITED = 1, TR_SIGNALED = 2, TR_ERROR = -1 };

static inline int tr_peek(struct tracee *t, uint64_t addr, void *buf, size_t len)
{
	return pread(t->mem, buf, len, (off_t)addr) == (ssize_t)len ? 0 : -1;
}

static inline int tr_poke(struct tracee *t, uint64_t addr, const void *buf, size_t len)
{
	return pwrite(t->mem, buf, len, (off_t)addr) == (ssize_t)len ? 0 : -1;
}

static inline int tr_open_mem(struct tracee *t)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/mem", t->pid);
	t->mem = open(path, O_RDWR | O_CLOEXEC);
	if (t->mem < 0) {
		snprintf(t->why, sizeof(t->why), "open %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* Keep the calling process, and every process it starts from now on (they
 * inherit it), on the CPU it runs on. A traced process and its tracer
 * hand over at every stop: each int3 hit and single step is two wake-ups.
 * On different CPUs each wake-up is an interrupt between CPUs, which on a
 * virtual machine exits to the hypervisor; on one CPU it is a context
 * switch. test_run took 87 s (63 s of it in the kernel) free to move and
 * 23 s (20 s) on one CPU, quiet, on this project's 2-CPU test machine.
 * Best effort: without it the tests are the same, only slower. */
static inline void tr_one_cpu(void)
{
	cpu_set_t one;
	int cpu = sched_getcpu();

	if (cpu < 0)
		return;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	(void)sched_setaffinity(0, sizeof(one), &one);
}

/* Wait for the next stop of t; records an exit. Returns the stop signal,
 * 0 when the process is gone, -1 on error. */
static inline int tr_wait(struct tracee *t, int *status_out)
{
	int st;

	if (waitpid(t->pid, &st, __WALL) < 0) {
		snprintf(t->why, sizeof(t->why), "waitpid: %s", strerror(errno));
		return -1;
	}
	if (status_out)
		*status_out = st;
	if (WIFEXITED(st)) {
		t->gone = true;
		t->exit_status = WEXITSTATUS(st);
		return 0;
	}
	if (WIFSIGNALED(st)) {
		t->gone = true;
		t->term_signal = WTERMSIG(st);
		return 0;
	}
	return WSTOPSIG(st);
}

static inline int tr_save(struct tracee *t)
{
	if (ptrace(PTRACE_GETREGS, t->pid, 0, &t->saved) < 0 || ptrace(PTRACE_GETFPREGS, t->pid, 0, &t->saved_fp) < 0) {
		snprintf(t->why, sizeof(t->why), "PTRACE_GETREGS: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Start path with one argument, traced, and run it until it stops itself
 * (SIGSTOP): the fixture's "serve" mode. */
static inline int tr_start(struct tracee *t, const char *path, const char *arg)
{
	memset(t, 0, sizeof(*t));
	t->mem = -1;
	t->pid = fork();
	if (t->pid < 0) {
		snprintf(t->why, sizeof(t->why), "fork: %s", strerror(errno));
		return -1;
	}
	if (t->pid == 0) {
		ptrace(PTRACE_TRACEME, 0, 0, 0);
		execl(path, path, arg, (char *)NULL);
		_exit(127);
	}
	if (tr_wait(t, NULL) != SIGTRAP) { /* the exec */
		snprintf(t->why, sizeof(t->why), "%s did not start under ptrace", path);
		return -1;
	}
	ptrace(PTRACE_SETOPTIONS, t->pid, 0, PTRACE_O_EXITKILL);
	if (ptrace(PTRACE_CONT, t->pid, 0, 0) < 0 || tr_wait(t, NULL) != SIGSTOP) {
		snprintf(t->why, sizeof(t->why), "%s did not stop itself", path);
		return -1;
	}
	return tr_open_mem(t) < 0 ? -1 : tr_save(t);
}

/* Seize a running process and stop it where it is. */
static inline int tr_seize(struct tracee *t, pid_t pid)
{
	int st;

	memset(t, 0, sizeof(*t));
	t->mem = -1;
	t->pid = pid;
	if (ptrace(PTRACE_SEIZE, pid, 0, PTRACE_O_EXITKILL) < 0 || ptrace(PTRACE_INTERRUPT, pid, 0, 0) < 0) {
		snprintf(t->why, sizeof(t->why), "PTRACE_SEIZE %d: %s", pid, strerror(errno));
		return -1;
	}
	if (tr_wait(t, &st) <= 0) {
		snprintf(t->why, sizeof(t->why), "process %d did not stop", pid);
		return -1;
	}
	return tr_open_mem(t) < 0 ? -1 : tr_save(t);
}

/* Run one system call in t (at its current pc, whose bytes are put back
 * afterwards); returns its result or a negative errno. */
static inline int64_t tr_syscall(struct tracee *t, long nr, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4,
				 uint64_t a5, uint64_t a6)
{
	static const uint8_t stub[4] = { 0x0f, 0x05, 0xcc, 0xcc }; /* syscall; int3 */
	struct user_regs_struct r = t->saved;
	uint8_t keep[4];
	int64_t ret = -EIO;

	if (tr_peek(t, t->saved.rip, keep, 4) < 0 || tr_poke(t, t->saved.rip, stub, 4) < 0)
		return -EIO;
	r.rax = (uint64_t)nr;
	r.orig_rax = (uint64_t)-1;
	r.rdi = a1;
	r.rsi = a2;
	r.rdx = a3;
	r.r10 = a4;
	r.r8 = a5;
	r.r9 = a6;
	if (ptrace(PTRACE_SETREGS, t->pid, 0, &r) == 0 && ptrace(PTRACE_CONT, t->pid, 0, 0) == 0 &&
	    tr_wait(t, NULL) == SIGTRAP && ptrace(PTRACE_GETREGS, t->pid, 0, &r) == 0)
		ret = (int64_t)r.rax;
	tr_poke(t, t->saved.rip, keep, 4);
	ptrace(PTRACE_SETREGS, t->pid, 0, &t->saved);
	return ret;
}

/* Map len bytes read-write-execute at exactly addr in t. */
static inline int tr_map_at(struct tracee *t, uint64_t addr, size_t len)
{
	int64_t r = tr_syscall(t, 9 /* mmap */, addr, len, PROT_READ | PROT_WRITE | PROT_EXEC,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, (uint64_t)-1, 0);

	if (r < 0 || (uint64_t)r != addr) {
		snprintf(t->why, sizeof(t->why), "mmap at 0x%" PRIx64 " in %d: %s", addr, t->pid,
			 r < 0 ? strerror((int)-r) : "placed elsewhere");
		if (r > 0)
			tr_syscall(t, 11 /* munmap */, (uint64_t)r, len, 0, 0, 0, 0);
		return -1;
	}
	return 0;
}

/* A page anywhere in t holding the int3 that calls return to. */
static inline int tr_map_trap(struct tracee *t)
{
	static const uint8_t int3 = 0xcc;
	int64_t r = tr_syscall(t, 9 /* mmap */, 0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
			       MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0);

	if (r < 0 && r > -4096) {
		snprintf(t->why, sizeof(t->why), "mmap in %d: %s", t->pid, strerror((int)-r));
		return -1;
	}
	t->trap = (uint64_t)r;
	return tr_poke(t, t->trap, &int3, 1);
}

static inline ssize_t tr_bp_find(const struct tracee *t, uint64_t a)
{
	size_t lo = 0, hi = t->nbp;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t->bp[mid] < a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < t->nbp && t->bp[lo] == a ? (ssize_t)lo : -1;
}

static inline int cmp_u64_asc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Put an int3 at each of addrs (block starts) and count their hits. */
static inline int tr_break(struct tracee *t, const uint64_t *addrs, size_t n)
{
	static const uint8_t int3 = 0xcc;

	t->bp = malloc((n + 1) * sizeof(*t->bp));
	t->bp_orig = malloc(n + 1);
	t->bp_hits = calloc(n + 1, sizeof(*t->bp_hits));
	if (!t->bp || !t->bp_orig || !t->bp_hits)
		return -1;
	memcpy(t->bp, addrs, n * sizeof(*addrs));
	qsort(t->bp, n, sizeof(*t->bp), cmp_u64_asc);
	t->nbp = 0;
	for (size_t i = 0; i < n; i++) {
		if (t->nbp && t->bp[t->nbp - 1] == t->bp[i])
			continue;
		t->bp[t->nbp] = t->bp[i];
		if (tr_peek(t, t->bp[i], &t->bp_orig[t->nbp], 1) < 0 || tr_poke(t, t->bp[i], &int3, 1) < 0) {
			snprintf(t->why, sizeof(t->why), "breakpoint at 0x%" PRIx64 ": %s", t->bp[i], strerror(errno));
			return -1;
		}
		t->nbp++;
	}
	return 0;
}

/* Take every breakpoint out (their counts stay in bp_hits). */
static inline void tr_unbreak(struct tracee *t)
{
	for (size_t i = 0; i < t->nbp; i++)
		tr_poke(t, t->bp[i], &t->bp_orig[i], 1);
}

static inline void tr_free_breaks(struct tracee *t)
{
	free(t->bp);
	free(t->bp_orig);
	free(t->bp_hits);
	t->bp = NULL;
	t->bp_orig = NULL;
	t->bp_hits = NULL;
	t->nbp = 0;
}

/* The count of the breakpoint at a (0 if none). */
static inline uint64_t tr_hits(const struct tracee *t, uint64_t a)
{
	ssize_t i = tr_bp_find(t, a);
	return i < 0 ? 0 : t->bp_hits[i];
}

/* t stopped on the breakpoint i with regs r: count it and step over it. */
static inline int tr_step_over(struct tracee *t, size_t i, struct user_regs_struct *r)
{
	static const uint8_t int3 = 0xcc;

	t->bp_hits[i]++;
	r->rip = t->bp[i];
	if (tr_poke(t, t->bp[i], &t->bp_orig[i], 1) < 0 || ptrace(PTRACE_SETREGS, t->pid, 0, r) < 0 ||
	    ptrace(PTRACE_SINGLESTEP, t->pid, 0, 0) < 0)
		return -1;
	int sig = tr_wait(t, NULL);
	if (sig <= 0)
		return -1;
	if (tr_poke(t, t->bp[i], &int3, 1) < 0)
		return -1;
	return sig == SIGTRAP ? 0 : sig; /* another signal while stepping: the caller sees it */
}

/*
 * Call fn(args...) in t. Returns TR_RETURNED with *ret = rax, TR_EXITED
 * (t->exit_status) when the process exited in the call, TR_SIGNALED when a
 * signal other than the breakpoints' stopped it (t->why says which and
 * where; the process is killed), TR_ERROR when ptrace failed.
 */
static inline int tr_call(struct tracee *t, uint64_t fn, const uint64_t *args, int nargs, uint64_t *ret)
{
	struct user_regs_struct r = t->saved;
	unsigned long long *slots[6] = { &r.rdi, &r.rsi, &r.rdx, &r.rcx, &r.r8, &r.r9 };
	uint64_t sp = ((t->saved.rsp - 1024) & ~(uint64_t)15) - 8;
	int sig = 0;

	if (t->gone || !t->trap)
		return TR_ERROR;
	for (int i = 0; i < nargs && i < 6; i++)
		*slots[i] = args[i];
	r.rax = 0;
	r.orig_rax = (uint64_t)-1;
	r.rip = fn;
	r.rsp = sp;
	if (tr_poke(t, sp, &t->trap, 8) < 0 || ptrace(PTRACE_SETREGS, t->pid, 0, &r) < 0 ||
	    ptrace(PTRACE_SETFPREGS, t->pid, 0, &t->saved_fp) < 0)
		return TR_ERROR;
	for (;;) {
		if (ptrace(PTRACE_CONT, t->pid, 0, sig) < 0)
			return TR_ERROR;
		sig = tr_wait(t, NULL);
		if (sig < 0)
			return TR_ERROR;
		if (sig == 0)
			return t->term_signal ? TR_SIGNALED : TR_EXITED;
		if (ptrace(PTRACE_GETREGS, t->pid, 0, &r) < 0)
			return TR_ERROR;
		if (sig == SIGTRAP && r.rip - 1 == t->trap) {
			*ret = r.rax;
			return TR_RETURNED;
		}
		ssize_t b = sig == SIGTRAP ? tr_bp_find(t, r.rip - 1) : -1;
		if (b >= 0) {
			sig = tr_step_over(t, (size_t)b, &r);
			if (sig < 0)
				return t->gone ? TR_EXITED : TR_ERROR;
			if (sig == 0)
				continue;
		}
		snprintf(t->why, sizeof(t->why), "signal %d (%s) at 0x%llx", sig, strsignal(sig), r.rip);
		kill(t->pid, SIGKILL);
		tr_wait(t, NULL);
		t->gone = true;
		return TR_SIGNALED;
	}
}

/* Let t run on its own, counting breakpoints, until the breakpoint at
 * stop_at has been hit stop_after times; t is left stopped at stop_at
 * (not yet counted), which becomes its saved state. */
static inline int tr_run_counting(struct tracee *t, uint64_t stop_at, uint64_t stop_after)
{
	struct user_regs_struct r;
	ssize_t s = tr_bp_find(t, stop_at);
	int sig = 0;

	if (s < 0)
		return -1;
	for (;;) {
		if (ptrace(PTRACE_CONT, t->pid, 0, sig) < 0)
			return -1;
		sig = tr_wait(t, NULL);
		if (sig <= 0 || ptrace(PTRACE_GETREGS, t->pid, 0, &r) < 0)
			return -1;
		ssize_t b = sig == SIGTRAP ? tr_bp_find(t, r.rip - 1) : -1;
		if (b < 0)
			continue; /* the process's own signal: pass it on */
		if (b == s && t->bp_hits[b] >= stop_after) {
			r.rip = stop_at;
			if (ptrace(PTRACE_SETREGS, t->pid, 0, &r) < 0)
				return -1;
			return tr_save(t);
		}
		if ((sig = tr_step_over(t, (size_t)b, &r)) < 0)
			return -1;
	}
}

/* Put t's registers back and let it go on alone. */
static inline void tr_detach(struct tracee *t)
{
	if (!t->gone) {
		ptrace(PTRACE_SETREGS, t->pid, 0, &t->saved);
		ptrace(PTRACE_SETFPREGS, t->pid, 0, &t->saved_fp);
		ptrace(PTRACE_DETACH, t->pid, 0, 0);
	}
	if (t->mem >= 0)
		close(t->mem);
	t->mem = -1;
	tr_free_breaks(t);
}

static inline void tr_kill(struct tracee *t)
{
	if (!t->gone) {
		kill(t->pid, SIGKILL);
		waitpid(t->pid, NULL, __WALL);
		t->gone = true;
	}
	if (t->mem >= 0)
		close(t->mem);
	t->mem = -1;
	tr_free_breaks(t);
}

/* Where path is mapped in pid: the start of its mapping at file offset 0
 * and the end of its last mapping. */
static inline int tr_mapped_range(pid_t pid, const char *path, uint64_t *lo, uint64_t *hi)
{
	char maps[64], line[512], real[4096];
	FILE *fp;
	bool found = false;

	if (!realpath(path, real))
		return -1;
	snprintf(maps, sizeof(maps), "/proc/%d/maps", pid);
	if (!(fp = fopen(maps, "r")))
		return -1;
	while (fgets(line, sizeof(line), fp)) {
		unsigned long long a, b, off;
		char *file = strchr(line, '/');
		if (!file || sscanf(line, "%llx-%llx %*s %llx", &a, &b, &off) != 3)
			continue;
		file[strcspn(file, "\n")] = 0;
		if (strcmp(file, real))
			continue;
		if (!found || a < *lo)
			*lo = a;
		if (!found || b > *hi)
			*hi = b;
		found = true;
	}
	fclose(fp);
	return found ? 0 : -1;
}

#endif
