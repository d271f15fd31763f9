"""Chat-completions answers: a stream assembled while it is relayed, or a whole answer read.

The proxy forwards the upstream's bytes as they arrive and feeds the same
bytes to `StreamAssembler`, which rebuilds the assistant message exactly as
the client's SDK will see it (content, refusal, `tool_calls` merged by
index). The assembled message is what the archive and append mode keep.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..messages import Message
from ..sse import EventReader


class StreamAssembler(EventReader):
    """Merges `chat.completion.chunk` deltas of choice 0 into one assistant message.

    It only observes what is relayed, so it never raises on what the upstream
    sends: a chunk it cannot merge (a tool-call index that is not a small
    integer, say) sets `broken`, and an answer whose assembled text passes
    `limit` characters (or a line of the stream `limit` bytes) sets
    `too_large`. Either way the answer is relayed whole but is not complete,
    so the turn is not stored from it.
    """

    MAX_TOOL_CALLS = 1024

    def __init__(self, limit: int | None = None) -> None:
        super().__init__(limit)
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.error: Any = None
        self.broken: str | None = None
        self.answer_id: str | None = None  # a completion cannot be chained to

    @property
    def complete(self) -> bool:
        """The upstream finished a usable answer (a finish_reason or `[DONE]`) without an error."""
        return (
            self.error is None
            and self.broken is None
            and not self.too_large
            and (self.done or self.finish_reason is not None)
        )

    def event(self, data: bytes) -> None:
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(chunk, dict):
            return
        if "error" in chunk:
            self.error = chunk["error"]
            return
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
            self.size += len(delta["content"])
        if isinstance(delta.get("refusal"), str):
            self.refusal.append(delta["refusal"])
            self.size += len(delta["refusal"])
        calls = delta.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            self.broken = "tool_calls is not a list"
            return
        for part in calls or ():
            if isinstance(part, dict):
                self._tool_call(part)

    def _tool_call(self, part: dict[str, Any]) -> None:
        index = part.get("index", len(self.tool_calls))
        if type(index) is not int or not 0 <= index < self.MAX_TOOL_CALLS:
            self.broken = f"a tool-call delta has the index {str(index)[:40]!r}"
            return
        call = self.tool_calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if isinstance(part.get("id"), str) and part["id"]:
            call["id"] = part["id"]
        if isinstance(part.get("type"), str) and part["type"]:
            call["type"] = part["type"]
        fn = part.get("function")
        if isinstance(fn, dict):
            if isinstance(fn.get("name"), str):
                call["function"]["name"] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["function"]["arguments"] += fn["arguments"]
                self.size += len(fn["arguments"])

    def items(self) -> list[Message]:
        return [self.message()]

    def message(self) -> Message:
        content = "".join(self.content)
        message: Message = {"role": "assistant", "content": content or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        if message["content"] is None and not self.tool_calls and not self.refusal:
            message["content"] = ""
        return message


def message_from_completion(body: Any) -> Message | None:
    """The assistant message of a non-streamed completion, reduced to request fields.

    Response-only fields (annotations, a null refusal) are left out so the
    message is valid when append mode forwards it on the next turn.
    """
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    raw = choices[0].get("message")
    if not isinstance(raw, dict):
        return None
    message: Message = {"role": "assistant", "content": raw.get("content")}
    if raw.get("refusal"):
        message["refusal"] = raw["refusal"]
    if raw.get("tool_calls"):
        message["tool_calls"] = raw["tool_calls"]
    if isinstance(raw.get("audio"), dict) and raw["audio"].get("id"):
        message["audio"] = {"id": raw["audio"]["id"]}
    return message
