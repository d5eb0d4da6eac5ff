#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The kernel lane's proofs, checked from the host while and once the guest runs its test job.

Two sources, both real: the backend's REST API (the guest is a Hotpath host like any other) and the
framed output the guest's job wrote to its second serial port (guest/jobs.sh). The test module's
.ko, built on this host and loaded in the guest, is the reference for the agent's view of module
code. With --job-done, the checks of the guest as a host (catalog, capabilities, modules, code) run
while the job does, the rest once that file appears. Prints one "ok - " / "FAIL - " / "not run - "
line per check, then "lane: P passed, F failed, S skipped" (S: the checks not run, each with its
reason above) and, last, the lane's summary line.
Exit status 1 if a check failed. "Not run" is only for what no machine running the lane can do; a
check whose prerequisite the lane should have built or installed (the agent's `measure`, Playwright)
fails instead.

Timings inside the emulated guest are never printed as performance figures: timer checks state
relations (wall covers the sleeps, vtime does not), and numbers appear only to explain a failure.
"""

import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


class NotRun(Exception):
    """A check that no machine running the lane can do, with the reason: counted and shown as skipped."""


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.not_run = 0
        self.took = []  # (seconds, name) of every check run, for the lane's time table

    def run(self, name, fn, *args):
        t0 = time.monotonic()
        try:
            return self._run(name, fn, *args)
        finally:
            self.took.append((time.monotonic() - t0, name))

    def _run(self, name, fn, *args):
        try:
            detail = fn(*args)
        except NotRun as exc:
            self.not_run += 1
            print(f"not run - {name}: {exc}", flush=True)
            return None
        except AssertionError as exc:
            self.failed += 1
            print(f"FAIL - {name}: {exc}", flush=True)
            return False
        except Exception as exc:  # noqa: BLE001 - a broken check is a failure, never a silent pass
            self.failed += 1
            print(f"FAIL - {name}: {type(exc).__name__}: {exc}", flush=True)
            return False
        self.passed += 1
        print(f"ok - {name}" + (f": {detail}" if detail else ""), flush=True)
        return True


# ---------------------------------------------------------------------------------------------
# The guest's results channel


def parse_results(text):
    """Frames ("@@begin NAME t=UPTIME" ... "@@end NAME rc=N t=UPTIME"), "@@info k=v ..." pairs, and whether
    "@@done" came."""
    frames, info, done = {}, {}, False
    name, body = None, []
    for line in text.replace("\r", "").split("\n"):
        if line.startswith("@@begin "):
            name, body = (line[8:].split() or [""])[0], []
        elif line.startswith("@@end ") and name is not None:
            m = re.search(r"rc=(\d+)", line)
            frames[name] = ("\n".join(body), int(m.group(1)) if m else -1)
            name = None
        elif line.startswith("@@info "):
            for word in line[7:].split():
                if "=" in word:
                    k, v = word.split("=", 1)
                    info[k] = v
        elif line.strip() == "@@done":
            done = True
        elif name is not None:
            body.append(line)
    return frames, info, done


def frame_times(text):
    """[(name, begin, end)] of the frames in order, in guest uptime seconds (None where not stamped)."""
    out, begun = [], {}
    for line in text.replace("\r", "").split("\n"):
        m = re.match(r"@@(begin|end) (\S+)(?: rc=\d+)? t=([0-9.]+)\s*$", line)
        if not m:
            continue
        if m.group(1) == "begin":
            begun[m.group(2)] = float(m.group(3))
        elif m.group(2) in begun:
            out.append((m.group(2), begun.pop(m.group(2)), float(m.group(3))))
    return out


def time_table(results_text, console_text, info, lane_times, checks, kmod_text=""):
    """Where the lane's wall time went: the host's steps (test.sh), the guest agent's kernel parses (its log),
    each guest's test job frame by frame (guest uptime under emulation: what each step costs the lane, not a
    performance figure of the code it runs), and the host's checks."""
    lines = ["lane time table (seconds):"]
    if lane_times:
        lines.append("  host: " + ", ".join(f"{k} {v}" for k, v in (w.split("=", 1) for w in lane_times.split(","))))
    parses = re.findall(r"\[agent\].*parsed (\d+) (?:kernel )?functions.* in ([0-9.]+) s", console_text)
    if parses:
        lines.append(
            "  guest agent's kernel parses (its log): " + ", ".join(f"{t} s ({n} functions)" for n, t in parses)
        )
    kmod_info = parse_results(kmod_text)[1] if kmod_text else {}
    for what, text, inf in (("guest", results_text, info), ("second guest", kmod_text, kmod_info)):
        rows = frame_times(text)
        if not rows:
            continue
        lines.append(f"  {what}'s test job, by frame (guest uptime; {len(rows)} frames):")
        width = max([len("whole job")] + [len(n) for n, _, _ in rows])
        for n, b, e in rows:
            lines.append(f"    {n:<{width}}  at {b:8.1f}  took {e - b:7.1f}")
        start, end = inf.get("job-start"), inf.get("job-end")
        if start and end:
            inside = sum(e - b for _, b, e in rows)
            total = float(end) - float(start)
            lines.append(
                f"    {'whole job':<{width}}  at {float(start):8.1f}  took {total:7.1f}"
                f"  (between frames {total - inside:.1f})"
            )
    slow = sorted((t for t in checks.took if t[0] >= 1), reverse=True)
    if slow:
        lines.append(f"  host checks taking 1 s or more ({sum(t for t, _ in checks.took):.1f} s in all checks):")
        for t, n in slow:
            lines.append(f"    {t:7.1f}  {n[:90]}")
    return "\n".join(lines)


def frame(frames, name):
    if name not in frames:
        raise AssertionError(f"the guest wrote no '{name}' result")
    return frames[name]


def cfg(inspect):
    """{block offset: [(kind, target offset or None)]} from `hotpathd inspect --json` (absolute addresses)."""
    start = inspect["function"]["address"]
    out = {}
    for b in inspect["blocks"]:
        out[b["start"] - start] = [
            (s["kind"], s["target"] - start if s["kind"] in ("taken", "fallthrough") else None) for s in b["successors"]
        ]
    return start, out


def named(row, name):
    """A measure row is about function name ("name" or "module:name")."""
    f = row.get("function") or ""
    return f == name or f.endswith(":" + name)


def armed_line(out):
    """The first line of a measure frame: whether and how the measurement was armed (guest/jobs.sh)."""
    return out.split("\n", 1)[0]


def exact(row):
    """A measure row's count came from probes, not samples ("labels" absent means exact)."""
    return (row.get("labels") or {}).get("count", "exact") == "exact"


def json_object(text):
    """The first line of text that is a JSON object."""
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON object in: {text[-300:]!r}")


# ---------------------------------------------------------------------------------------------
# REST


class Api:
    def __init__(self, url, password, deadline):
        self.url = url.rstrip("/") + "/api/v1"
        self.deadline = deadline
        body = json.dumps({"username": "admin", "password": password}).encode()
        req = urllib.request.Request(self.url + "/auth/login", body, {"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            self.token = json.load(r)["access_token"]
        self.password = password

    def get(self, path, timeout=120):  # above the lane backend's quick-command wait (test.sh)
        req = urllib.request.Request(self.url + path, headers={"authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.load(r)

    def send(self, method, path, body=None, token=None):
        """(status, JSON answer) of a request with a JSON body, as admin or with another user's token."""
        req = urllib.request.Request(
            self.url + path,
            json.dumps(body if body is not None else {}).encode(),
            {"authorization": f"Bearer {token or self.token}", "content-type": "application/json"},
            method=method,
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def login(self, username, password):
        body = json.dumps({"username": username, "password": password}).encode()
        req = urllib.request.Request(self.url + "/auth/login", body, {"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)["access_token"]

    def get_answered(self, path, what):
        """GET a path that asks the guest's agent (a quick command): a 503 (the agent is offline: the
        console flow kills and restarts it) or 504 (it did not answer in the backend's wait: one command
        at a time, emulated) is asked again until the lane's deadline, as a user would retry."""

        def once():
            try:
                return self.get(path)
            except urllib.error.HTTPError as e:
                if e.code in (503, 504):
                    return None
                raise

        return self.poll(what, once, interval=2.0)

    def poll(self, what, fn, interval=1.0, within=None):
        """Call fn until it returns a truthy value; fail with what when the deadline passes (the lane's, or
        `within` seconds from now when that comes first)."""
        last = None
        end = self.deadline if within is None else min(self.deadline, time.time() + within)
        while True:
            last = fn()
            if last:
                return last
            if time.time() >= end:
                raise AssertionError(
                    f"{what}: not seen "
                    + ("before the lane's deadline" if end == self.deadline else f"within {within} s")
                )
            time.sleep(interval)


# ---------------------------------------------------------------------------------------------
# The test module's .ko: the reference for the agent's view of module code


def ko_functions(ko):
    """{name: (section, offset, size, [instruction offsets])} for the functions the kernel keeps
    after loading (everything but .init.text)."""
    sections = {}
    for line in subprocess.run(["readelf", "-SW", ko], check=True, capture_output=True, text=True).stdout.split("\n"):
        m = re.match(r"\s*\[\s*(\d+)\]\s+(\S+)", line)
        if m:
            sections[m.group(1)] = m.group(2)
    funcs = {}
    for line in subprocess.run(["readelf", "-sW", ko], check=True, capture_output=True, text=True).stdout.split("\n"):
        f = line.split()
        if len(f) >= 8 and f[3] == "FUNC" and f[6].isdigit():
            sec = sections.get(f[6], "?")
            if sec.startswith(".init") or f[7] in ("init_module", "cleanup_module"):
                continue
            funcs[f[7]] = (sec, int(f[1], 16), int(f[2]), [])
    dis = subprocess.run(["objdump", "-dw", ko], check=True, capture_output=True, text=True).stdout
    sec = None
    for line in dis.split("\n"):
        m = re.match(r"Disassembly of section (\S+):", line)
        if m:
            sec = m.group(1)
            continue
        m = re.match(r"\s*([0-9a-f]+):\t", line)
        if not m:
            continue
        off = int(m.group(1), 16)
        for s, start, size, starts in funcs.values():
            if s == sec and start <= off < start + size:
                starts.append(off - start)
    return funcs


def ko_bytes(ko, name):
    """The bytes of function name in the .ko, and the offsets in it the loader or the kernel may
    change: relocated fields, and the whole instruction where the kernel rewrites calls and jumps
    (the ftrace site, the return and indirect-call thunks)."""
    funcs = ko_functions(ko)
    sec, start, size, _ = funcs[name]
    offsets = {}
    for line in subprocess.run(["readelf", "-SW", ko], check=True, capture_output=True, text=True).stdout.split("\n"):
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)", line)
        if m:
            offsets[m.group(1)] = int(m.group(2), 16)
    with open(ko, "rb") as f:
        f.seek(offsets[sec] + start)
        data = f.read(size)
    masked = set()
    out = subprocess.run(["readelf", "-rW", ko], check=True, capture_output=True, text=True).stdout
    in_sec = False
    for line in out.split("\n"):
        if line.startswith("Relocation section"):
            in_sec = f"'.rela{sec}'" in line
            continue
        f = line.split()
        if not in_sec or len(f) < 5 or not re.fullmatch(r"[0-9a-f]{16}", f[0]):
            continue
        off = int(f[0], 16) - start
        if not 0 <= off < size:
            continue
        first = off - 1 if re.match(r"__fentry__|__x86_return_thunk|__x86_indirect_thunk", f[4]) else off
        masked.update(range(first, off + 4))
    return data, masked


def guest_checks(checks, prefix, lines):
    """A guest program's own checks, "ok - NAME: DETAIL" or "FAIL - NAME: DETAIL", one lane check each."""
    for line in lines:
        m = re.match(r"(ok|FAIL) - ([^:]+)(?:: (.*))?$", line)
        if m:

            def one(ok=m.group(1) == "ok", detail=m.group(3)):
                assert ok, detail or "failed in the guest"
                return detail

            checks.run(f"{prefix}: {m.group(2)}", one)


def ko_modinfo(ko):
    """The .modinfo fields of a .ko (version, srcversion, ...), as readelf prints its strings."""
    out = subprocess.run(["readelf", "-p", ".modinfo", ko], check=True, capture_output=True, text=True).stdout
    return dict(m.groups() for m in re.finditer(r"\]\s+([a-z_]+)=(.*)$", out, re.M))


def kmod_checks(checks, frames, a, state):
    """hotpath.ko in the guest: guest/kmodtest's own checks, one lane check each, then what the host can
    add (lane_step's bytes as READ gives them against the .ko), nothing of it left in ftrace after
    close, rmmod and insmod again, and a kernel log without oops or warning."""
    passed, failed = checks.passed, checks.failed
    out, rc = frames.get("kmodtest", ("", -1))
    if "kmodtest" not in frames:
        checks.run("hotpath.ko: the guest ran kmodtest", frame, frames, "kmodtest")
    lines = out.split("\n")
    guest_checks(checks, "hotpath.ko", lines)

    def finished():
        last = [line for line in lines if line.startswith("kmodtest: ")]
        assert last, f"kmodtest ended without its summary (status {rc}): {out[-300:]!r}"
        assert (rc == 0) == last[-1].endswith(" 0 failed"), f"status {rc} but '{last[-1]}'"
        cyc = [re.match(r"cycles (\d+) wrong (\d+)", line) for line in lines if line.startswith("cycles ")]
        assert cyc and cyc[0], "kmodtest printed no cycle count"
        state["cycles"], state["wrong"] = int(cyc[0].group(1)), int(cyc[0].group(2))
        calls = [re.match(r"call cycles (\d+) wrong (\d+)", line) for line in lines if line.startswith("call cycles ")]
        assert calls and calls[0], "kmodtest printed no call-site cycle count"
        state["wrong"] += int(calls[0].group(2))
        return f"{last[-1]} (status {rc})"

    checks.run("hotpath.ko: kmodtest ran to its end", finished)

    def read_matches_ko():
        got = [line.split() for line in lines if line.startswith("bytes lane_step ")]
        assert got, "kmodtest printed no bytes of lane_step"
        mem = bytes.fromhex(got[0][3])
        data, masked = ko_bytes(a.ko, "lane_step")
        assert len(mem) >= len(data), f"READ gave {len(mem)} bytes, lane_step has {len(data)} in the .ko"
        wrong = [i for i in range(len(data)) if i not in masked and mem[i] != data[i]]
        assert not wrong, f"bytes differ at {[hex(i) for i in wrong[:8]]} of lane_step"
        return f"{len(data) - len(masked)} of {len(data)} bytes compared (the rest relocated or patched)"

    checks.run("hotpath.ko: READ of lane_step equals hotpath_lane.ko's bytes", read_matches_ko)

    def nothing_left():
        text, _ = frame(frames, "kmod-ftrace-after")
        assert "lane_step" not in text, f"ftrace still has lane_step: {text[-300:]!r}"
        text, rc = frame(frames, "kmod-reload")
        assert rc == 0, f"rmmod hotpath and insmod again failed (status {rc}): {text[-300:]!r}"
        return "lane_step not in enabled_functions after close; rmmod hotpath and insmod again succeed"

    checks.run("hotpath.ko: nothing left after close; it unloads and loads again", nothing_left)

    def dkms_build():
        text, rc = frame(frames, "kmod-version")
        assert rc == 0, f"the guest has no /sys/module/hotpath/version or srcversion (status {rc}): {text[-300:]!r}"
        guest = text.split()
        info = ko_modinfo(a.hotpath_ko)
        want = [a.dkms_version, info.get("srcversion", "")]
        assert info.get("version") == a.dkms_version, (
            f"the .ko DKMS installed has version {info.get('version')!r}, its package is hotpath/{a.dkms_version}"
        )
        assert guest == want, f"the guest's hotpath is version/srcversion {guest}, DKMS built {want}"
        return f"hotpath/{a.dkms_version}, srcversion {want[1]}, in the guest as DKMS built it"

    checks.run("hotpath.ko: the guest runs the module its DKMS package built", dkms_build)

    checks.run("hotpath.ko: the guest's kernel log is clean", clean_log, frames, "kmod-dmesg")
    state["kmod"] = [checks.passed - passed, checks.passed + checks.failed - passed - failed]


def clean_log(frames, name):
    """A guest's kernel log (frame name: dmesg) has no oops, BUG, WARNING or call trace."""
    text, _ = frame(frames, name)
    pattern = r"WARNING:|Oops|BUG:|Call Trace|general protection"
    bad = [line for line in text.split("\n") if re.search(pattern, line)]
    assert not bad, "; ".join(bad[:5])
    return "no oops, BUG or WARNING in the guest's kernel log"


def script_checks(checks, frames, name, label, summary, accept):
    """A guest script's frame (guest/NAME.sh): its own "ok - "/"FAIL - " lines, one lane check each under
    label, and its last line matching summary, which accept(match, status) takes into the lane's state
    and asserts on (the lane check "LABEL: NAME.sh ran to its end")."""
    if name not in frames:
        checks.run(f"{label}: the guest ran {name}.sh", frame, frames, name)
        return
    out, rc = frames[name]
    lines = out.split("\n")
    guest_checks(checks, label, lines)

    def finished():
        last = [m for m in (re.match(summary, line) for line in lines) if m]
        assert last, f"{name}.sh ended without its summary (status {rc}): {out[-300:]!r}"
        accept(last[-1], rc)
        return last[-1].group(0)

    checks.run(f"{label}: {name}.sh ran to its end", finished)


def ktarget_checks(checks, frames, state):
    """The agent's kernel target in the guest (guest/ktarget.sh): hotpathd plans lane_mix, installs it
    through hotpath.ko and reverts it, cycle after cycle; its summary's counts for the lane's summary line."""

    def accept(m, rc):
        i, j, c, _, sites, w = (int(g) for g in m.groups())
        state["installs"], state["install_cycles"], state["call_sites"] = [i, j], c, sites
        state["wrong"] += w
        assert rc == 0, f"ktarget.sh's status is {rc}: {m.group(0)}"

    script_checks(
        checks,
        frames,
        "ktarget",
        "kernel target",
        r"ktarget: installs (\d+)/(\d+), cycles (\d+), copy ran (\d+), call sites (\d+), wrong results (\d+)",
        accept,
    )


def kcycles_checks(checks, frames, state):
    """A kernel read-path group installed and reverted LANE_KCYCLES times while a reader checks every byte
    it reads (guest/kcycles.sh): its cycles and wrong results for the lane's summary line."""

    def accept(m, rc):
        _, _, c, n, reads, w = m.groups()
        state["read_cycles"], state["wrong"] = int(c), state["wrong"] + int(w)
        assert rc == 0 and c == n and int(reads) > 0, f"kcycles.sh's status is {rc}: {m.group(0)}"

    script_checks(
        checks,
        frames,
        "kcycles",
        "read-path cycles",
        r"kcycles: root (\S+), functions (\d+), cycles (\d+)/(\d+), .* reads (\d+), wrong results (\d+)",
        accept,
    )


def copy_states(state, script):
    """accept for kkeys.sh and kscalls.sh: every state as the original's, the copy ran in each."""

    def accept(m, rc):
        s, t, _, r, w = (int(g) for g in m.groups())
        state["wrong"] += w
        assert rc == 0 and s == t == r and t > 0, f"{script}'s status is {rc}: {m.group(0)}"

    return accept


def kkeys_checks(checks, frames, state):
    """Jump labels in a kernel copy (guest/kkeys.sh): lane_keyed planned and installed, its static keys
    flipped while the copy is installed; its wrong results counted with the lane's."""
    script_checks(
        checks,
        frames,
        "kkeys",
        "jump labels in a copy",
        r"kkeys: states (\d+)/(\d+) as the original, flips (\d+), copy ran (\d+), wrong results (\d+)",
        copy_states(state, "kkeys.sh"),
    )


def kscalls_checks(checks, frames, state):
    """Static calls in a kernel copy (guest/kscalls.sh): lane_scall planned and installed, its static call
    updated while the copy is installed; its wrong results counted with the lane's."""
    script_checks(
        checks,
        frames,
        "kscalls",
        "static calls in a copy",
        r"kscalls: targets (\d+)/(\d+) as the original, updates (\d+), copy ran (\d+), wrong results (\d+)",
        copy_states(state, "kscalls.sh"),
    )


def playwright_start(a, api, state, title, folder):
    """Start Playwright on the test of console.spec.ts whose title holds title, in the background (the
    console's view of the guest runs while the guest's job does; its kernel flow once checks.py's is done):
    (the process, its output's path). Each run has its own output folder under the run's (a failure's trace)."""
    env = dict(
        os.environ,
        HOTPATH_E2E_URL=a.url,
        HOTPATH_E2E_ADMIN_PASSWORD=api.password,
        LANE_GUEST_HOSTNAME=a.guest_hostname,
        LANE_HOST_HOSTNAME=socket.gethostname(),
        LANE_RELEASE=a.release,
        LANE_PLAYWRIGHT_OUTPUT=os.path.join(a.run, "playwright", folder),
        LANE_APPROVER=(state.get("approver") or {}).get("username", ""),
        LANE_APPROVER_PASSWORD=(state.get("approver") or {}).get("password", ""),
        LANE_RESULTS=a.results,
    )
    if not os.path.isdir(os.path.join(a.e2e, "node_modules", "@playwright")):
        return None, ""
    path = os.path.join(a.run, f"playwright-{folder}.log")
    # (--grep is matched against the file's name and the title: no anchor)
    cmd = ["npx", "playwright", "test", "-c", "kernel-lane/playwright.config.ts", "--grep", title]
    with open(path, "w") as out:
        return subprocess.Popen(cmd, cwd=a.e2e, env=env, stdout=out, stderr=subprocess.STDOUT), path


def playwright_result(a, started, tests=1):
    """Wait (until the deadline) for a Playwright run playwright_start began, which must have passed `tests` tests;
    its output, or AssertionError. Each passed test's line (the list reporter's, with its duration) is printed, for
    the lane's time."""
    p, path = started
    if p is None:
        raise AssertionError("Playwright is not installed in e2e/: run ./scripts/install-deps.sh test")
    left = max(30, int(a.deadline - time.time()))
    try:
        p.wait(timeout=left)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise AssertionError(f"Playwright did not finish within {left} s") from None
    with open(path, errors="replace") as f:
        text = f.read()
    if p.returncode != 0:
        print(text[-4000:])
        raise AssertionError(f"Playwright failed (status {p.returncode}); its output is above")
    if not re.search(rf"\b{tests} passed\b", text):
        raise AssertionError(f"Playwright did not pass its {tests} test(s): {text[-500:]!r}")
    for line in text.splitlines():
        if "✓" in line:
            print("#", line.strip(), flush=True)
    return text


def klivepatch_checks(checks, frames, state):
    """Livepatch's reliable-stack check through a kernel copy (guest/klivepatch.sh): a livepatch transition
    ends while a task sleeps inside lane_mix's copy, and (the control) waits on that task's stack while the
    copy has no ORC entries; its wrong results counted with the lane's."""

    def accept(m, rc):
        p, p_of, c, c_of, r, r_of, w = (int(g) for g in m.groups())
        state["wrong"] += w
        assert rc == 0 and (p, c, r) == (p_of, c_of, r_of) == (1, 1, 2) and w == 0, (
            f"klivepatch.sh's status is {rc}: {m.group(0)}"
        )

    script_checks(
        checks,
        frames,
        "klivepatch",
        "livepatch through a copy",
        r"klivepatch: patched with a task asleep in the copy (\d+)/(\d+), control held back by the copy's stack"
        r" (\d+)/(\d+), patches reverted (\d+)/(\d+), wrong (\d+)",
        accept,
    )


def kdrain_checks(checks, frames, state):
    """A copy reverted while a task sleeps in it (guest/kdrain.sh): the revert succeeds, the heap drains
    (kept, rmmod refused) while the task is inside, the task returns through it with the original's
    result once released, and the heap is then released; its wrong results counted with the lane's."""

    def accept(m, rc):
        r, r_of, d, d_of, w = (int(g) for g in m.groups())
        state["wrong"] += w
        assert rc == 0 and (r, d) == (r_of, d_of) == (1, 1) and w == 0, f"kdrain.sh's status is {rc}: {m.group(0)}"

    script_checks(
        checks,
        frames,
        "kdrain",
        "a freed heap drains",
        r"kdrain: revert with a task asleep in the copy (\d+)/(\d+), the heap drained after its release (\d+)/(\d+),"
        r" wrong (\d+)",
        accept,
    )


# ---------------------------------------------------------------------------------------------
# The console's kernel flows in Chromium, with lane_mix driven and checked in the guest (guest/jobs.sh
# mixwatch) and the guest's agent killing itself at its first install's redirect (guest/init)


def infos(path, start=0):
    """The "@@info" lines of the results channel from byte offset start on, in order, as dicts."""
    with open(path, errors="replace") as f:
        f.seek(start)
        text = f.read()
    out = []
    for line in text.replace("\r", "").split("\n"):
        if line.startswith("@@info "):
            out.append(dict(w.split("=", 1) for w in line[7:].split() if "=" in w))
    return out


def size(path):
    return os.path.getsize(path)


# A bound for a hang: how long after Chromium's flows have ended checks.py still waits for the guest's word
# on their last steps (mixwatch writes a line every 20 rounds, ~2-10 s of guest time here).
FLOW_GRACE_S = 180


def kernel_flow_checks(checks, api, a, state, hid):
    """The console's kernel flows in Chromium (console.spec.ts: lane_mix Optimize -> Request -> another user
    approves -> Install -> before/after -> Revert, then a plan of lane_mix rolled out to the guest's build),
    and what the backend and the guest show of the first meanwhile, checked here: the plan's counts exact
    (kprobes), the guest's agent killed at its install's redirect (guest/init) leaving the kernel clean, the
    restarted agent installing it, the copy running, the windows labelled as emulation, and after the revert
    lane_mix's own entry, ftrace clean and every mixwatch round right. One flow in the guest, not one over
    REST and another in Chromium: the guest's one emulator thread did each step twice."""
    approver = {"username": "lane-approver", "password": os.urandom(12).hex(), "role": "approver"}
    flow = {}

    def mix(start=0):
        return [i for i in infos(a.results, start) if "mixwatch-rounds" in i or "mixwatch-orig-where" in i]

    def approver_made():
        code, _ = api.send("POST", "/users", approver)
        assert code == 201, f"creating the approver answered {code}"
        state["approver"] = approver
        api.poll("mixwatch driving lane_mix in the guest", lambda: [i for i in mix() if "mixwatch-rounds" in i])
        return "lane-approver (role approver) for the flows' approvals; mixwatch drives lane_mix"

    if not checks.run("console flow: a second user to approve, lane_mix driven in the guest", approver_made):
        state["console"][1] += 2
        return
    before = {p["id"] for p in api.get(f"/hosts/{hid}/plans?target=kernel&limit=1000")}
    flow["at"] = size(a.results)
    started = playwright_start(a, api, state, "kernel (flow|roll-out):", "flow")
    state["console"][1] += 2

    def while_flow(what, fn, interval=2.0, within=None):
        """Poll fn while Chromium's flows run and for FLOW_GRACE_S after they ended (what the guest writes of
        their last steps, such as lane_mix's entry read after the revert, comes a while later)."""

        def once():
            running = started[0] is not None and started[0].poll() is None
            got = fn()
            if got or running:
                return got
            flow.setdefault("ended", time.time())
            if time.time() - flow["ended"] < FLOW_GRACE_S:
                return None
            raise AssertionError(
                f"{what}: not seen within {FLOW_GRACE_S} s after Chromium's flows ended (status {started[0].poll()})"
            )

        if started[0] is None:
            raise AssertionError("Playwright is not installed in e2e/: run ./scripts/install-deps.sh test")
        return api.poll(what, once, interval=interval, within=within)

    def plan_of_flow():
        mine = [
            p
            for p in api.get(f"/hosts/{hid}/plans?target=kernel&limit=1000")
            if p["id"] not in before and p["root_name"] == "lane_mix"
        ]
        return min(mine, key=lambda p: p["created_at"]) if mine else None

    def plan_now(leaving=()):
        p = api.get(flow["path"])
        return p if p["state"] not in leaving else None

    def plan_exact():
        p = while_flow("the plan Chromium asked for (Optimize)", plan_of_flow)
        flow["id"] = p["id"]
        flow["path"] = f"/hosts/{hid}/plans/{p['id']}"
        p = while_flow("the plan made", lambda: plan_now(("planning",)))
        assert p["state"] != "failed", f"the plan failed: {p.get('error')}"
        assert not p["estimated"], "the plan's counts are estimates: kprobes were not used"
        body = api.get(flow["path"] + "/body")  # the record is polled; the body is read once
        source = (body.get("profile") or {}).get("source", "")
        assert "kprobes" in source, f"the profile's source is {source!r}"
        return f"{p['state']} from {source}; {len(body.get('group') or [])} function(s) in the group"

    if not checks.run("console flow: the kernel plan of lane_mix from exact counts (kprobes)", plan_exact):
        checks.run(*browser_flows(a, state, started))
        return

    def console_lines(start):
        """The guest agent's console lines naming the plan, from character start on."""
        with open(os.path.join(a.run, "console.log"), errors="replace") as f:
            text = f.read()[start:]
        return [ln for ln in text.split("\n") if flow["id"] in ln and "[agent]" in ln and "journal" in ln]

    def killed_mid_install():
        died = while_flow(
            "the guest's agent killed at its install's redirect (Chromium's Install)",
            lambda: [i for i in infos(a.results, flow["at"]) if "agent-exit" in i],
        )[0]
        assert died["agent-exit-lane_mix"] == "0", f"ftrace still lists lane_mix after the agent died: {died}"
        with open(os.path.join(a.run, "console.log"), errors="replace") as f:
            exited = f.read().rfind("agent exited")
        said = while_flow("the restarted agent's word on the install it found", lambda: console_lines(exited))
        return (
            f"ftrace lists {died['agent-exit-ftrace']} function(s), not lane_mix; the restarted agent: {said[0][-200:]}"
        )

    checks.run(
        "console flow: kill -9 of the agent at the install's redirect leaves the kernel clean", killed_mid_install
    )

    def installed():
        p = while_flow(
            "the plan installed (the install sent again to the restarted agent)",
            lambda: plan_now(("ready", "requested", "approved", "installing")),
        )
        assert p["state"] in ("installed", "reverting", "reverted"), f"the plan is {p['state']}: {p.get('error')}"
        d = p["install_detail"] or {}
        heap, length = int(d["heap"], 16), int(d["heap_bytes"])
        at_copy = while_flow(
            "lane_mix running in the copy (its call of lane_here returning into the heap)",
            lambda: [
                i
                for i in mix(flow["at"])
                if "mixwatch-where" in i and heap <= int(i["mixwatch-where"]) % 2**64 < heap + length
            ],
        )
        flow["installed_at"] = at_copy[0]["mixwatch-rounds"]
        return f"heap 0x{heap:x} ({length} bytes); lane_mix ran in it (round {at_copy[0]['mixwatch-rounds']})"

    if not checks.run("console flow: installed by the restarted agent, the copy runs", installed):
        checks.run(*browser_flows(a, state, started))
        return

    def before_after():
        def ended():
            p = api.get(flow["path"])
            done = ("stopped", "failed", "target_exited")
            return p if ((p.get("comparison") or {}).get("after") or {}).get("state") in done else None

        c = while_flow("the window after the install", ended)["comparison"]
        for w in ("before", "after"):
            assert c[w] and c[w]["state"] == "stopped" and c[w]["calls"], f"the window {w}: {c[w]}"
        assert c.get("emulated") and "under emulation, not a performance figure" in c["emulated"], (
            f"the times are not labelled as emulated: {c.get('emulated')!r}"
        )
        return f"calls {c['before']['calls']} before, {c['after']['calls']} after; times labelled: {c['emulated']}"

    checks.run("console flow: before/after from exact counts in two windows, labelled as emulation", before_after)

    def reverted():
        p = while_flow("the plan reverted (Chromium's Revert)", lambda: plan_now(("installed", "reverting")))
        assert p["state"] == "reverted", f"the plan is {p['state']}: {p.get('error')}"
        orig = next(i for i in mix() if "mixwatch-orig-where" in i)
        # From the round the copy was seen running on: ftrace lists lane_mix (the redirect) until the revert,
        # so the first round after it with lane_mix not traced and at its own address is the revert's, and
        # the entry mixwatch reads when ftrace lets go is the reverted one (the roll-out's plan, measured
        # next, lists it again later).
        back = while_flow(
            "lane_mix at its own address again, not listed by ftrace",
            lambda: [
                i
                for i in mix(flow["at"])
                if int(i.get("mixwatch-rounds", 0)) > int(flow["installed_at"])
                and i.get("mixwatch-traced") == "no"
                and i.get("mixwatch-where") == orig["mixwatch-orig-where"]
            ],
        )
        entry = while_flow(
            "lane_mix's entry read again after the revert",
            lambda: [
                i
                for i in infos(a.results, flow["at"])
                if "mixwatch-entry" in i and int(i["mixwatch-rounds"]) >= int(back[0]["mixwatch-rounds"])
            ],
        )[0]
        assert entry["mixwatch-entry"] == orig["mixwatch-orig-entry"], (
            f"lane_mix's entry is {entry['mixwatch-entry']}, was {orig['mixwatch-orig-entry']}"
        )
        return (
            f"entry {entry['mixwatch-entry'].replace('_', ' ')} as before; ftrace lets go (round "
            f"{back[0]['mixwatch-rounds']})"
        )

    if checks.run("console flow: reverted; original entry, ftrace clean", reverted):
        state["console"][0] += 1
    if checks.run(*browser_flows(a, state, started)):
        state["console"][0] += 1

    def every_round():
        last = [i for i in mix() if "mixwatch-wrong" in i][-1]
        state["wrong"] += int(last["mixwatch-wrong"])
        assert last["mixwatch-wrong"] == "0", f"{last['mixwatch-wrong']} of {last['mixwatch-rounds']} rounds wrong"
        return f"{last['mixwatch-rounds']} rounds of 18 results through both flows, none wrong"

    checks.run("console flows: every result of lane_mix right throughout", every_round)


def browser_flows(a, state, started):
    """The check of Chromium's two kernel flows (console.spec.ts), for Checks.run."""

    def fn():
        playwright_result(a, started, tests=2)
        return (
            "Chromium: lane_mix optimized, approved by another user, installed, compared, reverted; a plan of "
            "lane_mix rolled out to the guest's kernel build (the guest the canary, two fakes the next wave, this "
            "host refused) and reverted everywhere"
        )

    return (
        "console flows in Chromium: optimized, approved by another user, installed, compared, reverted; rolled out",
        fn,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--results", required=True, help="the guest's results channel (second serial port)")
    ap.add_argument(
        "--results-kmod",
        required=True,
        help="the second guest's results channel (its job: hotpath.ko and the kernel target without the daemon)",
    )
    ap.add_argument(
        "--kmod-done",
        required=True,
        help="the file test.sh writes once the second guest's job is done (or FAIL and the reason)",
    )
    ap.add_argument("--ko", required=True, help="hotpath_lane.ko as loaded in the guest")
    ap.add_argument("--release", required=True, help="the kernel release the lane fetched")
    ap.add_argument("--hotpath-ko", required=True, help="hotpath.ko as DKMS installed it (build.sh) for the guest")
    ap.add_argument("--dkms-version", required=True, help="its DKMS package version (install.sh --version)")
    ap.add_argument("--guest-hostname", default="hotpath-lane")
    ap.add_argument("--deadline", type=float, required=True, help="epoch seconds every wait ends by")
    ap.add_argument("--e2e", required=True, help="the e2e folder (Playwright and its node_modules)")
    ap.add_argument("--run", required=True, help="the lane's run folder (Playwright's output goes there)")
    ap.add_argument("--lane-times", default="", help="the host's steps as NAME=SECONDS,... (test.sh), for the table")
    ap.add_argument(
        "--job-done",
        default="",
        help="started while the guest's job runs: the file test.sh writes once the job is done (its content: "
        "the host's steps, as --lane-times); the checks of the guest as a host run meanwhile",
    )
    a = ap.parse_args()

    checks = Checks()
    with open(a.password_file) as f:
        api = Api(a.url, f.read().strip(), a.deadline)
    state = new_state()

    def read_results():
        with open(a.results, errors="replace") as f:
            return parse_results(f.read())

    # The checks of the guest as a host need its agent connected and the job's first frames (its modules,
    # their text symbols), not the job's end: with --job-done they run while the job does (the guest's
    # CPUs are one emulator thread on one host core; these checks are the backend's work, on the other).
    frames, info, done = api.poll(
        "the guest's test job's first frames (modules, module text symbols)",
        lambda: (lambda r: r if "module-text-symbols" in r[0] else None)(read_results()),
    )

    # -- the guest as a host -------------------------------------------------------------------
    def job_finished():
        assert done, "the guest's test job did not finish (no @@done on the results channel)"
        out, _ = frame(frames, "release")
        assert out.strip() == a.release, f"the guest runs {out.strip()!r}, the lane fetched {a.release}"
        return f"kernel {a.release}, {len(frames)} results on the second serial port"

    def job_checks():
        """Wait for the job's end (--job-done), then check what it wrote."""
        nonlocal frames, info, done
        if a.job_done:
            api.poll("the guest's test job done (test.sh)", lambda: os.path.exists(a.job_done))
            with open(a.job_done) as f:
                a.lane_times = f.read().strip()
        frames, info, done = read_results()
        checks.run("the guest booted the fetched kernel and ran its test job", job_finished)
        kcycles_checks(checks, frames, state)
        checks.run("the guest's kernel log is clean after its job", clean_log, frames, "kcycles-dmesg")

    def kmod_job_checks():
        """The second guest's job (hotpath.ko's proofs, the kernel target without the daemon): wait for its
        end (--kmod-done), then check what it wrote."""

        def ended():
            if not os.path.exists(a.kmod_done):
                return None
            with open(a.kmod_done) as f:
                return f.read().strip() or "done"

        nonlocal frames, info
        said = api.poll("the second guest's job done (test.sh)", ended)
        with open(a.results_kmod, errors="replace") as f:
            kframes, kinfo, kdone = parse_results(f.read())
        # The measurements and refusals ran there too (guest/jobs.sh measures): the checks after this one read
        # them with the first guest's frames (no frame or info name is written by both).
        frames = {**frames, **kframes}
        info = {**info, **kinfo}

        def kmod_job_finished():
            assert not said.startswith("FAIL"), said
            assert kdone, "the second guest's job did not finish (no @@done on its results channel)"
            return f"{len(kframes)} results on its second serial port"

        checks.run("the second guest ran its job (hotpath.ko, the kernel target)", kmod_job_finished)
        kmod_checks(checks, kframes, a, state)
        ktarget_checks(checks, kframes, state)
        kkeys_checks(checks, kframes, state)
        kscalls_checks(checks, kframes, state)
        klivepatch_checks(checks, kframes, state)
        kdrain_checks(checks, kframes, state)

    def guest_host():
        hosts = api.poll(
            "the guest online in the backend with its whole catalog",
            lambda: [
                h
                for h in api.get("/hosts")
                if h["hostname"] == a.guest_hostname and h["online"] and h["catalog_complete"]
            ],
        )
        h = hosts[0]
        state["host"] = h
        assert h["kernel_release"] == a.release, f"kernel {h['kernel_release']}"
        state["functions"] = h["function_count"]
        return (
            f"{h['hostname']} online, kernel {h['kernel_release']}, {h['function_count']} functions, catalog complete"
        )

    if not checks.run("the guest is a Hotpath host: online, kernel 6.1, catalog uploaded", guest_host):
        job_checks()
        kmod_job_checks()
        return finish(checks, a, state)
    host = state["host"]
    hid = host["id"]

    def side_by_side():
        mine = socket.gethostname()
        hosts = api.get("/hosts")
        names = {h["hostname"]: h for h in hosts if h["online"]}
        assert mine in names, f"this machine's own agent ({mine}) is not online beside the guest"
        assert names[mine]["kernel_release"] != a.release, "both hosts report the same kernel"
        return f"{mine} ({names[mine]['kernel_release']}) and {a.guest_hostname} ({a.release})"

    checks.run("both hosts side by side in one installation", side_by_side)
    # The console's view of the guest (host list, its tree, a CFG and the instructions its agent decodes)
    # needs the guest online with its catalog, not the job's end: Chromium draws it meanwhile.
    console_view = playwright_start(a, api, state, "both hosts side by side", "view")

    def capabilities():
        caps = {c["name"]: c for c in host["capabilities"]}
        must = ["kallsyms", "bpf_text_read", "perf_sampling", "tracepoints", "kprobes", "kernel_code_replacement"]
        missing = [n for n in must if not caps.get(n, {}).get("available")]
        assert not missing, "unavailable or absent: " + ", ".join(
            f"{n} ({caps[n]['detail']})" if n in caps else n for n in missing
        )
        # Mechanisms the 6.1 kernel has, whatever name the agent reports them under.
        for n, c in caps.items():
            if re.search(r"fentry|fexit|kretprobe|livepatch", n):
                assert c["available"], f"{n} unavailable: {c['detail']}"
        pmu = caps.get("hardware_pmu")
        assert pmu and not pmu["available"] and pmu["detail"], (
            "QEMU's emulated CPU has no PMU, yet hardware_pmu is not reported unavailable with a reason"
        )
        available = ", ".join(sorted(n for n, c in caps.items() if c["available"]))
        return f"{available}; hardware_pmu unavailable with its reason"

    checks.run("the guest's real capabilities (probes, tracepoints, modules; no PMU under emulation)", capabilities)

    # -- modules in the code tree ----------------------------------------------------------------
    def modules_in_tree():
        out, _ = frame(frames, "modules")
        loaded = {line.split()[0] for line in out.split("\n") if line.strip()}
        mods = api.get(f"/hosts/{hid}/modules")
        names = {m["name"] for m in mods}
        assert "vmlinux" in names, "no vmlinux"
        assert loaded <= names, "loaded but not in the tree: " + ", ".join(sorted(loaded - names))
        incomplete = [m["name"] for m in mods if not m["complete"] or m["function_count"] <= 0]
        assert not incomplete, "catalog incomplete or empty: " + ", ".join(incomplete)
        state["modules"] = len(mods)
        state["mods"] = mods
        return f"{len(loaded)} loaded modules + vmlinux, each with its catalog"

    if not checks.run("every loaded module of the guest is in its code tree", modules_in_tree):
        if console_view[0] is not None:
            console_view[0].kill()
            console_view[0].wait()
        job_checks()
        kmod_job_checks()
        return finish(checks, a, state)

    module_funcs = {}

    def module_symbols():
        out, _ = frame(frames, "module-text-symbols")
        syms = []
        for line in out.split("\n"):
            m = re.match(r"([0-9a-f]+) [tT] (\S+)\s+\[(\S+)\]", line)
            if m:
                syms.append((int(m.group(1), 16), m.group(2), m.group(3)))
        assert syms, "no module text symbols"
        for mod in {s[2] for s in syms}:
            page = api.get(f"/hosts/{hid}/functions?module={mod}&limit=100000&sort=address")
            module_funcs[mod] = page["items"]
        missing = []
        for addr, name, mod in syms:
            at = [f for f in module_funcs.get(mod, []) if f["address"] == addr]
            if not at:
                missing.append(f"{mod}:{name}")
        assert not missing, f"{len(missing)} module symbols are no function start: {', '.join(missing[:8])}"
        named = sum(1 for _, name, mod in syms if any(f["name"] == name for f in module_funcs[mod]))
        return f"{len(syms)} text symbols of {len(module_funcs)} modules are functions ({len(syms) - named} aliases)"

    checks.run("module functions resolve: every module text symbol starts a catalog function", module_symbols)

    details = {}  # (module, name) -> function detail

    def module_functions_tile():
        bad, count = [], 0
        for mod, items in module_funcs.items():
            for f in items:
                d = api.get(f"/hosts/{hid}/functions/{f['id']}")
                details[(mod, f["name"], f["id"])] = d
                count += 1
                blocks = d["blocks"]
                starts = {b["offset"] for b in blocks}
                off = 0
                for b in blocks:
                    if b["offset"] != off or b["size"] <= 0:
                        bad.append(f"{mod}:{f['name']} block at +{b['offset']:#x} (expected +{off:#x})")
                        break
                    off += b["size"]
                    for s in b["successors"]:
                        if s["kind"] in ("fallthrough", "taken") and s["target_offset"] not in starts:
                            bad.append(f"{mod}:{f['name']} {s['kind']} to +{s['target_offset']:#x}, no block start")
                if off != f["size"]:
                    bad.append(f"{mod}:{f['name']} blocks cover {off:#x} of {f['size']:#x} bytes")
                if f["undecodable"]:
                    bad.append(f"{mod}:{f['name']} undecodable at +{d['undecodable_offset']:#x}")
        assert not bad, f"{len(bad)} problems: " + "; ".join(bad[:6])
        return f"{count} module functions: blocks tile each one, branch targets are block starts, none undecodable"

    checks.run("module functions tile into basic blocks", module_functions_tile)

    def callees():
        def into_vmlinux(d):
            """Names this function calls, or jumps to as a tail call, in vmlinux."""
            names = {c["name"] for c in d["callees"] if c["module"] == "vmlinux"}
            for b in d["blocks"]:
                for s in b["successors"]:
                    if s["kind"] == "tail_call" and s["target_name"] and "+" not in s["target_name"]:
                        names.add(s["target_name"])
            return names - {f["name"] for f in module_funcs.get(d["function"]["module"], [])}

        # (ktime_get_ns() is an inline wrapper of ktime_get(); lane_nap ends in a tail call to msleep)
        want = {"lane_step": "ktime_get", "lane_nap": "msleep"}
        for fn, callee in want.items():
            d = next((d for (m, name, _), d in details.items() if m == "hotpath_lane" and name == fn), None)
            assert d, f"hotpath_lane:{fn} not in the catalog"
            got = into_vmlinux(d)
            assert callee in got, f"{fn} reaches {sorted(got)} in vmlinux, not {callee}"
        every = [d for d in details.values()]
        into = sum(1 for d in every if into_vmlinux(d))
        assert into >= len(every) // 2, f"only {into} of {len(every)} module functions call into vmlinux"
        d = next(d for (m, name, _), d in details.items() if m == "hotpath_lane" and name == "lane_read")
        assert any(c["name"] == "lane_step" and c["module"] == "hotpath_lane" for c in d["callees"]), (
            "lane_read does not call lane_step"
        )
        return (
            f"lane_step -> ktime_get, lane_nap -> msleep (tail call); {into} of {len(every)} module functions "
            "reach vmlinux"
        )

    checks.run("module functions have callees into vmlinux", callees)

    def against_ko():
        ko = ko_functions(a.ko)
        items = {f["name"]: f for f in module_funcs.get("hotpath_lane", [])}
        assert set(ko) == set(items), f"catalog {sorted(items)} vs the .ko's {sorted(ko)}"
        last = max(items.values(), key=lambda f: f["address"])
        for name, (_, _, size, starts) in ko.items():
            f = items[name]
            ins = api.get_answered(f"/hosts/{hid}/functions/{f['id']}/instructions", f"{name}'s instructions")[
                "instructions"
            ]
            agent = {i["offset"] for i in ins}
            assert f["size"] >= size, f"{name}: {f['size']} bytes, the .ko says {size}"
            assert f["size"] - size < 16, f"{name}: {f['size']} bytes, {f['size'] - size} past its .ko size {size}"
            if f is last:
                assert f["size"] == size, f"{name}, the module's last function: {f['size']} bytes, the .ko says {size}"
            lost = sorted(set(starts) - agent)
            assert not lost, (
                f"{name}: instructions at {[hex(o) for o in lost[:5]]} per objdump are not "
                "instruction starts for the agent"
            )
        return (
            f"{len(ko)} functions of hotpath_lane.ko: sizes and instruction starts agree with objdump; "
            f"the last ({last['name']}) ends where its code does, not in the loader's fill"
        )

    # -- the job's results, once it is done ----------------------------------------------------------
    job_checks()
    # The live text read against the .ko once the job is done, not while it runs: its measurements put
    # kprobes in lane_mix, and an optimized kprobe is a 5-byte jump at a block start in the text the agent
    # reads (a run read lane_mix's +0x8a and +0x8b inside one).
    checks.run("hotpath_lane as the agent reads it matches its .ko (instructions via the stream)", against_ko)

    def hotness():
        def hot():
            top = api.get(f"/hosts/{hid}/top-functions?window_s=15&limit=200")
            return [
                i
                for i in top["items"]
                if i["samples"] > 0 and (i["module"] == "hotpath_lane" or i["name"] == "vfs_read")
            ]

        items = api.poll("samples in the test module or vfs_read from the guest's workload", hot, interval=2.0)
        return "live samples in " + ", ".join(sorted({f"{i['module']}:{i['name']}" for i in items})[:4])

    checks.run("live sampled hotness arrives from the guest", hotness)

    def view():
        playwright_result(a, console_view)
        return (
            "Chromium: the host list shows both, the guest's tree has hotpath_lane, lane_step's CFG and "
            "instructions draw"
        )

    checks.run("the console shows the guest beside this host, with its module code", view)

    kernel_flow_checks(checks, api, a, state, hid)
    # The second guest ran beside the first one's job; by now its own has ended, or soon will.
    kmod_job_checks()

    # -- what the kernel refuses -------------------------------------------------------------------
    def kernel_refuses(name, pattern):
        out, _ = frame(frames, name)
        assert out.startswith("refused"), f"the guest kernel accepted it: {out}"
        assert re.search(pattern, out), f"unexpected reason: {out}"
        return out.split("|")[0].replace("refused:", "refused with").strip()

    checks.run(
        "the guest kernel refuses a kprobe at vfs_read+1 (not an instruction boundary)",
        kernel_refuses,
        "kernel-refuses-unaligned",
        r"multibyte|instruction boundary|EILSEQ",
    )
    checks.run(
        f"the guest kernel refuses a kprobe in a blacklisted function ({info.get('blacklisted', '?')}, "
        f"block {info.get('blacklisted-block', '?')})",
        kernel_refuses,
        "kernel-refuses-blacklisted",
        r".",
    )

    # -- exact measurement (hotpathd measure) ------------------------------------------------------
    # The guest carries this tree's own hotpathd, which has `measure` (agent/src/cli/main.c): a guest
    # without it means the lane built or carried the wrong agent, a failure of each check, not a skip.
    # Only an agent the caller chose (HOTPATHD, e.g. an older build) makes them a visible skip.
    measure = info.get("measure") == "yes"
    carried = os.environ.get("HOTPATHD")
    if carried:
        why = f"the guest's hotpathd ({carried}, carried with HOTPATHD) has no `measure` command"
    else:
        why = (
            "the guest's hotpathd has no `measure` command (`hotpathd measure --help` failed in the guest), "
            "though this tree's agent has one: the lane carried a stale or broken agent/build/hotpathd"
        )
    if not measure:
        state["why_not"].append(why)

    def need_measure():
        if not measure:
            raise NotRun(why) if carried else AssertionError(why)

    def entry_count():
        need_measure()
        n = int(info["entry-reads"])
        out, rc = frame(frames, "measure-entry")
        state["entry"][1] += 1
        assert rc == 0, f"hotpathd measure failed (status {rc}): {out[-400:]}"
        rows = [r for r in json_object(out)["resources"] if named(r, "vfs_read") and "block" not in r]
        assert rows, f"no vfs_read row: {out[-400:]}"
        got = rows[0]["metrics"]["count"]
        assert exact(rows[0]), f"the count is labelled {rows[0]['labels']['count']}, not exact"
        assert got == n, (
            f"vfs_read entered {got} times by pid {info['entry-pid']}, which made exactly {n} read() "
            f"calls ({armed_line(out)})"
        )
        state["entry"][0] += 1
        return f"{got} = {n} read() calls of pid {info['entry-pid']}"

    checks.run("entry count of vfs_read equals the guest program's read() calls", entry_count)

    def block_counts():
        need_measure()
        n = int(info["steps-reads"])
        quarter = math.ceil(n / 4)
        inspect = json_object(frame(frames, "inspect-lane_step")[0])
        start, blocks = cfg(inspect)
        # lane_step's entry block ends in the n % 4 test; the side that calls ktime_get runs on
        # every fourth call, the other side on the rest.
        succ = dict(blocks[0])
        assert set(succ) == {"taken", "fallthrough"}, f"lane_step's entry block ends in {sorted(succ)}, not a branch"
        calls = {
            b["start"] - start
            for b in inspect["blocks"]
            if any("ktime_get" in i.get("text", "") for i in b.get("instructions", []))
        }
        sides = [succ["taken"], succ["fallthrough"]]
        assert len([o for o in sides if o in calls]) == 1, (
            "cannot tell which side of lane_step's branch calls ktime_get"
        )
        q_side = sides[0] if sides[0] in calls else sides[1]
        other = sides[1] if q_side == sides[0] else sides[0]
        expect = {0: n, q_side: quarter, other: n - quarter}
        out, rc = frame(frames, "measure-blocks")
        if rc != 0:
            state["blocks"][1] += len(expect)
            raise AssertionError(f"hotpathd measure failed (status {rc}): {out[-400:]}")
        rows = [r for r in json_object(out)["resources"] if "block" in r]
        counts = {int(r["block"]) - start: r["metrics"]["count"] for r in rows if exact(r)}
        # Padding (int3 after a return, nops before the next function) is reached by no branch and
        # never runs: where the measurement has a row for it, it must be 0.
        reached = {t for succs in blocks.values() for _, t in succs}
        for off in blocks:
            if off not in expect and off not in reached and off in counts:
                expect[off] = 0
        state["blocks"][1] += len(expect)
        wrong = [f"+{o:#x}: {counts.get(o)} (expected {c})" for o, c in sorted(expect.items()) if counts.get(o) != c]
        state["blocks"][0] += len(expect) - len(wrong)
        assert not wrong, "; ".join(wrong) + f" ({armed_line(out)})"
        return f"{len(expect)} blocks exact: {n} entries split {quarter} (n % 4 == 0) : {n - quarter}"

    checks.run("block counts of lane_step match the program's known split", block_counts)

    def conservation():
        need_measure()
        out, _ = frame(frames, "measure-blocks")
        start, blocks = cfg(json_object(frame(frames, "inspect-lane_step")[0]))
        counts = {int(r["block"]) - start: r["metrics"]["count"] for r in json_object(out)["resources"] if "block" in r}
        preds = {o: [] for o in blocks}
        for o, succs in blocks.items():
            for _, t in succs:
                if t is not None:
                    preds[t].append(o)
        checked = 0
        for o, succs in blocks.items():
            inner = [t for _, t in succs if t is not None]
            # Out: a block runs as often as its successors together when it is their only predecessor.
            if inner and len(inner) == len(succs) and all(preds[t] == [o] for t in inner):
                assert counts.get(o) == sum(counts.get(t, 0) for t in inner), (
                    f"+{o:#x} ran {counts.get(o)} times, its successors {[counts.get(t) for t in inner]}"
                )
                checked += 1
            # In: as often as its predecessors together when it is the only successor of each (the
            # entry block also runs on every call from outside).
            if o and preds[o] and all(len(blocks[p]) == 1 for p in preds[o]):
                assert counts.get(o) == sum(counts.get(p, 0) for p in preds[o]), (
                    f"+{o:#x} ran {counts.get(o)} times, its predecessors {[counts.get(p) for p in preds[o]]}"
                )
                checked += 1
        assert checked, "no block of lane_step could be checked"
        return f"{checked} flow equations hold on lane_step"

    checks.run("block counts satisfy flow conservation", conservation)

    def timers():
        need_measure()
        k, ms = int(info["naps"]), int(info["nap-ms"])
        out, rc = frame(frames, "measure-timers")
        assert rc == 0, f"hotpathd measure failed (status {rc}): {out[-400:]}"
        rows = [r for r in json_object(out)["resources"] if named(r, "lane_nap") and "block" not in r]
        assert rows, "no lane_nap row"
        m = rows[0]["metrics"]
        assert m["count"] == k, f"count {m['count']}, expected {k} ({armed_line(out)})"
        # msleep(ms) sleeps at least ms; the thread is off the CPU for almost all of it.
        ok = m["wall_ns"] >= k * ms * 1_000_000 and m["vtime_ns"] < m["wall_ns"] / 4
        assert ok, (
            f"wall {m['wall_ns']} ns, vtime {m['vtime_ns']} ns for {k} sleeps of {ms} ms "
            "(emulated guest: not a performance figure)"
        )
        return f"{k} entries; wall covers the {k} x {ms} ms sleeps, vtime stays below a quarter of wall"

    checks.run("wall and virtualized timers differ as expected on a function that sleeps", timers)

    def agent_refuses(name, kernel_frame, pattern):
        """Refused, and the reason is the kernel's: its errno text as tracefs gave it, or the same rule
        the agent checked before asking the kernel (pattern)."""
        need_measure()
        out, rc = frame(frames, name)
        kernel = frame(frames, kernel_frame)[0]
        reason = kernel.split("|")[0].replace("refused:", "").strip()
        if rc == 0:
            try:
                d = json_object(out)
                how = (
                    f"measured with {json.dumps(d.get('mechanisms'))}, labels "
                    f"{json.dumps([r.get('labels') for r in d.get('resources', [])])}, without the kernel's reason"
                )
            except (AssertionError, ValueError):
                how = out[-300:]
            raise AssertionError(f"the agent accepted it: {how}")
        said = out.strip().split("\n")[-1][:240]
        assert (reason and reason in out) or re.search(pattern, out, re.I), (
            f"the agent's refusal does not carry the kernel's reason ({reason}): {said}"
        )
        return said

    checks.run(
        "the agent refuses a probe at vfs_read+1 with the kernel's reason (or its own equivalent: not a block start)",
        agent_refuses,
        "agent-refuses-unaligned",
        "kernel-refuses-unaligned",
        r"instruction boundary|EILSEQ|not the start of a basic block",
    )
    checks.run(
        f"the agent refuses a probe in a blacklisted function ({info.get('blacklisted', '?')}) "
        "with the kernel's reason",
        agent_refuses,
        "agent-refuses-blacklisted",
        "kernel-refuses-blacklisted",
        r"blacklist",
    )
    return finish(checks, a, state)


def new_state():
    """What the summary line reports, before any check has filled it in."""
    return {
        "functions": 0,
        "modules": 0,
        "entry": [0, 0],
        "blocks": [0, 0],
        "kmod": [0, 0],
        "cycles": 0,
        "installs": [0, 0],
        "install_cycles": 0,
        "read_cycles": 0,
        "call_sites": 0,
        "console": [0, 0],
        "wrong": 0,
        "why_not": [],
    }


def finish(checks, a, state):
    """The lane's summary lines; the exit status is 1 if a check failed. A check that could not run
    (NotRun) is counted as skipped, visible in the summary, and does not fail the lane by itself."""
    for why in state["why_not"]:
        print(
            f"not measured: exact entry and block counts, timers and the agent's refusals: {why}; they count 0/0 below"
        )
    # The time table is for reading, not a check: a run without results (the summary's own test) has
    # none, and one that cannot be made says why and leaves the summary lines as they are.
    if getattr(a, "results", None):
        try:
            with open(a.results, errors="replace") as f:
                text = f.read()
            console_text = ""
            if os.path.exists(os.path.join(a.run, "console.log")):
                with open(os.path.join(a.run, "console.log"), errors="replace") as f:
                    console_text = f.read()
            kmod_text = ""
            if os.path.exists(a.results_kmod):
                with open(a.results_kmod, errors="replace") as f:
                    kmod_text = f.read()
            print(time_table(text, console_text, parse_results(text)[1], a.lane_times, checks, kmod_text), flush=True)
        except (OSError, ValueError, KeyError, IndexError) as ex:
            print(f"lane time table unavailable: {ex}", flush=True)
    print(f"lane: {checks.passed} passed, {checks.failed} failed, {checks.not_run} skipped")
    e, b = state["entry"], state["blocks"]
    print(
        f"kernel-lane: kernel {a.release}, {state['functions']} functions in {state['modules']} modules, "
        f"entry counts exact {e[0]}/{e[1]}, block counts exact {b[0]}/{b[1]}, "
        f"hotpath.ko checks {state['kmod'][0]}/{state['kmod'][1]}, redirect cycles {state['cycles']}, "
        f"kernel installs {state['installs'][0]}/{state['installs'][1]}, install cycles {state['install_cycles']}, "
        f"read-path cycles {state['read_cycles']}, "
        f"call sites {state['call_sites']}, console installs {state['console'][0]}/{state['console'][1]}, "
        f"wrong results {state['wrong']}",
        flush=True,
    )
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
