"""Repair of broken tool chains on the way out.

Clients edit, trim and retry histories; a tool result whose call is gone, or
a call whose results never came, makes the upstream reject the whole request.
Repair works on units (see `chains`), so it never changes how many client
messages a unit stands for and `tail_start` stays exact; it acts on each
unit alone, so a grouped tail can be extended without repairing it again.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from ..dialects import Dialect
from ..dialects.chat_completions import CHAT
from ..messages import Message
from .chains import Unit, answered, flatten, group

PLACEHOLDER = "[no result: the client did not send this tool result]"


def drop_orphans(units: list[Unit]) -> list[Unit]:
    """A result that did not attach to a call has no call to answer: forward nothing of it.

    Only the result goes, not the item holding it: an Anthropic user message
    keeps its other results, its text and its images (the user's question
    among them), as the dialect's `without_answers` says.
    """
    return [_without_orphans(u) for u in units]


def _without_orphans(unit: Unit) -> Unit:
    dialect = unit.dialect
    # Results that found their call were folded into its unit: any other is an orphan.
    calls = unit.call_ids
    forward: list[Message] = []
    for message in unit.forward:
        stray = [a for a in dialect.answers(message) if a not in calls]
        if not stray:
            forward.append(message)
            continue
        kept = dialect.without_answers(message, stray)
        if kept is None and message is unit.head:
            # The unit is that result: what travels with it (reasoning) goes with it.
            return Unit(unit.messages, (), True, dialect)
        if kept is not None:
            forward.append(kept)
    if len(forward) == len(unit.forward) and all(map(operator.is_, forward, unit.forward)):
        return unit
    return Unit(unit.messages, tuple(forward), True, dialect)


def close_dangling(units: list[Unit]) -> list[Unit]:
    """Answer every unanswered call with a placeholder so the chain is complete."""
    out: list[Unit] = []
    for unit in units:
        calls = unit.call_ids
        if not calls:
            out.append(unit)
            continue
        done = answered(unit.forward, unit.dialect)
        missing = [i for i in dict.fromkeys(calls) if i not in done]
        if not missing:
            out.append(unit)
            continue
        dialect = unit.dialect
        by_id = {i: m for m in unit.messages for i in dialect.call_ids(m)}
        made = (dialect.placeholder(by_id.get(i, unit.head), i, PLACEHOLDER) for i in missing)
        placeholders = tuple(p for p in made if p is not None)
        if not placeholders:
            out.append(unit)
            continue
        out.append(Unit(unit.messages, unit.forward + placeholders, True, unit.dialect))
    return out


REPAIR_PASSES = (drop_orphans, close_dangling)


def repair(messages: Sequence[Message], dialect: Dialect = CHAT) -> list[Message]:
    """Repair a whole history; returns the very same list when nothing needed fixing."""
    units = group(messages, REPAIR_PASSES, dialect)
    if not any(u.repaired for u in units):
        return messages if isinstance(messages, list) else list(messages)
    return flatten(units)
