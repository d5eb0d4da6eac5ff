/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hotpathd subcommands. main.c parses the first word of the command line
 * and hands the remaining arguments (argv[0] is the subcommand's name) to one
 * of these. Each returns the process exit code: 0 success, 1 runtime error,
 * 2 usage error, 3 the named function or resource was not found.
 */
#ifndef HOTPATH_COMMANDS_H
#define HOTPATH_COMMANDS_H

#include <errno.h>
#include <stdlib.h>

enum { HP_EXIT_OK = 0, HP_EXIT_ERROR = 1, HP_EXIT_USAGE = 2, HP_EXIT_NOT_FOUND = 3 };

/* An option's decimal value in [lo, hi]: 0, or -1 when s is empty, not a number or out of range. */
static inline int hp_parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = (unsigned)v;
	return 0;
}

int cmd_caps(int argc, char **argv);      /* caps.c: capabilities and mechanism choices of this host */
int cmd_inspect(int argc, char **argv);   /* inspect.c: one function of a target */
int cmd_measure(int argc, char **argv);   /* measure.c: kperfmon's metrics on code resources */
int cmd_parse(int argc, char **argv);     /* inspect.c: parse a whole target, print totals */
int cmd_run(int argc, char **argv);       /* run.c: connect to the backend and serve it */
int cmd_enroll(int argc, char **argv);    /* run.c: get this host's certificate from the backend */
int cmd_sample(int argc, char **argv);    /* sample.c: whole-system PC sampling, locally */
int cmd_plan(int argc, char **argv);      /* make_plan.c: a code positioning plan for a root function */
int cmd_install(int argc, char **argv);   /* install.c: a plan's code into a running process */
int cmd_revert(int argc, char **argv);    /* install.c: take installed code out again */
int cmd_installed(int argc, char **argv); /* install.c: what the journals say is installed */
int cmd_compare(int argc, char **argv);   /* compare.c: an installed plan against the original, interleaved */
int cmd_icalls(int argc, char **argv);    /* icalls.c: the targets of an installed copy's indirect calls */

#endif
