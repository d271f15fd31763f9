"""Anthropic's mid-conversation tool changes (beta `mid-conversation-tool-changes-2026-07-01`,
https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages): a
`{"role": "system"}` message of the history adds or removes tools with `tool_addition` and
`tool_removal` blocks. Not supported yet (`docs/anthropic.md`, "Tool search"): these tests
say what support means and fail until it is there (strict: they flag the day they pass)."""

from __future__ import annotations

import json

import pytest

from proxy.dialects import anthropic_request
from proxy.dialects.anthropic import ANTHROPIC
from proxy.errors import ProxyError

from .test_anthropic import result, text, tool_use, user

ADDED = {
    "role": "system",
    "content": [
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "get_weather"}}
    ],
}
NOT_YET = "mid-conversation system messages are refused with a 400 and never carried"


@pytest.mark.xfail(strict=True, reason=NOT_YET, raises=ProxyError)
def test_a_history_holding_a_tool_change_is_accepted() -> None:
    """Anthropic takes a system message in the history (no beta needed for one; the tool
    change blocks need theirs); the proxy answers it with a 400 of its own."""
    messages = [user(text("weather?")), ADDED, {"role": "assistant", "content": [text("ok")]}]
    body = {"model": "claude-x", "max_tokens": 64, "messages": messages}
    anthropic_request.parse(json.dumps(body).encode())


@pytest.mark.xfail(strict=True, reason=NOT_YET, raises=AssertionError)
def test_a_dropped_tool_change_is_carried_for_the_calls_kept_after_it() -> None:
    """A summary that drops the message adding a tool drops the addition with it, and the
    kept calls of the tool lose their definition: what a reduction carries past a dropped
    span (`Dialect.loaders`) should carry the change as it carries a tool search."""
    call = {"role": "assistant", "content": [tool_use("t1", "get_weather")]}
    span = [user(text("weather?")), ADDED, call, user(result("t1", "sunny"))]
    carried = ANTHROPIC.loaders(span, [])
    assert ADDED["content"][0] in [b for m in carried for b in m["content"]]
