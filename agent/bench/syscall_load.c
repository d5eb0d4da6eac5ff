// SPDX-License-Identifier: Apache-2.0
/*
 * A syscall-bound workload for bench/sampling_overhead: one thread reads one
 * byte from /dev/zero in a loop for the given seconds and prints how many
 * reads it made, over how much wall time and how much of its own CPU time
 * (user + system). Whole-system sampling costs it an interrupt per sample on
 * its CPU, which its throughput shows and the sampler's own CPU time does not.
 *
 * usage: syscall_load SECONDS  ->  "reads N wall_s W cpu_s C"
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_s(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 5;
	int fd = open("/dev/zero", O_RDONLY);
	char b;
	long n = 0;
	if (fd < 0 || secs <= 0) {
		fprintf(stderr, "usage: syscall_load SECONDS (needs /dev/zero)\n");
		return 2;
	}
	double w0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
	while (now_s(CLOCK_MONOTONIC) - w0 < secs) {
		for (int i = 0; i < 1000; i++)
			if (read(fd, &b, 1) != 1)
				return 1;
		n += 1000;
	}
	printf("reads %ld wall_s %.6f cpu_s %.6f\n", n, now_s(CLOCK_MONOTONIC) - w0,
	       now_s(CLOCK_PROCESS_CPUTIME_ID) - c0);
	return 0;
}
