# SPDX-License-Identifier: Apache-2.0
"""The HTTP API's limits, against the running backend: body size, NUL bytes and lone surrogates
anywhere in a request, 422s that do not echo their input, login rate limits and lockout, security
headers, WebSocket sessions that end with their token, no password in the logs, and a stored bad
value that cannot make a route fail."""

import asyncio
import json
import logging
import time

import httpx
import orjson
import pytest
import websockets
from sqlalchemy import text

from app.core.security import create_access_token
from tests.conftest import make_user


async def _raw_post(base_url: str, head: bytes, body_parts: list[bytes]) -> bytes:
    """Send a request by hand (so the body can be huge, or stop early) and return the response head."""
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head)
    try:
        for part in body_parts:
            writer.write(part)
            await writer.drain()
    except ConnectionError:
        pass  # the server refused and closed while we were still sending: what we test
    response = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    return response


async def test_a_200_mb_login_body_is_refused_before_it_is_read(backend):
    head = (
        b"POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 209715200\r\n\r\n"
    )
    response = await _raw_post(backend.base_url, head, [b"{" + b" " * 1000])
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert b"larger than" in response


async def test_a_streamed_body_over_the_limit_is_refused(backend):
    head = (
        b"POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"10000\r\n" + b"y" * 0x10000 + b"\r\n"
    response = await _raw_post(backend.base_url, head, [chunk] * 40)
    assert response.startswith(b"HTTP/1.1 413"), response[:200]


async def test_an_idle_keep_alive_connection_outlives_a_short_pause(backend):
    """A client reusing a connection after a few seconds' pause must find it open: a server that closes
    idle connections after 5 s races every client that reuses one at that moment (a reset, not an
    answer). The server keeps them 75 s; 6 s of idle is past the old limit and far inside the new."""
    host, port = backend.base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    request = b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        for pause in (0, 6):
            await asyncio.sleep(pause)
            writer.write(request)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(
                next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")).split(b":")[1]
            )
            await reader.readexactly(length)
    finally:
        writer.close()


async def test_a_422_does_not_echo_the_input(anon):
    big = "z" * 900_000
    r = await anon.post("/api/v1/auth/login", json={"username": big, "password": "p"})
    assert r.status_code == 422
    assert len(r.content) < 4096
    assert "zzzz" not in r.text


@pytest.mark.parametrize(
    "body",
    [
        b'{"username": "ad\\u0000min", "password": "x"}',
        b'{"username": "admin", "password": "\\ud800"}',
        b'{"username": "admin\x00", "password": "x"}',
        b'{"username": "\xff\xfe", "password": "x"}',
    ],
)
async def test_nul_and_lone_surrogates_in_a_login_are_a_400(anon, body):
    r = await anon.post("/api/v1/auth/login", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["detail"]


@pytest.mark.parametrize(
    "content_type", ["APPLICATION/JSON", "Application/Json; charset=UTF-8", "application/problem+JSON"]
)
async def test_nul_in_a_login_is_a_400_whatever_the_letter_case_of_the_media_type(anon, content_type):
    body = b'{"username": "ad\\u0000min", "password": "x"}'
    r = await anon.post("/api/v1/auth/login", content=body, headers={"content-type": content_type})
    assert r.status_code == 400, r.text
    assert "NUL" in r.json()["detail"]


async def test_a_user_whose_password_holds_a_nul_is_not_created_under_an_upper_case_media_type(client, backend, unique):
    username = f"nul-{unique}"
    body = orjson.dumps({"username": username, "password": "pass\x00word-long-enough", "role": "viewer"})
    r = await client.post("/api/v1/users", content=body, headers={"content-type": "APPLICATION/JSON"})
    assert r.status_code == 400, r.text
    assert await backend.scalar("SELECT count(*) FROM users WHERE username = :u", u=username) == 0


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/hosts/a%00b",
        "/api/v1/hosts/a%ED%A0%80b",
        "/api/v1/hosts/x/functions?q=%00",
        "/api/v1/hosts/x/functions?module=%ED%A0%80",
        "/api/v1/hosts/x/functions?q=%FF",
    ],
)
async def test_nul_and_lone_surrogates_in_paths_and_queries_are_a_400(client, path):
    r = await client.get(path)
    assert r.status_code == 400, r.text


async def test_security_headers_on_api_and_console(client):
    r = await client.get("/api/v1/hosts")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["cache-control"] == "no-store"


async def test_wrong_passwords_lock_the_account_and_a_success_needs_the_wait(backend, client, unique):
    username, password = await make_user(client, "viewer", unique)
    async with httpx.AsyncClient(base_url=backend.base_url) as c:
        codes = [
            (await c.post("/api/v1/auth/login", json={"username": username, "password": "wrong"})).status_code
            for _ in range(6)
        ]
        assert codes[:5] == [401] * 5 and codes[5] == 429
        r = await c.post("/api/v1/auth/login", json={"username": username, "password": password})
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(
            text("UPDATE users SET locked_until = now() - interval '1 s' WHERE username = :u"), {"u": username}
        )
    async with httpx.AsyncClient(base_url=backend.base_url) as c:
        r = await c.post("/api/v1/auth/login", json={"username": username, "password": password})
        assert r.status_code == 200


async def test_parallel_wrong_passwords_are_each_counted_and_lock_the_account(backend, client, unique):
    """25 wrong passwords sent at once over 25 connections: each attempt takes its own number before the
    password is checked, so exactly `limit` of them are checked (401) and the rest are refused (429),
    whatever order they run in; the account ends locked."""
    username, password = await make_user(client, "viewer", unique)
    limit = backend.runtime.settings.login_failures_before_lockout

    async def attempt(name: str) -> int:
        async with httpx.AsyncClient(base_url=backend.base_url, timeout=60) as c:
            return (await c.post("/api/v1/auth/login", json={"username": name, "password": "wrong"})).status_code

    codes = await asyncio.gather(*[attempt(username) for _ in range(25)])
    assert sorted(codes) == [401] * limit + [429] * (25 - limit), codes
    assert await backend.scalar("SELECT locked_until > now() FROM users WHERE username = :u", u=username)
    async with httpx.AsyncClient(base_url=backend.base_url) as c:
        r = await c.post("/api/v1/auth/login", json={"username": username, "password": password})
        assert r.status_code == 429, "locked: even the right password waits"
    # Unknown names are counted the same way (in memory), so parallel guesses do not tell them apart.
    ghost = await asyncio.gather(*[attempt(f"ghost-par-{unique}") for _ in range(25)])
    assert sorted(ghost) == [401] * limit + [429] * (25 - limit), ghost


async def test_unknown_usernames_lock_the_same_way(anon, unique):
    codes = [
        (await anon.post("/api/v1/auth/login", json={"username": f"ghost-{unique}", "password": "x"})).status_code
        for _ in range(6)
    ]
    assert codes[:5] == [401] * 5 and codes[5] == 429


async def test_one_address_is_rate_limited(backend, unique):
    from app.api.routes import auth

    limit = backend.runtime.settings.login_attempts_per_minute
    backend.runtime.settings.login_attempts_per_minute = 8
    auth._attempts.clear()
    try:
        async with httpx.AsyncClient(base_url=backend.base_url) as c:
            codes = [
                (await c.post("/api/v1/auth/login", json={"username": f"r{i}-{unique}", "password": "x"})).status_code
                for i in range(12)
            ]
    finally:
        backend.runtime.settings.login_attempts_per_minute = limit
        auth._attempts.clear()
    assert 429 in codes and codes.count(401) <= 8


async def test_x_forwarded_for_from_loopback_does_not_escape_the_address_limit(backend, unique):
    """No proxy is configured (the default): a client on loopback that names a new address in
    X-Forwarded-For for every attempt is still one address to the limit and to the audit log."""
    from app.api.routes import auth

    limit = backend.runtime.settings.login_attempts_per_minute
    backend.runtime.settings.login_attempts_per_minute = 8
    auth._attempts.clear()
    try:
        async with httpx.AsyncClient(base_url=backend.base_url) as c:
            codes = [
                (
                    await c.post(
                        "/api/v1/auth/login",
                        json={"username": f"xff{i}-{unique}", "password": "x"},
                        headers={"X-Forwarded-For": f"203.0.113.{i + 1}"},
                    )
                ).status_code
                for i in range(12)
            ]
    finally:
        backend.runtime.settings.login_attempts_per_minute = limit
        auth._attempts.clear()
    assert codes == [401] * 8 + [429] * 4, codes
    clients = await backend.scalar(
        "SELECT array_agg(DISTINCT detail->>'client') FROM audit_log WHERE action = 'login_failed' AND actor LIKE :u",
        u=f"xff%-{unique}",
    )
    assert clients == ["127.0.0.1"]


async def test_x_forwarded_for_is_honoured_from_a_configured_proxy(backend, unique):
    """A second HTTP server on the same backend, configured as HOTPATH_TRUSTED_PROXIES=127.0.0.1 would
    configure it: the forwarded address (the rightmost one not itself a proxy) is the client's."""
    from app.api.main import create_app
    from app.server import _Uvicorn, http_config

    settings = backend.runtime.settings.model_copy(update={"trusted_proxies": "127.0.0.1, ::1", "http_port": 0})
    server = _Uvicorn(http_config(backend.runtime, create_app(backend.runtime), settings, 0))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "the second HTTP server did not start"
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            r = await c.post(
                "/api/v1/auth/login",
                json={"username": f"fwd-{unique}", "password": "x"},
                headers={"X-Forwarded-For": "198.51.100.7, 127.0.0.1"},
            )
            assert r.status_code == 401, r.text
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
    client = await backend.scalar(
        "SELECT detail->>'client' FROM audit_log WHERE action = 'login_failed' AND actor = :u", u=f"fwd-{unique}"
    )
    assert client == "198.51.100.7"


def test_trusted_proxies_must_be_addresses():
    from pydantic import ValidationError

    from app.core.config import Settings

    assert Settings(trusted_proxies="10.0.0.5, 192.168.1.0/24").trusted_proxy_list == ["10.0.0.5", "192.168.1.0/24"]
    assert Settings().trusted_proxy_list == []
    with pytest.raises(ValidationError, match="not an IP address"):
        Settings(trusted_proxies="proxy.example")


async def test_no_password_reaches_the_log(backend, anon, caplog, unique):
    secret = f"Secret-{unique}-pw"
    with caplog.at_level(logging.DEBUG):
        await anon.post("/api/v1/auth/login", json={"username": f"nobody-{unique}", "password": secret})
        await anon.post(
            "/api/v1/auth/login",
            json={
                "username": f"nobody-{unique}",
                "password": secret + "\ud800".encode("utf-8", "surrogatepass").decode("latin-1"),
            },
        )
        raw = b'{"username": "x", "password": "' + secret.encode() + b'\\ud800"}'
        await anon.post("/api/v1/auth/login", content=raw, headers={"content-type": "application/json"})
    assert secret not in caplog.text


async def test_websocket_closes_when_its_token_expires(backend, admin_token):
    async with backend.runtime.sessionmaker() as session:
        user_id = (await session.execute(text("SELECT id FROM users WHERE username = 'admin'"))).scalar_one()
    # A token that expires in about two seconds.
    token = create_access_token(backend.runtime.secret_key, str(user_id), 1, now=time.time() - 58)
    url = backend.base_url.replace("http", "ws") + f"/api/v1/ws?token={token}"
    async with websockets.connect(url) as ws:
        started = time.monotonic()
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(ws.recv(), 15)
        assert closed.value.rcvd.code == 4401
        assert time.monotonic() - started < 10


async def test_a_stored_bad_block_cannot_make_the_function_route_fail(backend, client, unique):
    """Blocks written by an older version (offset 0xffffffff, garbage entries) are skipped, not a 500."""
    agent = await backend.agent(f"badrow-{unique}", kernel_tag=f"badrow-{unique}")
    await agent.connect()
    from tests.scripted_agent import wait_catalog_complete

    await wait_catalog_complete(client, f"badrow-{unique}")
    digest = agent.modules[0][3]
    async with backend.runtime.engine.begin() as conn:
        await conn.execute(
            text("UPDATE function_code SET blocks = CAST(:b AS jsonb) WHERE digest = :d AND index = 0"),
            {
                "d": digest,
                "b": json.dumps(
                    [[0xFFFFFFFF, 16, 1, [[1, 0xFFFFFFFF, ""]]], "garbage", [0, 0x10, 2, [[9, 1 << 70, None]]]]
                ),
            },
        )
        fid = (
            await conn.execute(text("SELECT id FROM functions WHERE digest = :d AND index = 0"), {"d": digest})
        ).scalar_one()
    r = await client.get(f"/api/v1/hosts/badrow-{unique}/functions/{fid}")
    assert r.status_code == 200, r.text
    assert all(b["address"] < 1 << 64 for b in orjson.loads(r.content)["blocks"])
    await agent.close()
