"""Reading an OpenAI chat-completions stream while it is relayed untouched.

The proxy forwards the upstream's bytes as they arrive and feeds the same
bytes to `StreamAssembler`, which rebuilds the assistant message exactly as
the client's SDK will see it (content, refusal, `tool_calls` merged by
index). The assembled message is what the archive and append mode keep.
"""

from __future__ import annotations

from typing import Any

import orjson

from .messages import Message


class SSEDecoder:
    """Incremental server-sent-events parser: bytes in, `data` payloads out.

    Events may be split across network chunks anywhere, including inside a
    multi-byte character, so decoding happens per complete line.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        events: list[bytes] = []
        while True:
            cut = self._buffer.find(b"\n")
            if cut < 0:
                break
            line = self._buffer[:cut].rstrip(b"\r")
            self._buffer = self._buffer[cut + 1 :]
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return events

    def flush(self) -> list[bytes]:
        """Events left when the stream ended without a final blank line."""
        events = self.feed(b"\n\n") if self._buffer else []
        if self._data:
            events.append(b"\n".join(self._data))
            self._data = []
        return events


class StreamAssembler:
    """Merges `chat.completion.chunk` deltas of choice 0 into one assistant message."""

    def __init__(self) -> None:
        self.decoder = SSEDecoder()
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.error: Any = None

    def feed(self, chunk: bytes) -> None:
        for data in self.decoder.feed(chunk):
            self._event(data)

    def close(self) -> None:
        for data in self.decoder.flush():
            self._event(data)

    @property
    def complete(self) -> bool:
        """The upstream finished the answer (a finish_reason or `[DONE]`) without an error."""
        return self.error is None and (self.done or self.finish_reason is not None)

    def _event(self, data: bytes) -> None:
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
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        if isinstance(delta.get("refusal"), str):
            self.refusal.append(delta["refusal"])
        for part in delta.get("tool_calls") or ():
            if isinstance(part, dict):
                self._tool_call(part)

    def _tool_call(self, part: dict[str, Any]) -> None:
        index = part.get("index", len(self.tool_calls))
        call = self.tool_calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if part.get("id"):
            call["id"] = part["id"]
        if part.get("type"):
            call["type"] = part["type"]
        fn = part.get("function")
        if isinstance(fn, dict):
            if isinstance(fn.get("name"), str):
                call["function"]["name"] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["function"]["arguments"] += fn["arguments"]

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
