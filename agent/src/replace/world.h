/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A stopped process: every thread seized with ptrace and interrupted,
 * threads created meanwhile included (PTRACE_O_TRACECLONE attaches them as
 * they start, and /proc/PID/task is read again until no thread is new),
 * with each thread's registers. Memory is read and written through
 * /proc/PID/mem, which writes into read-only text (copy on write of the
 * page) where process_vm_writev cannot. Releasing detaches every thread,
 * putting back the registers the agent changed and any signal that
 * arrived meanwhile. If the agent dies, the kernel detaches the threads
 * and they run on: nothing here leaves a thread in a state it cannot
 * continue from (see inject.h for the one place registers change).
 */
#ifndef HOTPATH_REPLACE_WORLD_H
#define HOTPATH_REPLACE_WORLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

struct hp_thread {
	pid_t tid;
	struct user_regs_struct regs; /* as the thread stopped, restart-normalized once changed */
	bool dirty;                   /* regs must be set back before it runs */
	bool in_syscall_stop;         /* left in a syscall stop by an injection */
	bool busy;                    /* running injected code on its own: do not touch its registers */
	int sig;                      /* a signal that arrived while stopped, delivered on release */
};

struct hp_world {
	pid_t pid;
	int mem; /* /proc/PID/mem, read-write */
	struct hp_thread *t;
	size_t n, cap;
	double stop_seconds; /* how long the last stop took */
};

/*
 * Stop every thread of pid. Returns 0, or a negative errno with err saying
 * why: -ESRCH the process does not exist or exited, -EPERM ptrace refused
 * (another tracer holds it, naming it; Yama's ptrace_scope; missing
 * CAP_SYS_PTRACE). Nothing stays attached on failure.
 */
int hp_world_stop(pid_t pid, struct hp_world *w, char *err, size_t errlen);
/* Let every thread run for usec microseconds and stop them all again
 * (threads that appeared meanwhile included). */
int hp_world_run_briefly(struct hp_world *w, unsigned usec, char *err, size_t errlen);
/* While one thread (keep) runs injected code that may wait for a lock
 * another thread holds, let every other thread run: continue them, keep
 * them running (poll: continue any that stops, delivering its signal, and
 * let threads they create run too), and stop them all again. */
int hp_world_run_others(struct hp_world *w, size_t keep);
void hp_world_poll_others(struct hp_world *w, size_t keep);
int hp_world_stop_others(struct hp_world *w, size_t keep, char *err, size_t errlen);
/* Detach every thread (registers put back, pending signals delivered). */
void hp_world_release(struct hp_world *w);

int hp_world_read(struct hp_world *w, uint64_t addr, void *buf, size_t len);
int hp_world_write(struct hp_world *w, uint64_t addr, const void *buf, size_t len);

/* The index of thread tid (indices change when threads go), or -1. */
ssize_t hp_world_index(const struct hp_world *w, pid_t tid);
/* Set the program counter of thread i (a stopped thread outside a system call). */
int hp_world_set_pc(struct hp_world *w, size_t i, uint64_t pc);

/* Whether a thread may be running code in [lo, hi): its PC is inside, or a
 * word on its stack (from its stack pointer to the top of that mapping, at
 * most scan_bytes) points inside (a return address, a saved signal frame;
 * stale words too, so the answer errs towards "yes"). Returns the index of
 * the first such thread, or -1; where says how (pc / stack). */
ssize_t hp_world_inside(struct hp_world *w, uint64_t lo, uint64_t hi, size_t scan_bytes, char *where, size_t wlen);

#endif
