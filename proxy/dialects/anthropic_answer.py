"""Messages answers: the assistant message of a stream assembled while it is relayed, or of a
whole one.

A Messages stream opens with `message_start`, builds each content block
from `content_block_start`, its deltas (`text_delta`, `input_json_delta`,
`thinking_delta`, `signature_delta`, `citations_delta`) and
`content_block_stop`, and ends with `message_delta` and `message_stop`;
an `error` event ends it broken. Blocks that arrive whole (redacted
thinking, server tool results) are kept as they start. The assembled
message is stored as the turn's answer, thinking signatures included:
an app that sends the message back sends them, and Anthropic checks them.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..sse import EventReader
from . import Item


def message_from_body(body: Any) -> Item | None:
    """The assistant message of a whole Messages answer; None if it is not one."""
    if not isinstance(body, dict) or body.get("type") != "message":
        return None
    content = body.get("content")
    if not isinstance(content, list) or not content:
        return None
    return {"role": "assistant", "content": content}


class MessagesAssembler(EventReader):
    """Collects the content blocks of a streamed message; it never raises on what it reads."""

    def __init__(self, limit: int | None = None) -> None:
        super().__init__(limit)
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, list[str]] = {}
        self.started = False
        self.done = False
        self.broken: str | None = None
        self.answer_id: str | None = None

    @property
    def complete(self) -> bool:
        return self.done and self.broken is None and not self.too_large and bool(self.blocks)

    def event(self, data: bytes) -> None:
        event = self.json_event(data)
        if event is None:
            return
        kind = event.get("type")
        index = event.get("index")
        if kind == "message_start":
            self.started = True
        elif kind == "content_block_start" and type(index) is int:
            block = event.get("content_block")
            if isinstance(block, dict):
                self.blocks[index] = dict(block)
        elif kind == "content_block_delta" and type(index) is int and index in self.blocks:
            delta = event.get("delta")
            if isinstance(delta, dict):
                self._apply(index, delta)
        elif kind == "content_block_stop" and type(index) is int:
            self._finish(index)
        elif kind == "message_stop":
            self.done = True
            if not self.started:
                self.broken = "the stream ended without message_start"
        elif kind == "error":
            self.done = True
            self.broken = "the stream carried an error event"

    def _apply(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks[index]
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
        elif kind == "input_json_delta":
            self.partial_json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = str(block.get("signature", "")) + str(delta.get("signature", ""))
        elif kind == "citations_delta" and "citation" in delta:
            citations = block.get("citations")
            known = citations if isinstance(citations, list) else []
            block["citations"] = [*known, delta["citation"]]

    def _finish(self, index: int) -> None:
        parts = self.partial_json.pop(index, None)
        block = self.blocks.get(index)
        if parts is None or block is None:
            return
        text = "".join(parts)
        try:
            block["input"] = orjson.loads(text) if text else {}
        except orjson.JSONDecodeError:
            self.broken = "a tool call's input is not valid JSON"

    def items(self) -> list[Item]:
        content = [self.blocks[i] for i in sorted(self.blocks)]
        return [{"role": "assistant", "content": content}] if content else []
