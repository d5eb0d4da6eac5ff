# SPDX-License-Identifier: Apache-2.0
"""Install/revert cycles of SQLite's whole hot set into its running driver (bench/replace_cycles' second
part, issue 17's "1,000 install/revert cycles of the whole hot set with output checked"); with --lua, of
the Lua interpreter's (bench/replace_lua/build: its dispatch loop a computed goto, whose label table the
copy re-emits, and which the driver's thread is inside at nearly every revert).

The driver (bench/replace_sqlite/build) runs its query workload without pause on a thread of this script,
one pass per round, and every round's checksum is compared with the one the original code gave before
anything was installed. Its hot set is sampled and planned once (`hotpathd plan pid PID --hot-set
--sample S`), then installed and reverted CYCLES times (`hotpathd install` / `hotpathd revert`: one heap,
every member's entry spliced, every direct call site redirected, all of it put back). After the last
revert, every member's bytes must be the original ones (the plan's SHA-256 of each) and no heap or
journal may be left.

Prints one line:
  SQLite hot set: N cycles of F functions (E entries, C call sites), install I ms, revert R ms (medians),
  K rounds checked, no wrong result
("Lua hot set: ..." with --lua) or "SQLite hot set unavailable: REASON" when the driver cannot be had
here. Any wrong result or a failed install or revert raises (the caller prints it and fails).
Usage: python3 bench/replace_sqlite/hot_set_cycles.py CYCLES [--smoke] [--lua]
"""

import hashlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from live import Driver, PeerUnavailable, hp, lua_driver, plan_hot_set, sqlite_driver  # noqa: E402

CACHE = os.path.join(os.path.dirname(HERE), "out", "replace")  # where bench/replace builds the driver


class Checker:
    """Rounds of the workload on their own thread, each checksum compared with the original's."""

    def __init__(self, drv: Driver, want: str) -> None:
        self.drv, self.want = drv, want
        self.rounds, self.wrong = 0, ""
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run)

    def run(self) -> None:
        while not self.stop.is_set() and not self.wrong:
            try:
                _, got = self.drv.round(1)
            except RuntimeError as e:
                self.wrong = str(e)
                return
            if got != self.want:
                self.wrong = f"round {self.rounds + 1}: checksum {got}, the original code's {self.want}"
            self.rounds += 1

    def __enter__(self) -> "Checker":
        self.t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.t.join()


def members_original(pid: int, plan: dict) -> list[str]:
    """The members whose bytes in PID are not the ones the plan was made from."""
    bad = []
    with open(f"/proc/{pid}/mem", "rb") as m:
        for g in plan["group"]:
            m.seek(int(g["address"], 16))
            if hashlib.sha256(m.read(g["size"])).hexdigest() != g["original_sha256"]:
                bad.append(g["function"])
    return bad


def cycles(n: int, smoke: bool, log=print, lua: bool = False) -> str:
    name = "Lua" if lua else "SQLite"
    try:
        driver = lua_driver(CACHE) if lua else sqlite_driver(CACHE, smoke)
    except PeerUnavailable as e:
        return f"{name} hot set unavailable: {e}"
    work = tempfile.mkdtemp(prefix="hotpath-hot-set-cycles.")
    state = os.path.join(work, "state")
    drv = Driver(driver)
    try:
        pid = drv.p.pid
        _, want = drv.round(1)
        plan_path, plan = plan_hot_set(drv, work, 1 if smoke else 4, log)
        install_ms, revert_ms = [], []
        entries = sites = 0
        t0 = time.monotonic()
        with Checker(drv, want) as chk:
            for k in range(n):
                t = time.monotonic()
                r = json.loads(hp("install", plan_path, "--state-dir", state, "--quiet", "--json").stdout)
                install_ms.append((time.monotonic() - t) * 1e3)
                entries, sites = r["entries"], r["call_sites"]
                t = time.monotonic()
                hp("revert", "pid", str(pid), "--state-dir", state, "--quiet", "--json")
                revert_ms.append((time.monotonic() - t) * 1e3)
                if chk.wrong:
                    raise RuntimeError(f"a wrong result in cycle {k + 1}: {chk.wrong}")
                if (k + 1) % 50 == 0:
                    log(f"{k + 1} cycles in {time.monotonic() - t0:.0f} s, {chk.rounds} rounds checked")
        if chk.wrong:
            raise RuntimeError(f"a wrong result after the last cycle: {chk.wrong}")
        if bad := members_original(pid, plan):
            raise RuntimeError(f"after the last revert these members' bytes are not the original ones: {bad}")
        left = json.loads(hp("installed", "--state-dir", state, "--json").stdout)["installed"]
        if left:
            raise RuntimeError(f"installs left after the last revert: {left}")
        with open(f"/proc/{pid}/maps") as f:
            heaps = [line for line in f if "memfd:hotpath-" in line]
        if heaps:
            raise RuntimeError(f"code heaps left mapped after the last revert: {heaps}")
        return (
            f"{name} hot set: {n} cycles of {len(plan['group'])} functions ({entries} entries, {sites} call sites), "
            f"install {statistics.median(install_ms):.0f} ms, revert {statistics.median(revert_ms):.0f} ms "
            f"(medians), {chk.rounds} rounds checked, no wrong result"
        )
    finally:
        hp("revert", "pid", str(drv.p.pid), "--state-dir", state, "--quiet", check=False)
        drv.close()


if __name__ == "__main__":
    if len(sys.argv) < 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit("usage: hot_set_cycles.py CYCLES [--smoke] [--lua]")
    print(cycles(int(sys.argv[1]), "--smoke" in sys.argv[2:], lua="--lua" in sys.argv[2:]), flush=True)
