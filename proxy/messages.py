"""The OpenAI chat wire format, and the only module that knows its shape.

Messages stay plain dicts exactly as clients send them: the proxy must
forward what it does not understand (new content part types, vendor fields)
untouched, so nothing here converts them into objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import xxhash

from . import blocks
from .errors import ProxyError

Message = dict[str, Any]

LEADING_ROLES = frozenset({"system", "developer"})
KNOWN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def role(message: Message) -> str:
    value = message.get("role")
    return value if isinstance(value, str) else ""


def is_leading(message: Message) -> bool:
    """System and developer messages are instructions, forwarded verbatim."""
    return role(message) in LEADING_ROLES


def tool_calls(message: Message) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")  # looked at first: most messages have none
    if not isinstance(calls, list) or role(message) != "assistant":
        return []
    return [c for c in calls if isinstance(c, dict)]


def tool_call_ids(message: Message) -> list[str]:
    return [str(c.get("id", "")) for c in tool_calls(message)]


def text_of(message: Message) -> str:
    """The human-readable text of a message, for summaries, search and estimates.

    Non-text parts (images, audio) contribute nothing here; token estimates for
    them live in `tokens.py`. Anthropic's tool calls and results read as
    `blocks.said` gives them.
    """
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif text := blocks.said(part):  # an Anthropic tool call or result
                parts.append(text)
    refusal = message.get("refusal")
    if isinstance(refusal, str):
        parts.append(refusal)
    for call in tool_calls(message):
        fn = call.get("function")
        if isinstance(fn, dict):
            parts.append(f"{fn.get('name', '')}({fn.get('arguments', '')})")
    return "\n".join(parts)


def split_leading(messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """Split off the leading system/developer block that every strategy keeps verbatim."""
    i = 0
    while i < len(messages) and is_leading(messages[i]):
        i += 1
    return list(messages[:i]), list(messages[i:])


def last_user_index(messages: Sequence[Message]) -> int:
    """Index of the last user message, or -1. Everything from it on is the active turn."""
    for i in range(len(messages) - 1, -1, -1):
        if role(messages[i]) == "user":
            return i
    return -1


def canonical(message: Message) -> bytes:
    """Sorted keys, so equal messages hash equally whatever key order a client uses.

    A message JSON cannot write back (nested past orjson's limit) is the
    client's error, whichever stage meets it first.
    """
    try:
        return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        raise ProxyError(400, "A message is nested too deep to be encoded as JSON.") from None


def digest(message: Message) -> bytes:
    """A 128-bit content digest, computed once per message per request.

    xxh3 rather than a cryptographic hash: it runs at memory speed, and a
    crafted collision could only confuse the matching of the crafter's own
    conversations, since everything stored is namespaced by tenant.
    """
    return xxhash.xxh3_128_digest(canonical(as_meant(message)))


def as_meant(message: Message) -> Message:
    """The message as its identity: what it says, without how a client happened to write it.

    The proxy stores an answer as a request would carry it; a client resends
    it as its SDK parsed the response (`"refusal": null, "annotations": []`,
    a text block's `"citations": null`) or as a plain string. A client that
    follows Anthropic's prompt-caching pattern moves its `cache_control`
    breakpoint to the newest message every turn, taking it off the one it
    marked before. Each is the same message and must hash alike, or it would
    look like an edit: archived twice, and the conversation reduced again.
    So content blocks lose their cache markers and null fields, one plain
    text block reads as its string, and an assistant message loses the
    response-only fields that say nothing (`content: null` stays: the proxy
    stores it so, and an answer resent without its `content`, as
    `exclude_none` serialises a tool call's message, reads as that null).
    A Responses item names its kind (`"type": "message"`, which the role tells
    already) and an answer item its response's `id` and `status`: an app that
    keeps its history as chat messages resends the answer as
    `{"role": "assistant", "content": "..."}`, the same message.
    Only the identity changes: a message goes upstream as the client sent it.
    """
    if type(message) is not dict:
        return message
    kind = message.get("type")
    # Most messages are chat messages, with none of these fields: two lookups decide it.
    if kind is None:
        if "id" in message or "status" in message:
            message = {k: v for k, v in message.items() if k not in _ITEM_ONLY[None]}
    elif type(kind) is str and kind in _ITEM_ONLY:
        unsaid = _ITEM_ONLY[kind]
        message = {k: v for k, v in message.items() if k not in unsaid}
    content = message.get("content")
    if type(content) is list:
        meant = blocks.as_meant(content)
        if meant is not content:
            message = {**message, "content": meant}
    if message.get("role") != "assistant":
        return message
    if "content" not in message:  # a client's `exclude_none` drops the null the proxy stores
        message = {**message, "content": None}
    if not any(k in message and _empty(message[k]) for k in _RESPONSE_ONLY):
        return message
    return {k: v for k, v in message.items() if not (k in _RESPONSE_ONLY and _empty(v))}


def _empty(value: object) -> bool:
    return value is None or value == []


# Fields of an answer that a client may resend as parsed, null or empty.
_RESPONSE_ONLY = frozenset(["refusal", "annotations", "audio", "function_call", "tool_calls"])
# What a Responses item's fields say nothing of, by its `type`: a message's kind (its role
# tells it), a call's or its output's id and status (the two pair by `call_id`). `None`: a
# message written without a `type`, as apps that keep chat messages write it.
_ITEM_ONLY: dict[str | None, tuple[str, ...]] = {
    None: ("id", "status"),
    "message": ("type", "id", "status"),
    "function_call": ("id", "status"),
    "custom_tool_call": ("id", "status"),
    "function_call_output": ("id", "status"),
    "custom_tool_call_output": ("id", "status"),
}


def chain(digest_: bytes, parent: str = "") -> str:
    """Hash of a message chained to its parent's hash (as simonw/llm does).

    Equal hashes mean equal conversations up to and including this message, so
    the longest common prefix of two hash lists is where two histories diverge.
    """
    return xxhash.xxh3_128_hexdigest(parent.encode() + digest_)


def message_hash(message: Message, parent: str = "") -> str:
    return chain(digest(message), parent)


def chain_hashes(
    messages: Iterable[Message], parent: str = "", digests: Iterable[bytes] | None = None
) -> list[str]:
    hashes: list[str] = []
    for d in digests if digests is not None else map(digest, messages):
        parent = chain(d, parent)
        hashes.append(parent)
    return hashes


def system_message(content: str) -> Message:
    return {"role": "system", "content": content}
