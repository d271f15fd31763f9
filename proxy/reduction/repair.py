"""Repair of broken tool chains on the way out.

Clients edit, trim and retry histories; a tool result whose call is gone, or
a call whose results never came, makes the upstream reject the whole request.
Repair works on units (see `chains`), so it never changes how many client
messages a unit stands for and `tail_start` stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..dialects import Dialect
from ..dialects.chat_completions import CHAT
from ..messages import Message
from .chains import Unit, answered, flatten, group

PLACEHOLDER = "[no result: the client did not send this tool result]"


def drop_orphans(units: list[Unit]) -> list[Unit]:
    """A result that did not attach to a call has no call to answer: forward nothing."""
    return [Unit(u.messages, (), True, u.dialect) if _orphan(u) else u for u in units]


def _orphan(unit: Unit) -> bool:
    # Results that found their call were folded into its unit: one left alone is an orphan.
    head = unit.messages[0] if unit.size == 1 else unit.head
    return bool(unit.forward) and bool(unit.dialect.answers(head))


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
