"""Tool chains as indivisible units: the one place that knows which items belong together.

Providers reject a request in which a tool call is not followed by exactly
its results (OpenAI's `tool_calls` and `tool` messages, the Responses API's
`function_call` and `function_call_output`, Anthropic's `tool_use` and the
`tool_result` blocks of the next user message), or in which a reasoning item
lost the call it preceded, so no strategy may ever choose single items. The
tail is grouped once into units (a plain item, or a call together with its
results and the opaque items before it) and every strategy selects whole
units. What an item is, the dialect says (`proxy.dialects`). The grouping
is a small pipeline of pure list -> list passes, in the style of
pydantic-ai's `_clean_message_history`, so each rule stays readable and
testable on its own.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..dialects import Dialect
from ..dialects.chat_completions import CHAT
from ..messages import Message

__all__ = ["Unit", "active_index", "answered", "flatten", "group", "segment_starts"]


@dataclass(frozen=True, slots=True)
class Unit:
    """Messages that are kept or dropped together.

    `messages` are the items as the client sent them (their number moves
    `tail_start`); `forward` is what is sent upstream, which differs only
    when repair dropped an orphan or closed an unanswered call. `head` is
    the unit's first item that is not opaque: the call, the message.
    """

    messages: tuple[Message, ...]
    forward: tuple[Message, ...]
    repaired: bool = False
    dialect: Dialect = field(default=CHAT, compare=False)

    @staticmethod
    def of(*messages: Message, dialect: Dialect = CHAT) -> Unit:
        return Unit(messages, messages, dialect=dialect)

    @property
    def size(self) -> int:
        return len(self.messages)

    @property
    def head(self) -> Message:
        if self.dialect.opaque_items:
            for message in self.messages:
                if not self.dialect.travels_with_next(message):
                    return message
        return self.messages[0]

    @property
    def call_ids(self) -> list[str]:
        # Calls made as items of their own, or again after results (code execution that
        # calls the client's tools in rounds), are all the unit's.
        return [i for m in self.messages for i in self.dialect.call_ids(m)]

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.call_ids)

    @property
    def opens_turn(self) -> bool:
        return self.dialect.opens_turn(self.head)

    @property
    def answers(self) -> Sequence[str]:
        """The calls this unit's head answers: set only for a result that found no call."""
        return self.dialect.answers(self.head)

    def starts_with(self, prefixes: Sequence[str]) -> bool:
        text = self.dialect.text(self.head)
        return any(text.startswith(p) for p in prefixes if p)


Pass = Callable[[list[Unit]], list[Unit]]


def _one_per_message(messages: Iterable[Message], dialect: Dialect) -> list[Unit]:
    return [Unit((m,), (m,), False, dialect) for m in messages]


def _attach_results(units: list[Unit]) -> list[Unit]:
    """Fold each tool result into the call right before it, once per call id.

    A result separated from its call by another item, a duplicate, or one
    answering only ids the call never issued stays a unit of its own: an
    orphan that repair drops. An item holding several results (Anthropic's
    user message) joins the call it answers even beside a result for a call
    that is not there; repair drops that result alone.
    """
    out: list[Unit] = []
    for unit in units:
        prev = out[-1] if out else None
        answers = unit.dialect.answers(unit.messages[0]) if unit.size == 1 else ()
        calls = prev.call_ids if prev is not None and answers else ()
        ours = [a for a in answers if a in calls]
        if prev is not None and ours and answered(prev.messages, prev.dialect).isdisjoint(ours):
            out[-1] = Unit.of(*prev.messages, unit.messages[0], dialect=prev.dialect)
        else:
            out.append(unit)
    return out


def _merge_calls(units: list[Unit]) -> list[Unit]:
    """Calls made together, sent as items of their own, become one call unit (their results
    follow them all)."""
    out: list[Unit] = []
    for unit in units:
        prev = out[-1] if out else None
        if (
            prev is not None
            and unit.has_tool_calls
            and prev.has_tool_calls
            and not answered(prev.messages, prev.dialect)
        ):
            out[-1] = Unit.of(*prev.messages, *unit.messages, dialect=prev.dialect)
        else:
            out.append(unit)
    return out


def _attach_opaque(units: list[Unit]) -> list[Unit]:
    """Put each opaque item (reasoning, thinking) in the unit of the item that follows it.

    One left at the very end stays a unit of its own.
    """
    out: list[Unit] = []
    pending: list[Message] = []
    for unit in units:
        if unit.size == 1 and unit.dialect.travels_with_next(unit.head):
            pending.append(unit.head)
            continue
        if pending:
            unit = Unit.of(*pending, *unit.messages, dialect=unit.dialect)
            pending = []
        out.append(unit)
    if pending:
        out.append(Unit.of(*pending, dialect=units[-1].dialect))
    return out


def _merge_runs(units: list[Unit], held: Sequence[tuple[str, ...]]) -> list[Unit]:
    """Merge the units from the first item of each run to its last into one; runs whose
    stretches overlap share one. `held` is each item's runs (`Dialect.held_by`), in order.

    A run's end may come turns of calls after its start (a program's output, code
    execution's result): the units between are its work.
    """
    ends = list(itertools.accumulate(len(u.messages) for u in units))  # past each unit's last item
    spans: dict[str, list[int]] = {}  # run -> [its first unit, its last unit]
    for k in itertools.compress(range(len(held)), held):
        unit = bisect.bisect_right(ends, k)
        for run in held[k]:
            spans.setdefault(run, [unit, 0])[1] = unit
    stretches: list[list[int]] = []
    for first, last in sorted(spans.values()):
        if stretches and first <= stretches[-1][1]:
            stretches[-1][1] = max(stretches[-1][1], last)
        else:
            stretches.append([first, last])
    out: list[Unit] = []
    done = 0  # units[:done] are in `out`
    for first, last in stretches:
        merged = [m for u in units[first : last + 1] for m in u.messages]
        out += [*units[done:first], Unit.of(*merged, dialect=units[first].dialect)]
        done = last + 1
    return out + units[done:]


def answered(messages: Iterable[Message], dialect: Dialect) -> set[str]:
    """The call ids the results among `messages` answer."""
    return {a for m in messages for a in dialect.answers(m)}


def group(
    messages: Sequence[Message], passes: Sequence[Pass] = (), dialect: Dialect = CHAT
) -> tuple[Unit, ...]:
    """Group items into units, then run extra passes (e.g. repair) over them."""
    units = _one_per_message(messages, dialect)
    if dialect.separate_calls:
        units = _merge_calls(units)
    units = _attach_results(units)
    if dialect.opaque_items and any(map(dialect.travels_with_next, messages)):
        units = _attach_opaque(units)
    held = list(map(dialect.held_by, messages))
    if any(held):
        units = _merge_runs(units, held)
    for step in passes:
        units = step(units)
    return tuple(units)


def flatten(units: Iterable[Unit]) -> list[Message]:
    out: list[Message] = []
    for unit in units:
        out.extend(unit.forward)
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
