/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `hotpathd run`: the command line of the agent daemon. Parses and checks the
 * options, reads the agent token, and hands over to daemon/daemon.c.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "daemon/credentials.h"
#include "daemon/daemon.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: hotpathd run --server HOST:PORT [--token-file FILE] [options]\n"
		"\n"
		"Parse the live kernel, sample every CPU and stream code catalog and sample\n"
		"counts to the Hotpath backend over one gRPC stream (AgentService.Connect).\n"
		"\n"
		"  --server HOST:PORT   backend gRPC address to dial\n"
		"  --token-file FILE    file holding the agent token, sent as\n"
		"                       'authorization: Bearer TOKEN'; without it the token\n"
		"                       comes from the HOTPATH_AGENT_TOKEN environment variable\n"
		"  --host-id ID         host identity to report (default: /etc/machine-id)\n"
		"  --interval-ms MS     length of one metric interval (default 1000, 100..60000)\n"
		"  --frequency HZ       samples per second per CPU (default 997, 1..10000)\n"
		"  --quiet              log only errors and ended connections\n"
		"  --help               show this help\n");
}

int cmd_run(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "token-file", required_argument, NULL, 't' },
		{ "host-id", required_argument, NULL, 'H' },
		{ "interval-ms", required_argument, NULL, 'i' },
		{ "frequency", required_argument, NULL, 'f' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *token_file = NULL;
	struct hp_daemon_opts o = { .interval_ms = 1000, .frequency = 997 };
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o.server = optarg;
			break;
		case 't':
			token_file = optarg;
			break;
		case 'H':
			o.host_id = optarg;
			break;
		case 'i':
			if (hp_parse_uint(optarg, 100, 60000, &o.interval_ms) < 0) {
				fprintf(stderr, "hotpathd run: --interval-ms must be a number from 100 to 60000\n");
				return HP_EXIT_USAGE;
			}
			break;
		case 'f':
			if (hp_parse_uint(optarg, 1, 10000, &o.frequency) < 0) {
				fprintf(stderr, "hotpathd run: --frequency must be a number from 1 to 10000\n");
				return HP_EXIT_USAGE;
			}
			break;
		case 'q':
			o.quiet = true;
			break;
		case 'h':
			usage(stdout);
			return HP_EXIT_OK;
		default:
			usage(stderr);
			return HP_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "hotpathd run: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return HP_EXIT_USAGE;
	}
	if (!o.server || !*o.server) {
		fprintf(stderr, "hotpathd run: --server HOST:PORT is required\n");
		usage(stderr);
		return HP_EXIT_USAGE;
	}
	if (o.host_id && (!*o.host_id || strlen(o.host_id) > 127)) {
		fprintf(stderr, "hotpathd run: --host-id must be 1 to 127 characters\n");
		return HP_EXIT_USAGE;
	}
	char token[4096], err[512];
	if (hp_read_token(token_file, token, sizeof(token), err, sizeof(err)) < 0) {
		fprintf(stderr, "hotpathd run: %s\n", err);
		return HP_EXIT_USAGE;
	}
	o.token = token;
	return hp_daemon_run(&o) == 0 ? HP_EXIT_OK : HP_EXIT_ERROR;
}
