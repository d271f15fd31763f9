"""Share of turns that waited on the summariser.

A second mock upstream answers chats after `ANSWER_DELAY_S` (a fast model)
and summaries after `SUMMARY_DELAY_S` (a 1 s summariser);
a proxy of its own sends it everything. Long conversations grow in
full-history mode from a short opening, one turn at a time as an app plays
them (each turn waits for the previous answer), and cross the `bench-small`
window several times. The proxy's own counters say how many turns waited on
a summariser call and how many summaries it prepared in the background.
"""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import dataclass

from .bodies import long_conversation
from .load import replay
from .matrix import Plan
from .procs import Server

ANSWER_DELAY_S = 0.5
SUMMARY_DELAY_S = 1.0


@dataclass
class Waits:
    conversations: int
    turns: int
    waited: int
    prepared: int
    made: int

    @property
    def share(self) -> float:
        return self.waited / self.turns if self.turns else float("nan")


def counters(server: Server) -> dict[str, float]:
    """The proxy's Prometheus counters, by name without the `_total` suffix."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("context_proxy_") and "{" not in line:
            name, _, value = line.partition(" ")
            out[name.removesuffix("_total")] = float(value)
    return out


async def summary_waits(proxy: Server, plan: Plan) -> Waits:
    convs = [
        (f"waits-{i}", long_conversation(plan.wait_turns, seed=5000 + i))
        for i in range(plan.wait_convs)
    ]
    before = await asyncio.to_thread(counters, proxy)
    statuses = await replay(proxy.url, convs, len(convs))
    after = await asyncio.to_thread(counters, proxy)
    if set(statuses) != {200}:
        raise RuntimeError(f"summary-wait run got statuses {dict(statuses)}")

    def delta(name: str) -> int:
        return int(after.get(name, 0) - before.get(name, 0))

    return Waits(
        conversations=len(convs),
        turns=sum(statuses.values()),
        waited=delta("context_proxy_summary_waits"),
        prepared=delta("context_proxy_summaries_prepared"),
        made=delta("context_proxy_summaries_made"),
    )
