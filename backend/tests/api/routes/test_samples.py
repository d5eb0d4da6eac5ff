# SPDX-License-Identifier: Apache-2.0
"""The sample-series routes over metric batches the scripted agent sent at known times: absolute ranges
and their validation, idle samples counted apart, sorting and paging of top functions, the timeline's
buckets, two ranges compared, and the CSV export."""

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from tests.scripted_agent import KERNEL_BASE, kernel_functions, wait_catalog_complete, wait_until

IDLE_INDEX = 10  # renamed to the idle loop's function


@pytest.fixture
async def host(backend, client, unique):
    fns = kernel_functions(60)
    fns[IDLE_INDEX].name = "pv_native_safe_halt"
    agent = await backend.agent(f"ser-{unique}", kernel_tag=f"ser-{unique}", modules=[("vmlinux", KERNEL_BASE, fns)])
    await agent.connect()

    await wait_catalog_complete(client, f"ser-{unique}")
    yield agent
    await agent.close()


# Within the window the backend accepts batches for (the sample retention, by its clock), minute-aligned.
T0 = (datetime.now(UTC) - timedelta(hours=2)).replace(second=0, microsecond=0)


def ns(t: datetime) -> int:
    return int(t.timestamp()) * 1_000_000_000


async def send_two_phases(agent):
    """Phase A (10 intervals from T0): vfs_read 5/s, idle 50/s. Phase B (10 intervals from T0+10 s):
    vfs_read 5/s, ksys_read 20/s, idle 20/s, and 10 user samples per interval."""
    for i in range(10):
        await agent.send_metrics(ns(T0 + timedelta(seconds=i)), [("vmlinux", 0, 0, 5), ("vmlinux", IDLE_INDEX, 0, 50)])
    for i in range(10, 20):
        await agent.send_metrics(
            ns(T0 + timedelta(seconds=i)),
            [("vmlinux", 0, 0, 5), ("vmlinux", 1, 0x10, 20), ("vmlinux", IDLE_INDEX, 0, 20)],
            user=10,
        )


def rng(a: int, b: int) -> dict:
    return {"from": (T0 + timedelta(seconds=a)).isoformat(), "to": (T0 + timedelta(seconds=b)).isoformat()}


async def test_absolute_range_counts_idle_apart_and_shares_all_samples(client, host):
    await send_two_phases(host)
    url = f"/api/v1/hosts/{host.host_id}/top-functions"

    async def phase_b():
        t = (await client.get(url, params=rng(10, 20))).json()
        return t if t["total_samples"] == 10 * 55 else None

    top = await wait_until(phase_b)
    assert top["from"].startswith((T0 + timedelta(seconds=10)).isoformat()[:19]) and top["seconds"] == 10.0
    assert (top["user_samples"], top["kernel_samples"], top["idle_samples"]) == (100, 450, 200)
    assert [(i["name"], i["samples"]) for i in top["items"]] == [("ksys_read", 200), ("vfs_read", 50)]
    assert top["items"][0]["samples_per_sec"] == 20.0
    assert top["items"][0]["share"] == pytest.approx(200 / 550)
    assert top["items"][0]["address_hex"] == format(KERNEL_BASE + host.modules[0][2][1].offset, "x")
    assert top["functions"] == 2

    with_idle = (await client.get(url, params={**rng(10, 20), "include_idle": True})).json()
    assert next((i["name"], i["idle"]) for i in with_idle["items"]) == ("ksys_read", False)
    assert ("pv_native_safe_halt", True) in [(i["name"], i["idle"]) for i in with_idle["items"]]

    # Phase A alone: only vfs_read ranks; idle is counted in the totals only.
    a = (await client.get(url, params=rng(0, 10))).json()
    assert [(i["name"], i["samples"]) for i in a["items"]] == [("vfs_read", 50)]
    assert a["idle_samples"] == 500 and a["total_samples"] == 550


async def test_top_functions_sort_order_and_paging(client, host):
    await send_two_phases(host)
    url = f"/api/v1/hosts/{host.host_id}/top-functions"
    await wait_until(lambda: _total(client, url, rng(0, 20), 1100))
    by_name = (await client.get(url, params={**rng(0, 20), "sort": "name", "order": "asc"})).json()
    assert [i["name"] for i in by_name["items"]] == ["ksys_read", "vfs_read"]
    page2 = (await client.get(url, params={**rng(0, 20), "limit": 1, "offset": 1})).json()
    assert [i["name"] for i in page2["items"]] == ["vfs_read"] and page2["functions"] == 2
    beyond = (await client.get(url, params={**rng(0, 20), "limit": 1, "offset": 5})).json()
    assert beyond["items"] == [] and beyond["functions"] == 2


async def _total(client, url, params, want):
    return (await client.get(url, params=params)).json()["total_samples"] == want


async def test_bad_ranges_are_400_with_a_reason(client, host):
    url = f"/api/v1/hosts/{host.host_id}/top-functions"
    cases = [
        ({**rng(10, 0)}, "after"),
        ({"from": T0.isoformat()}, "both"),
        ({**rng(0, 10), "window_s": 5}, "not both"),
        ({"from": T0.isoformat(), "to": (T0 + timedelta(days=30)).isoformat()}, "at most"),
    ]
    for params, words in cases:
        r = await client.get(url, params=params)
        assert r.status_code == 400, (params, r.text)
        assert words in r.json()["detail"]
    r = await client.get(url, params={"from": "yesterday", "to": "today"})
    assert r.status_code == 422


async def test_timeline_buckets_split_user_kernel_idle(client, host):
    await send_two_phases(host)
    url = f"/api/v1/hosts/{host.host_id}/timeline"

    async def full():
        t = (await client.get(url, params={**rng(0, 20), "points": 10})).json()
        return t if sum(p["total"] for p in t["points"]) == 1100 else None

    t = await wait_until(full)
    assert t["step_s"] == 2 and len(t["points"]) == 10
    first, last = t["points"][0], t["points"][-1]
    assert first["t"].startswith(T0.isoformat()[:19]) and first["seconds"] == 2.0
    assert (first["total"], first["user"], first["idle"]) == (110, 0, 100)
    assert (last["total"], last["user"], last["kernel"], last["idle"]) == (110, 20, 90, 40)
    r = await client.get(url, params={**rng(0, 20), "points": 5})
    assert r.status_code == 422  # fewer than 10 points is refused


async def test_compare_two_ranges_puts_the_created_difference_first(client, host):
    await send_two_phases(host)
    await wait_until(lambda: _total(client, f"/api/v1/hosts/{host.host_id}/top-functions", rng(0, 20), 1100))
    a, b = rng(0, 10), rng(10, 20)
    r = await client.get(
        f"/api/v1/hosts/{host.host_id}/compare",
        params={"a_from": a["from"], "a_to": a["to"], "b_from": b["from"], "b_to": b["to"]},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    first = body["items"][0]
    assert (first["name"], first["a_per_sec"], first["b_per_sec"], first["delta_per_sec"]) == ("ksys_read", 0, 20, 20)
    assert first["a_function_id"] is None and first["b_function_id"] is not None
    vfs = next(i for i in body["items"] if i["name"] == "vfs_read")
    assert vfs["delta_per_sec"] == 0
    assert all(not i["idle"] for i in body["items"])
    assert body["a"]["idle_samples"] == 500 and body["b"]["user_samples"] == 100
    bad = await client.get(
        f"/api/v1/hosts/{host.host_id}/compare",
        params={"a_from": a["to"], "a_to": a["from"], "b_from": b["from"], "b_to": b["to"]},
    )
    assert bad.status_code == 400 and "range A" in bad.json()["detail"]
    other = await client.get(
        f"/api/v1/hosts/{host.host_id}/compare",
        params={"a_from": a["from"], "a_to": a["to"], "b_from": b["from"], "b_to": b["to"], "b_host": "no-such-host"},
    )
    assert other.status_code == 404


async def test_csv_export_parses_and_matches_top_functions(client, host):
    await send_two_phases(host)
    await wait_until(lambda: _total(client, f"/api/v1/hosts/{host.host_id}/top-functions", rng(0, 20), 1100))
    r = await client.get(f"/api/v1/hosts/{host.host_id}/profile", params={**rng(0, 20), "format": "csv"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/csv")
    assert 'filename="hotpath-' in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [(x["rank"], x["function"], x["samples"]) for x in rows] == [
        ("1", "ksys_read", "200"),
        ("2", "vfs_read", "100"),
    ]
    assert float(rows[0]["share_of_all_samples"]) == pytest.approx(200 / 1100, rel=1e-5)
    assert rows[0]["address"].startswith("0xffffffff81")
    bad = await client.get(f"/api/v1/hosts/{host.host_id}/profile", params={"format": "pdf"})
    assert bad.status_code == 422
