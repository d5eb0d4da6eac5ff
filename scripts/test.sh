#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run every Hotpath test suite against real parts: the agent against this machine's live kernel, real
# processes and ELF files; the backend against a real (embedded) Postgres; the console's unit tests;
# docker-compose.yml validated offline; Playwright in Debian's Chromium against the whole stack as
# `make run` starts it; the kernel lane (a Debian 6.1 kernel under QEMU as a second host, where
# kernel probes and modules exist); every benchmark of bench/ at a tiny budget (bench/smoke.sh: each
# must still run to its summary line). `make test` installs and builds first, then calls this.
# Prints each suite's own output, then one summary line over all suites.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
logs=$(mktemp -d /tmp/hotpath-test.XXXXXX)
declare -A passed failed status took
order=()

# suite NAME CMD...: run a suite, keep its output, and read its pass/fail counts from its own summary.
suite() {
	local name=$1; shift
	order+=("$name")
	printf '\n===== %s =====\n' "$name"
	local t=$SECONDS
	"$@" 2>&1 | tee "$logs/$name.log"
	status[$name]=${PIPESTATUS[0]}
	took[$name]=$((SECONDS - t))
	local out; out=$(sed 's/\x1b\[[0-9;]*m//g' "$logs/$name.log")
	local p f
	# agent runner and plain summaries: "N passed, N failed"
	p=$(grep -oE '^[A-Za-z]*:? *[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1 | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
	f=$(grep -oE '^[A-Za-z]*:? *[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1 | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
	if [ -z "$p" ]; then
		# pytest "== 12 passed, 1 failed in 3.2s ==" (or with -q "1 failed, 12 passed in 3.2s"),
		# vitest "Tests  12 passed (12)", playwright "  5 passed (20s)"
		local line; line=$(grep -E '(^=+ .*(passed|failed).* =+$)|(^[0-9]+ (passed|failed).* in [0-9.]+s( \([0-9:]+\))?$)|(^ +Tests +.*passed)|(^ +[0-9]+ (passed|failed) \()' <<<"$out" | tail -1)
		p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' | head -1)
		f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' | head -1)
		if [ -z "$f" ]; then f=$(grep -E '^ +[0-9]+ failed' <<<"$out" | grep -oE '[0-9]+' | head -1); fi
	fi
	passed[$name]=${p:-0}; failed[$name]=${f:-0}
	if [ "${status[$name]}" != 0 ] && [ "${failed[$name]}" = 0 ]; then failed[$name]=1; fi
}

suite lint         ./scripts/lint.sh
suite agent        make -s -C agent test
suite agent-stream backend/.venv/bin/python -m pytest -q agent/tests/python
suite backend      make -s -C backend test
suite console      bash -c 'cd frontend && npm test --silent'
suite compose      ./deploy/check-compose.sh
suite e2e          ./e2e/run.sh
# after e2e: its plan tests build the SQLite driver bench/replace's smoke run uses
suite bench        ./bench/smoke.sh
suite kernel-lane  ./e2e/kernel-lane/test.sh

printf '\n===== summary =====\n'
tp=0 tf=0 rc=0
for n in "${order[@]}"; do
	printf '%-13s %4s passed, %s failed (exit %s, %s s)\n' "$n" "${passed[$n]}" "${failed[$n]}" "${status[$n]}" "${took[$n]}"
	tp=$((tp + passed[$n])); tf=$((tf + failed[$n]))
	[ "${status[$n]}" = 0 ] || rc=1
done
[ $tp -gt 0 ] || rc=1
echo "logs: $logs"
echo "$tp passed, $tf failed"
exit $rc
