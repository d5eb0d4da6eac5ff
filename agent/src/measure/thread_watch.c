// SPDX-License-Identifier: Apache-2.0
/*
 * The single-thread proof of a window (thread_watch.h): ptrace with clone,
 * fork and vfork events, kcmp for shared memory.
 */
#include <errno.h>
#include <linux/kcmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host/processes.h"
#include "measure/thread_watch.h"

/* The threads of pid now: their count (up to 1024), the first one's id in
 * *tid. */
static int count_threads(int pid, int *tid)
{
	int tids[1024];
	int n = hp_process_threads(pid, tids, 1024);
	if (n > 0)
		*tid = tids[0];
	return n;
}

static void resume_one(struct hp_watch_task *t)
{
	if (t->gone)
		return;
	if (t->group_stop)
		ptrace(PTRACE_LISTEN, t->tid, 0, 0);
	else
		ptrace(PTRACE_CONT, t->tid, 0, (void *)(long)t->pending_sig);
	t->pending_sig = 0;
}

/* A task the watched one started (event ev): does it share the memory? A
 * process with its own memory is let go at its first stop; anything else
 * ends the proof. */
static void new_task(struct hp_thread_watch *w, int parent, int tid, int ev)
{
	long same = syscall(SYS_kcmp, w->pid, tid, KCMP_VM, 0, 0);
	bool own_memory = same > 0; /* 0: the same memory; < 0: unknown, taken as shared */
	if (!own_memory && w->single) {
		w->single = false;
		snprintf(w->why, sizeof(w->why), "%s %d started by thread %d during the window%s",
			 ev == PTRACE_EVENT_CLONE ? "thread" : "process", tid, parent,
			 ev == PTRACE_EVENT_CLONE ? "" : ", sharing its memory");
	}
	if (own_memory || w->n == HP_WATCH_MAX_TASKS) {
		/* Traced from birth: its first stop is due; then let it go. */
		int st;
		if (waitpid(tid, &st, __WALL) == tid && WIFSTOPPED(st))
			ptrace(PTRACE_DETACH, tid, 0, 0);
		return;
	}
	w->t[w->n++] = (struct hp_watch_task){ .tid = tid };
}

static void on_stop(struct hp_thread_watch *w, size_t i, int st, bool hold)
{
	struct hp_watch_task *t = &w->t[i];
	if (WIFEXITED(st) || WIFSIGNALED(st)) {
		t->gone = true;
		return;
	}
	if (!WIFSTOPPED(st))
		return;
	int ev = st >> 16, sig = WSTOPSIG(st);
	t->group_stop = false;
	if (ev == PTRACE_EVENT_CLONE || ev == PTRACE_EVENT_FORK || ev == PTRACE_EVENT_VFORK) {
		unsigned long msg = 0;
		if (ptrace(PTRACE_GETEVENTMSG, t->tid, 0, &msg) == 0)
			new_task(w, t->tid, (int)msg, ev);
		sig = 0;
	} else if (ev == PTRACE_EVENT_STOP) {
		t->group_stop = sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
		sig = 0;
	} else if (ev) {
		sig = 0;
	}
	if (sig)
		t->pending_sig = sig; /* a signal-delivery stop: deliver it on resuming */
	if (!hold)
		resume_one(t);
}

int hp_watch_start(struct hp_thread_watch *w, int pid)
{
	int tid = 0;
	memset(w, 0, sizeof(*w));
	w->pid = pid;
	int n = count_threads(pid, &tid);
	if (n != 1) {
		if (n < 0)
			snprintf(w->why, sizeof(w->why), "cannot list its threads: %s", strerror(-n));
		else
			snprintf(w->why, sizeof(w->why), "the process has %d threads", n);
		return n < 0 ? n : 0;
	}
	long opts = PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK;
	if (ptrace(PTRACE_SEIZE, tid, 0, (void *)opts) < 0) {
		int e = errno;
		snprintf(w->why, sizeof(w->why), "cannot watch its thread with ptrace: %s", strerror(e));
		return -e;
	}
	w->t[0] = (struct hp_watch_task){ .tid = tid };
	w->n = 1;
	w->single = true;
	if (hp_watch_hold(w) < 0 || w->t[0].gone) {
		snprintf(w->why, sizeof(w->why), "the process exited");
		hp_watch_end(w);
		return -ESRCH;
	}
	/* Stopped: any thread started before the seize is in the list now. */
	n = count_threads(pid, &tid);
	if (w->single && n != 1) {
		w->single = false;
		snprintf(w->why, sizeof(w->why), "the process had %d threads when its thread was stopped", n);
	}
	if (!w->single) {
		hp_watch_end(w);
		return 0;
	}
	return 1;
}

int hp_watch_poll(struct hp_thread_watch *w)
{
	int alive = 0;
	for (size_t i = 0; i < w->n; i++) {
		int st;
		/* A few stops per task and call: a signal storm cannot hold the caller. */
		for (int k = 0; k < 16 && !w->t[i].gone; k++) {
			pid_t r = waitpid(w->t[i].tid, &st, __WALL | WNOHANG);
			if (r < 0 && errno == ECHILD)
				w->t[i].gone = true;
			if (r <= 0)
				break;
			on_stop(w, i, st, false);
		}
		alive += !w->t[i].gone;
	}
	return alive > 0;
}

int hp_watch_hold(struct hp_thread_watch *w)
{
	if (w->held)
		return 0;
	w->held = true;
	for (size_t i = 0; i < w->n; i++)
		if (!w->t[i].gone)
			ptrace(PTRACE_INTERRUPT, w->t[i].tid, 0, 0);
	/* w->n grows when a task started one just now: its first stop is due too. */
	for (size_t i = 0; i < w->n; i++) {
		int st;
		if (w->t[i].gone)
			continue;
		pid_t r;
		while ((r = waitpid(w->t[i].tid, &st, __WALL)) < 0 && errno == EINTR)
			;
		if (r < 0) {
			w->t[i].gone = true;
			continue;
		}
		on_stop(w, i, st, true);
	}
	for (size_t i = 0; i < w->n; i++)
		if (!w->t[i].gone)
			return 0;
	return -ESRCH;
}

void hp_watch_resume(struct hp_thread_watch *w)
{
	w->held = false;
	for (size_t i = 0; i < w->n; i++)
		resume_one(&w->t[i]);
}

void hp_watch_end(struct hp_thread_watch *w)
{
	hp_watch_hold(w);
	for (size_t i = 0; i < w->n; i++)
		if (!w->t[i].gone)
			ptrace(PTRACE_DETACH, w->t[i].tid, 0,
			       (void *)(long)(w->t[i].group_stop ? 0 : w->t[i].pending_sig));
	w->n = 0;
	w->held = false;
}
