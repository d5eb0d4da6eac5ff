#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs each given test (a compiled test program, or a *.sh script), shows
# every case's "ok"/"FAIL" line, and ends with one "N passed, N failed,
# N skipped" line summed over all of them. A case printed as
# "ok - name # SKIP reason" (a case this machine cannot run) is counted as
# skipped, not passed, and listed with its reason above the summary. A test
# that crashes or exits non-zero without a FAIL line counts as one failure.
# Each test's wall time follows its output ("# took N s"), and the slowest
# ten are listed before the summary, so a slow suite says where its time goes.
# A test that has not ended after HOTPATH_TEST_HANG_S seconds (default 1800: the fuzz targets, the
# longest, took 1,014 s at load average 15-19 on 2 cores) is killed with everything it started (GNU
# timeout signals its whole process group) and counted as a hang, so a stuck test fails the run
# instead of holding it until CI's own limit.
# Exit status 1 if anything failed.
set -u
hang=${HOTPATH_TEST_HANG_S:-1800}
passed=0
failed=0
skipped=0
skips=()
times=()
for t in "$@"; do
	echo "# $t"
	t0=$SECONDS
	if [[ "$t" == *.sh ]]; then
		out=$(timeout -k 10 "$hang" bash "$t" 2>&1)
	else
		out=$(timeout -k 10 "$hang" "$t" 2>&1)
	fi
	rc=$?
	[ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && out+=$'\n'"FAIL - $t: no end after $hang s (a hang), killed with what it started"
	printf '%s\n' "$out"
	echo "# took $((SECONDS - t0)) s"
	times+=("$((SECONDS - t0)) $t")
	s=$(printf '%s\n' "$out" | grep -cE '^ok - .* # SKIP')
	p=$(printf '%s\n' "$out" | grep -c '^ok - ')
	f=$(printf '%s\n' "$out" | grep -c '^FAIL - ')
	while IFS= read -r line; do
		[ -n "$line" ] && skips+=("$(basename "$t"): ${line#ok - }")
	done < <(printf '%s\n' "$out" | grep -E '^ok - .* # SKIP')
	passed=$((passed + p - s))
	failed=$((failed + f))
	skipped=$((skipped + s))
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "FAIL - $t: exited with status $rc"
		failed=$((failed + 1))
	fi
done
if [ ${#times[@]} -gt 1 ]; then
	echo "# slowest:"
	printf '%s\n' "${times[@]}" | sort -rn | head -n 10 | sed 's/^\([0-9]*\) /#   \1 s  /'
fi
for s in ${skips[@]+"${skips[@]}"}; do
	echo "# skipped: $s"
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
