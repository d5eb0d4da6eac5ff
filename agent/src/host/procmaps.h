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

/*
 * The program's own bytes in buf, which holds [addr, addr+len) as read from
 * process pid's memory: a breakpoint someone placed in its code (a uprobe,
 * which the kernel writes into the process's text as int3; a debugger's)
 * is an int3 byte (0xcc) where the file mapped there holds another byte,
 * and is replaced by the file's byte. Bytes outside executable file
 * mappings are left as they are. The addresses replaced go to sites (at
 * most max of them; sites may be NULL). Returns how many bytes were
 * replaced, or a negative errno (-ESRCH when the process is gone).
 */
int hp_unprobe_bytes(pid_t pid, uint64_t addr, uint8_t *buf, size_t len, uint64_t *sites, size_t max);

#endif
