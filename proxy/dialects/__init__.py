"""Wire formats ("dialects"): what the core asks of an item, and the pipeline of a route.

The core works on a history of items, each the client's own JSON object,
forwarded byte for byte when kept. It never looks inside one: it asks the
dialect whether an item is an instruction, opens a user's turn, makes tool
calls or answers one, or must travel with the item after it (reasoning and
thinking items), and asks it to render what the core adds (a summary, a
placeholder for a missing tool result, a cleared one). The turn pipeline
asks a `Wire` the rest: parse a request, write the reduced history back,
read the answer. The dialects are chat completions (`chat_completions`),
OpenAI's Responses API (`responses`) and Anthropic's Messages API
(`anthropic`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

Item = dict[str, Any]


class Answer(NamedTuple):
    """What an answer adds to the history, and its id where a client may chain to it."""

    items: list[Item]
    id: str | None = None


class Dialect(Protocol):
    """What the core needs to know of one wire format's history items."""

    name: str
    # Whether calls made together arrive as separate items (one per call) that
    # their results follow, rather than as one item listing them all.
    separate_calls: bool
    # Whether any item may travel with the next one (see `travels_with_next`).
    opaque_items: bool
    # Whether a deferred tool whose loader is gone from the history is only unavailable
    # to the model, which searches for it again, rather than refused once called: then
    # the loaders a reduction carries give way to the window (`layout.CARRIED_SHARE`).
    searches_again: bool

    def is_instruction(self, item: Item) -> bool:
        """A leading instruction (system, developer): kept verbatim, never reduced."""
        ...

    def opens_turn(self, item: Item) -> bool:
        """A user's message: where a turn, and a segment of the history, begins."""
        ...

    def call_ids(self, item: Item) -> list[str]:
        """The ids of the tool calls the item makes (none for most items)."""
        ...

    def answers(self, item: Item) -> Sequence[str]:
        """The ids of the calls the item holds results of (empty: it is not a tool result).

        Most wires send one result an item; Anthropic's user message holds the
        results of every call its assistant message made.
        """
        ...

    def call_names(self, item: Item) -> dict[str, str]:
        """The tool each call the item makes is for, by call id (for the mask strategy)."""
        ...

    def travels_with_next(self, item: Item) -> bool:
        """An opaque item (reasoning, thinking) that must stay with the item after it."""
        ...

    def held_by(self, item: Item) -> tuple[str, ...]:
        """The ids of the runs the item belongs to (none for most items).

        A run is one tool's work spread over several items: a Responses program, the
        calls it makes, their outputs and its own output; Anthropic's code execution
        waiting on the client's tools, or a server tool resumed after a paused turn. The
        provider rejects a run cut apart, so its unit reaches from its first item to its
        last.
        """
        ...

    def loaders(self, items: Sequence[Item], carried: Sequence[Item]) -> list[Item]:
        """What of `items`, a span a reduction drops, loads deferred tools the `carried` items
        do not (a tool search and the references it returned), as items that stand on their
        own; none for most spans. The reduction forwards them in the span's place, two items
        a loader: what makes the searches and what answers them."""
        ...

    def loads(self, items: Sequence[Item]) -> set[str]:
        """The deferred tools `items` load, keyed as `uses` keys a call of one."""
        ...

    def uses(self, item: Item) -> set[str]:
        """The deferred tools the calls `item` makes need loaded (a tool's name, or what names
        the set it belongs to, as `loads` names it)."""
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

    def placeholder(self, call: Item, call_id: str, text: str) -> Item | None:
        """A result closing call `call_id` (made by item `call`), whose real result the
        client did not send; None when no result can be made up for such a call."""
        ...

    def cleared(self, item: Item, call_id: str, text: str) -> Item:
        """`item` with its result for call `call_id` replaced by `text`, answering the same
        call; `item` itself when that result is a structure that cannot be cleared."""
        ...

    def without_answers(self, item: Item, call_ids: Sequence[str]) -> Item | None:
        """`item` without its results for `call_ids` (calls the history does not hold), for
        repair; None when the item is nothing but those results and goes as nothing."""
        ...

    def shortened(self, item: Item, cut: Callable[[str], str]) -> Item:
        """`item` with each text the model reads as prose (a message's, a tool result's)
        passed through `cut`, truncation's last resort; ids, a call's arguments, reasoning,
        signatures and media stay as they are."""
        ...


def cut_blocks(content: Any, types: frozenset[str], cut: Callable[[str], str]) -> Any:
    """`content`, a string or a list of blocks, with the string or each block of `types`
    (its `text`) passed through `cut`; anything else as it is."""
    if isinstance(content, str):
        return cut(content)
    if not isinstance(content, list):
        return content
    return [
        {**b, "text": cut(b["text"])}
        if isinstance(b, dict)
        and isinstance(b.get("type"), str)
        and b["type"] in types
        and isinstance(b.get("text"), str)
        else b
        for b in content
    ]


class Assembler(Protocol):
    """Rebuilds the answer's item from a streamed answer, fed the bytes as they are relayed.

    It only observes: it never raises on what the upstream sends. An answer
    it cannot assemble sets `broken`, one past its limit `too_large`; either
    way it is not `complete`, and the turn is not stored from it.
    """

    done: bool
    broken: str | None
    # The answer's id, where a later request may name it (`previous_response_id`).
    answer_id: str | None

    @property
    def too_large(self) -> bool: ...

    @property
    def complete(self) -> bool: ...

    def feed(self, chunk: bytes) -> None: ...

    def close(self) -> None: ...

    def items(self) -> list[Item]:
        """The items the answer adds to the history, in order."""
        ...


class Wire(Protocol):
    """One wire format's requests and answers, as the turn pipeline uses them.

    `items` is what the reduction core asks of the history's items; the rest
    reads a request into a payload and its history, writes the reduced
    history back, and reads the answer.
    """

    @property
    def items(self) -> Dialect: ...

    @property
    def provider(self) -> str:
        """Which configured upstream serves the route: "openai" or "anthropic"."""
        ...

    @property
    def upstream_path(self) -> str:
        """Where the reduced request goes, under the upstream's base URL."""
        ...

    @property
    def history_field(self) -> str:
        """The payload's key that holds the history: what the resend fast path looks for,
        and what an error about the history names."""
        ...

    def server_state(self, payload: dict[str, Any]) -> str | None:
        """The field by which the provider holds (or compacts) the conversation, if any.

        Such a request's history is not the conversation: it goes upstream as sent.
        """
        ...

    def parse(
        self,
        body: bytes,
        known: Callable[[dict[str, Any]], int] | None,
        parsed: Any,
        max_items: int,
    ) -> dict[str, Any]:
        """The request as a payload, or a 400/413 saying what is wrong.

        `known(payload)` says how many leading items were checked on an
        earlier turn; `parsed` is the body already parsed, if it was.
        """
        ...

    def opening(self, payload: dict[str, Any]) -> list[Item]:
        """The items a derived conversation id is made from: the history, and the
        instructions where the wire keeps them outside it."""
        ...

    def history(self, payload: dict[str, Any]) -> list[Item]:
        """The payload's items, the same objects (kept items are forwarded as they are)."""
        ...

    def reserved_output(self, payload: dict[str, Any]) -> int:
        """Tokens the request keeps free for the answer."""
        ...

    def prefill(self, items: Sequence[Item], appended: bool = False) -> Item | None:
        """The history's last item when it is the start of the answer (Anthropic's prefill:
        an assistant message the model continues), else None. `appended`: the items
        follow the stored history (append mode), so one alone can be a prefill; a full
        history of it alone is no turn."""
        ...

    def definitions(self, payload: dict[str, Any]) -> list[Any]:
        """The request's parts besides the history that fill the context (tools, schemas)."""
        ...

    def streams(self, payload: dict[str, Any]) -> bool: ...

    def forwarded(self, items: Sequence[Item]) -> Sequence[Item]:
        """The reduced history as the wire's rules have it sent (Anthropic's alternates)."""
        ...

    def render(self, body: bytes, payload: dict[str, Any], items: Sequence[Item]) -> bytes:
        """The upstream's request body with the reduced history in the payload's place."""
        ...

    def assembler(self, limit: int) -> Assembler: ...

    def answer(self, content: bytes) -> Answer | None:
        """What a whole (not streamed) answer adds to the history; None if it is none."""
        ...
