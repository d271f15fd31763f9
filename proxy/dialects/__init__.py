"""Wire formats ("dialects"), and the one question the reduction core asks of them: what an item is.

The core works on a history of items, each the client's own JSON object,
forwarded byte for byte when kept. It never looks inside one: it asks the
dialect whether an item is an instruction, opens a user's turn, makes tool
calls or answers one, or must travel with the item after it (reasoning and
thinking items), and asks it to render what the core adds (a summary, a
placeholder for a missing tool result). Chat completions is the first
dialect (`chat_completions.CHAT`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

Item = dict[str, Any]


class Dialect(Protocol):
    """What the core needs to know of one wire format's history items."""

    name: str
    # Whether calls made together arrive as separate items (one per call) that
    # their results follow, rather than as one item listing them all.
    separate_calls: bool
    # Whether any item may travel with the next one (see `travels_with_next`).
    opaque_items: bool

    def is_instruction(self, item: Item) -> bool:
        """A leading instruction (system, developer): kept verbatim, never reduced."""
        ...

    def opens_turn(self, item: Item) -> bool:
        """A user's message: where a turn, and a segment of the history, begins."""
        ...

    def call_ids(self, item: Item) -> list[str]:
        """The ids of the tool calls the item makes (none for most items)."""
        ...

    def answers(self, item: Item) -> str | None:
        """The id of the call the item is a result of; None if it is not a tool result."""
        ...

    def travels_with_next(self, item: Item) -> bool:
        """An opaque item (reasoning, thinking) that must stay with the item after it."""
        ...

    def holds_tools(self, items: Sequence[Item]) -> bool:
        """Whether any item makes a call or is a result (a quick check, before grouping)."""
        ...

    def text(self, item: Item) -> str:
        """The item's readable text, for summaries, recall and pinning rules."""
        ...

    def summary(self, text: str) -> Item:
        """How a summary of earlier history goes upstream, after the instructions."""
        ...

    def note(self, text: str) -> Item:
        """A span's summary in the span's place (the tiered strategy's in-line notes)."""
        ...

    def placeholder(self, call_id: str, text: str) -> Item:
        """A result closing call `call_id`, whose real result the client did not send."""
        ...
