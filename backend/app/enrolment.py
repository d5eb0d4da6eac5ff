# SPDX-License-Identifier: Apache-2.0
"""Host enrolment and the life of a host's identity: one-time enrolment tokens, pending requests an
admin approves or rejects, certificates issued for a host id, retiring and deleting hosts.

An enrolment token is shown once, when an admin creates it, and only its SHA-256 is stored; it is
single-use and expires. A request without a token is recorded as pending (at most
`max_pending_enrolments` of them) until an admin decides; an approved request is answered with a
certificate when the agent asks again with the same key. Issuing a certificate stores its
fingerprint on the host: from then on only that certificate can open the host's stream, so enrolling
again replaces the old credential, and retiring or deleting the host revokes it.
"""
import hashlib
import logging
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import grpc
from cryptography.hazmat.primitives import serialization
from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app import agent_input, crud, samples
from app.core.pki import CsrError, parse_csr
from app.models import EnrolmentRequest, EnrolmentToken, Host
from app.runtime import Runtime

log = logging.getLogger("hotpath.enrolment")
TOKEN_PREFIX = "hpe_"


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


def _public_key(csr_pem: str) -> bytes:
    from cryptography import x509

    return x509.load_pem_x509_csr(csr_pem.encode()).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


async def create_token(session: AsyncSession, actor: str, note: str, hours: float,
                       host_id: str | None = None) -> tuple[EnrolmentToken, str]:
    """A new one-time token (for one host id, if given); the secret is returned once and never stored."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = EnrolmentToken(id=uuid.uuid4(), token_hash=hash_token(secret), note=note, host_id=host_id,
                           created_by=actor, expires_at=datetime.now(UTC) + timedelta(hours=hours))
    session.add(token)
    crud.audit(session, actor, "enrolment_token_created", str(token.id),
               {"note": note, "hours": hours, "host_id": host_id})
    await session.flush()
    return token, secret


async def _issue(runtime: Runtime, db: AsyncSession, host_id: str, hostname: str, csr_pem: str, actor: str,
                 how: str) -> Issued:
    certificate, fp, not_after = runtime.pki.sign_host_csr(csr_pem, host_id)
    now = datetime.now(UTC)
    values = {"cert_fingerprint": fp, "cert_not_after": not_after, "enrolled_at": now}
    await db.execute(insert(Host).values(id=host_id, hostname=hostname, online=False, **values)
                     .on_conflict_do_update(index_elements=[Host.id], set_=values))
    crud.audit(db, actor, "host_enrolled", host_id, {"how": how, "fingerprint": fp, "hostname": hostname})
    await db.commit()
    log.info("host %s enrolled (%s)", host_id, how)
    return Issued(certificate, not_after)


async def enroll(runtime: Runtime, request, peer: str) -> Issued:
    """Answer an EnrollRequest: a certificate, or an EnrolmentError saying why not (yet)."""
    try:
        host_id = agent_input.text(request.host_id, "EnrollRequest.host_id", agent_input.MAX_HOST_ID)
        hostname = agent_input.text(request.hostname, "EnrollRequest.hostname", agent_input.MAX_HOSTNAME)
        agent_input.text(request.token, "EnrollRequest.token", 128, empty=True)
        parse_csr(request.csr_pem, host_id)
    except (agent_input.InvalidInput, CsrError) as exc:
        raise EnrolmentError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
    async with runtime.sessionmaker() as db:
        host = await db.get(Host, host_id)
        if host is not None and host.status == "retired":
            raise EnrolmentError(grpc.StatusCode.PERMISSION_DENIED,
                                 f"host {host_id} is retired; an admin must delete it before it can enrol again")
        if request.token:
            token = (await db.execute(text("""
                SELECT id, host_id, created_by FROM enrolment_tokens
                WHERE token_hash = :t AND used_at IS NULL AND revoked_at IS NULL AND expires_at > now()
                FOR UPDATE"""), {"t": hash_token(request.token)})).first()
            if token is None or (token.host_id is not None and token.host_id != host_id):
                crud.audit(db, f"agent@{peer}", "enrolment_refused", host_id, {"reason": "bad token"})
                await db.commit()
                raise EnrolmentError(grpc.StatusCode.UNAUTHENTICATED,
                                     "the enrolment token is unknown, used, revoked, expired or for another host")
            if host is not None and host.cert_fingerprint is not None and token.host_id != host_id:
                # A token for any host must not replace a host's credential: that would let its holder
                # take over an enrolled host.
                crud.audit(db, f"agent@{peer}", "enrolment_refused", host_id, {"reason": "already enrolled"})
                await db.commit()
                raise EnrolmentError(grpc.StatusCode.PERMISSION_DENIED,
                                     f"host {host_id} is enrolled already: enrolling it again needs a token created "
                                     "for this host id (or delete the host first)")
            await db.execute(text("UPDATE enrolment_tokens SET used_at = now(), used_by_host = :h WHERE id = :i"),
                             {"h": host_id, "i": token.id})
            used = token
            await db.execute(text("DELETE FROM enrolment_requests WHERE host_id = :h"), {"h": host_id})
            return await _issue(runtime, db, host_id, hostname, request.csr_pem, f"token of {used.created_by}",
                                "enrolment token")
        pending = await db.get(EnrolmentRequest, host_id)
        if pending is not None and pending.status == "approved":
            if _public_key(pending.csr_pem) != _public_key(request.csr_pem):
                raise EnrolmentError(grpc.StatusCode.PERMISSION_DENIED,
                                     "the approved request was made with another key; ask again")
            await db.delete(pending)
            return await _issue(runtime, db, host_id, hostname, request.csr_pem, pending.decided_by or "admin",
                                "approved by an admin")
        if pending is not None and pending.status == "rejected":
            raise EnrolmentError(grpc.StatusCode.PERMISSION_DENIED, f"enrolment of host {host_id} was rejected")
        if pending is None:
            count = (await db.execute(text(
                "SELECT count(*) FROM enrolment_requests WHERE status = 'pending'"))).scalar_one()
            if count >= runtime.settings.max_pending_enrolments:
                raise EnrolmentError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                     "too many enrolments wait for approval; ask an admin for a token")
            db.add(EnrolmentRequest(host_id=host_id, hostname=hostname, csr_pem=request.csr_pem, peer=peer[:256]))
            crud.audit(db, f"agent@{peer}", "enrolment_requested", host_id, {"hostname": hostname})
        else:
            pending.csr_pem, pending.hostname, pending.peer = request.csr_pem, hostname, peer[:256]
        await db.commit()
    raise EnrolmentError(grpc.StatusCode.FAILED_PRECONDITION,
                         f"host {host_id} waits for an admin to approve its enrolment in the console")


async def decide(session: AsyncSession, host_id: str, approve: bool, actor: str) -> EnrolmentRequest | None:
    request = await session.get(EnrolmentRequest, host_id)
    if request is None or request.status != "pending":
        return None
    request.status = "approved" if approve else "rejected"
    request.decided_by, request.decided_at = actor, datetime.now(UTC)
    crud.audit(session, actor, "enrolment_approved" if approve else "enrolment_rejected", host_id,
               {"hostname": request.hostname})
    await session.commit()
    return request


async def list_tokens(session: AsyncSession) -> list[EnrolmentToken]:
    return list((await session.execute(select(EnrolmentToken).order_by(EnrolmentToken.created_at.desc())
                                       .limit(200))).scalars())


async def revoke_token(session: AsyncSession, token_id: uuid.UUID, actor: str) -> bool:
    token = await session.get(EnrolmentToken, token_id)
    if token is None:
        return False
    if token.revoked_at is None and token.used_at is None:
        token.revoked_at = datetime.now(UTC)
        crud.audit(session, actor, "enrolment_token_revoked", str(token_id), {"note": token.note})
    await session.commit()
    return True


async def list_requests(session: AsyncSession) -> list[EnrolmentRequest]:
    return list((await session.execute(select(EnrolmentRequest).order_by(EnrolmentRequest.requested_at.desc())
                                       .limit(500))).scalars())


async def retire_host(runtime: Runtime, session: AsyncSession, host_id: str, actor: str) -> bool:
    host = await session.get(Host, host_id)
    if host is None:
        return False
    host.status, host.retired_at, host.cert_fingerprint, host.online = "retired", datetime.now(UTC), None, False
    crud.audit(session, actor, "host_retired", host_id, {"hostname": host.hostname})
    await session.commit()
    await runtime.agents.end_host(host_id, "this host was retired by an admin")
    return True


async def delete_host(runtime: Runtime, session: AsyncSession, host_id: str, actor: str) -> bool:
    host = await session.get(Host, host_id)
    if host is None:
        return False
    hostname = host.hostname
    await runtime.agents.end_host(host_id, "this host was deleted by an admin")
    await samples.delete_host_series(session, host_id)
    await session.execute(text("DELETE FROM enrolment_requests WHERE host_id = :h"), {"h": host_id})
    await session.execute(text("DELETE FROM hosts WHERE id = :h"), {"h": host_id})
    crud.audit(session, actor, "host_deleted", host_id, {"hostname": hostname})
    await session.commit()
    return True
