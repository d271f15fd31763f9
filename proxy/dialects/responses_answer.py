"""Responses answers: the output items of a stream assembled while it is relayed, or of a whole one.

A Responses stream carries typed events and ends with `response.completed`
(or `response.incomplete`, `response.failed`), not with `[DONE]`. The
completed event holds the whole response, output items included, so the
assembler keeps those; the items of `response.output_item.done` events
stand in when a completed event carries none. The items are stored as the
turn's answer: an app resending its input sends them back as input items.
"""

from __future__ import annotations

from typing import Any

from ..sse import EventReader
from . import Item

ENDED = ("response.completed", "response.incomplete", "response.failed")
STORED_STATUSES = ("completed", "incomplete")


def items_from_response(body: Any) -> list[Item] | None:
    """The output items of a finished response object; None if it did not finish."""
    if not isinstance(body, dict) or body.get("status") not in STORED_STATUSES:
        return None
    output = body.get("output")
    if not isinstance(output, list):
        return None
    items = [i for i in output if isinstance(i, dict)]
    return items or None


def response_id(body: Any) -> str | None:
    found = body.get("id") if isinstance(body, dict) else None
    return found if isinstance(found, str) and found else None


class ResponsesAssembler(EventReader):
    """Collects the output items of a streamed response; it never raises on what it reads."""

    def __init__(self, limit: int | None = None) -> None:
        super().__init__(limit)
        self.done_items: dict[int, Item] = {}
        self.final: list[Item] | None = None
        self.done = False
        self.broken: str | None = None
        self.answer_id: str | None = None

    @property
    def complete(self) -> bool:
        return self.done and self.broken is None and not self.too_large and bool(self.items())

    def event(self, data: bytes) -> None:
        event = self.json_event(data)
        if event is None:
            return
        kind = event.get("type")
        if kind == "response.output_item.done":
            index, item = event.get("output_index"), event.get("item")
            if type(index) is int and isinstance(item, dict):
                self.done_items[index] = item
        elif kind in ENDED:
            self.done = True
            self.answer_id = response_id(event.get("response"))
            found = items_from_response(event.get("response"))
            if kind == "response.failed" or (found is None and not self.done_items):
                self.broken = f"the response ended with {kind}"
            self.final = found
        elif kind == "error":
            self.done = True
            self.broken = "the stream carried an error event"

    def items(self) -> list[Item]:
        if self.final:
            return self.final
        return [self.done_items[i] for i in sorted(self.done_items)]
