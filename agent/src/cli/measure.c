// SPDX-License-Identifier: Apache-2.0
/*
 * `hotpathd measure`: kperfmon's metrics on code resources of the live kernel
 * or of a running process, for a window of S seconds (or until the process
 * exits). Opens a measurement (measure/measure.h), waits, takes the totals,
 * derives edge counts from exact block counts, and prints one report: text,
 * or with --json one object. Both come from the same walk over the same
 * values (struct out below writes either form), so they never disagree. The
 * JSON object is also the profile format `hotpathd plan --profile` reads; it
 * is documented in docs/agent-cli.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "base/json.h"
#include "plan/instrument.h"
#include "replace/counted_window.h"
#include "replace/counters.h"
#include "replace/install.h"
#include "measure/measure.h"

static const char usage_text[] =
	"usage: hotpathd measure kernel RESOURCE... [options]\n"
	"       hotpathd measure pid PID RESOURCE... [options]\n"
	"       hotpathd measure comm NAME RESOURCE... [options]\n"
	"\n"
	"Measure code resources of the live kernel or of running processes for a\n"
	"window of time: counts, wall and virtualized timers, concurrency, their\n"
	"per-call forms, and edge counts derived from block counts. Probes are armed\n"
	"at once; code that has not run yet is normal and counts when it runs. A\n"
	"process that exits ends the window early and keeps what was counted.\n"
	"\n"
	"targets:\n"
	"  kernel       the running kernel\n"
	"  pid PID      one running process (every thread, also threads started later)\n"
	"  comm NAME    every running process with that command name (at most 64)\n"
	"\n"
	"RESOURCE is a function name (module:name when a name is in several modules),\n"
	"function+0xOFF (the basic block starting at that offset), or an address 0x...\n"
	"(a function's entry, or the start of a basic block). An address or offset\n"
	"inside a block is refused: blocks are measured at their start.\n"
	"\n"
	"options:\n"
	"  --metrics LIST   comma-separated metrics (default count):\n"
	"                     count         function entries / block executions\n"
	"                     wall          inclusive thread-ns inside (entry to every exit)\n"
	"                     vtime         the same, stopped while the thread is switched out\n"
	"                     concurrency   threads inside, averaged over the window\n"
	"                     cycles, instructions, icache_stall, branch_mispredict\n"
	"                                   hardware-event timers (need a PMU)\n"
	"                   timers also count calls, for per-call values (ns/call)\n"
	"  --blocks         also measure every basic block of each function; exact\n"
	"                   block counts give edge counts (KernInst flow conservation)\n"
	"  --inline         (pid targets, with --blocks, count only) count blocks with\n"
	"                   counters spliced into an installed copy of each function\n"
	"                   instead of uprobes: no trap per block; the copy is installed\n"
	"                   like a plan (journal, entry, call sites) for the window and\n"
	"                   reverted after it. RESOURCEs are function names.\n"
	"                   Increments are plain (no lock prefix) while the process is\n"
	"                   proved to have one thread: it is watched with ptrace for\n"
	"                   the window, and a thread it starts makes the counts\n"
	"                   estimates (the report says why); a process with more\n"
	"                   threads, or one that cannot be watched, is counted with\n"
	"                   locked increments. The report's 'counting' says which.\n"
	"  --locked         with --inline: always lock-prefixed increments (exact with\n"
	"                   any number of threads, slower)\n"
	"  --plain          with --inline: always plain increments (exact only where\n"
	"                   one thread is proved, as above; estimates otherwise)\n"
	"  --every-block    with --inline: a counter before every block, instead of on\n"
	"                   the edges off a spanning tree (block counts derived)\n"
	"  --pid P          count only in process P\n"
	"  --comm C         count only in threads named C\n"
	"  --cgroup G       count only in cgroup v2 G (a path, absolute or under the\n"
	"                   cgroup2 mount)\n"
	"                   (predicates apply in the kernel, to probes and samples alike)\n"
	"  --seconds S      length of the window (default 10, 1..86400)\n"
	"  --frequency HZ   samples per second per CPU where block counts are sampled\n"
	"                   (default 997)\n"
	"  --state-dir DIR  where installed copies are journaled (default /var/lib/hotpathd):\n"
	"                   a process's functions whose copy is installed are probed\n"
	"                   in the copy, counts reported for the original rows\n"
	"  --partial        measure what this host can and report the rest as\n"
	"                   unavailable, instead of refusing the request\n"
	"  --json           print one JSON object instead of text\n"
	"  --help           show this help\n"
	"\n"
	"Mechanisms are chosen per host, cheapest first: uprobe_multi/uprobes and\n"
	"uretprobes for processes; fentry/fexit, else kprobes/kretprobes for the\n"
	"kernel; kernel blocks by kprobes at func+off, else by PC sampling (labelled\n"
	"sampled, with the samples behind each count) where the host has no kprobes\n"
	"or for blocks --blocks added where the kernel refuses them; a named block\n"
	"there is refused with the kernel's reason; sched_switch (tp_btf, raw_tp\n"
	"or tracepoint) drives virtualized timers. 'hotpathd caps' shows the choice.\n"
	"A metric the host cannot serve is refused with the reason.\n"
	"As root, the BPF probes' answers (which mechanisms work) come from this\n"
	"boot's capability cache, /run/hotpathd/caps, when it was written for this\n"
	"boot, kernel, agent build and settings ('hotpathd caps --help'); else they\n"
	"are probed and the cache written. HOTPATH_CAPS_CACHE=off probes without it.\n"
	"\n"
	"exit status: 0 ok, 1 error (a metric this host cannot serve, missing\n"
	"             permission, too many resources), 2 usage, 3 no such process,\n"
	"             function or block start\n";

/* _Atomic, not volatile sig_atomic_t: the process has threads (the
 * model's CFG build, the sampler's), any of which may run the handler. */
_Static_assert(ATOMIC_BOOL_LOCK_FREE == 2, "a signal handler sets stop_window");
static _Atomic bool stop_window;

static void on_signal(int sig)
{
	(void)sig;
	stop_window = true;
}

/* Ctrl-C (and SIGTERM) end the window early. */
static void end_window_on_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int usage_error(const char *msg)
{
	fprintf(stderr, "hotpathd measure: %s (see 'hotpathd measure --help')\n", msg);
	return HP_EXIT_USAGE;
}

struct args {
	struct hp_measure_spec spec;
	const char **words;
	unsigned seconds;
	bool json;
	bool inline_counts, every_block;
	enum hp_count_mode mode;
	const char *state_dir;
};

static int parse_args(int argc, char **argv, struct args *a)
{
	const char **pos = calloc((size_t)argc + 1, sizeof(char *));
	size_t npos = 0;
	unsigned v;
	memset(a, 0, sizeof(*a));
	a->seconds = 10;
	a->state_dir = "/var/lib/hotpathd";
	a->spec.metrics = HP_METRIC_BIT(HP_METRIC_COUNT);
	if (!pos)
		return usage_error("out of memory");
	a->words = pos;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i];
		char err[256];
		bool has_value = i + 1 < argc;
		if (!strcmp(o, "--json")) {
			a->json = true;
		} else if (!strcmp(o, "--blocks")) {
			a->spec.blocks = true;
		} else if (!strcmp(o, "--inline")) {
			a->inline_counts = true;
		} else if (!strcmp(o, "--plain")) {
			a->mode = HP_COUNT_PLAIN;
		} else if (!strcmp(o, "--locked")) {
			a->mode = HP_COUNT_LOCKED;
		} else if (!strcmp(o, "--every-block")) {
			a->every_block = true;
		} else if (!strcmp(o, "--partial")) {
			a->spec.allow_partial = true;
		} else if (!strcmp(o, "--state-dir")) {
			if (!has_value)
				return usage_error("--state-dir needs a folder");
			a->state_dir = argv[++i];
		} else if (!strcmp(o, "--metrics")) {
			if (!has_value)
				return usage_error("--metrics needs a list");
			if (hp_metrics_parse(argv[++i], &a->spec.metrics, err, sizeof(err)) < 0)
				return usage_error(err);
		} else if (!strcmp(o, "--seconds")) {
			if (!has_value || hp_parse_uint(argv[++i], 1, 86400, &a->seconds) < 0)
				return usage_error("--seconds needs a number from 1 to 86400");
		} else if (!strcmp(o, "--frequency")) {
			if (!has_value || hp_parse_uint(argv[++i], 1, 10000, &a->spec.sample_hz) < 0)
				return usage_error("--frequency needs a number from 1 to 10000");
		} else if (!strcmp(o, "--pid")) {
			if (!has_value || hp_parse_uint(argv[++i], 1, 0x7fffffff, &v) < 0)
				return usage_error("--pid needs a process id");
			a->spec.where_pid = (int)v;
		} else if (!strcmp(o, "--comm")) {
			if (!has_value)
				return usage_error("--comm needs a command name");
			a->spec.where_comm = argv[++i];
		} else if (!strcmp(o, "--cgroup")) {
			if (!has_value)
				return usage_error("--cgroup needs a cgroup path");
			a->spec.where_cgroup = argv[++i];
		} else if (o[0] == '-' && o[1] == '-') {
			char msg[160];
			snprintf(msg, sizeof(msg), "unknown option '%.100s'", o);
			return usage_error(msg);
		} else {
			pos[npos++] = o;
		}
	}
	if (!npos)
		return usage_error("missing target (kernel, pid PID or comm NAME)");
	size_t first = 1;
	if (!strcmp(pos[0], "kernel")) {
		a->spec.target = HP_MEASURE_KERNEL;
	} else if (!strcmp(pos[0], "pid")) {
		if (npos < 2 || hp_parse_uint(pos[1], 1, 0x7fffffff, &v) < 0)
			return usage_error("pid needs a process id");
		a->spec.target = HP_MEASURE_PID;
		a->spec.pid = (int)v;
		first = 2;
	} else if (!strcmp(pos[0], "comm")) {
		if (npos < 2)
			return usage_error("comm needs a command name");
		a->spec.target = HP_MEASURE_COMM;
		a->spec.comm = pos[1];
		first = 2;
	} else {
		char msg[160];
		snprintf(msg, sizeof(msg), "unknown target '%.100s' (kernel, pid or comm)", pos[0]);
		return usage_error(msg);
	}
	if (npos <= first)
		return usage_error("missing RESOURCE (a function name, function+0xOFF or an address)");
	a->spec.resources = pos + first;
	a->spec.nresources = npos - first;
	if ((a->mode != HP_COUNT_AUTO || a->every_block) && !a->inline_counts)
		return usage_error("--plain, --locked and --every-block go with --inline");
	if (a->inline_counts &&
	    (a->spec.target != HP_MEASURE_PID || !a->spec.blocks || a->spec.metrics != HP_METRIC_BIT(HP_METRIC_COUNT) ||
	     a->spec.where_pid || a->spec.where_comm || a->spec.where_cgroup || a->spec.sample_hz))
		return usage_error(
			"--inline counts the blocks of a pid target's functions: it takes --blocks, the count "
			"metric only, and no predicates");
	return 0;
}

/* One report, written as text or JSON by the same calls. */
struct out {
	bool json;
	struct json j;
};

/* key: v written by put (json_u64, or json_addr for an address), or null when absent. */
static void out_or_null(struct out *o, const char *key, bool present, uint64_t v, void (*put)(struct json *, uint64_t))
{
	json_key(&o->j, key);
	if (present)
		put(&o->j, v);
	else
		json_null(&o->j);
}

static const char *row_label(const struct hp_measure_row *p, char *buf, size_t len)
{
	if (p->kind == HP_ROW_BLOCK)
		snprintf(buf, len, "  %s+0x%x", p->function, p->block_offset);
	else
		snprintf(buf, len, "%s", p->function);
	return buf;
}

static void text_value(const struct hp_metric_value *v, int width, int decimals)
{
	if (!v->present)
		printf(" %*s", width, "-");
	else if (decimals)
		printf(" %*.*f", width, decimals, v->value);
	else
		printf(" %*.0f", width, v->value);
}

/* The mechanism of metric m of the first row of this kind that has it: the report's headline choice. */
static const char *first_mechanism(const struct hp_measure_row *rows, size_t nrows, int kind, int m)
{
	for (size_t i = 0; i < nrows; i++)
		if ((int)rows[i].kind == kind && rows[i].metric[m].requested && rows[i].metric[m].available)
			return rows[i].metric[m].mechanism;
	return NULL;
}

static void report_rows(struct out *o, const struct hp_measure_row *rows, const struct hp_measure_reading *r,
			uint32_t metrics)
{
	char label[600];
	const char *head[2][HP_METRIC_N];
	for (int k = 0; k < 2; k++)
		for (int m = 0; m < HP_METRIC_N; m++)
			head[k][m] = first_mechanism(rows, r->nrows, k, m);
	if (o->json) {
		json_key(&o->j, "resources");
		json_arr_begin(&o->j);
	} else {
		printf("%-40s %12s %14s %12s %14s %12s %11s\n", "resource", "count", "wall_ns", "wall/call", "vtime_ns",
		       "vtime/call", "concurrency");
	}
	for (size_t i = 0; i < r->nrows; i++) {
		const struct hp_measure_row *p = &rows[i];
		const struct hp_measure_row_values *rv = &r->rows[i];
		bool block = p->kind == HP_ROW_BLOCK;
		if (!o->json) {
			printf("%-40s", row_label(p, label, sizeof(label)));
			text_value(&rv->v[HP_METRIC_COUNT], 12, 0);
			text_value(&rv->v[HP_METRIC_WALL], 14, 0);
			text_value(&rv->wall_per_call, 12, 1);
			text_value(&rv->v[HP_METRIC_VTIME], 14, 0);
			text_value(&rv->vtime_per_call, 12, 1);
			text_value(&rv->v[HP_METRIC_CONCURRENCY], 11, 3);
			const struct hp_metric_value *c = &rv->v[HP_METRIC_COUNT];
			if (c->present && c->label != HP_LABEL_EXACT)
				printf("  (%s)", hp_label_name(c->label));
			for (int m = 0; m < HP_METRIC_N; m++)
				if (p->metric[m].requested && !p->metric[m].available)
					printf("\n    %s unavailable: %s", hp_metric_name((enum hp_metric)m),
					       p->metric[m].reason);
			printf("\n");
			continue;
		}
		json_obj_begin(&o->j);
		json_kstr(&o->j, "function", p->function);
		if (block) {
			json_kaddr(&o->j, "block", p->block_address);
			json_ku64(&o->j, "block_offset", p->block_offset);
			json_ku64(&o->j, "block_size", p->block_size);
		}
		json_kstr(&o->j, "module", p->module);
		json_kstr(&o->j, "resource", p->resource);
		json_kaddr(&o->j, "function_address", p->function_address);
		json_ku64(&o->j, "function_size", p->function_size);
		if (p->run_address != (block ? p->block_address : p->function_address))
			json_kaddr(&o->j, "installed_copy", p->run_address);
		json_key(&o->j, "metrics");
		json_obj_begin(&o->j);
		for (int m = 0; m < HP_METRIC_N; m++) {
			const struct hp_metric_value *v = &rv->v[m];
			if (!v->present)
				continue;
			json_key(&o->j, hp_metric_key((enum hp_metric)m));
			if (m == HP_METRIC_CONCURRENCY)
				json_double(&o->j, v->value, 6);
			else
				json_u64(&o->j, v->total);
		}
		json_obj_end(&o->j);
		if (!block && (rv->wall_per_call.present || rv->vtime_per_call.present)) {
			json_key(&o->j, "per_call");
			json_obj_begin(&o->j);
			if (rv->wall_per_call.present) {
				json_key(&o->j, "wall_ns");
				json_double(&o->j, rv->wall_per_call.value, 1);
			}
			if (rv->vtime_per_call.present) {
				json_key(&o->j, "vtime_ns");
				json_double(&o->j, rv->vtime_per_call.value, 1);
			}
			json_obj_end(&o->j);
		}
		json_key(&o->j, "labels");
		json_obj_begin(&o->j);
		for (int m = 0; m < HP_METRIC_N; m++)
			if (rv->v[m].present)
				json_kstr(&o->j, hp_metric_key((enum hp_metric)m), hp_label_name(rv->v[m].label));
		json_obj_end(&o->j);
		/* A row measured otherwise than the headline (a kernel function without an
		 * ftrace site takes kprobes) says how. */
		bool differs = false;
		for (int m = 0; m < HP_METRIC_N; m++) {
			const char *first = head[p->kind][m];
			differs |= rv->v[m].present && first && strcmp(first, rv->v[m].mechanism);
		}
		if (differs) {
			json_key(&o->j, "mechanisms");
			json_obj_begin(&o->j);
			for (int m = 0; m < HP_METRIC_N; m++)
				if (rv->v[m].present)
					json_kstr(&o->j, hp_metric_key((enum hp_metric)m), rv->v[m].mechanism);
			json_obj_end(&o->j);
		}
		if (rv->v[HP_METRIC_COUNT].present && rv->v[HP_METRIC_COUNT].label == HP_LABEL_SAMPLED)
			json_ku64(&o->j, "samples", rv->samples);
		if (!block && (metrics & HP_METRICS_TIMERS))
			json_ku64(&o->j, "completed_calls", rv->exits);
		bool any_unavailable = false;
		for (int m = 0; m < HP_METRIC_N; m++)
			any_unavailable |= p->metric[m].requested && !p->metric[m].available;
		if (any_unavailable) {
			json_key(&o->j, "unavailable");
			json_obj_begin(&o->j);
			for (int m = 0; m < HP_METRIC_N; m++)
				if (p->metric[m].requested && !p->metric[m].available)
					json_kstr(&o->j, hp_metric_key((enum hp_metric)m), p->metric[m].reason);
			json_obj_end(&o->j);
		}
		json_obj_end(&o->j);
	}
	if (o->json)
		json_arr_end(&o->j);
}

static uint64_t block_addr(const struct hp_measure_row *rows, const struct hp_function_edges *fe, uint32_t b)
{
	return rows[fe->function_row].function_address + fe->block_offsets[b];
}

/* One edge as JSON. */
static void json_edge(struct out *o, const struct hp_measure_row *rows, const struct hp_function_edges *fe,
		      const struct hp_edge *e)
{
	bool from = e->from != HP_EDGE_NO_BLOCK, to = e->to != HP_EDGE_NO_BLOCK;
	json_obj_begin(&o->j);
	json_kstr(&o->j, "function", rows[fe->function_row].function);
	out_or_null(o, "from", from, from ? block_addr(rows, fe, e->from) : 0, json_addr);
	out_or_null(o, "from_offset", from, from ? fe->block_offsets[e->from] : 0, json_u64);
	out_or_null(o, "to", to || e->kind == HP_EDGE_TAIL_CALL, to ? block_addr(rows, fe, e->to) : e->target,
		    json_addr);
	out_or_null(o, "to_offset", to, to ? fe->block_offsets[e->to] : 0, json_u64);
	json_kstr(&o->j, "kind", hp_edge_kind_name(e->kind));
	json_ku64(&o->j, "count", e->count);
	json_key(&o->j, "exact");
	json_bool(&o->j, e->how == HP_EDGE_EXACT);
	json_ku64(&o->j, "low", e->low);
	out_or_null(o, "high", e->high != UINT64_MAX, e->high, json_u64); /* null: unbounded */
	json_obj_end(&o->j);
}

static void report_edges(struct out *o, const struct hp_measure_row *rows, const struct hp_function_edges *fe,
			 size_t nfe, bool any_block_rows, bool sampled_blocks)
{
	size_t total = 0, exact = 0;
	for (size_t i = 0; i < nfe; i++) {
		total += fe[i].edges.nedges;
		exact += fe[i].edges.nexact;
	}
	/* JSON: "edges" between two blocks of a function; "boundary_edges" the
	 * entry, indirect arrivals and every way out. Text: one list per function. */
	for (int pass = 0; o->json && pass < 2; pass++) {
		json_key(&o->j, pass ? "boundary_edges" : "edges");
		json_arr_begin(&o->j);
		for (size_t i = 0; i < nfe; i++)
			for (size_t k = 0; k < fe[i].edges.nedges; k++) {
				const struct hp_edge *e = &fe[i].edges.edges[k];
				bool inner = e->from != HP_EDGE_NO_BLOCK && e->to != HP_EDGE_NO_BLOCK;
				if (inner == (pass == 0))
					json_edge(o, rows, &fe[i], e);
			}
		json_arr_end(&o->j);
	}
	for (size_t i = 0; !o->json && i < nfe; i++) {
		const struct hp_measure_row *fr = &rows[fe[i].function_row];
		const struct hp_edge_result *er = &fe[i].edges;
		printf("\nedges of %s: %zu, %zu derived exactly (%.1f%%), %zu conservation violation%s\n", fr->function,
		       er->nedges, er->nexact, er->nedges ? 100.0 * er->nexact / er->nedges : 0, er->violations,
		       er->violations == 1 ? "" : "s");
		for (size_t k = 0; k < er->nedges; k++) {
			const struct hp_edge *e = &er->edges[k];
			char a[32] = "entry", b[48] = "out";
			if (e->from != HP_EDGE_NO_BLOCK)
				snprintf(a, sizeof(a), "+0x%x", fe[i].block_offsets[e->from]);
			else if (e->kind == HP_EDGE_INDIRECT_IN)
				snprintf(a, sizeof(a), "indirect");
			if (e->to != HP_EDGE_NO_BLOCK)
				snprintf(b, sizeof(b), "+0x%x", fe[i].block_offsets[e->to]);
			else if (e->kind == HP_EDGE_TAIL_CALL)
				snprintf(b, sizeof(b), "0x%" PRIx64, e->target);
			printf("  %-10s -> %-18s %-12s %12" PRIu64 "  %s", a, b, hp_edge_kind_name(e->kind), e->count,
			       e->how == HP_EDGE_EXACT ? "exact" : "estimate");
			if (e->how != HP_EDGE_EXACT && e->high != UINT64_MAX)
				printf(" [%" PRIu64 ", %" PRIu64 "]", e->low, e->high);
			else if (e->how != HP_EDGE_EXACT)
				printf(" [%" PRIu64 ", unbounded]", e->low);
			printf("\n");
		}
	}
	if (!o->json) {
		if (nfe)
			printf("\nexact edge share: %zu of %zu edges (%.1f%%)\n", exact, total,
			       total ? 100.0 * exact / total : 0);
		else if (sampled_blocks)
			printf("\nedges: not derived: block counts are sampled (time in each block), not executions\n");
		else if (any_block_rows)
			printf("\nedges: not derived: no function had its blocks counted exactly (use --blocks)\n");
		return;
	}
	json_key(&o->j, "exact_edge_share");
	if (total)
		json_double(&o->j, (double)exact / (double)total, 6);
	else
		json_null(&o->j);
	json_key(&o->j, "edge_functions");
	json_arr_begin(&o->j);
	for (size_t i = 0; i < nfe; i++) {
		const struct hp_edge_result *er = &fe[i].edges;
		json_obj_begin(&o->j);
		json_kstr(&o->j, "function", rows[fe[i].function_row].function);
		json_kaddr(&o->j, "function_address", rows[fe[i].function_row].function_address);
		json_ku64(&o->j, "edges", er->nedges);
		json_ku64(&o->j, "exact_edges", er->nexact);
		json_key(&o->j, "exact_edge_share");
		json_double(&o->j, er->nedges ? (double)er->nexact / (double)er->nedges : 0, 6);
		json_ku64(&o->j, "conservation_violations", er->violations);
		json_ku64(&o->j, "violation_flow", er->violation_flow);
		json_obj_end(&o->j);
	}
	json_arr_end(&o->j);
	if (!nfe && (sampled_blocks || any_block_rows))
		json_kstr(&o->j, "edges_not_derived",
			  sampled_blocks ? "block counts are sampled (time in each block), not executions" :
					   "no function had its blocks counted exactly (use --blocks)");
}

/* The mechanism and label of each requested metric, per row kind. */
static void report_mechanisms(struct out *o, const struct hp_measure_row *rows, size_t nrows, uint32_t metrics)
{
	if (o->json) {
		json_key(&o->j, "mechanisms");
		json_obj_begin(&o->j);
	} else {
		printf("mechanisms:");
	}
	for (int kind = 0; kind < 2; kind++) {
		for (int m = 0; m < HP_METRIC_N; m++) {
			const struct hp_measure_row *p = NULL;
			for (size_t i = 0; i < nrows && !p; i++)
				if ((int)rows[i].kind == kind && rows[i].metric[m].requested &&
				    rows[i].metric[m].available)
					p = &rows[i];
			if (!p || !(metrics & HP_METRIC_BIT(m)))
				continue;
			char key[64];
			snprintf(key, sizeof(key), "%s%s", kind ? "block_" : "", hp_metric_key((enum hp_metric)m));
			if (o->json)
				json_kstr(&o->j, key, p->metric[m].mechanism);
			else
				printf(" %s %s (%s);", key, p->metric[m].mechanism, hp_label_name(p->metric[m].label));
		}
	}
	if (o->json)
		json_obj_end(&o->j);
	else
		printf("\n");
}

/* What a report is about: a measurement's handle, or inline counters. */
struct source {
	const struct hp_measure_row *rows;
	const struct hp_model *m;
	const char *desc;
	enum hp_measure_state st;
	char detail[512];
	int pids[HP_MEASURE_MAX_PIDS];
	size_t npids;
	/* Inline counters: their increments, whether one thread was proved,
	 * whether the counts are exact, and why (counting is NULL otherwise). */
	const char *counting, *counting_detail;
	const char *counting_requested;
	bool single_thread_proved, counting_exact;
};

static void source_of(struct hp_measure *h, struct source *s)
{
	memset(s, 0, sizeof(*s)); /* no inline counting */
	s->rows = hp_measure_rows(h);
	s->m = hp_measure_model(h);
	s->desc = hp_measure_target_desc(h);
	s->st = hp_measure_state(h, s->detail, sizeof(s->detail));
	s->npids = hp_measure_pids(h, s->pids, HP_MEASURE_MAX_PIDS);
}

static void report(struct out *o, const struct source *s, const struct args *a, const struct hp_measure_reading *r,
		   const struct hp_function_edges *fe, size_t nfe)
{
	const struct hp_measure_row *rows = s->rows;
	const struct hp_model *m = s->m;
	const char *detail = s->detail;
	enum hp_measure_state st = s->st;
	const int *pids = s->pids;
	size_t npids = s->npids;
	bool any_block = false, sampled_blocks = false;
	for (size_t i = 0; i < r->nrows; i++)
		if (rows[i].kind == HP_ROW_BLOCK) {
			any_block = true;
			sampled_blocks |= r->rows[i].v[HP_METRIC_COUNT].present &&
					  r->rows[i].v[HP_METRIC_COUNT].label == HP_LABEL_SAMPLED;
		}
	char mlist[256];
	uint32_t metrics =
		a->spec.metrics | ((a->spec.metrics & HP_METRICS_TIMERS) ? HP_METRIC_BIT(HP_METRIC_COUNT) : 0);
	hp_metrics_format(metrics, mlist, sizeof(mlist));
	if (!o->json) {
		printf("measured %s for %.3f s: %s%s%s\n", s->desc, r->seconds, hp_measure_state_name(st),
		       detail[0] ? ": " : "", detail);
		if (s->counting)
			printf("counting: %s%s\n", s->counting_detail,
			       s->counting_exact ? "" : " (counts are estimates)");
		report_mechanisms(o, rows, r->nrows, metrics);
		report_rows(o, rows, r, metrics);
		report_edges(o, rows, fe, nfe, any_block, sampled_blocks);
		if (sampled_blocks)
			printf("samples: %" PRIu64 " taken on all CPUs during the window, %" PRIu64 " lost\n",
			       r->samples_total, r->samples_lost);
		if (r->frames_dropped || r->exits_unmatched)
			printf("untimed calls: %" PRIu64 " (frame table full), %" PRIu64
			       " exits of calls that began before the window\n",
			       r->frames_dropped, r->exits_unmatched);
		return;
	}
	json_init(&o->j, stdout);
	json_obj_begin(&o->j);
	json_key(&o->j, "target");
	json_obj_begin(&o->j);
	json_kstr(&o->j, "kind",
		  a->spec.target == HP_MEASURE_KERNEL ? "kernel" :
		  a->spec.target == HP_MEASURE_PID    ? "pid" :
							"comm");
	json_kstr(&o->j, "description", s->desc);
	if (a->spec.target == HP_MEASURE_KERNEL) {
		json_kstr(&o->j, "release", m->release);
		json_kstr(&o->j, "build_id", m->build_id);
	}
	json_key(&o->j, "pids");
	json_arr_begin(&o->j);
	for (size_t i = 0; i < npids && i < HP_MEASURE_MAX_PIDS; i++)
		json_i64(&o->j, pids[i]);
	json_arr_end(&o->j);
	json_obj_end(&o->j);
	json_key(&o->j, "window");
	json_obj_begin(&o->j);
	json_key(&o->j, "start_unix_ns");
	json_i64(&o->j, r->start_unix_ns);
	json_key(&o->j, "end_unix_ns");
	json_i64(&o->j, r->end_unix_ns);
	json_key(&o->j, "seconds");
	json_double(&o->j, r->seconds, 6);
	json_obj_end(&o->j);
	json_kstr(&o->j, "state", hp_measure_state_name(st));
	json_key(&o->j, "estimated"); /* some block counts are PC samples, not executions */
	json_bool(&o->j, sampled_blocks);
	json_kstr(&o->j, "state_detail", detail);
	if (s->counting) { /* inline counters only */
		json_key(&o->j, "counting");
		json_obj_begin(&o->j);
		json_kstr(&o->j, "increments", s->counting);
		json_kstr(&o->j, "requested", s->counting_requested);
		json_key(&o->j, "single_thread_proved");
		json_bool(&o->j, s->single_thread_proved);
		json_key(&o->j, "exact");
		json_bool(&o->j, s->counting_exact);
		json_kstr(&o->j, "detail", s->counting_detail);
		json_obj_end(&o->j);
	}
	json_key(&o->j, "metrics");
	json_arr_begin(&o->j);
	for (int k = 0; k < HP_METRIC_N; k++)
		if (metrics & HP_METRIC_BIT(k))
			json_str(&o->j, hp_metric_name((enum hp_metric)k));
	json_arr_end(&o->j);
	json_key(&o->j, "predicates");
	json_obj_begin(&o->j);
	json_key(&o->j, "pid");
	if (a->spec.where_pid)
		json_i64(&o->j, a->spec.where_pid);
	else
		json_null(&o->j);
	json_kstr(&o->j, "comm", a->spec.where_comm);
	json_kstr(&o->j, "cgroup", a->spec.where_cgroup);
	json_obj_end(&o->j);
	report_mechanisms(o, rows, r->nrows, metrics);
	report_rows(o, rows, r, metrics);
	report_edges(o, rows, fe, nfe, any_block, sampled_blocks);
	json_key(&o->j, "totals");
	json_obj_begin(&o->j);
	json_ku64(&o->j, "samples", r->samples_total);
	json_ku64(&o->j, "samples_lost", r->samples_lost);
	json_ku64(&o->j, "frames_dropped", r->frames_dropped);
	json_ku64(&o->j, "exits_unmatched", r->exits_unmatched);
	json_obj_end(&o->j);
	json_obj_end(&o->j);
}

/* The window of --inline ends at --seconds, or early at Ctrl-C. */
static int inline_tick(void *ctx, const struct hp_counted *c, double elapsed)
{
	const struct args *a = ctx;
	(void)c;
	return stop_window || elapsed >= a->seconds;
}

/* A window of inline counters (--inline): counted copies installed for the
 * window (replace/counters.h), their counters read live, the copies
 * reverted, then the report --blocks gives, with the mechanism
 * inline_counter. A process that exits during the window takes its
 * counters with it: that is an error, not a partial report. */
static int measure_inline(const struct args *a)
{
	char err[2048], comm[64] = "?", desc[128];
	int pid = a->spec.pid, rc = HP_EXIT_ERROR, r;
	size_t n = a->spec.nresources;
	struct hp_model *m = NULL;
	struct hp_counted c = { 0 };
	struct hp_counted_counts *counts = NULL;
	struct hp_measure_row *rows = NULL;
	struct hp_measure_reading rd = { 0 };
	struct hp_function_edges *fe = NULL;
	size_t nrows = 0;
	double secs = 0;

	r = hp_model_open_pid_unpatched(a->state_dir, pid, NULL, &m, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "hotpathd measure: %s\n", err);
		return r == -ESRCH || r == -ENOENT ? HP_EXIT_NOT_FOUND : HP_EXIT_ERROR;
	}
	const struct hp_function **fns = calloc(n + 1, sizeof(*fns));
	const struct hp_module **mods = calloc(n + 1, sizeof(*mods));
	if (!fns || !mods)
		goto out;
	for (size_t i = 0; i < n; i++) {
		bool amb = false;
		fns[i] = hp_model_find(m, a->spec.resources[i], &mods[i], &amb);
		if (!fns[i]) {
			fprintf(stderr, "hotpathd measure: %s: %s\n", a->spec.resources[i],
				amb ? "ambiguous name (use module:name)" :
				      "no such function (--inline counts whole functions: give their names)");
			rc = HP_EXIT_NOT_FOUND;
			goto out;
		}
		for (size_t k = 0; k < i; k++)
			if (fns[k] == fns[i]) {
				fprintf(stderr, "hotpathd measure: %s is named twice\n", fns[i]->name);
				rc = HP_EXIT_USAGE;
				goto out;
			}
		nrows += 1 + fns[i]->nblocks;
	}
	snprintf(err, sizeof(err), "/proc/%d/comm", pid);
	FILE *cf = fopen(err, "r");
	if (cf) {
		if (fgets(comm, sizeof(comm), cf))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(cf);
	}
	snprintf(desc, sizeof(desc), "process %d (%s)", pid, comm);
	struct timespec ts0, ts1;
	clock_gettime(CLOCK_REALTIME, &ts0);
	r = hp_counted_begin(pid, m, a->state_dir, fns, mods, n, a->mode, a->every_block, &c, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "hotpathd measure: %s\n", err);
		rc = r == -ESRCH ? HP_EXIT_NOT_FOUND : HP_EXIT_ERROR;
		goto out;
	}
	end_window_on_signals();
	fprintf(stderr, "measuring %s: %zu rows armed (inline counters, %s) for %u s (Ctrl-C ends the window early)\n",
		desc, nrows, c.how, a->seconds);
	r = hp_counted_window(&c, inline_tick, (void *)a, &secs, &counts, err, sizeof(err));
	bool proved = c.watched && c.exact; /* the revert ends the watch */
	bool exact = c.exact, plain = c.plain;
	char how[sizeof(c.how)];
	snprintf(how, sizeof(how), "%s", c.how);
	clock_gettime(CLOCK_REALTIME, &ts1);
	bool gone = r == -ESRCH;
	if (r < 0)
		fprintf(stderr, "hotpathd measure: %s\n", err);
	rc = r == 0 ? HP_EXIT_OK : gone ? HP_EXIT_NOT_FOUND : HP_EXIT_ERROR;
	if (hp_counted_revert(&c, err, sizeof(err)) < 0 && !gone) {
		fprintf(stderr, "hotpathd measure: %s\n", err);
		rc = HP_EXIT_ERROR;
	}
	if (rc != HP_EXIT_OK)
		goto out;
	/* The rows and values --blocks reports, from the counters. */
	rc = HP_EXIT_ERROR;
	rows = calloc(nrows + 1, sizeof(*rows));
	rd.rows = calloc(nrows + 1, sizeof(*rd.rows));
	fe = calloc(n + 1, sizeof(*fe));
	if (!rows || !rd.rows || !fe)
		goto out;
	rd.nrows = nrows;
	rd.seconds = secs;
	rd.state = HP_MEASURE_RUNNING;
	rd.start_unix_ns = (int64_t)ts0.tv_sec * 1000000000 + ts0.tv_nsec;
	rd.end_unix_ns = (int64_t)ts1.tv_sec * 1000000000 + ts1.tv_nsec;
	const char *mech = hp_mech_name(HP_MECH_INLINE_COUNTER);
	enum hp_value_label label = exact ? HP_LABEL_EXACT : HP_LABEL_ESTIMATE;
	size_t row = 0;
	for (size_t i = 0; i < n; i++) {
		const struct hp_function *f = fns[i];
		const struct hp_module *mod = mods[i];
		size_t frow = row;
		fe[i].function_row = frow;
		fe[i].nblocks = f->nblocks;
		fe[i].block_rows = malloc((f->nblocks + 1) * sizeof(uint32_t));
		fe[i].block_offsets = malloc((f->nblocks + 1) * sizeof(uint32_t));
		if (!fe[i].block_rows || !fe[i].block_offsets)
			goto out;
		for (uint32_t b = 0; b <= f->nblocks; b++, row++) {
			struct hp_measure_row *p = &rows[row];
			bool block = b > 0;
			const struct hp_block *bl = block ? &mod->blocks[f->block_start + b - 1] : NULL;
			/* the function row: hits of its entry, as a probe counts */
			uint64_t v = counts[i].blocks[block ? b - 1 : 0];
			p->kind = block ? HP_ROW_BLOCK : HP_ROW_FUNCTION;
			p->resource = a->spec.resources[i];
			p->function = f->name;
			p->module = mod->name;
			p->module_index = (uint32_t)(mod - m->mods);
			p->function_index = (uint32_t)(f - mod->funcs);
			p->function_address = f->addr;
			p->function_size = f->size;
			p->function_row = block ? (uint32_t)frow : HP_ROW_NONE;
			if (block) {
				p->block_address = f->addr + bl->offset;
				p->block_offset = bl->offset;
				p->block_size = bl->size;
				fe[i].block_rows[b - 1] = (uint32_t)row;
				fe[i].block_offsets[b - 1] = bl->offset;
			}
			p->run_address = block ? p->block_address : p->function_address;
			p->metric[HP_METRIC_COUNT] = (struct hp_metric_info){
				.requested = true, .available = true, .label = label, .mechanism = mech, .reason = ""
			};
			rd.rows[row].v[HP_METRIC_COUNT] = (struct hp_metric_value){
				.present = true,
				.value = (double)v,
				.total = v,
				.unit = hp_metric_unit(HP_METRIC_COUNT, block),
				.label = label,
				.mechanism = mech,
			};
		}
		fe[i].edges = counts[i].edges; /* the report's now */
		memset(&counts[i].edges, 0, sizeof(counts[i].edges));
	}
	struct source src = { .rows = rows, .m = m, .desc = desc, .st = HP_MEASURE_RUNNING, .npids = 1 };
	src.pids[0] = pid;
	snprintf(src.detail, sizeof(src.detail), "counted inline in an installed copy, reverted after the window");
	src.counting = plain ? "plain" : "locked";
	src.counting_requested = a->mode == HP_COUNT_AUTO ? "auto" : a->mode == HP_COUNT_PLAIN ? "plain" : "locked";
	src.single_thread_proved = proved;
	src.counting_exact = exact;
	src.counting_detail = how;
	struct out o = { .json = a->json };
	report(&o, &src, a, &rd, fe, n);
	rc = HP_EXIT_OK;
out:
	if (fe)
		hp_measure_edges_free(fe, n);
	free(rd.rows);
	free(rows);
	hp_counted_counts_free(counts, n);
	free(fns);
	free(mods);
	hp_model_free(m);
	return rc;
}

int cmd_measure(int argc, char **argv)
{
	struct args a;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage_text, stdout);
			return HP_EXIT_OK;
		}
	int rc = parse_args(argc, argv, &a);
	if (rc) {
		free(a.words);
		return rc;
	}
	char err[2048];
	struct hp_measure *h = NULL;
	if (a.inline_counts) {
		rc = measure_inline(&a);
		free(a.words);
		return rc;
	}
	/* Installed copies in the process: measured where they run. */
	struct hp_measure_env env = { 0 };
	struct hp_moved_code *moved = NULL;
	size_t nmoved = 0;
	if (a.spec.target == HP_MEASURE_PID &&
	    hp_moved_code_of(a.state_dir, a.spec.pid, &moved, &nmoved, err, sizeof(err)) == 0) {
		env.moved = moved;
		env.nmoved = nmoved;
	}
	struct hp_byte_patch *bp = NULL;
	size_t nbp = 0;
	if (a.spec.target == HP_MEASURE_PID && hp_installed_patches(a.state_dir, a.spec.pid, &bp, &nbp) == 0) {
		env.overlay = bp;
		env.noverlay = nbp;
	}
	int r = hp_measure_open(&a.spec, &env, &h, err, sizeof(err));
	hp_moved_code_free(moved, nmoved);
	free(bp);
	if (r < 0) {
		fprintf(stderr, "hotpathd measure: %s\n", err);
		free(a.words);
		return r == -HP_MEASURE_E_NOT_FOUND ? HP_EXIT_NOT_FOUND :
		       r == -HP_MEASURE_E_USAGE     ? HP_EXIT_USAGE :
						      HP_EXIT_ERROR;
	}
	end_window_on_signals();
	/* On stderr in both forms: scripts wait for "armed" before starting the workload. */
	fprintf(stderr, "measuring %s: %zu row%s armed for %u s (Ctrl-C ends the window early)\n",
		hp_measure_target_desc(h), hp_measure_nrows(h), hp_measure_nrows(h) == 1 ? "" : "s", a.seconds);
	double deadline = mono_s() + a.seconds;
	while (!stop_window) {
		double left = deadline - mono_s();
		if (left <= 0)
			break;
		int w = hp_measure_wait(h, left > 0.2 ? 200 : (int)(left * 1000) + 1);
		if (w == 1 || (w < 0 && w != -EINTR))
			break;
	}
	struct hp_measure_reading tot;
	struct hp_function_edges *fe = NULL;
	size_t nfe = 0;
	rc = HP_EXIT_ERROR;
	if (hp_measure_total(h, &tot) < 0) {
		char detail[512];
		hp_measure_state(h, detail, sizeof(detail));
		fprintf(stderr, "hotpathd measure: %s\n", detail[0] ? detail : "reading the counters failed");
		goto out;
	}
	if (hp_measure_edges(h, &tot, &fe, &nfe) < 0) {
		fprintf(stderr, "hotpathd measure: out of memory deriving edges\n");
		hp_measure_reading_free(&tot);
		goto out;
	}
	struct out o = { .json = a.json };
	struct source src;
	source_of(h, &src);
	report(&o, &src, &a, &tot, fe, nfe);
	hp_measure_edges_free(fe, nfe);
	hp_measure_reading_free(&tot);
	rc = HP_EXIT_OK;
out:
	hp_measure_close(h);
	free(a.words);
	return rc;
}
