# SPDX-License-Identifier: Apache-2.0
"""The live WebSocket: a bad token is refused with close code 4401; a signed-in console subscribes to the
topics of its views and receives their events (a host event when an agent connects, a samples event for
each metric batch), and nothing of topics it did not subscribe to."""

import asyncio
import json
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.scripted_agent import HANG_S


def _ws_url(backend, token):
    return backend.base_url.replace("http://", "ws://") + f"/api/v1/ws?token={token}"


async def _next(ws, predicate, timeout=HANG_S):
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


async def _subscribe(ws, *topics):
    await ws.send(json.dumps({"type": "subscribe", "topics": list(topics)}))


async def test_host_and_samples_events_are_pushed(backend, client, admin_token, unique):
    host_id = f"ws-{unique}"
    async with connect(_ws_url(backend, admin_token)) as ws:
        await _subscribe(ws, "hosts", f"host:{host_id}")
        await asyncio.sleep(0.2)
        agent = await backend.agent(host_id, kernel_tag=f"ws-{unique}")
        await agent.connect()
        event = await _next(ws, lambda m: m["type"] == "host" and m["host"]["id"] == host_id)
        assert event["host"]["online"] is True and event["host"]["hostname"] == f"host-{host_id}"
        done = await _next(
            ws, lambda m: m["type"] == "host" and m["host"]["id"] == host_id and m["host"]["catalog_complete"]
        )
        assert done["host"]["function_count"] == 54

        start = time.time_ns() // 1_000_000_000 * 1_000_000_000
        await agent.send_metrics(start, [("vmlinux", 0, 0, 12), ("vmlinux", 5, 0, 3)], user=1)
        samples = await _next(ws, lambda m: m["type"] == "samples" and m["host_id"] == host_id)
        assert samples["total_samples"] == 16
        assert [(t["name"], t["samples"]) for t in samples["top"]] == [("vfs_read", 12), ("do_sys_open", 3)]
        assert samples["interval_start"].startswith(time.strftime("%Y-%m-%dT", time.gmtime(start / 1e9)))

        await agent.close()
        gone = await _next(ws, lambda m: m["type"] == "host" and m["host"]["id"] == host_id and not m["host"]["online"])
        assert gone["host"]["catalog_complete"] is True


async def test_a_view_receives_only_the_topics_it_subscribed_to(backend, client, admin_token, unique):
    """A socket that shows another host's page gets none of this host's samples; one that shows the host
    list gets its host events but not its samples."""
    host_id = f"wsv-{unique}"
    async with (
        connect(_ws_url(backend, admin_token)) as other,
        connect(_ws_url(backend, admin_token)) as listing,
        connect(_ws_url(backend, admin_token)) as page,
    ):
        await _subscribe(other, "host:no-such-host")
        await _subscribe(listing, "hosts")
        await _subscribe(page, f"host:{host_id}")
        await asyncio.sleep(0.2)
        agent = await backend.agent(host_id, kernel_tag=f"wsv-{unique}")
        await agent.connect()
        await _next(
            listing, lambda m: m["type"] == "host" and m["host"]["id"] == host_id and m["host"]["catalog_complete"]
        )
        start = time.time_ns() // 1_000_000_000 * 1_000_000_000
        await agent.send_metrics(start, [("vmlinux", 0, 0, 4)])
        samples = await _next(page, lambda m: m["type"] == "samples")
        assert samples["host_id"] == host_id and samples["total_samples"] == 4
        await asyncio.sleep(0.5)
        await agent.close()
        for ws, allowed in ((other, set()), (listing, {"host", "ping"})):
            while True:
                try:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
                except TimeoutError:
                    break
                assert msg["type"] in allowed, msg
                if msg["type"] == "host":
                    assert msg["host"]["id"] != "no-such-host"
