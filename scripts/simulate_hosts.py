#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Simulated hosts beside a running `make run`: N scripted agents (the backend tests' fake agent,
backend/tests/scripted_agent_cli.py, run as programs), so the fleet page, a group's hot code, flame graphs
and staged roll-outs have more than this one machine to show. Not real machines and not real agents: each
plays an agent over the real gRPC stream (enrolled with its own one-time token, mutual TLS), with a small
scripted kernel (50 functions) and one scripted process, and sends fixed sample counts.

    make simulate                                   # 12 hosts, 1 of them --slower
    make simulate ARGS="--hosts 4 --slower 0"       # or: scripts/simulate_hosts.py --hosts 4 --slower 0

Runs in the foreground; Ctrl-C ends every agent's stream as an agent that exits cleanly does (the hosts
show offline, their data stays; delete them in Admin, or run it again: the same names come back online).
"""

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BACKEND = ROOT / "backend"
PYTHON = BACKEND / ".venv" / "bin" / "python"
NOTE = "simulated host of make simulate (the backend tests' scripted agent)"
# Kernel builds: one per group (the scripted agent's --kernel-tag names the build id), with the release
# each reports. Fake releases, named so.
GROUPS = [("sim-a", "6.1.0-sim"), ("sim-b", "6.6.0-sim"), ("sim-c", "6.12.0-sim")]
ROLES = ["web", "db", "cache"]
REGIONS = ["eu-west", "us-east"]
# Samples per second by scripted vmlinux function (tests.scripted_agent.kernel_functions), per role: each
# role has its own hot code, so a group's hot-code table shows functions hot on some hosts only.
PROFILES = {
    "web": {"vfs_read": 40, "ksys_read": 12, "rw_verify_area": 6, "fn_00010": 3},
    "db": {"do_sys_open": 30, "vfs_read": 10, "vfs_read_iter": 8, "fn_00020": 4},
    "cache": {"ksys_read": 25, "__x64_sys_read": 15, "fn_00030": 5, "vfs_read": 2},
}
PID_BASE = 4000  # the scripted process each host attaches: pid PID_BASE + n, target pPID-1000
STOP = threading.Event()  # Ctrl-C or SIGTERM
HANG_S = 240.0  # a bound for a hang, not a speed check (a loaded 2-core machine took 63 s to connect one)

EPILOG = """\
what it needs:
  a backend started by `make run` on this machine (scripts/run.sh): its data folder (HOTPATH_DATA_DIR,
  default ./var) for the admin password (DATA/admin-password) and the CA, and its ports
  (HOTPATH_HTTP_PORT 8080, HOTPATH_GRPC_PORT 50051, HOTPATH_HTTPS=1 for HTTPS) -- the same variables,
  or the options below. Nothing is installed or changed on this machine; only the backend's database
  gets the hosts, their catalogs and samples.

what it starts:
  --hosts scripted agents named sim-ROLE-NN (host id = hostname), each enrolled with a one-time token
  whose note says "simulated host of make simulate", in 2 kernel-build groups (3 from 6 hosts on), with
  the labels role (web/db/cache), region, rack and sim-compare; each sends --minutes of one-second sample
  batches ending now (as call stacks, so flame graphs have them) and attaches its scripted process
  (sim-web-01: pid 4001, target p4001-1000; one program build on every host, so one plan fits all).
  An hour of 12 hosts took 80 s to send on a busy 2-core machine; afterwards each agent is idle
  until the backend sends it a command (attach, plan, install, compare, revert: answered as scripted).

--slower K:
  the last K hosts report the plan's code 10% slower in every before/after comparison (label
  sim-compare=slower, the others sim-compare=within-noise): a roll-out that reaches one of them has its
  guard revert the plan there, and the roll-out halts with the figures as the reason.

afterwards:
  the hosts stay in the database, offline, with their samples (kept for the sample retention, 24 h by
  default); running it again brings the same names back online (and adds another --minutes of samples);
  delete them in the console (Admin) or DELETE /api/v1/hosts/ID.
"""


def die(msg: str) -> None:
    sys.stderr.write(f"[simulate] error: {msg}\n")
    sys.exit(2)


def say(msg: str) -> None:
    print(f"[simulate] {msg}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(
        prog="scripts/simulate_hosts.py",
        description=(__doc__ or "").split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--hosts", type=int, default=12, help="simulated hosts to start (default 12)")
    p.add_argument(
        "--slower", type=int, default=1, help="of them, hosts whose comparisons report a plan slower (default 1)"
    )
    p.add_argument("--minutes", type=int, default=60, help="minutes of samples each host sends, ending now (60)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(env.get("HOTPATH_DATA_DIR", ROOT / "var")),
        help="the backend's data folder (HOTPATH_DATA_DIR, default ./var)",
    )
    p.add_argument("--http-port", type=int, default=int(env.get("HOTPATH_HTTP_PORT", "8080")), help="REST port (8080)")
    p.add_argument(
        "--grpc-port", type=int, default=int(env.get("HOTPATH_GRPC_PORT", "50051")), help="agent port (50051)"
    )
    p.add_argument(
        "--https",
        action="store_true",
        default=env.get("HOTPATH_HTTPS", "0") == "1",
        help="the backend serves HTTPS (HOTPATH_HTTPS=1)",
    )
    p.add_argument("--prefix", default="sim", help="host names start so (default sim)")
    args = p.parse_args(argv)
    if not 1 <= args.hosts <= 200:
        p.error("--hosts: 1 to 200")
    if not 0 <= args.slower <= args.hosts:
        p.error("--slower: 0 to --hosts")
    if not 1 <= args.minutes <= 24 * 60:
        p.error("--minutes: 1 to 1440")
    return args


class Api:
    """The backend's REST API as the admin (stdlib only: this runs before and beside any venv)."""

    def __init__(self, url: str, ca: Path | None) -> None:
        self.url = url
        self.ctx = ssl.create_default_context(cafile=str(ca)) if ca else None
        self.token = ""

    def call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> Any:
        req = urllib.request.Request(self.url + path, method=method)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            req.add_header("content-type", "application/json")
        if self.token:
            req.add_header("authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, data, timeout=60, context=self.ctx) as r:  # noqa: S310 - our backend
                status, text = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        if status not in ok:
            raise RuntimeError(f"{method} {path}: {status} {text[:300].decode(errors='replace')}")
        return json.loads(text) if text else None


class Agent:
    """One scripted agent program and the JSON lines it wrote."""

    def __init__(self, spec: dict[str, Any], proc: subprocess.Popen[str]) -> None:
        self.spec, self.proc = spec, proc
        self.said: list[dict[str, Any]] = []
        self.err = ""
        threading.Thread(target=self._out, daemon=True).start()
        threading.Thread(target=self._err, daemon=True).start()

    def _out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.said.append(json.loads(line))
            except ValueError:
                self.err += line

    def _err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err += line

    def line(self, key: str) -> dict[str, Any] | None:
        return next((x for x in self.said if key in x), None)

    def tell(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()


def fleet(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The simulated hosts: name, kernel group, labels, samples, compare."""
    groups = GROUPS[: 1 if args.hosts < 2 else 2 if args.hosts < 6 else 3]
    out = []
    for i in range(args.hosts):
        n = i + 1
        role = ROLES[i % len(ROLES)]
        tag, release = groups[(i // len(ROLES)) % len(groups)] if args.hosts >= 6 else groups[i % len(groups)]
        slower = i >= args.hosts - args.slower
        # a little per host: the same role's hosts differ, so shares are not all alike
        samples = {f: c + (n % 4) for f, c in PROFILES[role].items()}
        out.append(
            {
                "id": f"{args.prefix}-{role}-{n:02d}",
                "tag": tag,
                "release": release,
                "pid": PID_BASE + n,
                "labels": {
                    "role": role,
                    "region": REGIONS[i % len(REGIONS)],
                    "rack": f"r{i // 4 + 1}",
                    "sim-compare": "slower" if slower else "within-noise",
                },
                "samples": samples,
                "compare": "slower" if slower else "within-noise",
            }
        )
    return out


def wait_for(what: str, agents: list[Agent], done: Any, timeout: float = HANG_S) -> None:
    """Wait until done(agent) holds for every agent; fail naming the ones that did not get there."""
    end = time.monotonic() + timeout
    while True:
        if STOP.is_set():
            raise RuntimeError(f"stopped while waiting for {what}")
        left = [a for a in agents if not done(a)]
        if not left:
            return
        gone = [a for a in left if a.proc.poll() is not None]
        if gone:
            a = gone[0]
            raise RuntimeError(f"{a.spec['id']} exited (status {a.proc.returncode}) before {what}: {a.err.strip()}")
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s for {', '.join(a.spec['id'] for a in left)}")
        time.sleep(0.5)


def start_agent(api: Api, args: argparse.Namespace, spec: dict[str, Any], start: int) -> Agent:
    made = api.call("POST", "/api/v1/enrolment-tokens", {"note": NOTE, "hours": 1, "host_id": spec["id"]}, ok=(201,))
    cmd = [str(PYTHON), "-m", "tests.scripted_agent_cli", "--server", f"127.0.0.1:{args.grpc_port}"]
    cmd += ["--enroll", f"127.0.0.1:{made['enroll_port']}", "--host-id", spec["id"], "--hostname", spec["id"]]
    cmd += ["--kernel-tag", spec["tag"], "--kernel-release", spec["release"], "--hang-s", str(HANG_S)]
    cmd += ["--start", str(start), "--seconds", str(args.minutes * 60), "--stacks", "--compare", spec["compare"]]
    for k, v in spec["labels"].items():
        cmd += ["--label", f"{k}={v}"]
    for f, c in spec["samples"].items():
        cmd += ["--samples", f"{f}={c}"]
    proc = subprocess.Popen(
        cmd, cwd=BACKEND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    a = Agent(spec, proc)
    a.tell(json.dumps({"token": made["token"], "ca_pem": made["ca_pem"]}))
    return a


def stop_agents(agents: list[Agent]) -> None:
    """End every agent's stream cleanly (SIGTERM), SIGKILL after 10 s."""
    for a in agents:
        if a.proc.poll() is None:
            a.proc.send_signal(signal.SIGTERM)
    end = time.monotonic() + 10
    for a in agents:
        try:
            a.proc.wait(max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            a.proc.kill()
            a.proc.wait()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not PYTHON.exists() or not (BACKEND / "app" / "gen" / "hotpath").is_dir():
        die(f"the backend is not built ({PYTHON}, backend/app/gen): run `make run` first (it builds)")
    data = args.data_dir.resolve()
    password_file = data / "admin-password"
    scheme = "https" if args.https else "http"
    url = f"{scheme}://127.0.0.1:{args.http_port}"
    ca = data / "tls" / "ca.pem"
    api = Api(url, ca if args.https else None)
    try:
        api.call("GET", "/api/v1/health")
    except (urllib.error.URLError, OSError, RuntimeError) as e:
        reason = getattr(e, "reason", e)
        die(
            f"no Hotpath backend answers at {url} ({reason}): start it with `make run` first, "
            "or name its port (--http-port, HOTPATH_HTTP_PORT; --https for HOTPATH_HTTPS=1)"
        )
    if not password_file.is_file():
        die(
            f"no admin password file at {password_file}: is {data} the data folder of the `make run` that answers "
            f"at {url}? Name it with --data-dir or HOTPATH_DATA_DIR"
        )
    password = password_file.read_text().strip()
    try:
        api.token = api.call("POST", "/api/v1/auth/login", {"username": "admin", "password": password})["access_token"]
    except RuntimeError as e:
        die(f"signing in as admin with {password_file} failed ({e}): is it this backend's data folder?")

    specs = fleet(args)
    now = int(time.time())
    start = now - args.minutes * 60
    agents: list[Agent] = []

    def on_signal(_sig: int, _frame: Any) -> None:
        STOP.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        say(f"starting {len(specs)} simulated hosts (scripted agents) against {url}, agents at :{args.grpc_port}")
        for spec in specs:
            agents.append(start_agent(api, args, spec, start))
        wait_for("connecting", agents, lambda a: a.line("connected") is not None)
        say("all connected; waiting for their catalogs to be stored")

        def catalog(a: Agent) -> bool:
            h = api.call("GET", f"/api/v1/hosts/{a.spec['id']}")
            return bool(h["online"] and h["catalog_complete"])

        wait_for("the catalog stored", agents, catalog)
        for a in agents:
            api.call("POST", f"/api/v1/hosts/{a.spec['id']}/targets", {"pid": a.spec["pid"]}, ok=(202,))

        def attached(a: Agent) -> bool:
            mods = api.call("GET", f"/api/v1/hosts/{a.spec['id']}/modules?target=p{a.spec['pid']}-1000")
            return isinstance(mods, list) and bool(mods) and mods[0].get("complete") is True

        wait_for("its scripted process attached", agents, attached)
        say(f"sending {args.minutes} minutes of one-second sample batches per host (ending now)")
        for a in agents:
            a.tell("send")
        wait_for("its samples acknowledged", agents, lambda a: a.line("sent") is not None, HANG_S + args.minutes * 30)
        report(args, url, data, agents)
        say("READY")  # the tests wait for this line
        while not STOP.is_set():
            gone = [a for a in agents if a.proc.poll() is not None]
            if gone:
                a = gone[0]
                say(f"{a.spec['id']} exited (status {a.proc.returncode}): {a.err.strip()}; stopping the others")
                stop_agents(agents)
                return 1
            STOP.wait(1)
        say(f"stopping {len(agents)} simulated hosts (each ends its stream as an agent that exits cleanly)")
        stop_agents(agents)
        say("stopped: they show offline; their data stays (delete them in the console's Admin page)")
        return 0
    except (RuntimeError, OSError) as e:
        stop_agents(agents)
        sys.stderr.write(f"[simulate] error: {e}\n")
        return 1


def report(args: argparse.Namespace, url: str, data: Path, agents: list[Agent]) -> None:
    """What was started, and what to click next."""
    say("simulated hosts (not real machines: scripted agents, fixed sample counts):")
    for a in agents:
        s = a.spec
        labels = " ".join(f"{k}={v}" for k, v in sorted(s["labels"].items()))
        print(f"    {s['id']:<16} {s['release']:<11} target p{s['pid']}-1000  {labels}")
    first = agents[0].spec
    ok_hosts = [a.spec["id"] for a in agents if a.spec["compare"] == "within-noise"]
    slow = [a.spec["id"] for a in agents if a.spec["compare"] == "slower"]
    print(
        f"""
Next, in the console ({url}/, sign in as admin with the password in {data / "admin-password"}):
  Fleet      {url}/  the hosts grouped by kernel build (this machine's own agent in its own group);
             filter by label, e.g. role=db; a group's "Hot code" link: its hottest functions over the
             last hour and the share of hosts where each is hot.
  Flame      {url}/hosts/{first["id"]}  -> Flame graph, last hour (fake-server's kernel stacks).
  Roll-out   (a process plan on the scripted process every simulated host runs, as e2e/tests/rollout.spec.ts):
    1. Admin -> Users: add a user with the role approver (a plan needs a second person's approval).
    2. Open {url}/hosts/{first["id"]}/measure?target=p{first["pid"]}-1000 -> "Optimize hot set"
       (or open one of its functions -> "Optimize..."); on the plan's page, when ready, "Request approval".
    3. Sign in as the approver, open the plan, "Approve".
    4. On the approved plan's page, "Roll out to the fleet": only hosts with labels
       region=us-east sim-compare=within-noise (not {first["id"]}: a roll-out that includes the plan's
       own host installs the approved plan itself, and its revert would end the plan), wave sizes 1, 2,
       short windows (before/after 1 s, guard pairs 3, guard window 0.2 s) -> the canary, then the
       next waves, "completed". Then "Revert everywhere"."""
    )
    if slow:
        print(
            f"""    5. Again with no label filter, wave sizes 1, 4 (hosts in order of name, the plan's own first):
       when it reaches {", ".join(slow)} (--slower), that host's guard finds the plan slower and reverts
       it there, the roll-out halts with the figures as the reason, and the later waves are not
       started. "Revert everywhere" ends it."""
        )
    print(
        f"""  Over REST: POST {url}/api/v1/rollouts {{"host_id": "{first["id"]}", "plan_id": "...",
             "labels": {{"region": "us-east", "sim-compare": "within-noise"}}, "wave_sizes": [1, 2],
             "window_s": 1, "guard_pairs": 3, "guard_window_seconds": 0.2}}
             ({len(ok_hosts)} hosts report within noise{", " + str(len(slow)) + " slower" if slow else ""}).
Ctrl-C stops the simulated hosts.
""",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
