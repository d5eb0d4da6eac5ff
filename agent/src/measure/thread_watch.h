/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proof that a process stayed single-threaded for a window: its one thread
 * seized with ptrace (PTRACE_O_TRACECLONE, _TRACEFORK, _TRACEVFORK), so every
 * task it starts stops the parent at an event the watch sees. A new task
 * that shares the process's memory (kcmp KCMP_VM; a thread always does) ends
 * the proof; a forked process with its own memory is let go. What plain
 * (unlocked) inline counters need to be exact (docs/decisions.md).
 *
 * The watch holds the process stopped when it starts (hp_watch_start) and
 * when hp_watch_hold is called, so counters read then are a consistent
 * snapshot; hp_watch_resume lets it run. Between, hp_watch_poll must be
 * called often: signals the target receives wait in a ptrace stop until it
 * forwards them. Only the thread that started the watch may call the rest.
 */
#ifndef HOTPATH_MEASURE_THREAD_WATCH_H
#define HOTPATH_MEASURE_THREAD_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#define HP_WATCH_MAX_TASKS 64

struct hp_watch_task {
	int tid;
	int pending_sig; /* a signal to deliver when it resumes */
	bool group_stop; /* in a group-stop: resumed with PTRACE_LISTEN */
	bool detach;     /* a process with its own memory: let go at its first stop */
	bool gone;
};

struct hp_thread_watch {
	int pid;
	struct hp_watch_task t[HP_WATCH_MAX_TASKS];
	size_t n;
	bool held;     /* every task stopped by hp_watch_hold */
	bool single;   /* no task that shares the memory appeared (so far) */
	char why[256]; /* when !single: which task appeared, or why there is no proof */
};

/*
 * Seize pid's thread and stop it: 1 when it has exactly one thread (the
 * process is held stopped, proof begun), 0 when not (why says; nothing
 * seized), negative errno when it cannot be seized (why says; nothing seized).
 */
int hp_watch_start(struct hp_thread_watch *w, int pid);
/* Handle the stops that are due without blocking: new tasks (which end the
 * proof when they share the memory), signals forwarded, group-stops kept.
 * 1 while a task is alive, 0 when every watched task has exited. */
int hp_watch_poll(struct hp_thread_watch *w);
/* Stop every watched task and keep it stopped: 0, or negative errno. */
int hp_watch_hold(struct hp_thread_watch *w);
/* Let every held task run again. */
void hp_watch_resume(struct hp_thread_watch *w);
/* Stop and detach every watched task (they run on as if never traced). */
void hp_watch_end(struct hp_thread_watch *w);

#endif
