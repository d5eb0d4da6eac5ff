// SPDX-License-Identifier: Apache-2.0
/*
 * hotpathd: the Hotpath agent. Dispatches the first word of the command line
 * to a subcommand (see commands.h) and answers --help and --version.
 */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

#define HOTPATHD_VERSION "0.1.0"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "caps", cmd_caps, "probe this host's capabilities and show the mechanism chosen per metric" },
	{ "compare", cmd_compare, "compare an installed plan with the original code, windows interleaved" },
	{ "enroll", cmd_enroll, "give this host its identity: a certificate from the backend's CA" },
	{ "icalls", cmd_icalls, "count the targets of the indirect calls in a process's installed copies" },
	{ "install", cmd_install, "install a plan's code into a running process (journaled, revertible)" },
	{ "installed", cmd_installed, "list installed code from the journals, interrupted installs included" },
	{ "inspect", cmd_inspect, "show one function's blocks, instructions, successors and callees" },
	{ "measure", cmd_measure, "count and time functions and blocks of the kernel or a process" },
	{ "plan", cmd_plan, "plan the re-layout of a hot function and its callees (nothing is installed)" },
	{ "parse", cmd_parse, "parse a whole target (kernel, ELF file, process) and print totals" },
	{ "revert", cmd_revert, "revert installed code in a process, also after the agent died midway" },
	{ "run", cmd_run, "connect to the backend and stream the live kernel's code and hotness" },
	{ "sample", cmd_sample, "sample the whole system's program counters locally" },
};

static void usage(FILE *fp)
{
	size_t i;

	fprintf(fp,
		"usage: hotpathd COMMAND [ARGS...]\n\n"
		"Hotpath agent: a code model of the live kernel, ELF files and processes,\n"
		"with live hotness from whole-system sampling and kperfmon's metrics\n"
		"(counts, wall and virtualized timers, concurrency, edge counts).\n\ncommands:\n");
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(fp, "  %-9s %s\n", commands[i].name, commands[i].summary);
	fprintf(fp,
		"\n  hotpathd help COMMAND     help for one command\n"
		"  hotpathd --version        print the version\n");
}

static const struct command *find_command(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

int main(int argc, char **argv)
{
	const struct command *c;

	if (argc < 2) {
		usage(stderr);
		return HP_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return HP_EXIT_OK;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
		printf("hotpathd %s\n", HOTPATHD_VERSION);
		return HP_EXIT_OK;
	}
	if (!strcmp(argv[1], "help")) {
		if (argc < 3) {
			usage(stdout);
			return HP_EXIT_OK;
		}
		if (!(c = find_command(argv[2]))) {
			fprintf(stderr, "hotpathd: unknown command '%s' (see 'hotpathd --help')\n", argv[2]);
			return HP_EXIT_USAGE;
		}
		/* Each command owns its help text. */
		char *hargv[] = { argv[2], "--help", NULL };
		return c->fn(2, hargv);
	}
	if (!(c = find_command(argv[1]))) {
		fprintf(stderr, "hotpathd: unknown command '%s' (see 'hotpathd --help')\n", argv[1]);
		return HP_EXIT_USAGE;
	}
	return c->fn(argc - 1, argv + 1);
}
