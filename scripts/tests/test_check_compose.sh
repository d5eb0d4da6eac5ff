#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/check-compose.sh says what it proves: the offline checks are named "static:", and starting
# the stack, which needs a Docker daemon, is a visible skip with the reason when none answers (here:
# DOCKER_HOST pointed at a socket that does not exist), counted as skipped, never as passed. Run from
# the repository's root.
set -u
out=$(DOCKER_HOST=unix:///nonexistent/hotpath-no-daemon.sock ./deploy/check-compose.sh 2>&1); rc=$?
expect() {
	local name=$1; shift
	if "$@"; then echo "ok - compose check: $name"; else echo "FAIL - compose check: $name"; printf '%s\n' "$out" | tail -5; fi
}
checks=$(grep -E '^(ok|FAIL|PASS)\b' <<<"$out")
expect "every offline check is named static" \
	bash -c 'grep -qE "^ok - static: " <<<"$1" && ! grep -vE "^(ok|FAIL) - static: |^ok - stack: .* # SKIP " <<<"$1"' _ "$checks"
expect "starting the stack is skipped with the reason" \
	grep -qE '^ok - stack: .* # SKIP not run: no Docker daemon \(docker info: .+\)$' <<<"$out"
expect "the summary counts it as skipped" grep -qE '^[0-9]+ passed, 0 failed, 1 skipped$' <<<"$(tail -1 <<<"$out")"
expect "a skip does not fail the check" test "$rc" = 0
