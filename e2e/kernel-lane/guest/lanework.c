// SPDX-License-Identifier: Apache-2.0
/*
 * lanework: the kernel lane's guest workload, a program whose system calls
 * are known exactly so that exact measurements can be checked against them.
 *
 *   lanework read N [GO_FILE]   open /proc/hotpath_lane once and make exactly
 *                               N read() calls of one byte on it
 *   lanework nap K MS [GO_FILE] make K write()s of "nap MS": each sleeps MS
 *                               milliseconds inside the module's lane_nap()
 *
 * With GO_FILE the program first prints its pid and waits (stat() polling,
 * which reads nothing) until GO_FILE exists, so a measurement can be armed on
 * its pid before the counted calls start. Nothing else it does reaches
 * vfs_read: the counted calls are the only read()s of the process. Built
 * static, so the dynamic loader's own reads do not exist either.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LANE_FILE "/proc/hotpath_lane"

static void wait_for(const char *go)
{
	struct timespec tick = { 0, 20 * 1000 * 1000 };
	struct stat st;
	char line[64];
	int n;

	/* write(2) directly: stdio could buffer the line past the wait. */
	n = snprintf(line, sizeof(line), "lanework pid %d waiting for %s\n", (int)getpid(), go);
	if (write(1, line, (size_t)n) < 0)
		exit(1);
	while (stat(go, &st) != 0)
		nanosleep(&tick, NULL);
}

static long number(const char *s, const char *what, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi) {
		fprintf(stderr, "lanework: %s must be an integer in %ld..%ld, not '%s'\n", what, lo, hi, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	int fd;

	if (argc >= 3 && !strcmp(argv[1], "read")) {
		long n = number(argv[2], "N", 0, 100000000), i;
		char c;

		if ((fd = open(LANE_FILE, O_RDONLY)) < 0) {
			fprintf(stderr, "lanework: cannot open %s: %s (is hotpath_lane.ko loaded?)\n", LANE_FILE,
				strerror(errno));
			return 1;
		}
		if (argc >= 4)
			wait_for(argv[3]);
		for (i = 0; i < n; i++) {
			if (read(fd, &c, 1) != 1) {
				fprintf(stderr, "lanework: read %ld of %ld failed: %s\n", i + 1, n, strerror(errno));
				return 1;
			}
		}
		close(fd);
		printf("lanework pid %d made %ld reads\n", (int)getpid(), n);
		return 0;
	}
	if (argc >= 4 && !strcmp(argv[1], "nap")) {
		long k = number(argv[2], "K", 0, 1000000), ms = number(argv[3], "MS", 1, 1000), i;
		char cmd[32];
		int len = snprintf(cmd, sizeof(cmd), "nap %ld", ms);

		if ((fd = open(LANE_FILE, O_WRONLY)) < 0) {
			fprintf(stderr, "lanework: cannot open %s: %s (is hotpath_lane.ko loaded?)\n", LANE_FILE,
				strerror(errno));
			return 1;
		}
		if (argc >= 5)
			wait_for(argv[4]);
		for (i = 0; i < k; i++) {
			if (write(fd, cmd, (size_t)len) != len) {
				fprintf(stderr, "lanework: nap %ld of %ld failed: %s\n", i + 1, k, strerror(errno));
				return 1;
			}
		}
		close(fd);
		printf("lanework pid %d made %ld naps of %ld ms\n", (int)getpid(), k, ms);
		return 0;
	}
	fprintf(stderr, "usage: lanework read N [GO_FILE] | lanework nap K MS [GO_FILE]\n");
	return 2;
}
