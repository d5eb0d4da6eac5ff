# SPDX-License-Identifier: Apache-2.0
"""Several database nodes (HOTPATH_DB_NODES): the series spread by host over the coordinator (the backend's
own database) and the nodes, with Postgres' declarative hash partitioning and postgres_fdw foreign partitions
(docs/decisions.md, "Several database nodes").

Each node is a whole Hotpath database (the same migrations run against it) that holds the series of the hosts
placed on it; the hosts, catalogs, users and everything else stay on the coordinator only. A host's node is
the remainder of the hash of its id, modulus the number of databases (coordinator first, then the nodes in the
order configured): Postgres' own hash partitioning decides it (`place`), not this module.

On the coordinator, schema `hotpath_nodes` holds, for each spread table, a parent of the same name
partitioned by hash of host_id: remainder 0 is the coordinator's own table (still partitioned by time as
without nodes), remainder i a foreign table on node i's table (partitioned by time on that node). A reader that
wants every node's rows puts that schema first in its search path (`read_across`; a host's page puts its own
node's schema `hotpath_n<i>` of foreign tables first instead, so no other node is asked); every writer, the rollup
task and the partition upkeep keep the default search path and write the local tables, each node's on the node
(ON CONFLICT works there; a parent with a foreign partition has no unique index). So a batch's transaction
writes one database only, its host's (app.storage.ingest): its rows and its delivery mark commit together or
not at all, and a resend after an ambiguous commit is recognised by the mark on that node. A read of many
hosts' rows (the fleet's hot code) sends each node its own part over the node's engine instead, at once
(`Nodes.each`, `Nodes.beside`): one statement per node rather than a remote query per host through the
foreign partitions, and a node that hangs is named after READ_TIMEOUT_S rather than holding the request.

Node DSNs carry passwords: they go into the coordinator's user mappings (readable by superusers and the
mapping's owner only) and never into a log line (`label` names a node without its credentials).
"""

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine

from app.core.config import normalise_database_url
from app.core.db import alembic_config, describe_error, upgrade_database
from app.storage.series.layout import RAW_TABLES, ROLLUP_TABLES

log = logging.getLogger("hotpath.nodes")

SCHEMA = "hotpath_nodes"
SERVER = "hotpath_node"  # node i's foreign server is hotpath_node<i>
NODE_SCHEMA = "hotpath_n"  # node i's own foreign tables, for a host's reads (`read_across` with its host): hotpath_n<i>
# The tables spread by host: everything a batch's transaction writes (rows, late rollup additions, stack
# definitions, delivery marks), so that transaction needs its host's node only.
SPREAD_TABLES = (*RAW_TABLES, *ROLLUP_TABLES, "stack_defs", "stack_blocks", "delivery_marks")
# Tables only the coordinator holds rows of: a node's foreign keys to them cannot hold there.
COORDINATOR_ONLY = ("hosts", "measurements")
# postgres_fdw's transfer sizes (measured in docs/decisions.md: fetch_size 10,000 halved a fleet read's
# transfer, batch_size 100 an insert's), and how long a node may take to answer a connection.
CONNECT_TIMEOUT_S = 10
SERVER_OPTIONS = {"fetch_size": "10000", "batch_size": "100", "connect_timeout": str(CONNECT_TIMEOUT_S)}
# How long a read's part on one node may take (`Nodes.each`) before the read names the node unavailable: a
# node that hangs on an established connection (stopped, or a partition that drops packets after the
# connection was made) would otherwise hold the request for as long as the kernel keeps the connection.
# Above the connect timeout, so a node slow to accept a connection is named by its own error, and some
# four times the slowest whole fleet view measured on a loaded machine (3.75 s, session 24's bench/fleet at
# 1,000 hosts), so a node that is only slow still answers.
READ_TIMEOUT_S = 15.0
LOCK_KEY = 0x68706E64  # "hpnd": setting the nodes up
_MODULUS = re.compile(r"modulus (\d+), remainder (\d+)", re.IGNORECASE)
T = TypeVar("T")
L = TypeVar("L")


class NodeUnavailable(Exception):
    """A read needs a database node that does not answer."""

    def __init__(self, labels: list[str]) -> None:
        self.labels = labels
        super().__init__(
            f"database node(s) unreachable: {', '.join(labels)}; this view needs every node's hosts, so it is "
            "not shown partially"
        )


def parse(value: str) -> list[str]:
    """The node DSNs of HOTPATH_DB_NODES: URLs (postgresql://user:password@host:port/db), separated by commas
    or white space (a password's special characters percent-encoded, as in any URL)."""
    return [v for v in re.split(r"[\s,]+", value.strip()) if v]


def label(index: int, url: str) -> str:
    """A node's name for messages and logs: its number, host, port and database, never its credentials."""
    try:
        info = conninfo_to_dict(_libpq(url))
    except Exception:  # noqa: BLE001 - a malformed DSN is named by its number only
        return f"node {index}"
    where = f"{info.get('host', 'localhost')}:{info.get('port', '5432')}/{info.get('dbname', '')}"
    return f"node {index} ({where})"


def _libpq(url: str) -> str:
    """A DSN as libpq reads it (SQLAlchemy's driver suffix dropped)."""
    return "postgresql://" + normalise_database_url(url).split("://", 1)[1]


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _ident(name: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise ValueError(f"unexpected identifier {name!r}")
    return name


# Set-up (sync, at start-up beside the migrations) -------------------------------------------------------


def migration_pending(url: str) -> bool:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    engine = create_engine(normalise_database_url(url))
    try:
        with engine.connect() as conn:
            return bool(MigrationContext.configure(conn).get_current_revision() != head)
    finally:
        engine.dispose()


def detach(url: str) -> int:
    """Take the coordinator's own tables out of the spread parents (before a migration: a partition's columns
    cannot be changed); `setup` builds the parents again. Returns how many were detached."""
    engine = create_engine(normalise_database_url(url))
    n = 0
    try:
        with engine.begin() as conn:
            if not _schema_exists(conn):
                return 0
            for table in SPREAD_TABLES:
                if _attached_bound(conn, table) is not None:
                    conn.execute(text(f"ALTER TABLE {SCHEMA}.{table} DETACH PARTITION {_local(conn, table)}"))
                    n += 1
    finally:
        engine.dispose()
    return n


def setup(url: str, node_urls: Sequence[str]) -> None:
    """Make every node a Hotpath database (its migrations; its foreign keys to coordinator-only tables
    dropped) and the coordinator's spread parents, foreign servers and user mappings (idempotent)."""
    prepare_nodes(node_urls)
    engine = create_engine(normalise_database_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})  # one replica at a time
            build(conn, node_urls)
    finally:
        engine.dispose()
    log.info(
        "the series are spread over %d databases: the coordinator and %d node(s)", len(node_urls) + 1, len(node_urls)
    )


def prepare_nodes(node_urls: Sequence[str]) -> None:
    """Every node a Hotpath database: its migrations, and its foreign keys to coordinator-only tables
    dropped (idempotent)."""
    for i, node_url in enumerate(node_urls, start=1):
        log.info("database %s: migrations", label(i, node_url))
        upgrade_database(normalise_database_url(node_url))
        engine = create_engine(normalise_database_url(node_url))
        try:
            with engine.begin() as conn:
                for table, name in conn.execute(
                    text("""
                    SELECT conrelid::regclass::text, conname FROM pg_constraint
                    WHERE contype = 'f' AND confrelid::regclass::text = ANY(:t) AND conparentid = 0"""),
                    {"t": list(COORDINATOR_ONLY)},
                ).all():
                    conn.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"'))
        finally:
            engine.dispose()


def build(conn: Connection, node_urls: Sequence[str]) -> None:
    """The coordinator's spread parents, foreign servers and user mappings, in the caller's transaction
    (which holds LOCK_KEY)."""
    modulus = len(node_urls) + 1
    conn.execute(text("CREATE EXTENSION IF NOT EXISTS postgres_fdw"))
    conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
    for i, node_url in enumerate(node_urls, start=1):
        _server(conn, i, node_url)
    for table in SPREAD_TABLES:
        _spread(conn, table, modulus)
    _watermarks(conn, modulus)
    drop_node_schemas(conn, keep=modulus - 1)
    for i in range(1, modulus):
        _node_schema(conn, i)


def node_schema(index: int) -> str:
    """Node `index`'s own schema on the coordinator: a foreign table per spread table (and `series_state`),
    each of the spread table's own name, on that node alone."""
    return f"{NODE_SCHEMA}{index}"


def _node_schema(conn: Connection, index: int) -> None:
    """Made again at every set-up (a migration may have changed the node's columns): IMPORT FOREIGN SCHEMA
    asks the node for its tables' columns."""
    schema = node_schema(index)
    local = _local(conn, "series_state")
    remote = local.split(".", 1)[0] if "." in local else "public"
    conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
    conn.execute(text(f"CREATE SCHEMA {schema}"))
    tables = ", ".join(_ident(t) for t in (*SPREAD_TABLES, "series_state"))
    conn.execute(
        text(f"IMPORT FOREIGN SCHEMA {_ident(remote)} LIMIT TO ({tables}) FROM SERVER {SERVER}{index} INTO {schema}")
    )


def drop_node_schemas(conn: Connection, keep: int) -> None:
    """The per-node schemas of nodes past the first `keep` (no longer configured)."""
    for name in conn.execute(
        text("SELECT nspname FROM pg_namespace WHERE nspname ~ :p"), {"p": f"^{NODE_SCHEMA}[0-9]+$"}
    ).scalars():
        if int(name[len(NODE_SCHEMA) :]) > keep:
            conn.execute(text(f"DROP SCHEMA {_ident(name)} CASCADE"))


def _schema_exists(conn: Connection) -> bool:
    return conn.execute(text("SELECT 1 FROM pg_namespace WHERE nspname = :s"), {"s": SCHEMA}).first() is not None


def _local(conn: Connection, table: str) -> str:
    """The coordinator's own table, schema-qualified (the schema the migrations created it in)."""
    return str(conn.execute(text("SELECT CAST(to_regclass(:t) AS regclass)::text"), {"t": table}).scalar_one())


def _attached_bound(conn: Connection, table: str) -> tuple[int, int] | None:
    """(modulus, remainder) of the coordinator's table in its spread parent, None when not attached."""
    bound = conn.execute(
        text("""
        SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
        WHERE p.relnamespace = CAST(:s AS regnamespace) AND p.relname = :t AND c.oid = to_regclass(:t)"""),
        {"s": SCHEMA, "t": table},
    ).scalar_one_or_none()
    if bound is None:
        return None
    m = _MODULUS.search(bound)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _server(conn: Connection, index: int, node_url: str) -> None:
    info = {k: str(v) for k, v in conninfo_to_dict(_libpq(node_url)).items()}
    user, password = info.pop("user", None), info.pop("password", None)
    wanted = {**info, **SERVER_OPTIONS}
    name = f"{SERVER}{index}"
    have = conn.execute(text("SELECT srvoptions FROM pg_foreign_server WHERE srvname = :n"), {"n": name}).first()
    if have is None:
        opts = ", ".join(f"{_ident(k)} {_lit(v)}" for k, v in wanted.items())
        conn.execute(text(f"CREATE SERVER {name} FOREIGN DATA WRAPPER postgres_fdw OPTIONS ({opts})"))
    else:
        current = dict(o.split("=", 1) for o in have[0] or [])
        changes = [
            f"{'SET' if k in current else 'ADD'} {_ident(k)} {_lit(v)}"
            for k, v in wanted.items()
            if current.get(k) != v
        ]
        changes += [f"DROP {_ident(k)}" for k in current if k not in wanted]
        if changes:
            conn.execute(text(f"ALTER SERVER {name} OPTIONS ({', '.join(changes)})"))
    mapping = {k: v for k, v in (("user", user), ("password", password)) if v is not None}
    conn.execute(text(f"DROP USER MAPPING IF EXISTS FOR CURRENT_USER SERVER {name}"))
    opts = ", ".join(f"{k} {_lit(v)}" for k, v in mapping.items())
    try:
        conn.execute(
            text(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {name}" + (f" OPTIONS ({opts})" if opts else ""))
        )
    except DBAPIError as exc:
        # The statement carries the node's password: the error raised names the node and the database's
        # reason only (SQLAlchemy's would quote the statement into the log).
        raise RuntimeError(
            f"creating the user mapping of database {label(index, node_url)} failed: {describe_error(exc)}"
        ) from None


def _spread(conn: Connection, table: str, modulus: int) -> None:
    """The spread parent of one table: the coordinator's table as remainder 0, each node's as a foreign
    partition. Built again whenever it is missing or the coordinator's table is not in it (after a migration)."""
    bound = _attached_bound(conn, table)
    if bound is not None and bound[0] != modulus:
        raise RuntimeError(
            f"the series are spread over {bound[0]} databases, HOTPATH_DB_NODES makes {modulus} (the coordinator "
            f"and {modulus - 1} node(s)): "
            "adding or removing a node moves hosts between the databases: stop every backend, run "
            "`python -m app nodes move` with the new HOTPATH_DB_NODES (docs/deployment.md), then start them"
        )
    local = _local(conn, table)
    if bound is None:
        conn.execute(text(f"DROP TABLE IF EXISTS {SCHEMA}.{table}"))  # its foreign partitions go with it
        conn.execute(text(f"CREATE TABLE {SCHEMA}.{table} (LIKE {local}) PARTITION BY HASH (host_id)"))
        conn.execute(
            text(
                f"ALTER TABLE {SCHEMA}.{table} ATTACH PARTITION {local} "
                f"FOR VALUES WITH (MODULUS {modulus}, REMAINDER 0)"
            )
        )
    schema = local.split(".", 1)[0] if "." in local else "public"
    for i in range(1, modulus):
        part = f"{table}_n{i}"
        if conn.execute(text("SELECT to_regclass(:p)"), {"p": f"{SCHEMA}.{part}"}).scalar_one() is None:
            conn.execute(
                text(f"""
                CREATE FOREIGN TABLE {SCHEMA}.{part} PARTITION OF {SCHEMA}.{table}
                FOR VALUES WITH (MODULUS {modulus}, REMAINDER {i}) SERVER {SERVER}{i}
                OPTIONS (schema_name {_lit(schema)}, table_name {_lit(table)})""")
            )


def _watermarks(conn: Connection, modulus: int) -> None:
    """`series_state` across the nodes: each rollup watermark the lowest of all databases', so a reader sees
    rollups complete on every node below it."""
    local = _local(conn, "series_state")
    schema = local.split(".", 1)[0] if "." in local else "public"
    parts = [f"SELECT name, watermark_1m, watermark_1h FROM {local}"]
    for i in range(1, modulus):
        conn.execute(
            text(f"""
            CREATE FOREIGN TABLE IF NOT EXISTS {SCHEMA}.series_state_n{i}
                (name text, watermark_1m timestamptz, watermark_1h timestamptz)
            SERVER {SERVER}{i} OPTIONS (schema_name {_lit(schema)}, table_name 'series_state')""")
        )
        parts.append(f"SELECT name, watermark_1m, watermark_1h FROM {SCHEMA}.series_state_n{i}")
    conn.execute(
        text(f"""
        CREATE OR REPLACE VIEW {SCHEMA}.series_state AS
        SELECT name, min(watermark_1m) AS watermark_1m, min(watermark_1h) AS watermark_1h
        FROM ({" UNION ALL ".join(parts)}) s GROUP BY name""")
    )


# At run time ----------------------------------------------------------------------------------------------


@dataclass
class Node:
    index: int  # the hash remainder of its hosts (the coordinator is 0)
    label: str
    engine: AsyncEngine


class Nodes:
    """The databases the series are spread over: the coordinator (index 0, the backend's engine) and the
    nodes, with an engine each, and where each host's series live."""

    def __init__(self, coordinator: AsyncEngine, node_urls: Sequence[str]) -> None:
        self.coordinator = coordinator
        # A node that does not answer a connection (a partition dropping packets) fails within the timeout
        # rather than holding the ingest writer, which commits one database's group after the other.
        self.nodes = [
            Node(
                i,
                label(i, u),
                create_async_engine(
                    normalise_database_url(u),
                    pool_size=10,
                    max_overflow=10,
                    pool_pre_ping=True,
                    connect_args={"connect_timeout": CONNECT_TIMEOUT_S},
                ),
            )
            for i, u in enumerate(node_urls, start=1)
        ]
        self.modulus = len(self.nodes) + 1
        self._placed: dict[str, int] = {}

    def node(self, index: int) -> Node:
        return self.nodes[index - 1]

    async def place(self, host_ids: Sequence[str]) -> dict[str, int]:
        """Each host's database (0: the coordinator), as the coordinator's hash partitioning places it."""
        missing = sorted({h for h in host_ids if h not in self._placed})
        if missing:
            async with self.coordinator.connect() as conn:
                rows = await conn.execute(
                    text(f"""
                    SELECT h, r FROM unnest(CAST(:h AS text[])) AS h, generate_series(0, :n - 1) AS r
                    WHERE satisfies_hash_partition(CAST('{SCHEMA}.delivery_marks' AS regclass), :n, r, h)"""),
                    {"h": missing, "n": self.modulus},
                )
                self._placed.update({r[0]: r[1] for r in rows})
        return {h: self._placed[h] for h in host_ids}

    async def each(
        self, work: Callable[[Node], Awaitable[T]], which: Sequence[Node], timeout_s: float | None = None
    ) -> list[T]:
        """`work` on each of the nodes `which` at once, over their own connections, in the order given. A node
        whose part fails to connect or to answer (a connection-class error, or no answer within `timeout_s`,
        READ_TIMEOUT_S by default) makes the whole fail with NodeUnavailable naming every such node; another
        error is raised as it is. A part not done in time is cancelled and left to end in the background:
        awaiting it could take as long again (psycopg, cancelled, waits up to 5 s for the server to take a
        cancel request and 5 s more for the query to end before it gives the connection up)."""
        if not which:
            return []
        tasks = [asyncio.ensure_future(work(n)) for n in which]
        try:
            _done, pending = await asyncio.wait(tasks, timeout=READ_TIMEOUT_S if timeout_s is None else timeout_s)
        finally:
            for t in tasks:
                if not t.done():
                    _let_end(t)
        down: list[str] = []
        other: BaseException | None = None
        for n, t in zip(which, tasks, strict=True):
            if t in pending:
                down.append(n.label)
            elif (exc := t.exception()) is None:
                continue
            elif isinstance(exc, OperationalError | InterfaceError | OSError | TimeoutError):
                log.warning("database %s did not answer a read: %s", n.label, describe_error(exc))
                down.append(n.label)
            elif other is None:
                other = exc
        if other is not None:
            raise other
        if down:
            raise NodeUnavailable(down)
        return [t.result() for t in tasks]

    async def beside(
        self, local: Awaitable[L], work: Callable[[Node], Awaitable[T]], which: Sequence[Node]
    ) -> tuple[L, list[T]]:
        """`local` (the coordinator's part, on the caller's session) while `each` runs `work` on the nodes
        `which`. If the coordinator's part fails, the nodes' parts are cancelled rather than waited for."""
        parts = asyncio.ensure_future(self.each(work, which))
        try:
            mine = await local
        except BaseException:
            _let_end(parts)
            raise
        return mine, await parts

    async def unreachable(self, timeout_s: float = 10.0) -> list[str]:
        """The nodes that do not answer a query now (each tried at once, bounded by `timeout_s`)."""

        async def down(node: Node) -> bool:
            try:
                async with asyncio.timeout(timeout_s), node.engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
            except Exception:  # noqa: BLE001 - any failure to answer is "unreachable"
                return True
            return False

        results = await asyncio.gather(*(down(n) for n in self.nodes))
        return [n.label for n, d in zip(self.nodes, results, strict=True) if d]

    async def dispose(self) -> None:
        for n in self.nodes:
            await n.engine.dispose()


async def node_of(host_id: str) -> Node | None:
    """The database node a host's series are placed on; None on the coordinator or without nodes."""
    if _active is None:
        return None
    index = (await _active.place([host_id]))[host_id]
    return _active.node(index) if index else None


# The parts of reads cancelled after their bound, until they end (a task is kept only by a reference).
_ENDING: set[asyncio.Future[Any]] = set()


def _let_end(task: asyncio.Future[Any]) -> None:
    """Cancel a read's part that took too long (or is no longer wanted), and let it end in the background
    (its error retrieved: nobody waits for it)."""
    task.cancel()
    _ENDING.add(task)
    task.add_done_callback(_ended)


def _ended(task: asyncio.Future[Any]) -> None:
    _ENDING.discard(task)
    if not task.cancelled():
        task.exception()


# The nodes of this process (set by the server at start-up; None: one database, nothing spread).
_active: Nodes | None = None


def configure(nodes: Nodes | None) -> None:
    global _active
    _active = nodes


def active() -> Nodes | None:
    return _active


async def on_host(coordinator: AsyncEngine, host_id: str, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    """`work` on a connection to the database that holds the host's series (the coordinator's own tables with
    one database). With nodes, a node host's part runs over the backend's connection to that node, bounded by
    READ_TIMEOUT_S, and a node that does not answer raises NodeUnavailable naming it (`Nodes.each`)."""
    index = (await _active.place([host_id]))[host_id] if _active is not None else 0
    if _active is None or index == 0:
        async with coordinator.connect() as conn:
            return await work(conn)

    async def part(node: Node) -> T:
        async with node.engine.connect() as conn:
            return await work(conn)

    return (await _active.each(part, [_active.node(index)]))[0]


def table(name: str) -> str:
    """A spread table's name for a statement that reads every node's rows of it."""
    return f"{SCHEMA}.{name}" if _active is not None else name


async def read_across(conn: AsyncSession | AsyncConnection, hosts: Sequence[str] | None = None) -> None:
    """Make the rest of this transaction read the spread tables across every node (a no-op with one
    database). Only for reads: the spread parents refuse ON CONFLICT.

    With `hosts` (a host's page: the reads name these hosts only), the rest of the transaction reads their
    database alone when they share one: the coordinator's own tables, or the node's schema of foreign
    tables (`node_schema`). No other node is asked, so a node that is down fails its own hosts' pages only
    (through the spread parents every node's foreign partition was opened, pruned or not, and the
    watermarks were the lowest of all nodes'), and a host's rollups are read below its own database's
    watermarks. Hosts on several databases read across every node."""
    if _active is None:
        return
    if hosts:
        placed = set((await _active.place(list(hosts))).values())
        if len(placed) == 1:
            index = placed.pop()
            if index:
                await _search_first(conn, node_schema(index))
            return
    await _search_first(conn, SCHEMA)


async def _search_first(conn: AsyncSession | AsyncConnection, schema: str) -> None:
    await conn.execute(text(f"SELECT set_config('search_path', '{schema}, ' || current_setting('search_path'), true)"))


async def name_unreachable(exc: BaseException) -> None:
    """After a failed read through the spread parents (the fleet's flame graph and compare): raise
    NodeUnavailable naming the nodes that do not answer (if any do not; otherwise the caller re-raises its
    error). The hot code reads each node directly instead (`Nodes.each`) and names a node from its own part."""
    if _active is None or not isinstance(exc, DBAPIError | OSError):
        return
    down = await _active.unreachable()
    if down:
        raise NodeUnavailable(down) from exc
