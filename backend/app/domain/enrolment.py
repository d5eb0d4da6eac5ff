# SPDX-License-Identifier: Apache-2.0
"""Host enrolment and the life of a host's identity: one-time enrolment tokens, pending requests an
admin approves or rejects, certificates issued for a host id, retiring and deleting hosts.

An enrolment token is shown once, when an admin creates it, and only its SHA-256 is stored; it is
single-use and expires. A request without a token is recorded as pending per host id *and key* (at
most `max_pending_enrolments` pending in all, counted under a lock; at most
`enrolment_requests_per_minute` new ones per peer address; forgotten after `enrolment_request_ttl_s`)
until an admin decides; a second key asking for the same host id is a second, conflicting request,
never a replacement of the first. An approved request is answered with a certificate when the agent
asks again with the same key. A host that holds a certificate is never enrolled without a token
created for its host id. Issuing a certificate stores its
fingerprint on the host: from then on only that certificate can open the host's stream, so enrolling
again replaces the old credential, and retiring or deleting the host revokes it.
"""

import hashlib
import logging
import secrets
import time
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from cryptography.hazmat.primitives import serialization
from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.core.config import Settings
from app.core.pki import CsrError, Pki, parse_csr
from app.domain.sessions import AgentRegistry
from app.protocol import agent_input
from app.protocol.proto import pb
from app.storage import audit_log, nodes, samples
from app.storage.models import EnrolmentRequest, EnrolmentToken, Host

log = logging.getLogger("hotpath.enrolment")
TOKEN_PREFIX = "hpe_"


class DecisionError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class _AddressWindow:
    """How many new enrolment requests each peer address made in the last minute (per replica)."""

    def __init__(self) -> None:
        self.times: dict[str, deque[float]] = {}

    def admit(self, peer: str, per_minute: int) -> bool:
        address = peer.rsplit(":", 1)[0] if peer.count(":") >= 2 else peer  # without the port
        now = time.monotonic()
        window = self.times.setdefault(address, deque())
        while window and now - window[0] > 60:
            window.popleft()
        if len(window) >= per_minute:
            return False
        window.append(now)
        if len(self.times) > 10000:  # forget idle addresses
            for key in [k for k, v in self.times.items() if not v or now - v[-1] > 60]:
                self.times.pop(key, None)
        return True


_requests_by_address = _AddressWindow()
# An agent whose Enroll answer was lost (a deadline passed after the backend had issued the certificate)
# asks again with the same token and key: the same host id and key may use the token again this long
# after its first use, while the host still holds the certificate it issued.
REPLAY_WINDOW_S = 600
_PENDING_LOCK = 0x686F7470  # advisory lock key ("hotp") serialising the pending-request cap


class EnrolmentError(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code


@dataclass
class Issued:
    certificate_pem: str
    not_after: datetime


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def key_fingerprint(csr_pem: str) -> str:
    """SHA-256 (hex) of the CSR's public key as DER SubjectPublicKeyInfo: on the host,
    `openssl pkey -in key.pem -pubout -outform DER | sha256sum` gives the same."""
    from cryptography import x509

    key = (
        x509.load_pem_x509_csr(csr_pem.encode())
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return hashlib.sha256(key).hexdigest()


async def create_token(
    session: AsyncSession, actor: str, note: str, hours: float, host_id: str | None = None
) -> tuple[EnrolmentToken, str]:
    """A new one-time token (for one host id, if given); the secret is returned once and never stored."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = EnrolmentToken(
        id=uuid.uuid4(),
        token_hash=hash_token(secret),
        note=note,
        host_id=host_id,
        created_by=actor,
        expires_at=datetime.now(UTC) + timedelta(hours=hours),
    )
    session.add(token)
    audit_log.record(
        session, actor, "enrolment_token_created", str(token.id), {"note": note, "hours": hours, "host_id": host_id}
    )
    await session.flush()
    return token, secret


async def _issue(
    pki: Pki,
    db: AsyncSession,
    host_id: str,
    hostname: str,
    csr_pem: str,
    actor: str,
    how: str,
    token_id: uuid.UUID | None = None,
) -> Issued:
    certificate, fp, not_after = pki.sign_host_csr(csr_pem, host_id)
    if token_id is not None:  # what a retry of this token's lost answer must find the host still holding
        await db.execute(
            text("UPDATE enrolment_tokens SET used_cert_fingerprint = :c WHERE id = :i"), {"c": fp, "i": token_id}
        )
    now = datetime.now(UTC)
    values = {"cert_fingerprint": fp, "cert_not_after": not_after, "enrolled_at": now}
    await db.execute(
        insert(Host)
        .values(id=host_id, hostname=hostname, online=False, **values)
        .on_conflict_do_update(index_elements=[Host.id], set_=values)
    )
    audit_log.record(db, actor, "host_enrolled", host_id, {"how": how, "fingerprint": fp, "hostname": hostname})
    await db.commit()
    log.info("host %s enrolled (%s)", host_id, how)
    return Issued(certificate, not_after)


async def enroll(
    settings: Settings, sessionmaker: async_sessionmaker[AsyncSession], pki: Pki, request: "pb.EnrollRequest", peer: str
) -> Issued:
    """Answer an EnrollRequest: a certificate, or an EnrolmentError saying why not (yet)."""
    try:
        host_id = agent_input.text(request.host_id, "EnrollRequest.host_id", agent_input.MAX_HOST_ID)
        hostname = agent_input.text(request.hostname, "EnrollRequest.hostname", agent_input.MAX_HOSTNAME)
        agent_input.text(request.token, "EnrollRequest.token", 128, empty=True)
        parse_csr(request.csr_pem, host_id)
        fingerprint = key_fingerprint(request.csr_pem)
    except (agent_input.InvalidInput, CsrError, ValueError) as exc:
        raise EnrolmentError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
    async with sessionmaker() as db:
        host = await db.get(Host, host_id)
        if host is not None and host.status == "retired":
            raise EnrolmentError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"host {host_id} is retired; an admin must delete it before it can enrol again",
            )
        if request.token:
            token = (
                await db.execute(
                    text("""
                SELECT id, host_id, created_by, used_at IS NOT NULL AS retry, used_cert_fingerprint
                FROM enrolment_tokens
                WHERE token_hash = :t AND revoked_at IS NULL AND expires_at > now()
                    AND (used_at IS NULL OR (used_by_host = :h AND used_key_fingerprint = :f
                        AND used_at > now() - make_interval(secs => :w)))
                FOR UPDATE"""),
                    {"t": hash_token(request.token), "h": host_id, "f": fingerprint, "w": REPLAY_WINDOW_S},
                )
            ).first()
            if (
                token is not None
                and token.retry
                and (host is None or host.cert_fingerprint != token.used_cert_fingerprint)
            ):
                token = None  # the host was enrolled again since (or deleted): the retry is over
            if token is None or (token.host_id is not None and token.host_id != host_id):
                audit_log.record(db, f"agent@{peer}", "enrolment_refused", host_id, {"reason": "bad token"})
                await db.commit()
                raise EnrolmentError(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "the enrolment token is unknown, used, revoked, expired or for another host",
                )
            if token.retry:
                # The same host id and key that used this token ask again: their answer was lost (the
                # agent's deadline passed after the certificate was issued). Issue again for that key.
                return await _issue(
                    pki,
                    db,
                    host_id,
                    hostname,
                    request.csr_pem,
                    f"token of {token.created_by}",
                    "enrolment token (asked again: its first answer was lost)",
                    token.id,
                )
            if host is not None and host.cert_fingerprint is not None and token.host_id != host_id:
                # A token for any host must not replace a host's credential: that would let its holder
                # take over an enrolled host.
                audit_log.record(db, f"agent@{peer}", "enrolment_refused", host_id, {"reason": "already enrolled"})
                await db.commit()
                raise EnrolmentError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"host {host_id} is enrolled already: enrolling it again needs a token created "
                    "for this host id (or delete the host first)",
                )
            await db.execute(
                text(
                    "UPDATE enrolment_tokens SET used_at = now(), used_by_host = :h, used_key_fingerprint = :f "
                    "WHERE id = :i"
                ),
                {"h": host_id, "f": fingerprint, "i": token.id},
            )
            used = token
            await db.execute(text("DELETE FROM enrolment_requests WHERE host_id = :h"), {"h": host_id})
            return await _issue(
                pki, db, host_id, hostname, request.csr_pem, f"token of {used.created_by}", "enrolment token", used.id
            )
        if host is not None and host.cert_fingerprint is not None:
            # Only a token created for this host id may replace an enrolled host's credential: an approved
            # tokenless request would hand the host's identity to whoever asked.
            audit_log.record(
                db,
                f"agent@{peer}",
                "enrolment_refused",
                host_id,
                {"reason": "already enrolled", "key_fingerprint": fingerprint},
            )
            await db.commit()
            raise EnrolmentError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"host {host_id} is enrolled already: enrolling it again needs a token created "
                "for this host id (or delete the host first)",
            )
        mine = (
            await db.execute(
                select(EnrolmentRequest).where(
                    EnrolmentRequest.host_id == host_id, EnrolmentRequest.key_fingerprint == fingerprint
                )
            )
        ).scalar_one_or_none()
        if mine is not None and _expired(mine, settings.enrolment_request_ttl_s):
            await db.delete(mine)
            await db.flush()
            mine = None
        if mine is not None and mine.status == "approved":
            await db.execute(text("DELETE FROM enrolment_requests WHERE host_id = :h"), {"h": host_id})
            return await _issue(
                pki, db, host_id, hostname, request.csr_pem, mine.decided_by or "admin", "approved by an admin"
            )
        if mine is not None and mine.status == "rejected":
            raise EnrolmentError(
                grpc.StatusCode.PERMISSION_DENIED, f"enrolment of host {host_id} with this key was rejected"
            )
        if mine is None:
            if not _requests_by_address.admit(peer, settings.enrolment_requests_per_minute):
                raise EnrolmentError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "too many enrolment requests from this address; wait a minute or ask an admin for a token",
                )
            # Count and insert under one lock, so concurrent requests cannot pass the cap together.
            await db.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PENDING_LOCK})
            await _delete_expired(db, settings.enrolment_request_ttl_s)
            count = (
                await db.execute(text("SELECT count(*) FROM enrolment_requests WHERE status = 'pending'"))
            ).scalar_one()
            if count >= settings.max_pending_enrolments:
                await db.commit()
                raise EnrolmentError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "too many enrolments wait for approval; ask an admin for a token",
                )
            others = (
                await db.execute(
                    text(
                        "SELECT count(*) FILTER (WHERE key_fingerprint <> :f), "
                        "count(*) FILTER (WHERE key_fingerprint = :f) "
                        "FROM enrolment_requests WHERE host_id = :h"
                    ),
                    {"h": host_id, "f": fingerprint},
                )
            ).one()
            if others[1]:  # the same key asked concurrently and won the lock: nothing to add
                await db.commit()
                raise EnrolmentError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"host {host_id} waits for an admin to approve its enrolment in the console "
                    f"(key SHA256:{fingerprint})",
                )
            db.add(
                EnrolmentRequest(
                    id=uuid.uuid4(),
                    host_id=host_id,
                    key_fingerprint=fingerprint,
                    hostname=hostname,
                    csr_pem=request.csr_pem,
                    peer=peer[:256],
                )
            )
            audit_log.record(
                db,
                f"agent@{peer}",
                "enrolment_requested",
                host_id,
                {"hostname": hostname, "key_fingerprint": fingerprint, "other_keys": others[0]},
            )
        else:
            mine.hostname, mine.peer = hostname, peer[:256]
        await db.commit()
    raise EnrolmentError(
        grpc.StatusCode.FAILED_PRECONDITION,
        f"host {host_id} waits for an admin to approve its enrolment in the console (key SHA256:{fingerprint})",
    )


def _expired(request: EnrolmentRequest, ttl_s: float) -> bool:
    at = request.decided_at or request.requested_at
    return at is not None and at < datetime.now(UTC) - timedelta(seconds=ttl_s)


async def _delete_expired(db: AsyncSession, ttl_s: float) -> int:
    """Forget requests older than the TTL (pending ones by when they asked, decided ones by the decision)."""
    result = await db.execute(
        text("""
        DELETE FROM enrolment_requests
        WHERE coalesce(decided_at, requested_at) < now() - make_interval(secs => :ttl)"""),
        {"ttl": ttl_s},
    )
    deleted: int = result.rowcount  # type: ignore[attr-defined]
    return deleted


async def decide(session: AsyncSession, request_id: uuid.UUID, approve: bool, actor: str) -> EnrolmentRequest:
    """Approve or reject one pending request. Approving one key rejects the other keys that asked for the
    same host id; a host that is enrolled already cannot be approved (it needs a token for its id)."""
    request = (
        await session.execute(select(EnrolmentRequest).where(EnrolmentRequest.id == request_id).with_for_update())
    ).scalar_one_or_none()
    if request is None or request.status != "pending":
        raise DecisionError(404, "No pending enrolment request with this id")
    now = datetime.now(UTC)
    if approve:
        host = await session.get(Host, request.host_id)
        if host is not None and host.cert_fingerprint is not None:
            raise DecisionError(
                409, f"Host {request.host_id} is enrolled already: create a token for its host id to enrol it again"
            )
        others = (
            (
                await session.execute(
                    select(EnrolmentRequest)
                    .where(
                        EnrolmentRequest.host_id == request.host_id,
                        EnrolmentRequest.id != request.id,
                        EnrolmentRequest.status == "pending",
                    )
                    .with_for_update()
                )
            )
            .scalars()
            .all()
        )
        for other in others:
            other.status, other.decided_by, other.decided_at = "rejected", actor, now
            audit_log.record(
                session,
                actor,
                "enrolment_rejected",
                other.host_id,
                {
                    "hostname": other.hostname,
                    "key_fingerprint": other.key_fingerprint,
                    "reason": f"another key ({request.key_fingerprint}) was approved for this host id",
                },
            )
    request.status = "approved" if approve else "rejected"
    request.decided_by, request.decided_at = actor, now
    audit_log.record(
        session,
        actor,
        "enrolment_approved" if approve else "enrolment_rejected",
        request.host_id,
        {"hostname": request.hostname, "key_fingerprint": request.key_fingerprint},
    )
    await session.commit()
    return request


async def reject_many(session: AsyncSession, request_ids: list[uuid.UUID] | None, actor: str) -> int:
    """Reject the given pending requests, or every pending request when no ids are given."""
    query = select(EnrolmentRequest).where(EnrolmentRequest.status == "pending")
    if request_ids is not None:
        query = query.where(EnrolmentRequest.id.in_(request_ids))
    requests = (await session.execute(query.with_for_update())).scalars().all()
    now = datetime.now(UTC)
    for request in requests:
        request.status, request.decided_by, request.decided_at = "rejected", actor, now
        audit_log.record(
            session,
            actor,
            "enrolment_rejected",
            request.host_id,
            {"hostname": request.hostname, "key_fingerprint": request.key_fingerprint, "bulk": True},
        )
    await session.commit()
    return len(requests)


async def list_tokens(session: AsyncSession) -> list[EnrolmentToken]:
    return list(
        (await session.execute(select(EnrolmentToken).order_by(EnrolmentToken.created_at.desc()).limit(200))).scalars()
    )


async def revoke_token(session: AsyncSession, token_id: uuid.UUID, actor: str) -> bool:
    token = await session.get(EnrolmentToken, token_id)
    if token is None:
        return False
    if token.revoked_at is None and token.used_at is None:
        token.revoked_at = datetime.now(UTC)
        audit_log.record(session, actor, "enrolment_token_revoked", str(token_id), {"note": token.note})
    await session.commit()
    return True


_REQUESTS = """
    SELECT r.id, r.host_id, r.key_fingerprint, r.hostname, r.peer, r.requested_at, r.status, r.decided_by,
           r.decided_at,
           (SELECT count(*) FROM enrolment_requests o WHERE o.host_id = r.host_id AND o.id <> r.id
                                                       AND o.status = 'pending') AS conflicting,
           (h.cert_fingerprint IS NOT NULL) AS host_enrolled
    FROM enrolment_requests r LEFT JOIN hosts h ON h.id = r.host_id"""


async def list_requests(session: AsyncSession, ttl_s: float) -> list[dict[str, Any]]:
    """The newest requests (expired ones are forgotten first), each with how many other keys ask for the
    same host id and whether that host holds a certificate already."""
    await _delete_expired(session, ttl_s)
    await session.commit()
    rows = await session.execute(text(_REQUESTS + " ORDER BY r.requested_at DESC, r.id LIMIT 2000"))
    return [dict(r) for r in rows.mappings()]


async def get_request(session: AsyncSession, request_id: uuid.UUID) -> dict[str, Any]:
    row = (await session.execute(text(_REQUESTS + " WHERE r.id = :i"), {"i": request_id})).mappings().one()
    return dict(row)


async def retire_host(agents: AgentRegistry, session: AsyncSession, host_id: str, actor: str) -> bool:
    host = await session.get(Host, host_id)
    if host is None:
        return False
    host.status, host.retired_at, host.cert_fingerprint, host.online = "retired", datetime.now(UTC), None, False
    audit_log.record(session, actor, "host_retired", host_id, {"hostname": host.hostname})
    await session.commit()
    await agents.end_host(host_id, "this host was retired by an admin")
    return True


async def delete_host(agents: AgentRegistry, session: AsyncSession, host_id: str, actor: str) -> bool:
    host = await session.get(Host, host_id)
    if host is None:
        return False
    hostname = host.hostname
    await agents.end_host(host_id, "this host was deleted by an admin")
    node = await nodes.node_of(host_id)
    if node is not None:
        # Its series and delivery marks on its database node, committed first: a failure leaves the host
        # to be deleted again (the coordinator's rows below go with its own transaction).
        async with AsyncSession(node.engine) as on_node:
            await samples.delete_host_series(on_node, host_id)
            await on_node.execute(text("DELETE FROM delivery_marks WHERE host_id = :h"), {"h": host_id})
            await on_node.commit()
    await samples.delete_host_series(session, host_id)
    await session.execute(text("DELETE FROM enrolment_requests WHERE host_id = :h"), {"h": host_id})
    await session.execute(text("DELETE FROM hosts WHERE id = :h"), {"h": host_id})
    audit_log.record(session, actor, "host_deleted", host_id, {"hostname": hostname})
    await session.commit()
    return True
