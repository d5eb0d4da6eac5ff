# SPDX-License-Identifier: Apache-2.0
"""The live WebSocket: a bad token is refused with close code 4401; a signed-in console receives a host
event when an agent connects and a samples event for each metric batch."""
import asyncio
import json
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed


def _ws_url(backend, token):
    return backend.base_url.replace("http://", "ws://") + f"/api/v1/ws?token={token}"


async def _next(ws, predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError("expected WebSocket message did not arrive")
        msg = json.loads(await asyncio.wait_for(ws.recv(), left))
        if predicate(msg):
            return msg


async def test_bad_token_is_closed_with_4401(backend):
    async with connect(_ws_url(backend, "forged")) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 5)
    assert closed.value.rcvd.code == 4401


async def test_host_and_samples_events_are_pushed(backend, client, admin_token, unique):
    host_id = f"ws-{unique}"
    async with connect(_ws_url(backend, admin_token)) as ws:
        agent = await backend.agent(host_id, kernel_tag=f"ws-{unique}")
        await agent.connect()
        event = await _next(ws, lambda m: m["type"] == "host" and m["host"]["id"] == host_id)
        assert event["host"]["online"] is True and event["host"]["hostname"] == f"host-{host_id}"
        done = await _next(ws, lambda m: m["type"] == "host" and m["host"]["id"] == host_id
                           and m["host"]["catalog_complete"])
        assert done["host"]["function_count"] == 54

        start = time.time_ns() // 1_000_000_000 * 1_000_000_000
        await agent.send_metrics(start, [("vmlinux", 0, 0, 12), ("vmlinux", 5, 0, 3)], user=1)
        samples = await _next(ws, lambda m: m["type"] == "samples" and m["host_id"] == host_id)
        assert samples["total_samples"] == 16
        assert [(t["name"], t["samples"]) for t in samples["top"]] == [("vfs_read", 12), ("do_sys_open", 3)]
        assert samples["interval_start"].startswith(time.strftime("%Y-%m-%dT", time.gmtime(start / 1e9)))

        await agent.close()
        gone = await _next(ws, lambda m: m["type"] == "host" and m["host"]["id"] == host_id
                           and not m["host"]["online"])
        assert gone["host"]["catalog_complete"] is True
