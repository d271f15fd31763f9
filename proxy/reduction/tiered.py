"""The `tiered` strategy: Agent Zero's current topic / historical topics / bulks, with hysteresis.

A topic is a user message and everything until the next one; the last one
is the current topic and is never touched. The history budget
(`budget.limit`) is split 50 % current topic, 30 % historical topics, 20 %
bulks (120k window at 0.7: 84000 -> 42000 / 25200 / 16800).

Trigger. Agent Zero compresses only when the history is over its budget, so
this strategy does nothing while leading + bulks + tail (with the stored
compressions applied) stays within `budget.limit`: each request then extends
the previous one exactly, so providers' prompt caches keep hitting, and no
summary is asked for. Once over, one reduction runs, deterministically:

1. Historical topics beyond the `TOPICS_KEEP_COUNT` (3) newest leave the tail.
2. A historical message over `LARGE_MESSAGE_TO_TOPIC_RATIO` of the topics'
   share is cut to that size around a `[...N...]` marker.
3. While historical topics exceed `REDUCE_TO` (half) of their share, topics
   are compressed oldest first: first and last units stay,
   `ceil((n - 2) * 0.65)` units after the first become one summary (4/6/8/12
   units -> 3/4/5/6; `n` counts units, so a tool chain is never split). A
   topic is compressed once; if still over, the oldest topics leave as well.
4. Everything that left in this reduction becomes one bulk: one summary
   request, not one per topic, which would cost a summariser call per
   topic. Before it is added, while the
   stored bulks exceed half their share, the three oldest are merged into
   one summary; when merging cannot make room the oldest bulk is dropped.

Halving the tiers is the hysteresis: after a reduction at least half of the
topics' and bulks' shares is free, so the next trigger is many turns away.
Planning never depends on summary texts (a compressed middle is counted as
free), so the call without texts and the call with them make the same
decisions; the texts' own size is absorbed by that headroom and, if need
be, by the common fit rule.

State: bulks are `SummaryBlock`s; `extra["spans"]` holds compressed middles
as `[abs_start, abs_end, key, text]` (`key` hashes the raw messages, so a
span whose messages changed is ignored; `text` None means the fallback
dropped the middle) and `extra["cuts"]` holds `[abs_start, cap]` for cut
units. A compressed middle is forwarded in place as an assistant message
"[summary of N earlier messages] ...", which keeps the role sequence valid,
followed by the tool searches it held (`Dialect.loaders`), whose tools the
topic's later calls may need.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..dialects import Dialect
from ..messages import Message
from .chains import Unit
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
REDUCE_TO = 0.5
"""A reduction brings historical topics and bulks to this share of their allocation."""


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


@dataclass(frozen=True)
class _Piece:
    """A forwarded unit with the absolute body index of its first client message."""

    unit: Unit
    start: int
    compressed: bool = False

    @property
    def end(self) -> int:
        return self.start + self.unit.size


Topic = list[_Piece]


@dataclass
class _Book:
    """Summary texts given for this call, and the requests for the missing ones."""

    given: Mapping[str, str]
    dialect: Dialect
    requests: list[SummaryRequest] = field(default_factory=list)
    used: bool = False

    def obtain(self, messages: Sequence[Message], previous: Sequence[str] = ()) -> str | None:
        key = summary_key(previous, messages)
        text = self.given.get(key)
        if isinstance(text, str):
            self.used = True
            return text
        if all(r.key != key for r in self.requests):
            self.requests.append(
                SummaryRequest(key, tuple(messages), tuple(previous), self.dialect)
            )
        return None


@dataclass
class _View:
    """The tail as forwarded between reductions: stored spans and cuts applied."""

    pieces: list[_Piece]
    active: int
    spans: list[list[Any]]
    cuts: dict[int, int]


def _note(messages: tuple[Message, ...], text: str | None, dialect: Dialect) -> Unit:
    # The tool searches of the middle go on after its note: the topic's later calls of the
    # tools they loaded are kept after it (`Dialect.loaders`).
    tools = tuple(dialect.loaders(messages, ()))
    if text is None:
        return Unit(messages, tools, dialect=dialect)
    note = dialect.note(f"[summary of {len(messages)} earlier messages] {text}")
    return Unit(messages, (note, *tools), dialect=dialect)


def _rows(extra: Mapping[str, Any], key: str, width: int) -> list[Sequence[Any]]:
    rows = extra.get(key)
    if not isinstance(rows, list):
        return []
    return [r for r in rows if isinstance(r, list | tuple) and len(r) == width]


def _view(ctx: Context) -> _View:
    units, extra = ctx.units, ctx.state.extra
    starts: list[int] = []
    pos = ctx.state.tail_start
    for unit in units:
        starts.append(pos)
        pos += unit.size
    index = {s: i for i, s in enumerate(starts)}
    border = starts[ctx.active] if units else pos
    spans = {
        s: (e, k, t if isinstance(t, str) else None) for s, e, k, t in _rows(extra, "spans", 4)
    }
    cuts = {s: int(c) for s, c in _rows(extra, "cuts", 2) if s in index and s < border}
    pieces: list[_Piece] = []
    applied: list[list[Any]] = []
    i = 0
    while i < len(units):
        found = spans.get(starts[i])
        j = index.get(found[0], -1) if found else -1
        if found and i < j and found[0] <= border:
            messages = tuple(m for u in units[i:j] for m in u.messages)
            if summary_key((), messages) == found[1]:
                note = _note(messages, found[2], ctx.policy.dialect)
                pieces.append(_Piece(note, starts[i], True))
                applied.append([starts[i], found[0], found[1], found[2]])
                i = j
                continue
        unit = units[i]
        if starts[i] in cuts:
            unit = _cut(unit, cuts[starts[i]], ctx)[0]
        pieces.append(_Piece(unit, starts[i]))
        i += 1
    active = next((k for k, p in enumerate(pieces) if p.start == border), len(pieces))
    return _View(pieces, active, applied, cuts)


def _topics(view: _View) -> list[Topic]:
    topics: list[Topic] = []
    for k, piece in enumerate(view.pieces):
        if not topics or k == view.active or (piece.unit.opens_turn and not piece.compressed):
            topics.append([])
        topics[-1].append(piece)
    return topics


def _tokens(ctx: Context, pieces: Sequence[_Piece]) -> int:
    return sum(ctx.tokens(p.unit.forward) for p in pieces)


def reduce_tiered(ctx: Context) -> Reduction:
    view = _view(ctx)
    blocks = ctx.state.summaries
    total = ctx.tokens(ctx.head(blocks)) + _tokens(ctx, view.pieces)
    extra = _extra(ctx.state.extra, view.spans, view.cuts, ctx.state.tail_start)
    if total <= ctx.budget.limit:
        stored = bool(blocks or view.cuts or any(s[3] is not None for s in view.spans))
        return finish(
            ctx,
            blocks=blocks,
            kinds={"reused"} if stored else set(),
            pieces=[p.unit for p in view.pieces],
            mandatory=range(view.active, len(view.pieces)),
            extra=extra,
        )
    return _reduce(ctx, view)


def _reduce(ctx: Context, view: _View) -> Reduction:
    alloc = allocation(ctx.budget)
    book = _Book(ctx.summaries, ctx.policy.dialect)
    kinds: set[str] = set()
    topics = _topics(view)
    current = topics.pop() if topics and view.active < len(view.pieces) else []
    moving: list[Topic] = []
    while len(topics) > TOPICS_KEEP_COUNT:
        moving.append(topics.pop(0))

    cap = int(alloc.topics * LARGE_MESSAGE_TO_TOPIC_RATIO)
    cuts, fresh = dict(view.cuts), set()
    for topic in topics:
        for k, piece in enumerate(topic):
            if piece.compressed:
                continue
            unit, changed = _cut(piece.unit, min(cap, cuts.get(piece.start, cap)), ctx)
            if changed:
                topic[k] = replace(piece, unit=unit)
                cuts[piece.start] = min(cap, cuts.get(piece.start, cap))
                fresh.add(piece.start)

    target = int(alloc.topics * REDUCE_TO)
    sizes = [_tokens(ctx, t) for t in topics]
    squeeze = [0] * len(topics)
    for i, topic in enumerate(topics):
        if sum(sizes) <= target:
            break
        k = 0 if any(p.compressed for p in topic) else compress_count(len(topic))
        squeeze[i] = k
        sizes[i] -= _tokens(ctx, topic[1 : 1 + k])
    while topics and sum(sizes) > target:
        moving.append(topics.pop(0))
        del sizes[0], squeeze[0]

    spans = list(view.spans)
    for i, k in enumerate(squeeze):
        if k:
            topics[i] = _compress(topics[i], k, book, kinds, spans)

    skipped = sum(p.unit.size for topic in moving for p in topic)
    bulks = _fit_bulks(ctx, list(ctx.state.summaries), int(alloc.bulks * REDUCE_TO), book, kinds)
    if moving:
        text = book.obtain([m for t in moving for p in t for m in p.unit.messages])
        if text is None:
            kinds.add("windowed")
        else:
            bulks.append(SummaryBlock(text, ctx.state.tail_start + skipped))
    while bulks and _size(ctx, bulks) > alloc.bulks:
        bulks.pop(0)
        kinds.add("windowed")

    pieces = [p.unit for t in topics for p in t] + [p.unit for p in current]
    if fresh & {p.start for t in topics for p in t}:
        kinds.add("truncated")
    if book.used:
        kinds.add("summarized")
    elif bulks or any(s[3] is not None for s in spans):
        kinds.add("reused")
    red = finish(
        ctx,
        blocks=bulks,
        kinds=kinds,
        pieces=pieces,
        mandatory=range(len(pieces) - len(current), len(pieces)),
        skipped=skipped,
        requests=book.requests,
        cut_to=ctx.budget.limit,
    )
    # On the state `finish` made: it holds the searches this cut carries (`layout.LOADED`).
    extra = _extra(red.state.extra, spans, cuts, red.state.tail_start)
    return replace(red, state=replace(red.state, extra=extra))


def _extra(
    extra: Mapping[str, Any], spans: Sequence[list[Any]], cuts: Mapping[int, int], start: int
) -> dict[str, Any]:
    """Strategy data for the next turn, on `extra`; what lies before `start` left the tail and
    is forgotten."""
    rest = {k: v for k, v in extra.items() if k not in ("spans", "cuts", "summaries")}
    return {
        **rest,
        "spans": [list(s) for s in sorted(spans, key=lambda s: int(s[0])) if s[0] >= start],
        "cuts": [[s, c] for s, c in sorted(cuts.items()) if s >= start],
    }


def _cut(unit: Unit, cap: int, ctx: Context) -> tuple[Unit, bool]:
    """Large-message compression: each forwarded message over `cap` shrinks around a marker."""
    forward: list[Message] = []
    for message in unit.forward:
        smaller = (
            shrink(message, cap, ctx.count, unit.dialect) if ctx.count(message) > cap else None
        )
        forward.append(message if smaller is None else smaller)
    if all(a is b for a, b in zip(forward, unit.forward, strict=True)):
        return unit, False
    return Unit(unit.messages, tuple(forward), unit.repaired, unit.dialect), True


def _compress(topic: Topic, k: int, book: _Book, kinds: set[str], spans: list[list[Any]]) -> Topic:
    middle = topic[1 : 1 + k]
    messages = tuple(m for p in middle for m in p.unit.messages)
    text = book.obtain(messages)
    if text is None:
        kinds.add("windowed")
    spans.append([middle[0].start, middle[-1].end, summary_key((), messages), text])
    piece = _Piece(_note(messages, text, middle[0].unit.dialect), middle[0].start, True)
    return [topic[0], piece, *topic[1 + k :]]


def _size(ctx: Context, blocks: Sequence[SummaryBlock]) -> int:
    message = summary_message(blocks, ctx.policy.dialect)
    return ctx.count(message) if message else 0


def _fit_bulks(
    ctx: Context, blocks: list[SummaryBlock], room: int, book: _Book, kinds: set[str]
) -> list[SummaryBlock]:
    """Merge the three oldest bulks while over `room`; drop the oldest when merging cannot help.

    Without the merge text the fallback drops the group it would have merged
    and asks for no further merges this call.
    """
    pending = False
    while blocks and _size(ctx, blocks) > room:
        if len(blocks) >= BULK_MERGE_COUNT and not pending:
            group = blocks[:BULK_MERGE_COUNT]
            text = book.obtain((), tuple(b.text for b in group))
            if text is None:
                pending = True
                blocks = blocks[BULK_MERGE_COUNT:]
                kinds.add("windowed")
                continue
            if ctx.count(ctx.policy.dialect.summary(text)) < _size(ctx, group):
                blocks = [SummaryBlock(text, group[-1].covers), *blocks[BULK_MERGE_COUNT:]]
                continue
        blocks = blocks[1:]
        kinds.add("windowed")
    return blocks
