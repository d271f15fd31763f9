"""OpenAI's `/v1/chat/completions` messages, as the reduction core sees them.

A message is an item. An assistant message with `tool_calls` makes calls,
a `tool` message answers the call its `tool_call_id` names, and system and
developer messages are instructions. Chat has no opaque items.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import repeat

from ..messages import LEADING_ROLES, role, system_message, text_of, tool_call_ids
from . import Item


class ChatCompletions:
    name = "chat.completions"
    separate_calls = False
    opaque_items = False

    def is_instruction(self, item: Item) -> bool:
        return role(item) in LEADING_ROLES

    def opens_turn(self, item: Item) -> bool:
        return role(item) == "user"

    # Asked of every item of every grouped tail: one plain call each.
    call_ids = staticmethod(tool_call_ids)

    @staticmethod
    def answers(item: Item) -> str | None:
        if item.get("role") != "tool":
            return None
        return str(item.get("tool_call_id", ""))

    def travels_with_next(self, item: Item) -> bool:
        return False

    def holds_tools(self, items: Sequence[Item]) -> bool:
        # A message at a time in C: this runs over the tail of every turn.
        if any(map(operator.contains, items, repeat("tool_calls"))):
            return True
        return "tool" in map(dict.get, items, repeat("role"))

    def text(self, item: Item) -> str:
        return text_of(item)

    def summary(self, text: str) -> Item:
        return system_message(text)

    def note(self, text: str) -> Item:
        return {"role": "assistant", "content": text}

    def placeholder(self, call_id: str, text: str) -> Item:
        return {"role": "tool", "tool_call_id": call_id, "content": text}


CHAT = ChatCompletions()
