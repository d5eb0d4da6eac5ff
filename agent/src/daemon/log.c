/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The daemon's log lines: "2025-01-31T12:00:00 hotpathd: message" on stderr,
 * which systemd and `make run` capture.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "daemon/log.h"

static bool quiet;

void hp_log_set_quiet(bool q)
{
	quiet = q;
}

bool hp_log_quiet(void)
{
	return quiet;
}

void hp_log(bool info, const char *fmt, ...)
{
	if (info && quiet)
		return;
	char ts[32];
	time_t t = time(NULL);
	struct tm tm;
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", localtime_r(&t, &tm));
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s hotpathd: ", ts);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

int64_t hp_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
