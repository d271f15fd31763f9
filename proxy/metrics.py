"""Prometheus metrics, in a registry of the app's own (never the process-global one).

A registry per app lets tests build many apps in one process and lets an
embedding application keep its own metrics apart. Under `serve --workers N`
each process counts into files of its own in `PROMETHEUS_MULTIPROC_DIR`
(set by `serve` before the workers start), and `/metrics` sums them all:
a scrape lands on one worker, which alone would show its share and make
every counter jump back and forth between scrapes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


# Where worker processes share their counts (prometheus-client's own variable,
# read when it is imported, so it must be set before the workers start).
SHARED_DIR = "PROMETHEUS_MULTIPROC_DIR"


class Metrics:
    def __init__(self) -> None:
        self.shared = os.environ.get(SHARED_DIR) or None
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "context_proxy_requests", "HTTP requests answered.", ["route", "status"], registry=r
        )
        self.upstream_latency = Histogram(
            "context_proxy_upstream_latency_seconds",
            "Time until the upstream's response headers arrived.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens_in = Counter(
            "context_proxy_tokens_in",
            "History tokens clients sent (or append mode supplied).",
            registry=r,
        )
        self.tokens_out = Counter(
            "context_proxy_tokens_out", "History tokens forwarded.", registry=r
        )
        self.reductions = Counter(
            "context_proxy_reductions", "Chat turns by reduction kind.", ["kind"], registry=r
        )
        self.summaries_made = Counter(
            "context_proxy_summaries_made",
            "Summaries a turn made while it waited (those prepared ahead: summaries_prepared).",
            registry=r,
        )
        self.summaries_reused = Counter(
            "context_proxy_summaries_reused", "Turns that forwarded a stored summary.", registry=r
        )
        self.summary_waits = Counter(
            "context_proxy_summary_waits", "Turns that waited on a summariser call.", registry=r
        )
        self.summaries_prepared = Counter(
            "context_proxy_summaries_prepared", "Summaries prepared in the background.", registry=r
        )
        self.summarizer_failures = Counter(
            "context_proxy_summarizer_failures",
            "Summariser calls that failed or were skipped.",
            registry=r,
        )
        self.store_errors = Counter(
            "context_proxy_store_errors", "Store operations that failed.", ["operation"], registry=r
        )
        self.active_streams = Gauge(
            "context_proxy_active_streams",
            "Streamed answers being relayed now.",
            registry=r,
            multiprocess_mode="livesum",  # the live workers' streams, added up
        )
        self.recall_hits = Counter(
            "context_proxy_recall_hits", "Archived messages brought back by recall.", registry=r
        )
        self.embeddings = Counter(
            "context_proxy_embeddings",
            "Messages embedded for recall, by outcome (ok, failed).",
            ["outcome"],
            registry=r,
        )
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Counter | Histogram, *values: str) -> Any:
        """`metric.labels(*values)`, looked up once: prometheus-client validates the
        values and takes a lock on every `labels` call, a few us on each request.

        Label values are bounded by design (routes, statuses, reduction kinds).
        """
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def render(self) -> bytes:
        if self.shared is None:
            return generate_latest(self.registry)
        every = CollectorRegistry()
        multiprocess.MultiProcessCollector(every, path=self.shared)  # type: ignore[no-untyped-call]
        return generate_latest(every)

    def close(self) -> None:
        """A worker that stops takes its streams out of the shared gauge (its counts stay)."""
        if self.shared is not None:
            multiprocess.mark_process_dead(os.getpid(), self.shared)  # type: ignore[no-untyped-call]

    def turn(self, kinds: Iterable[str], tokens_in: int, tokens_out: int) -> None:
        for kind in kinds:
            self.child(self.reductions, kind).inc()
            if kind == "reused":
                self.summaries_reused.inc()
        self.tokens_in.inc(tokens_in)
        self.tokens_out.inc(tokens_out)


class RequestMetrics:
    """Pure ASGI middleware counting answered requests by route template and status.

    Pure ASGI rather than BaseHTTPMiddleware, which would buffer streamed
    answers and break context variables.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.child(
                self.metrics.requests, route_of(scope["path"]), str(status or 499)
            ).inc()


# The OpenAI API's first path segments under /v1/: a fixed set, so a client
# cannot add time series (or its own strings) to an unauthenticated page.
KNOWN_V1 = frozenset(
    {
        "assistants", "audio", "batches", "chat", "completions", "containers",
        "conversations", "embeddings", "evals", "files", "fine_tuning", "images",
        "messages", "models", "moderations", "organization", "realtime", "responses",
        "threads", "uploads", "vector_stores",
    }
)  # fmt: skip


def route_of(path: str) -> str:
    """A bounded label: known route families, and `other` for everything else."""
    if path == "/v1/chat/completions":
        return path
    if path.startswith("/v1/"):
        first = path[4:].split("/", 1)[0]
        return f"/v1/{first}" if first in KNOWN_V1 else "/v1/other"
    if path.startswith("/admin/"):
        return "/admin"
    return path if path in ("/healthz", "/metrics") else "other"
