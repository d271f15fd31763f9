"""Anthropic's Messages API as the core sees it: parse, pairing, alternation, and every strategy
over histories with parallel calls, signed thinking blocks and cache breakpoints."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.blocks import continued
from proxy.dialects import Item
from proxy.dialects.anthropic import ANTHROPIC, ANTHROPIC_WIRE
from proxy.dialects.anthropic_answer import MessagesAssembler, message_from_body
from proxy.dialects.anthropic_request import alternate, parse
from proxy.errors import ProxyError
from proxy.messages import text_of
from proxy.mock import anthropic as mock_anthropic
from proxy.reduction import (
    STRATEGIES,
    Budget,
    ContextTooLarge,
    Policy,
    Reduction,
    Working,
    reduce,
)
from proxy.reduction.chains import group
from proxy.reduction.repair import repair

HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def user(*content: Any) -> Item:
    return {"role": "user", "content": list(content)}


def text(value: str, cached: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": value}
    if cached:
        block["cache_control"] = {"type": "ephemeral"}
    return block


def thinking(value: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": value, "signature": mock_anthropic.signature(value)}


def tool_use(call_id: str, name: str = "lookup") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"q": call_id}}


def result(call_id: str, body: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": body}


def count(item: Item) -> int:
    return 4 + len(orjson.dumps(item)) // 4


@st.composite
def histories(draw: st.DrawFn) -> list[Item]:
    """Turns of a question, 0-2 tool rounds of 1-3 parallel calls (some with thinking first),
    and an answer; then the new question. A few blocks carry cache breakpoints."""
    items: list[Item] = []
    for n in range(draw(st.integers(1, 8))):
        items.append(user(text(f"q{n} " + "x" * draw(st.integers(0, 300)), n == 0)))
        for r in range(draw(st.integers(0, 2))):
            ids = [f"t{n}_{r}_{i}" for i in range(draw(st.integers(1, 3)))]
            head = [thinking(f"plan {n} {r}")] if draw(st.booleans()) else []
            items.append({"role": "assistant", "content": [*head, *map(tool_use, ids)]})
            results = [result(i, "y" * draw(st.integers(0, 400))) for i in ids]
            extra = [text("(reminder)")] if draw(st.booleans()) else []
            items.append(user(*draw(st.permutations(results)), *extra))
        items.append({"role": "assistant", "content": [text(f"a{n} " + "z" * 120)]})
    items.append(user(text("the new question", True)))
    return items


def sent(payload: dict[str, Any], forwarded: list[Item]) -> dict[str, Any]:
    body = orjson.dumps(payload)
    out: dict[str, Any] = orjson.loads(ANTHROPIC_WIRE.render(body, payload, forwarded))
    return out


def reduced(items: list[Item], strategy: str, window: int) -> Reduction | None:
    """The history reduced by `strategy`, with every summary it asks for made; None when
    even its mandatory part does not fit."""
    policy = Policy(strategy=strategy, dialect=ANTHROPIC)
    try:
        first = reduce(Working((), tuple(items)), policy, Budget(window), count)
        texts = {r.key: f"S{len(r.messages)}" for r in first.summary_requests}
        if not texts:
            return first
        return reduce(Working((), tuple(items)), policy, Budget(window), count, texts)
    except ContextTooLarge:
        return None


SLOW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(histories())
def test_the_fake_accepts_the_generated_histories_and_grouping_keeps_rounds(
    items: list[Item],
) -> None:
    payload = {"model": "claude-x", "max_tokens": 100, "messages": items}
    mock_anthropic.validate(payload, HEADERS, {})
    units = group(items, (), ANTHROPIC)
    assert [m for u in units for m in u.messages] == items
    for unit in units:
        if unit.has_tool_calls:
            assert unit.size == 2 and ANTHROPIC.answers(unit.messages[1])


@SLOW
@given(
    histories(),
    st.sampled_from([s for s in STRATEGIES if s != "none"] + ["mask+tokens"]),
    st.integers(300, 4000),
)
def test_every_strategy_sends_what_anthropic_accepts(
    items: list[Item], strategy: str, window: int
) -> None:
    body = accepted(items, strategy, window)
    # Refused only for its size: in a window large enough the same history goes.
    assert body is not None or accepted(items, strategy, ROOMY) is not None


# A window every generated history fits.
ROOMY = 1_000_000


def accepted(items: list[Item], strategy: str, window: int) -> dict[str, Any] | None:
    """The body `items` reduced by `strategy` go upstream in, which Anthropic accepts, the
    client's own blocks unchanged (texts of messages without thinking may be cut); None
    when even the history's mandatory part does not fit `window`."""
    original = copy.deepcopy(items)
    reduction = reduced(items, strategy, window)
    if reduction is None:
        return None
    payload = {"model": "claude-x", "system": [text("be brief", True)], "max_tokens": 64}
    body = sent({**payload, "messages": items}, list(reduction.messages))
    mock_anthropic.validate(body, HEADERS, {})  # alternation, pairing, thinking, breakpoints
    assert items == original, "the client's messages were changed in place"
    assert body["system"] == payload["system"]
    assistants = [m for m in items if m["role"] == "assistant"]
    client_blocks = [b for m in items for b in m["content"]]
    for message in body["messages"]:
        if message["role"] == "assistant":
            # Thinking and signatures exactly as sent; other texts as sent or truncated.
            assert message in assistants or any(cut_from(message, m) for m in assistants)
        for block in message["content"]:
            if "cache_control" in block:
                assert block in client_blocks  # a breakpoint stays on its own block
    # The question goes as sent, after a summary or recall block merged before it (a
    # history that ends with tool results may have them cut to fit).
    last = items[-1]["content"]
    if ANTHROPIC.opens_turn(items[-1]):
        assert body["messages"][-1]["content"][-len(last) :] == last
    return body


def cut_from(forwarded: Item, sent: Item) -> bool:
    """Whether `forwarded` is `sent` with texts cut around a marker, nothing else changed,
    and `sent` has no thinking (which Anthropic checks as it was made)."""
    pairs = list(zip(forwarded["content"], sent["content"], strict=False))
    if len(forwarded["content"]) != len(sent["content"]) or any(
        b.get("type") in ("thinking", "redacted_thinking") for b in sent["content"]
    ):
        return False
    for cut, whole in pairs:
        if cut == whole:
            continue
        if cut.keys() != whole.keys() or cut["type"] != "text" or "[..." not in cut["text"]:
            return False
        head, _, rest = cut["text"].partition("[...")
        tail = rest.partition("...]")[2]
        if not (whole["text"].startswith(head) and whole["text"].endswith(tail)):
            return False
    return True


def test_classification_pairs_a_message_of_results_with_its_calls() -> None:
    call = {"role": "assistant", "content": [thinking("t"), tool_use("a"), tool_use("b")]}
    answer = user(result("b", "2"), result("a", "1"), text("note"))
    assert ANTHROPIC.call_ids(call) == ["a", "b"]
    assert ANTHROPIC.answers(answer) == ("b", "a")
    assert not ANTHROPIC.opens_turn(answer) and ANTHROPIC.opens_turn(user(text("hi")))
    assert ANTHROPIC.call_names(call) == {"a": "lookup", "b": "lookup"}
    assert not ANTHROPIC.is_instruction(user(text("hi")))
    cleared = ANTHROPIC.cleared(answer, "a", "gone")
    assert cleared["content"][1] == result("a", "gone") and cleared["content"][0] == result(
        "b", "2"
    )
    # A call whose result went missing is closed; the placeholder merges into the results.
    history = [user(text("q")), call, user(result("a", "1"))]
    fixed = alternate(repair(history, ANTHROPIC))
    mock_anthropic.validate({"model": "m", "max_tokens": 1, "messages": [*fixed, *[]]}, HEADERS, {})
    assert [b["tool_use_id"] for b in fixed[-1]["content"]] == ["a", "b"]


def test_search_reads_tool_calls_and_the_blocks_a_result_holds() -> None:
    """Recall's index and its view of the forwarded history read a message by `text_of`."""
    call = {"role": "assistant", "content": [thinking("t"), text("Looking."), tool_use("a")]}
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    nested = {"type": "tool_result", "tool_use_id": "b", "content": [text("deep"), image]}
    answer = user(result("a", "the file's lines"), nested, text("reminder"))
    assert text_of(call) == 'Looking.\nlookup({"q":"a"})'
    assert text_of(answer) == "the file's lines\ndeep\nreminder"


def test_alternate_merges_runs_and_keeps_alternating_histories_as_they_are() -> None:
    history = [user(text("q")), {"role": "assistant", "content": "a"}, user(text("q2"))]
    assert alternate(history) is history
    summary = ANTHROPIC.summary("Summary of the earlier conversation: ...")
    merged = alternate([summary, *history])
    assert merged[0]["content"] == [summary["content"][0], text("q")]
    assert merged[1:] is not None and merged[1] is history[1] and merged[2] is history[2]
    strings = alternate([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
    assert strings == [user(text("one"), text("two"))]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"", "empty"),
        (b"[1]", "JSON object"),
        (b'{"model": "m", "max_tokens": 5}', "messages"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}', "max_tokens"),
        (
            b'{"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}',
            "role",
        ),
        (
            b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": 3}]}',
            "content",
        ),
        (
            b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{}]}]}',
            "type",
        ),
        (
            b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": '
            b'[{"type": "tool_result"}]}]}',
            "tool_use_id",
        ),
        (
            b'{"model": "m", "max_tokens": 5, "system": 3, '
            b'"messages": [{"role": "user", "content": "x"}]}',
            "system",
        ),
    ],
)
def test_malformed_bodies_are_400s_naming_the_field(body: bytes, needle: str) -> None:
    with pytest.raises(ProxyError) as raised:
        parse(body)
    assert raised.value.status == 400 and needle in raised.value.message
    shaped = orjson.loads(raised.value.body(anthropic=True))
    assert shaped["type"] == "error" and shaped["error"]["type"] == "invalid_request_error"


def stream(*events: dict[str, Any]) -> bytes:
    return b"".join(
        f"event: {e['type']}\ndata: {orjson.dumps(e).decode()}\n\n".encode() for e in events
    )


def test_a_stream_is_assembled_with_thinking_signature_and_tool_input() -> None:
    events = stream(
        {"type": "message_start", "message": {"id": "msg_1", "content": []}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hm"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "s1"},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi "}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "there"},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"a": '},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": "1}"},
        },
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    )
    assembler = MessagesAssembler(limit=1 << 20)
    for i in range(0, len(events), 13):  # any split of the bytes
        assembler.feed(events[i : i + 13])
    assembler.close()
    assert assembler.complete
    assert assembler.items() == [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s1"},
                {"type": "text", "text": "Hi there"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
            ],
        }
    ]
    broken = MessagesAssembler(limit=1 << 20)
    broken.feed(stream({"type": "message_start", "message": {}}, {"type": "error", "error": {}}))
    assert broken.done and not broken.complete
    assert message_from_body({"type": "error"}) is None
    assert message_from_body({"type": "message", "content": [text("x")]}) == {
        "role": "assistant",
        "content": [text("x")],
    }


def test_the_assembler_never_raises_on_odd_events() -> None:
    odd = stream(
        {"type": "message_start", "message": {}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "citations": 5},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "citations_delta", "citation": {}},
        },
        {"type": "content_block_delta", "index": 0, "delta": "not a dict"},
        {"type": "content_block_delta", "index": 7, "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_start", "index": [1], "content_block": {}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use"}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{"},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "message_stop"},
    )
    assembler = MessagesAssembler(limit=1 << 20)
    assembler.feed(odd + b"data: not json\n\n")
    assembler.close()
    assert assembler.done and not assembler.complete  # the broken tool input says so
    assert assembler.items()[0]["content"][0]["citations"] == [{}]


def test_an_active_tool_result_too_large_for_the_window_is_truncated_as_on_chat() -> None:
    """Past the window, the active turn's large result is cut around a marker, as a
    chat tool message is, instead of refusing the request."""
    call = {"role": "assistant", "content": [thinking("look it up"), tool_use("a")]}
    items = [user(text("What is in the log?")), call, user(result("a", "line\n" * 4000))]
    reduction = reduced(items, "summarize", 2000)
    assert reduction is not None and "truncated" in reduction.kinds
    payload = {"model": "claude-x", "max_tokens": 64}
    body = sent({**payload, "messages": items}, list(reduction.messages))
    mock_anthropic.validate(body, HEADERS, {})
    assert body["messages"][:2] == items[:2], "the question and the thinking as sent"
    cut = body["messages"][2]["content"][0]
    assert cut["tool_use_id"] == "a" and "[..." in cut["content"]
    assert sum(count(m) for m in reduction.messages) <= Budget(2000).limit


def test_a_prefill_and_its_answer_are_kept_as_one_message() -> None:
    answer = [{"role": "assistant", "content": [text('"a": 1}'), tool_use("c")]}]
    for prefill in ("{", [text("{")]):
        start = {"role": "assistant", "content": prefill}
        joined = continued(start, answer)
        assert joined[0]["content"][0] == text('{"a": 1}') and joined[0]["content"][1:] == [
            tool_use("c")
        ]
    called = [{"role": "assistant", "content": [tool_use("c")]}]
    assert continued({"role": "assistant", "content": "Let me"}, called)[0]["content"] == [
        text("Let me"),
        tool_use("c"),
    ]
    thought = [thinking("t"), text("x")]
    joined = continued(
        {"role": "assistant", "content": "{"}, [{"role": "assistant", "content": thought}]
    )
    assert joined[0]["content"] == [thinking("t"), text("{x")], "thinking stays first"
    history = [user(text("q")), {"role": "assistant", "content": "{"}]
    assert ANTHROPIC_WIRE.prefill(history) is history[-1]
    assert ANTHROPIC_WIRE.prefill(history[:1]) is None
    # Alone, it starts the answer to the stored history (append mode), and is no turn else.
    assert ANTHROPIC_WIRE.prefill(history[1:], appended=True) is history[-1]
    assert ANTHROPIC_WIRE.prefill(history[1:]) is None
    assert (
        ANTHROPIC_WIRE.prefill([user(text("q")), {"role": "assistant", "content": [tool_use("c")]}])
        is None
    )
