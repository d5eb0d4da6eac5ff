# SPDX-License-Identifier: Apache-2.0
"""Start-up steps run by the racing processes of test_shared_data (spawned: this module imports only
what the steps need, so the processes reach the barrier quickly)."""

import uuid
from pathlib import Path
from typing import Any

from app.core import pki
from app.core.security import read_or_create_secret


def race_pki(barrier: Any, folder: str, name: str, out: Any) -> None:
    barrier.wait()
    got = pki.load_or_create(Path(folder), name)
    out.put((name, got.ca_pem, got.server_cert_pem))


def race_secret(barrier: Any, path: str, out: Any) -> None:
    barrier.wait()
    out.put(read_or_create_secret(Path(path), lambda: uuid.uuid4().hex))
