#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs each given test (a compiled test program, or a *.sh script), shows
# every case's "ok"/"FAIL" line, and ends with one "N passed, N failed" line
# summed over all of them. A test that crashes or exits non-zero without a
# FAIL line counts as one failure. Exit status 1 if anything failed.
set -u
passed=0
failed=0
for t in "$@"; do
	echo "# $t"
	if [[ "$t" == *.sh ]]; then
		out=$(bash "$t" 2>&1)
	else
		out=$("$t" 2>&1)
	fi
	rc=$?
	printf '%s\n' "$out"
	p=$(printf '%s\n' "$out" | grep -c '^ok - ')
	f=$(printf '%s\n' "$out" | grep -c '^FAIL - ')
	passed=$((passed + p))
	failed=$((failed + f))
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "FAIL - $t: exited with status $rc"
		failed=$((failed + 1))
	fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
