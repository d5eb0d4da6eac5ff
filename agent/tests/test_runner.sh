#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test runner's counts (tests/run.sh with tests/harness.h): a case the machine cannot run is
# printed and summed as skipped, never as passed, and listed with its reason above the summary,
# which keeps "N passed, N failed" at its start for scripts/test.sh. Builds a small program with
# the harness (one case passes, one skips, one fails) and runs it through the runner. Run from the
# agent directory.
set -u
dir=$(mktemp -d /tmp/hotpath-runner.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/cases.c" <<'C'
#include "harness.h"
static void t_passes(void) { EXPECT(1 + 1 == 2, "arithmetic"); }
static void t_cannot_run_here(void) { SKIP("no such capability on this machine"); }
static void t_fails(void) { EXPECT(0, "on purpose"); }
int main(void)
{
	RUN(t_passes);
	RUN(t_cannot_run_here);
	if (getenv("WITH_FAILURE"))
		RUN(t_fails);
	TEST_EXIT();
}
C
if ! gcc -Itests -o "$dir/cases" "$dir/cases.c" 2>"$dir/gcc.err"; then
	cat "$dir/gcc.err"
	echo "FAIL - runner: the harness does not compile"
	exit 1
fi
check() {
	local name=$1 want=$2 got=$3
	if [ "$got" = "$want" ]; then
		echo "ok - runner: $name"
	else
		echo "FAIL - runner: $name: want '$want', got '$got'"
	fi
}
# The nested runner's output is captured, never printed: only this script's own lines are counted.
out=$(./tests/run.sh "$dir/cases" 2>&1); rc=$?
check "a skip is counted as skipped, not passed" "1 passed, 0 failed, 1 skipped" "$(tail -1 <<<"$out")"
check "a skip is shown as TAP's SKIP with its reason" "ok - t_cannot_run_here # SKIP no such capability on this machine" \
	"$(grep -F 't_cannot_run_here' <<<"$out" | head -1)"
check "the skip is listed above the summary" "# skipped: cases: t_cannot_run_here # SKIP no such capability on this machine" \
	"$(grep '^# skipped:' <<<"$out")"
check "skips alone do not fail the run" 0 "$rc"
check "the test's wall time follows its output" "1" "$(grep -cE '^# took [0-9]+ s$' <<<"$out")"
out=$(WITH_FAILURE=1 ./tests/run.sh "$dir/cases" 2>&1); rc=$?
check "a failure is counted beside a skip" "1 passed, 1 failed, 1 skipped" "$(tail -1 <<<"$out")"
check "a failure fails the run" 1 "$rc"
