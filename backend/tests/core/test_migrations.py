# SPDX-License-Identifier: Apache-2.0
"""The Alembic migrations apply to an empty database and downgrade back to nothing."""

from sqlalchemy import create_engine, inspect, text

from app.core.db import downgrade_database, upgrade_database
from tests.conftest import _recreate_database

TABLES = {
    "users",
    "audit_log",
    "hosts",
    "host_modules",
    "catalog_pieces",
    "functions",
    "function_code",
    "instruction_cache",
    "sample_intervals",
    "measurement_points",
    "sample_blocks_1m",
    "sample_blocks_1h",
    "sample_totals_1m",
    "sample_totals_1h",
    "sample_functions_1m",
    "sample_functions_10m",
    "sample_functions_1h",
    "measurement_points_1m",
    "measurement_points_1h",
    "series_state",
    "host_targets",
    "commands",
    "measurements",
    "measurement_resources",
    "enrolment_tokens",
    "enrolment_requests",
    "delivery_marks",
    "data_gaps",
    "plans",
    "plan_comparisons",
    "stack_defs",
    "stack_samples",
}


def test_upgrade_head_on_empty_database_then_downgrade_base(postgres_url):
    url = _recreate_database(postgres_url, "hotpath_migrations")
    engine = create_engine(url)
    try:
        upgrade_database(url)
        names = set(inspect(engine).get_table_names())
        assert names >= TABLES
        indexes = {i["name"] for i in inspect(engine).get_indexes("sample_intervals")}
        assert "ix_sample_intervals_host_ts" in indexes
        indexes = {i["name"] for i in inspect(engine).get_indexes("sample_blocks_1m")}
        assert {"ux_sample_blocks_1m", "ix_sample_blocks_1m_fn"} <= indexes
        downgrade_database(url, "base")
        assert set(inspect(engine).get_table_names()) - {"alembic_version"} == set()
        upgrade_database(url)  # and up again: the downgrade left nothing behind that blocks it
        assert set(inspect(engine).get_table_names()) >= TABLES
    finally:
        engine.dispose()


def test_enrolment_requests_keep_their_key_across_the_per_key_migration(postgres_url):
    """0007 gives each existing request an id and its key's fingerprint (from its CSR); the downgrade
    keeps one request per host id."""
    from sqlalchemy import text

    from app.domain.enrolment import key_fingerprint
    from tests.scripted_agent import make_csr

    url = _recreate_database(postgres_url, "hotpath_migration_0007")
    engine = create_engine(url)
    try:
        upgrade_database(url, "0006_measurement_edges")
        _key, csr = make_csr("old-host")
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO enrolment_requests (host_id, hostname, csr_pem) VALUES ('old-host', 'o', :c)"),
                {"c": csr},
            )
        upgrade_database(url)
        with engine.connect() as conn:
            row = conn.execute(text("SELECT id, key_fingerprint, status FROM enrolment_requests")).one()
        assert row.id is not None and row.key_fingerprint == key_fingerprint(csr) and row.status == "pending"
        with engine.begin() as conn:
            _key2, csr2 = make_csr("old-host")
            conn.execute(
                text(
                    "INSERT INTO enrolment_requests (host_id, key_fingerprint, hostname, csr_pem) "
                    "VALUES ('old-host', :f, 'o', :c)"
                ),
                {"f": key_fingerprint(csr2), "c": csr2},
            )
        downgrade_database(url, "0006_measurement_edges")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM enrolment_requests")).scalar_one() == 1
    finally:
        engine.dispose()


def test_listings_cached_with_a_probes_int3_are_dropped_and_others_kept(postgres_url):
    """0008: a listing an older agent decoded under a uprobe (int3 at a block start) is no longer served
    from the cache; a listing without int3 stays."""
    url = _recreate_database(postgres_url, "hotpath_migrations_0008")
    engine = create_engine(url)
    try:
        upgrade_database(url, "0007_enrolment_keys_users")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO catalog_pieces (digest, module, function_count, block_count, complete) "
                    "VALUES ('d1', 'prog', 2, 2, true)"
                )
            )
            conn.execute(
                text("""INSERT INTO instruction_cache (digest, index, instructions) VALUES
                ('d1', 0, '[[0, 1, "cc", "int3"], [1, 1, "56", "push rsi"]]'),
                ('d1', 1, '[[0, 2, "4156", "push r14"], [2, 1, "c3", "ret"]]')""")
            )
        upgrade_database(url)
        with engine.connect() as conn:
            left = conn.execute(text("SELECT index FROM instruction_cache ORDER BY index")).scalars().all()
        assert left == [1]
    finally:
        engine.dispose()


def test_the_stacks_minute_rollup_already_stored_is_summed_into_ten_minutes(postgres_url):
    """0011 sums the minute rollup's rows into UTC-aligned ten-minute buckets, per stack and context."""
    url = _recreate_database(postgres_url, "hotpath_migrations_0011")
    engine = create_engine(url)
    try:
        upgrade_database(url, "0010_stack_rollup")
        with engine.begin() as conn:
            hour = conn.execute(text("SELECT date_trunc('hour', now())")).scalar_one()
            conn.execute(
                text("""
                INSERT INTO stack_samples_1m (host_id, bucket, stack_id, pid, comm, cpu, count)
                SELECT 'h', :t + m * interval '1 minute', 5, 1, 'a', m % 2, m + 1 FROM generate_series(0, 24) m"""),
                {"t": hour},
            )
        upgrade_database(url)
        with engine.connect() as conn:
            rows = conn.execute(
                text("""
                SELECT extract(minute FROM bucket)::int, cpu, count FROM stack_samples_10m ORDER BY 1, 2""")
            ).all()
        # Minutes 0-9, 10-19 and 20-24 of the hour, counts m + 1 split by m's parity (the CPU).
        assert [tuple(r) for r in rows] == [(0, 0, 25), (0, 1, 30), (10, 0, 75), (10, 1, 80), (20, 0, 69), (20, 1, 46)]
    finally:
        engine.dispose()


def test_the_block_rollups_already_stored_are_summed_per_function(postgres_url):
    """0016 sums the block rollups' rows per host, bucket and function: minutes into minutes and UTC-aligned
    ten minutes, hours into hours, idle counts with them."""
    url = _recreate_database(postgres_url, "hotpath_migrations_0016")
    engine = create_engine(url)
    try:
        upgrade_database(url, "0015_token_replay")
        with engine.begin() as conn:
            hour = conn.execute(text("SELECT date_trunc('hour', now())")).scalar_one()
            conn.execute(
                text("""
                INSERT INTO sample_blocks_1m (host_id, bucket, function_id, block_offset, count, idle_count)
                SELECT 'h', :t + m * interval '1 minute', 7, o, m + 1, m % 2
                FROM generate_series(0, 14) m, unnest(ARRAY[0, 16]) o"""),
                {"t": hour},
            )
            conn.execute(
                text("""
                INSERT INTO sample_blocks_1h (host_id, bucket, function_id, block_offset, count, idle_count)
                VALUES ('h', :t, 7, 0, 100, 3), ('h', :t, 7, 16, 20, 1), ('h', :t, 8, 0, 5, 0)"""),
                {"t": hour},
            )
        upgrade_database(url, "0016_function_rollups")
        with engine.connect() as conn:

            def rows(grain: str) -> list[tuple]:
                return [
                    tuple(r)
                    for r in conn.execute(
                        text(f"""SELECT extract(minute FROM bucket)::int, function_id, count, idle_count
                        FROM sample_functions_{grain} WHERE host_id = 'h' ORDER BY 1, 2""")
                    )
                ]

            # Two blocks a minute, each m + 1 samples, m % 2 of them idle.
            assert rows("1m") == [(m, 7, 2 * (m + 1), 2 * (m % 2)) for m in range(15)]
            assert rows("10m") == [(0, 7, 2 * sum(range(1, 11)), 10), (10, 7, 2 * sum(range(11, 16)), 4)]
            assert rows("1h") == [(0, 7, 120, 4), (0, 8, 5, 0)]
    finally:
        engine.dispose()


def test_the_function_rollups_become_one_row_of_arrays_per_host_and_bucket_and_back(postgres_url):
    """0017 turns each host's per-function rows of a bucket into one row of arrays in function id order
    (ids, busy samples, idle samples), in the same daily partitions; the downgrade gives the rows back."""
    url = _recreate_database(postgres_url, "hotpath_migrations_0017")
    engine = create_engine(url)
    try:
        upgrade_database(url, "0016_function_rollups")
        with engine.begin() as conn:
            hour = conn.execute(text("SELECT date_trunc('hour', now())")).scalar_one()
            rows = [("h", 0, 9, 40, 1), ("h", 0, 7, 30, 0), ("h", 1, 7, 5, 5), ("g", 0, 8, 2, 0)]
            for grain in ("1m", "10m", "1h"):
                for host, minute, fid, count, idle in rows:
                    conn.execute(
                        text(f"""INSERT INTO sample_functions_{grain} (host_id, bucket, function_id, count, idle_count)
                        VALUES (:h, :t + :m * interval '1 minute', :f, :c, :i)"""),
                        {"h": host, "t": hour, "m": minute, "f": fid, "c": count, "i": idle},
                    )
            before = {
                g: conn.execute(text(f"SELECT tableoid::regclass::text FROM sample_functions_{g} LIMIT 1")).scalar_one()
                for g in ("1m", "10m", "1h")
            }
        upgrade_database(url)
        with engine.connect() as conn:
            for grain in ("1m", "10m", "1h"):
                got = [
                    tuple(r)
                    for r in conn.execute(
                        text(f"""SELECT host_id, extract(minute FROM bucket)::int, function_ids, busy_counts,
                        idle_counts, tableoid::regclass::text FROM sample_functions_{grain} ORDER BY 1, 2""")
                    )
                ]
                part = before[grain]
                assert got == [
                    ("g", 0, [8], [2], [0], part),
                    ("h", 0, [7, 9], [30, 39], [0, 1], part),
                    ("h", 1, [7], [0], [5], part),
                ], grain
        downgrade_database(url, "0016_function_rollups")
        with engine.connect() as conn:
            for grain in ("1m", "10m", "1h"):
                back = conn.execute(
                    text(f"""SELECT host_id, extract(minute FROM bucket)::int, function_id, count, idle_count
                    FROM sample_functions_{grain} ORDER BY 1, 2, 3""")
                ).all()
                assert [tuple(r) for r in back] == sorted(rows), grain
    finally:
        engine.dispose()


def test_the_ten_minute_function_rollups_already_stored_become_running_totals(postgres_url):
    """0018 fills the running totals of the ten minutes within their hour from the ten-minute rows stored,
    for every ten minutes wholly below the minute watermark from a host's first of the hour on, in the
    ten-minute rows' daily partitions; the downgrade drops the table."""
    url = _recreate_database(postgres_url, "hotpath_migrations_0018")
    engine = create_engine(url)
    try:
        upgrade_database(url, "0017_function_rollup_arrays")
        with engine.begin() as conn:
            hour = conn.execute(text("SELECT date_trunc('hour', now())")).scalar_one()
            rows = [("h", 0, [7, 9], [30, 39], [0, 1]), ("h", 10, [7], [5], [5]), ("h", 30, [8], [2], [0])]
            rows += [("g", 20, [9], [4], [0]), ("g", 60, [9], [6], [0])]  # 60: the next hour, not closed
            for host, minute, ids, busy, idle in rows:
                conn.execute(
                    text("""INSERT INTO sample_functions_10m (host_id, bucket, function_ids, busy_counts, idle_counts)
                    VALUES (:h, :t + :m * interval '1 minute', :f, :b, :i)"""),
                    {"h": host, "t": hour, "m": minute, "f": ids, "b": busy, "i": idle},
                )
            conn.execute(
                text("UPDATE series_state SET watermark_1m = :t + interval '65 minutes' WHERE name = 'rollups'"),
                {"t": hour},
            )
            part = conn.execute(text("SELECT tableoid::regclass::text FROM sample_functions_10m LIMIT 1")).scalar_one()
        upgrade_database(url)
        with engine.connect() as conn:
            got = [
                tuple(r)
                for r in conn.execute(
                    text("""SELECT host_id, extract(minute FROM bucket)::int, function_ids, busy_counts, idle_counts,
                    tableoid::regclass::text FROM sample_functions_10m_run ORDER BY 1, 2""")
                )
            ]
        run_part = part.replace("sample_functions_10m", "sample_functions_10m_run", 1)
        assert got == [
            *[("g", m, [9], [4], [0], run_part) for m in (20, 30, 40, 50)],
            ("h", 0, [7, 9], [30, 39], [0, 1], run_part),
            *[("h", m, [7, 9], [35, 39], [5, 1], run_part) for m in (10, 20)],
            *[("h", m, [7, 8, 9], [35, 2, 39], [5, 0, 1], run_part) for m in (30, 40, 50)],
        ]
        downgrade_database(url, "0017_function_rollup_arrays")
        with engine.connect() as conn:
            assert not inspect(conn).has_table("sample_functions_10m_run")
    finally:
        engine.dispose()


def _stack_rollup_indexes(conn) -> dict[str, tuple[bool, str]]:
    """Each stack rollup's unique index: unique or not, and its definition (pg_indexes, the parent's)."""
    rows = conn.execute(
        text("""
        SELECT i.indexname, x.indisunique, i.indexdef FROM pg_indexes i
        JOIN pg_class c ON c.relname = i.indexname JOIN pg_index x ON x.indexrelid = c.oid
        WHERE i.tablename IN ('stack_samples_1m', 'stack_samples_10m')""")
    ).all()
    return {r.indexname: (r.indisunique, r.indexdef.split(" USING btree ")[1]) for r in rows}


def test_the_stack_rollups_unique_index_carries_the_count_and_back(postgres_url):
    """0021 rebuilds the stack rollups' unique indexes with the count included (index-only reads per host):
    the rows stored before stay, the upserts' conflict target still merges, and the downgrade restores the
    key-only index."""
    url = _recreate_database(postgres_url, "hotpath_migrations_0021")
    engine = create_engine(url)
    key = "(host_id, bucket, stack_id, pid, comm, cpu)"
    upsert = text("""
        INSERT INTO stack_samples_10m (host_id, bucket, stack_id, pid, comm, cpu, count)
        VALUES ('h', date_trunc('hour', now()), 5, 1, 'a', 0, 3)
        ON CONFLICT (host_id, bucket, stack_id, pid, comm, cpu)
        DO UPDATE SET count = stack_samples_10m.count + excluded.count""")
    both = ("ux_stack_samples_1m", "ux_stack_samples_10m")

    def step(indexdef: str, rows: tuple[int, int]) -> None:
        """Both unique indexes as `indexdef`, and one more upsert into the one row: (rows, their count sum)."""
        with engine.begin() as conn:
            assert _stack_rollup_indexes(conn) == dict.fromkeys(both, (True, indexdef))
            conn.execute(upsert)
            assert conn.execute(text("SELECT count(*), sum(count) FROM stack_samples_10m")).one() == rows

    try:
        upgrade_database(url, "0020_stack_group_rollups")
        step(key, (1, 3))
        upgrade_database(url, "0021_stack_counts_in_index")
        step(f"{key} INCLUDE (count)", (1, 6))
        downgrade_database(url, "0020_stack_group_rollups")
        step(key, (1, 9))
    finally:
        engine.dispose()
