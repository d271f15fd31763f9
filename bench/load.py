"""The load generator: a bounded async client (aiohttp) in the bench process.

A run is bounded twice, by a request count and by a deadline, so a slow
target costs time but never hangs the bench. Connections are opened by a
warm-up round before the clock and the CPU meter start, so the figures are
about serving requests, not about accepting sockets.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from .bodies import Template
from .procs import Server

HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
_counter = itertools.count(1)


@dataclass
class RunResult:
    """One short run against one target."""

    requests: int
    errors: int
    wall_s: float
    latencies_ms: list[float]
    cpu_s: float | None
    reductions: Counter[str] = field(default_factory=Counter)

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s if self.wall_s > 0 else 0.0

    def pct(self, q: float) -> float:
        data = sorted(self.latencies_ms)
        if not data:
            return float("nan")
        return data[min(len(data) - 1, int(q / 100 * len(data)))]

    @property
    def cpu_ms_per_request(self) -> float | None:
        if self.cpu_s is None or not self.requests:
            return None
        return self.cpu_s * 1000 / self.requests


async def _post(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    label: str = "",
) -> tuple[int, str]:
    async with session.post(url, data=body, headers=headers) as resp:
        if resp.status != 200:  # say why, once per kind: a failed run must be explainable
            text = (await resp.read())[:300].decode(errors="replace")
            if (resp.status, text) not in _REPORTED:
                _REPORTED.add((resp.status, text))
                print(f"bench: {label or url} answered {resp.status}: {text}", file=sys.stderr)
        async for _ in resp.content.iter_any():
            pass
        return resp.status, resp.headers.get("x-context-reduction", "")


_REPORTED: set[tuple[int, str]] = set()


async def load(
    base_url: str,
    template: Template,
    concurrency: int,
    *,
    max_requests: int,
    duration_s: float,
    conversation: Callable[[int, int], str],
    server: Server | None,
    strategy: str | None = None,
) -> RunResult:
    """`concurrency` workers, each playing its own conversations, until either bound is hit.

    `strategy` is sent as `X-Context-Strategy`, so one proxy process serves
    both `none` and `summarize` runs.
    """
    url = base_url + template.path
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    timeout = aiohttp.ClientTimeout(total=120)
    latencies: list[float] = []
    reductions: Counter[str] = Counter()
    errors = 0
    base = {**HEADERS, "x-context-strategy": strategy} if strategy else HEADERS
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        # Off the clock: opens the connections and each worker's first
        # conversation (for `steady`, the turn that makes the first summary).
        first = [{**base, "x-conversation-id": conversation(w, 0)} for w in range(concurrency)]
        label = server.name if server is not None else url
        await asyncio.gather(*(_post(session, url, template.opening(), h, label) for h in first))
        remaining = max_requests
        deadline = time.perf_counter() + duration_s

        async def worker(w: int) -> None:
            nonlocal remaining, errors
            turn = 1
            grown = b""
            headers = first[w]
            while remaining > 0 and time.perf_counter() < deadline:
                remaining -= 1
                if turn % template.turns == 0:
                    headers = {**base, "x-conversation-id": conversation(w, turn)}
                    grown = b""
                else:
                    grown += template.step(next(_counter))
                turn += 1
                body = template.body(grown)
                t0 = time.perf_counter()
                try:
                    status, reduction = await _post(session, url, body, headers, label)
                except (aiohttp.ClientError, TimeoutError):
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - t0) * 1000)
                if status != 200:
                    errors += 1
                if reduction:
                    reductions[reduction] += 1

        cpu0 = server.cpu() if server else None
        start = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        wall = time.perf_counter() - start
        cpu = server.cpu() - cpu0 if server and cpu0 is not None else None
    return RunResult(len(latencies), errors, wall, latencies, cpu, reductions)


async def replay(
    base_url: str,
    conversations: Sequence[tuple[str, Sequence[bytes]]],
    concurrency: int,
) -> Counter[int]:
    """Send each conversation's bodies in order (one worker per conversation at a time)."""
    url = f"{base_url}/v1/chat/completions"
    queue: asyncio.Queue[tuple[str, Sequence[bytes]]] = asyncio.Queue()
    for item in conversations:
        queue.put_nowait(item)
    statuses: Counter[int] = Counter()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=300)
    ) as session:

        async def worker() -> None:
            while not queue.empty():
                conv_id, bodies = queue.get_nowait()
                h = {**HEADERS, "x-conversation-id": conv_id}
                for body in bodies:
                    status, _ = await _post(session, url, body, h)
                    statuses[status] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses
