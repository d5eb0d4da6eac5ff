#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `hotpathd measure` and `hotpathd caps` run as a user would: exact counts of a compiled program in
# text and JSON (the profile format: every field the optimizer reads is checked), derived edges,
# sampled kernel block counts with their labels, exit codes and reasons for every kind of bad
# input, and a request of 10,000 resources. Run from the agent directory (as `make test` does).
set -u
HP=${HOTPATHD:-build/hotpathd}
FIX=${HP_FIXTURES:-tests/fixtures}
TMP=$(mktemp -d /tmp/hotpath-measure-XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$TMP"
}
trap cleanup EXIT
. "$(dirname "$0")/wait.sh"

ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
check() {
	local name=$1
	shift
	local out
	if out=$("$@" 2>&1); then ok "$name"; else fail "$name" "$(printf '%s' "$out" | tail -4 | tr '\n' ' ')"; fi
}

gcc -O2 -g -pthread -o "$TMP/measured" "$FIX/measured.c" || fail fixture_compiles "gcc failed"
gcc -O0 -o "$TMP/many" "$FIX/manyblocks.c" || fail fixture_compiles "gcc failed"

# start_fixture ARGS...: start the fixture, wait for "ready"; sets FPID.
start_fixture() {
	rm -f "$TMP/fixture.out"
	"$TMP/measured" "$@" >"$TMP/fixture.out" 2>&1 &
	FPID=$!
	PIDS+=("$FPID")
	wait_for "$TMP/fixture.out" ready
}

# measure_fixture OUT ARGS...: run hotpathd measure on the fixture in the background, release the
# fixture once the probes are armed (hotpathd says so on stderr), wait for the report.
measure_fixture() {
	local out=$1
	shift
	"$HP" measure pid "$FPID" "$@" >"$out" 2>"$out.err" </dev/null &
	local hp=$!
	# Released before its probes are armed, the fixture's calls would go uncounted: no release then.
	wait_for "$out.err" armed || { kill "$hp" "$FPID" 2>/dev/null; wait "$hp"; return 1; }
	kill -USR1 "$FPID"
	wait "$hp"
}

t_text_exact_count() {
	start_fixture calls 1000 || return 1
	measure_fixture "$TMP/t.txt" mx_call mx_leaf --metrics count --seconds 60 || return 1
	grep -Eq '^mx_call +1000 ' "$TMP/t.txt" && grep -Eq '^mx_leaf +2000 ' "$TMP/t.txt" &&
		grep -q 'target_exited: process' "$TMP/t.txt" && grep -q 'count uprobe' "$TMP/t.txt"
}
check text_report_counts_exactly t_text_exact_count

# The JSON report is the profile format: check every documented field.
PROFILE_CHECK='
import json, sys
d = json.load(sys.stdin)
assert d["target"]["kind"] == "pid" and d["target"]["pids"] == [int(sys.argv[1])], d["target"]
assert d["state"] == "target_exited" and "exited" in d["state_detail"]
assert d["window"]["seconds"] > 0 and d["window"]["end_unix_ns"] > d["window"]["start_unix_ns"]
assert d["metrics"] == ["count", "wall", "vtime", "concurrency"], d["metrics"]
assert d["mechanisms"]["count"].startswith("uprobe") and "uretprobe" in d["mechanisms"]["wall_ns"]
assert "block_count" in d["mechanisms"]
rows = {}
for r in d["resources"]:
    for k in ("function", "module", "resource", "function_address", "function_size", "metrics", "labels"):
        assert k in r, (k, r)
    assert isinstance(r["function_address"], int) and r["function_size"] > 0
    if "block" in r:
        assert r["block"] == r["function_address"] + r["block_offset"] and r["block_size"] > 0, r
        assert set(r["metrics"]) == {"count"} and r["labels"] == {"count": "exact"}, r
    else:
        assert set(r["metrics"]) == {"count", "wall_ns", "vtime_ns", "concurrency"}, r["metrics"]
        assert all(v == "exact" for v in r["labels"].values()), r["labels"]
        assert r["per_call"]["wall_ns"] > 0 and r["per_call"]["vtime_ns"] > 0
        assert r["metrics"]["vtime_ns"] <= r["metrics"]["wall_ns"] * 1.01
    rows.setdefault(r["function"], []).append(r)
fn = [r for r in rows["mx_branch"] if "block" not in r][0]
blocks = [r for r in rows["mx_branch"] if "block" in r]
assert fn["metrics"]["count"] == 1000 and fn["completed_calls"] == 1000, fn
counts = sorted(b["metrics"]["count"] for b in blocks)
assert 250 in counts and 750 in counts and counts[-1] == 1000, counts
edges = [e for e in d["edges"] if e["function"] == "mx_branch"]
boundary = [e for e in d["boundary_edges"] if e["function"] == "mx_branch"]
assert edges and all(e["exact"] and e["low"] == e["count"] == e["high"] for e in edges + boundary), edges
assert {e["kind"] for e in edges} <= {"fallthrough", "taken"} and all(e["from"] and e["to"] for e in edges), edges
assert {e["kind"] for e in boundary} >= {"entry", "return"}, boundary
for e in edges + boundary:
    assert (e["from"] is None) == (e["kind"] in ("entry", "indirect_in")), e
    assert e["from"] is None or e["from"] == fn["function_address"] + e["from_offset"], e
    assert e["to_offset"] is None or e["to"] == fn["function_address"] + e["to_offset"], e
entry_out = sorted(e["count"] for e in edges if e["from_offset"] == 0)
assert entry_out == [250, 750], entry_out
assert [e["count"] for e in boundary if e["kind"] == "entry"] == [1000]
assert d["estimated"] is False
assert d["exact_edge_share"] == 1.0, d["exact_edge_share"]
ef = [f for f in d["edge_functions"] if f["function"] == "mx_branch"][0]
assert ef["conservation_violations"] == 0 and ef["exact_edges"] == ef["edges"] == len(edges) + len(boundary), ef
assert d["totals"]["frames_dropped"] == 0
'

t_json_profile() {
	start_fixture calls 1000 || return 1
	measure_fixture "$TMP/p.json" mx_branch --blocks --metrics count,wall,vtime,concurrency --seconds 60 --json ||
		return 1
	python3 -c "$PROFILE_CHECK" "$FPID" <"$TMP/p.json"
}
check json_profile_fields_and_edges t_json_profile

t_kernel_sampled_json() {
	dd if=/dev/zero of=/dev/null bs=64k count=400000 status=none 2>/dev/null &
	local dd=$!
	PIDS+=("$dd")
	"$HP" measure kernel vfs_read --blocks --seconds 2 --pid "$dd" --json >"$TMP/k.json" || return 1
	kill "$dd" 2>/dev/null
	python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["target"]["kind"] == "kernel" and d["target"]["release"]
assert d["predicates"]["pid"] == int(sys.argv[1])
assert d["mechanisms"]["count"] == "perf_sampling" and d["mechanisms"]["block_count"] == "perf_sampling", d["mechanisms"]
for r in d["resources"]:
    assert r["labels"]["count"] == "sampled" and r["samples"] == r["metrics"]["count"], r
fn = [r for r in d["resources"] if "block" not in r][0]
assert fn["metrics"]["count"] == sum(r["metrics"]["count"] for r in d["resources"] if "block" in r)
assert d["edges"] == [] and d["boundary_edges"] == [] and d["exact_edge_share"] is None
assert "sampled" in d["edges_not_derived"] and d["estimated"] is True
' "$dd" <"$TMP/k.json"
}
if "$HP" caps --json | python3 -c 'import json,sys; c={x["name"]:x["available"] for x in json.load(sys.stdin)["capabilities"]}; sys.exit(0 if not c["kprobes"] and not c["fentry"] else 1)'; then
	check kernel_blocks_sampled_with_labels t_kernel_sampled_json
else
	echo "ok - kernel_blocks_sampled_with_labels # SKIP this host counts kernel blocks exactly"
fi

# expect_exit CODE NEEDLE ARGS...: hotpathd ARGS exits with CODE and says NEEDLE.
expect_exit() {
	local code=$1 needle=$2
	shift 2
	local out rc
	out=$("$HP" "$@" 2>&1)
	rc=$?
	[ "$rc" -eq "$code" ] || { echo "exit $rc, expected $code: $out"; return 1; }
	grep -q -- "$needle" <<<"$out" || { echo "no '$needle' in: $out"; return 1; }
}

t_bad_input() {
	start_fixture loop || return 1
	expect_exit 3 "no function 'no_such_fn'" measure pid "$FPID" no_such_fn --seconds 1 || return 1
	expect_exit 3 'not the start of a basic block' measure pid "$FPID" mx_branch+0x1 --seconds 1 || return 1
	expect_exit 3 'is outside' measure pid "$FPID" mx_branch+0x100000 --seconds 1 || return 1
	expect_exit 3 'no function at address' measure pid "$FPID" 0x10 --seconds 1 || return 1
	expect_exit 1 'cycles' measure pid "$FPID" mx_call --metrics cycles --seconds 1 || return 1
	expect_exit 2 'unknown metric' measure pid "$FPID" mx_call --metrics count,bogus || return 1
	expect_exit 2 'missing target' measure || return 1
	expect_exit 2 'missing RESOURCE' measure pid "$FPID" || return 1
	expect_exit 2 '--seconds needs' measure pid "$FPID" mx_call --seconds 0 || return 1
	expect_exit 2 'space' measure pid "$FPID" 'mx call' --seconds 1 || return 1
	expect_exit 2 'unknown option' measure pid "$FPID" mx_call --frobnicate || return 1
	expect_exit 3 'not found' measure pid "$FPID" mx_call --cgroup no/such/cgroup --seconds 1 || return 1
	kill -9 "$FPID"
	wait "$FPID" 2>/dev/null
	expect_exit 3 "no process $FPID" measure pid "$FPID" mx_call --seconds 1 || return 1
	expect_exit 3 "no running process is named" measure comm no-such-comm mx_call --seconds 1
}
check bad_input_exit_codes_and_reasons t_bad_input

t_kernel_refusals() {
	if "$HP" caps --json | python3 -c 'import json,sys; c={x["name"]:x["available"] for x in json.load(sys.stdin)["capabilities"]}; sys.exit(0 if c["kprobes"] or c["fentry"] else 1)'; then
		echo "# this host has kernel probes"
		return 0
	fi
	expect_exit 1 'needs fentry or kprobes' measure kernel vfs_read --seconds 1 || return 1
	expect_exit 1 'add --blocks for sampled block counts' measure kernel vfs_read --seconds 1 || return 1
	expect_exit 1 'noinstr' measure kernel do_syscall_64 --metrics count --seconds 1 || return 1
	expect_exit 1 'wall timers need a probe at the entry and at every exit' measure kernel vfs_read --metrics wall \
		--seconds 1
}
check kernel_refusals_name_capability_and_function t_kernel_refusals

t_ten_thousand() {
	"$TMP/many" >"$TMP/many.out" 2>&1 &
	local mp=$!
	PIDS+=("$mp")
	wait_for "$TMP/many.out" ready || return 1
	"$HP" inspect pid "$mp" mb_many --json >"$TMP/mb.json" || return 1
	python3 -c '
import json, sys
d = json.load(sys.stdin)
print("\n".join("0x%x" % b["start"] for b in d["blocks"][1:10001]))' <"$TMP/mb.json" >"$TMP/words"
	[ "$(wc -l <"$TMP/words")" -eq 10000 ] || return 1
	local t0=$SECONDS
	timeout 120 "$HP" measure pid "$mp" $(cat "$TMP/words") --seconds 1 --json >"$TMP/10k.json" || return 1
	echo "# 10,000 resources measured in $((SECONDS - t0)) s"
	kill "$mp"
	python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["resources"]) == 10000 and all("block" in r for r in d["resources"])
assert sum(r["metrics"]["count"] for r in d["resources"]) > 0' <"$TMP/10k.json"
}
check ten_thousand_resources_served t_ten_thousand

t_help_and_caps() {
	"$HP" measure --help | grep -q 'measure pid PID RESOURCE' && "$HP" help measure | grep -q -- '--cgroup' &&
		"$HP" --help | grep -q measure && "$HP" caps --help | grep -q mechanism || return 1
	"$HP" caps --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
names = [c["name"] for c in d["capabilities"]]
for n in ("fentry", "fexit", "kprobes", "kretprobes", "tracepoints", "raw_tracepoints", "tp_btf", "uprobes",
          "uretprobes", "uprobe_multi", "perf_sampling", "hardware_pmu", "ptrace"):
    assert n in names, n
for t in ("kernel", "process"):
    for m in ("count", "wall", "vtime", "concurrency", "cycles", "block_count"):
        p = d["mechanisms"][t][m]
        assert (p["mechanism"] is not None) == p["available"] and (p["reason"] is None) == p["available"], p
' && "$HP" caps | grep -q 'mechanism per metric'
}
check help_and_caps t_help_and_caps
