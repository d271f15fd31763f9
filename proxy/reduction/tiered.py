"""The `tiered` strategy: Agent Zero's current topic / historical topics / bulks.

A topic is a user message and everything until the next one. The history
budget (`budget.limit`) is split 50 % current topic, 30 % historical topics,
20 % bulks. Each turn, deterministically:

1. Topics beyond the `TOPICS_KEEP_COUNT` newest historical ones become
   bulks: one summary each, stored as a `SummaryBlock`, and their messages
   leave the tail (`tail_start` moves past them).
2. In historical topics, a message over `LARGE_MESSAGE_TO_TOPIC_RATIO` of the
   topics budget is cut to that size around a `[...N...]` marker.
3. While historical topics exceed their budget, topics are compressed,
   oldest first: the first and last units stay, `ceil((n - 2) * 0.65)` units
   right after the first are replaced by one summary. `n` counts units, not
   messages, so a tool chain is never split; on plain conversations this is
   exactly the seed's arithmetic. Then, if still over, the oldest historical
   topics become bulks.
4. While bulks exceed their budget, the three oldest are merged into one
   summary; when merging cannot make room the oldest bulk is dropped.

Forwarding: bulks travel in the one system summary message after the
leading instructions (the design allows only one). A compressed middle stays
in place as an assistant message "[summary of N earlier messages] ...": it
follows a user message or a complete unit and precedes a unit that never
starts with a tool result, so the role sequence stays valid. Its text is
recomputed every turn from the raw messages, so obtained texts are cached
in `state.extra["summaries"]` and reused without new requests. Any missing
text is requested (several requests per call are fine) and the fallback
drops what it would have summarised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..messages import Message, system_message
from .chains import Unit, segment_starts
from .layout import Context, finish, summary_key, summary_message
from .truncate import shrink
from .types import Budget, Reduction, SummaryBlock, SummaryRequest

CURRENT_TOPIC_RATIO = 0.5
HISTORY_TOPIC_RATIO = 0.3
HISTORY_BULK_RATIO = 0.2
TOPIC_COMPRESS_PERCENT = 65
LARGE_MESSAGE_TO_TOPIC_RATIO = 0.25
BULK_MERGE_COUNT = 3
TOPICS_KEEP_COUNT = 3


@dataclass(frozen=True)
class Allocation:
    current: int
    topics: int
    bulks: int


def allocation(budget: Budget) -> Allocation:
    history = budget.limit
    return Allocation(
        int(history * CURRENT_TOPIC_RATIO),
        int(history * HISTORY_TOPIC_RATIO),
        int(history * HISTORY_BULK_RATIO),
    )


def compress_count(n: int) -> int:
    """How many of a topic's `n` units are summarised: ceil((n - 2) * 0.65), in exact integers."""
    eligible = max(0, n - 2)
    return -(-eligible * TOPIC_COMPRESS_PERCENT // 100)


def compressed_length(n: int) -> int:
    """Units left after compressing `n`: first + summary + the rest (4/6/8/12 -> 3/4/5/6)."""
    k = compress_count(n)
    return n - k + 1 if k else n


@dataclass
class _Book:
    """Summary texts: from this call's answers, from the cache, or requested."""

    given: Mapping[str, str]
    cache: Mapping[str, str]
    used: dict[str, str] = field(default_factory=dict)
    requests: list[SummaryRequest] = field(default_factory=list)
    new: bool = False
    old: bool = False

    def obtain(self, messages: Sequence[Message], previous: Sequence[str] = ()) -> str | None:
        key = summary_key(previous, messages)
        for source in (self.given, self.cache):
            text = source.get(key)
            if isinstance(text, str):
                self.used[key] = text
                if source is self.given and key not in self.cache:
                    self.new = True
                else:
                    self.old = True
                return text
        if all(r.key != key for r in self.requests):
            self.requests.append(SummaryRequest(key, tuple(messages), tuple(previous)))
        return None


def _topics(ctx: Context) -> list[list[int]]:
    starts = sorted({*segment_starts(ctx.units), ctx.active}) if ctx.units else []
    ends = [*starts[1:], len(ctx.units)]
    return [list(range(a, b)) for a, b in zip(starts, ends, strict=True)]


def reduce_tiered(ctx: Context) -> Reduction:
    alloc = allocation(ctx.budget)
    cached = ctx.state.extra.get("summaries")
    book = _Book(ctx.summaries, cached if isinstance(cached, Mapping) else {})
    blocks = list(ctx.state.summaries)
    kinds: set[str] = set()
    topics = _topics(ctx)
    current = topics.pop() if topics else []
    skipped = 0

    def to_bulk(topic: list[Unit]) -> None:
        nonlocal skipped
        messages = [m for u in topic for m in u.messages]
        skipped += len(messages)
        text = book.obtain(messages)
        if text is None:
            kinds.add("windowed")
        else:
            blocks.append(SummaryBlock(text, ctx.state.tail_start + skipped))

    history = [[ctx.units[i] for i in topic] for topic in topics]
    while len(history) > TOPICS_KEEP_COUNT:
        to_bulk(history.pop(0))
    cap = int(alloc.topics * LARGE_MESSAGE_TO_TOPIC_RATIO)
    shaped = [[_cut_large(u, cap, ctx, kinds) for u in topic] for topic in history]
    for i in range(len(shaped)):
        if _tokens(ctx, shaped) <= alloc.topics:
            break
        shaped[i] = _compress(shaped[i], book, kinds)
    while shaped and _tokens(ctx, shaped) > alloc.topics:
        shaped.pop(0)
        to_bulk(history.pop(0))
    blocks = _fit_bulks(ctx, blocks, alloc.bulks, book, kinds)

    pieces = [u for topic in shaped for u in topic] + [ctx.units[i] for i in current]
    if book.new:
        kinds.add("summarized")
    elif blocks or book.old:
        kinds.add("reused")
    return finish(
        ctx,
        blocks=blocks,
        kinds=kinds,
        pieces=pieces,
        mandatory=range(len(pieces) - len(current), len(pieces)),
        skipped=skipped,
        extra={**ctx.state.extra, "summaries": book.used},
        requests=book.requests,
        cut_to=ctx.budget.limit,
        reason=f"{len(blocks)} bulks, {len(shaped)} historical topics, "
        f"{len(book.requests)} summaries requested",
    )


def _tokens(ctx: Context, topics: list[list[Unit]]) -> int:
    return sum(ctx.tokens(u.forward) for topic in topics for u in topic)


def _cut_large(unit: Unit, cap: int, ctx: Context, kinds: set[str]) -> Unit:
    forward: list[Message] = []
    for message in unit.forward:
        smaller = shrink(message, cap, ctx.count) if ctx.count(message) > cap else None
        forward.append(message if smaller is None else smaller)
        if smaller is not None:
            kinds.add("truncated")
    if all(a is b for a, b in zip(forward, unit.forward, strict=True)):
        return unit
    return Unit(unit.messages, tuple(forward), unit.repaired)


def _compress(topic: list[Unit], book: _Book, kinds: set[str]) -> list[Unit]:
    k = compress_count(len(topic))
    if k == 0:
        return topic
    middle = topic[1 : 1 + k]
    messages = tuple(m for u in middle for m in u.messages)
    text = book.obtain(messages)
    if text is None:
        kinds.add("windowed")
        return [topic[0], Unit(messages, ()), *topic[1 + k :]]
    note: Message = {
        "role": "assistant",
        "content": f"[summary of {len(messages)} earlier messages] {text}",
    }
    return [topic[0], Unit(messages, (note,)), *topic[1 + k :]]


def _fit_bulks(
    ctx: Context, blocks: list[SummaryBlock], room: int, book: _Book, kinds: set[str]
) -> list[SummaryBlock]:
    def size(bs: Sequence[SummaryBlock]) -> int:
        message = summary_message(bs)
        return ctx.count(message) if message else 0

    pending = False
    while blocks and size(blocks) > room:
        if len(blocks) >= BULK_MERGE_COUNT and not pending:
            group = blocks[:BULK_MERGE_COUNT]
            text = book.obtain((), tuple(b.text for b in group))
            merged = None if text is None else SummaryBlock(text, group[-1].covers)
            if merged is not None and ctx.count(system_message(text or "")) < size(group):
                blocks = [merged, *blocks[BULK_MERGE_COUNT:]]
                continue
            pending = text is None
        blocks = blocks[1:]
        kinds.add("windowed")
    return blocks
