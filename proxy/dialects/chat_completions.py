"""OpenAI's `/v1/chat/completions`: its messages as the core sees them, and the route's wire.

A message is an item. An assistant message with `tool_calls` makes calls,
a `tool` message answers the call its `tool_call_id` names, and system and
developer messages are instructions. Chat has no opaque items. Requests
are read and written in `chat_request.py`, answers in `chat_answer.py`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

import orjson

from ..messages import LEADING_ROLES, role, system_message, text_of, tool_call_ids, tool_calls
from . import Answer, Item, chat_request, cut_blocks
from . import body as body_checks
from .chat_answer import StreamAssembler, message_from_completion

TEXT_PARTS = frozenset({"text"})


class ChatCompletions:
    name = "chat.completions"
    separate_calls = False
    opaque_items = False
    searches_again = False

    def is_instruction(self, item: Item) -> bool:
        return role(item) in LEADING_ROLES

    def opens_turn(self, item: Item) -> bool:
        return role(item) == "user"

    # Asked of every item of every grouped tail: one plain call each.
    call_ids = staticmethod(tool_call_ids)

    @staticmethod
    def answers(item: Item) -> tuple[str, ...]:
        if item.get("role") != "tool":
            return ()
        return (str(item.get("tool_call_id", "")),)

    def call_names(self, item: Item) -> dict[str, str]:
        names: dict[str, str] = {}
        for call in tool_calls(item):
            function = call.get("function")
            name = function.get("name") if isinstance(function, dict) else None
            names[str(call.get("id", ""))] = str(name or call.get("type") or "tool")
        return names

    def travels_with_next(self, item: Item) -> bool:
        return False

    def loaders(self, items: Sequence[Item], carried: Sequence[Item]) -> list[Item]:
        return []

    def loads(self, items: Sequence[Item]) -> set[str]:
        return set()

    def uses(self, item: Item) -> set[str]:
        return set()

    def held_by(self, item: Item) -> tuple[str, ...]:
        return ()

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

    def placeholder(self, call: Item, call_id: str, text: str) -> Item | None:
        return {"role": "tool", "tool_call_id": call_id, "content": text}

    def cleared(self, item: Item, call_id: str, text: str) -> Item:
        return {**item, "content": text}

    def without_answers(self, item: Item, call_ids: Sequence[str]) -> Item | None:
        return None  # a tool message is one result

    def shortened(self, item: Item, cut: Callable[[str], str]) -> Item:
        if item.get("content") is None:
            return item
        return {**item, "content": cut_blocks(item["content"], TEXT_PARTS, cut)}


CHAT = ChatCompletions()


class ChatCompletionsWire(body_checks.JsonWire):
    items = CHAT
    provider = "openai"
    upstream_path = "/v1/chat/completions"
    history_field = "messages"
    limit_fields = ("max_completion_tokens", "max_tokens")
    definition_fields = ("tools", "functions", "response_format")

    def server_state(self, payload: dict[str, Any]) -> str | None:
        return None

    parse = staticmethod(chat_request.parse)

    def assembler(self, limit: int) -> StreamAssembler:
        return StreamAssembler(limit=limit)

    def answer(self, content: bytes) -> Answer | None:
        try:
            message = message_from_completion(orjson.loads(content))
        except orjson.JSONDecodeError:
            return None
        return None if message is None else Answer([message])


CHAT_WIRE = ChatCompletionsWire()
