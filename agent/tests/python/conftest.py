# SPDX-License-Identifier: Apache-2.0
"""Shared setup for the agent's stream tests: locate hotpathd and import the
Python messages generated from proto/hotpath/v1/agent.proto. The backend's
build generates them into backend/app/gen; when that is missing or older than
the proto, they are generated here into a temporary directory, so these tests
do not depend on build order."""

import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PROTO_DIR = ROOT / "proto"
PROTO = PROTO_DIR / "hotpath" / "v1" / "agent.proto"
BACKEND_GEN = ROOT / "backend" / "app" / "gen"
HOTPATHD = ROOT / "agent" / "build" / "hotpathd"


def _gen_dir() -> pathlib.Path:
    generated = BACKEND_GEN / "hotpath" / "v1" / "agent_pb2.py"
    if generated.exists() and generated.stat().st_mtime >= PROTO.stat().st_mtime:
        return BACKEND_GEN
    out = pathlib.Path(tempfile.mkdtemp(prefix="hotpath-gen-"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            "hotpath/v1/agent.proto",
        ],
        check=True,
    )
    for d in (out / "hotpath", out / "hotpath" / "v1"):
        (d / "__init__.py").touch()
    return out


sys.path.insert(0, str(_gen_dir()))
# The backend's own modules (its canonical catalog encoding, for one).
sys.path.insert(0, str(ROOT / "backend"))


@pytest.fixture(scope="session")
def hotpathd() -> pathlib.Path:
    if not HOTPATHD.exists():
        pytest.fail(f"{HOTPATHD} is missing: run `make -C agent` first")
    if os.geteuid() != 0:
        pytest.fail("the agent samples the whole system and reads kernel text: run as root")
    return HOTPATHD
