"""Sharing the event loop: a large request's stages give way to the other requests.

Everything a request does between two awaits holds the event loop, and every
other request, `/healthz` included, waits for it. For ordinary requests these
holds are well under a millisecond. A request of many megabytes or thousands of
messages holds it for tens of milliseconds at a stage, so its stages give way
between them (`let_others_run`), and the one stage that would otherwise scale
with its whole history, grouping a tail no earlier turn grouped, goes in steps
(`grouped_in_steps`; not under `mask`, which groups its own cleared copy of the
tail). Neither changes what the request computes. The commit does not give way:
a cancelled request (a client gone at its last byte) would then store nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..messages import Message
from ..reduction.tail import Tail, grouped_tail
from ..reduction.types import Counter, Policy

# A body this large holds the event loop for milliseconds at each stage.
LARGE_BODY = 1 << 20
# A tail longer than this that no earlier turn grouped is grouped this many
# messages at a time; each step then holds the loop for a few milliseconds
# (the figures are in docs/performance.md).
GROUP_STEP = 2000
# How long a large request's stage waits for the others.
YIELD_S = 0.0005


async def let_others_run() -> None:
    """Give the event loop to everything else that is ready, then go on.

    A `sleep(0)` alone would come back before requests that arrived
    meanwhile are even started: their first steps queue behind this one.
    A timer lets the loop run them all first.
    """
    await asyncio.sleep(YIELD_S)


async def grouped_in_steps(
    tail: Sequence[Message], count: Counter, policy: Policy, step: int = GROUP_STEP
) -> Tail:
    """`tail` grouped as `grouped_tail` groups it, `step` messages at a time.

    Each step extends the last as a memo extends a turn's tail (its last
    unit, maybe unfinished, is regrouped), so the result equals grouping the
    tail at once; between the steps the other requests run.
    """
    memo: Tail | None = None
    for end in range(step, max(len(tail), 1) + step, step):
        memo = grouped_tail(tail[:end], count, policy.repair_tool_chains, memo, policy.dialect)
        await let_others_run()
    assert memo is not None
    return memo
