# SPDX-License-Identifier: Apache-2.0
"""The Alembic migrations apply to an empty database and downgrade back to nothing."""
from sqlalchemy import create_engine, inspect

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
