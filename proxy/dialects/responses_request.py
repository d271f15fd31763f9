"""Responses requests: the body checked into a payload, and rendered back once reduced.

As for chat, only what the proxy must understand is checked: `input`'s
items, so that it can group and pair them. Item types it does not know
(built-in tools, item references, types added later) pass as they are.
A string `input` is one user message; it is sent back as the string when
nothing was reduced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ProxyError
from . import body as body_checks

MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})
CALL_ITEMS = frozenset({"function_call", "function_call_output", "custom_tool_call_output"})
# Fields that make OpenAI, not the request, hold the conversation or its compaction;
# compaction first, so that a chain is named by its id only when nothing else applies.
SERVER_STATE = ("context_management", "conversation", "previous_response_id")
# Items only the provider can read (a compaction, a reference to a stored item), or one
# asking it to compact the input (`compaction_trigger`, the last item): OpenAI's own
# compaction, chosen by the app, is left to do its work on the input as sent.
PROVIDER_ITEMS = ("compaction", "compaction_trigger", "item_reference")
# Fields that may supply the whole input, so that a request needs none of its own.
SUPPLIERS = ("previous_response_id", "conversation", "prompt")


def parse(
    body: bytes,
    known: Callable[[dict[str, Any]], int] | None = None,
    parsed: Any = None,
    max_items: int | None = None,
) -> dict[str, Any]:
    """The Responses request as a dict, or a 400/413 saying what is wrong."""
    payload = body_checks.json_object(body, parsed, "Responses request")
    items = payload.get("input")
    if isinstance(items, str):
        items = payload["input"] = [{"role": "user", "content": items}]
    if items in (None, []) and any(payload.get(k) for k in SUPPLIERS):
        # A stored prompt, or the conversation OpenAI holds, is the input: nothing to
        # reduce, so the request goes as sent (`server_state`).
        payload["input"] = []
        body_checks.flags(payload, ("max_output_tokens",))
        return payload
    if not isinstance(items, list) or not items:
        raise ProxyError(
            400, "'input' is required: a string or a non-empty array of items.", param="input"
        )
    body_checks.history(payload, "input", max_items, known, check_item, "input items")
    body_checks.flags(payload, ("max_output_tokens",))
    return payload


def check_item(item: Any, index: int) -> None:
    where = f"input[{index}]"
    if not isinstance(item, dict):
        raise ProxyError(400, f"{where} must be an object.", param=where)
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise ProxyError(400, f"{where}.type must be a string.", param=f"{where}.type")
    if kind == "message":
        role = item.get("role")
        if not isinstance(role, str) or role not in MESSAGE_ROLES:  # a list is not hashable
            raise ProxyError(
                400,
                f"{where}.role must be one of {', '.join(sorted(MESSAGE_ROLES))}; got {role!r}.",
                param=f"{where}.role",
            )
        if not isinstance(item.get("content"), str | list):
            raise ProxyError(
                400, f"{where}.content must be a string or an array.", param=f"{where}.content"
            )
    elif kind in CALL_ITEMS and not isinstance(item.get("call_id"), str):
        raise ProxyError(
            400, f"{where}.call_id is required for {kind} items.", param=f"{where}.call_id"
        )


def server_state(payload: dict[str, Any]) -> str | None:
    """The field that makes OpenAI hold this conversation (or compact it, or supply the
    whole input), if any.

    Such a request's `input` is not the conversation, so it cannot be
    reduced; the app chose the provider's state, compaction or stored prompt.
    """
    if not payload["input"]:
        return "input"  # none sent: a stored prompt or the provider supplies it
    # Compaction and provider items first: `previous_response_id` alone is a chain
    # `[responses] manage_server_state` may continue, never one the app asked OpenAI
    # to compact.
    for item in payload["input"]:
        if isinstance(item, dict) and item.get("type") in PROVIDER_ITEMS:
            return str(item["type"])
    for key in SERVER_STATE:
        if payload.get(key):
            return key
    return None
