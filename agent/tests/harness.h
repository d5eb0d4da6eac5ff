/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Minimal test harness: each case is a function run by RUN(); it prints
 * "ok - name", "FAIL - name: reason" (the first failed check) or, for a case
 * this machine cannot run, "ok - name # SKIP reason" (TAP's form), and
 * tests/run.sh sums those lines over every test program: a skip is counted
 * and listed as skipped, never as passed.
 */
#ifndef HOTPATH_TEST_HARNESS_H
#define HOTPATH_TEST_HARNESS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char t_reason[512];
static int t_failed_case, t_failures, t_skipped;

static inline void t_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	if (t_failed_case)
		return;
	t_failed_case = 1;
	int n = snprintf(t_reason, sizeof(t_reason), "%s:%d: ", file, line);
	va_start(ap, fmt);
	vsnprintf(t_reason + n, sizeof(t_reason) - n, fmt, ap);
	va_end(ap);
}

/* Record a failure and keep going. */
#define EXPECT(cond, ...)                                        \
	do {                                                     \
		if (!(cond))                                     \
			t_fail(__FILE__, __LINE__, __VA_ARGS__); \
	} while (0)
/* Record a failure and leave the case. */
#define REQUIRE(cond, ...)                                       \
	do {                                                     \
		if (!(cond)) {                                   \
			t_fail(__FILE__, __LINE__, __VA_ARGS__); \
			return;                                  \
		}                                                \
	} while (0)
/* The case cannot run on this machine: say why (counted as skipped, not passed). */
#define SKIP(...)                                                  \
	do {                                                       \
		t_skipped = 1;                                     \
		snprintf(t_reason, sizeof(t_reason), __VA_ARGS__); \
		return;                                            \
	} while (0)

#define RUN(fn)                                                       \
	do {                                                          \
		t_failed_case = 0;                                    \
		t_skipped = 0;                                        \
		t_reason[0] = 0;                                      \
		fn();                                                 \
		if (t_failed_case) {                                  \
			printf("FAIL - %s: %s\n", #fn, t_reason);     \
			t_failures++;                                 \
		} else if (t_skipped) {                               \
			printf("ok - %s # SKIP %s\n", #fn, t_reason); \
		} else {                                              \
			printf("ok - %s\n", #fn);                     \
		}                                                     \
		fflush(stdout);                                       \
	} while (0)

#define TEST_EXIT() return t_failures ? 1 : 0

#endif
