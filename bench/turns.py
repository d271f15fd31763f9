"""Per-turn cost against history length (issue 5, point 2).

Conversations of 10, 100 and 1,000 messages grow in full-history mode: a
warm-up turn stores the history, then each measured turn resends all of it
plus the stored answer and one new question. The proxy's CPU per measured
turn is compared with the floor's CPU for the very same bodies, so "net" is
what the proxy does beyond parsing and re-serialising the body; issue 5 asks
that it not grow with the history.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .bodies import growing
from .load import replay
from .matrix import Plan
from .procs import Server

SIZES = (10, 100, 1000)


@dataclass
class TurnCost:
    messages: int
    requests: int
    proxy_ms: float
    floor_ms: float
    body_kb: float

    @property
    def net_ms(self) -> float:
        return self.proxy_ms - self.floor_ms


async def turn_costs(proxy: Server, floor: Server, plan: Plan, rep: int) -> list[TurnCost]:
    out: list[TurnCost] = []
    for n in SIZES:
        convs = [
            (f"turns-{n}-r{rep}-{i}", growing(n, plan.turns, seed=1000 * rep + i))
            for i in range(plan.turn_convs[n])
        ]
        await replay(proxy.url, [(c, b[:1]) for c, b in convs], 4)
        measured = [(c, b[1:]) for c, b in convs]
        requests = sum(len(b) for _, b in measured)
        cpu0 = proxy.cpu()
        statuses = await replay(proxy.url, measured, 4)
        proxy_s = proxy.cpu() - cpu0
        cpu0 = floor.cpu()
        await replay(floor.url, measured, 4)
        floor_s = floor.cpu() - cpu0
        if set(statuses) != {200}:
            raise RuntimeError(f"per-turn run at {n} messages got statuses {dict(statuses)}")
        kb = statistics.mean(len(x) for _, b in measured for x in b) / 1024
        out.append(TurnCost(n, requests, proxy_s * 1000 / requests, floor_s * 1000 / requests, kb))
    return out
