"""OpenAI's tool search on `/v1/responses` across reductions: a tool a `tool_search_output`
loaded is callable while that output is in the input, so a reduction that drops the search
carries it (its call and its output, with the tools not carried yet) after the summary.
The route through the real server with the `openai` client is at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.dialects.responses import RESPONSES
from proxy.messages import Message
from proxy.mock import ECHO, MockUpstream
from proxy.mock import responses as mock_responses
from proxy.reduction import STRATEGIES, Budget, Policy, ReductionState, Working, reduce
from proxy.reduction.types import MaskPolicy
from tests.test_responses import LEADING, accepted, count
from tests.test_responses_e2e import MODEL, fake, start_proxy

__all__ = ["fake"]  # the mock upstream's fixture

DEFERRED = ("get_weather", "get_time", "get_news", "get_stock")
SLOW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def function(name: str) -> dict[str, Any]:
    about = f"{name}: looks it up for a city, with the units and the sources it used. " * 2
    return {"type": "function", "name": name, "description": about, "defer_loading": True}


def search(n: int, names: tuple[str, ...], hosted: bool) -> list[Message]:
    """A tool search and its output loading `names` (hosted: run by OpenAI, no `call_id`)."""
    call_id = None if hosted else f"tsc_{n}"
    execution = "server" if hosted else "client"
    call = {"type": "tool_search_call", "id": f"ts_{n}", "call_id": call_id}
    output = {"type": "tool_search_output", "id": f"tso_{n}", "call_id": call_id}
    return [
        call | {"execution": execution, "status": "completed", "arguments": {"paths": list(names)}},
        output
        | {"execution": execution, "status": "completed", "tools": list(map(function, names))},
    ]


def called(n: int, name: str, size: int) -> list[Message]:
    use = {"type": "function_call", "call_id": f"call_{n}", "name": name, "arguments": "{}"}
    return [use, {"type": "function_call_output", "call_id": f"call_{n}", "output": "r" * size}]


def loaded_before(items: list[Message]) -> list[tuple[str, set[str]]]:
    """Each function call of a deferred tool, with the tools loaded by the outputs before it."""
    have: set[str] = set()
    seen: list[tuple[str, set[str]]] = []
    for item in items:
        if item.get("type") == "tool_search_output":
            have |= {t["name"] for t in item["tools"]}
        elif item.get("type") == "function_call" and item["name"] in DEFERRED:
            seen.append((item["name"], set(have)))
    return seen


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Turns that search for deferred tools (the client's search or OpenAI's), call the tools
    loaded so far, or just answer; the last turn may call a tool loaded long before."""
    items: list[Message] = []
    loaded: list[str] = []
    for n in range(draw(st.integers(1, 9))):
        items.append({"role": "user", "content": f"q{n} " + "x" * draw(st.integers(0, 300))})
        kind = draw(st.sampled_from(["search", "call", "plain"]))
        if kind == "search" or (kind == "call" and not loaded):
            names = tuple(draw(st.lists(st.sampled_from(DEFERRED), min_size=1, max_size=3)))
            loaded += names
            items += search(n, names, draw(st.booleans()))
            if draw(st.booleans()):  # called in the same answer
                items += called(n, names[0], draw(st.integers(0, 200)))
        elif kind == "call":
            items += called(n, draw(st.sampled_from(loaded)), draw(st.integers(0, 200)))
        items.append({"role": "assistant", "content": f"a{n} " + "z" * draw(st.integers(0, 200))})
    items.append({"role": "user", "content": "the new question"})
    if loaded and draw(st.booleans()):
        items += called(99, loaded[0], draw(st.integers(0, 300)))
    return items


@SLOW
@given(histories(), st.sampled_from([*STRATEGIES, "mask+tokens"]), st.integers(300, 4000))
def test_no_reduction_leaves_a_kept_call_without_the_search_that_loaded_its_tool(
    items: list[Message], strategy: str, window: int
) -> None:
    red = accepted(items, strategy, window)
    if red is None:
        return
    sent = list(red.messages)
    for name, have in loaded_before(sent):
        assert name in have, (name, strategy)
    client = [m for m in items if m.get("type") in ("tool_search_call", "tool_search_output")]
    for item in sent:
        if item.get("type") == "tool_search_call":  # a carried search is the client's own
            assert item in client


def test_a_dropped_search_is_carried_as_its_call_and_output_with_the_tools_not_carried_yet() -> (
    None
):
    """Client and hosted searches alike: the call and its output alone (the reasoning and
    messages around them stay dropped); an output keeps only the tools no earlier carried
    output loads, and a search loading nothing new is not carried."""
    ask = {"role": "user", "content": "weather and time?"}
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    first = search(1, ("get_weather",), hosted=True)
    second = search(2, ("get_weather", "get_time"), hosted=False)
    third = search(3, ("get_time",), hosted=False)
    span = [ask, reasoning, *first, *called(1, "get_weather", 9), *second, *third]
    carried = RESPONSES.loaders(span, [])
    assert carried == [*first, second[0], {**second[1], "tools": [function("get_time")]}]
    assert RESPONSES.loaders(span, carried) == []
    assert RESPONSES.loaders(search(4, ("get_news", "get_time"), False), carried) == [
        search(4, ("get_news", "get_time"), False)[0],
        {**search(4, ("get_news",), False)[1], "id": "tso_4"},
    ]
    mock_responses.validate({"model": "m", "input": [*carried, ask]}, {}, {})


def test_a_namespace_is_carried_with_the_functions_not_carried_yet() -> None:
    crm = {"type": "namespace", "name": "crm", "description": "CRM"}
    one = {**crm, "tools": [function("get_customer"), function("get_invoice")]}
    two = {**crm, "tools": [function("get_invoice"), function("get_ticket")]}
    first, second = search(1, (), False), search(2, (), False)
    first[1] = {**first[1], "tools": [one]}
    second[1] = {**second[1], "tools": [two]}
    carried = RESPONSES.loaders([*first, *second], [])
    assert carried[:2] == first
    assert carried[3]["tools"] == [{**crm, "tools": [function("get_ticket")]}]
    assert RESPONSES.loaders(second, carried) == []


def test_mask_never_clears_a_search_output() -> None:
    output = search(1, ("get_weather",), False)[1]
    assert RESPONSES.cleared(output, "tsc_1", "[cleared]") == output


def test_the_mock_model_calls_only_a_deferred_tool_the_input_loaded() -> None:
    """OpenAI: "Tools that were not listed as part of this array will not be available to
    the model." The mock's model searches for a deferred tool no output in the input loaded,
    instead of calling it; the input itself is accepted either way (no 400 is documented)."""
    tools = [{"type": "tool_search", "execution": "client"}, function("get_weather")]
    ask = {"role": "user", "content": "call tool get_weather for Paris"}
    body = {"model": "m", "tools": tools, "input": [ask]}
    items, _ = mock_responses.validate(body, {}, {})
    unloaded = mock_responses.output_for(items, "d", ECHO, tools)
    assert [i["type"] for i in unloaded] == ["tool_search_call"]
    loaded = [*search(1, ("get_weather",), False), ask]
    answer = mock_responses.output_for(loaded, "d", ECHO, tools)
    assert [i["type"] for i in answer] == ["reasoning", "function_call"]
    other = mock_responses.output_for([ask], "d", ECHO, [])
    assert [i["type"] for i in other] == ["reasoning", "function_call"]  # not deferred


def test_tiered_carries_the_searches_of_a_middle_it_compresses() -> None:
    """`tiered` compresses the middle of an older topic into a note in its place: a search
    in that middle goes on after the note, so the topic's later calls of its tool, kept
    after it, still find it loaded."""
    items: list[Message] = [{"role": "user", "content": "weather please"}]
    items += search(1, ("get_weather",), False)
    for n in range(3):
        items += called(10 + n, "get_weather", 1600)
    for n in range(2):
        items += called(20 + n, "get_weather", 10)
    items += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "and now?"}]
    red = accepted(items, "tiered", 1000)
    assert red is not None and red.state.extra["spans"], "the middle went compressed"
    sent = list(red.messages)
    assert [name in have for name, have in loaded_before(sent)] == [True, True]
    note = next(i for i in sent if "[summary of" in str(i.get("content")))
    assert sent[sent.index(note) + 1 : sent.index(note) + 3] == search(1, ("get_weather",), False)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_what_a_cut_carries_stays_carried_on_the_turns_after_it(strategy: str) -> None:
    """Turn after turn, each reduced on the state the one before left (its summaries
    written): once a cut carries the search, every later turn still does."""
    policy = Policy(strategy=strategy, dialect=RESPONSES, mask=MaskPolicy(clear_at_least=1))
    body: list[Message] = [{"role": "user", "content": "weather?"}]
    body += search(0, ("get_weather",), False)
    state, cuts = ReductionState(), 0
    for n in range(30):
        body += [{"role": "user", "content": f"turn {n} " * 20}, *called(n, "get_weather", 300)]
        body.append({"role": "assistant", "content": f"answer {n} " * 20})
        working = Working(LEADING, tuple(body[state.tail_start :]), state)
        red = reduce(working, policy, Budget(1500), count)
        texts = {r.key: "earlier talk" for r in red.summary_requests}
        if texts:
            red = reduce(working, policy, Budget(1500), count, texts)
        sent = list(red.messages)
        mock_responses.validate({"model": "m", "input": sent}, {}, {})
        assert all(name in have for name, have in loaded_before(sent)), (n, red.kinds)
        state, cuts = red.state, cuts + (red.dropped > 0)
    assert cuts or strategy == "none", "no turn was cut"


@pytest.mark.parametrize("strategy", ["summarize", "tokens", "tiered"])
def test_what_is_carried_gives_way_to_the_window_but_not_for_a_kept_call(strategy: str) -> None:
    """An agent loading a new tool every turn, calling the first every turn: on a turn that
    changes what is carried (one that would not fit as it is), what stays of it is within a
    quarter of the limit, the oldest loaders going first, but never the one whose tool the
    kept turns call."""
    policy = Policy(strategy=strategy, dialect=RESPONSES)
    budget = Budget(3000)
    body: list[Message] = []
    state, most = ReductionState(), 0
    for n in range(40):
        body.append({"role": "user", "content": f"turn {n} " * 10})
        body += search(n, (f"get_{n}",), n % 2 == 0)
        body += called(n, "get_0", 100)
        body.append({"role": "assistant", "content": f"answer {n} " * 10})
        working = Working(LEADING, tuple(body[state.tail_start :]), state)
        red = reduce(working, policy, budget, count)
        texts = {r.key: "earlier talk" for r in red.summary_requests}
        if texts:
            red = reduce(working, policy, budget, count, texts)
        sent = list(red.messages)
        mock_responses.validate({"model": "m", "input": sent}, {}, {})
        assert all(name in have for name, have in loaded_before(sent)), n
        carried = red.state.extra.get("loaded", [])
        before = state.extra.get("loaded", [])
        added = [m for m in carried if m not in before]
        if carried != before:  # a cut, or the request with `before` is over the limit
            as_it_was = sum(map(count, sent)) - sum(map(count, carried)) + sum(map(count, before))
            assert red.dropped or as_it_was > budget.limit, n
            assert sum(map(count, carried)) - sum(map(count, added)) <= budget.limit // 4, n
        most = max(most, len(carried))
        state = red.state
    assert 4 <= most < 40 * 2, most


@pytest.mark.integration
@pytest.mark.parametrize("strategy", ["summarize", "tiered", "tokens"])
def test_an_agent_calling_a_tool_it_searched_for_long_ago_is_reduced_and_still_calls_it(
    fake: tuple[MockUpstream, str], tmp_path: Path, strategy: str
) -> None:
    """Through the real server with the `openai` client, streamed and not: the app's own
    search loads get_weather once, then the model calls it every turn. Reduced, the search
    goes on after the summary, so the model still has the tool (the mock's model searches
    for a deferred tool the input does not load, as OpenAI's cannot call it)."""
    upstream, upstream_url = fake
    tools: Any = [{"type": "tool_search", "execution": "client"}, function("get_weather")]
    history: list[Any] = []
    kinds: list[str] = []

    def ask(api: openai.OpenAI, item: Any, stream: bool) -> Any:
        history.append(item)
        kwargs: Any = {"model": MODEL, "input": history, "tools": tools, "store": False}
        if stream:
            with api.responses.with_streaming_response.create(**kwargs, stream=True) as raw:
                kinds.append(raw.headers["x-context-reduction"])
                answer = next(e for e in raw.parse() if e.type == "response.completed").response
        else:
            raw = api.responses.with_raw_response.create(**kwargs)
            kinds.append(raw.headers["x-context-reduction"])
            answer = raw.parse()
        history.extend(o.model_dump(exclude_none=True) for o in answer.output)
        return answer

    with (
        start_proxy(upstream_url, tmp_path / "p.db", reduction_strategy=strategy) as url,
        openai.OpenAI(base_url=url + "/v1", api_key="sk-search", max_retries=0) as api,
    ):
        first = ask(api, {"role": "user", "content": "Please search tools weather."}, False)
        searched = first.output[-1]
        assert searched.type == "tool_search_call"
        loaded = search(0, ("get_weather",), False)[1] | {"call_id": searched.call_id}
        ask(api, loaded, False)
        for n in range(24):
            asked = {"role": "user", "content": f"Turn {n}: call tool get_weather for {n}. " * 3}
            call = ask(api, asked, n % 2 == 0).output[-1]
            assert (call.type, getattr(call, "name", None)) == ("function_call", "get_weather"), (
                n,
                kinds,
                [
                    (i.get("type"), str(i.get("content"))[:40])
                    for i in upstream.responses_requests()[-1]["input"]
                ],
            )
            report = f"City {n}: sunny, {n % 9 + 12} degrees, light wind from the west. " * 4
            output = {"type": "function_call_output", "call_id": call.call_id, "output": report}
            ask(api, output, n % 3 == 0)
    assert set(kinds) - {"none", "reused"}, kinds
    assert not [c.error for c in upstream.calls if c.error]
    last = upstream.responses_requests()[-1]["input"]
    assert history[0] not in last, "the search's turn went reduced"
    assert loaded in last
