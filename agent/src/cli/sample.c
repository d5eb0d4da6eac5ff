/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `hotpathd sample`: whole-system PC sampling on this host, without a
 * backend. Opens the kernel model, runs the daemon's sampler for N seconds,
 * and prints the hottest functions and the totals, as text or JSON from the
 * same data. It also reports the agent's own CPU time during the sampling
 * phase (getrusage after the model is open), which bench/sampling_overhead
 * uses as the agent's cost. With --stacks it samples call chains too and
 * prints the hottest stacks, folded (command;outermost;...;leaf), the form
 * flame graph tools read.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include "base/grow.h"
#include "base/json.h"
#include "cli/commands.h"
#include "model/model.h"
#include "target/target.h"
#include "measure/sampler.h"

/* _Atomic, not volatile sig_atomic_t: the process has threads (the
 * model's CFG build, the sampler's), any of which may run the handler. */
_Static_assert(ATOMIC_BOOL_LOCK_FREE == 2, "a signal handler sets stop_sampling");
static _Atomic bool stop_sampling;

static void on_signal(int sig)
{
	(void)sig;
	stop_sampling = true;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: hotpathd sample [--seconds N] [--frequency HZ] [--top N] [--stacks [--stack-depth N]] [--json]\n"
		"\n"
		"Sample the program counter of every CPU, map each kernel sample onto the\n"
		"live kernel's functions and basic blocks, and print the hottest functions.\n"
		"With --stacks, also sample call chains (kernel always, user code where it\n"
		"keeps frame pointers) and print the hottest stacks, folded root first as\n"
		"'command;outermost;...;leaf count' (idle-task samples apart).\n"
		"\n"
		"  --seconds N      how long to sample (default 10, 1..3600)\n"
		"  --frequency HZ   samples per second per CPU (default 997, 1..10000)\n"
		"  --top N          how many functions (and stacks) to list (default 20, 0..100000)\n"
		"  --stacks         sample call chains too and list the hottest stacks\n"
		"  --stack-depth N  frames kept per chain (default 64, 1..127)\n"
		"  --json           print one JSON object instead of text\n"
		"  --help           show this help\n");
}

static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

struct hot {
	uint32_t mod, fn;
	uint64_t count;
};

/* One folded stack and its samples, summed over the run. */
struct folded {
	char *line; /* command;outermost;...;leaf */
	uint32_t pid;
	uint64_t count;
};

struct folded_set {
	struct folded *v;
	size_t n, cap;
	uint64_t idle, samples, dropped;
};

/* A frame's name in a folded line: the function (module-qualified outside vmlinux), the file and offset for
 * user code, the address elsewhere. */
static void frame_name(const struct hp_model *m, const struct hp_stack_set *set, const struct hp_frame *f, char *out,
		       size_t len)
{
	if (f->kind == HP_FRAME_KERNEL) {
		const struct hp_module *mod = &m->mods[f->mod];
		snprintf(out, len, "%s%s%s", f->mod ? mod->name : "", f->mod ? ":" : "", mod->funcs[f->fn].name);
	} else if (f->kind == HP_FRAME_USER) {
		const char *base = strrchr(set->paths[f->mod], '/');
		snprintf(out, len, "%s+0x%llx", base ? base + 1 : set->paths[f->mod], (unsigned long long)f->offset);
	} else {
		snprintf(out, len, "0x%llx", (unsigned long long)f->offset);
	}
}

static int fold_interval(const struct hp_model *m, const struct hp_stack_set *set, struct folded_set *fs)
{
	fs->samples += set->samples;
	fs->dropped += set->dropped;
	for (size_t i = 0; i < set->ncounts; i++) {
		const struct hp_stack_count *c = &set->counts[i];
		const struct hp_stack *st = &set->stacks[c->stack];
		if (c->pid == 0)
			fs->idle += c->count;
		char line[8192];
		size_t n =
			(size_t)snprintf(line, sizeof(line), "%s", set->comms[c->comm][0] ? set->comms[c->comm] : "?");
		for (uint32_t k = st->nframes; k-- > 0 && n < sizeof(line);) {
			char name[512];
			frame_name(m, set, &set->frames[st->first + k], name, sizeof(name));
			n += (size_t)snprintf(line + n, sizeof(line) - n, ";%s", name);
		}
		size_t j = 0;
		while (j < fs->n && !(fs->v[j].pid == c->pid && strcmp(fs->v[j].line, line) == 0))
			j++;
		if (j == fs->n) {
			if (HP_GROW(fs->v, fs->cap, fs->n + 1))
				return -ENOMEM;
			if (!(fs->v[j].line = strdup(line)))
				return -ENOMEM;
			fs->v[j].pid = c->pid;
			fs->v[j].count = 0;
			fs->n++;
		}
		fs->v[j].count += c->count;
	}
	return 0;
}

static int cmp_folded(const void *a, const void *b)
{
	const struct folded *x = a, *y = b;
	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	return strcmp(x->line, y->line);
}

static int cmp_hot(const void *a, const void *b)
{
	const struct hot *x = a, *y = b;
	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	if (x->mod != y->mod)
		return x->mod < y->mod ? -1 : 1;
	return x->fn < y->fn ? -1 : x->fn > y->fn;
}

int cmd_sample(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "seconds", required_argument, NULL, 's' }, { "frequency", required_argument, NULL, 'f' },
		{ "top", required_argument, NULL, 't' },     { "json", no_argument, NULL, 'j' },
		{ "stacks", no_argument, NULL, 'S' },        { "stack-depth", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },          { 0 },
	};
	unsigned seconds = 10, freq = 997, top = 20, depth = 0;
	bool json = false, stacks = false;
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (hp_parse_uint(optarg, 1, 3600, &seconds) < 0) {
				fprintf(stderr, "hotpathd sample: --seconds must be a number from 1 to 3600\n");
				return HP_EXIT_USAGE;
			}
			break;
		case 'f':
			if (hp_parse_uint(optarg, 1, 10000, &freq) < 0) {
				fprintf(stderr, "hotpathd sample: --frequency must be a number from 1 to 10000\n");
				return HP_EXIT_USAGE;
			}
			break;
		case 't':
			if (hp_parse_uint(optarg, 0, 100000, &top) < 0) {
				fprintf(stderr, "hotpathd sample: --top must be a number from 0 to 100000\n");
				return HP_EXIT_USAGE;
			}
			break;
		case 'j':
			json = true;
			break;
		case 'S':
			stacks = true;
			break;
		case 'D':
			if (hp_parse_uint(optarg, 1, 127, &depth) < 0) {
				fprintf(stderr, "hotpathd sample: --stack-depth must be a number from 1 to 127\n");
				return HP_EXIT_USAGE;
			}
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
		fprintf(stderr, "hotpathd sample: unexpected argument '%s'\n", argv[optind]);
		return HP_EXIT_USAGE;
	}

	char err[512];
	struct hp_model *m = NULL;
	struct hp_open_opts oo = { .quiet = true };
	if (hp_model_open_kernel(&oo, &m, err, sizeof(err)) < 0) {
		fprintf(stderr, "hotpathd sample: cannot parse the live kernel: %s\n", err);
		return HP_EXIT_ERROR;
	}
	int ret = HP_EXIT_ERROR;
	uint64_t **counts = calloc(m->nmods ? m->nmods : 1, sizeof(*counts));
	struct hot *hot = NULL;
	struct hp_sampler *s = NULL;
	struct folded_set fs = { 0 };
	if (!counts)
		goto out;
	for (size_t i = 0; i < m->nmods; i++)
		if (!(counts[i] = calloc(m->mods[i].nfuncs ? m->mods[i].nfuncs : 1, sizeof(uint64_t))))
			goto out;

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	/* The sampling phase starts here: the model's parse cost is not part of
	 * the steady-state overhead being measured. */
	double cpu0 = cpu_seconds(), wall0 = mono_s();
	struct hp_sampler_opts so = { .frequency = freq, .stacks = stacks, .stack_depth = depth };
	s = hp_sampler_open(m, &so, err, sizeof(err));
	if (!s) {
		fprintf(stderr, "hotpathd sample: %s\n", err);
		goto out;
	}
	uint64_t total = 0, user = 0, unmapped = 0, lost = 0, idle = 0;
	double deadline = wall0 + seconds;
	while (!stop_sampling) {
		double left = deadline - mono_s();
		if (left <= 0)
			break;
		if (left > 1.0)
			left = 1.0;
		struct timespec ts = { (time_t)left, (long)((left - (time_t)left) * 1e9) };
		nanosleep(&ts, NULL);
		struct hp_sample_interval iv;
		if (hp_sampler_take(s, &iv) < 0)
			continue;
		total += iv.total;
		user += iv.user;
		unmapped += iv.unmapped;
		lost += iv.lost;
		idle += iv.idle;
		for (size_t i = 0; i < iv.nblocks; i++)
			counts[iv.blocks[i].mod][iv.blocks[i].fn] += iv.blocks[i].count;
		int fr = stacks ? fold_interval(m, &iv.stacks, &fs) : 0;
		hp_sample_interval_free(&iv);
		if (fr < 0) {
			fprintf(stderr, "hotpathd sample: out of memory folding stacks\n");
			goto out;
		}
	}
	const char *event = hp_sampler_event(s);
	unsigned ncpus = hp_sampler_ncpus(s);
	hp_sampler_close(s);
	s = NULL;
	double wall = mono_s() - wall0, cpu = cpu_seconds() - cpu0;
	double cpu_pct = wall > 0 ? 100.0 * cpu / wall : 0;

	size_t nhot = 0, cap = 0;
	for (size_t i = 0; i < m->nmods; i++)
		for (size_t f = 0; f < m->mods[i].nfuncs; f++)
			if (counts[i][f])
				cap++;
	hot = calloc(cap ? cap : 1, sizeof(*hot));
	if (!hot)
		goto out;
	for (size_t i = 0; i < m->nmods; i++)
		for (size_t f = 0; f < m->mods[i].nfuncs; f++)
			if (counts[i][f])
				hot[nhot++] = (struct hot){ (uint32_t)i, (uint32_t)f, counts[i][f] };
	qsort(hot, nhot, sizeof(*hot), cmp_hot);
	if (top < nhot)
		nhot = top;
	uint64_t kernel = total - user;
	qsort(fs.v, fs.n, sizeof(*fs.v), cmp_folded);
	size_t nfolded = fs.n < top ? fs.n : top;

	if (json) {
		printf("{\"event\": \"%s\", \"frequency_hz\": %u, \"cpus\": %u, \"seconds\": %.3f, "
		       "\"total_samples\": %llu, \"kernel_samples\": %llu, \"user_samples\": %llu, "
		       "\"unmapped_samples\": %llu, \"lost_samples\": %llu, \"top\": [",
		       event, freq, ncpus, wall, (unsigned long long)total, (unsigned long long)kernel,
		       (unsigned long long)user, (unsigned long long)unmapped, (unsigned long long)lost);
		for (size_t i = 0; i < nhot; i++) {
			const struct hp_module *mod = &m->mods[hot[i].mod];
			const struct hp_function *f = &mod->funcs[hot[i].fn];
			printf("%s{\"module\": ", i ? ", " : "");
			json_quote(stdout, mod->name);
			printf(", \"function\": ");
			json_quote(stdout, f->name);
			printf(", \"index\": %u, \"address\": %llu, \"samples\": %llu, \"share\": %.6f, "
			       "\"samples_per_second\": %.3f}",
			       hot[i].fn, (unsigned long long)f->addr, (unsigned long long)hot[i].count,
			       total ? (double)hot[i].count / total : 0.0, wall > 0 ? hot[i].count / wall : 0.0);
		}
		printf("], \"idle_samples\": %llu", (unsigned long long)idle);
		if (stacks) {
			printf(", \"stack_samples\": %llu, \"stack_dropped_samples\": %llu, \"stacks\": [",
			       (unsigned long long)fs.samples, (unsigned long long)fs.dropped);
			for (size_t i = 0; i < nfolded; i++) {
				printf("%s{\"folded\": ", i ? ", " : "");
				json_quote(stdout, fs.v[i].line);
				printf(", \"pid\": %u, \"idle\": %s, \"samples\": %llu}", fs.v[i].pid,
				       fs.v[i].pid == 0 ? "true" : "false", (unsigned long long)fs.v[i].count);
			}
			printf("]");
		}
		printf(", \"agent_cpu_seconds\": %.6f, \"agent_cpu_percent_of_one_cpu\": %.4f}\n", cpu, cpu_pct);
	} else {
		printf("sampled %u CPU(s) with %s at %u Hz for %.1f s\n", ncpus, event, freq, wall);
		printf("%10s %7s %10s  %s\n", "samples", "share", "samples/s", "function");
		for (size_t i = 0; i < nhot; i++) {
			const struct hp_module *mod = &m->mods[hot[i].mod];
			const struct hp_function *f = &mod->funcs[hot[i].fn];
			printf("%10llu %6.2f%% %10.1f  %s%s%s\n", (unsigned long long)hot[i].count,
			       total ? 100.0 * hot[i].count / total : 0.0, wall > 0 ? hot[i].count / wall : 0.0,
			       hot[i].mod ? mod->name : "", hot[i].mod ? ":" : "", f->name);
		}
		printf("total %llu samples: %llu kernel (%llu outside known functions), %llu user, %llu lost\n",
		       (unsigned long long)total, (unsigned long long)kernel, (unsigned long long)unmapped,
		       (unsigned long long)user, (unsigned long long)lost);
		printf("idle task: %llu samples\n", (unsigned long long)idle);
		if (stacks) {
			printf("\nhottest stacks (%llu samples with a call chain, %llu dropped), folded:\n",
			       (unsigned long long)fs.samples, (unsigned long long)fs.dropped);
			for (size_t i = 0; i < nfolded; i++)
				printf("%s%s %llu\n", fs.v[i].line, fs.v[i].pid == 0 ? " [idle]" : "",
				       (unsigned long long)fs.v[i].count);
		}
		printf("agent CPU while sampling: %.3f s in %.1f s = %.3f%% of one CPU\n", cpu, wall, cpu_pct);
	}
	ret = HP_EXIT_OK;
out:
	hp_sampler_close(s);
	if (counts)
		for (size_t i = 0; i < m->nmods; i++)
			free(counts[i]);
	free(counts);
	free(hot);
	for (size_t i = 0; i < fs.n; i++)
		free(fs.v[i].line);
	free(fs.v);
	hp_model_free(m);
	return ret;
}
