/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Processes by name and by handle: the running processes with a given command
 * name (/proc/PID/comm), a process's command name, and a pidfd that becomes
 * readable when the process exits (so an exit is noticed at once, without
 * polling /proc, and a recycled pid is never mistaken for the old process).
 */
#ifndef HOTPATH_PROCESSES_H
#define HOTPATH_PROCESSES_H

#include <stddef.h>
#include <stdint.h>

#define HP_COMM_LEN 16 /* TASK_COMM_LEN: 15 characters and a NUL */

/* Every process whose command name is comm (threads excluded): fills up to
 * max pids in ascending order and returns how many exist (may exceed max),
 * or a negative errno. */
int hp_pids_by_comm(const char *comm, int *pids, size_t max);

/* The command name of process pid into comm[HP_COMM_LEN]; 0 or -ESRCH. */
int hp_process_comm(int pid, char *comm);

/* The path of the process's executable (/proc/PID/exe) into buf; 0 or a
 * negative errno. */
int hp_process_exe(int pid, char *buf, size_t len);

/* A pidfd for pid (readable once it exits), or a negative errno. */
int hp_pidfd_open(int pid);

/* When process pid started (field 22 of /proc/PID/stat: clock ticks after
 * boot): with the pid it names one process, never a later one that reuses
 * the pid. 0 with *ticks, or -ESRCH. */
int hp_process_start_time(int pid, uint64_t *ticks);

/* The CPU time process pid's threads have used (fields 14 and 15 of
 * /proc/PID/stat, utime + stime: clock ticks, sysconf(_SC_CLK_TCK) a
 * second). 0 with *ticks, or -ESRCH. */
int hp_process_cpu_ticks(int pid, uint64_t *ticks);

/* Whether process pid, started at tick start (hp_process_start_time), still
 * runs: 1, or 0 when it exited (a zombie its parent has not reaped yet
 * included). */
int hp_process_running(int pid, uint64_t start);

/* The thread ids of process pid (its /proc/PID/task), at most max: how
 * many, or a negative errno. */
int hp_process_threads(int pid, int *tids, int max);

/* Whether thread tid of process tgid still exists (1), not (0). */
int hp_thread_alive(int tgid, int tid);

/* The cgroup v2 id of the cgroup at path: absolute on a cgroup2 file system,
 * or relative to the cgroup2 mount. 0 with *id, or a negative errno with err. */
int hp_cgroup_id(const char *path, uint64_t *id, char *err, size_t errlen);

#endif
