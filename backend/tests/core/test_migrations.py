# SPDX-License-Identifier: Apache-2.0
"""The Alembic migrations apply to an empty database and downgrade back to nothing."""
from sqlalchemy import create_engine, inspect, text

from app.core.db import downgrade_database, upgrade_database
from tests.conftest import _recreate_database

TABLES = {"users", "audit_log", "hosts", "host_modules", "catalog_pieces", "functions", "function_code",
          "instruction_cache", "sample_intervals", "measurement_points", "sample_blocks_1m", "sample_blocks_1h",
          "sample_totals_1m", "sample_totals_1h", "measurement_points_1m", "measurement_points_1h", "series_state",
          "host_targets", "commands", "measurements", "measurement_resources", "enrolment_tokens",
          "enrolment_requests", "delivery_marks", "data_gaps", "plans", "stack_defs", "stack_samples"}


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


def test_listings_cached_with_a_probes_int3_are_dropped_and_others_kept(postgres_url):
    """0007: a listing an older agent decoded under a uprobe (int3 at a block start) is no longer served
    from the cache; a listing without int3 stays."""
    url = _recreate_database(postgres_url, "hotpath_migrations_0007")
    engine = create_engine(url)
    try:
        upgrade_database(url, "0006_measurement_edges")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO catalog_pieces (digest, module, function_count, block_count, complete) "
                              "VALUES ('d1', 'prog', 2, 2, true)"))
            conn.execute(text("""INSERT INTO instruction_cache (digest, index, instructions) VALUES
                ('d1', 0, '[[0, 1, "cc", "int3"], [1, 1, "56", "push rsi"]]'),
                ('d1', 1, '[[0, 2, "4156", "push r14"], [2, 1, "c3", "ret"]]')"""))
        upgrade_database(url)
        with engine.connect() as conn:
            left = conn.execute(text("SELECT index FROM instruction_cache ORDER BY index")).scalars().all()
        assert left == [1]
    finally:
        engine.dispose()
