"""The recall evaluation's replay through OpenAI's Responses API and Anthropic's Messages API.

`bench.recall_eval` replays its conversations as chat completions. An app (or
the held-out benchmark's replay) may speak another wire format; the core
reduces and recalls the same neutral turn whichever it is, but each format
places what the core adds its own way (Anthropic merges the recall block into
the question's user message, and its tokens are estimated, so the block's room
is smaller). These rows check that the figures carry over.

The upstream here is `proxy.mock.MockUpstream`, which validates each request
as the provider would, answering with the transcript's next message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import httpx

from proxy.mock import PROSE, MockUpstream

WIRES = ("responses", "anthropic")
NAMES = {"responses": "Responses", "anthropic": "Anthropic"}
_PATHS = {"responses": "/v1/responses", "anthropic": "/v1/messages"}
_HEADERS = {
    "responses": {},
    "anthropic": {"x-api-key": "sk-eval", "anthropic-version": "2023-06-01"},
}


class WireUpstream:
    """The mock upstream answering with `answer`; `last` is the last forwarded request's
    instructions and messages (what the evaluation reads and compares as a prefix)."""

    def __init__(self, wire: str) -> None:
        self.wire = wire
        self.answer = "ok"
        voice = dataclasses.replace(PROSE, reply=lambda _text: self.answer)
        self.mock = MockUpstream(voice=voice)
        self.transport = httpx.ASGITransport(app=self.mock.app)
        self._read = 0  # requests already looked at by `last`
        self._last: list[dict[str, Any]] = []

    @property
    def last(self) -> list[dict[str, Any]]:
        path = _PATHS[self.wire]
        for record in self.mock.requests[self._read :]:
            if record.path == path and not record.is_summary:
                self._last = _forwarded(self.wire, record.body)
        self._read = len(self.mock.requests)
        return self._last

    @last.setter
    def last(self, value: list[dict[str, Any]]) -> None:
        self._read, self._last = len(self.mock.requests), value


def _forwarded(wire: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    if wire == "anthropic":
        return [{"system": body.get("system")}, *body["messages"]]
    return [{"instructions": body.get("instructions")}, *body["input"]]


def send(
    client: Any, wire: str, model: str, messages: list[dict[str, str]], headers: dict[str, str]
) -> httpx.Response:
    """POST the chat `messages` to `wire`'s route, as an app of that format sends them."""
    leading = [m["content"] for m in messages[:1] if m["role"] == "system"]
    rest = messages[len(leading) :]
    body: dict[str, Any]
    if wire == "anthropic":
        body = {"model": model, "max_tokens": 256, "messages": rest}
        if leading:
            body["system"] = leading[0]
    else:
        body = {"model": model, "input": rest, "store": False}
        if leading:
            body["instructions"] = leading[0]
    sent = {**headers, **_HEADERS[wire]}
    response: httpx.Response = client.post(_PATHS[wire], json=body, headers=sent)
    return response


def said(forwarded: Sequence[dict[str, Any]], question: str) -> list[str]:
    """Every text the model reads in `forwarded`, less the question itself (its last
    occurrence: the block before it may share its user message)."""
    texts: list[str] = []
    for entry in forwarded:
        _texts(entry, texts)
    for at in range(len(texts) - 1, -1, -1):
        if texts[at] == question:
            del texts[at]
            break
    return texts


def _texts(value: Any, into: list[str]) -> None:
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, list):
        for item in value:
            _texts(item, into)
    elif isinstance(value, dict):
        for key in ("system", "instructions", "content", "text"):
            if key in value:
                _texts(value[key], into)
