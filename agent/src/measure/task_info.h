/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the sampler needs to know about the tasks it samples, cached: a
 * thread's command name (from /proc, kept current by the kernel's COMM
 * records) and where a user address of a process lies (the file its
 * executable mapping comes from and the offset in that file, from
 * /proc/PID/maps). Used only from the sampler's drain thread; the caches are
 * bounded and aged between intervals, so a reused pid or a new mapping is
 * picked up within a second or two.
 */
#ifndef HOTPATH_TASK_INFO_H
#define HOTPATH_TASK_INFO_H

#include <stdint.h>

struct hp_task_info;

struct hp_task_info *hp_task_info_new(void);
void hp_task_info_free(struct hp_task_info *ti);
/* The command name of thread tid of process pid ("swapper" for the idle task, pid 0; "" when the thread is
 * gone before it was seen). Valid until the next hp_task_info_tick. */
const char *hp_task_comm(struct hp_task_info *ti, uint32_t pid, uint32_t tid);
/* A COMM record: thread tid now runs command comm. */
void hp_task_set_comm(struct hp_task_info *ti, uint32_t pid, uint32_t tid, const char *comm);
/*
 * Where user address addr of process pid lies: 1 and the file's path (valid
 * until the next hp_task_info_tick) and the offset in that file when a file is
 * mapped executable there (pseudo-files such as "[vdso]" count as files); 0
 * when no file backs it.
 */
int hp_task_map_addr(struct hp_task_info *ti, uint32_t pid, uint64_t addr, const char **path, uint64_t *file_offset);
/* Between intervals: age the caches (entries are re-read from /proc when older than two ticks). */
void hp_task_info_tick(struct hp_task_info *ti);

#endif
