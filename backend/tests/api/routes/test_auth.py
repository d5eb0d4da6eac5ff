# SPDX-License-Identifier: Apache-2.0
"""Sign-in, bearer tokens, the role gate on user management, and the audit records they leave."""

from sqlalchemy import text

from tests.conftest import make_user, token_for


async def test_health_answers_without_auth(anon):
    r = await anon.get("/api/v1/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


async def test_login_returns_token_and_user(anon, backend):
    r = await anon.post("/api/v1/auth/login", json={"username": "admin", "password": backend.admin_password})
    assert r.status_code == 200
    body = r.json()
    assert body["token_type"] == "bearer"
    assert body["user"]["username"] == "admin" and body["user"]["role"] == "admin"
    me = await anon.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {body['access_token']}"})
    assert me.status_code == 200
    assert me.json()["id"] == body["user"]["id"]


async def test_login_with_wrong_password_is_401_and_audited(anon, backend):
    r = await anon.post("/api/v1/auth/login", json={"username": "admin", "password": "not-the-password"})
    assert r.status_code == 401
    assert r.json() == {"detail": "Incorrect username or password"}
    r = await anon.post("/api/v1/auth/login", json={"username": "nobody-at-all", "password": "x"})
    assert r.status_code == 401
    async with backend.runtime.engine.connect() as conn:
        n = (
            await conn.execute(
                text("SELECT count(*) FROM audit_log WHERE action = 'login_failed' AND actor = 'nobody-at-all'")
            )
        ).scalar_one()
    assert n == 1


async def test_login_with_malformed_body_is_422(anon):
    r = await anon.post("/api/v1/auth/login", json={"username": "admin"})
    assert r.status_code == 422


async def test_api_without_token_is_401(anon):
    for path in ("/api/v1/hosts", "/api/v1/auth/me", "/api/v1/users", "/api/v1/hosts/x/functions"):
        r = await anon.get(path)
        assert r.status_code == 401, path
    r = await anon.get("/api/v1/hosts", headers={"Authorization": "Bearer forged.token"})
    assert r.status_code == 401


async def test_viewer_reads_hosts_but_cannot_create_users(client, backend, unique):
    username, password = await make_user(client, "viewer", unique)
    token = await token_for(backend.base_url, username, password)
    headers = {"Authorization": f"Bearer {token}"}
    r = await client.get("/api/v1/hosts", headers=headers)
    assert r.status_code == 200
    r = await client.post(
        "/api/v1/users", headers=headers, json={"username": f"x-{unique}", "password": "long-enough-1", "role": "admin"}
    )
    assert r.status_code == 403
    r = await client.get("/api/v1/users", headers=headers)
    assert r.status_code == 403


async def test_admin_creates_and_lists_users_and_creation_is_audited(client, unique):
    username, _ = await make_user(client, "operator", unique)
    r = await client.get("/api/v1/users")
    assert r.status_code == 200
    assert any(u["username"] == username and u["role"] == "operator" for u in r.json())
    dup = await client.post("/api/v1/users", json={"username": username, "password": "long-enough-1"})
    assert dup.status_code == 409
    bad = await client.post("/api/v1/users", json={"username": f"y-{unique}", "password": "pw", "role": "root"})
    assert bad.status_code == 422
    audit = await client.get("/api/v1/audit", params={"action": "user_created"})
    assert audit.status_code == 200
    assert any(a["detail"].get("username") == username for a in audit.json())
