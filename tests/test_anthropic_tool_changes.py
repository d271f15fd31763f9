"""Anthropic's mid-conversation tool changes (beta `mid-conversation-tool-changes-2026-07-01`,
https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages): a
`{"role": "system"}` message of the history adds or removes tools with `tool_addition` and
`tool_removal` blocks. Such a message is read and forwarded where the client put it; a
reduction does not yet carry a dropped addition (`docs/anthropic.md`, "Mid-conversation
system messages"): that test says what support means and fails until it is there (strict:
it flags the day it passes)."""

from __future__ import annotations

import json

import pytest

from proxy.dialects import anthropic_request
from proxy.dialects.anthropic import ANTHROPIC

from .test_anthropic import result, text, tool_use, user

ADDED = {
    "role": "system",
    "content": [
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "get_weather"}}
    ],
}
NOT_YET = "a tool change a reduction drops is not carried past it"


def test_a_history_holding_a_tool_change_is_accepted() -> None:
    """Anthropic takes a system message in the history (no beta needed for one; the tool
    change blocks need theirs), and so does the proxy, as sent."""
    messages = [user(text("weather?")), ADDED, {"role": "assistant", "content": [text("ok")]}]
    body = {"model": "claude-x", "max_tokens": 64, "messages": messages}
    assert anthropic_request.parse(json.dumps(body).encode())["messages"] == messages
    assert anthropic_request.alternate(messages) is messages


@pytest.mark.xfail(strict=True, reason=NOT_YET, raises=AssertionError)
def test_a_dropped_tool_change_is_carried_for_the_calls_kept_after_it() -> None:
    """A summary that drops the message adding a tool drops the addition with it, and the
    kept calls of the tool lose their definition: what a reduction carries past a dropped
    span (`Dialect.loaders`) should carry the change as it carries a tool search."""
    call = {"role": "assistant", "content": [tool_use("t1", "get_weather")]}
    span = [user(text("weather?")), ADDED, call, user(result("t1", "sunny"))]
    carried = ANTHROPIC.loaders(span, [])
    assert ADDED["content"][0] in [b for m in carried for b in m["content"]]
