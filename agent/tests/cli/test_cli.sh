#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The hotpathd command line, run as a user would: inspect on the live kernel,
# an ELF file and a live process (text and JSON), parse totals, exit codes for
# unknown functions and usage errors, and the capability message when BPF is
# not permitted. Run from the agent directory (as `make test` does).
set -u
HP=${HOTPATHD:-build/hotpathd}
FIX=${HP_FIXTURES:-tests/fixtures}
TMP=$(mktemp -d /tmp/hotpath-cli-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/wait.sh"

ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }

# check NAME COMMAND...: passes when COMMAND succeeds.
check() {
	local name=$1
	shift
	local out
	if out=$("$@" 2>&1); then ok "$name"; else fail "$name" "$(printf '%s' "$out" | tail -3 | tr '\n' ' ')"; fi
}

# JSON of inspect: one object, blocks tile the function, instructions cover blocks.
JSON_CHECK='
import json, sys
d = json.load(sys.stdin)
f = d["function"]
assert isinstance(f["address"], int) and f["size"] > 0, f
want = sys.argv[1]
assert f["name"] == want or want in f["name"], f["name"]
pos = f["address"]
for b in d["blocks"]:
    assert b["start"] == pos, ("gap", hex(b["start"]), hex(pos))
    ipos = b["start"]
    for i in b["instructions"]:
        assert i["address"] == ipos and len(i["bytes"]) == 2 * i["length"] and i["text"], i
        ipos += i["length"]
    assert not b["instructions"] or ipos == b["start"] + b["size"], "instructions do not cover block"
    for s in b["successors"]:
        assert s["kind"] in ("fallthrough", "taken", "tail_call", "indirect", "return"), s
        assert (s["target"] is None) == (s["kind"] in ("indirect", "return")), s
    pos += b["size"]
assert pos == f["address"] + f["size"], "blocks do not tile the function"
assert isinstance(d["callees"], list) and isinstance(d["indirect_call_sites"], list)
for c in d["callees"]:
    assert isinstance(c["site"], int) and isinstance(c["target"], int)
if len(sys.argv) > 2:
    assert any(c["name"] == sys.argv[2] for c in d["callees"]), "no callee " + sys.argv[2]
'

t_kernel_inspect_json() {
	"$HP" inspect kernel vfs_read --json >"$TMP/k.json" || return 1
	python3 -c "$JSON_CHECK" vfs_read rw_verify_area <"$TMP/k.json"
}
check kernel_inspect_json_tiles_vfs_read t_kernel_inspect_json

t_kernel_inspect_text() {
	local out
	out=$("$HP" inspect kernel vfs_read) || return 1
	grep -q '^function vfs_read  module vmlinux' <<<"$out" && grep -q '^block 0x' <<<"$out" &&
		grep -q 'rw_verify_area' <<<"$out" && grep -q 'nop' <<<"$out"
}
check kernel_inspect_text t_kernel_inspect_text

t_kernel_name_and_address_agree() {
	# One model, one answer: a .cold part of this kernel (its blocks start
	# where its main part jumps in) inspected by name and by address.
	local name addr
	name=$(awk '$2 ~ /^[tT]$/ && $3 ~ /\.cold$/ {print $3}' /proc/kallsyms | sort | uniq -u | head -1)
	[ -n "$name" ] || { echo "no .cold function in /proc/kallsyms"; return 1; }
	"$HP" inspect kernel "$name" --json >"$TMP/by_name.json" || return 1
	addr=$(python3 -c 'import json,sys; print(hex(json.load(sys.stdin)["function"]["address"]))' <"$TMP/by_name.json")
	"$HP" inspect kernel "$addr" --json >"$TMP/by_addr.json" || return 1
	python3 - "$TMP/by_name.json" "$TMP/by_addr.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["function"]["cold_part_of"], ("not linked to its main part", a["function"])
assert a == b, "by name and by address differ"
PY
}
check kernel_inspect_name_and_address_agree t_kernel_name_and_address_agree

t_unknown_function() {
	local out rc
	out=$("$HP" inspect kernel no_such_function_xyz 2>&1)
	rc=$?
	[ "$rc" -eq 3 ] && grep -q "no function 'no_such_function_xyz' in the kernel" <<<"$out"
}
check unknown_function_exit_3 t_unknown_function

t_ambiguous() {
	# A static name defined in several files of the kernel.
	local name out rc
	name=$(awk '$2 ~ /^[tT]$/ {print $3}' /proc/kallsyms | grep -v '^__pfx_' | sort | uniq -d | head -1)
	[ -n "$name" ] || return 0
	out=$("$HP" inspect kernel "$name" 2>&1)
	rc=$?
	[ "$rc" -eq 3 ] && grep -q 'ambiguous' <<<"$out" && grep -q "vmlinux:$name" <<<"$out"
}
check ambiguous_name_lists_candidates t_ambiguous

t_usage() {
	local rc
	"$HP" inspect >/dev/null 2>&1; rc=$?; [ "$rc" -eq 2 ] || return 1
	"$HP" inspect kernel >/dev/null 2>&1; rc=$?; [ "$rc" -eq 2 ] || return 1
	"$HP" inspect elf /bin/true >/dev/null 2>&1; rc=$?; [ "$rc" -eq 2 ] || return 1
	"$HP" inspect pid abc foo >/dev/null 2>&1; rc=$?; [ "$rc" -eq 2 ] || return 1
	"$HP" inspect kernel vfs_read --bogus >/dev/null 2>&1; rc=$?; [ "$rc" -eq 2 ] || return 1
	"$HP" parse mars >/dev/null 2>&1; rc=$?; [ "$rc" -eq 2 ] || return 1
	"$HP" frobnicate >/dev/null 2>&1; rc=$?; [ "$rc" -eq 2 ] || return 1
	"$HP" inspect 2>&1 | grep -q -- "--help"
}
check usage_errors_exit_2 t_usage

t_help_version() {
	"$HP" --version | grep -qx 'hotpathd 0.1.0' && "$HP" --help | grep -q inspect &&
		"$HP" help inspect | grep -q 'inspect kernel FUNCTION' && "$HP" parse --help | grep -q threads
}
check help_and_version t_help_version

gcc -O2 -o "$TMP/loop" "$FIX/loop.c" || fail fixture_compiles "gcc failed"

t_elf_inspect() {
	"$HP" inspect elf "$TMP/loop" fx_work --json >"$TMP/e.json" || return 1
	python3 -c "$JSON_CHECK" fx_work fx_classify <"$TMP/e.json" || return 1
	"$HP" inspect elf "$TMP/loop" fx_sum | grep -q '^block 0x'
}
check elf_inspect_text_and_json t_elf_inspect

t_elf_bad() {
	local out rc
	out=$("$HP" inspect elf "$TMP/missing" main 2>&1); rc=$?
	[ "$rc" -eq 1 ] && grep -q 'No such file' <<<"$out" || return 1
	echo hello >"$TMP/text"
	out=$("$HP" parse elf "$TMP/text" 2>&1); rc=$?
	[ "$rc" -eq 1 ] && grep -q 'not an ELF' <<<"$out" || return 1
	out=$("$HP" inspect elf "$TMP/loop" nope 2>&1); rc=$?
	[ "$rc" -eq 3 ]
}
check elf_bad_input_errors t_elf_bad

# A plan file that cannot be read is an error (exit 1) that says why; one that
# is not a plan is refused (exit 5). A folder is not read as a huge file.
t_install_bad_plan_file() {
	local out rc
	out=$("$HP" install "$TMP/missing.json" 2>&1); rc=$?
	[ "$rc" -eq 1 ] && grep -q 'No such file' <<<"$out" || return 1
	out=$("$HP" install "$TMP" 2>&1); rc=$?
	[ "$rc" -eq 1 ] && grep -q 'Is a directory' <<<"$out" || return 1
	echo '{' >"$TMP/bad.json"
	out=$("$HP" install "$TMP/bad.json" 2>&1); rc=$?
	[ "$rc" -eq 5 ] && grep -q 'not a plan' <<<"$out"
}
check install_bad_plan_file_errors t_install_bad_plan_file

# check runs this in a command substitution: the process's output goes elsewhere (it would hold the
# substitution open), and it is killed on every way out (PID set here does not reach the EXIT trap).
t_pid_inspect() {
	"$TMP/loop" >/dev/null 2>&1 &
	local pid=$! out rc
	pid_inspect_live "$pid"
	rc=$?
	kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
	[ "$rc" -eq 0 ] || return 1
	out=$("$HP" inspect pid "$pid" fx_work 2>&1); rc=$?
	[ "$rc" -eq 1 ] && grep -q 'does not exist' <<<"$out"
}
pid_inspect_live() {
	wait_in_sleep "$1" || return 1
	"$HP" inspect pid "$1" fx_work --json >"$TMP/p.json" || return 1
	python3 -c "$JSON_CHECK" fx_work fx_classify <"$TMP/p.json" || return 1
	"$HP" inspect pid "$1" nanosleep | grep -q 'libc.so'
}
check pid_inspect_live_and_gone t_pid_inspect

t_parse_json() {
	"$HP" parse kernel --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["functions"] > 50000 and d["blocks"] > d["functions"], d
assert d["seconds"] > 0 and d["peak_rss_mib"] > 0 and d["modules"][0]["name"] == "vmlinux"
' || return 1
	"$HP" parse elf "$TMP/loop" | tail -1 | grep -Eq '^parsed: [0-9]+ functions, [0-9]+ blocks, [0-9]+ undecodable, [0-9.]+ s, [0-9]+ MiB$'
}
check parse_totals t_parse_json

# --functions lists each module's functions (the catalog bench/console_tree measures): one entry per
# function, in address order, whose blocks add up to the module's; without --json it is a usage error.
t_parse_functions() {
	"$HP" parse elf "$TMP/loop" --json --functions | python3 -c '
import json, sys
d = json.load(sys.stdin)
for m in d["modules"]:
    fl = m["function_list"]
    assert len(fl) == m["functions"] > 0, (len(fl), m["functions"])
    assert sum(f["blocks"] for f in fl) == m["blocks"], m["name"]
    assert all(f["name"] and f["size"] > 0 and isinstance(f["undecodable"], bool) for f in fl), fl[:3]
    assert [f["address"] for f in fl] == sorted(f["address"] for f in fl)
assert any(f["name"] == "main" for m in d["modules"] for f in m["function_list"])
' || return 1
	"$HP" parse elf "$TMP/loop" --json | python3 -c '
import json, sys
assert all("function_list" not in m for m in json.load(sys.stdin)["modules"])' || return 1
	"$HP" parse elf "$TMP/loop" --functions >/dev/null 2>&1; [ $? -eq 2 ]
}
check parse_function_list t_parse_functions

t_no_capability() {
	command -v setpriv >/dev/null || { echo "# setpriv missing"; return 1; }
	local out rc
	out=$(setpriv --inh-caps=-all --bounding-set=-all -- "$HP" inspect kernel vfs_read 2>&1)
	rc=$?
	[ "$rc" -eq 1 ] && grep -q 'needs CAP_BPF and CAP_PERFMON' <<<"$out" && grep -q 'Operation not permitted' <<<"$out"
}
check no_bpf_permission_names_capability t_no_capability
