# SPDX-License-Identifier: Apache-2.0
"""`make simulate` (scripts/simulate_hosts.py) run for real against a backend process of its own (as
`make run` starts one, on free ports, with its own data folder): its clear errors without a backend or
without the admin password file; then 4 simulated hosts, which the fleet groups list with their labels in
two kernel-build groups, whose group's hot code and a host's flame graph have samples; then Ctrl-C
(SIGINT), after which every one of them is offline and the program has exited 0."""

import asyncio
import signal
import sys
from pathlib import Path

from tests.backend_process import Backend, _free_port
from tests.scripted_agent import wait_until

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "simulate_hosts.py"
HANG_S = 240.0  # a bound for a hang (four agents connecting on a loaded machine), not a speed check


async def _run(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_make_simulate_hosts_in_the_fleet_with_labels_and_hot_code_then_offline_on_ctrl_c(
    data_folder: Path, tmp_path: Path
) -> None:
    # No backend answers: said so, with what to do.
    rc, out = await _run("--http-port", str(_free_port()), "--data-dir", str(tmp_path))
    assert rc == 2 and "no Hotpath backend answers" in out and "make run" in out, out

    backend = Backend(data_folder)
    await backend.start()
    ports = ["--http-port", str(backend.http), "--grpc-port", str(backend.grpc)]
    # A backend answers, but the data folder named has no admin password file.
    rc, out = await _run(*ports, "--data-dir", str(tmp_path))
    assert rc == 2 and f"no admin password file at {tmp_path / 'admin-password'}" in out, out

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        *ports,
        "--data-dir",
        str(data_folder),
        "--hosts",
        "4",
        "--slower",
        "1",
        "--minutes",
        "2",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    said: list[str] = []
    try:
        assert proc.stdout is not None

        async def ready() -> None:
            assert proc.stdout is not None
            while line := (await proc.stdout.readline()).decode():
                said.append(line)
                if line.startswith("[simulate] READY"):
                    return
            raise AssertionError("simulate ended before READY:\n" + "".join(said))

        await asyncio.wait_for(ready(), HANG_S)
        text = "".join(said)
        assert "Fleet      http://127.0.0.1:" in text and "Roll out to the fleet" in text, text
        ids = ["sim-web-01", "sim-db-02", "sim-cache-03", "sim-web-04"]

        async with await backend.admin() as c:
            groups = (await c.get("/api/v1/fleet/groups?limit=500")).json()["items"]
            sim = [g for g in groups if any(h["id"].startswith("sim-") for h in g["hosts"])]
            assert sorted(g["kernel_release"] for g in sim) == ["6.1.0-sim", "6.6.0-sim"], groups
            hosts = {h["id"]: h for g in sim for h in g["hosts"]}
            assert sorted(hosts) == sorted(ids)
            assert all(h["online"] for h in hosts.values())
            assert hosts["sim-db-02"]["labels"] == {
                "role": "db",
                "region": "us-east",
                "rack": "r1",
                "sim-compare": "within-noise",
            }
            assert hosts["sim-web-04"]["labels"]["sim-compare"] == "slower"  # --slower 1: the last host
            a = next(g for g in sim if "sim-web-01" in {h["id"] for h in g["hosts"]})
            assert {h["id"] for h in a["hosts"]} == {"sim-web-01", "sim-cache-03"}
            # The token's note says what the host is.
            tokens = (await c.get("/api/v1/enrolment-tokens")).json()
            assert any("simulated host of make simulate" in (t.get("note") or "") for t in tokens), tokens

            # Hot code reads the rollups, which cover completed minutes: two minutes of batches ending now
            # hold at least one. sim-web-01 sends vfs_read 40+1 a second, sim-cache-03 2+3.
            hot: dict = {}

            async def hot_code() -> bool:
                nonlocal hot
                hot = (await c.get(f"/api/v1/fleet/groups/{a['id']}/hot-code?window_s=3600")).json()
                return any(i["name"] == "vfs_read" and i["samples"] > 0 for i in hot.get("items", []))

            await wait_until(hot_code, HANG_S)
            vfs = next(i for i in hot["items"] if i["name"] == "vfs_read")
            assert vfs["samples"] % (41 + 5) == 0, hot  # whole seconds of both hosts
            # The samples came as call stacks: the host's flame graph has them.
            flame = (await c.get("/api/v1/hosts/sim-web-01/flamegraph?window_s=3600")).json()
            assert flame["samples"] > 0 and flame["undefined_samples"] == 0, flame
            names = {f.get("name") for f in flame["frames"]}
            assert {"vfs_read", "__x64_sys_read"} <= names, flame["frames"]

        # Ctrl-C: the simulated hosts end their streams; the program says so and exits 0.
        proc.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(proc.communicate(), 60)
        out = "".join(said) + rest.decode()
        assert proc.returncode == 0, out
        assert "stopped: they show offline" in out, out
        async with await backend.admin() as c:
            for host in ids:
                h = (await c.get(f"/api/v1/hosts/{host}")).json()
                assert h["online"] is False, h
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
