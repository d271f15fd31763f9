"""The values that flow in and out of the pure reduction core.

The core is sans-io (like mitmproxy's protocol layers): it never awaits,
never reads a clock and never calls a model. When a strategy wants a summary
it returns a `SummaryRequest`; the caller produces the text and calls the
core again with it. Everything here is a frozen value so a `Reduction` can be
compared, logged and stored without defensive copies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..dialects import Dialect
from ..dialects.chat_completions import CHAT
from ..messages import Message

if TYPE_CHECKING:
    from .tail import Tail

Counter = Callable[[Message], int]
"""Tokens of one message (framing included). `TokenCounter.for_model` builds one."""


def tokens_of(count: Counter, messages: Sequence[Message]) -> int:
    """Tokens of `messages`; a counter with `total_of` (`RequestCounts`) may sum them at once."""
    total_of = getattr(count, "total_of", None)
    return int(total_of(messages)) if total_of is not None else sum(map(count, messages))


STRATEGIES = ("none", "messages", "tokens", "summarize", "tiered", "filter", "mask")
# What `mask` falls through to when clearing tool results is not enough; a
# strategy may also name its own, `mask+tokens`.
MASK_THEN = ("none", "messages", "tokens", "summarize", "tiered", "filter")


def is_strategy(name: str) -> bool:
    """A strategy's name, or a mask chain such as `mask+summarize`."""
    first, plus, then = name.partition("+")
    return name in STRATEGIES or (first == "mask" and bool(plus) and then in MASK_THEN)


def is_masked(name: str) -> bool:
    """`mask` or a mask chain: the strategies that clear old tool results first."""
    return name.partition("+")[0] == "mask"


# Values of the X-Context-Reduction header, in the order they are reported.
KINDS = (
    "none",
    "reused",
    "masked",
    "summarized",
    "windowed",
    "filtered",
    "truncated",
    "fallback",
    "repaired",
    "stateless",
)


class ContextTooLarge(Exception):
    """Even the mandatory part (leading instructions and the active turn) cannot fit.

    The app turns this into OpenAI's 400 `context_length_exceeded` instead of
    forwarding a request the upstream would reject.
    """

    def __init__(self, needed: int, available: int) -> None:
        super().__init__(
            f"The conversation's mandatory part needs {needed} tokens after truncation, "
            f"but only {available} fit in the model's context window."
        )
        self.needed = needed
        self.available = available


@dataclass(frozen=True)
class Budget:
    """How much history may be forwarded, from the model's window and the request.

    `limit` is the share of the window that history may fill after reduction
    (ensemble's 70 %); `hard_limit` is what the upstream would accept at all.
    """

    context_tokens: int
    reserved_output: int = 0
    trigger_ratio: float = 0.7
    keep_recent_ratio: float = 0.3
    target_messages: int = 20
    threshold_messages: int = 5

    @property
    def hard_limit(self) -> int:
        return max(0, self.context_tokens - self.reserved_output)

    @property
    def limit(self) -> int:
        return int(self.trigger_ratio * self.hard_limit)

    @property
    def keep_recent(self) -> int:
        """Tokens of the newest history kept verbatim after a summary."""
        return int(self.keep_recent_ratio * self.limit)


@dataclass(frozen=True)
class MaskPolicy:
    """The `mask` strategy's choices (from `[reduction.mask]`)."""

    # The newest tool results always forwarded whole.
    keep_tool_uses: int = 3
    # Fewest tokens a clearing must free to be worth the cache write it costs;
    # 0: a fifth of the model's window.
    clear_at_least: int = 0
    # Tools whose results are never cleared.
    exclude_tools: tuple[str, ...] = ()
    # The strategy applied to the masked history (see `MASK_THEN`).
    then: str = "summarize"

    def minimum(self, budget: Budget) -> int:
        return self.clear_at_least or budget.context_tokens // 5


@dataclass(frozen=True)
class Policy:
    """Operator choices that shape a reduction (from `[reduction]`)."""

    strategy: str = "summarize"
    single_summary: bool = True
    repair_tool_chains: bool = True
    # What triggers `summarize`: "tokens" (ensemble), "messages" (the cache-aware
    # reducer's target + threshold count) or "both".
    summarize_by: str = "tokens"
    # Messages whose text starts with one of these are pinned context injections
    # that the `filter` strategy always keeps.
    pinned_prefixes: tuple[str, ...] = ("SYSTEM CONTEXT (JSON):",)
    # `summarize`: past this share of `budget.limit`, ask the caller to prepare the
    # next summary in the background (`Reduction.prepare`) so the turn that crosses
    # the trigger finds it ready. 0 disables.
    prepare_ratio: float = 0.8
    # The wire format whose items the history holds (see `proxy.dialects`).
    dialect: Dialect = CHAT
    mask: MaskPolicy = MaskPolicy()


@dataclass(frozen=True)
class SummaryBlock:
    """A stored summary: it stands for body messages [0, covers) together with earlier blocks."""

    text: str
    covers: int


@dataclass(frozen=True)
class ReductionState:
    """What a conversation carries from one turn to the next (stored, never forwarded).

    `tail_start` is the body index (body = messages after the leading
    system/developer block) of the first message still forwarded verbatim.
    Everything before it is represented by `summaries` or was dropped.
    `extra` holds strategy-specific JSON-able data (e.g. tiered's summary cache).
    """

    tail_start: int = 0
    summaries: tuple[SummaryBlock, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def stretch(self) -> tuple[int, int]:
        """Which stretch between reductions this state belongs to: one per reduction."""
        return (self.tail_start, len(self.summaries))


@dataclass(frozen=True)
class Working:
    """The input of a reduction: the working history as it stands this turn.

    `tail` is body[state.tail_start:], this turn's new messages included.
    """

    leading: tuple[Message, ...]
    tail: tuple[Message, ...]
    state: ReductionState = ReductionState()


@dataclass(frozen=True)
class SummaryRequest:
    """A span the core wants summarised. `key` identifies its content, so answers can be cached."""

    key: str
    messages: tuple[Message, ...]
    previous: tuple[str, ...] = ()
    # Whose items `messages` are: the summariser reads their text through it.
    dialect: Dialect = field(default=CHAT, compare=False)


@dataclass(frozen=True)
class Reduction:
    """The result of one reduction.

    When `summary_requests` is non-empty, `messages`/`state` are a window
    reduction that fits without any summary: the caller forwards them as a
    `fallback` if the summariser fails, or calls the core again with the
    summaries to get the summarised result.
    """

    messages: tuple[Message, ...]
    state: ReductionState
    kinds: tuple[str, ...]
    tokens_out: int
    dropped: int = 0
    summary_requests: tuple[SummaryRequest, ...] = ()
    # Summaries worth preparing off the critical path; the answer changes nothing now.
    prepare: tuple[SummaryRequest, ...] = ()
    # The working tail as grouped for this reduction: pass it as `memo` next turn.
    tail: Tail | None = field(default=None, compare=False, repr=False)
