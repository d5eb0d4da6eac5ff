# SPDX-License-Identifier: Apache-2.0
"""The agents connected to this replica: one session per host's stream (what its Hello and uploads
taught us), and the registry of those sessions with the catalog facts they share (complete pieces,
index maps, function names). The stream itself is app.agents.service; commands reach a session
through the registry (app.domain.commands)."""

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import grpc
from sqlalchemy.ext.asyncio import AsyncEngine

from app.protocol import measured_edges
from app.protocol.catalog_digest import PieceHasher
from app.protocol.proto import pb
from app.storage import catalog, samples


@dataclass
class Upload:
    """One catalog piece being received on one stream."""

    digest: str
    module: str
    staging: str
    base: int
    function_count: int
    block_count: int
    hasher: PieceHasher
    targets: catalog.TargetCheck
    next_seq: int = 0
    functions: int = 0
    blocks: int = 0
    started: float = field(default_factory=time.perf_counter)


@dataclass
class AgentSession:
    host_id: str
    session_id: str
    peer: str
    context: grpc.aio.ServicerContext
    task: asyncio.Task[None] | None
    instance_id: str = ""
    build: str = ""
    core_base: int = 0
    kernel_digests: list[str] = field(default_factory=list)  # Hello.modules by position
    refs: dict[str, Any] = field(default_factory=dict)  # digest -> pb.ModuleRef (every target's modules)
    piece_keys: dict[str, tuple[str, int]] = field(default_factory=dict)  # digest -> (build key, base for "?")
    uploads: dict[str, Upload] = field(default_factory=dict)  # digest -> upload in progress
    marks: dict[str, int] = field(default_factory=dict)  # instance id -> highest stored seq
    last_end: dict[str, datetime] = field(default_factory=dict)  # instance id -> end of its newest batch
    ahead_run: int = 0  # data batches in a row refused for lying ahead of our clock (CLOCK_AHEAD_RUN flags)
    measurement_rows: dict[str, int] = field(default_factory=dict)  # measurement id -> its rows
    # measurement id -> its function rows measured with their blocks, with their CFGs (edge checks)
    measurement_shapes: dict[str, dict[int, "measured_edges.FunctionShape"]] = field(default_factory=dict)
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    dropped_samples: int = 0
    known_stacks: set[int] = field(default_factory=set)  # stack ids stored for this host
    welcomed: bool = False
    closed: bool = False
    store_failed: bool = False  # a data message of this stream could not be stored: ack nothing more
    ending: bool = False  # the stream is being ended for that
    # The newest data message handed to the ingest writer: done once it (and, the writer being FIFO, every
    # earlier one of this stream) is stored or failed. A result waits for it (see AgentService._serve).
    last_stored: "asyncio.Future[None] | None" = None
    tokens: float = 0.0
    refilled: float = field(default_factory=time.monotonic)

    async def send(self, message: "pb.ServerMessage") -> None:
        async with self.write_lock:
            await self.context.write(message)

    def add_targets(self, reported: Iterable["pb.Target"]) -> None:
        """Learn the modules of reported targets (pb.Target), so their catalog pieces are accepted."""
        for t in reported:
            for m in t.modules:
                self.refs[m.digest] = m
                self.piece_keys[m.digest] = (f"elf:{m.build_id}", m.base_address)


class AgentRegistry:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessions: dict[str, AgentSession] = {}
        self.index_maps: dict[str, dict[int, tuple[int, int]]] = {}
        self.idle_ids: dict[str, set[int]] = {}  # digest -> indexes of its idle-loop functions
        self.name_cache: dict[int, str] = {}
        self.piece_owner: dict[str, str] = {}  # digest -> session id of the stream uploading it
        self.complete: set[str] = set()
        self.cleanups: set[asyncio.Task[None]] = set()  # disconnects being recorded
        self.peers: Counter[str] = Counter()  # open streams per peer address
        self.auth_failures: dict[str, tuple[float, int]] = {}  # peer address -> (window start, count)

    def online(self, host_id: str) -> bool:
        return host_id in self.sessions

    async def close_all(self) -> None:
        for session in list(self.sessions.values()):
            await end_session(session, grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        if self.cleanups:
            await asyncio.wait(set(self.cleanups), timeout=5)

    async def end_host(self, host_id: str, reason: str) -> None:
        """End a host's live stream (the host was retired or deleted)."""
        session = self.sessions.get(host_id)
        if session is not None:
            await end_session(session, grpc.StatusCode.PERMISSION_DENIED, reason)

    async def function_ids(self, digest: str) -> dict[int, tuple[int, int]] | None:
        if digest not in self.complete:
            return None
        mapping = self.index_maps.get(digest)
        if mapping is None:
            mapping = await catalog.index_map(self.engine, digest)
            self.index_maps[digest] = mapping
            self.idle_ids[digest] = await samples.idle_function_indexes(self.engine, digest)
        return mapping

    async def names(self, ids: list[int]) -> dict[int, str]:
        """Function names by id, cached (for the live samples events)."""
        missing = [i for i in ids if i not in self.name_cache]
        if missing:
            if len(self.name_cache) > 200_000:
                self.name_cache.clear()
            self.name_cache.update(await samples.function_names(self.engine, missing))
        return {i: self.name_cache.get(i, "") for i in ids}


async def end_session(session: AgentSession, code: grpc.StatusCode, reason: str) -> None:
    """End another handler's stream: send the status to the agent now, then stop that handler.
    (Cancelling the handler alone does not end the RPC on the wire.)"""
    session.closed = True
    try:
        await session.context.abort(code, reason)
    except Exception:  # noqa: BLE001, S110 - abort signals by raising, in our task
        pass
    if session.task is not None and session.task is not asyncio.current_task():
        session.task.cancel()
