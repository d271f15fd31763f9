"""Chat-completions requests: the body checked into a payload, and rendered back once reduced.

Only what the proxy must understand is checked (it needs `messages` to
manage history); anything else that is well-formed is forwarded for the
upstream to judge, so new OpenAI fields and content part types pass through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ProxyError
from ..messages import KNOWN_ROLES
from . import body as body_checks


def parse(
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
    payload = body_checks.json_object(body, parsed, "chat request")
    body_checks.history(payload, "messages", max_messages, known, check_message)
    body_checks.flags(payload, ("max_tokens", "max_completion_tokens"))
    return payload


def check_message(message: Any, index: int) -> None:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise ProxyError(400, f"{where} must be an object.", param=where)
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
