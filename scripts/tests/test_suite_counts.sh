#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/test.sh's reading of each suite's summary (scripts/suite-counts.sh): passed, failed and
# skipped from every runner's own words, skips never folded into passed. The samples are the summary
# lines each runner prints (agent runner, compose check, kernel lane, pytest with and without -q,
# vitest, Playwright's list reporter). Run from the repository's root.
set -u
. scripts/suite-counts.sh
dir=$(mktemp -d /tmp/hotpath-counts.XXXXXX)
trap 'rm -rf "$dir"' EXIT
case_() {
	local name=$1 want=$2 text=$3
	printf '%b\n' "$text" >"$dir/log"
	local got; got=$(suite_counts "$dir/log")
	if [ "$got" = "$want" ]; then echo "ok - counts: $name"; else echo "FAIL - counts: $name: want '$want', got '$got'"; fi
}
case_ "agent runner with skips" "12 0 3" "ok - a\n# skipped: x\n12 passed, 0 failed, 3 skipped"
case_ "lint (no skips named)" "4 0 0" "ok - lint\n4 passed, 0 failed"
case_ "compose with the stack skipped" "13 0 1" "ok - static: x\n13 passed, 0 failed, 1 skipped"
case_ "kernel lane with checks not run" "9 1 4" "not run - x: y\nlane: 9 passed, 1 failed, 4 skipped\nkernel-lane: kernel 6.1, 3 functions"
case_ "pytest -q" "12 1 3" "..F.s\n1 failed, 12 passed, 3 skipped in 3.20s"
case_ "pytest -q over a minute" "120 0 2" "120 passed, 2 skipped in 75.10s (0:01:15)"
case_ "pytest" "12 0 1" "===== 12 passed, 1 skipped in 3.2s ====="
case_ "vitest" "12 0 2" " Test Files  3 passed (3)\n      Tests  12 passed | 2 skipped (14)"
case_ "vitest with a failure, coloured" "11 1 2" "      Tests  \x1b[31m1 failed\x1b[39m | \x1b[32m11 passed\x1b[39m | 2 skipped (14)"
case_ "playwright list reporter" "5 1 2" "  1 failed\n    [chromium] › a.spec.ts:3:1 › x\n  2 skipped\n  5 passed (20.3s)"
case_ "playwright, all passed" "7 0 0" "  7 passed (1.2m)"
