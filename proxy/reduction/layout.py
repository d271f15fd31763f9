"""What every strategy shares: the prepared tail, the forwarded layout, the fit and the last resort.

Strategies only decide *which* units to keep and which summaries to use;
`finish` turns that decision into the forwarded request the same way for all
of them, so the invariants (layout, fit, truncation, state arithmetic) live
in one place. That includes the tools a dropped span loaded (a tool search's
references, `Dialect.loaders`): they go on after the summary, kept in the
state (`LOADED`), so the kept turns' calls of them stay valid and the model
keeps their definitions.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..dialects import Dialect
from ..dialects.chat_completions import CHAT
from ..messages import Message
from ..tokens import REPLY_PRIMING
from .chains import Unit, active_index
from .tail import Tail, grouped_tail, key_extend, key_start
from .truncate import truncate_to_fit
from .types import (
    KINDS,
    Budget,
    ContextTooLarge,
    Counter,
    Policy,
    Reduction,
    ReductionState,
    SummaryBlock,
    SummaryRequest,
    Working,
)

SUMMARY_HEADER = "Summary of the earlier conversation:"
# The state's key for what carries the tools dropped spans loaded, forwarded after the summary.
LOADED = "loaded"
# The share of the limit what is carried may take before the loaders no call of the tail
# needs are let go, oldest first (the model searches again for a tool it wants back), on a
# turn whose request does not fit as it is.
CARRIED_SHARE = 0.25
# The kinds of a request forwarded as the turn before left it, grown only at its end.
STANDING = frozenset({"none", "reused", "repaired"})


def loaded(state: ReductionState) -> tuple[Message, ...]:
    """The items carrying the tools that spans reductions dropped had loaded."""
    found = state.extra.get(LOADED)
    return tuple(m for m in found if isinstance(m, dict)) if isinstance(found, list) else ()


def head_of(
    leading: Sequence[Message], state: ReductionState, dialect: Dialect = CHAT
) -> list[Message]:
    """What goes before the kept tail: the instructions, the summary, the loaded tools."""
    summary = summary_message(state.summaries, dialect)
    return [*leading, *([summary] if summary else []), *loaded(state)]


def summary_message(blocks: Sequence[SummaryBlock], dialect: Dialect = CHAT) -> Message | None:
    """All blocks in one item, the dialect's summary, right after the leading instructions."""
    if not blocks:
        return None
    return dialect.summary("\n\n".join([SUMMARY_HEADER, *(b.text for b in blocks)]))


def summary_key(previous: Sequence[str], messages: Sequence[Message]) -> str:
    """Content hash of a summary request, so the caller's answer can be matched and cached."""
    return str(key_extend(key_start(previous), messages).hexdigest())


@dataclass(frozen=True)
class Context:
    """One reduction's inputs with the tail already grouped, repaired and counted."""

    working: Working
    policy: Policy
    budget: Budget
    count: Counter
    summaries: Mapping[str, str]
    tail: Tail
    active: int

    @staticmethod
    def build(
        working: Working,
        policy: Policy,
        budget: Budget,
        count: Counter,
        summaries: Mapping[str, str],
        memo: Tail | None = None,
    ) -> Context:
        tail = grouped_tail(working.tail, count, policy.repair_tool_chains, memo, policy.dialect)
        return Context(working, policy, budget, count, summaries, tail, active_index(tail.units))

    @property
    def state(self) -> ReductionState:
        return self.working.state

    @property
    def units(self) -> tuple[Unit, ...]:
        return self.tail.units

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.tail.sizes

    @property
    def tail_tokens(self) -> int:
        return self.tail.token_sums[-1]

    @property
    def tail_messages(self) -> int:
        return self.tail.message_sums[-1]

    def tokens(self, messages: Iterable[Message]) -> int:
        return sum(self.count(m) for m in messages)

    def head(
        self, blocks: Sequence[SummaryBlock], carried: Sequence[Message] | None = None
    ) -> list[Message]:
        summary = summary_message(blocks, self.policy.dialect)
        tools = loaded(self.state) if carried is None else carried
        return [*self.working.leading, *([summary] if summary else []), *tools]

    def messages_in(self, units: Iterable[Unit]) -> int:
        return sum(u.size for u in units)


def finish(
    ctx: Context,
    *,
    blocks: Sequence[SummaryBlock],
    kinds: Collection[str],
    pieces: Sequence[Unit] | None = None,
    selected: Iterable[int] | None = None,
    mandatory: Collection[int] | None = None,
    skipped: int = 0,
    extra: Mapping[str, Any] | None = None,
    requests: Sequence[SummaryRequest] = (),
    cut_kind: str = "windowed",
    fit: bool = True,
    cut_to: int | None = None,
    carried: Sequence[Message] | None = None,
    stored_gone: Sequence[Message] = (),
) -> Reduction:
    """Assemble the forwarded request, enforce the fit, and compute the next state.

    `pieces` default to the tail's units; `selected` are the pieces to keep,
    `mandatory` those no cut may remove (default: the last user message on).
    `skipped` counts client messages evicted before the first piece. When the
    history is over `budget.limit`, old pieces are cut back to `keep_recent`
    (hysteresis: a cut leaves room to grow, so the next turns extend the
    prefix again). Only when the mandatory part alone is too big are
    messages truncated, first the older ones of the active turn, then, down
    to `hard_limit`, any mandatory message but the leading instructions.

    `carried`: what carries the tools dropped spans loaded (default: the state's). When
    the units this cut drops loaded tools besides, the request is finished again with
    them carried after the summary, and so cut to fit with them: the head only grows,
    so the cut only deepens and no carried search is also forwarded where it was.
    `stored_gone`: what an earlier cut kept from before `tail_start` (`filter`'s stored
    context) and this one drops: gone as the dropped units are, its loaders carried too.
    """
    found = set(kinds)
    if selected is not None and not isinstance(selected, range):
        selected = list(selected)  # read again when the request is finished again
    again = partial(
        finish,
        ctx,
        blocks=blocks,
        kinds=kinds,
        pieces=pieces,
        selected=selected,
        mandatory=mandatory,
        skipped=skipped,
        extra=extra,
        requests=requests,
        cut_kind=cut_kind,
        fit=fit,
        cut_to=cut_to,
        stored_gone=stored_gone,
    )
    if carried is None:
        carried = loaded(ctx.state)
        fewer = _shed(ctx, carried, pieces)
        if len(fewer) < len(carried):
            # Letting a search go changes the forwarded prefix (a prompt cache break) and
            # makes the model search again: only when the request does not fit as it is.
            try:
                whole = again(carried=carried)
            except ContextTooLarge:  # what fewer searches may leave room for
                return again(carried=fewer)
            if whole.dropped or set(whole.kinds) - STANDING:
                return again(carried=fewer)
            return whole
    head = ctx.head(blocks, carried)
    cut = _Cut(ctx, head, ctx.tokens(head), found, fit, cut_kind, cut_to, len(carried))
    suffix = _suffix(ctx, pieces, selected, mandatory)
    if suffix is not None:
        out, total, evicted = _finish_suffix(cut, *suffix)
    else:
        out, total, evicted = _finish_general(cut, pieces, selected, mandatory)
    dropped = skipped + evicted
    more: list[Message] = []
    sent = set(map(id, out)) if dropped or stored_gone or pieces is not None else set()
    # Pieces kept from before the tail (`filter`'s stored context) are cut too, as size 0.
    cut_pieces = [m for p in pieces or () if not p.size for m in p.forward if id(m) not in sent]
    if dropped or stored_gone or cut_pieces:  # a cut (between cuts, what is carried stands)
        earlier = [m for m in ctx.working.tail[:dropped] if id(m) not in sent]
        more = ctx.policy.dialect.loaders([*stored_gone, *cut_pieces, *earlier], carried)
    if more:
        return again(carried=[*carried, *more])
    if not found - {"repaired"}:
        # Nothing new was cut; what an earlier turn cut or summarised still is.
        standing = blocks or ctx.state.tail_start + dropped > 0
        found.add("reused" if standing else "none")
    extra = ctx.state.extra if extra is None else extra
    if carried or LOADED in extra:
        extra = {**extra, LOADED: list(carried)}
    state = ReductionState(
        tail_start=ctx.state.tail_start + dropped,
        summaries=tuple(blocks),
        extra=extra,
    )
    return Reduction(
        messages=tuple(out),
        state=state,
        kinds=tuple(k for k in KINDS if k in found),
        tokens_out=total + REPLY_PRIMING,
        dropped=dropped,
        summary_requests=tuple(requests),
        tail=ctx.tail,
    )


def _shed(
    ctx: Context, carried: Sequence[Message], pieces: Sequence[Unit] | None = None
) -> Sequence[Message]:
    """What earlier cuts carried, less its oldest loaders (two items each, `Dialect.loaders`)
    whose tools no call of the tail names, while it takes over `CARRIED_SHARE` of the limit,
    when the model searches again for a tool let go (`Dialect.searches_again`). Only what
    earlier turns carried: a loader this cut adds is let go on a later turn that does not
    fit (`finish` asks only then)."""
    dialect = ctx.policy.dialect
    if not dialect.searches_again:
        return carried
    room, total = int(ctx.budget.limit * CARRIED_SHARE), ctx.tokens(carried)
    if total <= room:
        return carried
    # The tail's calls, and those of pieces kept from before it (`filter`'s stored context).
    kept_before = (m for p in pieces or () for m in p.forward)
    called = {name for m in (*ctx.working.tail, *kept_before) for name in dialect.uses(m)}
    kept: list[Message] = []
    for at in range(0, len(carried), 2):
        pair = carried[at : at + 2]
        if total > room and not dialect.loads(pair) & called:
            total -= ctx.tokens(pair)
        else:
            kept += pair
    return kept


def _suffix(
    ctx: Context,
    pieces: Sequence[Unit] | None,
    selected: Iterable[int] | None,
    mandatory: Collection[int] | None,
) -> tuple[int, int] | None:
    """Where the kept and the mandatory units start, when both are suffixes of the tail's units.

    That is the shape of every window and summary (drop the oldest units), and
    the running sums of `ctx.tail` then answer without walking the units.
    """
    n = len(ctx.units)
    if pieces is not None:
        return None
    must = min(ctx.active, n) if mandatory is None else _suffix_of(mandatory, n)
    sel = 0 if selected is None else _suffix_of(selected, n)
    if must is None or sel is None:
        return None
    return min(sel, must), must


def _suffix_of(indices: Iterable[int], n: int) -> int | None:
    """The start of `indices` if they are the range [start, n), else None."""
    if not isinstance(indices, range) or indices.step != 1:
        return None
    if not indices:
        return n
    return indices.start if indices.stop == n and indices.start >= 0 else None


@dataclass
class _Cut:
    """What both ways of finishing share: the head, the kinds found, and how to cut."""

    ctx: Context
    head: list[Message]
    head_tokens: int
    found: set[str]
    fit: bool
    kind: str
    to: int | None
    carried: int = 0  # the head ends with what is carried, after the summary

    def over(self, total: int) -> bool:
        return self.fit and total > self.ctx.budget.limit

    def target(self) -> int:
        """Tokens a cut brings the request down to: the head and `keep_recent` (hysteresis)."""
        budget = self.ctx.budget
        return min(
            budget.limit, self.head_tokens + (budget.keep_recent if self.to is None else self.to)
        )

    def last_resort(
        self, out: list[Message], movable: list[int], total: int
    ) -> tuple[list[Message], int]:
        """Truncate messages when cutting whole units was not enough."""
        if not self.over(total):
            return out, total
        summary_end = len(self.head) - self.carried
        shortened, total = _last_resort(self.ctx, out, movable, summary_end, total)
        if shortened is not out:
            self.found.add("truncated")
        return shortened, total


def _finish_suffix(cut: _Cut, lo: int, must: int) -> tuple[list[Message], int, int]:
    """`finish` for the units from `lo` on, in time independent of how many there are."""
    tail = cut.ctx.tail
    n = len(tail.units)
    total = cut.head_tokens + tail.token_sums[n] - tail.token_sums[lo]
    if cut.over(total):
        target = cut.target()
        while lo < must and total > target:
            total -= tail.sizes[lo]
            lo += 1
            cut.found.add(cut.kind)
    out = [*cut.head, *tail.forward[tail.forward_sums[lo] :]]
    first = len(cut.head) + tail.forward_sums[must] - tail.forward_sums[lo]
    out, total = cut.last_resort(out, list(range(first, len(out))), total)
    if tail.repaired and tail.repaired[-1] >= lo:
        cut.found.add("repaired")
    return out, total, tail.message_sums[lo]


def _finish_general(
    cut: _Cut,
    pieces: Sequence[Unit] | None,
    selected: Iterable[int] | None,
    mandatory: Collection[int] | None,
) -> tuple[list[Message], int, int]:
    ctx = cut.ctx
    units = ctx.units if pieces is None else tuple(pieces)
    sizes = ctx.sizes if pieces is None else tuple(ctx.tokens(p.forward) for p in units)
    must = set(range(ctx.active, len(units)) if mandatory is None else mandatory)
    chosen = sorted(set(range(len(units)) if selected is None else selected) | must)

    total = cut.head_tokens + sum(sizes[i] for i in chosen)
    if cut.over(total):
        target = cut.target()
        for i in list(chosen):
            if total <= target:
                break
            if i not in must:
                chosen.remove(i)
                total -= sizes[i]
                cut.found.add(cut.kind)

    out = [*cut.head]
    movable: list[int] = []
    for i in chosen:
        if i in must:
            movable.extend(range(len(out), len(out) + len(units[i].forward)))
        out.extend(units[i].forward)
    out, total = cut.last_resort(out, movable, total)

    first = chosen[0] if chosen else len(units)
    if any(units[i].repaired for i in chosen):
        cut.found.add("repaired")
    return out, total, sum(u.size for u in units[:first])


def _last_resort(
    ctx: Context, out: list[Message], movable: list[int], summary_end: int, total: int
) -> tuple[list[Message], int]:
    budget = ctx.budget
    opens_turn = ctx.policy.dialect.opens_turn
    user_at = max((i for i in movable if opens_turn(out[i])), default=-1)
    older = [i for i in movable if i != user_at]
    dialect = ctx.policy.dialect
    out, _ = truncate_to_fit(out, older, total - budget.limit, ctx.count, dialect)
    total = ctx.tokens(out)
    available = max(0, budget.hard_limit - REPLY_PRIMING)
    if total > available:
        summary_at = [summary_end - 1] if summary_end > len(ctx.working.leading) else []
        out, _ = truncate_to_fit(out, summary_at + movable, total - available, ctx.count, dialect)
        total = ctx.tokens(out)
        if total > available:
            raise ContextTooLarge(total + REPLY_PRIMING, budget.hard_limit)
    return out, total
