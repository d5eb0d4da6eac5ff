/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which file backs a code address of a process, and at what file offset:
 * what uprobes need, since the kernel places them by (inode, file offset),
 * not by address. Read from /proc/PID/maps; the path handed back opens the
 * very file the process maps (its /proc/PID/map_files link), so a binary
 * replaced on disk or a process in another mount namespace still gets the
 * probe in the right inode.
 */
#ifndef HOTPATH_PROCMAPS_H
#define HOTPATH_PROCMAPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct hp_code_location {
	char path[96];        /* /proc/PID/map_files/START-END: the mapped file itself */
	char file[4096];      /* the file's name as /proc/PID/maps shows it */
	uint64_t file_offset; /* of addr within that file */
	uint64_t map_start, map_end;
	dev_t dev;
	ino_t ino;
};

/*
 * Find the executable file mapping of process pid (0 = this process) that
 * contains addr. Returns 0, -ESRCH (no such process), -ENOENT (addr is not in
 * an executable file mapping) or another negative errno.
 */
int hp_code_location(pid_t pid, uint64_t addr, struct hp_code_location *out);

/*
 * Whether process pid maps the file (dev, ino) executable: 1 yes, 0 no, or a
 * negative errno (-ESRCH when the process is gone).
 */
int hp_process_maps_file(pid_t pid, dev_t dev, ino_t ino);

#endif
