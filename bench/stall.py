"""Whether one maximal request stalls everyone else: /healthz latency while it is handled.

A client polls `/healthz` every 10 ms, first with the proxy idle, then while
another sends the largest request the default limits accept (19,000 messages,
about 15 MB) as a new conversation. The figure is the worst poll while busy
against the worst while idle, in one run; the idle figure also says what a
loaded machine adds on its own. The target, 50x, is the 100 ms a health check
may take against the couple of milliseconds it takes idle.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

import aiohttp
import orjson

from .procs import Server

BIG_MODEL = "bench-big"  # given a window that holds the whole request
BIG_WINDOW = 100_000_000
MESSAGES = 19_000
WORDS_PER_MESSAGE = 100


@dataclass
class Stall:
    idle_ms: float
    busy_ms: float
    request_s: float

    @property
    def ratio(self) -> float:
        return self.busy_ms / self.idle_ms if self.idle_ms else float("nan")


def maximal_body(seed: int) -> bytes:
    rng = random.Random(seed)
    words = ["".join(rng.choices("abcdefghij", k=6)) for _ in range(5000)]
    messages = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": " ".join(rng.choices(words, k=WORDS_PER_MESSAGE)),
        }
        for i in range(MESSAGES + 1)
    ]
    return orjson.dumps({"model": BIG_MODEL, "messages": messages})


async def _poll(
    session: aiohttp.ClientSession, url: str, worst: list[float], stop: asyncio.Event
) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        async with session.get(url + "/healthz") as resp:
            await resp.read()
        worst[0] = max(worst[0], time.perf_counter() - started)
        await asyncio.sleep(0.01)


async def stall(proxy: Server, reps: int) -> Stall:
    """The median over `reps` of the worst /healthz poll idle and during a maximal request."""
    idle, busy, took = [], [], []
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for rep in range(reps):
            body = maximal_body(seed=rep)
            for phase in ("idle", "busy"):
                worst = [0.0]
                stop = asyncio.Event()
                poller = asyncio.create_task(_poll(session, proxy.url, worst, stop))
                started = time.perf_counter()
                if phase == "idle":
                    await asyncio.sleep(1.0)
                else:
                    headers = {
                        "authorization": "Bearer sk-bench-stall",
                        "content-type": "application/json",
                        "x-conversation-id": f"stall-{rep}",
                    }
                    async with session.post(
                        proxy.url + "/v1/chat/completions", data=body, headers=headers
                    ) as resp:
                        await resp.read()
                        if resp.status != 200:
                            raise RuntimeError(f"maximal request got {resp.status}")
                    took.append(time.perf_counter() - started)
                stop.set()
                await poller
                (idle if phase == "idle" else busy).append(worst[0] * 1000)
    mid = reps // 2
    return Stall(sorted(idle)[mid], sorted(busy)[mid], sorted(took)[mid])
