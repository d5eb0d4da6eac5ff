#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Smoke run of every benchmark in bench/ (the "bench" suite of `make test`): each runs with `--smoke`,
# a tiny budget that exercises its whole script, and its last line must parse with the benchmark's own
# pattern (the summary line its usage text promises), so a benchmark that stopped running cannot rot
# unseen. The figures of a smoke run mean nothing; `make bench` takes the real ones.
# A benchmark whose real peer is missing here (perf, SQLite's sources, valgrind) ends with
#   NAME: peer unavailable: REASON
# which is shown as a visible skip with its reason, never as a pass. Ends with
# "N passed, N failed, K skipped (peer unavailable)". bench/replace's SQLite part and bench/layout_vs_bolt's
# run only when SQLite's driver is already built (`make test` builds it in the background from its start,
# and the e2e suite's plan tests wait for that build); bench/layout_vs_bolt builds its Lua driver (seconds) when Lua's source is at hand.
# Ports: HOTPATH_SMOKE_HTTP_PORT (18380) and HOTPATH_SMOKE_GRPC_PORT (15351); the benchmarks that start a
# backend use them and the next few (each one enrols agents on its gRPC port + 1).
# Usage: bench/smoke.sh [NAME...]   (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
http=${HOTPATH_SMOKE_HTTP_PORT:-18380}
grpc=${HOTPATH_SMOKE_GRPC_PORT:-15351}
limit=${HOTPATH_SMOKE_TIMEOUT:-300} # seconds per benchmark before it counts as failed
num='[0-9]+([.][0-9]+)?'
k="($num ns|unavailable)" # a probe kind's figure
f="([-+]$num%|unavailable)" # a layout's change in percent
declare -A pattern=(
	[kernel_parse]="^kernel_parse: [0-9]+ functions, [0-9]+ blocks, $num s, [0-9]+ MiB$"
	[sampling_overhead]="^sampling_overhead: hotpathd $num% of one CPU, perf record $num% of one CPU, ratio $num \(median of [0-9]+ interleaved pairs, min $num, max $num\); whole system [-+]$num% of a syscall-bound workload's throughput per CPU-second \([-+]$num% wall\)$"
	[stack_sampling]="^stack_sampling: hotpathd $num% of one CPU, perf record -g $num% of one CPU, ratio $num \(median of [0-9]+ interleaved pairs, min $num, max $num\)$"
	# every kind is named, with a figure or "unavailable" (its row says why), never left out
	[probe_cost]="^probe_cost: uprobe $k, uprobe_step $k, uretprobe $k, uprobe_multi $k, uretprobe_multi $k, raw_tp $k, tp_btf $k, tracepoint $k, kprobe $k, kretprobe $k, fentry $k, fexit $k, hotpathd count ($num ns/call|unavailable), wall\+vtime ($num ns/call|unavailable), inline counter (-?$num ns/block|unavailable); tight loop inline ($num""x|unavailable), locked ($num""x|unavailable), plain ($num""x|unavailable), uprobes ($num""x|unavailable)$"
	[console_tree]="^console_tree: this kernel's catalog [0-9]+ functions: index $num ms, flatten $num ms, search $num ms$"
	[cfg_layout]="^cfg_layout: [0-9]+ functions, largest [0-9]+ blocks, max [0-9]+ ms$"
	[catalog_load]="^catalog_load: [0-9]+ functions, cold $num KiB in $num ms, warm $num KiB in $num ms$"
	[catalog_store]="^catalog_store: [0-9]+ functions stored in $num s \(backend CPU $num s, Postgres CPU $num s\), search $num ms \(scan $num ms, ratio $num\), page [0-9]+ rows $num ms \(JSON in Postgres $num ms, ratio $num\)$"
	[ingest]="^ingest: $num points/s stored by one backend process, knee at [0-9]+ hosts, REST p99 ($num ms|unavailable \(no REST answer in the window\))$"
	[chaos]="^chaos: [0-9]+ batches sent, [0-9]+ stored, [0-9]+ gaps shown, $num s to recover, [0-9]+ bad rows stored$"
	[plan]="^plan: [0-9]+ functions, [0-9]+ blocks, $num ms, hot lines [0-9]+ \(minimum [0-9]+, ratio $num\)$"
	[replace_cycles]="^replace cycles: [0-9]+ cycles in $num s, install $num ms, revert $num ms \(averages\), results verified [0-9]+, no wrong result; (SQLite hot set: [0-9]+ cycles of [0-9]+ functions \([0-9]+ entries, [0-9]+ call sites\), install $num ms, revert $num ms \(medians\), [0-9]+ rounds checked, no wrong result|SQLite hot set unavailable: .+)$"
	[flame]="^flame: [0-9]+ samples, [0-9]+ stacks, answer $num ms, reply [0-9]+ KiB \([0-9]+ KiB gzip\), definitions $num ms [0-9]+ KiB, drawn cold $num ms, drawn warm storage $num ms, warm view $num ms, longest task $num ms \(cold (meets|OVER) the 1000 ms goal, warm storage (meets|OVER) it, longest task (meets|OVER) the 100 ms goal\)$"
	[replace]="^replace: install $num µs \(entry\), $num ms \([0-9]+ call sites\), revert $num µs, speedup per call -?$num%, end to end -?$num%$"
	[hot_set_counting]="^hot_set_counting: [0-9]+ programs, counted $num""x per CPU second \((SQLite $num""x of [0-9]+ functions|SQLite unavailable), (Lua $num""x of [0-9]+ functions|Lua unavailable)\), wall $num""x, install $num s, revert $num s$"
	# each figure measured or "unavailable", the reasons after the line's figures
	[layout_vs_bolt]="^layout: [0-9]+ programs, Hotpath $f end to end \(I1 $f\), BOLT $f \(I1 $f\), ratio (-?$num|unavailable)(; unavailable: .+)?$"
	# failover and lost are measured only with two or more replicas; otherwise "unavailable", reasons after the figures
	[fleet_stacks]="^fleet_stacks: [0-9]+ hosts, [0-9]+ host rows and [0-9]+ group rows an hour, group rollup p50 $num ms p99 $num ms, less one rack p50 $num ms p99 $num ms, hosts' rollups p50 $num ms p99 $num ms, ratio $num$"
	[fleet]="^fleet: [0-9]+ hosts, $num points/s stored by [0-9]+ replicas, fleet view p99 $num ms, failover ($num s|unavailable), lost ([0-9]+|unavailable)(; unavailable: .+)?$"
)
# Two lanes run side by side to keep the suite short: the benchmarks that start a whole stack (a backend
# and its Postgres, one at a time) and the rest. Their figures disturb each other, which a smoke run does
# not mind: it checks that each benchmark still runs to its summary line.
stacks=(catalog_load catalog_store ingest chaos flame fleet fleet_stacks)
rest=(kernel_parse sampling_overhead stack_sampling probe_cost console_tree cfg_layout plan replace_cycles replace
	layout_vs_bolt hot_set_counting)
order=("${rest[@]}" "${stacks[@]}")
if [ $# -gt 0 ]; then order=("$@") stacks=() rest=("$@"); fi
logs=$(mktemp -d /tmp/hotpath-bench-smoke.XXXXXX)

# run_one NAME: run the benchmark with --smoke, leave its verdict line in $logs/NAME.verdict
# ("ok", "skip" or "FAIL" first) and, when it failed, the end of its output above it.
run_one() {
	local name=$1 t=$SECONDS rc last took
	if [ -z "${pattern[$name]:-}" ]; then echo "FAIL - $name: no such benchmark" >"$logs/$name.verdict"; return; fi
	echo "[bench smoke] $name ..." >&2
	HOTPATH_CHAOS_HTTP_PORT=$http HOTPATH_CHAOS_GRPC_PORT=$grpc \
		HOTPATH_INGEST_HTTP_PORT=$((http + 1)) HOTPATH_INGEST_GRPC_PORT=$((grpc + 2)) \
		HOTPATH_E2E_HTTP_PORT=$((http + 2)) HOTPATH_E2E_GRPC_PORT=$((grpc + 4)) \
		HOTPATH_FLEET_HTTP_PORT=$((http + 3)) HOTPATH_FLEET_GRPC_PORT=$((grpc + 6)) \
		timeout -k 10 "$limit" "./bench/$name" --smoke >"$logs/$name.log" 2>&1
	rc=$?
	last=$(grep -v '^[[:space:]]*$' "$logs/$name.log" | tail -1)
	took=$((SECONDS - t))
	if [[ $last =~ ^[a-z_\ ]+:\ .*peer\ unavailable:\ .+ ]] && [ $rc = 0 ]; then
		echo "skip - $name (${took} s): $last" >"$logs/$name.verdict"
	elif [ $rc = 0 ] && [[ $last =~ ${pattern[$name]} ]]; then
		echo "ok - $name (${took} s): $last" >"$logs/$name.verdict"
	else
		{
			tail -25 "$logs/$name.log"
			[ $rc = 124 ] && echo "($name ran out of its $limit s)"
			echo "FAIL - $name (exit $rc, ${took} s): its last line does not parse: $last"
		} >"$logs/$name.verdict"
	fi
}

lane() { local name; for name in "$@"; do run_one "$name"; done; }
lane "${stacks[@]}" &
other=$!
lane "${rest[@]}"
wait "$other"

passed=0 failed=0 skipped=0
for name in "${order[@]}"; do
	v=$(cat "$logs/$name.verdict")
	printf '%s\n' "$v"
	case $(tail -1 <<<"$v") in
	ok*) passed=$((passed + 1)) ;;
	skip*) skipped=$((skipped + 1)) ;;
	*) failed=$((failed + 1)) ;;
	esac
done
echo "logs: $logs"
echo "$passed passed, $failed failed, $skipped skipped (peer unavailable)"
[ "$failed" = 0 ]
