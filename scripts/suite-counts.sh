#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite_counts FILE: print "PASSED FAILED SKIPPED" read from a test suite's own summary in FILE (its
# output, colour codes allowed). Sourced by scripts/test.sh; tested by scripts/tests/test_suite_counts.sh.
# Summaries it reads:
#   agent runner, lint, compose, kernel lane   "N passed, N failed[, N skipped]" (a "lane:" prefix allowed)
#   pytest      "== 12 passed, 3 skipped in 3.2s ==", with -q "1 failed, 12 passed, 3 skipped in 3.2s"
#   vitest      "Tests  1 failed | 12 passed | 2 skipped (15)"
#   playwright  "  2 skipped" / "  1 failed" lines, then "  5 passed (20s)"
# A count a summary does not name is 0.
suite_counts() {
	local out; out=$(sed 's/\x1b\[[0-9;]*m//g' "$1")
	local line p f s
	line=$(grep -E '^[A-Za-z-]*:? *[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1)
	if [ -z "$line" ]; then
		line=$(grep -E '(^=+ .*(passed|failed|skipped).* =+$)|(^[0-9]+ (passed|failed|skipped).* in [0-9.]+s( \([0-9:]+\))?$)|(^ +Tests +.*(passed|failed|skipped))' <<<"$out" | tail -1)
	fi
	if [ -n "$line" ]; then
		p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' | head -1)
		f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' | head -1)
		s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' | head -1)
	else
		# Playwright's list reporter: one line per outcome, each "  N outcome", the passed one with the time.
		p=$(grep -E '^ +[0-9]+ passed( \(|$)' <<<"$out" | tail -1 | grep -oE '[0-9]+' | head -1)
		f=$(grep -E '^ +[0-9]+ failed$' <<<"$out" | tail -1 | grep -oE '[0-9]+' | head -1)
		s=$(grep -E '^ +[0-9]+ skipped$' <<<"$out" | tail -1 | grep -oE '[0-9]+' | head -1)
	fi
	echo "${p:-0} ${f:-0} ${s:-0}"
}
