// SPDX-License-Identifier: Apache-2.0
/*
 * `hotpathd compare`: the interleaved before/after of an installed plan
 * (replace/compare.h), one line per window on stdout as it ends and a
 * summary sentence, or the JSON the daemon's CompareResult carries.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "replace/compare.h"

#define DEFAULT_STATE "/var/lib/hotpathd"

enum { EXIT_GONE = 3, EXIT_STATE = 4 };

static const char usage[] =
	"usage: hotpathd compare --id ID [--pairs N] [--window S] [--json] [--state-dir DIR]\n"
	"\n"
	"Measure what an installed plan changes while the process runs as it is: in N\n"
	"pairs of windows of S seconds the plan is reverted (arm \"original\") and installed\n"
	"again (arm \"installed\"), the order alternating pair by pair (original first in\n"
	"pairs 1, 3, ..., installed first in pairs 2, 4, ...) so that a drift of the\n"
	"workload cancels. Nothing is instrumented: in every window the process's threads'\n"
	"program counters are sampled (997 Hz per thread, user code) and the window counts\n"
	"all samples, the samples in the plan's code (every member's original range, or\n"
	"the copy's heap while installed) and the process's CPU time. The plan is\n"
	"installed again at the end, as it was (the same id, its call sites redirected\n"
	"again), also when the comparison is interrupted by an error.\n"
	"\n"
	"The summary: per pair the difference between the installed and the original\n"
	"window's share of samples in the plan's code; their mean relative to the original\n"
	"share, with its 95% interval (Student's t over the pairs). Negative is good: the\n"
	"plan's code takes a smaller share of the process's time. \"faster\" when the whole\n"
	"interval is below 0, \"slower\" when above, \"within noise\" otherwise;\n"
	"\"insufficient\" when fewer than 2 pairs have samples in both windows. A window\n"
	"toggles the code of a live process: each revert and install stops its threads\n"
	"for a few milliseconds (toggle_ms in the JSON).\n"
	"\n"
	"options:\n"
	"  --id ID           the install to compare: its id in `hotpathd installed` (the\n"
	"                    console's plan id when the daemon installed it)\n"
	"  --pairs N         pairs of windows, 2..50 (default 6)\n"
	"  --window S        seconds per window, 0.2..60 (default 1)\n"
	"  --json            one JSON object on stdout (docs/agent-cli.md)\n"
	"  --quiet           no window lines\n"
	"  --state-dir DIR   journals and installed plans (default " DEFAULT_STATE
	")\n"
	"\n"
	"exit status: 0 compared (the plan installed), 1 error, 2 usage, 3 the process is\n"
	"             gone (before or during: the windows measured are printed),\n"
	"             4 nothing installed under ID\n";

struct lines {
	bool quiet;
	FILE *fp; /* stdout, or stderr beside the JSON */
};

static int on_window(void *ctx, const struct hp_compare *c)
{
	const struct lines *l = ctx;
	char line[256];

	if (!l->quiet) {
		hp_compare_window_line(c, c->nwindows - 1, line, sizeof(line));
		fprintf(l->fp, "%s\n", line);
		fflush(l->fp);
	}
	return 0;
}

int cmd_compare(int argc, char **argv)
{
	const char *state = DEFAULT_STATE, *id = NULL;
	bool json = false;
	unsigned pairs = HP_COMPARE_PAIRS_DEFAULT;
	double window = HP_COMPARE_WINDOW_DEFAULT;
	struct lines l = { 0 };
	char err[1024];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(usage, stdout);
			return HP_EXIT_OK;
		} else if (!strcmp(a, "--json"))
			json = true;
		else if (!strcmp(a, "--quiet"))
			l.quiet = true;
		else if (!strcmp(a, "--id") && v)
			id = argv[++i];
		else if (!strcmp(a, "--state-dir") && v)
			state = argv[++i];
		else if (!strcmp(a, "--pairs") && v &&
			 hp_parse_uint(v, HP_COMPARE_PAIRS_MIN, HP_COMPARE_PAIRS_MAX, &pairs) == 0)
			i++;
		else if (!strcmp(a, "--window") && v && (window = strtod(v, &end), end != v && !*end) &&
			 window >= HP_COMPARE_WINDOW_MIN && window <= HP_COMPARE_WINDOW_MAX)
			i++;
		else {
			fprintf(stderr,
				"hotpathd compare: bad option or value '%s' (pairs are %d..%d, a window %.1f..%.0f "
				"seconds; see 'hotpathd compare --help')\n",
				a, HP_COMPARE_PAIRS_MIN, HP_COMPARE_PAIRS_MAX, HP_COMPARE_WINDOW_MIN,
				HP_COMPARE_WINDOW_MAX);
			return HP_EXIT_USAGE;
		}
	}
	l.fp = json ? stderr : stdout;
	if (!id) {
		fprintf(stderr, "hotpathd compare: give the install's --id (see `hotpathd installed`)\n");
		return HP_EXIT_USAGE;
	}
	struct hp_compare_opts o = { .state_dir = state,
				     .id = id,
				     .pairs = pairs,
				     .window_seconds = window,
				     .window_done = on_window,
				     .ctx = &l };
	struct hp_compare c;
	int r = hp_compare_run(&o, &c, err, sizeof(err));
	if (json && (r == 0 || c.nwindows)) {
		hp_compare_json(stdout, &c);
		fputc('\n', stdout);
	} else if (r == 0) {
		char line[300];
		hp_compare_summary_line(&c.summary, line, sizeof(line));
		printf("%s in process %d, %zu function%s: %s\n", c.id, c.pid, c.members, c.members == 1 ? "" : "s",
		       line);
		printf("  samples in the plan's code: %.1f%% with the original code, %.1f%% installed (%zu of %u "
		       "pairs used)\n",
		       100 * c.summary.share_original, 100 * c.summary.share_installed, c.summary.pairs_used, c.pairs);
		printf("  a revert took %.1f ms, an install %.1f ms on average; the plan is %s\n", c.revert_ms,
		       c.install_ms, c.state);
	}
	hp_compare_free(&c);
	if (r < 0) {
		fprintf(stderr, "hotpathd compare: %s\n", err);
		return r == -ESRCH  ? EXIT_GONE :
		       r == -ENOENT ? EXIT_STATE :
		       r == -EINVAL ? HP_EXIT_USAGE :
				      HP_EXIT_ERROR;
	}
	return HP_EXIT_OK;
}
