/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The interleaved before/after of an installed plan (issue 17 item 5): in
 * pairs of windows the plan is reverted (arm "original") and installed
 * again (arm "installed"), the order alternating pair by pair (O I, I O,
 * O I, ...) so drift cancels, while the process runs uninstrumented: its
 * threads' PCs are sampled (measure/sampler.h, no probes) and each window
 * counts all samples, the samples in the plan's code (every member's
 * original range, or the installed copy's heap) and the process's CPU
 * time. The plan is installed at the end, as it was. compare.c runs it,
 * compare_stats.c summarizes the windows (the statistics the backend
 * recomputes alike), compare_json.c writes the JSON `hotpathd compare
 * --json` prints and CompareResult.detail_json carries
 * (docs/agent-cli.md, "hotpathd compare").
 */
#ifndef HOTPATH_REPLACE_COMPARE_H
#define HOTPATH_REPLACE_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HP_COMPARE_PAIRS_DEFAULT  6
#define HP_COMPARE_PAIRS_MIN      2
#define HP_COMPARE_PAIRS_MAX      50
#define HP_COMPARE_WINDOW_DEFAULT 1.0
#define HP_COMPARE_WINDOW_MIN     0.2
#define HP_COMPARE_WINDOW_MAX     60.0
#define HP_COMPARE_HZ             997u

/* One window's counts. */
struct hp_compare_window {
	unsigned pair;
	bool installed; /* arm: the plan installed, else reverted (the original code) */
	int64_t start_unix_ns;
	double seconds;
	uint64_t samples;         /* every sample of the process's threads */
	uint64_t samples_in_plan; /* of those, PCs in the plan's code */
	double cpu_seconds;       /* the process's utime + stime in the window */
};

/* What the windows say (compare_stats.c). */
struct hp_compare_summary {
	double share_original, share_installed; /* mean share of samples in the plan's code, per arm */
	bool sufficient;                        /* at least 2 usable pairs: change and interval are set */
	double change;                          /* mean difference of shares / share_original */
	double lo, hi;                          /* its 95% interval */
	double confidence;                      /* 0.95 */
	size_t pairs_used;                      /* pairs with samples in both windows */
	const char *verdict;                    /* faster, slower, within_noise, insufficient */
};

/* Student's t quantile t(0.975, df) for df 1..49 (a table; 1.96 beyond). */
double hp_student_t975(unsigned df);

/*
 * Summarize windows w[0..n): per pair i, s_o(i) and s_n(i) the share of
 * samples in the plan's code of its original and its installed window,
 * d(i) = s_n(i) - s_o(i); a pair with a window without samples is dropped.
 * share_* are the means of s_o and s_n; change = mean d / share_original;
 * the interval (mean d -+ t(0.975, n-1) sd / sqrt(n)) / share_original;
 * "faster" when its upper end < 0, "slower" when its lower end > 0, else
 * "within_noise"; fewer than 2 usable pairs (or no sample in the plan's
 * code in any original window) is "insufficient".
 */
void hp_compare_summarize(const struct hp_compare_window *w, size_t n, struct hp_compare_summary *s);

struct hp_compare;

struct hp_compare_opts {
	const char *state_dir; /* journals (STATE_DIR/replace) */
	const char *id;        /* the install's id (the console's plan id) */
	unsigned pairs;        /* 0: HP_COMPARE_PAIRS_DEFAULT */
	double window_seconds; /* 0: HP_COMPARE_WINDOW_DEFAULT */
	/* After every window (c->windows[c->nwindows - 1]): progress; a
	 * nonzero return cancels the comparison there (the plan is installed
	 * again before hp_compare_run returns -ECANCELED). May be NULL. */
	int (*window_done)(void *ctx, const struct hp_compare *c);
	/* After every revert and install of the plan (the daemon re-arms its
	 * probes there). May be NULL. */
	void (*toggled)(void *ctx, bool installed);
	void *ctx;
};

struct hp_compare {
	char id[64];
	int pid;
	char root[128];
	size_t members;
	unsigned pairs;
	double window_seconds;
	unsigned sample_hz;
	struct hp_compare_window *windows;
	size_t nwindows;
	struct hp_compare_summary summary;
	double revert_ms, install_ms; /* mean time of one revert, one install of the plan */
	size_t reverts, installs;
	/* At the end, the install's state as the journals say it (installed,
	 * as it was; process_gone; after a failed revert or install, reverted
	 * or what `hotpathd installed` shows). */
	char state[24];
};

/*
 * Compare the install id in its running process. 0 with c filled (free it
 * with hp_compare_free, also after an error: c holds what was measured);
 * else a negative errno with err saying why: -ENOENT not installed,
 * -EINVAL options out of range, -ESRCH the process is gone (before or
 * during), -ECANCELED cancelled (installed again), or the revert's or
 * install's error.
 */
int hp_compare_run(const struct hp_compare_opts *o, struct hp_compare *c, char *err, size_t errlen);
void hp_compare_free(struct hp_compare *c);

/* One line per window, as `hotpathd compare` prints it and the daemon's
 * Progress says it ("pair 3/6: installed, 18.2% of samples in the plan's
 * code"), into buf. */
void hp_compare_window_line(const struct hp_compare *c, size_t k, char *buf, size_t len);
/* The summary as a sentence into buf ("the plan's code took 9.2% less of
 * the process's samples (95% interval -15.0% .. -3.0%): faster"). */
void hp_compare_summary_line(const struct hp_compare_summary *s, char *buf, size_t len);
/* The comparison's JSON (compare_json.c), also of one that ended early
 * (the windows measured, state saying where the plan is). */
void hp_compare_json(FILE *fp, const struct hp_compare *c);

#endif
