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
	# one file per shell: the kernel lane's suite runs in a background shell of its own
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
# counts one.
suite() {
	local name=$1; shift
	printf '\n===== %s =====\n' "$name"
	local t=$SECONDS c rc
	child_cpu_ms; c=$cpu_ms
	"$@" 2>&1 | tee "$logs/$name.log"
	rc=${PIPESTATUS[0]}
	local took=$((SECONDS - t))
	child_cpu_ms
	local counts; read -ra counts < <(suite_counts "$logs/$name.log")
	[ "$rc" != 0 ] && [ "${counts[1]}" = 0 ] && counts[1]=1
	echo "$rc $took $(( (cpu_ms - c + 500) / 1000 )) ${counts[*]}" >"$logs/$name.result"
}

# beside NAME CMD...: start a suite in the background, its output in $logs/NAME.out; await NAME: wait
# for it to end, then print that output. It runs as a grandchild of this shell, so its CPU is counted in
# its own result only, not in whichever suite was running when it ended.
beside() {
	local name=$1; shift
	printf '\n===== %s (started in the background; its output follows when it ends) =====\n' "$name"
	( suite "$name" "$@" >"$logs/$name.out" 2>&1 </dev/null &
		echo $! >"$logs/$name.pid" )
}
await() {
	local name=$1 pid t=$SECONDS
	pid=$(cat "$logs/$name.pid")
	# not a child of this shell (`wait` cannot reach it): poll it
	while kill -0 "$pid" 2>/dev/null; do sleep 2; done
	cat "$logs/$name.out"
	printf '(%s ended %s s after the suites beside it)\n' "$name" $((SECONDS - t))
}

# SQLite's query driver (bench/replace_sqlite/build: gcc -O2 of its 9 MB amalgamation, ~70 s of one
# core in a clean clone) is what the e2e plan tests and bench/replace run. It is built in the background
# from the start, at a lower priority (nice 10), so it takes what the suites leave: the agent suite's
# tests leave about a third of the machine idle (s19a: 175 of 960 core-seconds). Its build lock makes
# the e2e test's own call wait for it, and that call reports a failed or impossible build as before.
# Its output: $logs/sqlite-build.log.
( nice -n 10 ./bench/replace_sqlite/build >"$logs/sqlite-build.log" 2>&1 </dev/null & )

suite lint         ./scripts/lint.sh

suite agent        make -s -j"$(nproc)" -C agent test

# The kernel lane runs beside the backend, agent-stream, console, compose and harness suites: its guest
# is one QEMU emulator thread, which takes what those suites leave of the two cores. Not beside the
# agent suite: it builds its tests and fuzzers and runs the fuzz targets on both cores. Started beside it
# (session 19, run s19b, `stress-ng --cpu 1` beside the whole run) the agent suite took 1,448 s instead
# of 584 s, the guest's install cycles 696 s of guest time instead of ~160 s, and the lane used up its
# 3,000 s budget before its last check (in session 10, 2,199 s against 935 s alone). Not beside the
# end-to-end tests: they keep both cores busy on their own (quiet s19a: 1.77 of 2 on average). The
# agent-stream suite drives this machine's kernel, the lane its guest's: they share only CPU.
beside kernel-lane ./e2e/kernel-lane/test.sh
suite backend      make -s -C backend test
# The benchmarks' smoke runs go beside the agent-stream, console, compose and harness suites, once the
# backend suite (both cores busy with the lane) has ended. The stream suite mostly waits (agents
# reconnecting, hang bounds, real seconds of measurement): in session 28's quiet run it used 197 CPU
# seconds in its 215 s, leaving a core idle, and the benchmarks' smoke runs use ~1.4 cores (298 s of CPU
# in 209 s). Their ports differ (bench/smoke.sh's header). They first wait on SQLite's driver's build lock
# (built from the start, so it is long built), so that their SQLite parts run: after the end-to-end
# suite, whose plan tests wait on that lock, they always found it built.
beside bench       bash -c './bench/replace_sqlite/build >>"$0" 2>&1; exec ./bench/smoke.sh' "$logs/sqlite-build.log"
suite agent-stream backend/.venv/bin/python -m pytest -q -rs agent/tests/python
suite console      bash -c 'cd frontend && npm test --silent'
suite compose      ./deploy/check-compose.sh
suite harness      ./agent/tests/run.sh scripts/tests/test_*.sh
await kernel-lane
await bench

suite e2e          ./e2e/run.sh

printf '\n===== summary =====\n'
tp=0 tf=0 ts=0 rc=0
for n in lint agent agent-stream backend console compose harness e2e bench kernel-lane; do
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
