# SPDX-License-Identifier: Apache-2.0
"""Background asyncio tasks of the backend's long-lived parts (bus, ingest writer, command sweeper)."""

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task and wait until it has ended; nothing if there is none."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def cancel_all(tasks: Iterable[asyncio.Task[Any]]) -> int:
    """Cancel every task, then wait until each has ended; how many were still running when cancelled."""
    running = [t for t in tasks if not t.done()]
    for t in running:
        t.cancel()
    for t in running:
        with contextlib.suppress(asyncio.CancelledError):
            await t
    return len(running)
