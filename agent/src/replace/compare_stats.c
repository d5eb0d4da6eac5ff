// SPDX-License-Identifier: Apache-2.0
/*
 * The statistics of an interleaved comparison (compare.h): paired
 * differences of the share of samples in the plan's code, their mean and
 * Student's t interval, relative to the original share; and the lines that
 * say them. The backend computes the same from the windows
 * (docs/agent-cli.md, "hotpathd compare").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "replace/compare.h"

/* t(0.975, df) for df = 1..49. */
static const double t975[49] = {
	12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788, 2.1604,
	2.1448,  2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555,
	2.0518,  2.0484, 2.0452, 2.0423, 2.0395, 2.0369, 2.0345, 2.0322, 2.0301, 2.0281, 2.0262, 2.0244, 2.0227,
	2.0211,  2.0195, 2.0181, 2.0167, 2.0154, 2.0141, 2.0129, 2.0117, 2.0106, 2.0096,
};

double hp_student_t975(unsigned df)
{
	if (df == 0)
		return NAN;
	return df <= 49 ? t975[df - 1] : 1.96;
}

void hp_compare_summarize(const struct hp_compare_window *w, size_t n, struct hp_compare_summary *s)
{
	*s = (struct hp_compare_summary){ .confidence = 0.95, .verdict = "insufficient" };
	unsigned npairs = 0;
	for (size_t k = 0; k < n; k++)
		if (w[k].pair + 1 > npairs)
			npairs = w[k].pair + 1;
	double *d = calloc(npairs + 1, sizeof(*d)), so = 0, sn = 0;
	if (!d)
		return;
	size_t m = 0;
	for (unsigned i = 0; i < npairs; i++) {
		const struct hp_compare_window *o = NULL, *x = NULL;
		for (size_t k = 0; k < n; k++)
			if (w[k].pair == i)
				*(w[k].installed ? &x : &o) = &w[k];
		if (!o || !x || !o->samples || !x->samples)
			continue; /* unusable: dropped */
		double s_o = (double)o->samples_in_plan / (double)o->samples;
		double s_n = (double)x->samples_in_plan / (double)x->samples;
		so += s_o;
		sn += s_n;
		d[m++] = s_n - s_o;
	}
	s->pairs_used = m;
	if (m) {
		s->share_original = so / (double)m;
		s->share_installed = sn / (double)m;
	}
	if (m >= 2 && s->share_original > 0) {
		double mean = 0, ss = 0;
		for (size_t i = 0; i < m; i++)
			mean += d[i];
		mean /= (double)m;
		for (size_t i = 0; i < m; i++)
			ss += (d[i] - mean) * (d[i] - mean);
		double half = hp_student_t975((unsigned)m - 1) * sqrt(ss / (double)(m - 1)) / sqrt((double)m);
		s->sufficient = true;
		s->change = mean / s->share_original;
		s->lo = (mean - half) / s->share_original;
		s->hi = (mean + half) / s->share_original;
		s->verdict = s->hi < 0 ? "faster" : s->lo > 0 ? "slower" : "within_noise";
	}
	free(d);
}

void hp_compare_window_line(const struct hp_compare *c, size_t k, char *buf, size_t len)
{
	const struct hp_compare_window *w = &c->windows[k];
	snprintf(buf, len, "pair %u/%u: %s, %.1f%% of samples in the plan's code (%llu of %llu, %.2f s CPU in %.2f s)",
		 w->pair + 1, c->pairs, w->installed ? "installed" : "original",
		 w->samples ? 100.0 * (double)w->samples_in_plan / (double)w->samples : 0.0,
		 (unsigned long long)w->samples_in_plan, (unsigned long long)w->samples, w->cpu_seconds, w->seconds);
}

void hp_compare_summary_line(const struct hp_compare_summary *s, char *buf, size_t len)
{
	if (!s->sufficient) {
		snprintf(buf, len, "insufficient: %zu pair%s with samples in both windows%s, 2 needed for an interval",
			 s->pairs_used, s->pairs_used == 1 ? "" : "s",
			 s->pairs_used >= 2 ? " but none in the plan's code with it reverted" : "");
		return;
	}
	const char *verdict = s->verdict[0] == 'w' ? "within noise" : s->verdict;
	snprintf(buf, len,
		 "the plan's code took %.1f%% %s of the process's samples (%.0f%% interval %+.1f%% .. %+.1f%%): %s",
		 fabs(s->change) * 100, s->change <= 0 ? "less" : "more", s->confidence * 100, s->lo * 100, s->hi * 100,
		 verdict);
}
