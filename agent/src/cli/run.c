/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `hotpathd run` and `hotpathd enroll`: the command lines of the agent daemon
 * and of enrolment. Parse and check the options, read the one-time enrolment
 * token, and hand over to daemon/daemon.c or daemon/enroll.c.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "daemon/agent_config.h"
#include "daemon/credentials.h"
#include "daemon/daemon.h"
#include "daemon/enroll.h"
#include "daemon/log.h"
#include "daemon/transport.h"
#include "host/hostinfo.h"

#define DEFAULT_STATE_DIR   "/var/lib/hotpathd"
#define DEFAULT_CONFIG_FILE "/etc/hotpath/hotpathd.conf"

static void run_usage(FILE *f)
{
	fprintf(f,
		"usage: hotpathd run --server HOST:PORT [options]\n"
		"\n"
		"Parse the live kernel, sample every CPU (program counters and call chains)\n"
		"and stream the code catalog, sample counts and call stacks to the Hotpath\n"
		"backend over one mutual-TLS gRPC stream\n"
		"(AgentService.Connect). The agent serves the kernel and the processes it is\n"
		"asked to attach (here with --attach, or from the console) as targets, runs\n"
		"the backend's commands (attach, detach, start and stop measurements) on a\n"
		"worker thread and sends each measurement's values once per interval.\n"
		"Attached processes and running measurements are kept in the state folder\n"
		"and armed again when the agent restarts. An agent that is not enrolled yet enrols first\n"
		"(see 'hotpathd help enroll'): with --enroll-token-file it uses that one-time\n"
		"token, without one it waits until an admin approves the host in the console.\n"
		"Data the backend has not acknowledged is kept (in memory, then in the state\n"
		"folder) and sent again after a reconnect; what has to be dropped anyway is\n"
		"reported to the backend as a gap.\n"
		"\n"
		"  --server HOST:PORT       backend address agents dial (mutual TLS)\n"
		"  --config FILE            config file: 'label.NAME = VALUE' lines give the host's\n"
		"                           labels (role, region, rack...), at most 32 (default\n"
		"                           " DEFAULT_CONFIG_FILE
		", read when it exists)\n"
		"  --state-dir DIR          key, certificate, CA and unsent data (default\n"
		"                           " DEFAULT_STATE_DIR
		", created with mode 0700)\n"
		"  --enroll-token-file FILE one-time enrolment token, used only when the agent\n"
		"                           has no certificate yet or the backend no longer\n"
		"                           accepts it\n"
		"  --ca-file FILE           CA certificate to verify the backend with when\n"
		"                           enrolling (the backend's tls/ca.pem); afterwards the\n"
		"                           copy in the state folder is used\n"
		"  --enroll-server HOST:PORT  enrolment address (default: the server's host,\n"
		"                           port + 1)\n"
		"  --host-id ID             host identity to report (default: /etc/machine-id)\n"
		"  --interval-ms MS         length of one metric interval (default 1000, 100..60000)\n"
		"  --frequency HZ           samples per second per CPU (default 997, 1..10000)\n"
		"  --stack-depth N          frames kept per call chain, kernel and user together\n"
		"                           (default 64, 1..127)\n"
		"  --no-stacks              sample program counters only, without call chains\n"
		"  --buffer-kib N           unacknowledged data kept in memory (default 8192)\n"
		"  --spool-kib N            and in the state folder beyond that (default 65536;\n"
		"                           0 keeps nothing on disk)\n"
		"  --attach PID|COMMAND     serve this process (or every process with this\n"
		"                           command name) as a target from the start;\n"
		"                           repeatable\n"
		"  --quiet                  log only errors and ended connections\n"
		"  --help                   show this help\n");
}

static void enroll_usage(FILE *f)
{
	fprintf(f,
		"usage: hotpathd enroll --server HOST:PORT --ca-file FILE [--token-file FILE] [options]\n"
		"\n"
		"Give this host its identity: generate a private key in the state folder (it\n"
		"never leaves the host), send a certificate signing request for the host id to\n"
		"the backend's enrolment port, and store the certificate it issues, so that\n"
		"'hotpathd run' can connect as this host and only as this host.\n"
		"\n"
		"With --token-file the request carries a one-time enrolment token an admin\n"
		"created (console: Admin, or POST /api/v1/enrolment-tokens) and the\n"
		"certificate comes at once. Without a token the host is listed as pending in\n"
		"the console; the command waits (asking every 5 s) until an admin approves or\n"
		"rejects it, or returns at once with --no-wait (exit status 4 while pending).\n"
		"\n"
		"  --server HOST:PORT        backend agent address; enrolment uses port + 1\n"
		"  --enroll-server HOST:PORT enrolment address, when it is elsewhere\n"
		"  --ca-file FILE            CA certificate to verify the backend with (the\n"
		"                            backend's tls/ca.pem, also returned with a token)\n"
		"  --token-file FILE         one-time enrolment token (or HOTPATH_ENROLL_TOKEN)\n"
		"  --state-dir DIR           where the key and certificate go (default\n"
		"                            " DEFAULT_STATE_DIR
		")\n"
		"  --host-id ID              host identity (default: /etc/machine-id)\n"
		"  --no-wait                 do not wait for an admin's approval\n"
		"  --help                    show this help\n"
		"\n"
		"Exit status: 0 enrolled, 1 error, 2 usage, 4 approval pending (--no-wait),\n"
		"5 refused (bad or used token, rejected or retired host).\n");
}

static int parse_kib(const char *arg, const char *name, unsigned lo, size_t *out)
{
	unsigned v;
	if (hp_parse_uint(arg, lo, 4u << 20, &v) < 0) {
		fprintf(stderr, "hotpathd: %s must be a number of KiB from %u to %u\n", name, lo, 4u << 20);
		return -1;
	}
	*out = (size_t)v << 10;
	return 0;
}

int cmd_run(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "config", required_argument, NULL, 'C' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "enroll-token-file", required_argument, NULL, 't' },
		{ "ca-file", required_argument, NULL, 'c' },
		{ "enroll-server", required_argument, NULL, 'e' },
		{ "host-id", required_argument, NULL, 'H' },
		{ "interval-ms", required_argument, NULL, 'i' },
		{ "frequency", required_argument, NULL, 'f' },
		{ "buffer-kib", required_argument, NULL, 'b' },
		{ "spool-kib", required_argument, NULL, 'S' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "attach", required_argument, NULL, 'a' },
		{ "stack-depth", required_argument, NULL, 'D' },
		{ "no-stacks", no_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *token_file = NULL;
	const char *config_file = NULL;
	static struct hp_agent_config config;
	static const char *attach[64];
	size_t nattach = 0;
	struct hp_daemon_opts o = { .interval_ms = 1000,
				    .frequency = 997,
				    .state_dir = DEFAULT_STATE_DIR,
				    .buffer_bytes = 8u << 20,
				    .spool_bytes = 64u << 20 };
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o.server = optarg;
			break;
		case 'C':
			config_file = optarg;
			break;
		case 'd':
			o.state_dir = optarg;
			break;
		case 't':
			token_file = optarg;
			break;
		case 'c':
			o.ca_file = optarg;
			break;
		case 'e':
			o.enroll_server = optarg;
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
		case 'b':
			if (parse_kib(optarg, "--buffer-kib", 16, &o.buffer_bytes) < 0)
				return HP_EXIT_USAGE;
			break;
		case 'S':
			if (parse_kib(optarg, "--spool-kib", 0, &o.spool_bytes) < 0)
				return HP_EXIT_USAGE;
			break;
		case 'a':
			if (nattach == sizeof(attach) / sizeof(attach[0]) || !*optarg || strlen(optarg) > 15) {
				fprintf(stderr,
					"hotpathd run: --attach takes a pid or a command name (at most 15 "
					"characters), at most 64 times\n");
				return HP_EXIT_USAGE;
			}
			attach[nattach++] = optarg;
			break;
		case 'q':
			o.quiet = true;
			break;
		case 'D':
			if (hp_parse_uint(optarg, 1, 127, &o.stack_depth) < 0) {
				fprintf(stderr, "hotpathd run: --stack-depth must be a number from 1 to 127\n");
				return HP_EXIT_USAGE;
			}
			break;
		case 'N':
			o.no_stacks = true;
			break;
		case 'h':
			run_usage(stdout);
			return HP_EXIT_OK;
		default:
			run_usage(stderr);
			return HP_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "hotpathd run: unexpected argument '%s'\n", argv[optind]);
		run_usage(stderr);
		return HP_EXIT_USAGE;
	}
	if (!o.server || !*o.server) {
		fprintf(stderr, "hotpathd run: --server HOST:PORT is required\n");
		run_usage(stderr);
		return HP_EXIT_USAGE;
	}
	if (o.host_id && (!*o.host_id || strlen(o.host_id) > 127)) {
		fprintf(stderr, "hotpathd run: --host-id must be 1 to 127 characters\n");
		return HP_EXIT_USAGE;
	}
	char token[512], err[512];
	if (token_file) {
		if (hp_read_token(token_file, token, sizeof(token), err, sizeof(err)) < 0) {
			fprintf(stderr, "hotpathd run: %s\n", err);
			return HP_EXIT_USAGE;
		}
		o.token = token;
	}
	/* Read the config file: the one given must exist, the default may not. */
	int cr = hp_agent_config_load(config_file ? config_file : DEFAULT_CONFIG_FILE, &config, err, sizeof(err));
	if (cr < 0 && !(cr == -ENOENT && !config_file)) {
		fprintf(stderr, "hotpathd run: %s\n", err);
		return HP_EXIT_USAGE;
	}
	o.config = &config;
	o.attach = attach;
	o.nattach = nattach;
	return hp_daemon_run(&o) == 0 ? HP_EXIT_OK : HP_EXIT_ERROR;
}

int cmd_enroll(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "enroll-server", required_argument, NULL, 'e' },
		{ "ca-file", required_argument, NULL, 'c' },
		{ "token-file", required_argument, NULL, 't' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "host-id", required_argument, NULL, 'H' },
		{ "no-wait", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *server = NULL, *token_file = NULL, *host_id = NULL;
	char enroll_server[512] = "";
	struct hp_enroll_opts eo = { .state_dir = DEFAULT_STATE_DIR, .wait = true };
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			server = optarg;
			break;
		case 'e':
			snprintf(enroll_server, sizeof(enroll_server), "%s", optarg);
			break;
		case 'c':
			eo.ca_file = optarg;
			break;
		case 't':
			token_file = optarg;
			break;
		case 'd':
			eo.state_dir = optarg;
			break;
		case 'H':
			host_id = optarg;
			break;
		case 'n':
			eo.wait = false;
			break;
		case 'h':
			enroll_usage(stdout);
			return HP_EXIT_OK;
		default:
			enroll_usage(stderr);
			return HP_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "hotpathd enroll: unexpected argument '%s'\n", argv[optind]);
		return HP_EXIT_USAGE;
	}
	if (!enroll_server[0]) {
		if (!server || hp_enroll_address(server, enroll_server, sizeof(enroll_server)) < 0) {
			fprintf(stderr, "hotpathd enroll: --server HOST:PORT (or --enroll-server) is required\n");
			enroll_usage(stderr);
			return HP_EXIT_USAGE;
		}
	}
	if (host_id && (!*host_id || strlen(host_id) > 127)) {
		fprintf(stderr, "hotpathd enroll: --host-id must be 1 to 127 characters\n");
		return HP_EXIT_USAGE;
	}
	char token[512], err[512];
	const char *env_token = getenv("HOTPATH_ENROLL_TOKEN");
	if (token_file || (env_token && *env_token)) {
		if (hp_read_token(token_file, token, sizeof(token), err, sizeof(err)) < 0) {
			fprintf(stderr, "hotpathd enroll: %s\n", err);
			return HP_EXIT_USAGE;
		}
		eo.token = token;
	}
	struct hp_hostinfo host;
	if (hp_hostinfo_collect(&host, host_id, err, sizeof(err)) < 0) {
		fprintf(stderr, "hotpathd enroll: %s\n", err);
		return HP_EXIT_ERROR;
	}
	eo.server = enroll_server;
	eo.host_id = host.host_id;
	eo.hostname = host.hostname;
	hp_transport_init();
	int r = hp_enroll(&eo, err, sizeof(err));
	hp_transport_shutdown();
	if (r == 0) {
		printf("enrolled host %s; credentials in %s\n", host.host_id, eo.state_dir);
		return HP_EXIT_OK;
	}
	fprintf(stderr, "hotpathd enroll: %s\n", err);
	return r == -EAGAIN ? 4 : r == -EACCES ? 5 : HP_EXIT_ERROR;
}
