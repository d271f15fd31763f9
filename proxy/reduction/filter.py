"""The `filter` strategy: smart tool-chain filtering over conversation segments.

A segment is a user message and everything that answers it (tool chains
included); the last one is the active turn. Always kept: the leading
instructions, pinned context injections (text starting with one of
`policy.pinned_prefixes`, kept in place), the active turn and at least the
most recent completed segment. The seed's adaptive levels:

- up to 2 completed segments: keep both;
- 3 to 5: keep 2, the newest plus the newest other one that used tools
  (else the next newest);
- more than 5: the same 2, or only the newest when the history is under
  pressure (over `budget.limit`).

The common fit rule then drops more old segments if still over the limit.

Filtering is a view, like the seed's: it is recomputed every turn from the
whole working history, whose `tail_start` it never moves (`dropped` is 0).
So the level keeps seeing the real conversation length, and segments that
were filtered out can come back. The price is prefix stability: this
strategy trades prompt-cache hits for the smallest request.
"""

from __future__ import annotations

from .chains import segment_starts
from .layout import Context, finish
from .types import Reduction


def reduce_filter(ctx: Context) -> Reduction:
    units = ctx.units
    starts = [s for s in segment_starts(units) if s < ctx.active] if units else []
    ends = [*starts[1:], ctx.active] if starts else []
    completed = [range(a, b) for a, b in zip(starts, ends, strict=True)]
    total = ctx.tokens(ctx.head(ctx.state.summaries)) + sum(ctx.sizes)
    n = len(completed)

    if n <= 2:
        keep = completed
    else:
        newest, older = completed[-1], completed[:-1]
        keep = [newest]
        if not (n > 5 and total > ctx.budget.limit):
            with_tools = [s for s in older if any(units[i].has_tool_calls for i in s)]
            keep.insert(0, (with_tools or older)[-1])

    pinned = {i for i, u in enumerate(units) if u.starts_with(ctx.policy.pinned_prefixes)}
    selected = {i for seg in keep for i in seg} | pinned
    mandatory = pinned | set(range(ctx.active, len(units)))
    dropped = [i for i in range(ctx.active) if i not in selected]
    return finish(
        ctx,
        blocks=ctx.state.summaries,
        kinds=({"filtered"} if dropped else set()) | ({"reused"} if ctx.state.summaries else set()),
        selected=selected,
        mandatory=mandatory,
        advance=False,
        cut_kind="filtered",
        reason=f"{n} completed segments, kept {len(keep)}; {len(dropped)} units filtered",
    )
