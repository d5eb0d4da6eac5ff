# SPDX-License-Identifier: Apache-2.0
"""GET /metrics: Prometheus text with request counts by route template (never by host id), latency
histograms, connected agents and ingested samples."""

import time

from tests.scripted_agent import wait_catalog_complete, wait_until


async def test_metrics_count_requests_agents_and_ingest(backend, client, anon, unique):
    agent = await backend.agent(f"met-{unique}", kernel_tag=f"met-{unique}")
    await agent.connect()
    try:
        await wait_catalog_complete(client, f"met-{unique}")
        await agent.send_metrics(time.time_ns(), [("vmlinux", 0, 0, 7)], user=3)

        async def scraped():
            text = (await anon.get("/metrics")).text
            counted = "hotpath_ingest_samples_total" in text and _value(text, "hotpath_ingest_samples_total") >= 10
            return text if counted else None

        text = await wait_until(scraped)
        assert 'hotpath_http_requests_total{method="GET",route="/api/v1/hosts/{host_id}",status="200"}' in text
        assert f"met-{unique}" not in text  # route templates only
        assert _value(text, "hotpath_agents_connected") >= 1
        assert "hotpath_http_request_duration_seconds_bucket" in text
        assert _value(text, "hotpath_catalog_functions_stored_total") >= 54
    finally:
        await agent.close()


def _value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return -1.0
