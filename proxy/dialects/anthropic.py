"""Anthropic's `/v1/messages`: its messages as the core sees them, and the route's wire.

A message is an item, and its content blocks stay inside it: an assistant
message's `tool_use` blocks are its calls (with any `thinking` blocks
before them, signed and never touched), and the next user message's
`tool_result` blocks answer them, so one item may answer several calls.
A user message holding results continues the turn; one without opens a
turn. The instructions are the request's top-level `system`, never an
item, so what the core adds (a summary, a placeholder, a recall block) is
a user message, and the wire merges runs of one role before sending, so
the history alternates as Anthropic requires. Requests are read and
written in `anthropic_request.py`, answers in `anthropic_answer.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ..blocks import (
    CALLS,
    SERVER_USES,
    THINKING,
    is_server_result,
    references,
    unmarked_block,
)
from ..messages import text_of
from . import Answer, Item, anthropic_cache, anthropic_request, cut_blocks
from . import body as body_checks
from .anthropic_answer import MessagesAssembler, message_from_body


def blocks(item: Item) -> list[dict[str, Any]]:
    """The message's content blocks (none for a string content)."""
    content = item.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict)]


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


# Blocks that go on with nothing begun before them (a `tool_use` without a `caller`).
PLAIN = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})


def called_from(block: dict[str, Any]) -> Any:
    """The server tool use (code execution) whose code made this call, if any."""
    caller = block.get("caller")
    if not isinstance(caller, dict) or caller.get("type") == "direct":
        return None
    return caller.get("tool_id")


# In place of a user message that held nothing but results of calls the history
# lacks: dropped, it would leave two assistant messages side by side, a history
# ending on the assistant's message (which Anthropic reads as a prefill), or none.
TEXT_BLOCKS = frozenset({"text"})
# After the tool searches a reduction carries past what it dropped: they end on a user
# message, so the history goes on whichever role the kept part starts with.
LOADED = "[Tools loaded earlier in this conversation.]"
STRAY_RESULTS = "[Tool results omitted: the calls they answer are not in this conversation.]"


class AnthropicItems:
    name = "anthropic"
    # An assistant message lists all its calls; thinking blocks live inside it.
    separate_calls = False
    opaque_items = False
    # A call of a deferred tool with no reference before it is taken as refused.
    searches_again = False

    def is_instruction(self, item: Item) -> bool:
        return False  # the instructions are the request's `system`, outside the history

    def opens_turn(self, item: Item) -> bool:
        if item.get("role") != "user":
            return False
        return not any(b.get("type") == "tool_result" for b in blocks(item))

    def call_ids(self, item: Item) -> list[str]:
        if item.get("role") != "assistant":
            return []
        return [str(b.get("id", "")) for b in blocks(item) if b.get("type") == "tool_use"]

    def answers(self, item: Item) -> tuple[str, ...]:
        if item.get("role") != "user":
            return ()
        return tuple(
            str(b.get("tool_use_id", "")) for b in blocks(item) if b.get("type") == "tool_result"
        )

    def call_names(self, item: Item) -> dict[str, str]:
        if item.get("role") != "assistant":
            return {}
        return {
            str(b.get("id", "")): str(b.get("name") or "tool")
            for b in blocks(item)
            if b.get("type") == "tool_use"
        }

    def travels_with_next(self, item: Item) -> bool:
        return False

    def held_by(self, item: Item) -> tuple[str, ...]:
        # The server tool uses the message leaves open (code execution waiting on the
        # client's tools, a paused turn) or goes on with: a result, or a call made from
        # code, whose use is in an earlier message. A use answered in the message itself
        # (most web searches) is no run.
        content = item.get("content")
        if item.get("role") != "assistant" or type(content) is not list:
            return ()
        # Most messages hold text, thinking and direct calls only: read once, in C.
        if all(type(b) is dict and b.get("type") in PLAIN and "caller" not in b for b in content):
            return ()
        uses, results, callers = set(), set(), set()
        for b in blocks(item):
            kind = b.get("type")
            if kind in SERVER_USES:
                uses.add(b.get("id"))
            elif kind in PLAIN:
                callers.add(called_from(b))
            elif is_server_result(b):
                results.add(b.get("tool_use_id"))
        return tuple(sorted(str(r) for r in (uses ^ results) | callers - {None}))

    def loaders(self, items: Sequence[Item], carried: Sequence[Item]) -> list[Item]:
        # A search that loads a tool the carried ones do not, with the use it answers:
        # Anthropic's (`server_tool_use`, its `tool_search_tool_result`) in an assistant
        # message, the app's (`tool_use`, its `tool_result`) answered in a user message.
        have = {name for m in carried for b in blocks(m) for name in references(b)}
        uses = {b.get("id"): b for m in items for b in blocks(m) if b.get("type") in CALLS}
        searches: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for b in (b for m in items for b in blocks(m)):
            names = references(b)
            use = uses.get(b.get("tool_use_id"))
            if use is None or set(names) <= have:
                continue
            # Breakpoints stay on the client's own blocks, never on these copies.
            pair = [unmarked_block(use), unmarked_block(_referencing(b, have))]
            if b.get("type") == "tool_result":
                calls.append(pair[0])
                results.append(pair[1])
            else:
                searches += pair
        if not (searches or calls):
            return []
        closing = results or [_text_block(LOADED)]
        return [
            {"role": "assistant", "content": [*searches, *calls]},
            {"role": "user", "content": closing},
        ]

    def loads(self, items: Sequence[Item]) -> set[str]:
        return {name for m in items for b in blocks(m) for name in references(b)}

    def uses(self, item: Item) -> set[str]:
        return set(self.call_names(item).values())

    def holds_tools(self, items: Sequence[Item]) -> bool:
        return any(
            b.get("type") in ("tool_use", "tool_result") for item in items for b in blocks(item)
        )

    def text(self, item: Item) -> str:
        return text_of(item)

    def summary(self, text: str) -> Item:
        return {"role": "user", "content": [_text_block(text)]}

    def note(self, text: str) -> Item:
        # A user message: merged into the next turn's, it never touches an assistant
        # message (whose thinking blocks Anthropic checks).
        return {"role": "user", "content": [_text_block(text)]}

    def placeholder(self, call: Item, call_id: str, text: str) -> Item | None:
        result = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        return {"role": "user", "content": [result]}

    def cleared(self, item: Item, call_id: str, text: str) -> Item:
        content = item.get("content")
        if not isinstance(content, list):
            return item
        # A result holding tool references is what loads those tools: it stays.
        out = [
            {**b, "content": text}
            if isinstance(b, dict)
            and b.get("type") == "tool_result"
            and b.get("tool_use_id") == call_id
            and not references(b)
            else b
            for b in content
        ]
        return {**item, "content": out}

    def shortened(self, item: Item, cut: Callable[[str], str]) -> Item:
        content = item.get("content")
        if any(b.get("type") in THINKING for b in blocks(item)):
            return item  # Anthropic checks an assistant message with thinking as it was made
        if isinstance(content, list):  # a tool result's own content is cut as a message's
            content = [
                {**b, "content": cut_blocks(b["content"], TEXT_BLOCKS, cut)}
                if isinstance(b, dict) and b.get("type") == "tool_result" and "content" in b
                else b
                for b in content
            ]
        return (
            item if content is None else {**item, "content": cut_blocks(content, TEXT_BLOCKS, cut)}
        )

    def without_answers(self, item: Item, call_ids: Sequence[str]) -> Item | None:
        # Only the stray results go: the message's other results, its text and images
        # stay where they are, and a message left with nothing keeps its place.
        stray = set(call_ids)
        content = item.get("content")
        if not isinstance(content, list):
            return item
        kept = [
            b
            for b in content
            if not (
                isinstance(b, dict)
                and b.get("type") == "tool_result"
                and b.get("tool_use_id") in stray
            )
        ]
        return {**item, "content": kept or [_text_block(STRAY_RESULTS)]}


def _referencing(result: dict[str, Any], have: set[str]) -> dict[str, Any]:
    """A search's result with only the references to tools not in `have` (once each), which
    then holds them: a definition is expanded at each reference, so a tool referenced again
    costs its definition again. Whatever else the result holds stays."""
    inner = result.get("content")
    listed = inner.get("tool_references") if isinstance(inner, dict) else inner
    listed = listed if isinstance(listed, list) else []
    kept: list[Any] = []
    for part in listed:
        name = references({"type": "tool_result", "content": [part]})
        if name and name[0] in have:
            continue
        have.update(name)
        kept.append(part)
    if len(kept) == len(listed):
        return result
    if isinstance(inner, dict):
        return {**result, "content": {**inner, "tool_references": kept}}
    return {**result, "content": kept}


ANTHROPIC = AnthropicItems()


class AnthropicWire(body_checks.JsonWire):
    items = ANTHROPIC
    provider = "anthropic"
    upstream_path = "/v1/messages"
    history_field = "messages"
    limit_fields = ("max_tokens",)
    definition_fields = ("system", "tools", "output_format")

    def server_state(self, payload: dict[str, Any]) -> str | None:
        return "context_management" if payload.get("context_management") else None

    parse = staticmethod(anthropic_request.parse)

    def opening(self, payload: dict[str, Any]) -> list[Item]:
        # The instructions live in `system`: two apps that differ only there are two
        # conversations.
        system = payload.get("system")
        instructions = [{"role": "system", "content": system}] if system else []
        return [*instructions, *self.history(payload)[:1]]

    def forwarded(self, items: Sequence[Item]) -> Sequence[Item]:
        return anthropic_request.alternate(items)

    def prefill(self, items: Sequence[Item], appended: bool = False) -> Item | None:
        # Text only: an assistant message with calls or thinking is no answer's start.
        last = items[-1] if len(items) > 1 or (items and appended) else None
        if last is None or last.get("role") != "assistant":
            return None
        content = last.get("content")
        if isinstance(content, str) or all(b.get("type") == "text" for b in blocks(last)):
            return last if content else None
        return None

    def render(self, body: bytes, payload: dict[str, Any], items: Sequence[Item]) -> bytes:
        kept = anthropic_cache.within_limit(payload, self.forwarded(items))
        return body_checks.render(body, payload, self.history_field, kept)

    def assembler(self, limit: int) -> MessagesAssembler:
        return MessagesAssembler(limit=limit)

    def answer(self, content: bytes) -> Answer | None:
        try:
            body = orjson.loads(content)
        except orjson.JSONDecodeError:
            return None
        message = message_from_body(body)
        return None if message is None else Answer([message], None)


ANTHROPIC_WIRE = AnthropicWire()
