# SPDX-License-Identifier: Apache-2.0
"""One scripted agent (tests.scripted_agent, a fake agent) run as a program until it is stopped: a
stand-in for another machine of a fleet, for the browser tests (e2e/tests/fleet.spec.ts), where the
only real agent is this host's. Not an agent: it plays one over the real gRPC stream.

    .venv/bin/python -m tests.scripted_agent_cli --server HOST:PORT --enroll HOST:PORT --host-id ID \\
        [--hostname NAME] [--kernel-tag TAG | --kernel-build-id ID] [--kernel-release RELEASE] \\
        [--label KEY=VALUE ...] [--samples FUNCTION=COUNT ...] [--start UNIX_S] [--seconds N] [--hang-s S] \\
        [--compare within-noise|slower] [--stacks]

It talks on stdin and stdout, one JSON object a line:
- stdin, first line: {"token": ..., "ca_pem": ...}, an enrolment token an admin created (POST
  /api/v1/enrolment-tokens) and the CA it came with (kept off the command line, which `ps` shows);
- it enrols, connects (Hello with the labels; the kernel build id is tests.scripted_agent.build_id_of of
  the tag, so agents given one tag form one kernel-build group; or `--kernel-build-id`, with
  `--kernel-release`, to join a real host's group: e2e/kernel-lane/console.spec.ts's fakes report the lane
  guest's, while their catalog stays this fake's scripted one) and uploads the catalog pieces the backend
  lacks, then writes {"connected": HOST_ID, "build_id": ..., "kernel_release": ..., "process_digest": ...}
  (the catalog digest of the scripted process every scripted agent can attach, of one build: a plan is
  made on it by root digest and function index);
- commands from the backend are answered as tests.scripted_agent answers them: attach any pid, make a
  plan of the fixture, install only the approved code hash, revert, and compare with `--compare`'s
  scripted counts (within-noise: the guard keeps the plan; slower: +10% in the plan's code, the guard
  reverts it — a regression injected on this host); a kernel plan of another build than the one it reports
  is refused, as the real agent's kernel target refuses it; each install and revert it made is written as
  {"installed": PLAN_ID, "target": {...the plan's target...}, "root": ..., "code_sha256": ...} and
  {"reverted": PLAN_ID} (nothing is installed anywhere: it is a fake);
- stdin, the line `send` (once the caller has seen the host's catalog stored: samples of a piece not
  stored yet are dropped): it sends `--seconds` one-second metric batches from `--start` (a Unix time),
  each with COUNT samples in block 0 of every FUNCTION of `--samples` (the scripted vmlinux's functions,
  tests.scripted_agent.kernel_functions; with `--stacks`, as kernel call stacks of its scripted process,
  each function called from __x64_sys_read, so a flame graph has them too), waits until the backend
  acknowledges the last one (at most `--hang-s` seconds, a bound for a hang: a loaded machine stores
  slowly), and writes {"sent": BATCHES, "samples": TOTAL};
- end of stdin, SIGTERM or SIGINT: it ends its stream as an agent that exits cleanly does, and exits 0.
A failure is written to stderr and exits 1.
"""

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from tests.scripted_agent import (
    COMPARE_SLOWER,
    COMPARE_WITHIN_NOISE,
    HANG_S,
    ScriptedAgent,
    enroll,
    kernel_functions,
    wait_for_ack,
)

KERNEL_FUNCTIONS = 50  # as ScriptedAgent's default vmlinux


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.scripted_agent_cli", description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True, help="the backend's agent address (HOST:PORT)")
    p.add_argument("--enroll", required=True, help="the backend's enrolment address (HOST:PORT)")
    p.add_argument("--host-id", required=True)
    p.add_argument("--hostname", help="default: host-HOST_ID")
    p.add_argument("--kernel-tag", default="build-1", help="names the kernel build id: one tag, one group")
    p.add_argument("--kernel-build-id", help="report this kernel build id instead of the tag's (a real host's)")
    p.add_argument("--kernel-release", default="6.18.0-test", help="the kernel release Hello reports")
    p.add_argument("--label", type=_pair, action="append", default=[], help="a Hello label KEY=VALUE")
    p.add_argument("--samples", type=_pair, action="append", default=[], help="FUNCTION=COUNT per second")
    p.add_argument("--start", type=int, default=0, help="the first batch's start, Unix seconds")
    p.add_argument("--seconds", type=int, default=60, help="one-second batches to send")
    p.add_argument("--hang-s", type=float, default=HANG_S, help="longest wait for the last acknowledgement")
    p.add_argument(
        "--compare",
        choices=("within-noise", "slower"),
        default="within-noise",
        help="what ComparePlan reports: no change, or the plan's code slower (the guard reverts it)",
    )
    p.add_argument(
        "--stacks",
        action="store_true",
        help="send each batch's samples as call stacks (FUNCTION called from __x64_sys_read), for flame graphs",
    )
    args = p.parse_args(argv)
    index = {f.name: f.index for f in kernel_functions(KERNEL_FUNCTIONS)}
    samples: list[tuple[int, int]] = []
    for name, count in args.samples:
        if name not in index:
            p.error(f"--samples: no function {name!r} in the scripted vmlinux")
        if not count.isdigit() or int(count) <= 0:
            p.error(f"--samples: {name}={count}: the count must be a positive integer")
        samples.append((index[name], int(count)))
    args.samples = samples
    if args.samples and args.start <= 0:
        p.error("--samples needs --start")
    return args


def say(what: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(what) + "\n")
    sys.stdout.flush()


async def run(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)

    first = await stdin.readline()
    if not first:
        raise SystemExit("no enrolment token on stdin")
    secret = json.loads(first)
    creds = await enroll(args.enroll, secret["ca_pem"].encode(), args.host_id, secret["token"], args.hostname)
    agent = ScriptedAgent(
        args.server,
        creds,
        args.host_id,
        hostname=args.hostname,
        kernel_tag=args.kernel_tag,
        labels=dict(args.label),
        kernel_build_id=args.kernel_build_id,
        kernel_release=args.kernel_release,
    )

    def plan_event(event: str, plan_id: str, plan: dict[str, Any] | None) -> None:
        if plan is None:
            say({event: plan_id})
        else:
            say({event: plan_id, "target": plan["target"], "root": plan["root"], "code_sha256": plan["code"]["sha256"]})

    agent.on_plan = plan_event
    agent.compare_in_plan = list(COMPARE_SLOWER if args.compare == "slower" else COMPARE_WITHIN_NOISE)
    await agent.connect()
    hello = agent.hello()
    say(
        {
            "connected": agent.host_id,
            "build_id": agent.build_id,
            "kernel_release": hello.kernel_release,
            "process_digest": agent.process[3],
        }
    )

    # --stacks: each function's samples as one kernel stack, leaf first: the function, called from the
    # syscall entry (__x64_sys_read, index 2) unless it is that entry; in the scripted process's pid.
    entry = 2
    stacks = [
        ([("k", f, 0)] + ([("k", entry, 0)] if f != entry else []), 4242, "fake-server", 0, c) for f, c in args.samples
    ]

    async def lines() -> None:
        while line := await stdin.readline():
            if line.strip() != b"send":
                continue
            seq = 0
            for i in range(args.seconds):
                start_ns = (args.start + i) * 1_000_000_000
                if args.stacks:
                    seq = await agent.send_batch(agent.stack_batch(start_ns, stacks))
                else:
                    seq = await agent.send_metrics(start_ns, [("vmlinux", f, 0, c) for f, c in args.samples])
            if seq:
                await wait_for_ack(agent, seq, args.hang_s)
            say({"sent": args.seconds, "samples": args.seconds * sum(c for _f, c in args.samples)})
        stop.set()  # end of stdin: the caller has gone

    reader = asyncio.create_task(lines())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({reader, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if reader.done() and (failed := reader.exception()) is not None:
        raise failed
    reader.cancel()
    await agent.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        asyncio.run(run(args))
    except Exception as exc:  # noqa: BLE001 - any failure ends the program with its reason
        sys.stderr.write(f"scripted agent {args.host_id}: {type(exc).__name__}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
