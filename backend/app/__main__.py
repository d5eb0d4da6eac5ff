# SPDX-License-Identifier: Apache-2.0
"""Start the backend: `python -m app`.

Prepares the data folder (embedded Postgres unless DATABASE_URL is set, secrets and the certificate
authority created once with mode 0600, an admin user on first start), runs the migrations, then
serves HTTP (uvicorn) and the agents' gRPC server in one event loop until SIGTERM or SIGINT, and
stops cleanly: agent streams closed, servers stopped, and the embedded Postgres stopped if this
process started it (a watchdog stops it too if this process is killed).
"""

import asyncio
import logging
import signal
import sys

from app.core.config import Settings, get_settings
from app.server import Prepared, build_runtime, prepare, serve


def main() -> int:
    settings = get_settings()
    logging.basicConfig(
        level=settings.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # pgserver narrates every pg_ctl call at INFO; keep only its warnings.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    log = logging.getLogger("hotpath")
    try:
        prepared = prepare(settings)
    except Exception as exc:  # noqa: BLE001 - report the cause in one line, not a traceback
        log.error("start-up failed: %s", str(exc) or repr(exc))
        logging.getLogger("hotpath").debug("start-up failure", exc_info=True)
        return 1
    try:
        asyncio.run(_run(settings, prepared))
    finally:
        prepared.close()
    log.info("stopped")
    return 0


async def _run(settings: Settings, prepared: Prepared) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runtime = build_runtime(settings, prepared)
    await serve(runtime, stop, prepared.embedded)


if __name__ == "__main__":
    raise SystemExit(main())
