# SPDX-License-Identifier: Apache-2.0
"""Per-host agent identity over the real gRPC and REST servers, with fake agents
(tests.scripted_agent): enrolment by one-time token or admin approval, a host id usable only with its
own certificate, re-enrolment replacing the old credential, and retiring and deleting hosts."""
import grpc
import pytest

from app.core import pki
from app.proto import pb
from tests.conftest import make_user, token_for
from tests.scripted_agent import Credentials, ScriptedAgent, enroll, make_csr, new_token, wait_until


async def _connect_error(agent: ScriptedAgent) -> grpc.aio.AioRpcError:
    call = agent.open()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.write(pb.AgentMessage(hello=agent.hello()))
        await call.read()
    await agent.channel.close()
    return err.value


async def test_an_enrolment_token_works_once(backend, unique):
    token = await new_token(backend.runtime)
    creds = await enroll(backend.enroll_target, backend.ca_pem, f"once-{unique}", token)
    assert b"BEGIN CERTIFICATE" in creds.cert_pem
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(backend.enroll_target, backend.ca_pem, f"twice-{unique}", token)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert await backend.scalar("SELECT count(*) FROM hosts WHERE id = :h", h=f"twice-{unique}") == 0


async def test_a_csr_for_another_host_id_is_refused(backend, unique):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(backend.enroll_target, backend.ca_pem, f"me-{unique}", await new_token(backend.runtime),
                     csr=make_csr(f"me-{unique}", common_name=f"someone-else-{unique}"))
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
    assert any(r["host_id"] == host_id and r["status"] == "pending" for r in pending)

    r = await client.post(f"/api/v1/enrolment-requests/{host_id}/approve")
    assert r.status_code == 200 and r.json()["status"] == "approved"
    creds = await enroll(backend.enroll_target, backend.ca_pem, host_id, "", csr=csr)
    agent = ScriptedAgent(backend.grpc_target, creds, host_id, kernel_tag=f"p-{unique}")
    welcome = await agent.connect(send_catalog=False)
    assert welcome.session_id
    await agent.close()
    assert await backend.scalar("SELECT count(*) FROM audit_log WHERE action = 'enrolment_approved' "
                                "AND target = :h", h=host_id) == 1


async def test_a_rejected_host_cannot_enrol(backend, client, unique):
    host_id = f"rejected-{unique}"
    with pytest.raises(grpc.aio.AioRpcError):
        await enroll(backend.enroll_target, backend.ca_pem, host_id, "")
    assert (await client.post(f"/api/v1/enrolment-requests/{host_id}/reject")).status_code == 200
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await enroll(backend.enroll_target, backend.ca_pem, host_id, "")
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
        await enroll(backend.enroll_target, backend.ca_pem, f"new-{unique}",
                     await new_token(backend.runtime, host_id=f"other-{unique}"))
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
        assert await backend.scalar("SELECT count(*) FROM audit_log WHERE action = :a AND target = :h",
                             a=action, h=host_id) == 1
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
        return await backend.scalar("SELECT count(*) FROM audit_log WHERE action = 'enrolment_token_revoked' "
                                    "AND target = :t", t=body["id"])
    await wait_until(audited)
