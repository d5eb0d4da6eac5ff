// SPDX-License-Identifier: Apache-2.0
/*
 * What every live workload driver of the benchmarks speaks (SQLite's,
 * driver.c beside this file; Lua's, bench/replace_lua/driver.c), so that
 * live.py, bench/replace and bench/layout_vs_bolt drive any of them. The
 * process stays up between rounds so code can be installed into it and
 * reverted while it runs, and every round is timed inside the process:
 *   stdin "run N"  runs the workload N times, prints "ns T cpu C rows R" (the
 *                  round's CLOCK_MONOTONIC time, its thread CPU time, which
 *                  other load on the machine disturbs less, and a checksum
 *                  of the results)
 *   stdin "quit"   exits
 * With --loop it runs rounds of 100 passes until it is stopped instead,
 * printing each round's line: a program to attach from the console and
 * optimize while it runs (docs/plans.md).
 * With HOTPATH_REPLAY=FILE it first puts an installed copy in place by
 * itself (FILE: the code heap's address, length and bytes, then each
 * patched range with its bytes, as bench/replace dumps them from a process
 * the agent installed into), so a simulator that cannot be traced
 * (valgrind's cachegrind) runs the same layout; the drivers are built
 * without PIE so their addresses are the same there.
 * A driver defines its setup and one workload pass, adds its results into
 * `checksum`, and calls live_driver_main from main.
 */
#ifndef HOTPATH_BENCH_LIVE_DRIVER_H
#define HOTPATH_BENCH_LIVE_DRIVER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static uint64_t checksum;

static int replay(const char *path)
{
	FILE *fp = fopen(path, "rb");
	unsigned long long addr, len;
	unsigned n;

	if (!fp || fscanf(fp, "heap %llx %llx\n", &addr, &len) != 2)
		return -1;
	uint8_t *heap = mmap((void *)(uintptr_t)addr, len, PROT_READ | PROT_WRITE | PROT_EXEC,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (heap != (uint8_t *)(uintptr_t)addr || fread(heap, 1, len, fp) != len)
		return -1;
	mprotect(heap, len, PROT_READ | PROT_EXEC);
	while (fscanf(fp, " patch %llx %u:", &addr, &n) == 2) {
		uint8_t b[16];
		for (unsigned i = 0; i < n && i < 16; i++) {
			unsigned v;
			if (fscanf(fp, "%2x", &v) != 1)
				return -1;
			b[i] = (uint8_t)v;
		}
		uintptr_t page = (uintptr_t)addr & ~(uintptr_t)4095;
		mprotect((void *)page, 8192, PROT_READ | PROT_WRITE | PROT_EXEC);
		memcpy((void *)(uintptr_t)addr, b, n);
		mprotect((void *)page, 8192, PROT_READ | PROT_EXEC);
	}
	fclose(fp);
	return 0;
}

/* One round of n workload passes, timed; its line on stdout. */
static void round_of(void (*pass)(int), int n)
{
	struct timespec a, b, ca, cb;
	checksum = 0;
	clock_gettime(CLOCK_MONOTONIC, &a);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ca);
	for (int i = 0; i < n; i++)
		pass(i % 1000);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cb);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("ns %lld cpu %lld rows %llu\n",
	       (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
	       (long long)(cb.tv_sec - ca.tv_sec) * 1000000000LL + (cb.tv_nsec - ca.tv_nsec),
	       (unsigned long long)checksum);
	fflush(stdout);
}

/* The protocol above: the copy replayed, SETUP run, "ready", then rounds of PASS until "quit" (or
 * forever with --loop). Gives main's exit status. */
static int live_driver_main(int argc, char **argv, void (*setup)(void), void (*pass)(int))
{
	char line[128];
	bool loop = argc > 1 && !strcmp(argv[1], "--loop");

	if (getenv("HOTPATH_REPLAY") && replay(getenv("HOTPATH_REPLAY")) < 0) {
		fprintf(stderr, "cannot replay %s\n", getenv("HOTPATH_REPLAY"));
		return 1;
	}
	setup();
	printf("ready\n");
	fflush(stdout);
	while (loop)
		round_of(pass, 100);
	while (fgets(line, sizeof(line), stdin)) {
		int n;
		if (!strncmp(line, "quit", 4))
			break;
		if (sscanf(line, "run %d", &n) == 1)
			round_of(pass, n);
	}
	return 0;
}

#endif
