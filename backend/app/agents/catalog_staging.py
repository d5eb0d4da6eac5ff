# SPDX-License-Identifier: Apache-2.0
"""Catalog pieces from agents: staged per upload, stored under their digest once complete and verified,
asked for again from another host that has them when an upload fails or its stream ends.
"""

import asyncio
import logging
import time
import uuid

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.agents.base import StreamBase
from app.domain.sessions import AgentSession, Upload
from app.protocol import agent_input
from app.protocol.agent_input import InvalidInput
from app.protocol.catalog_digest import PieceHasher
from app.protocol.proto import pb
from app.storage import catalog, targets

log = logging.getLogger("hotpath.agents")


class CatalogStaging(StreamBase):
    async def _on_targets(self, session: AgentSession, update: "pb.TargetsUpdate") -> None:
        """The agent's targets changed: record them, and ask for the new modules' catalog pieces."""
        agent_input.check_targets(update.targets)
        async with self.runtime.engine.begin() as conn:
            await targets.store(conn, session.host_id, update.targets, complete_list=True)
        session.add_targets(t for t in update.targets if t.state == pb.TARGET_STATE_ATTACHED)
        await self.request_missing(session)
        self.runtime.hub.publish(f"host:{session.host_id}", {"type": "targets", "host_id": session.host_id})

    async def request_missing(self, session: AgentSession) -> None:
        """Ask this stream for the catalog pieces of its modules that nobody stored or is uploading."""
        registry = self.registry
        candidates = [d for d in session.refs if d not in registry.complete and d not in session.uploads]
        if not candidates:
            return
        async with self.runtime.engine.connect() as conn:
            stored = {
                r[0]
                for r in await conn.execute(
                    text("SELECT digest FROM catalog_pieces WHERE digest = ANY(:d) AND complete"), {"d": candidates}
                )
            }
        registry.complete |= stored
        live = {s.session_id for s in registry.sessions.values()}
        wanted = [d for d in candidates if d not in stored and registry.piece_owner.get(d) not in live]
        if wanted:
            await session.send(pb.ServerMessage(catalog_request=pb.CatalogRequest(digests=wanted)))

    async def _on_chunk(self, session: AgentSession, chunk: "pb.CatalogChunk") -> None:
        registry = self.registry
        digest = chunk.digest
        ref = session.refs.get(digest)
        if ref is None:
            raise InvalidInput(
                f"catalog chunk for digest {agent_input.excerpt(digest, 16)} that Hello did not announce"
            )
        if chunk.module != ref.name:
            raise InvalidInput(
                f"catalog chunk for {digest[:16]} names module {agent_input.excerpt(chunk.module)}, "
                f"Hello named {agent_input.excerpt(ref.name)}"
            )
        upload = session.uploads.get(digest)
        begin = upload is None
        if upload is None:
            if digest in registry.complete:
                return  # another host stored it meanwhile
            if chunk.seq != 0:
                owner = registry.piece_owner.get(digest)
                if owner is not None and owner != session.session_id:
                    return  # chunks of a piece this stream was told to leave to another one
                raise InvalidInput(f"catalog chunk {chunk.seq} of {digest[:16]} arrived before chunk 0")
            owner = registry.piece_owner.get(digest)
            if owner is not None and any(s.session_id == owner for s in registry.sessions.values()):
                return  # another stream is uploading this piece; we ask this one again if that fails
            registry.piece_owner[digest] = session.session_id
            build, outside_base = session.piece_keys.get(digest, (session.build, session.core_base))
            upload = Upload(
                digest=digest,
                module=ref.name,
                staging=f"{catalog.STAGING_PREFIX}{uuid.uuid4().hex}",
                base=ref.base_address,
                function_count=ref.function_count,
                block_count=ref.block_count,
                hasher=PieceHasher(build, ref.name, ref.function_count, outside_base),
                targets=catalog.TargetCheck(ref.name),
            )
            # Recorded before its staging row is made, and the row made inside the try: a stream that ends
            # while the row's transaction commits (its handler cancelled there) still discards it.
            session.uploads[digest] = upload
        try:
            if begin:
                await catalog.begin_upload(
                    self.runtime.engine, upload.staging, ref.name, ref.function_count, ref.block_count
                )
            if chunk.seq != upload.next_seq:
                raise InvalidInput(f"catalog chunk {chunk.seq} of {digest[:16]} where {upload.next_seq} was due")
            upload.next_seq += 1
            for f in chunk.functions:
                upload.blocks += agent_input.check_function(f, upload.functions)
                upload.functions += 1
            if upload.functions > upload.function_count or upload.blocks > upload.block_count:
                raise InvalidInput(
                    f"catalog {digest[:16]} holds more functions or blocks than Hello announced "
                    f"({upload.function_count} functions, {upload.block_count} blocks)"
                )
            upload.hasher.add(chunk.functions)
            stored_fns, _, _ = await catalog.store_chunk(
                self.runtime.engine, upload.staging, upload.base, chunk.functions, upload.targets
            )
            self.runtime.metrics.catalog_functions.inc(stored_fns)
            if chunk.last:
                await self._finish_upload(session, upload)
        except BaseException:
            session.uploads.pop(digest, None)
            await self._abandon_upload(session, upload, "failed")
            raise

    async def _finish_upload(self, session: AgentSession, upload: Upload) -> None:
        digest = upload.digest
        if upload.functions != upload.function_count or upload.blocks != upload.block_count:
            raise InvalidInput(
                f"catalog {digest[:16]} ended after {upload.functions} functions and "
                f"{upload.blocks} blocks; Hello announced {upload.function_count} and "
                f"{upload.block_count}"
            )
        actual = upload.hasher.hexdigest()
        if actual != digest:
            await self._audit(
                f"agent:{session.host_id}",
                "catalog_rejected",
                session.host_id,
                {"digest": digest, "recomputed": actual, "module": upload.module},
            )
            raise InvalidInput(f"catalog {digest[:16]}: its content hashes to {actual[:16]}, not to its digest")
        wrong = await catalog.verify_targets(self.runtime.engine, upload.staging, upload.targets)
        if wrong is not None:
            await self._audit(
                f"agent:{session.host_id}",
                "catalog_rejected",
                session.host_id,
                {"digest": digest, "module": upload.module, "reason": wrong[:512]},
            )
            raise InvalidInput(f"catalog {digest[:16]}: {wrong}")
        session.uploads.pop(digest, None)
        stored = await catalog.promote_upload(
            self.runtime.engine, upload.staging, digest, upload.module, upload.function_count, upload.block_count
        )
        self.registry.complete.add(digest)
        self.registry.piece_owner.pop(digest, None)
        log.info(
            "catalog %s: %s (%s) %d functions in %.2f s from host %s",
            "stored" if stored else "already stored",
            upload.module,
            digest[:16],
            upload.functions,
            time.perf_counter() - upload.started,
            session.host_id,
        )
        async with self.runtime.sessionmaker() as db:
            hosts = (
                (await db.execute(text("SELECT DISTINCT host_id FROM host_modules WHERE digest = :d"), {"d": digest}))
                .scalars()
                .all()
            )
        for host_id in hosts:
            await self._publish_host(host_id)

    async def _abandon_upload(self, session: AgentSession, upload: Upload, why: str) -> None:
        """Discard an upload that failed or whose stream ended, and ask another host that has the piece."""
        if self.registry.piece_owner.get(upload.digest) == session.session_id:
            self.registry.piece_owner.pop(upload.digest, None)
        try:
            await asyncio.shield(catalog.discard_upload(self.runtime.engine, upload.staging))
        except (DBAPIError, OSError):
            log.warning("could not discard the staged catalog %s now; it is removed at the next start", upload.staging)
        log.info(
            "catalog %s (%s) from host %s %s after %d functions: discarded",
            upload.module,
            upload.digest[:16],
            session.host_id,
            why,
            upload.functions,
        )
        for other in list(self.registry.sessions.values()):
            if other is not session and other.welcomed and not other.closed and upload.digest in other.refs:
                try:
                    await other.send(pb.ServerMessage(catalog_request=pb.CatalogRequest(digests=[upload.digest])))
                    self.registry.piece_owner[upload.digest] = other.session_id
                    other.uploads.pop(upload.digest, None)
                    log.info("asked host %s for catalog %s", other.host_id, upload.digest[:16])
                    break
                except Exception:  # noqa: BLE001 - that stream is ending too; try the next one
                    continue
