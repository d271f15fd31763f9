"""The `summarize` strategy: the cache-aware summarising reducer with ensemble's 70/30 split.

A summary is made only when a threshold is crossed; until the next crossing
the stored summary is forwarded as is ("reused") and the request grows only
at its end, so prompt caches keep hitting and the summariser is not called
every turn.

- Trigger (`policy.summarize_by`): "tokens" when leading + summary + tail
  pass `budget.limit`; "messages" when the tail holds more than
  `target_messages + threshold_messages` messages; "both" when either does.
  With "messages", a token overflow without a count trigger is windowed by
  the common fit rule rather than summarised; use "both" to summarise it.
- Eviction: the newest units within `budget.keep_recent` tokens (tokens
  trigger) or `target_messages` messages (count trigger) stay verbatim;
  the last user message onward always stays. The evicted messages go to the
  summariser verbatim, tool chains included.
- `single_summary`: the request carries the stored summary texts as
  `previous` and its answer replaces every block; otherwise the answer is
  appended as one more layer.

Summaries off the critical path: past `policy.prepare_ratio` of the limit an
under-threshold turn also returns, in `prepare`, the request it would make
if it reduced now; the caller summarises it in the background and passes
the text in `summaries` on later turns. When the trigger is crossed and the
full eviction's summary is not at hand, the largest prepared eviction whose
kept part still fits is used instead, so the crossing turn does not wait.

Without the summary text the result is a plain window (old blocks, which
still describe what precedes them, plus the kept tail) and carries the
request; called again with the text, the same decision yields the summary
(or, when the summary itself cannot fit the hard limit, the same window
without a request, so a working answer never turns into an error).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from ..messages import Message
from ..tokens import REPLY_PRIMING
from .layout import Context, finish, head_of, summary_key
from .types import (
    Budget,
    ContextTooLarge,
    Counter,
    Policy,
    Reduction,
    SummaryBlock,
    SummaryRequest,
    Working,
    tokens_of,
)

# Longer tails go through `reduce_summarize` with the memo, which costs what the
# new messages cost; checking a tail here costs what all of it costs.
QUICK_TAIL = 64


def under_threshold(
    working: Working, policy: Policy, budget: Budget, count: Counter
) -> Reduction | None:
    """The result `reduce_summarize` gives a short history far from every threshold, or None.

    Most turns of most conversations are such turns, and for them grouping
    the tail into units, repairing it and laying it out only to forward it
    as it came is wasted: without a tool call or result in it, every message
    is a unit of its own that repair leaves alone, and under the limit
    nothing is cut. The state goes on as it came.
    The result carries no `tail`, so the next turn past these bounds groups
    its tail afresh, once.
    """
    tail = working.tail
    if len(tail) > QUICK_TAIL:
        return None
    if policy.summarize_by != "tokens" and len(tail) > (
        budget.target_messages + budget.threshold_messages
    ):
        return None
    if policy.dialect.holds_tools(tail):
        return None
    blocks = working.state.summaries
    head = head_of(working.leading, working.state, policy.dialect)
    total = sum(map(count, head)) + tokens_of(count, tail)
    limit = budget.limit
    soon = policy.prepare_ratio > 0 and total > policy.prepare_ratio * limit
    if total > limit or soon:
        return None
    return Reduction(
        messages=(*head, *tail),
        state=working.state,
        kinds=("reused",) if blocks or working.state.tail_start else ("none",),
        tokens_out=total + REPLY_PRIMING,
    )


def reduce_summarize(ctx: Context) -> Reduction:
    budget, policy, state = ctx.budget, ctx.policy, ctx.state
    blocks = state.summaries
    total = ctx.tokens(ctx.head(blocks)) + ctx.tail_tokens
    count = ctx.tail_messages
    by_tokens = total > budget.limit and policy.summarize_by in ("tokens", "both")
    by_count = (
        count > budget.target_messages + budget.threshold_messages
        and policy.summarize_by in ("messages", "both")
    )
    reused = {"reused"} if blocks else set()
    drop = 0
    if by_tokens:
        drop = ctx.tail.keep_tokens_drop(ctx.active, budget.keep_recent)
    if by_count:
        drop = max(drop, ctx.tail.keep_messages_drop(ctx.active, budget.target_messages))
    previous = tuple(b.text for b in blocks) if policy.single_summary else ()
    if drop == 0:
        under = finish(ctx, blocks=blocks, kinds=reused)
        soon = policy.prepare_ratio > 0 and total > policy.prepare_ratio * budget.limit
        if soon and policy.summarize_by != "messages":
            ahead = ctx.tail.keep_tokens_drop(ctx.active, budget.keep_recent)
            if ahead > 0:
                key = ctx.tail.evicted_key(previous, ahead)
                evicted = ctx.tail.evicted_messages(ahead)
                asked = SummaryRequest(key, evicted, previous, policy.dialect)
                under = replace(under, prepare=(asked,))
        return under

    if ctx.tail.evicted_key(previous, drop) not in ctx.summaries and ctx.summaries:
        drop = _prepared_drop(ctx, drop, previous, total - ctx.tail_tokens)
    evicted = _evicted(ctx, drop)
    covers = state.tail_start + len(evicted)
    key = ctx.tail.evicted_key(previous, drop)
    text = ctx.summaries.get(key)
    kept = range(drop, len(ctx.units))
    request = SummaryRequest(key, evicted, previous, policy.dialect)
    window = partial(finish, ctx, blocks=blocks, kinds=reused | {"windowed"}, selected=kept)
    if text is None:
        return window(requests=(request,))
    block = SummaryBlock(text, covers)
    new_blocks = (block,) if policy.single_summary else (*blocks, block)
    try:
        return finish(ctx, blocks=new_blocks, kinds={"summarized"}, selected=kept)
    except ContextTooLarge:
        return window()


def _evicted(ctx: Context, drop: int) -> tuple[Message, ...]:
    return ctx.tail.evicted_messages(drop)


def _prepared_drop(ctx: Context, drop: int, previous: tuple[str, ...], head: int) -> int:
    """The largest smaller eviction whose summary was prepared and whose kept part fits.

    Scanned only on the rare turns that cross the trigger; fewer evicted
    units mean a larger kept part, so the scan stops once that stops fitting.
    """
    for d in range(drop - 1, 0, -1):
        if head + sum(ctx.sizes[d:]) > ctx.budget.limit:
            break
        if summary_key(previous, _evicted(ctx, d)) in ctx.summaries:
            return d
    return drop
