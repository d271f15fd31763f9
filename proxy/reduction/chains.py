"""Tool chains as indivisible units: the one place that knows which messages belong together.

OpenAI rejects a request in which an assistant `tool_calls` message is not
followed by exactly its `tool` results, so no strategy may ever choose
single messages. The tail is grouped once into units (a plain message, or an
assistant call together with its results) and every strategy selects whole
units. The grouping is a small pipeline of pure list -> list passes, in the
style of pydantic-ai's `_clean_message_history`, so each rule stays readable
and testable on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..messages import Message, role, text_of, tool_call_ids

__all__ = ["Unit", "active_index", "flatten", "group", "segment_starts"]


@dataclass(frozen=True, slots=True)
class Unit:
    """Messages that are kept or dropped together.

    `messages` are the messages as the client sent them (their number moves
    `tail_start`); `forward` is what is sent upstream, which differs only
    when repair dropped an orphan or closed an unanswered call.
    """

    messages: tuple[Message, ...]
    forward: tuple[Message, ...]
    repaired: bool = False

    @staticmethod
    def of(*messages: Message) -> Unit:
        return Unit(messages, messages)

    @property
    def size(self) -> int:
        return len(self.messages)

    @property
    def head(self) -> Message:
        return self.messages[0]

    @property
    def call_ids(self) -> list[str]:
        return tool_call_ids(self.head)

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.call_ids)

    @property
    def opens_turn(self) -> bool:
        return role(self.head) == "user"

    def starts_with(self, prefixes: Sequence[str]) -> bool:
        text = text_of(self.head)
        return any(text.startswith(p) for p in prefixes if p)


Pass = Callable[[list[Unit]], list[Unit]]


def _one_per_message(messages: Iterable[Message]) -> list[Unit]:
    return [Unit.of(m) for m in messages]


def _attach_results(units: list[Unit]) -> list[Unit]:
    """Fold each tool result into the call right before it, once per call id.

    A result separated from its call by another message, a duplicate, or one
    whose id the call never issued stays a unit of its own: an orphan that
    repair drops.
    """
    out: list[Unit] = []
    for unit in units:
        prev = out[-1] if out else None
        if (
            prev is not None
            and role(unit.head) == "tool"
            and prev.has_tool_calls
            and str(unit.head.get("tool_call_id", "")) in prev.call_ids
            and unit.head.get("tool_call_id") not in _answered(prev)
        ):
            out[-1] = Unit.of(*prev.messages, unit.head)
        else:
            out.append(unit)
    return out


def _answered(unit: Unit) -> set[object]:
    return {m.get("tool_call_id") for m in unit.messages[1:]}


def group(messages: Sequence[Message], passes: Sequence[Pass] = ()) -> tuple[Unit, ...]:
    """Group messages into units, then run extra passes (e.g. repair) over them."""
    units = _attach_results(_one_per_message(messages))
    for step in passes:
        units = step(units)
    return tuple(units)


def flatten(units: Iterable[Unit], *, forward: bool = True) -> list[Message]:
    out: list[Message] = []
    for unit in units:
        out.extend(unit.forward if forward else unit.messages)
    return out


def active_index(units: Sequence[Unit]) -> int:
    """First unit of the mandatory part: the last user message, or the last unit without one."""
    for i in range(len(units) - 1, -1, -1):
        if units[i].opens_turn:
            return i
    return max(0, len(units) - 1)


def segment_starts(units: Sequence[Unit]) -> list[int]:
    """Where each segment (a user message and what answers it) begins; 0 always starts one."""
    return [i for i, u in enumerate(units) if i == 0 or u.opens_turn]
