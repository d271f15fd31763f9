"""The `none`, `messages` and `tokens` strategies: windows over whole units.

Both windows use hysteresis so that providers' prompt caches keep hitting:
between two cuts the forwarded request only grows at its end.

- `messages` (Steamship's MessageWindow, the cache-aware reducer's
  MessageCounting) cuts only when the tail holds more than
  `target_messages + threshold_messages` messages, and then back to
  `target_messages` (fewer if a unit would straddle the line).
- `tokens` (Steamship's TokenWindow) cuts only when the history passes
  `budget.limit`, and then back to `budget.keep_recent` tokens of tail, so
  the next turns have `limit - keep_recent` tokens of room before the next cut.
"""

from __future__ import annotations

from .layout import Context, finish
from .types import Reduction


def reduce_none(ctx: Context) -> Reduction:
    """Bypass: forward everything (a stored summary included), repaired but never cut."""
    return finish(ctx, blocks=ctx.state.summaries, kinds=(), fit=False)


def _reused(ctx: Context) -> set[str]:
    return {"reused"} if ctx.state.summaries else set()


def reduce_messages(ctx: Context) -> Reduction:
    budget = ctx.budget
    count = ctx.tail_messages
    limit = budget.target_messages + budget.threshold_messages
    if count <= limit:
        return finish(ctx, blocks=ctx.state.summaries, kinds=_reused(ctx))
    drop = ctx.tail.keep_messages_drop(ctx.active, budget.target_messages)
    return finish(
        ctx,
        blocks=ctx.state.summaries,
        kinds=_reused(ctx) | ({"windowed"} if drop else set()),
        selected=range(drop, len(ctx.units)),
    )


def reduce_tokens(ctx: Context) -> Reduction:
    """The cut itself is `finish`'s fit rule: past `limit`, back to `keep_recent`."""
    return finish(ctx, blocks=ctx.state.summaries, kinds=_reused(ctx))
