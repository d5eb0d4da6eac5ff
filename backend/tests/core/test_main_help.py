# SPDX-License-Identifier: Apache-2.0
"""`python -m app --help` answers and starts nothing; an argument it does not know is refused (the settings
come from the environment), rather than the backend starting with it ignored."""

import subprocess
import sys
from pathlib import Path

BACKEND = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOTPATH_DATA_DIR": str(tmp_path / "data")}
    return subprocess.run(
        [sys.executable, "-m", "app", *args], cwd=BACKEND, env=env, capture_output=True, text=True, timeout=120
    )


def test_help_names_the_settings_and_starts_nothing(tmp_path: Path) -> None:
    r = _run(tmp_path, "--help")
    assert r.returncode == 0, r.stderr
    for name in ("HOTPATH_DATA_DIR", "DATABASE_URL", "HOTPATH_DB_NODES", "HOTPATH_HTTP_PORT", "nodes move"):
        assert name in r.stdout, name
    assert not (tmp_path / "data").exists(), "--help made the data folder: it started the backend"


def test_an_unknown_argument_is_refused(tmp_path: Path) -> None:
    r = _run(tmp_path, "--port", "9")
    assert r.returncode == 2 and "unrecognized arguments: --port 9" in r.stderr, r.stderr
    assert not (tmp_path / "data").exists()


def test_nodes_move_help_says_how_to_resume(tmp_path: Path) -> None:
    r = _run(tmp_path, "nodes", "move", "--help")
    assert r.returncode == 0, r.stderr
    assert "--dry-run" in r.stdout and "run it again" in r.stdout.lower(), r.stdout
