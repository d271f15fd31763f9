"""Repairing an Anthropic history drops a stray `tool_result` block, never the message holding it.

A user message answers its assistant's calls and carries the user's words
beside them; a result whose call is not in the history (a trimmed or edited
history) makes Anthropic reject the request, and only that block may go.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.dialects import Item
from proxy.dialects.anthropic import ANTHROPIC, STRAY_RESULTS
from proxy.dialects.anthropic_request import alternate
from proxy.mock import anthropic as mock_anthropic
from proxy.reduction import STRATEGIES
from proxy.reduction.repair import PLACEHOLDER, repair

from .test_anthropic import HEADERS, SLOW, histories, reduced, result, sent, text, tool_use, user

STALE = "toolu_stale"


def assistant(*content: dict[str, Any]) -> Item:
    return {"role": "assistant", "content": list(content)}


def repaired(history: list[Item]) -> list[Item]:
    """The history as it goes upstream, checked the way Anthropic checks it."""
    out = list(alternate(repair(history, ANTHROPIC)))
    mock_anthropic.validate({"model": "m", "max_tokens": 1, "messages": out}, HEADERS, {})
    return out


def test_a_stray_result_goes_and_the_real_result_and_question_stay() -> None:
    question = text("and what next?")
    history = [
        user(text("find it")),
        assistant(tool_use("tA")),
        user(result("tA", "REAL RESULT"), result(STALE, "old"), question),
    ]
    out = repaired(history)
    assert out[:2] == history[:2]
    assert out[2]["content"] == [result("tA", "REAL RESULT"), question]


def test_the_question_beside_a_stray_result_is_the_last_message_still() -> None:
    history = [user(text("q")), assistant(text("a")), user(result(STALE, "old"), text("what now?"))]
    assert repaired(history)[-1] == user(text("what now?"))


def test_a_message_of_nothing_but_stray_results_keeps_its_place_as_a_note() -> None:
    note = user(text(STRAY_RESULTS))
    assert repaired([user(result(STALE, "old"))]) == [note]  # was `messages: []`
    # Dropped, it would join two assistant messages (thinking blocks must open theirs).
    middle = [user(text("q")), assistant(text("a")), user(result(STALE, "x")), assistant(text("b"))]
    assert repaired([*middle, user(text("q2"))])[2] == note
    # As the last message, dropped, it would leave a prefill of the assistant's message.
    assert repaired(middle[:3])[-1] == note


def test_a_stray_result_in_the_first_message_leaves_its_text_first() -> None:
    history = [user(result(STALE, "old"), text("hello")), assistant(text("a")), user(text("q2"))]
    out = repaired(history)
    assert out[0] == user(text("hello"))  # not "[Earlier turns omitted.]"
    assert out[1:] == history[1:]


def test_a_call_whose_only_result_is_stray_is_closed_beside_the_message_text() -> None:
    history = [user(text("q")), assistant(tool_use("tA")), user(result(STALE, "x"), text("go on"))]
    out = repaired(history)
    assert out[-1]["content"] == [result("tA", PLACEHOLDER), text("go on")]


@st.composite
def with_strays(draw: st.DrawFn) -> tuple[list[Item], set[str]]:
    """Generated histories with stray results among some messages' results, and some
    messages whose results all answer calls the history lacks."""
    items = [dict(m) for m in draw(histories())]
    strays: set[str] = set()
    for i, message in enumerate(items):
        if message["role"] != "user" or not draw(st.booleans()):
            continue
        blocks = list(message["content"])
        results = sum(1 for b in blocks if b.get("type") == "tool_result")
        stray = f"{STALE}_{i}"
        strays.add(stray)
        if results and draw(st.booleans()):  # every result of the message is stray
            for j, block in enumerate(blocks[:results]):
                strays.add(f"{stray}_{j}")
                blocks[j] = result(f"{stray}_{j}", str(block["content"]))
        else:
            blocks.insert(draw(st.integers(0, results)), result(stray, "stale output"))
        items[i] = {**message, "content": blocks}
    return items, strays


def is_stray(block: dict[str, Any], strays: set[str]) -> bool:
    return block.get("type") == "tool_result" and block.get("tool_use_id") in strays


@SLOW
@given(with_strays(), st.sampled_from([s for s in STRATEGIES if s != "none"] + ["mask+tokens"]))
def test_every_strategy_drops_stray_results_alone(
    history: tuple[list[Item], set[str]], strategy: str
) -> None:
    items, strays = history
    for window in (400, 1_000_000):
        reduction = reduced(items, strategy, window)
        if reduction is None:
            continue
        payload = {"model": "claude-x", "max_tokens": 64, "messages": items}
        body = sent(payload, list(reduction.messages))
        mock_anthropic.validate(body, HEADERS, {})
        forwarded = [b for m in body["messages"] for b in m["content"]]
        assert not any(is_stray(b, strays) for b in forwarded)
        # The question goes whole: the last message's blocks but its stray results.
        question = [b for b in items[-1]["content"] if not is_stray(b, strays)]
        assert body["messages"][-1]["content"][-len(question) :] == question
        if set(reduction.kinds) <= {"repaired"}:  # nothing else done: every other block goes
            note, closed = text(STRAY_RESULTS), PLACEHOLDER
            kept = [b for b in forwarded if b != note and b.get("content") != closed]
            client = [b for m in items for b in m["content"] if not is_stray(b, strays)]
            assert kept == client
