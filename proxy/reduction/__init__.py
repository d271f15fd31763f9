"""The pure reduction core: a working history in, a `Reduction` out.

`reduce` never awaits, reads a clock or calls a model: when a strategy needs
a summary it returns `SummaryRequest`s beside a usable window result, and
the caller calls `reduce` again with the texts, which reproduces the same
decision with the summaries in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType

from .filter import reduce_filter
from .layout import SUMMARY_HEADER, Context, summary_key, summary_message
from .mask import MASK_KEY, mask_working
from .repair import repair
from .summarize import reduce_summarize, under_threshold
from .tail import Tail
from .tiered import reduce_tiered
from .truncate import truncate_text
from .types import (
    KINDS,
    STRATEGIES,
    Budget,
    ContextTooLarge,
    Counter,
    Policy,
    Reduction,
    ReductionState,
    SummaryBlock,
    SummaryRequest,
    Working,
    is_masked,
)
from .window import reduce_messages, reduce_none, reduce_tokens

__all__ = [
    "KINDS",
    "STRATEGIES",
    "SUMMARY_HEADER",
    "Budget",
    "ContextTooLarge",
    "Counter",
    "Policy",
    "Reduction",
    "ReductionState",
    "SummaryBlock",
    "SummaryRequest",
    "Tail",
    "Working",
    "reduce",
    "repair",
    "summary_key",
    "summary_message",
    "truncate_text",
]

_STRATEGIES: Mapping[str, Callable[[Context], Reduction]] = MappingProxyType(
    {
        "none": reduce_none,
        "messages": reduce_messages,
        "tokens": reduce_tokens,
        "summarize": reduce_summarize,
        "tiered": reduce_tiered,
        "filter": reduce_filter,
    }
)

# A strategy's result for a turn it can tell at a glance it leaves as it came,
# or None: then the tail is grouped (`Context.build`) and the strategy runs.
_SHORTCUTS: Mapping[str, Callable[[Working, Policy, Budget, Counter], Reduction | None]] = (
    MappingProxyType({"summarize": under_threshold})
)

_NO_SUMMARIES: Mapping[str, str] = MappingProxyType({})


def reduce(
    working: Working,
    policy: Policy,
    budget: Budget,
    count: Counter,
    summaries: Mapping[str, str] = _NO_SUMMARIES,
    *,
    memo: Tail | None = None,
    shortcuts: bool = True,
) -> Reduction:
    """Reduce one turn's working history with `policy.strategy`.

    `memo` is an earlier result's `tail` (built with the same counter): the
    part of it that is still a prefix of `working.tail` is not regrouped, so
    a turn costs what its new messages cost. `shortcuts=False` always groups
    the tail (the result then carries it), even where a strategy could tell
    the result at a glance.

    Raises `ContextTooLarge` when even the truncated mandatory part cannot fit
    `budget.hard_limit`, and `ValueError` for an unknown strategy.
    """
    if is_masked(policy.strategy):
        return _reduce_masked(working, policy, budget, count, summaries, memo, shortcuts)
    strategy = _STRATEGIES.get(policy.strategy)
    if strategy is None:
        raise ValueError(f"unknown reduction strategy {policy.strategy!r}")
    shortcut = _SHORTCUTS.get(policy.strategy) if shortcuts else None
    quick = shortcut(working, policy, budget, count) if shortcut is not None else None
    if quick is not None:
        return quick
    return strategy(Context.build(working, policy, budget, count, summaries, memo))


def _reduce_masked(
    working: Working,
    policy: Policy,
    budget: Budget,
    count: Counter,
    summaries: Mapping[str, str],
    memo: Tail | None,
    shortcuts: bool,
) -> Reduction:
    """`mask`: old tool results cleared (`mask.py`), then the chain's second strategy."""
    masked = mask_working(working, policy, budget, count)
    then = policy.strategy.partition("+")[2] or policy.mask.then
    if then not in _STRATEGIES:
        raise ValueError(f"mask cannot be followed by {then!r}")
    # A summary is prepared for the next crossing only if clearing will not handle it.
    prepare = 0.0 if masked.ready else policy.prepare_ratio
    inner = reduce(
        masked.working,
        replace(policy, strategy=then, prepare_ratio=prepare),
        budget,
        count,
        summaries,
        memo=memo,
        shortcuts=shortcuts,
    )
    found = set(inner.kinds)
    if masked.fired:
        found.add("masked")
    elif masked.working is not working:
        found.add("reused")
    if len(found) > 1:
        found.discard("none")
    state = replace(inner.state, extra={**inner.state.extra, MASK_KEY: masked.before})
    return replace(inner, kinds=tuple(k for k in KINDS if k in found), state=state)
