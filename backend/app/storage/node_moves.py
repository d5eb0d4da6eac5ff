# SPDX-License-Identifier: Apache-2.0
"""Moving hosts between database nodes when HOTPATH_DB_NODES changes (`python -m app nodes move`).

A host's series live on the database the hash of its id modulo the number of databases picks
(app.storage.nodes), so adding or removing a node changes where most hosts belong. This module moves them,
with the backends stopped: each moving host's rows of every spread table are copied from the database the
old layout put them on to the one the new layout puts them on, then deleted from the old one; at the end the
coordinator's spread parents and foreign servers are built again for the new list, and the backend starts
with it as usual.

The old layout is what the coordinator records: the modulus of its table's bound in the spread parents (no
parents: one database), and the old nodes' URLs from its foreign servers `hotpath_node<i>` and their user
mappings (as the backend last set them up), unless the caller names them (`from_urls`). A database is known
by its host, port and database name, not by its position in the list: a node kept at another position is the
same database, and only the hosts whose database changes move (so a reordered list is moves too).

Crash-safe and restartable: the move's plan and each host's state are journalled on the coordinator
(`hotpath_node_move`, `hotpath_node_moves`, created by the move, dropped by its last transaction). A host is
copied in one transaction on its destination that first deletes what an earlier, interrupted run copied
there (so no duplicates), journalled `copied` only after that commit, and only then deleted from its source
(`done`). A run that stops anywhere is started again with the same lists and goes on; the backend refuses to
start while a journal is there.

Rollups are spread tables too, so they are copied as rows. That is exact only if the source and destination
have rolled up to the same point (series_state's watermarks): every database is first rolled up to the same
minute (the backends are stopped, nothing arrives meanwhile), so a host's copied rollups sum exactly the raw
rows below its new database's watermarks, and its rows above them are summed by that database's rollup task.
"""

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from app.core.config import normalise_database_url
from app.core.db import describe_error
from app.storage import nodes
from app.storage.series import partitions, rollups
from app.storage.series.layout import RAW_TABLES, ROLLUP_TABLES

log = logging.getLogger("hotpath.nodes")

# Every running backend holds this advisory lock shared on the coordinator (app.server.prepare); a move
# takes it exclusively for its whole run, so neither starts while the other runs.
RUN_KEY = 0x68706D76  # "hpmv"
PROBE_KEY = 0x68706964  # "hpid": (PROBE_KEY, i) held by the move's i-th database while it tells them apart
PLAN = "hotpath_node_move"  # the move under way: old and new database keys (one row)
JOURNAL = "hotpath_node_moves"  # each moving host: source, destination, state, rows copied
COMMAND = "python -m app nodes move"


class MoveRefused(Exception):
    """The move cannot start (or go on) as asked; nothing was changed by this run."""


@dataclass
class Database:
    index: int  # its hash remainder in its layout (coordinator 0)
    url: str
    key: str  # host:port/dbname: the same database whatever its position or credentials
    label: str


@dataclass
class Move:
    host_id: str
    src: str  # database keys
    dst: str
    state: str = "todo"  # todo -> copied (destination committed) -> done (source deleted)
    rows: int = 0
    # A host id with series but no longer in the coordinator's hosts (deleted while its node was down) whose
    # new database is the coordinator: its rows are deleted, not copied (the coordinator's delivery marks
    # reference hosts, and a deleted host's series are deleted anyway).
    discard: bool = False


@dataclass
class Plan:
    old: list[Database]
    new: list[Database]
    moves: list[Move]
    hosts: int  # hosts with series, moving or not
    resumed: bool = False
    rows: dict[tuple[str, str], int] = field(default_factory=dict)  # (src label, dst label) -> rows (dry run)

    def summary(self) -> str:
        """What moves where, for the operator (no credentials)."""
        label = {d.key: d.label for d in (*self.old, *self.new)}
        lines = [
            f"old layout: {len(self.old)} database(s): " + ", ".join(d.label for d in self.old),
            f"new layout: {len(self.new)} database(s): " + ", ".join(d.label for d in self.new),
            f"{len(self.moves)} of {self.hosts} host(s) with series move"
            + (" (resuming an interrupted move)" if self.resumed else ""),
        ]
        pairs: dict[tuple[str, str], list[Move]] = {}
        for m in self.moves:
            pairs.setdefault((m.src, m.dst), []).append(m)
        for (src, dst), ms in sorted(pairs.items()):
            done = sum(m.state == "done" for m in ms)
            gone = sum(m.discard for m in ms)
            rows = self.rows.get((src, dst))
            lines.append(
                f"  {label[src]} -> {label[dst]}: {len(ms)} host(s)"
                + (f", {rows} row(s)" if rows is not None else "")
                + (f", {done} already moved" if done else "")
                + (f"; {gone} of them no longer enrolled: their rows are deleted, not copied" if gone else "")
            )
        return "\n".join(lines)


def key(url: str) -> str:
    info = conninfo_to_dict(nodes._libpq(url))
    return f"{info.get('host', 'localhost')}:{info.get('port', '5432')}/{info.get('dbname', '')}"


def _databases(coordinator_url: str, node_urls: Sequence[str]) -> list[Database]:
    urls = [coordinator_url, *node_urls]
    dbs = [Database(i, u, key(u), "coordinator" if i == 0 else nodes.label(i, u)) for i, u in enumerate(urls)]
    seen: dict[str, Database] = {}
    for d in dbs:
        if d.key in seen:
            raise MoveRefused(f"{d.label} and {seen[d.key].label} are the same database ({d.key})")
        seen[d.key] = d
    return dbs


def _engine(url: str) -> Engine:
    return create_engine(normalise_database_url(url), connect_args={"connect_timeout": nodes.CONNECT_TIMEOUT_S})


class RunLock:
    """The shared run lock a backend holds on a connection of its own; `close` releases it."""

    def __init__(self, conn: Connection) -> None:
        self._conn: Connection | None = conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn.engine.dispose()  # the session (and its lock) ends, not back to a pool
            self._conn = None


def backend_lock(url: str, node_urls: Sequence[str]) -> RunLock:
    """What a backend holds while it runs (app.server.prepare): the shared run lock on the coordinator.
    Refused while a move runs or a journal is left over, and without nodes when the coordinator's series are
    spread (nodes.setup refuses a different number)."""
    engine = create_engine(normalise_database_url(url), pool_size=1, max_overflow=0)
    conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        if not conn.execute(text("SELECT pg_try_advisory_lock_shared(:k)"), {"k": RUN_KEY}).scalar_one():
            raise RuntimeError(f"hosts are being moved between database nodes ({COMMAND}): start after it ends")
        if conn.execute(text("SELECT to_regclass(:t)"), {"t": PLAN}).scalar_one() is not None:
            raise RuntimeError(
                f"a move of hosts between database nodes was interrupted: run `{COMMAND}` again with the same "
                "HOTPATH_DB_NODES to finish it before starting the backend"
            )
        if not node_urls and (modulus := _old_modulus(conn)) > 1:
            raise RuntimeError(
                f"the series are spread over {modulus} databases and HOTPATH_DB_NODES is empty: removing the "
                f"nodes moves their hosts to the coordinator: run `{COMMAND}` first (docs/deployment.md)"
            )
    except BaseException:
        conn.close()
        engine.dispose()
        raise
    return RunLock(conn)


# The layouts ---------------------------------------------------------------------------------------------


def _old_modulus(conn: Connection) -> int:
    if nodes._schema_exists(conn):
        bound = nodes._attached_bound(conn, "delivery_marks")
        if bound is not None:
            return bound[0]
    servers = conn.execute(
        text("SELECT count(*) FROM pg_foreign_server WHERE srvname LIKE :p"), {"p": nodes.SERVER + "%"}
    ).scalar_one()
    if servers:
        raise MoveRefused(
            "the coordinator has node servers but its tables are not in the spread parents (a migration's detach "
            "not followed by a start): start the backend once with the old HOTPATH_DB_NODES, stop it, then move"
        )
    return 1


def _server_url(conn: Connection, index: int) -> str:
    """A node's URL as the coordinator's foreign server and user mapping record it."""
    name = f"{nodes.SERVER}{index}"
    srv = conn.execute(text("SELECT srvoptions FROM pg_foreign_server WHERE srvname = :n"), {"n": name}).first()
    if srv is None:
        raise MoveRefused(f"the coordinator has no foreign server {name}: name the old nodes with --from-nodes")
    opts = dict(o.split("=", 1) for o in srv[0] or [])
    for k in nodes.SERVER_OPTIONS:
        opts.pop(k, None)
    um = conn.execute(
        text("SELECT umoptions FROM pg_user_mappings WHERE srvname = :n AND usename = current_user"), {"n": name}
    ).first()
    user_opts = dict(o.split("=", 1) for o in (um[0] or []) if "=" in o) if um is not None else {}
    user, password = user_opts.get("user"), user_opts.get("password")
    auth = ""
    if user is not None:
        auth = quote(user, safe="") + (":" + quote(password, safe="") if password is not None else "") + "@"
    dbname = opts.pop("dbname", "")
    return f"postgresql://{auth}/{quote(dbname, safe='')}" + (f"?{urlencode(opts)}" if opts else "")


def _placement(conn: Connection, host_ids: Sequence[str], modulus: int) -> dict[str, int]:
    """Each host's hash remainder for a modulus, as Postgres' hash partitioning computes it (the spread
    parents' key is host_id text; a temporary parent of the same key gives the same hash, whatever layout
    exists now)."""
    if modulus == 1:
        return dict.fromkeys(host_ids, 0)
    conn.execute(text("CREATE TEMP TABLE IF NOT EXISTS hp_place (host_id text) PARTITION BY HASH (host_id)"))
    rows = conn.execute(
        text("""
        SELECT h, r FROM unnest(CAST(:h AS text[])) AS h, generate_series(0, :n - 1) AS r
        WHERE satisfies_hash_partition(CAST('pg_temp.hp_place' AS regclass), :n, r, h)"""),
        {"h": list(host_ids), "n": modulus},
    )
    return {r[0]: r[1] for r in rows}


def _hosts_with_series(old: list[Database], engines: dict[str, Engine]) -> list[str]:
    found: set[str] = set()
    for d in old:
        with engines[d.key].connect() as conn:
            if d.index == 0:
                found.update(conn.execute(text("SELECT id FROM hosts")).scalars())
            found.update(conn.execute(text("SELECT DISTINCT host_id FROM delivery_marks")).scalars())
    return sorted(found)


def _host_rows(engine: Engine, host_ids: list[str]) -> int:
    with engine.connect() as conn:
        return sum(
            int(conn.execute(text(f"SELECT count(*) FROM {t} WHERE host_id = ANY(:h)"), {"h": host_ids}).scalar_one())
            for t in nodes.SPREAD_TABLES
        )


# The move -------------------------------------------------------------------------------------------------


def move(
    coordinator_url: str,
    node_urls: Sequence[str],
    from_urls: Sequence[str] | None = None,
    dry_run: bool = False,
    say: Callable[[str], None] = log.info,
) -> Plan:
    """Move every host whose database changes from the old layout to `node_urls` (see the module's
    docstring), then build the coordinator's spread parents for the new list. With `dry_run`, only say what
    would move. Raises MoveRefused when it cannot start; any other error leaves the journal to resume from."""
    coord = _engine(coordinator_url)
    lock = coord.connect()  # its transactions are the journal's; the session's advisory lock outlives them
    engines: dict[str, Engine] = {}
    try:
        if not lock.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": RUN_KEY}).scalar_one():
            raise MoveRefused(
                "a backend is running on this coordinator (or another move is): stop every backend replica first"
            )
        journalled = _journalled(lock)
        # An interrupted move has detached the coordinator's tables: its plan says how many databases there were.
        old_modulus = len(journalled[0]) if journalled is not None else _old_modulus(lock)
        if from_urls is None:
            from_urls = [_server_url(lock, i) for i in range(1, old_modulus)]
        elif len(from_urls) != old_modulus - 1:
            raise MoveRefused(
                f"the series are spread over {old_modulus} database(s), --from-nodes names {len(from_urls) + 1}"
            )
        old = _databases(coordinator_url, from_urls)
        new = _databases(coordinator_url, node_urls)
        for d in (*old, *new):
            if d.key not in engines:
                engines[d.key] = coord if d.index == 0 else _engine(d.url)
        down = []
        for k, e in engines.items():
            try:
                with e.connect() as c:
                    c.execute(text("SELECT 1"))
            except Exception as exc:  # noqa: BLE001 - named below, all at once
                down.append(f"{next(d.label for d in (*old, *new) if d.key == k)}: {describe_error(exc)}")
        if down:
            raise MoveRefused("database(s) unreachable, every old and new one is needed: " + "; ".join(down))
        _distinct(engines, {d.key: d.label for d in (*old, *new)})
        plan = _plan(lock, old, new, engines, journalled)
        lock.commit()
        if dry_run:
            for (src, dst), hosts in _pairs(plan.moves).items():
                plan.rows[(src, dst)] = _host_rows(engines[src], hosts)
            say(plan.summary())
            return plan
        say(plan.summary())
        _run(lock, plan, engines, say)
        return plan
    finally:
        lock.close()  # the session's advisory lock goes with it
        for e in {id(e): e for e in (coord, *engines.values())}.values():
            e.dispose()


def _distinct(engines: dict[str, Engine], labels: dict[str, str]) -> None:
    """Refuse two addresses of one database (another host name, a socket and a port): the move would take
    them for two, copy a host onto itself and then delete it. Each connection holds an advisory lock of its
    own; one that sees another's lock in its own database (pg_locks, readable by any user) is the same."""
    keys = list(engines)
    conns = [engines[k].connect() for k in keys]
    try:
        for i, c in enumerate(conns):
            c.execute(text("SELECT pg_advisory_lock(:p, :i)"), {"p": PROBE_KEY, "i": i})
        for i, c in enumerate(conns):
            seen = c.execute(
                text("""
                SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND classid = :p AND objsubid = 2
                    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND pid <> pg_backend_pid()"""),
                {"p": PROBE_KEY},
            ).scalars()
            for j in seen:
                if 0 <= int(j) < len(keys) and int(j) != i:
                    raise MoveRefused(
                        f"{labels[keys[i]]} and {labels[keys[int(j)]]} are the same database under two addresses: "
                        "name each database the same way (host, port, database) in the old and the new list"
                    )
    finally:
        for c in conns:
            try:
                c.execute(text("SELECT pg_advisory_unlock_all()"))
            finally:
                c.close()


def _pairs(moves: list[Move]) -> dict[tuple[str, str], list[str]]:
    pairs: dict[tuple[str, str], list[str]] = {}
    for m in moves:
        pairs.setdefault((m.src, m.dst), []).append(m.host_id)
    return pairs


def _journalled(conn: Connection) -> tuple[list[str], list[str], int] | None:
    """The old and new database keys and the hosts count of an interrupted move, None when there is none."""
    if conn.execute(text("SELECT to_regclass(:t)"), {"t": PLAN}).scalar_one() is None:
        return None
    row = conn.execute(text(f"SELECT old_keys, new_keys, hosts FROM {PLAN}")).one()
    return list(row[0]), list(row[1]), int(row[2])


def _plan(
    conn: Connection,
    old: list[Database],
    new: list[Database],
    engines: dict[str, Engine],
    journalled: tuple[list[str], list[str], int] | None,
) -> Plan:
    """The journalled plan when a move was interrupted (it must be for the same lists), else a new one."""
    old_keys, new_keys = [d.key for d in old], [d.key for d in new]
    if journalled is not None:
        row = journalled
        if (row[0], row[1]) != (old_keys, new_keys):
            raise MoveRefused(
                "an interrupted move is journalled for other lists (from "
                + ", ".join(row[0])
                + " to "
                + ", ".join(row[1])
                + "): finish it first, with HOTPATH_DB_NODES (and --from-nodes) as it was started"
            )
        moves = [
            Move(r[0], r[1], r[2], r[3], int(r[4]), bool(r[5]))
            for r in conn.execute(
                text(f"SELECT host_id, src, dst, state, rows, discard FROM {JOURNAL} ORDER BY host_id")
            )
        ]
        return Plan(old, new, moves, row[2], resumed=True)
    hosts = _hosts_with_series(old, engines)
    was = _placement(conn, hosts, len(old))
    will = _placement(conn, hosts, len(new))
    enrolled = set(conn.execute(text("SELECT id FROM hosts")).scalars())
    moves = [
        Move(h, old[was[h]].key, new[will[h]].key, discard=h not in enrolled and will[h] == 0)
        for h in hosts
        if old[was[h]].key != new[will[h]].key
    ]
    return Plan(old, new, moves, len(hosts))


def _run(lock: Connection, plan: Plan, engines: dict[str, Engine], say: Callable[[str], None]) -> None:
    new_urls = [d.url for d in plan.new[1:]]
    if new_urls:
        nodes.prepare_nodes(new_urls)  # every new node a Hotpath database before rows are copied to it
    if not plan.resumed:
        with lock.begin():
            lock.execute(
                text(f"CREATE TABLE {PLAN} (old_keys text[] NOT NULL, new_keys text[] NOT NULL, hosts int NOT NULL)")
            )
            lock.execute(
                text(f"""
                CREATE TABLE {JOURNAL} (host_id text PRIMARY KEY, src text NOT NULL, dst text NOT NULL,
                    state text NOT NULL, rows bigint NOT NULL DEFAULT 0, discard boolean NOT NULL,
                    updated_at timestamptz NOT NULL)""")
            )
            lock.execute(
                text(f"INSERT INTO {PLAN} VALUES (:o, :n, :c)"),
                {"o": [d.key for d in plan.old], "n": [d.key for d in plan.new], "c": plan.hosts},
            )
            if plan.moves:
                lock.execute(
                    text(f"""
                    INSERT INTO {JOURNAL} (host_id, src, dst, state, discard, updated_at)
                    SELECT h, s, d, 'todo', x, now() FROM unnest(CAST(:h AS text[]), CAST(:s AS text[]),
                        CAST(:d AS text[]), CAST(:x AS boolean[])) AS u(h, s, d, x)"""),
                    {
                        "h": [m.host_id for m in plan.moves],
                        "s": [m.src for m in plan.moves],
                        "d": [m.dst for m in plan.moves],
                        "x": [m.discard for m in plan.moves],
                    },
                )
    # Out of the spread parents, the coordinator's tables take any host's rows (a partition refuses rows
    # outside its bound); nothing reads them meanwhile (the backends refuse to start while the journal is
    # there), and the parents are built again at the end.
    nodes.detach(plan.old[0].url)
    pending = [m for m in plan.moves if m.state != "done"]
    if pending:
        involved = sorted({m.src for m in pending} | {m.dst for m in pending})
        asyncio.run(_align_watermarks(plan.old[0].url, [plan_url(plan, k) for k in involved]))
        for dst in sorted({m.dst for m in pending if m.state == "todo"}):
            _partitions_for(engines, dst, [m for m in pending if m.dst == dst and m.state == "todo"], plan)
    started, rows = datetime.now(UTC), 0
    for n, m in enumerate(pending, start=1):
        if m.state == "todo":
            if not m.discard:
                m.rows = _copy_host(engines[m.src], engines[m.dst], m.host_id)
            _journal(lock, m, "copied")
        _delete_source(engines[m.src], m.host_id)
        _journal(lock, m, "done")
        rows += m.rows
        if n % 100 == 0 or n == len(pending):
            say(f"moved {n} of {len(pending)} host(s), {rows} row(s)")
    seconds = (datetime.now(UTC) - started).total_seconds()
    if pending:
        say(f"copied and deleted {rows} row(s) in {seconds:.1f} s ({rows / max(seconds, 1e-6):.0f} rows/s)")
    _rebuild(lock, plan)
    say(f"the series are spread over {len(plan.new)} database(s): start the backends with this HOTPATH_DB_NODES")


def plan_url(plan: Plan, k: str) -> str:
    return next(d.url for d in (*plan.new, *plan.old) if d.key == k)


async def _align_watermarks(coordinator_url: str, urls: list[str]) -> None:
    """Roll every involved database up to the same minute, so copied rollups match their new database's
    watermarks (the backends are stopped: nothing arrives meanwhile), each with the coordinator's hosts'
    kernel-build groups (a node has no hosts of its own)."""
    now = datetime.now(UTC)
    marks = set()
    coordinator = create_async_engine(normalise_database_url(coordinator_url))
    try:
        groups = await rollups.coordinator_groups(coordinator)
    finally:
        await coordinator.dispose()
    for url in urls:
        engine = create_async_engine(normalise_database_url(url))
        try:
            await rollups.run_once(engine, now=now, lag_s=0, groups=groups)
            async with engine.connect() as conn:
                marks.add(await rollups.watermarks(conn))
        finally:
            await engine.dispose()
    if len(marks) != 1:
        raise MoveRefused(
            f"the databases' rollup watermarks differ after rolling all up to {now:%H:%M} ({sorted(marks)}): "
            "is a backend still running somewhere, or a database's clock ahead?"
        )


def _time_column(conn: Connection, table: str) -> str | None:
    """The column a table is partitioned by (time), None when it is not partitioned."""
    return conn.execute(
        text("""
        SELECT a.attname FROM pg_partitioned_table p
        JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
        WHERE p.partrelid = to_regclass(:t)"""),
        {"t": table},
    ).scalar_one_or_none()


def _partitions_for(engines: dict[str, Engine], dst: str, moves: list[Move], plan: Plan) -> None:
    """Make on `dst` the time partitions the moving hosts' rows need (from their oldest row on)."""
    now = datetime.now(UTC)
    oldest = {partitions.HOUR: now, partitions.DAY: now}
    newest = dict(oldest)
    by_src: dict[str, list[str]] = {}
    for m in moves:
        by_src.setdefault(m.src, []).append(m.host_id)
    for src, hosts in by_src.items():
        with engines[src].connect() as conn:
            for table in (*RAW_TABLES, *ROLLUP_TABLES):  # the tables partitions.ensure makes partitions of
                col = _time_column(conn, table)
                if col is None:
                    continue
                lo, hi = conn.execute(
                    text(f"SELECT min({col}), max({col}) FROM {table} WHERE host_id = ANY(:h)"), {"h": hosts}
                ).one()
                step = partitions.step_of(table)
                if lo is not None:
                    oldest[step], newest[step] = min(oldest[step], lo), max(newest[step], hi)

    async def ensure() -> None:
        engine = create_async_engine(normalise_database_url(plan_url(plan, dst)))
        try:
            await partitions.ensure(
                engine,
                now,
                now - oldest[partitions.HOUR],
                now - oldest[partitions.DAY],
                max(timedelta(hours=3), newest[partitions.HOUR] - now + partitions.HOUR),
                max(timedelta(days=2), newest[partitions.DAY] - now + partitions.DAY),
            )
        finally:
            await engine.dispose()

    asyncio.run(ensure())


def _columns(conn: Connection, table: str) -> str:
    cols = conn.execute(
        text("""
        SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(:t) AND attnum > 0 AND NOT attisdropped
            AND attgenerated = '' ORDER BY attnum"""),
        {"t": table},
    ).scalars()
    return ", ".join(f'"{c}"' for c in cols)


def _copy_host(src: Engine, dst: Engine, host_id: str) -> int:
    """One host's rows of every spread table, from src to dst in one destination transaction that first
    deletes whatever an interrupted run left there. Returns the rows copied."""
    copied = 0
    with src.connect() as s, dst.begin() as d:
        s.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))  # one snapshot of the host's rows
        sraw: Any = s.connection.driver_connection
        draw: Any = d.connection.driver_connection
        for table in nodes.SPREAD_TABLES:
            d.execute(text(f"DELETE FROM {table} WHERE host_id = :h"), {"h": host_id})
            cols = _columns(s, table)
            with (
                sraw.cursor() as sc,
                draw.cursor() as dc,
                sc.copy(
                    f"COPY (SELECT {cols} FROM {table} WHERE host_id = %s) TO STDOUT (FORMAT BINARY)", (host_id,)
                ) as out,
                dc.copy(f"COPY {table} ({cols}) FROM STDIN (FORMAT BINARY)") as into,
            ):
                for chunk in out:
                    into.write(chunk)
            copied += int(
                d.execute(text(f"SELECT count(*) FROM {table} WHERE host_id = :h"), {"h": host_id}).scalar_one()
            )
        s.rollback()
    return copied


def _delete_source(src: Engine, host_id: str) -> None:
    """A moved host's rows off its old database (after its destination committed them)."""
    with src.begin() as conn:
        for table in nodes.SPREAD_TABLES:
            conn.execute(text(f"DELETE FROM {table} WHERE host_id = :h"), {"h": host_id})


def _journal(lock: Connection, m: Move, state: str) -> None:
    with lock.begin():
        lock.execute(
            text(f"UPDATE {JOURNAL} SET state = :s, rows = :r, updated_at = now() WHERE host_id = :h"),
            {"s": state, "r": m.rows, "h": m.host_id},
        )
    m.state = state


def _rebuild(lock: Connection, plan: Plan) -> None:
    """The coordinator's spread parents and foreign servers for the new list, and the journal dropped, in
    one transaction: a crash before its commit leaves the journal and the old parents, and a run again
    redoes just this."""
    with lock.begin():
        lock.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": nodes.LOCK_KEY})
        if nodes._schema_exists(lock):
            for table in nodes.SPREAD_TABLES:
                if nodes._attached_bound(lock, table) is not None:
                    lock.execute(
                        text(f"ALTER TABLE {nodes.SCHEMA}.{table} DETACH PARTITION {nodes._local(lock, table)}")
                    )
            lock.execute(text(f"DROP SCHEMA {nodes.SCHEMA} CASCADE"))  # parents and foreign tables, no rows
        nodes.drop_node_schemas(lock, keep=0)  # the nodes' own foreign tables, no rows
        for name in lock.execute(
            text("SELECT srvname FROM pg_foreign_server WHERE srvname ~ :p"), {"p": f"^{nodes.SERVER}[0-9]+$"}
        ).scalars():
            lock.execute(text(f"DROP SERVER {name} CASCADE"))  # its user mappings with it
        if len(plan.new) > 1:
            nodes.build(lock, [d.url for d in plan.new[1:]])
        lock.execute(text(f"DROP TABLE IF EXISTS {JOURNAL}, {PLAN}"))
