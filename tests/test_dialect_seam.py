"""The core speaks items through a dialect: a history shaped like the Responses API's keeps its
chains whole through every strategy.

`Items` below is a dialect of the test's own, with the Responses API's item
types: calls made together arrive as separate `function_call` items, their
`function_call_output` items follow, and a `reasoning` item travels with the
call after it. It proves the seam, not the Responses route (that one is its
own dialect, with its own tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.dialects import Item
from proxy.dialects.chat_completions import CHAT
from proxy.reduction import (
    STRATEGIES,
    Budget,
    ContextTooLarge,
    Policy,
    Working,
    reduce,
)
from proxy.reduction.chains import group
from proxy.reduction.repair import REPAIR_PASSES, repair


class Items:
    name = "test.items"
    separate_calls = True
    opaque_items = True
    searches_again = True

    def is_instruction(self, item: Item) -> bool:
        return item.get("type") == "message" and item.get("role") in ("system", "developer")

    def opens_turn(self, item: Item) -> bool:
        return item.get("type") == "message" and item.get("role") == "user"

    def call_ids(self, item: Item) -> list[str]:
        return [str(item["call_id"])] if item.get("type") == "function_call" else []

    def answers(self, item: Item) -> tuple[str, ...]:
        return (str(item["call_id"]),) if item.get("type") == "function_call_output" else ()

    def call_names(self, item: Item) -> dict[str, str]:
        if item.get("type") != "function_call":
            return {}
        return {str(item["call_id"]): str(item.get("name", "fn"))}

    def travels_with_next(self, item: Item) -> bool:
        return item.get("type") == "reasoning"

    def loaders(self, items: Sequence[Item], carried: Sequence[Item]) -> list[Item]:
        return []

    def loads(self, items: Sequence[Item]) -> set[str]:
        return set()

    def uses(self, item: Item) -> set[str]:
        return set()

    def held_by(self, item: Item) -> tuple[str, ...]:
        return ()

    def holds_tools(self, items: Sequence[Item]) -> bool:
        return any(i.get("type") in ("function_call", "function_call_output") for i in items)

    def text(self, item: Item) -> str:
        return str(item.get("content") or item.get("output") or item.get("arguments") or "")

    def summary(self, text: str) -> Item:
        return {"type": "message", "role": "developer", "content": text}

    def note(self, text: str) -> Item:
        return {"type": "message", "role": "assistant", "content": text}

    def placeholder(self, call: Item, call_id: str, text: str) -> Item | None:
        return {"type": "function_call_output", "call_id": call_id, "output": text}

    def cleared(self, item: Item, call_id: str, text: str) -> Item:
        return {**item, "output": text}

    def without_answers(self, item: Item, call_ids: Sequence[str]) -> Item | None:
        return None

    def shortened(self, item: Item, cut: Callable[[str], str]) -> Item:
        field = {"message": "content", "function_call_output": "output"}.get(item.get("type"))
        return {**item, field: cut(item[field])} if field else item


ITEMS = Items()


def message(role: str, text: str) -> Item:
    return {"type": "message", "role": role, "content": text}


def count(item: Item) -> int:
    return 4 + len(ITEMS.text(item)) // 4


@st.composite
def histories(draw: st.DrawFn) -> list[Item]:
    """Turns of a user message, 0-2 tool rounds of 1-3 parallel calls, and an answer."""
    items: list[Item] = []
    for n in range(draw(st.integers(1, 10))):
        items.append(message("user", f"q{n} " + "x" * draw(st.integers(0, 200))))
        for r in range(draw(st.integers(0, 2))):
            ids = [f"c{n}_{r}_{i}" for i in range(draw(st.integers(1, 3)))]
            if draw(st.booleans()):
                items.append({"type": "reasoning", "id": f"rs{n}_{r}", "summary": []})
            items.extend({"type": "function_call", "call_id": i, "arguments": "{}"} for i in ids)
            outputs = [
                {"type": "function_call_output", "call_id": i, "output": "y" * 40} for i in ids
            ]
            items.extend(draw(st.permutations(outputs)))
        items.append(message("assistant", f"a{n} " + "z" * draw(st.integers(0, 200))))
    return items


def assert_chains_whole(items: Sequence[Item]) -> None:
    """Every output follows its call, every call has one output, reasoning precedes a call."""
    open_calls: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "reasoning":
            assert i + 1 < len(items) and items[i + 1].get("type") == "function_call", items
        elif kind == "function_call":
            open_calls.add(item["call_id"])
        elif kind == "function_call_output":
            assert item["call_id"] in open_calls, f"output without its call: {item}"
            open_calls.discard(item["call_id"])
        elif open_calls:
            raise AssertionError(f"calls {open_calls} left unanswered before {item}")
    assert not open_calls


SLOW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(histories())
def test_grouping_keeps_a_round_and_its_reasoning_in_one_unit(items: list[Item]) -> None:
    units = group(items, (), ITEMS)
    assert [m for u in units for m in u.messages] == items
    for unit in units:
        if unit.has_tool_calls:
            assert_chains_whole(unit.messages)
        else:
            assert unit.size == 1 and unit.messages[0].get("type") == "message"


@SLOW
@given(histories(), st.data())
def test_repair_closes_dropped_outputs_and_drops_orphans(items: list[Item], data: Any) -> None:
    outputs = [i for i, m in enumerate(items) if m.get("type") == "function_call_output"]
    if outputs:
        gone = data.draw(st.sampled_from(outputs))
        items = items[:gone] + items[gone + 1 :]
    first = data.draw(st.booleans())
    if first and outputs:  # an output whose call is not in the history
        items.insert(0, {"type": "function_call_output", "call_id": "lost", "output": "?"})
    assert_chains_whole(repair(items, ITEMS))
    assert [m for u in group(items, REPAIR_PASSES, ITEMS) for m in u.messages] == items


@SLOW
@given(
    histories(),
    st.sampled_from([s for s in STRATEGIES if s != "none"]),
    st.integers(120, 2000),
)
def test_every_strategy_forwards_whole_chains_of_items(
    items: list[Item], strategy: str, window: int
) -> None:
    policy = Policy(strategy=strategy, dialect=ITEMS)
    working = Working((message("system", "be brief"),), tuple(items))
    try:
        first = reduce(working, policy, Budget(window), count)
        texts = {r.key: f"S{len(r.messages)}" for r in first.summary_requests}
        reduction = reduce(working, policy, Budget(window), count, texts) if texts else first
    except ContextTooLarge:
        return
    body = [m for m in reduction.messages if not ITEMS.is_instruction(m)]
    assert_chains_whole(body)
    assert all(m.get("type") in ("message", "reasoning") or "call_id" in m for m in body)
    for m in reduction.messages:
        assert m.get("role") != "tool", "a chat message in an items history"


def test_chat_is_the_default_dialect() -> None:
    assert Policy().dialect is CHAT
