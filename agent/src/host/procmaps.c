// SPDX-License-Identifier: Apache-2.0
/*
 * Reads /proc/PID/maps to turn a code address into (file, file offset), the
 * coordinates uprobes are placed by, and to tell whether a process maps a
 * given file. Lines are parsed with sscanf; a process that exits while it is
 * being read gives -ESRCH.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/sysmacros.h>

#include "host/procmaps.h"

struct maps_line {
	uint64_t start, end, offset, ino;
	unsigned dev_major, dev_minor;
	char perms[8];
	const char *file; /* points into the line buffer; "" for anonymous */
};

static bool parse_line(char *line, struct maps_line *l)
{
	unsigned long long s, e, off, ino;
	int n = 0;

	if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &s, &e, l->perms, &off, &l->dev_major, &l->dev_minor, &ino,
		   &n) < 7)
		return false;
	l->start = s;
	l->end = e;
	l->offset = off;
	l->ino = ino;
	char *file = line + n;
	file[strcspn(file, "\n")] = '\0';
	l->file = n ? file : "";
	return true;
}

static FILE *open_maps(pid_t pid)
{
	char path[64];

	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/maps");
	return fopen(path, "re");
}

int hp_code_location(pid_t pid, uint64_t addr, struct hp_code_location *out)
{
	char line[4352];
	struct maps_line l;
	FILE *f = open_maps(pid);

	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	while (fgets(line, sizeof(line), f)) {
		if (!parse_line(line, &l) || addr < l.start || addr >= l.end)
			continue;
		fclose(f);
		if (l.perms[2] != 'x' || l.file[0] != '/' || !l.ino)
			return -ENOENT;
		memset(out, 0, sizeof(*out));
		snprintf(out->path, sizeof(out->path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64,
			 pid ? (int)pid : (int)getpid(), l.start, l.end);
		snprintf(out->file, sizeof(out->file), "%s", l.file);
		out->file_offset = addr - l.start + l.offset;
		out->map_start = l.start;
		out->map_end = l.end;
		out->dev = makedev(l.dev_major, l.dev_minor);
		out->ino = (ino_t)l.ino;
		return 0;
	}
	fclose(f);
	return -ENOENT;
}

int hp_process_maps_file(pid_t pid, dev_t dev, ino_t ino)
{
	char line[4352];
	struct maps_line l;
	FILE *f = open_maps(pid);

	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	int found = 0;
	while (!found && fgets(line, sizeof(line), f))
		found = parse_line(line, &l) && l.perms[2] == 'x' && (ino_t)l.ino == ino &&
			makedev(l.dev_major, l.dev_minor) == dev;
	fclose(f);
	return found;
}

int hp_unprobe_bytes(pid_t pid, uint64_t addr, uint8_t *buf, size_t len, uint64_t *sites, size_t max)
{
	size_t i = 0, found = 0;

	while (i < len) {
		uint8_t *cc = memchr(buf + i, 0xcc, len - i);
		if (!cc)
			break;
		i = (size_t)(cc - buf);
		/* One read of the file for the rest of this mapping. */
		struct hp_code_location loc;
		int r = hp_code_location(pid, addr + i, &loc);
		if (r == -ESRCH)
			return r;
		if (r < 0) {
			i++;
			continue;
		}
		size_t n = loc.map_end - (addr + i) < len - i ? (size_t)(loc.map_end - (addr + i)) : len - i;
		uint8_t *file = malloc(n);
		int fd = open(loc.path, O_RDONLY | O_CLOEXEC);
		ssize_t got = file && fd >= 0 ? pread(fd, file, n, (off_t)loc.file_offset) : -1;
		if (fd >= 0)
			close(fd);
		for (size_t k = 0; got > 0 && k < (size_t)got; k++) {
			if (buf[i + k] != 0xcc || file[k] == 0xcc)
				continue;
			buf[i + k] = file[k];
			if (sites && found < max)
				sites[found] = addr + i + k;
			found++;
		}
		free(file);
		i += n;
	}
	return (int)(found > INT32_MAX ? INT32_MAX : found);
}
