"""The pure reduction core: a working history in, a `Reduction` out.

`reduce` never awaits, reads a clock or calls a model: when a strategy needs
a summary it returns `SummaryRequest`s beside a usable window result, and
the caller calls `reduce` again with the texts, which reproduces the same
decision with the summaries in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from .filter import reduce_filter
from .layout import SUMMARY_HEADER, Context, summary_key, summary_message
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
) -> Reduction:
    """Reduce one turn's working history with `policy.strategy`.

    `memo` is an earlier result's `tail` (built with the same counter): the
    part of it that is still a prefix of `working.tail` is not regrouped, so
    a turn costs what its new messages cost.

    Raises `ContextTooLarge` when even the truncated mandatory part cannot fit
    `budget.hard_limit`, and `ValueError` for an unknown strategy.
    """
    strategy = _STRATEGIES.get(policy.strategy)
    if strategy is None:
        raise ValueError(f"unknown reduction strategy {policy.strategy!r}")
    shortcut = _SHORTCUTS.get(policy.strategy)
    quick = shortcut(working, policy, budget, count) if shortcut is not None else None
    if quick is not None:
        return quick
    return strategy(Context.build(working, policy, budget, count, summaries, memo))
