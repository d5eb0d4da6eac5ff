// SPDX-License-Identifier: Apache-2.0
/*
 * Finding and watching processes (see processes.h): a scan of /proc for
 * command names, pidfd_open(2) for exits, tgkill(2) with signal 0 for thread
 * liveness, and statfs/stat for cgroup v2 ids (a cgroup's id is the inode
 * number of its directory on the cgroup2 file system).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>

#include "host/processes.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#define CGROUP2_MAGIC 0x63677270

int hp_process_comm(int pid, char *comm)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	ssize_t n = read(fd, comm, HP_COMM_LEN - 1);
	int e = errno;
	close(fd);
	if (n < 0)
		return e == ESRCH ? -ESRCH : -e;
	comm[n] = '\0';
	comm[strcspn(comm, "\n")] = '\0';
	return 0;
}

int hp_process_exe(int pid, char *buf, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	ssize_t n = readlink(path, buf, len ? len - 1 : 0);
	if (n < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	buf[n] = '\0';
	return 0;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return x < y ? -1 : x > y;
}

int hp_pids_by_comm(const char *comm, int *pids, size_t max)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	size_t n = 0;
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char *end, c[HP_COMM_LEN];
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0 || hp_process_comm((int)pid, c) < 0 || strncmp(c, comm, HP_COMM_LEN - 1))
			continue;
		if (n < max)
			pids[n] = (int)pid;
		n++;
	}
	closedir(d);
	qsort(pids, n < max ? n : max, sizeof(int), cmp_int);
	return (int)n;
}

int hp_pidfd_open(int pid)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	return fd < 0 ? -errno : fd;
}

int hp_thread_alive(int tgid, int tid)
{
	return syscall(SYS_tgkill, tgid, tid, 0) == 0 || errno == EPERM;
}

static int cgroup2_mount(char *out, size_t len)
{
	char line[4096];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	int r = -ENOENT;
	while (r && fgets(line, sizeof(line), f)) {
		char point[2048];
		if (strstr(line, " - cgroup2 ") && sscanf(line, "%*s %*s %*s %*s %2047s", point) == 1) {
			snprintf(out, len, "%s", point);
			r = 0;
		}
	}
	fclose(f);
	return r;
}

int hp_cgroup_id(const char *path, uint64_t *id, char *err, size_t errlen)
{
	char full[4096], mnt[2048];
	struct statfs sf;
	struct stat st;
	if (!path || !*path) {
		snprintf(err, errlen, "empty cgroup path");
		return -EINVAL;
	}
	if (cgroup2_mount(mnt, sizeof(mnt)) < 0) {
		snprintf(err, errlen, "no cgroup2 file system is mounted: cgroup predicates need cgroup v2");
		return -ENOENT;
	}
	if (path[0] == '/' && statfs(path, &sf) == 0 && sf.f_type == CGROUP2_MAGIC)
		snprintf(full, sizeof(full), "%s", path);
	else
		snprintf(full, sizeof(full), "%s/%s", mnt, path[0] == '/' ? path + 1 : path);
	if (statfs(full, &sf) < 0 || stat(full, &st) < 0) {
		int e = errno;
		snprintf(err, errlen, "cgroup '%s' not found (looked at %s): %s", path, full, strerror(e));
		return -e;
	}
	if (sf.f_type != CGROUP2_MAGIC || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "%s is not a cgroup v2 directory (cgroup2 is mounted at %s)", full, mnt);
		return -EINVAL;
	}
	*id = (uint64_t)st.st_ino;
	return 0;
}

/* Fields first..first+n-1 (numbered from 1, after the command name: 4 or
 * more) of /proc/PID/stat as numbers, and its state (field 3) into *state
 * (may be NULL). 0, or -ESRCH. */
static int stat_fields(int pid, int first, int n, uint64_t *out, char *state)
{
	char path[64], buf[1024];
	int fd;
	ssize_t len;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -ESRCH;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return -ESRCH;
	buf[len] = 0;
	/* The command name may hold spaces and parentheses: fields follow the last ')'. */
	char *p = strrchr(buf, ')');
	if (!p || !p[1] || !p[2])
		return -ESRCH;
	if (state)
		*state = p[2];
	/* ") S ppid ...": field 3 is the state; skip to field first. */
	for (int field = 2; field < first; field++)
		if (!(p = strchr(p + 1, ' ')))
			return -ESRCH;
	for (int i = 0; i < n; i++) {
		if (!p)
			return -ESRCH;
		out[i] = strtoull(p + 1, NULL, 10);
		p = strchr(p + 1, ' ');
	}
	return 0;
}

int hp_process_start_time(int pid, uint64_t *ticks)
{
	return stat_fields(pid, 22, 1, ticks, NULL);
}

int hp_process_cpu_ticks(int pid, uint64_t *ticks)
{
	uint64_t f[2]; /* utime, stime */
	if (stat_fields(pid, 14, 2, f, NULL) < 0)
		return -ESRCH;
	*ticks = f[0] + f[1];
	return 0;
}

int hp_process_running(int pid, uint64_t start)
{
	uint64_t st = 0;
	char state = 0;
	return stat_fields(pid, 22, 1, &st, &state) == 0 && st == start && state != 'Z' && state != 'X';
}

int hp_process_threads(int pid, int *tids, int max)
{
	char path[64];
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	for (struct dirent *e; (e = readdir(d)) && n < max;)
		if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
			tids[n++] = atoi(e->d_name);
	closedir(d);
	return n;
}
