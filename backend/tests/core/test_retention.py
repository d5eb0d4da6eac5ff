# SPDX-License-Identifier: Apache-2.0
"""Sample retention deletes intervals older than the configured hours and keeps newer ones."""

import time

from sqlalchemy import text

from app.storage.samples import prune_samples
from tests.scripted_agent import wait_until


async def test_retention_deletes_old_samples_only(backend, client, unique):
    host_id = f"ret-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"ret-{unique}")
    await agent.connect()

    async def ready():
        return (await client.get(f"/api/v1/hosts/{host_id}")).json()["catalog_complete"]

    await wait_until(ready)
    now = time.time_ns()
    # Both within the 24 h the backend accepts; retention of 10 h then removes only the older one.
    await agent.send_metrics(now - 20 * 3600 * 10**9, [("vmlinux", 0, 0, 5)])  # 20 h ago
    await agent.send_metrics(now - 2 * 3600 * 10**9, [("vmlinux", 0, 0, 7)])  # 2 h ago

    async def count(sql):
        async with backend.runtime.engine.connect() as conn:
            return (await conn.execute(text(sql), {"h": host_id})).scalar_one()

    await wait_until(lambda: count("SELECT count(*) = 2 FROM sample_intervals WHERE host_id = :h"))
    deleted = await prune_samples(backend.runtime.engine, retention_hours=10)
    assert deleted >= 1
    assert (
        await count("SELECT coalesce(sum(c), 0) FROM sample_intervals s, unnest(s.counts) AS c WHERE host_id = :h") == 7
    )
    assert await count("SELECT count(*) FROM sample_intervals WHERE host_id = :h") == 1
    await agent.close()


async def test_retention_deletes_audit_records_older_than_90_days_only(backend, unique):
    """docs/security.md: audit records older than HOTPATH_AUDIT_RETENTION_DAYS (default 90) are deleted.
    Runs the pass the backend's retention loop runs (maintain_series, with the session's own settings),
    on records a day either side of the limit."""
    from app.core.config import Settings
    from app.server import maintain_series

    assert Settings.model_fields["audit_retention_days"].default == 90
    assert backend.runtime.settings.audit_retention_days == 90
    target = f"audit-ret-{unique}"
    async with backend.runtime.engine.begin() as conn:
        for days in (91, 89):
            await conn.execute(
                text(
                    "INSERT INTO audit_log (at, actor, action, target, detail) "
                    "VALUES (now() - make_interval(days => :d), 'test', 'retention_probe', :t, "
                    "jsonb_build_object('days', :d))"
                ),
                {"d": days, "t": target},
            )
    await maintain_series(backend.runtime)
    kept = await backend.scalar(
        "SELECT coalesce(array_agg((detail->>'days')::int), '{}') FROM audit_log WHERE target = :t", t=target
    )
    assert kept == [89]
