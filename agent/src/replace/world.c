// SPDX-License-Identifier: Apache-2.0
/*
 * Stopping a whole process with ptrace (world.h). PTRACE_SEIZE does not stop
 * a thread and sends no signal; PTRACE_INTERRUPT then stops it wherever it
 * is, also inside a blocking system call (which restarts when it runs
 * again). PTRACE_O_TRACECLONE makes a thread created by a seized thread
 * start traced and stopped, and /proc/PID/task is read until a pass finds
 * no thread that is not stopped. Zombie threads (a leader that called
 * pthread_exit) never stop and run no code: they are left out.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/grow.h"
#include "model/model.h"
#include "replace/world.h"

#define OPTIONS (PTRACE_O_TRACECLONE | PTRACE_O_TRACESYSGOOD)

static ssize_t find(const struct hp_world *w, pid_t tid)
{
	for (size_t i = 0; i < w->n; i++)
		if (w->t[i].tid == tid)
			return (ssize_t)i;
	return -1;
}

static int add(struct hp_world *w, pid_t tid)
{
	if (HP_GROW(w->t, w->cap, w->n + 1))
		return -ENOMEM;
	memset(&w->t[w->n], 0, sizeof(w->t[0]));
	w->t[w->n++].tid = tid;
	return 0;
}

static void drop(struct hp_world *w, size_t i)
{
	w->t[i] = w->t[--w->n];
}

/* The state letter of a thread ('Z' zombie, 'X' dead), or 0 when gone. */
static char thread_state(pid_t pid, pid_t tid)
{
	char path[96], buf[512];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

/* Why ptrace refused pid: another tracer, Yama, or permissions. */
static void refusal(pid_t pid, int e, char *err, size_t errlen)
{
	char path[64], line[256], comm[64] = "";
	FILE *fp;
	int tracer = 0, scope = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if ((fp = fopen(path, "r"))) {
		while (fgets(line, sizeof(line), fp))
			if (sscanf(line, "TracerPid: %d", &tracer) == 1)
				break;
		fclose(fp);
	}
	if (tracer > 0 && tracer != getpid()) {
		snprintf(path, sizeof(path), "/proc/%d/comm", tracer);
		if ((fp = fopen(path, "r"))) {
			if (fgets(comm, sizeof(comm), fp))
				comm[strcspn(comm, "\n")] = 0;
			fclose(fp);
		}
		snprintf(err, errlen,
			 "ptrace refused: process %d is already traced by process %d (%s); a process has one tracer "
			 "at a time",
			 pid, tracer, comm[0] ? comm : "?");
		return;
	}
	if ((fp = fopen("/proc/sys/kernel/yama/ptrace_scope", "r"))) {
		if (fscanf(fp, "%d", &scope) != 1)
			scope = -1;
		fclose(fp);
	}
	if (scope >= 1)
		snprintf(err, errlen, "ptrace refused (%s): Yama's kernel.yama.ptrace_scope is %d, which %s",
			 strerror(e), scope,
			 scope == 3 ? "forbids ptrace attach altogether until reboot" :
			 scope == 2 ? "allows attaching only with CAP_SYS_PTRACE" :
				      "allows attaching only to descendants without CAP_SYS_PTRACE");
	else
		snprintf(err, errlen,
			 "ptrace refused for process %d: %s (installing code needs CAP_SYS_PTRACE or the same user, "
			 "and no other tracer)",
			 pid, strerror(e));
}

/* Wait until thread i stops; learn threads it created. Returns 1 stopped,
 * 0 gone (exited or a zombie), negative errno. */
static int wait_stop(struct hp_world *w, size_t i)
{
	pid_t tid = w->t[i].tid;
	for (int spins = 0; spins < 40000; spins++) {
		int st;
		pid_t r = waitpid(tid, &st, __WALL | WNOHANG);
		if (r < 0)
			return errno == ECHILD ? 0 : -errno;
		if (r == 0) {
			if (spins > 200 && (spins & 63) == 0) {
				char s = thread_state(w->pid, tid);
				if (s == 0 || s == 'Z' || s == 'X')
					return 0;
			}
			if (spins > 50) {
				struct timespec ts = { 0, 50000 };
				nanosleep(&ts, NULL);
			}
			continue;
		}
		if (WIFEXITED(st) || WIFSIGNALED(st))
			return 0;
		int sig = WSTOPSIG(st), ev = st >> 16;
		if (ev == PTRACE_EVENT_CLONE || ev == PTRACE_EVENT_FORK || ev == PTRACE_EVENT_VFORK) {
			unsigned long child = 0;
			if (ev == PTRACE_EVENT_CLONE && ptrace(PTRACE_GETEVENTMSG, tid, 0, &child) == 0 &&
			    find(w, (pid_t)child) < 0 && add(w, (pid_t)child) < 0)
				return -ENOMEM;
			return 1; /* stopped at the event: as good as interrupted */
		}
		if (ev == PTRACE_EVENT_STOP || sig == (SIGTRAP | 0x80))
			return 1;
		/* A signal arrived before the interrupt: keep it for release. */
		if (sig != SIGSTOP && sig != SIGTRAP)
			w->t[i].sig = sig;
		return 1;
	}
	return -ETIMEDOUT;
}

static int list_tasks(pid_t pid, pid_t **out, size_t *n)
{
	char path[64];
	DIR *d;
	struct dirent *e;
	size_t cap = 64;

	*n = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	if (!(d = opendir(path)))
		return -ESRCH;
	*out = malloc(cap * sizeof(pid_t));
	while (*out && (e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		if (HP_GROW(*out, cap, *n + 1))
			break;
		(*out)[(*n)++] = (pid_t)atoi(e->d_name);
	}
	closedir(d);
	return *out ? 0 : -ENOMEM;
}

static int traced_by_us(pid_t pid, pid_t tid)
{
	char path[96], line[256];
	FILE *fp;
	int tracer = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	if (!(fp = fopen(path, "r")))
		return 0;
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "TracerPid: %d", &tracer) == 1)
			break;
	fclose(fp);
	return tracer == getpid();
}

static void detach_all(struct hp_world *w)
{
	for (size_t i = 0; i < w->n; i++) {
		struct hp_thread *t = &w->t[i];
		if (t->dirty && !t->busy)
			ptrace(PTRACE_SETREGS, t->tid, 0, &t->regs);
		if (ptrace(PTRACE_DETACH, t->tid, 0, (void *)(long)t->sig) < 0 && t->sig)
			syscall(SYS_tgkill, w->pid, t->tid, t->sig);
		else if (t->sig && t->in_syscall_stop)
			syscall(SYS_tgkill, w->pid, t->tid, t->sig);
	}
	w->n = 0;
}

static int stop_all(struct hp_world *w, char *err, size_t errlen)
{
	double t0 = hp_now();
	int r = 0;

	for (int pass = 0; pass < 1000; pass++) {
		pid_t *tids = NULL;
		size_t nt = 0, fresh = 0, first = w->n;
		if ((r = list_tasks(w->pid, &tids, &nt)) < 0) {
			snprintf(err, errlen, "process %d does not exist (it exited)", w->pid);
			goto fail;
		}
		for (size_t k = 0; k < nt; k++) {
			if (find(w, tids[k]) >= 0)
				continue;
			char s = thread_state(w->pid, tids[k]);
			if (s == 'Z' || s == 'X' || s == 0)
				continue;
			if (ptrace(PTRACE_SEIZE, tids[k], 0, OPTIONS) < 0) {
				int e = errno;
				if (e == ESRCH)
					continue;
				if (e != EPERM || !traced_by_us(w->pid, tids[k])) {
					free(tids);
					if (e == ESRCH || kill(w->pid, 0) < 0) {
						snprintf(err, errlen, "process %d exited", w->pid);
						r = -ESRCH;
					} else {
						refusal(w->pid, e, err, errlen);
						r = -e;
					}
					goto fail;
				}
				/* Attached already: a clone of a seized thread. */
			} else if (ptrace(PTRACE_INTERRUPT, tids[k], 0, 0) < 0 && errno != ESRCH) {
				r = -errno;
				snprintf(err, errlen, "PTRACE_INTERRUPT of thread %d: %s", tids[k], strerror(errno));
				free(tids);
				goto fail;
			}
			if (add(w, tids[k]) < 0) {
				free(tids);
				r = -ENOMEM;
				snprintf(err, errlen, "out of memory");
				goto fail;
			}
			fresh++;
		}
		free(tids);
		/* Wait for the new ones (and clones they report). */
		for (size_t i = first; i < w->n;) {
			int s = wait_stop(w, i);
			if (s < 0) {
				r = s;
				snprintf(err, errlen, "thread %d of process %d did not stop: %s", w->t[i].tid, w->pid,
					 strerror(-s));
				goto fail;
			}
			if (s == 0) {
				ptrace(PTRACE_DETACH, w->t[i].tid, 0, 0);
				drop(w, i);
				continue;
			}
			if (ptrace(PTRACE_GETREGS, w->t[i].tid, 0, &w->t[i].regs) < 0) {
				ptrace(PTRACE_DETACH, w->t[i].tid, 0, 0);
				drop(w, i);
				continue;
			}
			i++;
		}
		if (!fresh && pass > 0)
			break;
	}
	if (!w->n) {
		snprintf(err, errlen, "process %d exited", w->pid);
		r = -ESRCH;
		goto fail;
	}
	w->stop_seconds = hp_now() - t0;
	return 0;
fail:
	detach_all(w);
	return r;
}

int hp_world_stop(pid_t pid, struct hp_world *w, char *err, size_t errlen)
{
	char path[64];
	int r;

	memset(w, 0, sizeof(*w));
	w->pid = pid;
	w->mem = -1;
	if (kill(pid, 0) < 0 && errno == ESRCH) {
		snprintf(err, errlen, "process %d does not exist", pid);
		return -ESRCH;
	}
	if ((r = stop_all(w, err, errlen)) < 0) {
		free(w->t);
		w->t = NULL;
		return r;
	}
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	if ((w->mem = open(path, O_RDWR | O_CLOEXEC)) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		hp_world_release(w);
		return r;
	}
	return 0;
}

int hp_world_run_others(struct hp_world *w, size_t keep)
{
	for (size_t i = 0; i < w->n; i++) {
		struct hp_thread *t = &w->t[i];
		if (i == keep || t->busy)
			continue;
		if (t->dirty) {
			ptrace(PTRACE_SETREGS, t->tid, 0, &t->regs);
			t->dirty = false;
		}
		if (ptrace(PTRACE_CONT, t->tid, 0, (void *)(long)t->sig) == 0)
			t->sig = 0;
		t->in_syscall_stop = false;
	}
	return 0;
}

void hp_world_poll_others(struct hp_world *w, size_t keep)
{
	for (size_t i = 0; i < w->n; i++) {
		int st;
		if (i == keep)
			continue;
		pid_t tid = w->t[i].tid;
		if (waitpid(tid, &st, __WALL | WNOHANG) != tid || WIFEXITED(st) || WIFSIGNALED(st))
			continue;
		int sig = WSTOPSIG(st), ev = st >> 16, deliver = 0;
		if (ev == PTRACE_EVENT_CLONE) {
			unsigned long child = 0;
			/* The new thread starts stopped; it runs once it is waited for below. */
			if (ptrace(PTRACE_GETEVENTMSG, tid, 0, &child) == 0 && find(w, (pid_t)child) < 0)
				add(w, (pid_t)child);
		} else if (!ev && sig != SIGTRAP && sig != (SIGTRAP | 0x80) && sig != SIGSTOP) {
			deliver = sig;
		}
		ptrace(PTRACE_CONT, tid, 0, (void *)(long)deliver);
	}
}

int hp_world_stop_others(struct hp_world *w, size_t keep, char *err, size_t errlen)
{
	for (size_t i = 0; i < w->n; i++)
		if (i != keep && !w->t[i].busy)
			ptrace(PTRACE_INTERRUPT, w->t[i].tid, 0, 0);
	for (size_t i = 0; i < w->n;) {
		if (i == keep || w->t[i].busy) {
			i++;
			continue;
		}
		int s = wait_stop(w, i);
		if (s < 0) {
			snprintf(err, errlen, "thread %d did not stop again: %s", w->t[i].tid, strerror(-s));
			return s;
		}
		if (s == 0 || ptrace(PTRACE_GETREGS, w->t[i].tid, 0, &w->t[i].regs) < 0) {
			ptrace(PTRACE_DETACH, w->t[i].tid, 0, 0);
			if (keep == w->n - 1)
				keep = i; /* drop() moves the last entry here: callers find threads by tid */
			drop(w, i);
			continue;
		}
		i++;
	}
	/* Threads born meanwhile that no clone event reported. */
	char e2[256];
	return stop_all(w, e2, sizeof(e2)) < 0 ? -ESRCH : 0;
}

int hp_world_run_briefly(struct hp_world *w, unsigned usec, char *err, size_t errlen)
{
	struct timespec ts = { usec / 1000000, (long)(usec % 1000000) * 1000 };

	detach_all(w);
	nanosleep(&ts, NULL);
	return stop_all(w, err, errlen);
}

void hp_world_release(struct hp_world *w)
{
	detach_all(w);
	if (w->mem >= 0)
		close(w->mem);
	w->mem = -1;
	free(w->t);
	w->t = NULL;
	w->n = w->cap = 0;
}

int hp_world_read(struct hp_world *w, uint64_t addr, void *buf, size_t len)
{
	ssize_t n = pread(w->mem, buf, len, (off_t)addr);
	return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
}

int hp_world_write(struct hp_world *w, uint64_t addr, const void *buf, size_t len)
{
	ssize_t n = pwrite(w->mem, buf, len, (off_t)addr);
	return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
}

ssize_t hp_world_index(const struct hp_world *w, pid_t tid)
{
	return find(w, tid);
}

int hp_world_set_pc(struct hp_world *w, size_t i, uint64_t pc)
{
	struct hp_thread *t = &w->t[i];
	struct user_regs_struct r = t->regs;

	r.rip = pc;
	if (ptrace(PTRACE_SETREGS, t->tid, 0, &r) < 0)
		return -errno;
	t->regs = r; /* its new state: nothing to put back */
	return 0;
}

/* The end of the mapping holding addr (its stack), from /proc/PID/maps. */
static uint64_t mapping_end(pid_t pid, uint64_t addr)
{
	char path[64], line[512];
	FILE *fp;
	uint64_t end = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	if (!(fp = fopen(path, "r")))
		return 0;
	while (fgets(line, sizeof(line), fp)) {
		unsigned long long a, b;
		if (sscanf(line, "%llx-%llx", &a, &b) == 2 && addr >= a && addr < b) {
			end = b;
			break;
		}
	}
	fclose(fp);
	return end;
}

ssize_t hp_world_inside(struct hp_world *w, uint64_t lo, uint64_t hi, size_t scan_bytes, char *where, size_t wlen)
{
	uint64_t *buf = malloc(scan_bytes + 8);

	for (size_t i = 0; i < w->n; i++) {
		const struct hp_thread *t = &w->t[i];
		if (t->regs.rip >= lo && t->regs.rip < hi) {
			snprintf(where, wlen, "thread %d runs there (pc 0x%llx)", t->tid, t->regs.rip);
			free(buf);
			return (ssize_t)i;
		}
		if (!buf)
			continue;
		uint64_t sp = t->regs.rsp & ~(uint64_t)7, end = mapping_end(w->pid, sp);
		size_t len = end > sp ? (size_t)(end - sp) : 0;
		if (len > scan_bytes)
			len = scan_bytes;
		if (!len)
			continue;
		ssize_t got = pread(w->mem, buf, len, (off_t)sp);
		for (ssize_t k = 0; k < got / 8; k++)
			if (buf[k] >= lo && buf[k] < hi) {
				snprintf(where, wlen, "thread %d's stack holds 0x%" PRIx64 " at 0x%" PRIx64, t->tid,
					 buf[k], sp + 8 * (uint64_t)k);
				free(buf);
				return (ssize_t)i;
			}
	}
	free(buf);
	return -1;
}
