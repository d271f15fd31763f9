"""Reading and checking a client's request before anything is forwarded or stored.

Only what the proxy must understand is checked (it needs `messages` to
manage history); anything else that is well-formed is forwarded for the
upstream to judge, so new OpenAI fields and content part types pass through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request

from .errors import ProxyError
from .messages import KNOWN_ROLES, Message


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, refusing more than `limit` bytes before reading them all.

    A client that takes longer than `timeout_s` to send it gets a 408, so a
    slow sender cannot hold a connection and its buffers for ever.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise ProxyError(
            408,
            f"The request body did not arrive within {timeout_s:g} s (server.body_timeout_s).",
            code="request_timeout",
        ) from None
    return b"".join(chunks)


def too_large(limit: int) -> ProxyError:
    return ProxyError(
        413,
        f"Request body exceeds the proxy's limit of {limit} bytes.",
        code="request_too_large",
    )


def parse_chat(
    body: bytes,
    known: Callable[[dict[str, Any]], int] | None = None,
    parsed: Any = None,
    max_messages: int | None = None,
) -> dict[str, Any]:
    """The chat request as a dict, or a 400 saying what is wrong.

    `known(payload)` says how many leading messages were checked before (a
    history resent unchanged, see `known.py`); only the rest are checked.
    `parsed` is `body` already parsed, if it was (`known.reparse`).
    """
    if parsed is not None:
        payload = parsed
    elif not body.strip():
        raise ProxyError(400, "The request body is empty; expected a JSON chat request.")
    else:
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ProxyError(
                400, f"The request body is not valid JSON: {exc.msg}.", code="invalid_json"
            ) from None
    if not isinstance(payload, dict):
        raise ProxyError(400, "The request body must be a JSON object.")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise ProxyError(400, "'model' is required and must be a string.", param="model")
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProxyError(
            400, "'messages' is required and must be a non-empty array.", param="messages"
        )
    if max_messages is not None and len(messages) > max_messages:
        raise ProxyError(
            413,
            f"The request has {len(messages)} messages; the proxy accepts at most "
            f"{max_messages} (server.max_messages).",
            param="messages",
            code="too_many_messages",
        )
    for i in range(known(payload) if known is not None else 0, len(messages)):
        check_message(messages[i], f"messages[{i}]")
    for key in ("max_tokens", "max_completion_tokens"):
        value = payload.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise ProxyError(400, f"'{key}' must be a non-negative integer.", param=key)
    if "stream" in payload and not isinstance(payload["stream"], bool | None):
        raise ProxyError(400, "'stream' must be a boolean.", param="stream")
    return payload


# Deeper than this, a message could not be written back as JSON (orjson stops
# at 254 levels, and the store and the summariser wrap messages in a few more).
MAX_DEPTH = 100


def check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise ProxyError(400, f"{where} must be an object.", param=where)
    if nested_deeper(message, MAX_DEPTH):
        raise ProxyError(400, f"{where} is nested more than {MAX_DEPTH} levels deep.", param=where)
    role = message.get("role")
    if not isinstance(role, str) or role not in KNOWN_ROLES:
        raise ProxyError(
            400,
            f"{where}.role must be one of {', '.join(sorted(KNOWN_ROLES))}; got {role!r}.",
            param=f"{where}.role",
        )
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise ProxyError(
            400, f"{where}.content must be a string or an array.", param=f"{where}.content"
        )
    calls = message.get("tool_calls")
    valid_calls = isinstance(calls, list) and all(
        isinstance(c, dict) and isinstance(c.get("id"), str) for c in calls
    )
    if calls is not None and not valid_calls:
        raise ProxyError(
            400,
            f"{where}.tool_calls must be an array of calls with ids.",
            param=f"{where}.tool_calls",
        )
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise ProxyError(
            400,
            f"{where}.tool_call_id is required for tool messages.",
            param=f"{where}.tool_call_id",
        )


def nested_deeper(value: Any, limit: int) -> bool:
    """Whether `value` holds arrays or objects more than `limit` levels deep."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return False


def reserved_output(payload: dict[str, Any]) -> int:
    """Tokens the request asks to keep free for the answer."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def as_messages(payload: dict[str, Any]) -> list[Message]:
    messages: list[Message] = payload["messages"]
    return messages


def check_content_type(value: str | None) -> None:
    """JSON or nothing: a form post (curl -d without a header) would be misread otherwise."""
    if value is None:
        return
    media = value.split(";", 1)[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        raise ProxyError(
            415,
            f"Content-Type must be application/json, not {media!r}.",
            code="unsupported_media_type",
        )
