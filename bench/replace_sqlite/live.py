# SPDX-License-Identifier: Apache-2.0
"""The workload drivers (SQLite's: build and driver.c beside this file; Lua's: bench/replace_lua; both speak
live_driver.h's protocol) driven live, as bench/replace and bench/layout_vs_bolt drive them: built or found,
their rounds timed, a root and its callees or the hot set measured and planned by hotpathd, an installed
copy dumped for cachegrind, cachegrind's I1 misses of a few passes, and BOLT's binary of a driver."""

import ctypes
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
# HOTPATHD: another hotpathd binary (e.g. a copy, so that a rebuild during a long run does not swap it)
HP = os.environ.get("HOTPATHD") or os.path.join(TOP, "agent", "build", "hotpathd")
BUILD = os.path.join(HERE, "build")
PROTOCOL = os.path.join(HERE, "live_driver.h")  # what every driver speaks
BOLT = "llvm-bolt-16"
# BOLT's options, as issue 17's table: ext-tsp block reordering, hfsort function ordering, split functions.
BOLT_OPTIONS = ["-reorder-blocks=ext-tsp", "-reorder-functions=hfsort", "-split-functions"]


class PeerUnavailable(Exception):
    """The real program (or a peer tool) cannot be had on this machine: said so, never a figure."""


def hp(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([HP, *args], text=True, capture_output=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"hotpathd {' '.join(args)}: {r.stderr.strip()[-400:]}")
    return r


def run(cmd: list[str], **kw: Any) -> str:
    r = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-600:]}")
    return r.stdout


def built_driver(build: str, name: str, what: str, cache: str, smoke: bool, sources: list[str]) -> str:
    """A workload driver built (and cached in CACHE, as NAME) by the BUILD script; SOURCES are the files
    whose change rebuilds it. Exit status 3 of the build is its "WHAT's source cannot be fetched here";
    anything else that fails is an error. A smoke run does not compile: it takes the driver only when it
    is built already."""
    if smoke:
        driver = os.path.join(cache, name)
        newest = max(os.path.getmtime(f) for f in [build, *sources])
        if not os.access(driver, os.X_OK) or os.path.getmtime(driver) < newest:
            raise PeerUnavailable(
                f"the {what} driver is not built in {cache} (a smoke run does not compile {what}; "
                f"{os.path.relpath(build, TOP)} does)"
            )
        return driver
    r = subprocess.run([build, cache], text=True, capture_output=True)
    if r.returncode == 3:
        raise PeerUnavailable(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"no {what} source")
    if r.returncode != 0:
        raise RuntimeError(f"{os.path.relpath(build, TOP)} failed (exit {r.returncode}): {r.stderr.strip()[-600:]}")
    return r.stdout.strip()


def sqlite_driver(cache: str, smoke: bool) -> str:
    """SQLite's query workload driver, built by build beside this file (built_driver)."""
    sources = [os.path.join(HERE, "driver.c"), PROTOCOL]
    return built_driver(BUILD, "sqlite-driver", "SQLite", cache, smoke, sources)


def lua_driver(cache: str) -> str:
    """Lua's script workload driver, built by bench/replace_lua/build (built_driver), in a smoke run too:
    Lua compiles in seconds (SQLite's amalgamation takes minutes)."""
    lua = os.path.join(TOP, "bench", "replace_lua")
    sources = [os.path.join(lua, "driver.c"), PROTOCOL]
    return built_driver(os.path.join(lua, "build"), "lua-driver", "Lua", cache, False, sources)


def has_relocations(binary: str) -> bool:
    """Whether the link kept its relocations (-Wl,--emit-relocs), which BOLT needs to move functions."""
    return ".rela.text" in run(["readelf", "-S", "-W", binary])


def bolt_binary(driver: str, work: str, profile_passes: int, log: Callable[..., None]) -> str:
    """BOLT's optimized driver in WORK, made from an instrumented profile of PROFILE_PASSES workload passes
    of the driver (a few seconds, so never cached); BOLT's report (its -dyno-stats before and after) is
    kept beside it, as NAME.bolt.stats. Raises PeerUnavailable when BOLT cannot run here."""
    bolt = shutil.which(BOLT)
    if not bolt:
        raise PeerUnavailable(f"{BOLT} is not installed (Debian's bolt-16)")
    if not has_relocations(driver):
        raise PeerUnavailable(f"{driver} has no relocations (not linked with -Wl,--emit-relocs)")
    # Debian's bolt-16 does not find its runtime by itself: the runtime is in the lib folder beside the
    # real binary (llvm-16/bin/llvm-bolt), but BOLT looks in the lib folder beside the path it was started
    # by (/usr/bin/llvm-bolt-16 -> /usr/lib) and takes --runtime-instrumentation-lib relative to that.
    rt = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(bolt))), "lib", "libbolt_rt_instr.a")
    if not os.path.exists(rt):
        raise PeerUnavailable(f"BOLT's instrumentation runtime {rt} is missing (Debian's libbolt-16-dev)")
    rt = os.path.relpath(rt, os.path.join(os.path.dirname(os.path.dirname(bolt)), "lib"))
    name = os.path.basename(driver)
    out = os.path.join(work, f"{name}.bolt")
    instr, fdata = os.path.join(work, f"{name}.instr"), os.path.join(work, f"{name}.fdata")
    log(f"BOLT: instrumenting the driver ({BOLT} -instrument) ...")
    run(
        [
            bolt,
            driver,
            "-instrument",
            f"--instrumentation-file={fdata}",
            f"--runtime-instrumentation-lib={rt}",
            "-o",
            instr,
        ]
    )
    log(f"BOLT: profiling: {profile_passes} workload passes of the instrumented driver ...")
    run([instr], input=f"run {profile_passes}\nquit\n")
    if not os.path.exists(fdata):
        raise RuntimeError(f"BOLT's instrumented driver wrote no profile ({fdata})")
    log(f"BOLT: optimizing with the profile ({' '.join(BOLT_OPTIONS)}) ...")
    stats = run([bolt, driver, "-o", out, f"-data={fdata}", *BOLT_OPTIONS, "-dyno-stats"])
    for line in stats.splitlines():
        if "BOLT-INFO" in line and any(w in line for w in ("execution profile", "modified layout", "splitting")):
            log("  " + line.strip())
    with open(out + ".stats", "w") as f:
        f.write(stats)
    return out


ADDR_NO_RANDOMIZE = 0x0040000  # personality(2): no randomized stack, heap or mmap bases (setarch -R)


def no_aslr() -> None:
    """In the child before exec: its address space laid out the same in every run and every process."""
    if ctypes.CDLL(None, use_errno=True).personality(ADDR_NO_RANDOMIZE) < 0:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE)")


class Driver:
    """One driver process: `round(n)` runs n workload passes and gives their thread CPU ns and checksum.
    With aslr=False it starts without address-space randomization (no_aslr), so that processes of the same
    binary lay out their stack, heap and mappings alike and differ less in speed from one another."""

    def __init__(self, path: str, env: dict | None = None, aslr: bool = True) -> None:
        self.p = subprocess.Popen(
            [path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=None if aslr else no_aslr,
        )
        assert self.p.stdin and self.p.stdout
        self.stdin, self.stdout = self.p.stdin, self.p.stdout
        if self.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the workload driver {path} did not start")
        self.lock = threading.Lock()

    def round(self, n: int) -> tuple[int, str]:
        with self.lock:
            self.stdin.write(f"run {n}\n")
            self.stdin.flush()
            parts = self.stdout.readline().split()
        if len(parts) < 6:
            raise RuntimeError(f"the workload driver (pid {self.p.pid}) stopped answering")
        return int(parts[3]), parts[5]  # thread CPU ns, checksum

    def busy(self, stop: threading.Event, n: int = 2) -> None:
        while not stop.is_set():
            self.round(n)

    def close(self) -> None:
        try:
            self.stdin.write("quit\n")
            self.stdin.flush()
        except BrokenPipeError:
            pass
        self.p.wait(timeout=10)


def callees(pid: int, root: str, depth: int = 2, limit: int = 60) -> list[str]:
    seen, frontier = [root], [root]
    for _ in range(depth):
        nxt = []
        for fn in frontier:
            r = hp("inspect", "pid", str(pid), fn, "--json", check=False)
            if r.returncode:
                continue
            for c in json.loads(r.stdout).get("callees", []):
                name = c.get("name") or ""
                if name and "@plt" not in name and name not in seen and len(seen) < limit:
                    seen.append(name)
                    nxt.append(name)
        frontier = nxt
    return seen


def while_busy(drv: Driver, fn: Callable[[], Any]) -> Any:
    stop = threading.Event()
    t = threading.Thread(target=drv.busy, args=(stop,))
    t.start()
    try:
        return fn()
    finally:
        stop.set()
        t.join()


def plan_root(
    drv: Driver, root: str, work: str, measure_s: int, log: Callable[..., None], depth: int = 2
) -> tuple[str, dict]:
    """Hotpath's plan for ROOT in the running driver: the root and its callees (DEPTH levels) measured
    exactly (block counts) while the driver runs, then planned. Gives the plan file and its JSON."""
    pid = drv.p.pid
    names = callees(pid, root, depth)
    prof = os.path.join(work, "sqlite.profile.json")
    plan = os.path.join(work, "sqlite.plan.json")
    # The root runs in some phases of a workload pass only; on a busy machine a short window can
    # fall between them. Then the window doubles (the count is exact, so the first window in which
    # the root ran gives a plan), up to 32 times measure_s. Counts start once every probe is armed
    # (not while the driver still runs half-probed, which used to fill a short window), and with
    # all the group's blocks probed a pass of the driver takes many seconds on a loaded machine.
    seconds = measure_s
    while True:
        log(f"measuring {root} and {len(names) - 1} callees (exact block counts) for {seconds} s ...")
        with open(prof, "w") as f:
            f.write(
                while_busy(
                    drv,
                    lambda s=seconds: (
                        hp(
                            "measure", "pid", str(pid), *names, "--blocks", "--seconds", str(s), "--json", "--partial"
                        ).stdout
                    ),
                )
            )
        with open(plan, "w") as f:
            f.write(hp("plan", "pid", str(pid), root, "--profile", prof, "--json", check=False).stdout)
        with open(plan) as f:
            p = json.load(f)
        if p["status"] not in ("no_counts", "not_hot") or seconds >= 32 * measure_s:
            break
        log(f"no plan yet ({p['status']}: {p.get('message')}); measuring longer")
        seconds *= 2
    if p["status"] != "ok":
        raise RuntimeError(f"no plan for {root}: {p.get('message')}")
    log(
        f"plan: {len(p['group'])} functions {[g['function'] for g in p['group']]}, hot bytes "
        f"{p['totals']['hot_bytes']}, I-cache hot lines {p['icache_before']['hot_lines']} -> "
        f"{p['icache_after']['hot_lines']} (minimum {p['icache_after']['minimum_lines']})"
    )
    return plan, p


def log_kept(p: dict, log: Callable[..., None]) -> None:
    """A plan's functions kept in place, by rule: what Hotpath refuses to move in this program, and why."""
    rules: dict[str, list[str]] = {}
    for k in p["kept_in_place"]:
        rules.setdefault(k["rule"], []).append(k["function"])
    for rule, fns in rules.items():
        log(f"  kept in place ({len(fns)}): {rule}: {', '.join(fns)}")


def plan_hot_set(drv: Driver, work: str, sample_s: int, log: Callable[..., None], exact_s: int = 0) -> tuple[str, dict]:
    """Hotpath's whole-hot-set plan of the running driver: its threads' PCs sampled for SAMPLE_S seconds
    while it runs (estimated block counts, no probes), every hot function of the driver's own file
    planned together (`hotpathd plan pid PID --hot-set`). With EXACT_S, that plan only chooses the hot
    set: its members' blocks are then counted exactly for EXACT_S seconds (count_exact) and the hot
    set planned again from those counts (`--profile`, `--share 1`: the members the samples chose that
    ran), the sampled profile given as --resident (the hot code that stays in place, for where the
    copy starts). Gives the plan file and its JSON."""
    pid = drv.p.pid
    plan = os.path.join(work, "sqlite.hotset.json")
    module = os.path.basename(os.path.realpath(f"/proc/{pid}/exe"))
    log(f"sampling the driver's PCs for {sample_s} s and planning its hot set ...")
    args = ["plan", "pid", str(pid), "--hot-set", "--sample", str(sample_s), "--module", module, "--json"]
    out = while_busy(drv, lambda: hp(*args, check=False).stdout)
    with open(plan, "w") as f:
        f.write(out)
    p = json.loads(out)
    if p["status"] != "ok":
        raise RuntimeError(f"no hot-set plan: {p.get('message')}")
    log(
        f"plan: hot set of {len(p['group'])} functions (root {p['root']}), {len(p['kept_in_place'])} kept in "
        f"place, hot bytes {p['totals']['hot_bytes']}, I-cache hot lines {p['icache_before']['hot_lines']} -> "
        f"{p['icache_after']['hot_lines']} (minimum {p['icache_after']['minimum_lines']})"
    )
    log_kept(p, log)
    if not exact_s:
        return plan, p
    sampled = os.path.join(work, "sqlite.hotset.sampled.json")
    os.replace(plan, sampled)
    names = [g["function"] for g in p["group"]]
    prof = count_exact(drv, names, work, exact_s, log)
    args = ["plan", "pid", str(pid), "--hot-set", "--profile", prof, "--share", "1", "--module", module]
    out = hp(*args, "--resident", sampled, "--json", check=False).stdout
    with open(plan, "w") as f:
        f.write(out)
    p = json.loads(out)
    if p["status"] != "ok":
        raise RuntimeError(f"no hot-set plan from the exact counts: {p.get('message')}")
    base = int(p["code"]["base"], 0) if isinstance(p["code"]["base"], str) else p["code"]["base"]
    log(
        f"plan from exact counts: {len(p['group'])} functions (root {p['root']}), hot bytes "
        f"{p['totals']['hot_bytes']}, cold {p['totals']['cold_bytes']}, I-cache hot lines "
        f"{p['icache_before']['hot_lines']} -> {p['icache_after']['hot_lines']} (minimum "
        f"{p['icache_after']['minimum_lines']}), the copy starts +{base % 4096} into its page"
    )
    log_kept(p, log)
    log_block_layouts(p, [*args, "--resident", sampled, "--json"], log)
    return plan, p


def log_block_layouts(p: dict, args: list[str], log: Callable[..., None]) -> None:
    """The plan P (made by `hotpathd ARGS`, --block-layout auto) against the same plan with every member laid
    out by Pettis-Hansen's chains and by ext-TSP's: branches taken, from the exact counts and each layout (a
    figure computed from the profile, not measured), and how many members auto gave to ext-TSP."""
    taken = {"auto": p["totals"]["taken_branches_after"]}
    for layout in ("pettis-hansen", "ext-tsp"):
        q = json.loads(hp(*args, "--block-layout", layout, check=False).stdout)
        taken[layout] = q["totals"]["taken_branches_after"] if q.get("status") == "ok" else None
    before = p["totals"]["taken_branches_before"]

    def fig(x: float | None) -> str:
        return "unavailable" if x is None else f"{x:,.0f} ({100 * (x / before - 1):+.1f}%)" if before else f"{x:,.0f}"

    ext = sum(1 for g in p["group"] if g.get("block_layout") == "ext-tsp")
    log(
        f"taken branches in the counting window (computed from the exact counts and each layout): original "
        f"{before:,.0f}, Pettis-Hansen {fig(taken['pettis-hansen'])}, ext-TSP {fig(taken['ext-tsp'])}, the plan's "
        f"(per member the fewer) {fig(taken['auto'])}: ext-TSP for {ext} of {len(p['group'])} members"
    )


def promote_icalls(
    drv: Driver, work: str, state: str, plan: str, seconds: int, log: Callable[..., None], resident: str | None = None
) -> tuple[str, dict, dict]:
    """Indirect-call promotion of the hot set installed from PLAN in the running driver (issue 17): the
    targets of the copy's indirect call sites counted exactly for SECONDS while the driver runs (`hotpathd
    icalls`: uprobes on the members' copy entries and the sites; a call through a pointer reaches a member's
    original entry and jumps from there to its copy), the hot set planned again from PLAN's own profile with
    those targets (`--icall-targets`: a site whose most frequent target is a member taking most of its calls
    calls that member's copy directly when the pointer holds its original entry), PLAN's install reverted and
    the new plan installed. Gives the new plan file, its JSON and the install's JSON."""
    pid = drv.p.pid
    vals = os.path.join(work, "icalls.json")
    args = ["icalls", "pid", str(pid), "--seconds", str(seconds), "--state-dir", state, "--json"]
    done: list[float] = []  # monotonic ends of the driver's 2-pass rounds

    def busy(stop: threading.Event) -> None:
        while not stop.is_set():
            drv.round(2)
            done.append(time.monotonic())

    stop = threading.Event()
    t = threading.Thread(target=busy, args=(stop,))
    t.start()
    try:
        m = subprocess.Popen([HP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert m.stderr
        err = m.stderr.readline()  # "probing ...": every probe is about to count
        t0 = time.monotonic()
        out, rest = m.communicate()
        t1 = time.monotonic()
        if m.returncode != 0:
            raise RuntimeError(f"hotpathd icalls: {(err + rest).strip()[-400:]}")
    finally:
        stop.set()
        t.join()
    probed = 2 * sum(1 for x in done if t0 < x <= t1)
    with open(vals, "w") as f:
        f.write(out)
    r = json.loads(out)
    through = sum(e["through_sites"] for e in r["entries"])
    log(
        f"indirect calls of the copy ({seconds} s, {r['samples']} probe hits, {r['lost']} lost; the driver ended "
        f"{probed} passes while probed): {len(r['sites'])} sites ran; {through} calls reached a member's "
        "original entry through a pointer"
    )
    module = os.path.basename(os.path.realpath(f"/proc/{pid}/exe"))
    promoted = os.path.join(work, "sqlite.hotset.promoted.json")
    # The process's code as planned: the original bytes under the first install's patches (--state-dir).
    args = ["plan", "pid", str(pid), "--hot-set", "--profile", plan, "--share", "1", "--module", module]
    args += ["--icall-targets", vals, "--state-dir", state, "--json"] + (["--resident", resident] if resident else [])
    r = hp(*args, check=False)
    with open(promoted, "w") as f:
        f.write(r.stdout)
    if not r.stdout.strip():
        raise RuntimeError(f"hotpathd plan --icall-targets: {r.stderr.strip()[-400:]}")
    p = json.loads(r.stdout)
    if p["status"] != "ok":
        raise RuntimeError(f"no hot-set plan with the indirect calls' targets: {p.get('message')}")
    sites = [c for c in p["indirect_calls"] if c.get("promoted")]
    top = sorted(sites, key=lambda c: -c["count"])[:5]
    log(
        f"plan with promotion: {len(sites)} of {len(p['indirect_calls'])} indirect call sites promoted"
        + (": " + ", ".join(f"{c['site']} -> {c['promoted']['target']}" for c in top) if top else "")
    )
    hp("revert", "pid", str(pid), "--state-dir", state, "--quiet")
    inst = json.loads(hp("install", promoted, "--state-dir", state, "--quiet", "--json").stdout)
    return promoted, p, inst


def count_exact(
    drv: Driver, names: list[str], work: str, seconds: int, log: Callable[..., None], state: str | None = None
) -> str:
    """The blocks of NAMES counted exactly in the running driver: one `hotpathd measure --blocks --inline`
    of all of them (a counted copy of each installed, counters read after SECONDS, copies reverted).
    Logs how much the counting window slowed the driver: its wall-clock passes per second during the
    window against the same number of seconds just before. Gives the profile file."""
    pid = drv.p.pid
    prof = os.path.join(work, "sqlite.exact.json")
    done: list[float] = []  # wall-clock ends of 2-pass rounds
    stop = threading.Event()

    # Rounds of 2 passes, as while_busy runs them. With 1-pass rounds the driver crashed during the
    # counting in 7 of 9 tries: a counted copy was made from bytes the copies installed before it
    # had patched (docs/decisions.md, "The hot set planned from exact counts"); fixed in the agent.
    def busy() -> None:
        while not stop.is_set():
            drv.round(2)
            done.append(time.monotonic())

    t = threading.Thread(target=busy)
    t.start()
    try:
        t_before = time.monotonic()
        time.sleep(seconds)
        before = 2 * sum(1 for x in done if x > t_before) / (time.monotonic() - t_before)
        log(f"counting the blocks of the {len(names)} members exactly (inline counters) for {seconds} s ...")
        args = ["measure", "pid", str(pid), *names, "--blocks", "--inline", "--seconds", str(seconds), "--json"]
        args += ["--state-dir", state or os.path.join(work, "state")]
        m = subprocess.Popen([HP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert m.stderr
        err = m.stderr.readline()  # "measuring ...": the window starts, every copy installed
        t0 = time.monotonic()
        out, rest = m.communicate()
        err += rest
        if m.returncode != 0:
            raise RuntimeError(f"hotpathd measure --inline: {err.strip()[-400:]}")
        during = 2 * sum(1 for x in done if t0 < x <= t0 + seconds) / seconds
    finally:
        stop.set()
        t.join()
    log(
        f"counting window: the driver ran {during:.1f} passes/s during it, {before:.1f} passes/s before "
        f"(wall clock, {during / before:.2f}x)"
    )
    with open(prof, "w") as f:
        f.write(out)
    return prof


def dump_install(pid: int, state: str, out: str) -> None:
    """The installed copy of PID (its heap and every patched range) in the file driver.c's HOTPATH_REPLAY reads."""
    ins = json.loads(hp("installed", "--state-dir", state, "--json").stdout)["installed"]
    mine = [i for i in ins if i["pid"] == pid]
    heap, size = int(mine[0]["heap"], 16), mine[0]["heap_bytes"]
    with open(f"/proc/{pid}/mem", "rb") as m:
        m.seek(heap)
        image = m.read(size)
    patches = []
    with open(mine[0]["journal"], "rb") as j:
        journal = j.read()
    for line in journal.split(b"\n"):
        if not line.startswith(b"HPJ1"):
            continue
        rec = json.loads(line.split(b" ", 3)[3])
        if rec.get("op") == "undo" and rec.get("kind") in ("entry", "call"):
            patches.append((int(rec["addr"], 16), rec["now"]))
    with open(out, "wb") as f:
        f.write(f"heap {heap:x} {size:x}\n".encode())
        f.write(image)
        for a, now in patches:
            f.write(f"\npatch {a:x} {len(now) // 2}:{now}".encode())
        f.write(b"\n")


def cachegrind(driver: str, env: dict | None, work: str, tag: str, passes: int = 3) -> tuple[int, int]:
    """Instructions and simulated I1 misses of PASSES workload passes of DRIVER under cachegrind, the
    driver's setup (its database filled) included; PASSES 0 is the setup alone."""
    out = os.path.join(work, f"cg.{tag}")
    cmds = os.path.join(work, "cg.cmds")
    with open(cmds, "w") as f:
        f.write(f"run {passes}\nquit\n")
    with open(cmds) as stdin:
        r = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=yes", f"--cachegrind-out-file={out}", driver],
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
    if r.returncode != 0:  # the driver's own message (or valgrind's) is in its stderr, among cachegrind's
        raise RuntimeError(f"cachegrind of {driver} ({tag}, {passes} passes) exited {r.returncode}: {r.stderr[-1200:]}")
    summary = subprocess.run(["cg_annotate", out], text=True, capture_output=True, check=True).stdout
    line = next(x for x in summary.splitlines() if "PROGRAM TOTALS" in x)
    nums = [int(x.replace(",", "")) for x in line.split() if x.replace(",", "").isdigit()]
    # Events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
    return nums[0], nums[1]
