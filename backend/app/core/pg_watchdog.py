# SPDX-License-Identifier: Apache-2.0
"""Stop the embedded Postgres when the backend that started it dies: `python -m app.core.pg_watchdog
BACKEND_PID PGDATA [SYSTEM_USER]`.

The backend starts this process in a session of its own, so a signal to the backend's process group
does not reach it. It polls its parent; when the parent is gone (even after SIGKILL, which no handler
sees) it stops the Postgres of PGDATA and exits. A clean backend stop terminates it first.
"""

import os
import sys
import time
from pathlib import Path

from app.core.postmaster import stop_postgres


def main(argv: list[str]) -> int:
    backend, pgdata = int(argv[1]), Path(argv[2])
    user = argv[3] if len(argv) > 3 and argv[3] else None
    while os.getppid() == backend:
        time.sleep(0.5)
    stop_postgres(pgdata, user)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
