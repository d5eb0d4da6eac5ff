# SPDX-License-Identifier: Apache-2.0
"""The backend's own Prometheus metrics, served at GET /metrics in the text exposition format.

Per process (each replica is scraped on its own): HTTP requests by method, route template and status,
with their latency; agents connected; console WebSockets open; metric batches, samples and dropped
samples ingested from agents; the ingest writer's commits, failed commits and whether it is failing now;
catalog functions stored; agent commands sent; objects frozen out of the garbage collector's walks.
Labels carry route templates (`/api/v1/hosts/{host_id}`), never host ids, function names or users, so the
endpoint reveals only aggregate activity and its label sets stay small. Each runtime has its own registry,
so several backends in one process (the tests) do not share counters.
"""

import gc
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.http_requests = Counter(
            "hotpath_http_requests", "HTTP requests answered", ["method", "route", "status"], registry=r
        )
        self.http_seconds = Histogram(
            "hotpath_http_request_duration_seconds",
            "Time to answer an HTTP request",
            ["method", "route"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.agents_connected = Gauge(
            "hotpath_agents_connected", "Agents with an open stream to this backend", registry=r
        )
        self.websockets_open = Gauge("hotpath_console_websockets", "Console live-update WebSockets open", registry=r)
        self.ingest_batches = Counter("hotpath_ingest_batches", "Metric batches received from agents", registry=r)
        self.ingest_samples = Counter(
            "hotpath_ingest_samples", "Samples received from agents (all, by host totals)", registry=r
        )
        self.ingest_dropped = Counter(
            "hotpath_ingest_dropped_samples",
            "Samples dropped because their catalog piece was not stored yet",
            registry=r,
        )
        self.catalog_functions = Counter("hotpath_catalog_functions_stored", "Catalog functions stored", registry=r)
        self.ingest_points = Counter(
            "hotpath_ingest_points",
            "Series points received: block counts of sample intervals and values of measurement intervals",
            registry=r,
        )
        self.ingest_refused_intervals = Counter(
            "hotpath_ingest_refused_intervals", "Measurement intervals refused for their content", registry=r
        )
        self.ingest_commits = Counter("hotpath_ingest_commits", "Group commits of the ingest writer", registry=r)
        self.ingest_failed_commits = Counter(
            "hotpath_ingest_failed_commits", "Group commits of the ingest writer that the database refused", registry=r
        )
        self.ingest_failing = Gauge(
            "hotpath_ingest_failing",
            "1 while the ingest writer's commits fail (the database refuses writes or does not answer), else 0",
            registry=r,
        )
        self.commands_sent = Counter("hotpath_agent_commands", "Commands sent to agents", ["kind"], registry=r)
        self.gc_frozen = Gauge(
            "hotpath_gc_frozen_objects",
            "Objects the serving process took out of the garbage collector's walks after start-up (server.settle_heap)",
            registry=r,
        )
        self.gc_frozen.set_function(gc.get_freeze_count)

    def bind(self, agents_connected: Callable[[], float], websockets_open: Callable[[], float]) -> None:
        """Read the live gauges at scrape time."""
        self.agents_connected.set_function(agents_connected)
        self.websockets_open.set_function(websockets_open)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetrics:
    """ASGI middleware counting and timing every HTTP request by its matched route template."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        t0 = time.perf_counter()
        try:
            await self.app(scope, receive, send_status)
        finally:
            template = route_template(scope)
            method = scope.get("method", "GET")
            self.metrics.http_requests.labels(method, template, str(status["code"])).inc()
            self.metrics.http_seconds.labels(method, template).observe(time.perf_counter() - t0)


def route_template(scope: Scope) -> str:
    """The matched route as a template: the request path with each path parameter's segment replaced
    by its name ("/api/v1/hosts/{host_id}"); "unmatched" for 404s, "console" for the console's files."""
    if scope.get("route") is None:
        return "unmatched"
    params = scope.get("path_params") or {}
    if "path" in params:
        return "console"
    by_value = {str(v): k for k, v in params.items()}
    parts = [f"{{{by_value[p]}}}" if p in by_value else p for p in scope.get("path", "").split("/")]
    return "/".join(parts)
