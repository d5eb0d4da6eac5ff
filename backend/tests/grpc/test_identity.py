# SPDX-License-Identifier: Apache-2.0
"""Per-host agent identity over the real gRPC and REST servers, with fake agents
(tests.scripted_agent): enrolment by one-time token or admin approval, a host id usable only with its
own certificate, re-enrolment replacing the old credential, and retiring and deleting hosts."""

import asyncio

import grpc
import httpx
import pytest
from sqlalchemy import text

from app.core import pki
from app.domain import enrolment
from app.protocol.proto import pb
from tests.conftest import make_user, token_for
from tests.scripted_agent import Credentials, ScriptedAgent, enroll, make_csr, new_token, wait_until


async def _connect_error(agent: ScriptedAgent) -> grpc.aio.AioRpcError:
    call = agent.open()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.write(pb.AgentMessage(hello=agent.hello()))
        await call.read()
    await agent.channel.close()
    return err.value


async def _pending(client, host_id: str) -> list[dict]:
    return [
        r
        for r in (await client.get("/api/v1/enrolment-requests")).json()
        if r["host_id"] == host_id and r["status"] == "pending"
    ]


async def _pending_id(client, host_id: str) -> str:
    mine = await _pending(client, host_id)
    assert len(mine) == 1, mine
    return mine[0]["id"]


async def _ask(backend, host_id: str, csr=None) -> grpc.StatusCode:
    """Ask to enrol without a token; the status code of the (always refused) answer."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(backend.enroll_target, backend.ca_pem, host_id, "", csr=csr)
    return err.value.code()


async def test_an_enrolment_token_works_once(backend, unique):
    token = await new_token(backend.runtime)
    creds = await enroll(backend.enroll_target, backend.ca_pem, f"once-{unique}", token)
    assert b"BEGIN CERTIFICATE" in creds.cert_pem
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(backend.enroll_target, backend.ca_pem, f"twice-{unique}", token)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert await backend.scalar("SELECT count(*) FROM hosts WHERE id = :h", h=f"twice-{unique}") == 0


async def test_an_enrolment_asked_again_with_the_same_token_and_key_is_answered(backend, unique):
    """An agent whose Enroll answer was lost (its deadline passed after the backend had issued the
    certificate) asks again with the same token and key: before, the token was used and every retry was
    refused, so the agent never connected (seen in the kernel lane on a loaded machine). Now that retry is
    answered, and the host's credential is the last certificate; the first no longer connects."""
    host_id = f"retry-{unique}"
    token = await new_token(backend.runtime)
    csr = make_csr(host_id)
    first = await enroll(backend.enroll_target, backend.ca_pem, host_id, token, csr=csr)
    again = await enroll(backend.enroll_target, backend.ca_pem, host_id, token, csr=csr)
    assert b"BEGIN CERTIFICATE" in again.cert_pem and again.cert_pem != first.cert_pem
    agent = ScriptedAgent(backend.grpc_target, again, host_id)
    await agent.connect()
    await agent.close()
    error = await _connect_error(ScriptedAgent(backend.grpc_target, first, host_id))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert (
        await backend.scalar(
            "SELECT count(*) FROM audit_log WHERE action = 'host_enrolled' AND target = :h "
            "AND detail->>'how' LIKE '%asked again%'",
            h=host_id,
        )
        == 1
    )


async def test_a_used_token_is_not_answered_again_for_anyone_else(backend, unique):
    """The retry is the same host id and key's, within its window, while the host holds the certificate
    the token issued: another key for the host id, another host id with the same key, a retry after the
    window, and a retry after the host was enrolled again by its own token are all refused as a used token,
    and none of them changes the host's credential."""
    host_id = f"replay-{unique}"
    token = await new_token(backend.runtime)
    csr = make_csr(host_id)
    creds = await enroll(backend.enroll_target, backend.ca_pem, host_id, token, csr=csr)
    fp = await backend.scalar("SELECT cert_fingerprint FROM hosts WHERE id = :h", h=host_id)

    async def refused(h: str, key: tuple[bytes, str]) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await enroll(backend.enroll_target, backend.ca_pem, h, token, csr=key)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, err.value.details()

    await refused(host_id, make_csr(host_id))  # another key (a thief of the token, not of the key)
    await refused(f"other-{unique}", make_csr(f"other-{unique}"))  # another host id
    assert await backend.scalar("SELECT count(*) FROM hosts WHERE id = :h", h=f"other-{unique}") == 0
    assert await backend.scalar("SELECT cert_fingerprint FROM hosts WHERE id = :h", h=host_id) == fp
    # After the window, the same key too.
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(
            text("UPDATE enrolment_tokens SET used_at = used_at - make_interval(secs => :w) WHERE used_by_host = :h"),
            {"w": enrolment.REPLAY_WINDOW_S + 1, "h": host_id},
        )
    await refused(host_id, csr)
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(text("UPDATE enrolment_tokens SET used_at = now() WHERE used_by_host = :h"), {"h": host_id})
    # Enrolled again since (a token for this host id, another key): the old token's retry is over.
    await backend.credentials(host_id)
    newer = await backend.scalar("SELECT cert_fingerprint FROM hosts WHERE id = :h", h=host_id)
    await refused(host_id, csr)
    assert await backend.scalar("SELECT cert_fingerprint FROM hosts WHERE id = :h", h=host_id) == newer
    error = await _connect_error(ScriptedAgent(backend.grpc_target, creds, host_id))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_csr_for_another_host_id_is_refused(backend, unique):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(
            backend.enroll_target,
            backend.ca_pem,
            f"me-{unique}",
            await new_token(backend.runtime),
            csr=make_csr(f"me-{unique}", common_name=f"someone-else-{unique}"),
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "common name must be the host id" in err.value.details()


async def test_a_host_without_a_token_waits_for_an_admin_to_approve_it(backend, client, unique):
    host_id = f"pending-{unique}"
    csr = make_csr(host_id)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(backend.enroll_target, backend.ca_pem, host_id, "", csr=csr)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "waits for an admin" in err.value.details()
    pending = (await client.get("/api/v1/enrolment-requests")).json()
    mine = [r for r in pending if r["host_id"] == host_id and r["status"] == "pending"]
    assert len(mine) == 1
    assert mine[0]["key_fingerprint"] == enrolment.key_fingerprint(csr[1])
    assert mine[0]["host_enrolled"] is False and mine[0]["conflicting"] == 0
    assert f"key SHA256:{mine[0]['key_fingerprint']}" in err.value.details()

    r = await client.post(f"/api/v1/enrolment-requests/{mine[0]['id']}/approve")
    assert r.status_code == 200 and r.json()["status"] == "approved"
    creds = await enroll(backend.enroll_target, backend.ca_pem, host_id, "", csr=csr)
    agent = ScriptedAgent(backend.grpc_target, creds, host_id, kernel_tag=f"p-{unique}")
    welcome = await agent.connect(send_catalog=False)
    assert welcome.session_id
    await agent.close()
    assert (
        await backend.scalar(
            "SELECT count(*) FROM audit_log WHERE action = 'enrolment_approved' AND target = :h", h=host_id
        )
        == 1
    )


async def test_a_rejected_host_cannot_enrol(backend, client, unique):
    host_id = f"rejected-{unique}"
    csr = make_csr(host_id)
    with pytest.raises(grpc.aio.AioRpcError):
        await enroll(backend.enroll_target, backend.ca_pem, host_id, "", csr=csr)
    request_id = await _pending_id(client, host_id)
    assert (await client.post(f"/api/v1/enrolment-requests/{request_id}/reject")).status_code == 200
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(backend.enroll_target, backend.ca_pem, host_id, "", csr=csr)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_another_hosts_certificate_cannot_take_over_a_host(backend, client, unique):
    """The issue's impersonation: a fake agent with its own valid credential claims the real host's id."""
    real = await backend.agent(f"real-{unique}", kernel_tag=f"imp-{unique}")
    await real.connect()
    impostor = await backend.agent(f"impostor-{unique}", kernel_tag=f"imp-{unique}")
    hello = impostor.hello()
    hello.host_id = f"real-{unique}"
    impostor.hello = lambda: hello  # type: ignore[method-assign]
    error = await _connect_error(impostor)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "not the host named by this agent's certificate" in error.details()
    assert backend.runtime.agents.sessions[f"real-{unique}"].session_id == real.welcome.session_id
    host = (await client.get(f"/api/v1/hosts/real-{unique}")).json()
    assert host["online"] is True and host["hostname"] == f"host-real-{unique}"
    await real.close()


async def test_enrolling_again_replaces_the_old_certificate(backend, unique):
    host_id = f"again-{unique}"
    old = await backend.credentials(host_id)
    await backend.credentials(host_id)  # with a token created for this host id
    error = await _connect_error(ScriptedAgent(backend.grpc_target, old, host_id))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "not the current credential" in error.details()


async def test_a_token_for_any_host_cannot_take_over_an_enrolled_host(backend, unique):
    host_id = f"taken-{unique}"
    creds = await backend.credentials(host_id)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(backend.enroll_target, backend.ca_pem, host_id, await new_token(backend.runtime))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "enrolled already" in err.value.details()
    # The refusal did not consume anything the real host depends on: it still connects.
    agent = ScriptedAgent(backend.grpc_target, creds, host_id, kernel_tag=f"taken-{unique}")
    assert (await agent.connect(send_catalog=False)).session_id
    await agent.close()
    # A token created for another host id is refused for this one.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(
            backend.enroll_target,
            backend.ca_pem,
            f"new-{unique}",
            await new_token(backend.runtime, host_id=f"other-{unique}"),
        )
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_certificate_from_another_ca_does_not_connect(backend, unique, tmp_path):
    other = pki.load_or_create(tmp_path / "other-ca")
    host_id = f"foreign-{unique}"
    key, csr = make_csr(host_id)
    cert, _fp, _na = other.sign_host_csr(csr, host_id)
    agent = ScriptedAgent(backend.grpc_target, Credentials(key, cert.encode(), backend.ca_pem), host_id)
    error = await _connect_error(agent)
    assert error.code() == grpc.StatusCode.UNAVAILABLE  # the TLS handshake fails before any call


async def test_retire_ends_the_stream_and_revokes_then_delete_removes_the_host(backend, client, unique):
    host_id = f"retire-{unique}"
    agent = await backend.agent(host_id, kernel_tag=f"ret-{unique}")
    await agent.connect()
    r = await client.post(f"/api/v1/hosts/{host_id}/retire")
    assert r.status_code == 204
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await agent._reader
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    host = (await client.get(f"/api/v1/hosts/{host_id}")).json()
    assert host["status"] == "retired" and host["enrolled"] is False and host["online"] is False
    error = await _connect_error(ScriptedAgent(backend.grpc_target, agent.credentials, host_id))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await backend.credentials(host_id)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "retired" in err.value.details()

    assert (await client.delete(f"/api/v1/hosts/{host_id}")).status_code == 204
    assert (await client.get(f"/api/v1/hosts/{host_id}")).status_code == 404
    assert (await client.delete(f"/api/v1/hosts/{host_id}")).status_code == 404
    for action in ("host_retired", "host_deleted"):
        assert (
            await backend.scalar(
                "SELECT count(*) FROM audit_log WHERE action = :a AND target = :h", a=action, h=host_id
            )
            == 1
        )
    # Deleted, the host may enrol afresh.
    again = await backend.agent(host_id, kernel_tag=f"ret-{unique}")
    assert (await again.connect()).session_id
    await again.close()


async def test_only_admins_manage_enrolment_and_hosts(backend, client, unique):
    username, password = await make_user(client, "operator", unique)
    token = await token_for(backend.base_url, username, password)
    import httpx

    async with httpx.AsyncClient(base_url=backend.base_url, headers={"Authorization": f"Bearer {token}"}) as c:
        assert (await c.post("/api/v1/enrolment-tokens", json={})).status_code == 403
        assert (await c.get("/api/v1/enrolment-requests")).status_code == 403
        assert (await c.delete("/api/v1/hosts/anything")).status_code == 403


async def test_a_created_token_is_shown_once_with_the_ca_and_can_be_revoked(backend, client, unique):
    r = await client.post("/api/v1/enrolment-tokens", json={"note": f"qemu guest {unique}", "hours": 2})
    assert r.status_code == 201
    body = r.json()
    assert body["token"].startswith("hpe_") and "BEGIN CERTIFICATE" in body["ca_pem"]
    assert body["enroll_port"] == int(backend.enroll_target.rsplit(":", 1)[1])
    listed = next(t for t in (await client.get("/api/v1/enrolment-tokens")).json() if t["id"] == body["id"])
    assert "token" not in listed
    assert (await client.delete(f"/api/v1/enrolment-tokens/{body['id']}")).status_code == 204
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(backend.enroll_target, backend.ca_pem, f"revoked-{unique}", body["token"])
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

    async def audited():
        return await backend.scalar(
            "SELECT count(*) FROM audit_log WHERE action = 'enrolment_token_revoked' AND target = :t", t=body["id"]
        )

    await wait_until(audited)


async def test_a_tokenless_request_cannot_take_over_an_enrolled_host(backend, client, unique):
    """Issue 15, security 2: a new key asking without a token for an enrolled host's id is refused, not
    queued, so no admin can approve it by mistake, and the real host keeps its certificate."""
    host_id = f"enrolled-{unique}"
    creds = await backend.credentials(host_id)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(backend.enroll_target, backend.ca_pem, host_id, "")
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "enrolled already" in err.value.details() and "token created for this host id" in err.value.details()
    assert await _pending(client, host_id) == []
    assert (
        await backend.scalar(
            "SELECT count(*) FROM audit_log WHERE action = 'enrolment_refused' "
            "AND target = :h AND detail->>'reason' = 'already enrolled'",
            h=host_id,
        )
        == 1
    )
    agent = ScriptedAgent(backend.grpc_target, creds, host_id, kernel_tag=f"enr-{unique}")
    assert (await agent.connect(send_catalog=False)).session_id
    await agent.close()


async def test_a_request_left_from_before_enrolment_cannot_be_approved(backend, client, unique):
    """A pending request whose host id has been enrolled since shows as such and cannot be approved."""
    host_id = f"stale-{unique}"
    await backend.credentials(host_id)
    _key, csr = make_csr(host_id)
    async with backend.runtime.sessionmaker() as db:  # a row kept from before the host enrolled (an upgrade)
        from app.storage.models import EnrolmentRequest

        db.add(
            EnrolmentRequest(
                host_id=host_id,
                key_fingerprint=enrolment.key_fingerprint(csr),
                hostname="x",
                csr_pem=csr,
                peer="ipv4:10.9.9.9:1",
            )
        )
        await db.commit()
    [request] = await _pending(client, host_id)
    assert request["host_enrolled"] is True
    r = await client.post(f"/api/v1/enrolment-requests/{request['id']}/approve")
    assert r.status_code == 409
    assert "enrolled already" in r.json()["detail"]
    assert (await _pending(client, host_id))[0]["status"] == "pending"


async def test_a_second_key_for_a_pending_host_is_a_conflict_not_a_replacement(backend, client, unique):
    """Issue 15, security 3: the first key's request is never overwritten by a second key's; both show,
    marked conflicting; the key the admin approves gets the certificate and the other is rejected."""
    host_id = f"conflict-{unique}"
    first, second = make_csr(host_id), make_csr(host_id)
    assert await _ask(backend, host_id, first) == grpc.StatusCode.FAILED_PRECONDITION
    assert await _ask(backend, host_id, second) == grpc.StatusCode.FAILED_PRECONDITION
    assert await _ask(backend, host_id, first) == grpc.StatusCode.FAILED_PRECONDITION  # asking again adds nothing
    requests = await _pending(client, host_id)
    assert sorted(r["key_fingerprint"] for r in requests) == sorted(
        enrolment.key_fingerprint(c[1]) for c in (first, second)
    )
    assert [r["conflicting"] for r in requests] == [1, 1]
    chosen = next(r for r in requests if r["key_fingerprint"] == enrolment.key_fingerprint(first[1]))

    r = await client.post(f"/api/v1/enrolment-requests/{chosen['id']}/approve")
    assert r.status_code == 200 and r.json()["status"] == "approved"
    assert await _ask(backend, host_id, second) == grpc.StatusCode.PERMISSION_DENIED
    creds = await enroll(backend.enroll_target, backend.ca_pem, host_id, "", csr=first)
    agent = ScriptedAgent(backend.grpc_target, creds, host_id, kernel_tag=f"cf-{unique}")
    assert (await agent.connect(send_catalog=False)).session_id
    await agent.close()
    assert (
        await backend.scalar(
            "SELECT count(*) FROM audit_log WHERE action = 'enrolment_rejected' AND target = :h "
            "AND detail->>'key_fingerprint' = :f",
            h=host_id,
            f=enrolment.key_fingerprint(second[1]),
        )
        == 1
    )


async def test_the_pending_cap_holds_under_concurrent_requests(backend, client, unique):
    """Issue 15, security 7: 40 hosts asking at once against 10 free places leave exactly 10 pending."""
    settings = backend.runtime.settings
    cap = settings.max_pending_enrolments
    pending_before = await backend.scalar("SELECT count(*) FROM enrolment_requests WHERE status = 'pending'")
    settings.max_pending_enrolments = pending_before + 10
    try:
        codes = await asyncio.gather(*(_ask(backend, f"flood-{unique}-{i}") for i in range(40)))
    finally:
        settings.max_pending_enrolments = cap
    assert codes.count(grpc.StatusCode.FAILED_PRECONDITION) == 10
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 30
    assert (
        await backend.scalar("SELECT count(*) FROM enrolment_requests WHERE status = 'pending'") == pending_before + 10
    )
    r = await client.post(
        "/api/v1/enrolment-requests/reject",
        json={
            "request_ids": [
                x["id"]
                for x in (await client.get("/api/v1/enrolment-requests")).json()
                if x["host_id"].startswith(f"flood-{unique}-")
            ]
        },
    )
    assert r.status_code == 200 and r.json() == {"rejected": 10}


async def test_tokenless_requests_are_limited_per_address(backend, unique):
    """At most enrolment_requests_per_minute new requests per peer address (the test's 8 requests take far
    less than the minute the window spans)."""
    settings = backend.runtime.settings
    limit = settings.enrolment_requests_per_minute
    settings.enrolment_requests_per_minute = 5
    enrolment._requests_by_address.times.clear()
    try:
        codes = [await _ask(backend, f"rate-{unique}-{i}") for i in range(8)]
    finally:
        settings.enrolment_requests_per_minute = limit
        enrolment._requests_by_address.times.clear()
    assert codes == [grpc.StatusCode.FAILED_PRECONDITION] * 5 + [grpc.StatusCode.RESOURCE_EXHAUSTED] * 3
    assert (
        await backend.scalar("SELECT count(*) FROM enrolment_requests WHERE host_id LIKE :p", p=f"rate-{unique}-%") == 5
    )


async def test_expired_requests_are_forgotten_and_free_the_queue(backend, client, unique):
    """A full queue of stale requests no longer locks out every new host: requests older than the TTL go."""
    settings = backend.runtime.settings
    old = f"old-{unique}"
    assert await _ask(backend, old) == grpc.StatusCode.FAILED_PRECONDITION
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(
            text("UPDATE enrolment_requests SET requested_at = now() - make_interval(secs => :s) WHERE host_id = :h"),
            {"s": settings.enrolment_request_ttl_s + 60, "h": old},
        )
    cap = settings.max_pending_enrolments
    # The queue is full, counting the stale request.
    settings.max_pending_enrolments = await backend.scalar(
        "SELECT count(*) FROM enrolment_requests WHERE status = 'pending'"
    )
    try:
        assert await _ask(backend, f"fresh-{unique}") == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        settings.max_pending_enrolments = cap
    assert await _pending(client, old) == []
    assert len(await _pending(client, f"fresh-{unique}")) == 1


async def test_an_admin_rejects_pending_requests_in_bulk(backend, client, unique):
    hosts = [f"bulk-{unique}-{i}" for i in range(3)]
    for host_id in hosts:
        assert await _ask(backend, host_id) == grpc.StatusCode.FAILED_PRECONDITION
    ids = [await _pending_id(client, h) for h in hosts]
    r = await client.post("/api/v1/enrolment-requests/reject", json={"request_ids": ids[:2]})
    assert r.status_code == 200 and r.json() == {"rejected": 2}
    assert [len(await _pending(client, h)) for h in hosts] == [0, 0, 1]
    assert (
        await backend.scalar(
            "SELECT count(*) FROM audit_log WHERE action = 'enrolment_rejected' "
            "AND actor = 'admin' AND target = ANY(:h)",
            h=hosts[:2],
        )
        == 2
    )
    for body in ({}, {"request_ids": ids, "all_pending": True}):
        r = await client.post("/api/v1/enrolment-requests/reject", json=body)
        assert r.status_code == 422
    username, password = await make_user(client, "approver", unique)
    async with httpx.AsyncClient(
        base_url=backend.base_url,
        headers={"Authorization": f"Bearer {await token_for(backend.base_url, username, password)}"},
    ) as c:
        assert (await c.post("/api/v1/enrolment-requests/reject", json={"all_pending": True})).status_code == 403
    assert len(await _pending(client, hosts[2])) == 1
    r = await client.post("/api/v1/enrolment-requests/reject", json={"all_pending": True})
    assert r.status_code == 200 and r.json()["rejected"] >= 1
    assert await backend.scalar("SELECT count(*) FROM enrolment_requests WHERE status = 'pending'") == 0
