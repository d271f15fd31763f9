"""What a reduction carries of Responses tool searches, turn after turn: it gives way to
the window only when the request would not fit otherwise, never for a kept call of a tool
it loaded (a function, a namespace's function, an MCP server's tool). The route through
the real server with the `openai` client is at the end."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from proxy.dialects.responses import RESPONSES
from proxy.messages import Message
from proxy.mock import ECHO, MockUpstream
from proxy.mock import responses as mock_responses
from proxy.reduction import Budget, Policy, Reduction, ReductionState, Working, reduce
from proxy.reduction.types import SummaryBlock
from tests.servers import run_server, serve_proxy
from tests.test_responses import LEADING, count
from tests.test_responses_tool_search import called, function, search

# Not shrunk: shrinking an agent of thirty turns, each reduced, outlasts the test's timeout;
# a failure still names its turn and what the reduction did.
AGENTS = settings(
    max_examples=100,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
CUTTING = ("tokens", "summarize", "tiered")
MODEL, WINDOW = "search-agent", 6000


def turn(body: list[Message], state: ReductionState, strategy: str, budget: Budget) -> Reduction:
    """One turn reduced on the state the turn before left, its summaries written."""
    policy = Policy(strategy=strategy, dialect=RESPONSES)
    working = Working(LEADING, tuple(body[state.tail_start :]), state)
    red = reduce(working, policy, budget, count)
    texts = {r.key: "earlier talk" for r in red.summary_requests}
    if texts:
        red = reduce(working, policy, budget, count, texts)
    mock_responses.validate({"model": "m", "input": list(red.messages)}, {}, {})
    return red


def grew_at_its_end(before: Reduction, after: Reduction) -> bool:
    """Whether `after` forwards `before`'s input as its prefix (a prompt cache hit)."""
    return list(after.messages[: len(before.messages)]) == list(before.messages)


def fit_as_it_was(before: Reduction, after: Reduction, budget: Budget) -> bool:
    """Whether `after` cut nothing and its request, with what `before` carried in place of
    what it carries, fits the limit: a turn that must then forward what `before` did."""
    if after.dropped or "truncated" in after.kinds:
        return False
    carried = [sum(map(count, r.state.extra.get("loaded", []))) for r in (before, after)]
    return sum(map(count, after.messages)) - carried[1] + carried[0] <= budget.limit


def unloaded_calls(items: Sequence[Message]) -> list[str]:
    """The calls of `items` whose tool no tool search output before them loaded (every tool
    these agents call is deferred)."""
    have: set[str] = set()
    missing: list[str] = []
    for item in items:
        if item.get("type") == "tool_search_output":
            have |= {t.get("name") for t in item["tools"]}
        elif item.get("type") == "function_call" and item["name"] not in have:
            missing.append(item["name"])
    return missing


def mcp_server(n: int, label: str) -> list[Message]:
    """A client's tool search loading the MCP server `label` (OpenAI lists it as an `mcp`
    tool by its `server_label`, `ResponseToolSearchOutputItemParam`)."""
    call, output = search(n, (), False)
    server = {"type": "mcp", "server_label": label, "server_url": f"https://{label}.example/mcp"}
    return [call, output | {"tools": [server | {"defer_loading": True}]}]


def mcp_called(n: int, label: str, name: str, size: int) -> Message:
    """A call of tool `name` on the MCP server `label`, run by OpenAI (its output in it)."""
    return {
        "type": "mcp_call",
        "id": f"mcp_{n}",
        "server_label": label,
        "name": name,
        "arguments": "{}",
        "output": "m" * size,
        "status": "completed",
    }


def servers_unloaded(items: Sequence[Message]) -> list[str]:
    """The MCP calls of `items` whose server no tool search output before them loaded."""
    have: set[str] = set()
    missing: list[str] = []
    for item in items:
        if item.get("type") == "tool_search_output":
            have |= {t["server_label"] for t in item["tools"] if t.get("type") == "mcp"}
        elif item.get("type") == "mcp_call" and item["server_label"] not in have:
            missing.append(item["server_label"])
    return missing


def agent(n: int) -> list[Message]:
    """Turn `n` of an agent that loads a new tool each turn and calls the first every turn."""
    return [
        {"role": "user", "content": f"turn {n} " * 10},
        *search(n, (f"get_{n}",), n % 2 == 0),
        *called(n, "get_0", 100),
        {"role": "assistant", "content": f"answer {n} " * 10},
    ]


def test_a_turn_that_fits_lets_no_carried_search_go() -> None:
    """A turn that cuts carries the searches it drops, past a quarter of the limit; the next
    turn fits under the limit as it is, so it forwards the same prefix and only grows at its
    end: letting a search go there would break the prompt cache for nothing and make the
    model search again for a tool it had."""
    budget, body, state = Budget(3000), [], ReductionState()
    previous: Reduction | None = None
    fitting_after_cut = 0
    for n in range(40):
        body += agent(n)
        red = turn(body, state, "summarize", budget)
        assert not unloaded_calls(red.messages), n
        if previous is not None and fit_as_it_was(previous, red, budget):
            fitting_after_cut += previous.dropped > 0
            assert grew_at_its_end(previous, red), n
        previous, state = red, red.state
    assert fitting_after_cut, "no turn fitting after a cut"


def loaded_by(items: Sequence[Message]) -> list[str]:
    """The tools (an MCP server by its label) the tool search outputs of `items` load: those
    the model can call."""
    outputs = [m for m in items if m.get("type") == "tool_search_output"]
    return [t.get("name") or t["server_label"] for m in outputs for t in m["tools"]]


@AGENTS
@given(st.data(), st.sampled_from((*CUTTING, "filter")), st.integers(800, 4000))
def test_what_is_carried_changes_only_on_a_turn_that_would_not_fit(
    data: st.DataObject, strategy: str, window: int
) -> None:
    """An agent that searches for new tools (a function, by the client's search or OpenAI's,
    or an MCP server), calls a tool the last forwarded input loaded (as the model can), or
    only talks, turn after turn: a kept call never loses the search that loaded its tool,
    and a turn that fits as it is (nothing cut, under the limit with what the turn before
    carried) forwards the turn before's input as its prefix, carried searches included."""
    budget, body, state = Budget(window), [], ReductionState()
    previous: Reduction | None = None
    callable_: list[str] = []
    for n in range(data.draw(st.integers(8, 30))):
        body.append({"role": "user", "content": f"q{n} " * data.draw(st.integers(1, 60))})
        kind = data.draw(st.sampled_from(["search", "search", "call", "talk"]))
        if kind == "search" or not callable_:
            server = data.draw(st.booleans())  # an MCP server, or a function
            callable_.append(f"srv_{n}" if server else f"tool_{n}")
            body += mcp_server(n, callable_[-1]) if server else search(n, (callable_[-1],), n % 2)
        if kind == "call" or data.draw(st.booleans()):
            tool, size = data.draw(st.sampled_from(callable_)), data.draw(st.integers(0, 400))
            server_call = mcp_called(n, tool, "query", size)
            body += [server_call] if tool.startswith("srv_") else called(n, tool, size)
        body.append({"role": "assistant", "content": f"a{n} " * data.draw(st.integers(1, 60))})
        red = turn(body, state, strategy, budget)
        assert not unloaded_calls(red.messages) and not servers_unloaded(red.messages), n
        # `filter` is held to its loaders only: it also reduces by message count (past
        # target_messages + threshold_messages), so a turn under the token limit may still
        # not fit as it is by its rule, and let a carried search go.
        fits = previous is not None and fit_as_it_was(previous, red, budget)
        if fits and previous is not None and strategy in CUTTING:
            assert grew_at_its_end(previous, red), (n, red.kinds)
        previous, state, callable_ = red, red.state, loaded_by(red.messages)


def test_a_call_needs_the_search_that_lists_its_tool() -> None:
    """What a call needs loaded, as a tool search output lists it: a function by its name, a
    namespace's function by its own name (the call gives the namespace apart), an MCP
    server by its `server_label`, for its tools' calls and approval requests alike."""
    crm = {"type": "namespace", "name": "crm", "tools": [function("get_invoice")]}
    outputs = {
        "function": search(1, ("get_weather",), False),
        "namespace": [search(2, (), False)[0], search(2, (), False)[1] | {"tools": [crm]}],
        "server": mcp_server(3, "github"),
    }
    call = called(4, "get_weather", 1)[0]
    in_crm = called(5, "get_invoice", 1)[0] | {"namespace": "crm"}
    run = mcp_called(6, "github", "search_issues", 1)
    approval = {**run, "type": "mcp_approval_request", "id": "mcpr_7"}
    other = mcp_called(8, "jira", "search_issues", 1)
    needs = {
        name: [RESPONSES.uses(c) <= RESPONSES.loads(loader) for c in (call, in_crm, run, approval)]
        for name, loader in outputs.items()
    }
    assert needs == {
        "function": [True, False, False, False],
        "namespace": [False, True, False, False],
        "server": [False, False, True, True],
    }
    assert not RESPONSES.uses(other) & RESPONSES.loads(outputs["server"])


@pytest.mark.parametrize("strategy", CUTTING)
def test_a_kept_call_of_an_mcp_server_keeps_the_search_that_loaded_the_server(
    strategy: str,
) -> None:
    """An agent that loads an MCP server once, calls its tools every turn (`mcp_call`, by
    `server_label` and `name`) and loads a new function every turn: what is carried passes
    a quarter of the limit, and the searches no kept call needs are let go, but never the
    server's while a kept `mcp_call` calls it."""
    budget, state = Budget(3000), ReductionState()
    body: list[Message] = [
        {"role": "user", "content": "open the tracker"},
        *mcp_server(0, "github"),
    ]
    shed = 0
    for n in range(1, 70):
        body += [{"role": "user", "content": f"turn {n} " * 10}, *search(n, (f"get_{n}",), False)]
        body.append(mcp_called(n, "github", "search_issues", 100))
        body.append({"role": "assistant", "content": f"answer {n} " * 10})
        red = turn(body, state, strategy, budget)
        assert not servers_unloaded(red.messages), (n, red.kinds)
        shed += len(red.state.extra.get("loaded", [])) < len(state.extra.get("loaded", []))
        state = red.state
    assert shed, "nothing carried was let go"


class SearchingApp:
    """An app on the Responses API with deferred tools, running the model's tool searches
    itself, sending its whole input every turn (store=False) and noting each reduction."""

    def __init__(self, api: openai.OpenAI, tools: list[Any]) -> None:
        self.api, self.tools = api, tools
        self.input: list[Any] = []
        self.kinds: list[str] = []

    def send(self, item: Any, stream: bool = False) -> Any:
        """Send `item` after the input so far; the last output item."""
        self.input.append(item)
        kwargs: Any = {"model": MODEL, "input": self.input, "tools": self.tools, "store": False}
        if stream:
            with self.api.responses.with_streaming_response.create(**kwargs, stream=True) as raw:
                self.kinds.append(raw.headers["x-context-reduction"])
                events = raw.parse()
                answer = next(e for e in events if e.type == "response.completed").response
        else:
            raw = self.api.responses.with_raw_response.create(**kwargs)
            self.kinds.append(raw.headers["x-context-reduction"])
            answer = raw.parse()
        self.input += [o.model_dump(exclude_none=True) for o in answer.output]
        return answer.output[-1]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[MockUpstream, openai.OpenAI]]:
    """The real server reducing with `summarize` in front of the mock upstream."""
    upstream = MockUpstream(context_limits={MODEL: WINDOW})
    with (
        run_server(upstream.app) as upstream_url,
        serve_proxy(
            upstream_url + "/v1",
            tmp_path / "p.db",
            windows={MODEL: WINDOW},
            reduction_strategy="summarize",
        ) as url,
        openai.OpenAI(base_url=url + "/v1", api_key="sk-search", max_retries=0) as api,
    ):
        yield upstream, api


@pytest.mark.integration
def test_through_the_server_a_turn_that_fits_forwards_the_turn_before_grown(
    served: tuple[MockUpstream, openai.OpenAI],
) -> None:
    """With the `openai` client, streamed and not: an agent searching for a new tool every
    turn and calling the first each turn. Once what is carried passes a quarter of the
    limit, every turn the proxy forwards without cutting anything still sends the input it
    sent the turn before, grown at its end (the prompt cache holds), and get_0 stays loaded."""
    upstream, api = served
    names = [f"get_{n}" for n in range(14)]
    app = SearchingApp(api, [{"type": "tool_search", "execution": "client"}, *map(function, names)])
    for n, name in enumerate(names):
        searched = app.send({"role": "user", "content": f"Please search tools {name}."}, n % 2 == 0)
        assert searched.type == "tool_search_call", n
        loaded = search(n, (name,), False)[1] | {"call_id": searched.call_id}
        app.send(loaded)
        call = app.send({"role": "user", "content": f"Turn {n}: call tool get_0 for {n}. " * 3})
        assert (call.type, call.name) == ("function_call", "get_0"), (n, app.kinds)
        report = f"City {n}: sunny, {n % 9 + 12} degrees, light wind from the west. " * 5
        app.send({"type": "function_call_output", "call_id": call.call_id, "output": report}, True)
    assert not [c.error for c in upstream.calls if c.error]
    sent = [r["input"] for r in upstream.responses_requests()]
    assert len(sent) == len(app.kinds)
    cuts = [n for n, kind in enumerate(app.kinds) if kind not in ("none", "reused")]
    assert cuts, app.kinds
    after_cut = [n for n in range(cuts[0] + 1, len(sent)) if n not in cuts]
    assert after_cut, app.kinds
    for n in after_cut:
        assert sent[n][: len(sent[n - 1])] == sent[n - 1], (n, app.kinds[n - 1 : n + 1])


def test_the_mock_takes_mcp_calls_as_openai_documents_them() -> None:
    """An `mcp_call` input item needs its `id`, `server_label`, `name` and `arguments`
    (`openai` 3.57, `ResponseInputItemParam.McpCall`); nothing says its server must still be
    loaded, so one whose search is gone is accepted. The mock's model searches for a
    deferred MCP server no output in the input loads, and calls the tool of one loaded."""
    call = mcp_called(1, "github", "search_issues", 10)
    mock_responses.validate({"model": "m", "input": [call]}, {}, {})
    for field in ("id", "server_label", "name", "arguments"):
        lacking = {k: v for k, v in call.items() if k != field}
        with pytest.raises(mock_responses.Invalid, match=field):
            mock_responses.validate({"model": "m", "input": [lacking]}, {}, {})
    server = mcp_server(0, "github")[1]["tools"][0]
    tools = [{"type": "tool_search", "execution": "client"}, server]
    ask = {"role": "user", "content": "call mcp tool search_issues on github"}
    searched = mock_responses.output_for([ask], "d", ECHO, tools)
    assert [i["type"] for i in searched] == ["tool_search_call"]
    answer = mock_responses.output_for([*mcp_server(0, "github"), ask], "d", ECHO, tools)
    assert [(i["type"], i.get("server_label")) for i in answer] == [
        ("mcp_call", "github"),
        ("message", None),
    ]


@pytest.mark.integration
def test_through_the_server_an_agent_keeps_calling_the_mcp_server_it_loaded_once(
    served: tuple[MockUpstream, openai.OpenAI],
) -> None:
    """With the `openai` client, streamed and not: the app's search loads a deferred MCP
    server once, then every turn the model calls one of its tools (OpenAI runs it: an
    `mcp_call`) and the app loads a new function. Reductions let go of the searches no kept
    call needs, never the server's: the model keeps calling it instead of searching again."""
    upstream, api = served
    names = [f"get_{n}" for n in range(28)]
    server = mcp_server(0, "github")[1]["tools"][0]
    tools = [{"type": "tool_search", "execution": "client"}, server, *map(function, names)]
    app = SearchingApp(api, tools)
    searched = app.send({"role": "user", "content": "Please search tools for the tracker."})
    app.send(mcp_server(0, "github")[1] | {"call_id": searched.call_id})
    for n, name in enumerate(names):
        ask = f"Turn {n}: call mcp tool search_issues on github, then more. " * 8
        answer = app.send({"role": "user", "content": ask}, n % 2 == 0)
        made = [i for i in app.input[-2:] if i.get("type") == "mcp_call"]
        assert answer.type == "message" and made, (n, app.kinds)
        searched = app.send({"role": "user", "content": f"Please search tools {name}."}, True)
        app.send(search(n + 1, (name,), False)[1] | {"call_id": searched.call_id})
    assert not [c.error for c in upstream.calls if c.error]
    assert set(app.kinds) - {"none", "reused"}, app.kinds
    last = upstream.responses_requests()[-1]["input"]
    assert app.input[0] not in last, "the server's search went reduced"
    assert not servers_unloaded(last)
    assert len(loaded_by(last)) < len(names), ("nothing carried was let go", " ".join(app.kinds))


@pytest.mark.parametrize("strategy", CUTTING)
def test_a_turn_that_fits_only_without_the_searches_no_call_needs_lets_them_go(
    strategy: str,
) -> None:
    """A last call too big to truncate (its arguments), after forty carried searches of
    which the kept part calls one tool: with all of them the request exceeds the window
    even truncated, without those no call needs it fits. The turn lets them go rather than
    refuse the request (`ContextTooLarge`), keeping the one the call needs."""
    carried = [m for i in range(40) for m in search(i, (f"tool_{i}",), False)]
    state = ReductionState(tail_start=10, extra={"loaded": carried})
    call, output = called(99, "tool_0", 10)
    tail = (
        {"role": "user", "content": "go on"},
        call | {"arguments": "{" + "x" * 9200 + "}"},
        output,
    )
    budget = Budget(3000)
    assert sum(map(count, [*LEADING, *carried, *tail])) > budget.hard_limit
    red = reduce(
        Working(LEADING, tail, state), Policy(strategy=strategy, dialect=RESPONSES), budget, count
    )
    assert red.tokens_out <= budget.hard_limit
    assert len(red.state.extra["loaded"]) < len(carried)
    assert not unloaded_calls(red.messages)


def test_a_last_resort_shortens_the_summary_not_a_carried_search() -> None:
    """Past the window with a long summary and a carried search, after the tail's older
    messages are shortened: the summary is shortened next (the search is carried whole)."""
    carried = search(0, ("tool_0",), False)
    summary = SummaryBlock("The talk so far. " * 600, 1)
    state = ReductionState(tail_start=1, summaries=(summary,), extra={"loaded": carried})
    call, output = called(99, "tool_0", 1)
    tail = (
        {"role": "user", "content": "old"},
        {"role": "user", "content": "go on"},
        call | {"arguments": "{" + "x" * 4000 + "}"},
        output,
    )
    budget = Budget(3000)
    red = reduce(
        Working(LEADING, tail, state), Policy(strategy="tokens", dialect=RESPONSES), budget, count
    )
    assert red.tokens_out <= budget.hard_limit
    assert all(m in red.messages for m in carried)
    assert not unloaded_calls(red.messages)
