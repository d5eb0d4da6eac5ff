# SPDX-License-Identifier: Apache-2.0
"""Catalog pieces by digest: columns in address order, immutable caching (ETag = digest, 304 on
revalidation), gzip when the client accepts it; a piece still arriving is not served."""

import gzip

import httpx
import orjson

from tests.scripted_agent import wait_catalog_complete


async def test_catalog_by_digest_is_immutable_and_compressed(backend, client, admin_token, unique):
    agent = await backend.agent(f"cat-{unique}", kernel_tag=f"cat-{unique}")
    await agent.connect()
    try:
        await wait_catalog_complete(client, f"cat-{unique}")
        mods = (await client.get(f"/api/v1/hosts/cat-{unique}/modules")).json()
        vmlinux = next(m for m in mods if m["name"] == "vmlinux")
        url = f"{backend.base_url}/api/v1/catalogs/{vmlinux['digest']}"
        auth = {"Authorization": f"Bearer {admin_token}"}
        # A raw client, so the body is seen as sent.
        async with httpx.AsyncClient() as raw:
            plain = await raw.get(url, headers={**auth, "Accept-Encoding": "identity"})
            assert plain.status_code == 200
            assert plain.headers["etag"] == f'"{vmlinux["digest"]}"'
            cache = plain.headers["cache-control"]
            assert "immutable" in cache and "max-age=31536000" in cache
            doc = orjson.loads(plain.content)
            assert doc["function_count"] == 50 and len(doc["ids"]) == len(doc["names"]) == 50
            assert doc["names"][:2] == ["vfs_read", "ksys_read"]
            assert doc["offsets"] == sorted(doc["offsets"]) and doc["undecodable"] == []
            packed = await raw.get(url, headers={**auth, "Accept-Encoding": "gzip"})
            assert packed.headers["content-encoding"] == "gzip"
            # httpx decodes the body: compare the sizes on the wire.
            assert packed.content == plain.content
            assert int(packed.headers["content-length"]) < len(gzip.compress(plain.content)) * 1.2
            assert int(packed.headers["content-length"]) * 2 < len(plain.content)
            again = await raw.get(url, headers={**auth, "If-None-Match": plain.headers["etag"]})
            assert again.status_code == 304 and again.content == b""
            # If-None-Match compares weakly (RFC 9110), as the plan body's does: a weak tag, a list, `*`.
            etag = plain.headers["etag"]
            for inm in (f"W/{etag}", f'"other", {etag}', "*"):
                again = await raw.get(url, headers={**auth, "If-None-Match": inm})
                assert again.status_code == 304, inm
            for inm in ('"other"', etag[1:], "W/"):
                again = await raw.get(url, headers={**auth, "If-None-Match": inm, "Accept-Encoding": "identity"})
                assert again.status_code == 200 and again.content == plain.content, inm
            assert (await raw.get(url)).status_code == 401
        missing = await client.get("/api/v1/catalogs/" + "0" * 64)
        assert missing.status_code == 404
        assert (await client.get("/api/v1/catalogs/NOT-HEX")).status_code == 422
    finally:
        await agent.close()


async def test_large_json_responses_are_gzipped(client, unique, backend):
    r = await client.get("/api/v1/openapi.json", headers={"Accept-Encoding": "gzip"})
    assert r.headers.get("content-encoding") == "gzip"
