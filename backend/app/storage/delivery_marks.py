# SPDX-License-Identifier: Apache-2.0
"""Reading an agent's delivery marks: per agent instance, the highest sequence number stored (written by the
ingest writer in the batch's own transaction, app.storage.ingest), so a batch resent after a reconnect is
acknowledged without being stored twice.

A host's marks are on the database that holds its series. With database nodes they are read there directly,
over the backend's connection to that node, bounded by the nodes' read bound (`nodes.on_host`): through the
coordinator's foreign table a node that hangs held the agent's stream, and the coordinator's connection that
read opened, for as long as the kernel kept the connection; every reconnect of that node's agents took
another, until the coordinator's pool was spent and every host's Hello waited."""

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.storage import nodes

RECENT = 32  # instances a Hello reads the marks of (an agent restarted more often starts anew)


async def recent(engine: AsyncEngine, host_id: str) -> dict[str, int]:
    """The host's marks of its most recent agent instances: {instance id: sequence number}."""

    async def read(conn: AsyncConnection) -> dict[str, int]:
        rows = await conn.execute(
            text("""
            SELECT instance_id, seq FROM delivery_marks WHERE host_id = :h ORDER BY updated_at DESC LIMIT :n"""),
            {"h": host_id, "n": RECENT},
        )
        return {r.instance_id: r.seq for r in rows}

    return await nodes.on_host(engine, host_id, read)


async def of_instance(engine: AsyncEngine, host_id: str, instance: str) -> int:
    """The mark of one agent instance of the host (0: none stored)."""

    async def read(conn: AsyncConnection) -> int:
        found = await conn.execute(
            text("SELECT seq FROM delivery_marks WHERE host_id = :h AND instance_id = :i"),
            {"h": host_id, "i": instance},
        )
        return found.scalar_one_or_none() or 0

    return await nodes.on_host(engine, host_id, read)
