// SPDX-License-Identifier: Apache-2.0
/*
 * The statistics of the interleaved comparison (replace/compare_stats.c)
 * on fixed windows, against values computed by hand: a faster plan, a
 * slower one, one within noise, a pair dropped for a window without
 * samples, too few pairs ("insufficient"), no sample in the plan's code
 * with it reverted, the t table, and the sentences that say them. The
 * comparison of a live process is in test_replace.c (HOTPATH_REPLACE_ONLY=
 * compare).
 */
#include <math.h>

#include "harness.h"
#include "replace/compare.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-4)

/* A window of pair p: in of n samples in the plan's code. */
static struct hp_compare_window win(unsigned p, bool installed, uint64_t in, uint64_t n)
{
	return (struct hp_compare_window){ .pair = p, .installed = installed, .samples = n, .samples_in_plan = in };
}

/* d = -0.02, -0.03, -0.02, -0.03 on an original share of 0.2 (pairs in the
 * alternating order): mean -0.025, sd 0.0057735, t(3) = 3.1824, half width
 * 3.1824 * 0.0057735 / 2 = 0.0091868; change -0.125, interval
 * (-0.0341868, -0.0158132) / 0.2 = (-0.170934, -0.079066). */
static void t_faster(void)
{
	struct hp_compare_window w[] = {
		win(0, false, 200, 1000), win(0, true, 180, 1000), win(1, true, 170, 1000), win(1, false, 200, 1000),
		win(2, false, 400, 2000), win(2, true, 360, 2000), win(3, true, 85, 500),   win(3, false, 100, 500),
	};
	struct hp_compare_summary s;
	hp_compare_summarize(w, 8, &s);
	EXPECT(s.sufficient && s.pairs_used == 4, "%zu pairs used", s.pairs_used);
	EXPECT(NEAR(s.share_original, 0.2) && NEAR(s.share_installed, 0.175), "shares %f %f", s.share_original,
	       s.share_installed);
	EXPECT(NEAR(s.change, -0.125), "change %f", s.change);
	EXPECT(NEAR(s.lo, -0.170934) && NEAR(s.hi, -0.079066), "interval %f .. %f", s.lo, s.hi);
	EXPECT(!strcmp(s.verdict, "faster"), "verdict %s", s.verdict);
	EXPECT(s.confidence == 0.95, "confidence %f", s.confidence);
	char line[300];
	hp_compare_summary_line(&s, line, sizeof(line));
	EXPECT(!strcmp(line,
		       "the plan's code took 12.5% less of the process's samples (95% interval -17.1% .. "
		       "-7.9%): faster"),
	       "%s", line);
}

/* The same pairs with the arms swapped: d = +0.02, +0.03, ... on an
 * original share of 0.175: change 0.025 / 0.175 = 0.142857, interval
 * (0.0158132, 0.0341868) / 0.175 = (0.090361, 0.195353). */
static void t_slower(void)
{
	struct hp_compare_window w[] = {
		win(0, true, 200, 1000), win(0, false, 180, 1000), win(1, false, 170, 1000), win(1, true, 200, 1000),
		win(2, true, 400, 2000), win(2, false, 360, 2000), win(3, false, 85, 500),   win(3, true, 100, 500),
	};
	struct hp_compare_summary s;
	hp_compare_summarize(w, 8, &s);
	EXPECT(NEAR(s.change, 0.142857), "change %f", s.change);
	EXPECT(NEAR(s.lo, 0.090361) && NEAR(s.hi, 0.195353), "interval %f .. %f", s.lo, s.hi);
	EXPECT(!strcmp(s.verdict, "slower"), "verdict %s", s.verdict);
}

/* d = -0.02, -0.04, -0.01 on 0.2: mean -0.0233333, sd 0.0152753, t(2) =
 * 4.3027, half 0.0379462: change -0.116667, interval (-0.306398, 0.073064).
 * A fourth pair whose installed window has no sample is dropped. */
static void t_within_noise_and_a_dropped_pair(void)
{
	struct hp_compare_window w[] = {
		win(0, false, 200, 1000), win(0, true, 180, 1000), win(1, true, 170, 1000), win(1, false, 210, 1000),
		win(2, false, 190, 1000), win(2, true, 180, 1000), win(3, true, 0, 0),      win(3, false, 500, 1000),
	};
	struct hp_compare_summary s;
	hp_compare_summarize(w, 8, &s);
	EXPECT(s.sufficient && s.pairs_used == 3, "%zu pairs used", s.pairs_used);
	EXPECT(NEAR(s.share_original, 0.2) && NEAR(s.share_installed, 0.176667), "shares %f %f", s.share_original,
	       s.share_installed);
	EXPECT(NEAR(s.change, -0.116667), "change %f", s.change);
	EXPECT(NEAR(s.lo, -0.306398) && NEAR(s.hi, 0.073064), "interval %f .. %f", s.lo, s.hi);
	EXPECT(!strcmp(s.verdict, "within_noise"), "verdict %s", s.verdict);
	char line[300];
	hp_compare_summary_line(&s, line, sizeof(line));
	EXPECT(strstr(line, "11.7% less") && strstr(line, "-30.6% .. +7.3%): within noise"), "%s", line);
}

/* Two pairs, one dropped (its original window has no sample): insufficient.
 * A window missing (a comparison that ended early) drops its pair too. */
static void t_insufficient(void)
{
	struct hp_compare_window w[] = {
		win(0, false, 200, 1000),
		win(0, true, 180, 1000),
		win(1, true, 170, 1000),
		win(1, false, 0, 0),
	};
	struct hp_compare_summary s;
	hp_compare_summarize(w, 4, &s);
	EXPECT(!s.sufficient && s.pairs_used == 1, "sufficient %d, %zu pairs used", s.sufficient, s.pairs_used);
	EXPECT(!strcmp(s.verdict, "insufficient"), "verdict %s", s.verdict);
	EXPECT(NEAR(s.share_original, 0.2) && NEAR(s.share_installed, 0.18), "shares %f %f", s.share_original,
	       s.share_installed);
	char line[300];
	hp_compare_summary_line(&s, line, sizeof(line));
	EXPECT(!strncmp(line, "insufficient: 1 pair with samples in both windows", 49), "%s", line);
	hp_compare_summarize(w, 3, &s);
	EXPECT(!s.sufficient && s.pairs_used == 1, "an unfinished pair was used: %zu", s.pairs_used);
	hp_compare_summarize(NULL, 0, &s);
	EXPECT(!s.sufficient && s.pairs_used == 0 && !strcmp(s.verdict, "insufficient"), "no windows: %s", s.verdict);
}

/* No sample in the plan's code with it reverted: no relative change. */
static void t_no_original_share(void)
{
	struct hp_compare_window w[] = {
		win(0, false, 0, 1000),
		win(0, true, 10, 1000),
		win(1, true, 12, 1000),
		win(1, false, 0, 1000),
	};
	struct hp_compare_summary s;
	hp_compare_summarize(w, 4, &s);
	EXPECT(!s.sufficient && s.pairs_used == 2 && !strcmp(s.verdict, "insufficient"), "%s with %zu pairs", s.verdict,
	       s.pairs_used);
}

static void t_student_table(void)
{
	EXPECT(NEAR(hp_student_t975(1), 12.7062) && NEAR(hp_student_t975(5), 2.5706) &&
		       NEAR(hp_student_t975(30), 2.0423) && NEAR(hp_student_t975(49), 2.0096),
	       "t(0.975) table");
	EXPECT(isnan(hp_student_t975(0)), "t with no degree of freedom");
	for (unsigned df = 1; df < 49; df++)
		EXPECT(hp_student_t975(df) > hp_student_t975(df + 1), "t(%u) not above t(%u)", df, df + 1);
}

int main(void)
{
	RUN(t_faster);
	RUN(t_slower);
	RUN(t_within_noise_and_a_dropped_pair);
	RUN(t_insufficient);
	RUN(t_no_original_share);
	RUN(t_student_table);
	TEST_EXIT();
}
