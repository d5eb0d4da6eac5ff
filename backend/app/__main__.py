# SPDX-License-Identifier: Apache-2.0
"""Start the backend: `python -m app`; or move hosts between database nodes: `python -m app nodes move`
(see its --help).

Prepares the data folder (embedded Postgres unless DATABASE_URL is set, secrets and the certificate
authority created once with mode 0600, an admin user on first start), runs the migrations, then
serves HTTP (uvicorn) and the agents' gRPC server in one event loop until SIGTERM or SIGINT, and
stops cleanly: agent streams closed, servers stopped, and the embedded Postgres stopped if this
process started it (a watchdog stops it too if this process is killed).
"""

import argparse
import asyncio
import logging
import signal
import sys

from app.core.config import Settings, get_settings
from app.server import Prepared, build_runtime, prepare, serve
from app.storage import node_moves, nodes

MOVE_HELP = """\
Move hosts between the database nodes after HOTPATH_DB_NODES changed (a node added, removed or its place in
the list changed). A host's series live on the database the hash of its id modulo the number of databases
picks, so most hosts change database with the count: this copies each moving host's rows of every spread
table (raw rows, rollups, call stacks, delivery marks) from its old database to its new one, deletes them from
the old one, then builds the coordinator's spread tables and foreign servers for the new list.

Run it with the environment the backend will start with: DATABASE_URL (the coordinator) and the NEW
HOTPATH_DB_NODES. The old layout is read from the coordinator: its number of databases from its spread
tables, the old nodes' URLs from its foreign servers hotpath_node<N> and their user mappings (what the backend
last set up); give them yourself with --from-nodes if those no longer reach them. Every old and new database
must be reachable: a removed node's hosts are copied away from it. A new node is an empty database (the
command runs the migrations on it). A database keeps its hosts wherever it is in the list: a reordered list
moves only the hosts whose database changes. Name each database the same way (host, port, database) in both
lists; two spellings of one database are refused.

Stop every backend replica first: the backends hold a lock on the coordinator that this command takes, so it
refuses while one runs, and a backend refuses to start while a move runs or one was interrupted.

Crash-safe: each host's progress is journalled on the coordinator (tables hotpath_node_move and
hotpath_node_moves). If the command stops (a crash, a node down, Ctrl-C), run it again with the same
HOTPATH_DB_NODES (and --from-nodes, if given): it goes on where it stopped, without duplicating rows. The
journal is dropped when the move ends.

--dry-run changes nothing: it prints how many hosts and rows would move from which database to which.
"""


SERVE_HELP = """\
Serve Hotpath's backend: the console and its REST API over HTTP, the agents' gRPC stream and enrolment.

With no DATABASE_URL it keeps its data in an embedded Postgres under HOTPATH_DATA_DIR (created on first
start, with the secrets, the installation's certificate authority and an admin user whose password is
written to HOTPATH_DATA_DIR/admin-password). Every setting comes from the environment (docs/deployment.md);
the main ones, with their defaults:

{settings}
Commands:
  nodes move   move hosts between database nodes after HOTPATH_DB_NODES changed (python -m app nodes move --help)
"""

# The settings a newcomer sets first (the rest: backend/app/core/config.py, documented there).
MAIN_SETTINGS = (
    "data_dir",
    "http_host",
    "http_port",
    "grpc_port",
    "enroll_port",
    "database_url",
    "db_nodes",
    "https",
    "sample_retention_hours",
    "log_level",
)


def _settings_help() -> str:
    lines = []
    for name in MAIN_SETTINGS:
        field = Settings.model_fields[name]
        env = "DATABASE_URL" if name == "database_url" else f"HOTPATH_{name.upper()}"
        default = field.default if field.default not in (None, "") else "(unset)"
        lines.append(f"  {env:<32} {default}")
    return "\n".join(lines) + "\n"


def main() -> int:
    if sys.argv[1:2] == ["nodes"]:
        return nodes_command(sys.argv[2:])
    parser = argparse.ArgumentParser(
        prog="python -m app",
        description=SERVE_HELP.format(settings=_settings_help()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args()  # --help, or an error for any argument: the settings come from the environment
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


def nodes_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m app nodes", description="Database nodes (HOTPATH_DB_NODES).")
    sub = parser.add_subparsers(dest="command", required=True)
    move = sub.add_parser(
        "move",
        help="move hosts between the database nodes after HOTPATH_DB_NODES changed",
        description=MOVE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    move.add_argument("--dry-run", action="store_true", help="print how many hosts and rows would move; change nothing")
    move.add_argument(
        "--from-nodes",
        metavar="URLS",
        help="the old node URLs, in their old order (default: read from the coordinator's foreign servers)",
    )
    args = parser.parse_args(argv)
    settings = get_settings()
    logging.basicConfig(level="INFO", stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not settings.database_url:
        print("DATABASE_URL is needed: the coordinator (the embedded Postgres has no nodes)", file=sys.stderr)
        return 2
    try:
        node_moves.move(
            settings.database_url,
            nodes.parse(settings.db_nodes),
            nodes.parse(args.from_nodes) if args.from_nodes is not None else None,
            dry_run=args.dry_run,
            say=print,
        )
    except node_moves.MoveRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - one line; the journal keeps the progress
        print(
            f"the move stopped: {str(exc) or repr(exc)}\nrun the same command again to go on where it stopped",
            file=sys.stderr,
        )
        logging.getLogger("hotpath").debug("move failure", exc_info=True)
        return 1
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
