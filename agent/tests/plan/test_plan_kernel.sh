#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A plan of the live kernel: `hotpathd plan kernel vfs_read --sample S --json` while dd reads
# /dev/zero. The plan must be made and verified, and its parts must agree with each other: every
# block of every member laid out once inside the emitted code, every hot block in exactly one
# chain of the chain table and every cold one in none, padding within its bounds, totals equal to
# the sums of the members, hot lines after the layout no more than before and no fewer than the
# minimum, and the heatmap's cells the hot lines themselves (conflicts where a set holds more
# lines than it has ways). Run from the agent directory (as `make test` does); needs root.
set -u
HP=${HOTPATHD:-build/hotpathd}
TMP=$(mktemp -d /tmp/hotpath-plan-XXXXXX)
LOAD=
trap 'rm -rf "$TMP"; [ -n "$LOAD" ] && kill "$LOAD" 2>/dev/null' EXIT

( while :; do dd if=/dev/zero of=/dev/null bs=512 count=100000 status=none; done ) &
LOAD=$!
sleep 0.5
"$HP" plan kernel vfs_read --sample 3 --json >"$TMP/plan.json" 2>"$TMP/err"
rc=$?
kill "$LOAD" 2>/dev/null
wait "$LOAD" 2>/dev/null
LOAD=

if [ "$rc" -ne 0 ]; then
	echo "FAIL - plan_kernel_vfs_read: exit status $rc: $(tail -3 "$TMP/err" | tr '\n' ' ') $(head -c 300 "$TMP/plan.json")"
	exit 0
fi
python3 - "$TMP/plan.json" <<'PY'
import json, sys

d = json.load(open(sys.argv[1]))
failures = []


def check(name, cond, detail=""):
    print(f"ok - {name}" if cond else f"FAIL - {name}: {detail}")


def h(x):
    return int(x, 16)


check("plan_kernel_vfs_read_verified",
      d["status"] == "ok" and d["code"]["verified"] and d["group"] and d["group"][0]["function"] == "vfs_read",
      f"{d['status']}: {d.get('message')} {d['code'].get('verify_error')}")
g, code, opts, tot = d["group"], d["code"], d["options"], d["totals"]
base, size = h(code["base"]), code["bytes"]
blocks = sum(m["blocks"] for m in g)
check("plan_kernel_code_whole", len(code["hex"]) == 2 * size and code["verified_blocks"] == blocks,
      f"{len(code['hex'])} hex digits for {size} bytes, {code['verified_blocks']} of {blocks} blocks verified")

# Layout: every block once, inside the code, in order without overlap.
spans, problems = [], []
for m in g:
    offs = [b["offset"] for b in m["layout"]]
    if len(offs) != m["blocks"] or len(set(offs)) != len(offs):
        problems.append(f"{m['function']}: {len(offs)} laid out, {len(set(offs))} distinct, {m['blocks']} blocks")
    for b in m["layout"]:
        a = h(b["new_address"])
        spans.append((a, a + b["new_size"], b["padding"]))
        if not (base <= a and a + b["new_size"] <= base + size):
            problems.append(f"{m['function']}+{b['offset']:#x} outside the code")
spans.sort()
for (a0, e0, _), (a1, e1, pad) in zip(spans, spans[1:]):
    if a1 - e0 != pad:
        problems.append(f"blocks at {a0:#x} and {a1:#x}: gap {a1 - e0}, padding {pad}")
check("plan_kernel_layout_tiles_the_code", not problems, "; ".join(problems[:3]))

# Chains: each hot block in exactly one chain, cold blocks in none.
problems = []
for m in g:
    hot = {b["offset"] for b in m["layout"] if b["hot"]}
    cold = [b for b in m["layout"] if not b["hot"]]
    in_chains = [o for c in m["chain_table"] for o in c["blocks"]]
    if sorted(in_chains) != sorted(hot) or len(hot) != m["hot_blocks"]:
        problems.append(f"{m['function']}: {len(in_chains)} chained, {len(hot)} hot")
    if any(b["chain"] != -1 for b in cold) or len(m["chain_table"]) != m["chains"]:
        problems.append(f"{m['function']}: cold block in a chain or chain count off")
    for c in m["chain_table"]:
        if any(b["chain"] != c["chain"] for b in m["layout"] if b["offset"] in c["blocks"]):
            problems.append(f"{m['function']}: chain {c['chain']} disagrees with the layout")
        if sum(b["size"] for b in m["layout"] if b["offset"] in c["blocks"]) != c["bytes"]:
            problems.append(f"{m['function']}: chain {c['chain']} bytes")
    if sum(b["size"] for b in m["layout"] if b["hot"]) != m["hot_bytes"]:
        problems.append(f"{m['function']}: hot bytes")
check("plan_kernel_hot_blocks_in_one_chain_each", not problems, "; ".join(problems[:3]))

# Padding: bounded per block and in total; totals are the members' sums.
pads = [b["padding"] for m in g for b in m["layout"]]
hot_bytes = sum(m["hot_bytes"] for m in g)
check("plan_kernel_padding_bounded",
      max(pads) <= opts["max_pad"] and sum(pads) <= 0.05 * hot_bytes + 1e-9 and sum(pads) == tot["padding_bytes"],
      f"max {max(pads)} (bound {opts['max_pad']}), total {sum(pads)} for {hot_bytes} hot bytes")
check("plan_kernel_totals_add_up",
      tot["functions"] == len(g) and tot["hot_bytes"] == hot_bytes and
      tot["cold_bytes"] == sum(m["cold_bytes"] for m in g) and
      tot["new_hot_bytes"] + tot["new_cold_bytes"] == size, json.dumps(tot))

# Heatmap: hot lines after <= before, >= minimum; cells are the hot lines.
before, after = d["icache_before"], d["icache_after"]
check("plan_kernel_hot_lines_after_within_bounds",
      after["minimum_lines"] <= after["hot_lines"] <= before["hot_lines"] and
      before["minimum_lines"] == -(-hot_bytes // before["line_bytes"]),
      f"before {before['hot_lines']}, after {after['hot_lines']}, minimum {after['minimum_lines']}")
problems = []
for name, ic in (("before", before), ("after", after)):
    cells = ic["cells"]
    lines = {h(c["line"]) for c in cells}
    per_set = {}
    for c in cells:
        per_set.setdefault(c["set"], []).append(c)
        if h(c["line"]) // ic["line_bytes"] % ic["sets"] != c["set"] or not c["blocks"]:
            problems.append(f"{name}: cell {c['line']} in set {c['set']}")
    if len(cells) != ic["hot_lines"] or len(lines) != len(cells):
        problems.append(f"{name}: {len(cells)} cells, {len(lines)} lines, {ic['hot_lines']} hot lines")
    for s, cs in per_set.items():
        if any(c["conflict"] != (len(cs) > ic["ways"]) for c in cs):
            problems.append(f"{name}: set {s} conflict flag")
    if max(len(cs) for cs in per_set.values()) != ic["max_lines_in_a_set"]:
        problems.append(f"{name}: max lines in a set")
    if sum(1 for cs in per_set.values() if len(cs) > ic["ways"]) != ic["conflict_sets"]:
        problems.append(f"{name}: conflict sets")
check("plan_kernel_heatmap_is_the_hot_lines", not problems, "; ".join(problems[:3]))
# The copy's position map (plan/kernel_map.c, agent/kmod/hotpath_uapi.h): hotpath.ko gives the copy
# the originals' ORC entries and names from it. A symbol per member's hot and cold chunk, named as the
# member; runs that tile every laid-out block's padding and bytes exactly; a run of the original's
# instructions starts at its block's original address.
import struct

uw = code.get("unwind") or {}
mp = bytes.fromhex(uw.get("hex", ""))
problems = []
if uw.get("format") != "kernel-map" or len(mp) < 24:
    problems.append(f"format {uw.get('format')}, {len(mp)} bytes")
else:
    magic, version, flags, to_map, nsyms, nruns, nstr = struct.unpack_from("<IHHIIII", mp)
    strs = mp[24 + 12 * nsyms + 24 * nruns:]
    if (magic, version, to_map, uw["functions"]) != (0x4D4B5048, 1, uw["offset"], nsyms) or len(strs) != nstr:
        problems.append(f"head {magic:#x} {version} {to_map} {nsyms} {nruns} {nstr}")
    syms = {}
    for i in range(nsyms):
        off, sz, name = struct.unpack_from("<III", mp, 24 + 12 * i)
        syms[off] = (sz, strs[name:strs.index(b"\0", name)].decode())
    runs = sorted(struct.unpack_from("<IIQII", mp, 24 + 12 * nsyms + 24 * i)[:4] for i in range(nruns))
    for m in g:
        hot = [b for b in m["layout"] if b["hot"] and b["new_size"]]
        if hot:
            first = min(h(b["new_address"]) - b["padding"] for b in hot) - base
            if syms.get(first, (0, ""))[1] != m["function"]:
                problems.append(f"{m['function']}: no symbol at its hot chunk (+{first:#x}): {syms.get(first)}")
        for b in m["layout"]:
            if not b["new_size"]:
                continue
            at, end = h(b["new_address"]) - b["padding"] - base, h(b["new_address"]) + b["new_size"] - base
            mine = [r for r in runs if at <= r[0] < end]
            if sum(r[1] for r in mine) != end - at or any(r[0] + r[1] > end for r in mine):
                problems.append(f"{m['function']}+{b['offset']:#x}: runs {mine} do not tile [{at:#x}, {end:#x})")
            same = [r for r in mine if r[3] == 0]
            if same and same[0][2] != h(m["address"]) + b["offset"]:
                problems.append(f"{m['function']}+{b['offset']:#x}: its run starts at {same[0][2]:#x}")
check("plan_kernel_position_map_tiles_the_copy", not problems, "; ".join(problems[:3]))
check("plan_kernel_counts_are_labelled_estimates",
      d["profile"]["estimated"] and all(e["source"] == "estimated" for m in g for e in m["edge_counts"]),
      "sampled counts or edges not labelled estimated")
PY

# A plan of ROOT from profiles parses just ROOT and the functions they count (with what decides their
# blocks; one open: HOTPATH_TIMING prints one decode), not the whole kernel as --sample above did: the
# plan above made again from its own profile (its members' and kept functions' counts) is the same.
HOTPATH_TIMING=1 "$HP" plan kernel vfs_read --profile "$TMP/plan.json" --json >"$TMP/again.json" 2>"$TMP/e0"
python3 - "$TMP/plan.json" "$TMP/again.json" "$TMP/e0" <<'PY'
import json, sys

a, b = (json.load(open(p)) for p in sys.argv[1:3])
decodes = sum(1 for l in open(sys.argv[3]) if l.startswith("  decode"))
counted = [f["name"] for f in a["profile"]["functions"]]
ok = (a["status"] == b["status"] == "ok" and [m["function"] for m in a["group"]] == [m["function"] for m in b["group"]]
      and a["code"]["hex"] == b["code"]["hex"] and decodes == 1)
print("ok - plan_kernel_profile_set_is_the_whole_parse" if ok else
      f"FAIL - plan_kernel_profile_set_is_the_whole_parse: {a['status']}/{b['status']}, groups "
      f"{[m['function'] for m in a['group']]} and {[m['function'] for m in b['group']]}, same code "
      f"{a['code']['hex'] == b['code']['hex']}, {decodes} decodes, counted {counted}")
PY

# A plan of ROOT from a profile that counts ROOT alone parses ROOT alone (with what decides its
# blocks); a profile that counts another function too parses that one too. Both from one measurement
# of vfs_read and its caller ksys_read (a caller joins no group): the plans must be the same but for
# the profile's file name and the planning time.
( while :; do dd if=/dev/zero of=/dev/null bs=512 count=100000 status=none; done ) &
LOAD=$!
sleep 0.5
"$HP" measure kernel vfs_read ksys_read --blocks --seconds 2 --json >"$TMP/two.json" 2>"$TMP/err"
rc=$?
kill "$LOAD" 2>/dev/null
wait "$LOAD" 2>/dev/null
LOAD=
if [ "$rc" -ne 0 ]; then
	echo "FAIL - plan_kernel_root_alone_is_the_whole_parse: measure exit status $rc: $(tail -3 "$TMP/err" | tr '\n' ' ')"
	exit 0
fi
python3 - "$TMP/two.json" "$TMP/one.json" <<'PY'
import json, sys

d = json.load(open(sys.argv[1]))
d["resources"] = [r for r in d["resources"] if r["function"] == "vfs_read"]
json.dump(d, open(sys.argv[2], "w"))
PY
# A heap address above every symbol (modules' when any are loaded, else the kernel's own).
# (python: a POSIX shell's arithmetic is signed 64-bit, and dash saturates such addresses).
base=$(python3 -c 'import sys; print(hex((max(int(l.split()[0], 16) for l in sys.stdin) + 0x200000) & ~0xfff))' </proc/kallsyms)
"$HP" plan kernel vfs_read --profile "$TMP/one.json" --base "$base" --json >"$TMP/p1.json" 2>"$TMP/e1"
r1=$?
"$HP" plan kernel vfs_read --profile "$TMP/two.json" --base "$base" --json >"$TMP/p2.json" 2>"$TMP/e2"
r2=$?
python3 - "$TMP/p1.json" "$TMP/p2.json" "$r1" "$r2" <<'PY'
import json, sys

a, b = (json.load(open(p)) for p in sys.argv[1:3])
diffs = []


def walk(x, y, path):
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            # The profile's other functions are listed as resident code (placed against, not
            # moved): ksys_read in the two-function profile only, checked below.
            if path + "/" + k in ("/plan_seconds", "/profile/source", "/profile/resident"):
                continue
            if k not in x or k not in y:
                diffs.append(f"{path}/{k} in one plan only")
            else:
                walk(x[k], y[k], path + "/" + k)
    elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (u, v) in enumerate(zip(x, y)):
            walk(u, v, f"{path}[{i}]")
    elif x != y:
        diffs.append(f"{path}: {str(x)[:60]} vs {str(y)[:60]}")


walk(a, b, "")
res_a = [r["name"] for r in a.get("profile", {}).get("resident", [])]
res_b = [r["name"] for r in b.get("profile", {}).get("resident", [])]
if res_a != [] or res_b != ["ksys_read"]:
    diffs.append(f"/profile/resident: {res_a} and {res_b}, not [] and ['ksys_read']")
ok = sys.argv[3] == sys.argv[4] and a.get("status") == "ok" and not diffs
print("ok - plan_kernel_root_alone_is_the_whole_parse" if ok else
      f"FAIL - plan_kernel_root_alone_is_the_whole_parse: status {sys.argv[3]}/{sys.argv[4]} "
      f"({a.get('status')}), {len(diffs)} differences: " + "; ".join(diffs[:4]))
PY
