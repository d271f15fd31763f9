"""Repair of broken tool chains on the way out.

Clients edit, trim and retry histories; a tool result whose call is gone, or
a call whose results never came, makes the upstream reject the whole request.
Repair works on units (see `chains`), so it never changes how many client
messages a unit stands for and `tail_start` stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message, role
from .chains import Unit, flatten, group

PLACEHOLDER = "[no result: the client did not send this tool result]"


def drop_orphans(units: list[Unit]) -> list[Unit]:
    """A tool message that did not attach to a call has no call to answer: forward nothing."""
    return [
        Unit(u.messages, (), True) if role(u.head) == "tool" and u.forward else u for u in units
    ]


def close_dangling(units: list[Unit]) -> list[Unit]:
    """Answer every unanswered call with a placeholder so the chain is complete."""
    out: list[Unit] = []
    for unit in units:
        calls = unit.call_ids
        if not calls:
            out.append(unit)
            continue
        answered = {m.get("tool_call_id") for m in unit.forward[1:]}
        missing = [i for i in dict.fromkeys(calls) if i not in answered]
        if not missing:
            out.append(unit)
            continue
        placeholders = tuple(
            {"role": "tool", "tool_call_id": call_id, "content": PLACEHOLDER} for call_id in missing
        )
        out.append(Unit(unit.messages, unit.forward + placeholders, True))
    return out


REPAIR_PASSES = (drop_orphans, close_dangling)


def repair(messages: Sequence[Message]) -> list[Message]:
    """Repair a whole message list; returns the very same list when nothing needed fixing."""
    units = group(messages, REPAIR_PASSES)
    if not any(u.repaired for u in units):
        return messages if isinstance(messages, list) else list(messages)
    return flatten(units)
