"""The `filter` strategy: smart tool-chain filtering over conversation segments, with hysteresis.

A segment is a user message and everything that answers it (tool chains
included); pinned context injections (units whose text starts with one of
`policy.pinned_prefixes`) never open or belong to a segment. The last user
message onward is the active turn.

Trigger. Filtering every turn would change the middle of every request and
defeat providers' prompt caches, so the forwarded request only grows at its
end until a threshold is crossed: the history (everything forwarded) passes
`budget.limit` tokens, or the tail holds more than `target_messages +
threshold_messages` messages. Then adaptive levels choose which completed
segments survive:

- up to 2 completed segments: keep both;
- 3 to 5: keep 2, the newest plus the newest other one that used tools
  (else the next newest);
- more than 5: the same 2, or only the newest when the token threshold
  was crossed (aggressive filtering under pressure).

If still over `budget.limit`, kept segments are dropped oldest first down to
`budget.keep_recent` tokens of history, then pinned injections oldest first
until it fits (the fit is a hard guarantee, "always kept" is not). Every
other completed segment is dropped for good: `tail_start` moves past the
dropped region, so the level sees the conversation since the last
reduction, and the next trigger is far away.

Stored context. Units kept from before the new `tail_start` (pinned
injections, the retained tool segment) are stored in `extra["kept"]` as
`[abs_start, pinned, segment, messages]` and forwarded right after the
leading messages and summary, in their original order. Stored segments are
candidates again at the next reduction; stored pinned injections stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..messages import Message
from .chains import Unit
from .layout import Context, finish
from .types import Reduction


@dataclass(frozen=True)
class _Item:
    """A unit that may be forwarded: stored (no client messages left in the tail) or in the tail."""

    start: int
    pinned: bool
    segment: int  # absolute start of its segment; -1: pinned; -2: the active turn
    unit: Unit
    tail: int = -1  # index in ctx.units, -1 when stored

    def entry(self) -> list[Any]:
        return [self.start, self.pinned, self.segment, [dict(m) for m in self.unit.forward]]


def _stored(ctx: Context) -> list[_Item]:
    raw = ctx.state.extra.get("kept")
    items: list[_Item] = []
    for entry in raw if isinstance(raw, list) else ():
        if not (isinstance(entry, list | tuple) and len(entry) == 4):
            continue
        start, pinned, segment, messages = entry
        if isinstance(start, int) and start < ctx.state.tail_start and isinstance(messages, list):
            forward: tuple[Message, ...] = tuple(m for m in messages if isinstance(m, dict))
            if not forward:  # a repaired orphan: nothing of it is forwarded
                continue
            unit = Unit.of(*forward, dialect=ctx.policy.dialect)
            items.append(_Item(start, bool(pinned), int(segment), unit))
    return sorted(items, key=lambda i: i.start)


def _tail(ctx: Context) -> list[_Item]:
    items: list[_Item] = []
    pos, segment = ctx.state.tail_start, None
    for i, unit in enumerate(ctx.units):
        pinned = unit.starts_with(ctx.policy.pinned_prefixes)
        if i >= ctx.active:
            seg = -2
        elif pinned:
            seg = -1
        else:
            if segment is None or unit.opens_turn:
                segment = pos
            seg = segment
        items.append(_Item(pos, pinned and i < ctx.active, seg, unit, i))
        pos += unit.size
    return items


def _choose(items: Sequence[_Item], pressure: bool) -> set[int]:
    """The adaptive levels over completed segments; returns the segments kept."""
    order: list[int] = []
    tools: set[int] = set()
    for item in items:
        if item.segment >= 0:
            if item.segment not in order:
                order.append(item.segment)
            if item.unit.has_tool_calls:
                tools.add(item.segment)
    n = len(order)
    if n <= 2:
        return set(order)
    newest, older = order[-1], order[:-1]
    if n > 5 and pressure:
        return {newest}
    with_tools = [s for s in older if s in tools]
    return {newest, (with_tools or older)[-1]}


def reduce_filter(ctx: Context) -> Reduction:
    budget = ctx.budget
    stored, tail = _stored(ctx), _tail(ctx)
    items = [*stored, *tail]
    head = ctx.tokens(ctx.head(ctx.state.summaries))
    sizes = {id(i): ctx.tokens(i.unit.forward) for i in items}
    total = head + sum(sizes.values())
    count = ctx.messages_in(ctx.units)
    by_tokens = total > budget.limit
    by_count = count > budget.target_messages + budget.threshold_messages
    reused = {"reused"} if ctx.state.summaries else set()
    if not (by_tokens or by_count):
        return _forward(ctx, stored, tail, 0, reused)

    kept = _choose(items, by_tokens)
    keep = [i for i in items if i.segment < 0 or i.segment in kept]
    total = head + sum(sizes[id(i)] for i in keep)
    if total > budget.limit:
        target = min(budget.limit, head + budget.keep_recent)
        for segment in sorted(kept):
            if total <= target:
                break
            total -= sum(sizes[id(i)] for i in keep if i.segment == segment)
            keep = [i for i in keep if i.segment != segment]
        for item in [i for i in keep if i.pinned]:
            if total <= budget.limit:
                break
            keep.remove(item)
            total -= sizes[id(item)]

    kept_ids = {id(i) for i in keep}
    cut = len(tail)
    while cut > 0 and id(tail[cut - 1]) in kept_ids:
        cut -= 1
    cut = min(cut, ctx.active)
    new_stored = [i for i in keep if i.tail < cut]
    dropped_units = len(items) - len(keep)
    kinds = reused | ({"filtered"} if dropped_units else set())
    gone = [m for i in stored if id(i) not in kept_ids for m in i.unit.forward]
    return _forward(ctx, new_stored, tail[cut:], cut, kinds, gone)


def _forward(
    ctx: Context,
    stored: Sequence[_Item],
    tail: Sequence[_Item],
    cut: int,
    kinds: set[str],
    stored_gone: Sequence[Message] = (),
) -> Reduction:
    pieces = [Unit((), i.unit.forward, dialect=i.unit.dialect) for i in stored] + [
        i.unit for i in tail
    ]
    first_active = len(stored) + max(0, ctx.active - cut)
    return finish(
        ctx,
        blocks=ctx.state.summaries,
        kinds=kinds,
        pieces=pieces,
        mandatory=range(first_active, len(pieces)),
        skipped=sum(u.size for u in ctx.units[:cut]),
        extra={**ctx.state.extra, "kept": [i.entry() for i in stored]},
        cut_kind="filtered",
        stored_gone=stored_gone,
    )
