# SPDX-License-Identifier: Apache-2.0
"""Sample retention deletes intervals older than the configured hours and keeps newer ones."""
import time

from sqlalchemy import text

from app.samples import prune_samples
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
    await agent.send_metrics(now - 2 * 3600 * 10**9, [("vmlinux", 0, 0, 7)])   # 2 h ago

    async def count(sql):
        async with backend.runtime.engine.connect() as conn:
            return (await conn.execute(text(sql), {"h": host_id})).scalar_one()

    await wait_until(lambda: count("SELECT count(*) = 2 FROM interval_totals WHERE host_id = :h"))
    deleted = await prune_samples(backend.runtime.engine, retention_hours=10)
    assert deleted >= 1
    assert await count("SELECT coalesce(sum(count), 0) FROM block_samples WHERE host_id = :h") == 7
    assert await count("SELECT count(*) FROM interval_totals WHERE host_id = :h") == 1
    await agent.close()
