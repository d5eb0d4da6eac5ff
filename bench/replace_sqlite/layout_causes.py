# SPDX-License-Identifier: Apache-2.0
"""Where the time of a re-laid-out SQLite driver goes, measured by simulation only (issue 17; these VMs have
no PMU and their load moves every timing): the original driver (A), BOLT's binary (B) and the driver with
Hotpath's whole-hot-set plan installed (C, replayed from a dump as bench/layout_vs_bolt does), each run
under valgrind in the same steady state (the setup alone, then the setup and STEADY passes):

- cachegrind --cache-sim=yes --branch-sim=yes: instructions, I1 misses, conditional branches and their
  mispredicts, indirect branches and theirs (the steady state: the difference of the two runs);
- callgrind --dump-instr=yes --collect-jumps=yes, of the steady state only (the difference of the two
  runs): executed instructions per address, so the distinct 64 B lines and 4 KiB pages the steady state
  runs (all, and those holding 99% of its instructions), the taken jumps (conditional taken and
  unconditional, within a function as callgrind sees it: a jump to another function counts as a call)
  and calls per 1,000 instructions; for C, the instructions run in the original text (code left in
  place) and how often each member's original entry (its jump to the copy) runs and from where: the
  calling instruction decoded (an indirect call or jump: a function pointer; a direct call or jump) in
  the copy or in code left in place.

Prints one table and, with --json FILE, writes every figure there.
Usage: python3 bench/replace_sqlite/layout_causes.py [--keep DIR] [--json FILE] [--lua]   (root: ptrace, uprobes)
--lua: the Lua interpreter's driver (bench/replace_lua/build) instead of SQLite's.
With --keep DIR holding a former run's BOLT binary and dump, those are measured again (no new plan).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from live import (  # noqa: E402
    Driver,
    bolt_binary,
    dump_install,
    hp,
    lua_driver,
    plan_hot_set,
    sqlite_driver,
)

CACHE = os.path.join(os.path.dirname(HERE), "out", "replace")  # where bench/replace builds the driver
STEADY = 10  # passes of the steady state, as bench/layout_vs_bolt's I1 column
SAMPLE_S, EXACT_S = 10, 10  # bench/layout_vs_bolt's sampling and counting windows
KEEP = False  # --keep: valgrind's outputs already in the folder are read again, not run again


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def valgrind(tool: list[str], binary: str, env: dict | None, passes: int, out: str, keep: bool) -> None:
    if keep and os.path.exists(out):  # a kept run's output, read again
        return
    r = subprocess.run(
        ["valgrind", *tool, binary],
        input=f"run {passes}\nquit\n",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    if r.returncode != 0:
        raise RuntimeError(f"valgrind {tool[0]} of {binary} exited {r.returncode}: {r.stderr[-1200:]}")


def cachegrind_totals(binary: str, env: dict | None, work: str, tag: str, passes: int) -> dict[str, int]:
    """cachegrind's program totals (Ir, I1mr, ..., Bc, Bcm, Bi, Bim) of the setup and PASSES passes."""
    out = os.path.join(work, f"cg.{tag}.{passes}")
    tool = ["--tool=cachegrind", "--cache-sim=yes", "--branch-sim=yes", f"--cachegrind-out-file={out}"]
    valgrind(tool, binary, env, passes, out, KEEP)
    events: list[str] = []
    totals: list[int] = []
    with open(out) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                totals = [int(x) for x in line.split()[1:]]
    return dict(zip(events, totals, strict=True))


def callgrind(binary: str, env: dict | None, work: str, tag: str, passes: int) -> str:
    out = os.path.join(work, f"callgrind.{tag}.{passes}")
    tool = [
        "--tool=callgrind",
        "--dump-instr=yes",
        "--collect-jumps=yes",
        "--compress-pos=no",
        "--compress-strings=no",
        f"--callgrind-out-file={out}",
    ]
    valgrind(tool, binary, env, passes, out, KEEP)
    return out


def parse_callgrind(path: str) -> dict:
    """Per-address instructions, taken jumps, and call edges (caller address, callee address, count)."""
    ir: dict[int, int] = {}
    jumps = 0  # taken: unconditional jumps and the taken side of conditional ones
    cond_exec = 0
    calls: list[tuple[int, int, int]] = []
    pending_call = None
    cost = 1  # the column of the cost: after the positions (instr, or instr line)
    num = re.compile(r"^(0x[0-9a-f]+|\d+)")
    with open(path) as f:
        for line in f:
            if line.startswith("positions:"):
                cost = len(line.split()) - 1
                continue
            if line.startswith("calls="):
                n, target = line[6:].split()[:2]
                pending_call = (int(n), int(target, 0))
                continue
            if line.startswith("jump="):
                jumps += int(line[5:].split()[0])
                continue
            if line.startswith("jcnd="):
                taken, executed = line[5:].split()[0].split("/")
                jumps += int(taken)
                cond_exec += int(executed)
                continue
            if not num.match(line):
                continue
            parts = line.split()
            addr = int(parts[0], 0)
            if pending_call is not None:  # the call's line: its inclusive cost, not the site's own
                calls.append((addr, pending_call[1], pending_call[0]))
                pending_call = None
                continue
            if len(parts) > cost:
                ir[addr] = ir.get(addr, 0) + int(parts[cost])
    return {"ir": ir, "jumps": jumps, "cond_exec": cond_exec, "calls": calls}


def steady_callgrind(binary: str, env: dict | None, work: str, tag: str) -> dict:
    """parse_callgrind's figures of the steady state: the setup and STEADY passes less the setup alone (as
    the cachegrind figures; a toggle on the pass function does not work where that function moved)."""
    setup = parse_callgrind(callgrind(binary, env, work, tag, 0))
    both = parse_callgrind(callgrind(binary, env, work, tag, STEADY))
    ir = {a: n - setup["ir"].get(a, 0) for a, n in both["ir"].items()}
    edges: dict[tuple[int, int], int] = {}
    for src, dst, n in both["calls"]:
        edges[(src, dst)] = edges.get((src, dst), 0) + n
    for src, dst, n in setup["calls"]:
        edges[(src, dst)] = edges.get((src, dst), 0) - n
    return {
        "ir": {a: n for a, n in ir.items() if n > 0},
        "jumps": both["jumps"] - setup["jumps"],
        "cond_exec": both["cond_exec"] - setup["cond_exec"],
        "calls": [(s, d, n) for (s, d), n in edges.items() if n > 0],
    }


def footprint(ir: dict[int, int], shift: int, share: float = 1.0) -> int:
    """Distinct 2**SHIFT-byte units holding SHARE of the instructions (an instruction counted in the unit of
    its first byte)."""
    per: dict[int, int] = {}
    for a, n in ir.items():
        per[a >> shift] = per.get(a >> shift, 0) + n
    if share >= 1:
        return len(per)
    want, got, k = share * sum(per.values()), 0, 0
    for n in sorted(per.values(), reverse=True):
        if got >= want:
            break
        got += n
        k += 1
    return k


def decode_sites(binary: str, addrs: list[int], raw_at: int | None = None) -> dict[int, str]:
    """The instruction at each of ADDRS in BINARY's text (objdump), e.g. 'call 0x... <f>' or 'call *%rax';
    with RAW_AT, BINARY is raw code loaded at that address (the copy's heap)."""
    out: dict[int, str] = {}
    raw = [] if raw_at is None else ["-b", "binary", "-mi386:x86-64", f"--adjust-vma={raw_at:#x}"]
    for a in addrs:
        r = subprocess.run(
            [
                "objdump",
                "-D" if raw else "-d",
                *raw,
                "--no-show-raw-insn",
                f"--start-address={a:#x}",
                f"--stop-address={a + 16:#x}",
                binary,
            ],
            text=True,
            capture_output=True,
        )
        for line in r.stdout.splitlines():
            m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
            if m and int(m.group(1), 16) == a:
                out[a] = m.group(2).strip()
                break
    return out


def text_range(binary: str) -> tuple[int, int]:
    """The address range of BINARY's .text."""
    for line in subprocess.run(["readelf", "-S", "-W", binary], text=True, capture_output=True).stdout.splitlines():
        x = line.replace("[ ", "[").split()
        if len(x) > 5 and x[1] == ".text":
            return int(x[3], 16), int(x[3], 16) + int(x[5], 16)
    raise RuntimeError(f"{binary} has no .text")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", help="a folder for the runs' files (kept); default: a temporary one")
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--lua", action="store_true", help="the Lua interpreter's driver (bench/replace_lua/build)")
    args = ap.parse_args()
    global KEEP
    KEEP = bool(args.keep)
    work = args.keep or tempfile.mkdtemp(prefix="hotpath-layout-causes-")
    os.makedirs(work, exist_ok=True)
    driver = lua_driver(CACHE) if args.lua else sqlite_driver(CACHE, False)
    dump, plan = os.path.join(work, "copy.dump"), os.path.join(work, "sqlite.hotset.json")
    bolted = os.path.join(work, os.path.basename(driver) + ".bolt")
    if args.keep and os.path.exists(dump) and os.path.exists(bolted):  # a kept run's binaries, measured again
        with open(plan) as f:
            p = json.load(f)
    else:
        bolted = bolt_binary(driver, work, 10, log)
        state = os.path.join(work, "state")
        live = Driver(driver)
        try:
            live.round(40)
            plan, p = plan_hot_set(live, work, SAMPLE_S, log, exact_s=EXACT_S)
            inst = json.loads(hp("install", plan, "--state-dir", state, "--quiet", "--json").stdout)
            log(f"installed: {inst['entries']} entries, {inst['call_sites']} call sites redirected")
            dump_install(live.p.pid, state, dump)
        finally:
            hp("revert", "pid", str(live.p.pid), "--state-dir", state, "--quiet", check=False)
            live.close()
    with open(dump, "rb") as f:
        head, image = f.read().split(b"\n", 1)
    heap, heap_size = int(head.split()[1], 16), int(head.split()[2], 16)
    heap_bin = os.path.join(work, "heap.bin")
    with open(heap_bin, "wb") as f:
        f.write(image[:heap_size])
    runs = {
        "A original": (driver, None),
        "B BOLT": (bolted, None),
        "C Hotpath": (driver, dict(os.environ, HOTPATH_REPLAY=dump)),
    }
    fig: dict[str, dict] = {}
    for k, (binary, env) in runs.items():
        log(f"{k}: cachegrind (setup, setup + {STEADY} passes) and callgrind (the passes) ...")
        setup = cachegrind_totals(binary, env, work, k[0], 0)
        both = cachegrind_totals(binary, env, work, k[0], STEADY)
        steady = {e: both[e] - setup[e] for e in both}
        cg = steady_callgrind(binary, env, work, k[0])
        ir = cg["ir"]
        total = sum(ir.values())
        fig[k] = {
            "steady": steady,
            "setup_I1mr": setup["I1mr"],
            "callgrind_Ir": total,
            "taken_per_1k": 1000 * cg["jumps"] / total,
            "cond_per_1k": 1000 * cg["cond_exec"] / total,
            "calls_per_1k": 1000 * sum(n for _, _, n in cg["calls"]) / total,
            "lines": footprint(ir, 6),
            "lines_99": footprint(ir, 6, 0.99),
            "pages": footprint(ir, 12),
            "pages_99": footprint(ir, 12, 0.99),
        }
        if k.startswith("C"):
            entries = {
                int(g["address"], 0) if isinstance(g["address"], str) else g["address"]: g["function"]
                for g in p["group"]
            }
            through = {a: ir.get(a, 0) for a in entries}
            sites: dict[int, int] = {}
            for src, dst, n in cg["calls"]:
                if dst in entries:
                    sites[src] = sites.get(src, 0) + n
            in_copy = [a for a in sites if heap <= a < heap + heap_size]
            insn = decode_sites(driver, [a for a in sites if a not in in_copy])
            insn.update(decode_sites(heap_bin, in_copy, heap))
            by_kind: dict[str, int] = {}
            top_sites = []
            for src, n in sorted(sites.items(), key=lambda x: -x[1]):
                text = insn.get(src, "?")
                how = "indirect" if "*" in text else "direct" if text.startswith(("call", "jmp")) else "other"
                what = "call" if text.startswith("call") else "jump" if text.startswith("jmp") else "?"
                kind = f"{how} {what} {'in the copy' if src in in_copy else 'in place'}"
                by_kind[kind] = by_kind.get(kind, 0) + n
                if len(top_sites) < 15:
                    top_sites.append({"site": hex(src), "insn": text, "count": n, "kind": kind})
            lo, hi = text_range(driver)
            fig[k]["original_text_Ir"] = sum(n for a, n in ir.items() if lo <= a < hi)
            fig[k]["entry_jumps"] = sum(through.values())
            fig[k]["entry_jump_callers"] = by_kind
            fig[k]["entry_top"] = sorted(
                ({"function": entries[a], "count": n} for a, n in through.items() if n), key=lambda x: -x["count"]
            )[:15]
            fig[k]["entry_top_sites"] = top_sites
            fig[k]["members"] = len(p["group"])
            sampled = os.path.join(work, "sqlite.hotset.sampled.json")
            if os.path.exists(sampled):  # the exact plan's members are the sampled plan's that ran
                with open(sampled) as f:
                    fig[k]["kept"] = [x["function"] + ": " + x["rule"] for x in json.load(f)["kept_in_place"]]
        log(json.dumps({k: {x: y for x, y in fig[k].items() if not isinstance(y, list)}}, default=str))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(fig, f, indent=1, default=str)
    a = fig["A original"]["steady"]
    print(f"{'steady state, ' + str(STEADY) + ' passes':<34}" + "".join(f"{k:>16}" for k in fig))
    rows = [
        ("instructions (cachegrind)", lambda f: f"{f['steady']['Ir']:,}"),
        ("I1 misses", lambda f: f"{f['steady']['I1mr']:,}"),
        ("I1 misses, change", lambda f: f"{100 * (f['steady']['I1mr'] / a['I1mr'] - 1):+.1f}%"),
        ("I1 misses of the setup", lambda f: f"{f['setup_I1mr']:,}"),
        ("conditional branches", lambda f: f"{f['steady']['Bc']:,}"),
        ("  mispredicted", lambda f: f"{f['steady']['Bcm']:,}"),
        ("indirect branches", lambda f: f"{f['steady']['Bi']:,}"),
        ("  mispredicted", lambda f: f"{f['steady']['Bim']:,}"),
        ("taken jumps per 1K instructions", lambda f: f"{f['taken_per_1k']:.1f}"),
        ("calls per 1K instructions", lambda f: f"{f['calls_per_1k']:.1f}"),
        ("64 B lines run", lambda f: f"{f['lines']:,}"),
        ("64 B lines, 99% of instructions", lambda f: f"{f['lines_99']:,}"),
        ("4 KiB pages run", lambda f: f"{f['pages']:,}"),
        ("4 KiB pages, 99% of instructions", lambda f: f"{f['pages_99']:,}"),
    ]
    for name, fn in rows:
        print(f"{name:<34}" + "".join(f"{fn(f):>16}" for f in fig.values()))
    c = fig["C Hotpath"]
    print(f"C: {c['members']} members; {c['original_text_Ir']:,} instructions run in the original text")
    for x in c.get("kept", []):
        print(f"  kept by the sampled plan: {x}")
    print(f"C: the original entries' jumps run {c['entry_jumps']:,} times; from:")
    for kind, n in sorted(c["entry_jump_callers"].items(), key=lambda x: -x[1]):
        print(f"  {kind:<40} {n:>12,}")
    for t in c["entry_top"]:
        print(f"  {t['function']:<40} {t['count']:>12,}")
    for t in c["entry_top_sites"]:
        print(f"  site {t['site']:<12} {t['insn'][:50]:<50} {t['count']:>12,}")


if __name__ == "__main__":
    main()
