"""Per-turn cost against history length.

Conversations of 10, 100 and 1,000 messages grow in full-history mode: a
warm-up turn stores the history, then each measured turn resends all of it
plus the stored answer and one new question. The proxy's CPU per measured
turn is compared with the floor's CPU for the very same bodies, so "net" is
what the proxy does beyond parsing and re-serialising the body; the target asks
that it not grow with the history. (The proxy parses only a resent body's new
bytes, so net can shrink as the history grows: the floor parses all of it.)

A few dozen requests take a fraction of a CPU second, so one pass is at the
mercy of whatever else the machine does in that instant. Each size is
measured in `ROUNDS` rounds on fresh conversations, proxy then floor in
each, and the medians of the rounds are reported.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass

from .bodies import growing
from .load import replay
from .matrix import Plan
from .procs import Server

SIZES = (10, 100, 1000)
ROUNDS = 3
CHECKPOINT_SETTLE_S = 1.5


@dataclass
class TurnCost:
    messages: int
    requests: int
    proxy_ms: float
    floor_ms: float
    body_kb: float
    net_ms: float  # median over rounds of proxy minus floor


async def turn_costs(proxy: Server, floor: Server, plan: Plan, rep: int) -> list[TurnCost]:
    out: list[TurnCost] = []
    for n in SIZES:
        rounds = [
            [
                (f"turns-{n}-r{rep}-{k}-{i}", growing(n, plan.turns, seed=1000 * rep + 100 * k + i))
                for i in range(plan.turn_convs[n])
            ]
            for k in range(ROUNDS)
        ]
        await replay(proxy.url, [(c, b[:1]) for convs in rounds for c, b in convs], 4)
        # The warm-up's writes are checkpointed a second after the last one (see
        # proxy/store/sqlite/); that cost belongs to storing the histories, not
        # to the measured turns.
        await asyncio.sleep(CHECKPOINT_SETTLE_S)
        proxy_ms: list[float] = []
        floor_ms: list[float] = []
        net_ms: list[float] = []
        kb = 0.0
        requests = 0
        for convs in rounds:
            measured = [(c, b[1:]) for c, b in convs]
            count = sum(len(b) for _, b in measured)
            cpu0 = proxy.cpu()
            statuses = await replay(proxy.url, measured, 4)
            proxy_s = proxy.cpu() - cpu0
            cpu0 = floor.cpu()
            await replay(floor.url, measured, 4)
            floor_s = floor.cpu() - cpu0
            if set(statuses) != {200}:
                raise RuntimeError(f"per-turn run at {n} messages got statuses {dict(statuses)}")
            proxy_ms.append(proxy_s * 1000 / count)
            floor_ms.append(floor_s * 1000 / count)
            net_ms.append(proxy_ms[-1] - floor_ms[-1])
            kb = statistics.mean(len(x) for _, b in measured for x in b) / 1024
            requests += count
        out.append(
            TurnCost(
                n,
                requests,
                statistics.median(proxy_ms),
                statistics.median(floor_ms),
                kb,
                statistics.median(net_ms),
            )
        )
    return out
