#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run every Hotpath test suite against real parts: the agent against this machine's live kernel, real
# processes and ELF files; the backend against a real (embedded) Postgres; the console's unit tests;
# docker-compose.yml validated offline (static) and started where a Docker daemon answers; Playwright in Debian's Chromium against the whole stack as
# `make run` starts it; the kernel lane (a Debian 6.1 kernel under QEMU as a second host, where
# kernel probes and modules exist); every benchmark of bench/ at a tiny budget (bench/smoke.sh: each
# must still run to its summary line). `make test` installs and builds first, then calls this.
# Prints each suite's own output, then each suite's passed/failed/skipped counts with its wall and CPU
# seconds, every skipped check with its reason, and one line "N passed, N failed, N skipped" over all suites (the CI parser reads
# its start). A skip is a check this machine cannot run; it is never counted as passed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
logs=$(mktemp -d /tmp/hotpath-test.XXXXXX)

. "$root/scripts/suite-counts.sh"

# CPU time (user + system, ms) of the children this shell has waited for so far, into cpu_ms: what a
# suite cost the machine, beside its wall time (CI's time budget is mostly CPU on 2 cores); a daemon a
# suite starts counts only if the suite waits for it when it stops it. `times` runs
# in this shell (a command substitution would report its own children).
child_cpu_ms() {
	local u s
	times >"$logs/.times.$BASHPID"
	{ read -r _ _; read -r u s; } <"$logs/.times.$BASHPID"
	cpu_ms=$(( $(to_ms "$u") + $(to_ms "$s") ))
}
to_ms() { # 1m2.345s -> 62345
	local m=${1%%m*} rest=${1#*m}
	rest=${rest%s}
	local sec=${rest%.*} frac=${rest#*.}
	echo $(( (10#$m * 60 + 10#$sec) * 1000 + 10#${frac:0:3} ))
}

# suite NAME CMD...: run a suite, keep its output in $logs/NAME.log, and write its result to
# $logs/NAME.result: exit status, wall seconds, CPU seconds, and its passed/failed/skipped counts read
# from its own summary (scripts/suite-counts.sh); a suite that exits non-zero with no failure counted
# counts one. With QUIET=1 its output goes only to its log (the suite running beside the others).
suite() {
	local name=$1; shift
	[ "${QUIET:-0}" = 1 ] || printf '\n===== %s =====\n' "$name"
	local t=$SECONDS c rc
	child_cpu_ms; c=$cpu_ms
	if [ "${QUIET:-0}" = 1 ]; then
		"$@" >"$logs/$name.log" 2>&1
		rc=$?
	else
		"$@" 2>&1 | tee "$logs/$name.log"
		rc=${PIPESTATUS[0]}
	fi
	local took=$((SECONDS - t))
	child_cpu_ms
	local counts; read -ra counts < <(suite_counts "$logs/$name.log")
	[ "$rc" != 0 ] && [ "${counts[1]}" = 0 ] && counts[1]=1
	echo "$rc $took $(( (cpu_ms - c + 500) / 1000 )) ${counts[*]}" >"$logs/$name.result"
}

# The kernel lane runs beside the suites before the end-to-end tests. Its guest is a kernel of its own
# under QEMU's software emulation, one host thread: one after another, the lane left CI's second core
# idle for its whole 15 minutes, and the agent's suite (one test at a time) leaves the other idle. The
# end-to-end tests and the benchmarks' smoke runs come after it has ended: the browser, the backend and
# the agent they drive take both cores, and beside them the lane's guest and their stack starved each
# other (the e2e suite 757 s alone took 1,571 s beside the lane, the lane 935 s took 2,749 s). The
# lane's output follows the suites it ran beside (its log has it as it runs).
(QUIET=1 suite kernel-lane ./e2e/kernel-lane/test.sh) </dev/null &
lane_pid=$!
echo "the kernel lane runs beside the suites up to e2e (its output follows them; as it runs: $logs/kernel-lane.log)"

suite lint         ./scripts/lint.sh
suite agent        make -s -j"$(nproc)" -C agent test
suite agent-stream backend/.venv/bin/python -m pytest -q -rs agent/tests/python
suite backend      make -s -C backend test
suite console      bash -c 'cd frontend && npm test --silent'
suite compose      ./deploy/check-compose.sh
suite harness      ./agent/tests/run.sh scripts/tests/test_*.sh

wait "$lane_pid"
printf '\n===== kernel-lane (ran beside the suites above) =====\n'
cat "$logs/kernel-lane.log" 2>/dev/null

suite e2e          ./e2e/run.sh
# after e2e: its plan tests build the SQLite driver bench/replace's smoke run uses
suite bench        ./bench/smoke.sh

printf '\n===== summary =====\n'
tp=0 tf=0 ts=0 rc=0
for n in lint agent agent-stream backend console compose harness kernel-lane e2e bench; do
	# exit status, wall s, CPU s, passed, failed, skipped; a suite that left no result did not end
	read -r st took cpu p f sk <"$logs/$n.result" 2>/dev/null || { st=1 took=? cpu=? p=0 f=1 sk=0; }
	printf '%-13s %4s passed, %s failed, %s skipped (exit %s, %s s, CPU %s s)\n' "$n" "$p" "$f" "$sk" "$st" "$took" "$cpu"
	tp=$((tp + p)); tf=$((tf + f)); ts=$((ts + sk))
	[ "$st" = 0 ] || rc=1
done
echo "wall time $SECONDS s"
[ $tp -gt 0 ] || rc=1
echo "logs: $logs"
# Every skip, with its reason, as each suite printed it (a skip is never counted as passed).
grep -hE '^ok - .* # SKIP|^not run - |^skip - |^SKIPPED \[|^ +-  +[0-9]+ ' "$logs"/*.log 2>/dev/null | sed 's/^/skipped: /'
echo "$tp passed, $tf failed, $ts skipped"
exit $rc
