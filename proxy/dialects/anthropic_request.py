"""Messages requests: the body checked into a payload, and the history made to alternate.

As for the other wires, only what the proxy must understand is checked:
the messages and the type of each content block, so that it can pair
`tool_use` with `tool_result`. Block types it does not know (documents,
server tools, compaction, types added later) pass as they are. `system`,
`tools` and every other field go upstream as the client sent them. A
mid-conversation system message (role "system" in `messages`) is read like
the others and stays where the client put it: merging never crosses it, and
one a window left first gets a placeholder user message before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ProxyError
from . import Item
from . import body as body_checks

ROLES = ("user", "assistant", "system")
# Before a history that a reduction left starting with the assistant's message.
OMITTED = {"role": "user", "content": [{"type": "text", "text": "[Earlier turns omitted.]"}]}


def parse(
    body: bytes,
    known: Callable[[dict[str, Any]], int] | None = None,
    parsed: Any = None,
    max_items: int | None = None,
) -> dict[str, Any]:
    """The Messages request as a dict, or a 400/413 saying what is wrong."""
    payload = body_checks.json_object(body, parsed, "Messages request")
    body_checks.history(payload, "messages", max_items, known, check_message)
    max_tokens = payload.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ProxyError(400, "max_tokens: a positive integer is required.", param="max_tokens")
    system = payload.get("system")
    if system is not None and not isinstance(system, str | list):
        raise ProxyError(400, "system: a string or an array of text blocks.", param="system")
    body_checks.flags(payload, ())
    return payload


def check_message(message: Any, index: int) -> None:
    where = f"messages.{index}"
    if not isinstance(message, dict):
        raise ProxyError(400, f"{where}: a message must be an object.", param=where)
    role = message.get("role")
    if role not in ROLES:
        raise ProxyError(
            400,
            f"{where}.role: must be 'user', 'assistant' or 'system'; got {role!r}.",
            param=f"{where}.role",
        )
    content = message.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise ProxyError(
            400, f"{where}.content: a string or an array of blocks.", param=f"{where}.content"
        )
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise ProxyError(
                400,
                f"{where}.content.{j}: a content block must be an object with a 'type'.",
                param=f"{where}.content.{j}",
            )
        kind = block["type"]
        if kind == "tool_use" and not isinstance(block.get("id"), str):
            raise ProxyError(
                400, f"{where}.content.{j}.id: required for tool_use.", param=f"{where}.content.{j}"
            )
        if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise ProxyError(
                400,
                f"{where}.content.{j}.tool_use_id: required for tool_result.",
                param=f"{where}.content.{j}",
            )


def alternate(items: Sequence[Item]) -> Sequence[Item]:
    """The history with each run of one role merged into one message, as Anthropic reads it,
    starting with a user message.

    The core adds user messages (a summary, a placeholder, a recall block)
    beside the client's. Merged, a user message's `tool_result` blocks come
    first, as Anthropic requires, each block otherwise in its order. A
    window that cut the history before an answer, or before a system message
    (which Anthropic takes right after a user message), gets a short user
    message saying so. System messages are never merged: each stays where the
    client put it, after a user message or not (no reduction drops a user
    message between an answer and a system message it keeps). A history
    that already alternates is returned as it is, the same objects.
    """
    if all(_fits(a, b) for a, b in zip([None, *items], items, strict=False)):
        return items
    out: list[Item] = []
    for item in items:
        before = out[-1] if out else None
        if before is not None and before.get("role") == item.get("role") != "system":
            out[-1] = merged(before, item)
            continue
        if not _fits(before, item):
            out.append(OMITTED)
        out.append(item)
    return out


def _fits(before: Item | None, item: Item) -> bool:
    """Whether `item` can follow `before` (None: it opens the history) as it is."""
    role = item.get("role")
    if before is None:
        return role == "user"
    return role == "system" or before.get("role") != role


def merged(first: Item, second: Item) -> Item:
    content = [*_as_blocks(first.get("content")), *_as_blocks(second.get("content"))]
    if first.get("role") == "user":
        results = [b for b in content if b.get("type") == "tool_result"]
        content = results + [b for b in content if b.get("type") != "tool_result"]
    return {**first, "content": content}


def _as_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []
