"""The Responses dialect: its requests read and written back, its items grouped, its answers read.

Pure tests; the route through the real server is in test_responses_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.dialects.responses import RESPONSES, RESPONSES_WIRE
from proxy.dialects.responses_answer import ResponsesAssembler
from proxy.errors import ProxyError
from proxy.messages import Message
from proxy.mock import ECHO
from proxy.mock import responses as mock_responses
from proxy.reduction import STRATEGIES, Budget, ContextTooLarge, Policy, Working, reduce
from proxy.reduction.chains import group
from proxy.reduction.types import MaskPolicy, Reduction
from tests.test_dialect_seam import assert_chains_whole, histories

BODIES = Path(__file__).parent / "data" / "responses-sdk-bodies.jsonl"


def sdk_bodies() -> list[bytes]:
    return [line.encode() for line in BODIES.read_text().splitlines()]


def parse(body: bytes) -> dict[str, Any]:
    return RESPONSES_WIRE.parse(body, None, None, 20_000)


@pytest.mark.parametrize("body", sdk_bodies(), ids=lambda b: str(len(b)))
def test_the_sdks_bodies_round_trip(body: bytes) -> None:
    payload = parse(body)
    items = RESPONSES_WIRE.history(payload)
    assert RESPONSES_WIRE.render(body, payload, items) is body  # nothing reduced: its bytes
    summary = RESPONSES.summary("what came before")
    again = orjson.loads(RESPONSES_WIRE.render(body, payload, [summary, *items]))
    sent = orjson.loads(body)
    assert {k: v for k, v in again.items() if k != "input"} == {
        k: v for k, v in sent.items() if k != "input"
    }
    assert again["input"][0] == summary
    assert again["input"][1:] == (sent["input"] if isinstance(sent["input"], list) else [items[0]])


def test_the_sdks_items_are_classified() -> None:
    payload = parse(sdk_bodies()[2])
    kinds = [
        (
            RESPONSES.is_instruction(i),
            RESPONSES.opens_turn(i),
            RESPONSES.call_ids(i),
            RESPONSES.answers(i),
            RESPONSES.travels_with_next(i),
        )
        for i in RESPONSES_WIRE.history(payload)
    ]
    call = payload["input"][3]["call_id"]
    assert kinds[:5] == [
        (True, False, [], (), False),  # developer message
        (False, True, [], (), False),  # user message
        (False, False, [], (), True),  # reasoning
        (False, False, [call], (), False),  # function_call
        (False, False, [], (call,), False),  # function_call_output
    ]
    assert RESPONSES.call_names(payload["input"][3]) == {call: "lookup"}
    units = group(payload["input"][1:], dialect=RESPONSES)
    assert [u.size for u in units[:2]] == [1, 3]  # reasoning, call and output are one unit


@pytest.mark.parametrize(
    ("call", "output"),
    [
        (
            {"type": "custom_tool_call", "call_id": "c", "name": "grep", "input": "x"},
            {"type": "custom_tool_call_output", "call_id": "c", "output": "y"},
        ),
        (
            {"type": "computer_call", "call_id": "c", "action": {}},
            {"type": "computer_call_output", "call_id": "c", "output": {}},
        ),
        (
            {"type": "local_shell_call", "id": "ls_1", "call_id": "c", "action": {}},
            {"type": "local_shell_call_output", "id": "c", "output": "{}"},
        ),
        (  # as the Agents SDK sends it, and OpenAI reads it
            {"type": "local_shell_call", "id": "ls_1", "call_id": "c", "action": {}},
            {"type": "local_shell_call_output", "call_id": "c", "output": "{}"},
        ),
        (  # as Codex answers a local shell call
            {"type": "local_shell_call", "id": "ls_1", "call_id": "c", "action": {}},
            {"type": "function_call_output", "call_id": "c", "output": "{}"},
        ),
        (
            {"type": "mcp_approval_request", "id": "c", "name": "run", "arguments": "{}"},
            {"type": "mcp_approval_response", "approval_request_id": "c", "approve": True},
        ),
    ],
)
def test_built_in_calls_and_their_outputs_are_one_unit(
    call: dict[str, Any], output: dict[str, Any]
) -> None:
    items = [{"role": "user", "content": "go"}, {"type": "reasoning", "id": "r"}, call, output]
    assert RESPONSES.call_ids(call) == ["c"] and RESPONSES.answers(output) == ("c",)
    units = group(items, dialect=RESPONSES)
    assert [u.size for u in units] == [1, 3]


def test_a_string_input_is_one_user_message_sent_back_as_a_string() -> None:
    body = b'{"model":"m","input":"hi there"}'
    payload = parse(body)
    assert RESPONSES_WIRE.history(payload) == [{"role": "user", "content": "hi there"}]
    assert RESPONSES_WIRE.render(body, payload, RESPONSES_WIRE.history(payload)) is body


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"input": "x"}, "model"),
        ({"model": "m", "input": [3]}, "input[0]"),
        ({"model": "m", "input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"role": ["user"], "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"role": {"a": 1}, "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"role": "user", "content": 3}]}, "input[0].content"),
        ({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}, None),
        ({"model": "m", "input": "x", "max_output_tokens": -1}, "max_output_tokens"),
        ({"model": "m", "input": "x", "stream": "yes"}, "stream"),
    ],
)
def test_bad_requests_get_a_400_naming_the_field(body: dict[str, Any], param: str | None) -> None:
    with pytest.raises(ProxyError) as refused:
        parse(json.dumps(body).encode())
    assert refused.value.status == 400
    if param is not None:
        assert refused.value.param == param
    else:
        assert "call_id" in str(refused.value)


def test_too_many_items_is_a_413() -> None:
    body = json.dumps({"model": "m", "input": [{"role": "user", "content": "x"}] * 5}).encode()
    with pytest.raises(ProxyError) as refused:
        RESPONSES_WIRE.parse(body, None, None, 4)
    assert refused.value.status == 413


@pytest.mark.parametrize(
    ("extra", "held"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"context_management": [{"type": "compaction"}]}, "context_management"),
        (
            {"input": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "x"}]},
            "compaction",
        ),
        (
            {"input": [{"role": "user", "content": "x"}, {"type": "compaction_trigger"}]},
            "compaction_trigger",
        ),
        ({}, None),
    ],
)
def test_requests_whose_conversation_the_provider_holds_are_recognised(
    extra: dict[str, Any], held: str | None
) -> None:
    body = {"model": "m", "input": [{"role": "user", "content": "x"}], **extra}
    assert RESPONSES_WIRE.server_state(parse(json.dumps(body).encode())) == held


def test_tool_definitions_instructions_and_schemas_count() -> None:
    payload = parse(sdk_bodies()[2])
    found = RESPONSES_WIRE.definitions(payload)
    assert payload["tools"] in found and payload["text"] in found
    assert RESPONSES_WIRE.definitions(parse(sdk_bodies()[1])) == [
        "Be concise.",
        payload["tools"],
    ]


def stream_of(body: dict[str, Any]) -> tuple[list[bytes], list[Message]]:
    """The fake upstream's events for `body`, and the output items they carry."""
    items, _ = mock_responses.validate(body, {}, {})
    final = mock_responses.response_object(
        body, "d1", mock_responses.output_for(items, "d1", ECHO), "completed"
    )

    async def collect() -> list[bytes]:
        return [e async for e in mock_responses.events(final)]

    return asyncio.run(collect()), final["output"]


@pytest.mark.parametrize("question", ["please call tool lookup", "hello"])
def test_a_stream_split_anywhere_assembles_the_output_items(question: str) -> None:
    events, output = stream_of({"model": "m", "input": question, "stream": True})
    data = b"".join(events)
    rng = random.Random(3)
    for _ in range(20):
        assembler = RESPONSES_WIRE.assembler(1 << 20)
        cuts = sorted(rng.sample(range(1, len(data)), 12))
        for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
            assembler.feed(data[a:b])
        assembler.close()
        assert assembler.complete and assembler.items() == output
        assert assembler.answer_id == "resp_d1"


def test_a_failed_or_cut_stream_is_not_complete() -> None:
    events, _ = stream_of({"model": "m", "input": "hello", "stream": True})
    cut = ResponsesAssembler(1 << 20)
    for event in events[:-1]:  # no response.completed
        cut.feed(event)
    cut.close()
    assert not cut.complete
    failed = ResponsesAssembler(1 << 20)
    failed.feed(b'data: {"type":"response.failed","response":{"status":"failed","output":[]}}\n\n')
    assert failed.done and not failed.complete
    small = ResponsesAssembler(100)
    for event in events:
        small.feed(event)
    assert small.too_large and not small.complete


def test_a_whole_answer_gives_its_output_items() -> None:
    body = {"model": "m", "input": "please call tool lookup"}
    output = mock_responses.output_for(mock_responses.validate(body, {}, {})[0], "d2", ECHO)
    whole = mock_responses.response_object(body, "d2", output, "completed")
    assert RESPONSES_WIRE.answer(orjson.dumps(whole)) == (output, "resp_d2")
    assert RESPONSES_WIRE.answer(orjson.dumps({**whole, "status": "failed"})) is None
    assert RESPONSES_WIRE.answer(b"not json") is None


LEADING = ({"type": "message", "role": "developer", "content": "Be brief."},)


def count(item: Message) -> int:
    return 4 + len(RESPONSES.text(item)) // 4


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.sampled_from(STRATEGIES), st.integers(60, 3000))
def test_every_strategy_keeps_responses_chains_whole_and_fits(
    items: list[Message], strategy: str, window: int
) -> None:
    """The real dialect, Responses-shaped histories: calls, outputs and reasoning stay together."""
    red = reduced(items, strategy, window)
    if red is None:
        return
    assert red.messages[0] == LEADING[0]
    assert_chains_whole(red.messages)
    if strategy != "none":
        assert sum(map(count, red.messages)) + 3 <= Budget(context_tokens=window).hard_limit


def reduced(items: list[Message], strategy: str, window: int) -> Reduction | None:
    """`items` after the instructions, reduced by `strategy` to a window of `window` tokens
    (summaries written as asked); None when they cannot fit."""
    policy = Policy(strategy=strategy, dialect=RESPONSES, mask=MaskPolicy(clear_at_least=1))
    budget = Budget(context_tokens=window)
    try:
        red = reduce(Working(LEADING, tuple(items)), policy, budget, count)
        texts = {r.key: "earlier talk" for r in red.summary_requests}
        if texts:
            red = reduce(Working(LEADING, tuple(items)), policy, budget, count, texts)
    except ContextTooLarge:
        return None
    return red


def accepted(items: list[Message], strategy: str, window: int) -> Reduction | None:
    """`reduced`, checking that OpenAI (the mock) accepts the history and what goes upstream."""
    mock_responses.validate({"model": "m", "input": items}, {}, {})
    red = reduced(items, strategy, window)
    if red is not None:
        mock_responses.validate({"model": "m", "input": list(red.messages)}, {}, {})
    return red


def play(store: Any, *, fast_path: bool) -> tuple[list[bytes], list[str], list[Any]]:
    """An app resending its Responses input for 16 turns, with tool rounds, a regeneration
    and an edit, against a respx upstream; what was forwarded, reported and stored."""
    import httpx
    import respx
    from starlette.testclient import TestClient

    from proxy.app import create_app
    from proxy.config import load_settings
    from proxy.conversation import tenant_of
    from proxy.store import ConvKey

    numbers = iter(range(1000))

    def answer(request: httpx.Request) -> httpx.Response:
        n = next(numbers)
        item: dict[str, Any] = {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"answer {n} " + "w " * 40}],
        }
        if n % 3 == 2:
            item = {"type": "function_call", "call_id": f"t{n}", "name": "f", "arguments": "{}"}
        body = {"id": f"resp_{n}", "status": "completed", "output": [item]}
        return httpx.Response(200, json=body)

    router = respx.MockRouter(assert_all_called=False, base_url="http://upstream.test/v1")
    router.post("/responses").mock(side_effect=answer)
    summary = {"choices": [{"message": {"role": "assistant", "content": "what was said"}}]}
    router.post("/chat/completions").mock(return_value=httpx.Response(200, json=summary))
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://upstream.test/v1",
            "CONTEXT_PROXY_MODELS_TINY": "900",
            "CONTEXT_PROXY_SERVER_FAST_PATH": str(fast_path).lower(),
        }
    )
    app = create_app(settings, transport=httpx.MockTransport(router.handler), store=store)
    kinds: list[str] = []
    items: list[Any] = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": "start " + "x " * 30},
    ]
    headers = {"Authorization": "Bearer sk-r", "X-Conversation-Id": "fast"}
    with TestClient(app) as client:
        for turn in range(16):
            body = {"model": "tiny", "input": items, "tools": [{"type": "function", "name": "f"}]}
            r = client.post("/v1/responses", json=body, headers=headers)
            assert r.status_code == 200, r.text
            kinds.append(r.headers["x-context-reduction"])
            output = r.json()["output"][0]
            if turn == 7:  # regenerate: the same input again
                continue
            items.append(output)
            if output["type"] == "function_call":
                items.append(
                    {"type": "function_call_output", "call_id": output["call_id"], "output": "ok"}
                )
            else:
                items.append({"role": "user", "content": f"question {turn} " + "q " * 30})
            if turn == 10:  # edit an early message
                items[1] = {"role": "user", "content": "start over " + "s " * 30}
        key = ConvKey(tenant_of("sk-r"), "fast")
        latest = client.portal.call(store.latest, key)  # type: ignore[union-attr]
    assert latest is not None
    sent = [c.request.content for c in router.calls if c.request.url.path.endswith("/responses")]
    return sent, kinds, latest.working


def test_the_fast_path_reads_responses_bodies_and_changes_nothing(
    tmp_path: Path, reparsed: list[bool]
) -> None:
    from proxy.store import SqliteStore

    fast = play(SqliteStore(str(tmp_path / "a.db")), fast_path=True)
    assert sum(reparsed) >= 10  # resent inputs were parsed from their new bytes only
    reparsed.clear()
    plain = play(SqliteStore(str(tmp_path / "b.db")), fast_path=False)
    assert not any(reparsed)
    assert fast == plain
    assert any("summarized" in k for k in fast[1])


def test_structured_outputs_are_never_cleared_and_calls_get_matching_placeholders() -> None:
    shell = {"type": "shell_call_output", "call_id": "s", "output": [{"stdout": "x" * 900}]}
    assert RESPONSES.cleared(shell, "s", "gone") is shell
    text = {"type": "function_call_output", "call_id": "f", "output": "y" * 900}
    assert RESPONSES.cleared(text, "f", "gone")["output"] == "gone"
    from proxy.reduction.repair import repair

    dangling = [
        {"role": "user", "content": "go"},
        {"type": "custom_tool_call", "call_id": "c", "name": "grep", "input": "x"},
        {"type": "computer_call", "call_id": "k", "action": {"type": "screenshot"}},
        {"role": "user", "content": "and?"},
    ]
    repaired = repair(dangling, RESPONSES)
    made = [i for i in repaired if i.get("type") == "custom_tool_call_output"]
    assert len(made) == 1 and made[0]["call_id"] == "c"
    assert not any(i.get("type") == "computer_call_output" for i in repaired)  # cannot be made up


@pytest.mark.parametrize(
    "extra",
    [
        {"prompt": {"id": "pmpt_1", "variables": {"city": "Oslo"}}},
        {"previous_response_id": "resp_1", "input": []},
        {"conversation": "conv_1", "input": None},
    ],
)
def test_a_request_whose_input_a_prompt_or_the_provider_supplies_needs_none(
    extra: dict[str, Any],
) -> None:
    # A stored prompt (OpenAI's reusable prompts) can be the whole request.
    payload = parse(json.dumps({"model": "m", **extra}).encode())
    assert RESPONSES_WIRE.server_state(payload) == "input"  # forwarded as sent
    with pytest.raises(ProxyError):
        parse(json.dumps({"model": "m", "input": [], "metadata": {"a": "b"}}).encode())


def test_item_references_mean_the_provider_holds_the_conversation() -> None:
    body = {
        "model": "m",
        "input": [{"type": "item_reference", "id": "msg_1"}, {"role": "user", "content": "x"}],
    }
    assert RESPONSES_WIRE.server_state(parse(json.dumps(body).encode())) == "item_reference"


def test_a_second_history_key_hidden_by_escapes_means_a_full_parse() -> None:
    from proxy.fastpath.known import Known, list_start, locate, remember, reparse, resent

    first = orjson.dumps({"model": "m", "input": [{"content": "a"}, {"content": "b"}]})
    payload = orjson.loads(first)
    bounds = locate(first, payload, None, "input")
    prefix_len, prefix_digest, suffix_len, suffix_digest = remember(first, bounds)
    known = Known(
        messages=tuple(payload["input"]),
        prefix_len=prefix_len,
        prefix_digest=prefix_digest,
        digests=(),
        hashes=(),
        model="m",
        counts=(),
        suffix_len=suffix_len,
        suffix_digest=suffix_digest,
        list_start=list_start(first, payload, "input"),
    )
    evil = first[:-2] + b',{"content":"c"}],"inp\\u0075t":[{"content":"EVIL"}]}'
    assert reparse(evil, known, "input") is None
    parsed = orjson.loads(evil)
    assert resent(known, parsed["input"], evil, locate(evil, parsed, known, "input"), "input") == 0


@st.composite
def with_programs(draw: st.DrawFn) -> list[Message]:
    """Turns of a user message, rounds of direct calls or of a program (programmatic tool
    calling: the calls it makes, their outputs, its output), and an answer; the last
    program may still be running."""
    items: list[Message] = []
    turns = draw(st.integers(1, 8))
    for n in range(turns):
        items.append({"role": "user", "content": f"q{n} " + "x" * draw(st.integers(0, 200))})
        rounds = draw(st.integers(0, 2))
        for r in range(rounds):
            name, program = f"p{n}_{r}", draw(st.booleans())
            if draw(st.booleans()):
                items.append({"type": "reasoning", "id": f"rs{name}", "summary": []})
            owner = {"type": "program", "caller_id": name}
            if program:
                items.append(
                    {"type": "program", "id": f"pg{name}", "call_id": name, "code": "go()"}
                    | {"fingerprint": "fp"}
                )
            for step in range(draw(st.integers(0 if program else 1, 3))):
                if draw(st.booleans()):  # a hosted tool's item, which names no program
                    items.append({"type": "web_search_call", "id": f"ws{name}_{step}"})
                ids = [f"c{name}_{step}_{i}" for i in range(draw(st.integers(1, 2)))]
                extra = {"caller": owner} if program else {}
                for i in ids:
                    items.append(
                        {"type": "function_call", "call_id": i, "name": "f", "arguments": "{}"}
                        | extra
                    )
                for i in ids:
                    output = "y" * draw(st.integers(0, 300))
                    items.append({"type": "function_call_output", "call_id": i, "output": output})
                    items[-1] |= extra
            running = n == turns - 1 and r == rounds - 1 and draw(st.booleans())
            if program and not running:
                items.append(
                    {"type": "program_output", "id": f"po{name}", "call_id": name, "result": "7"}
                    | {"status": "completed"}
                )
        if not (n == turns - 1 and rounds and items[-1].get("caller")):
            items.append({"role": "assistant", "content": f"a{n} " + "z" * 100})
    return items


def program_of(item: Message) -> str:
    if item.get("type") in ("program", "program_output"):
        return str(item["call_id"])
    caller = item.get("caller")
    return str(caller["caller_id"]) if isinstance(caller, dict) else ""


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_programs(), st.sampled_from(STRATEGIES), st.integers(100, 3000))
def test_no_strategy_separates_a_program_from_what_it_holds(
    items: list[Message], strategy: str, window: int
) -> None:
    """A program, the calls it makes, their outputs and its output are kept or dropped
    together, and what goes upstream is an input OpenAI (the mock) accepts."""
    red = accepted(items, strategy, window)
    if red is None:
        return
    for name in {program_of(i) for i in items} - {""}:
        held = [i.get("id") or i["call_id"] for i in items if program_of(i) == name]
        kept = [i.get("id") or i["call_id"] for i in red.messages if program_of(i) == name]
        assert kept in ([], held), f"program {name}: {kept} of {held}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_programs(), st.data())
def test_a_program_grouped_turn_by_turn_is_the_program_grouped_at_once(
    items: list[Message], data: st.DataObject
) -> None:
    """The tail kept from the last turn is extended, not regrouped: a program still running
    then has its next calls, and its output, join the unit it began, turn after turn."""
    from proxy.reduction.tail import grouped_tail

    extended = None
    for split in [*sorted(data.draw(st.lists(st.integers(0, len(items)), max_size=4))), None]:
        extended = grouped_tail(items[:split], count, True, extended, RESPONSES)
    at_once = grouped_tail(items, count, True, None, RESPONSES)
    assert extended is not None and extended.units == at_once.units
    assert extended.forward == at_once.forward and extended.sizes == at_once.sizes


@st.composite
def with_tool_searches(draw: st.DrawFn) -> list[Message]:
    """Turns of a user message, tool searches (run by the client, answered by `call_id`, or
    hosted by OpenAI, the output right after its search, a reasoning item maybe before), calls
    of the tools they loaded, and an answer."""
    items: list[Message] = []
    for n in range(draw(st.integers(1, 8))):
        items.append({"role": "user", "content": f"q{n} " + "x" * draw(st.integers(0, 200))})
        for r in range(draw(st.integers(0, 2))):
            name, hosted = f"s{n}_{r}", draw(st.booleans())
            if draw(st.booleans()):
                items.append({"type": "reasoning", "id": f"rs{name}", "summary": []})
            call_id = None if hosted else name
            execution = "server" if hosted else "client"
            search = {"type": "tool_search_call", "id": f"ts{name}", "call_id": call_id}
            items.append(search | {"execution": execution, "arguments": {"paths": [name]}})
            tools = [{"type": "function", "name": f"t{name}", "defer_loading": True}]
            output = {"type": "tool_search_output", "id": f"tso{name}", "call_id": call_id}
            items.append(
                output | {"execution": execution, "tools": tools * draw(st.integers(1, 9))}
            )
            if draw(st.booleans()):
                use = {"type": "function_call", "call_id": f"c{name}", "name": f"t{name}"}
                items.append(use | {"arguments": "{}"})
                out = "y" * draw(st.integers(0, 300))
                items.append({"type": "function_call_output", "call_id": f"c{name}", "output": out})
        items.append({"role": "assistant", "content": f"a{n} " + "z" * 100})
    return items


def search_of(item: Message) -> str:
    if item.get("type") in ("tool_search_call", "tool_search_output"):
        return str(item["id"]).removeprefix("tso").removeprefix("ts")
    return ""


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_tool_searches(), st.sampled_from(STRATEGIES), st.integers(100, 3000))
def test_no_strategy_separates_a_tool_search_from_its_output(
    items: list[Message], strategy: str, window: int
) -> None:
    """A tool search and its output are kept or dropped together, whoever ran it, and what
    goes upstream is an input OpenAI (the mock) accepts."""
    red = accepted(items, strategy, window)
    if red is None:
        return
    for name in {search_of(i) for i in items} - {""}:
        kept = [i["type"] for i in red.messages if search_of(i) == name]
        assert kept in ([], ["tool_search_call", "tool_search_output"]), name


def test_tool_search_items_are_classified() -> None:
    """A client-executed search is a call its output answers by `call_id`; a hosted one (no
    `call_id`) travels with the output OpenAI put right after it. Both are one unit."""
    ask = {"role": "user", "content": "find the crm tools"}
    client = {"type": "tool_search_call", "call_id": "tsc_1", "execution": "client"}
    client_output = {"type": "tool_search_output", "call_id": "tsc_1", "tools": []}
    hosted = {"type": "tool_search_call", "call_id": None, "execution": "server"}
    hosted_output = {"type": "tool_search_output", "call_id": None, "tools": []}
    assert RESPONSES.call_ids(client) == ["tsc_1"] and RESPONSES.answers(client_output) == (
        "tsc_1",
    )
    assert RESPONSES.call_ids(hosted) == [] and RESPONSES.answers(hosted_output) == ()
    assert RESPONSES.travels_with_next(hosted) and not RESPONSES.travels_with_next(client)
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    items = [ask, reasoning, hosted, hosted_output, client, client_output]
    assert [u.size for u in group(items, dialect=RESPONSES)] == [1, 3, 2]
    loaded = {**client_output, "tools": [{"type": "function", "name": "get_customer"}]}
    assert RESPONSES.text(loaded) == "tool search loaded: get_customer"
    assert RESPONSES.placeholder(client, "tsc_1", "none") == {
        "type": "tool_search_output",
        "call_id": "tsc_1",
        "execution": "client",
        "tools": [],
    }
