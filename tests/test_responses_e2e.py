"""`/v1/responses` through the real server, driven by the official `openai` client.

The fake upstream validates input the way OpenAI does (calls paired with
their outputs, reasoning with its call, the context window enforced) and
records what it was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.conversation import tenant_of
from proxy.mock import MockUpstream
from proxy.reduction.types import Budget
from proxy.store import ConvKey, open_store
from proxy.tokens import REPLY_PRIMING, TokenCounter

from .factories import local_shell_call
from .servers import run_server, serve_proxy

pytestmark = pytest.mark.integration

MODEL = "tiny-window"
WINDOW = 4000
TOOLS: Any = [
    {
        "type": "function",
        "name": "lookup",
        "description": "Look up facts about a city.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
]


@pytest.fixture
def fake() -> Iterator[tuple[MockUpstream, str]]:
    upstream = MockUpstream(context_limits={MODEL: WINDOW})
    with run_server(upstream.app) as url:
        yield upstream, url + "/v1"


@contextlib.contextmanager
def managed(upstream_url: str, db: Path, key: str) -> Iterator[openai.OpenAI]:
    """The openai client of a proxy answering `previous_response_id` chains from its store."""
    with (
        start_proxy(upstream_url, db, responses_manage_server_state="true") as url,
        openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0) as api,
    ):
        yield api


def start_proxy(upstream_url: str, db: Path, **env: str) -> Any:
    return serve_proxy(upstream_url, db, windows={MODEL: WINDOW}, **env)


class Agent:
    """An app on the Responses API that keeps its input list and sends it whole (store=False)."""

    def __init__(self, url: str, **headers: str) -> None:
        self.api = openai.OpenAI(
            base_url=url, api_key="sk-responses", max_retries=0, default_headers=headers
        )
        self.input: list[Any] = []
        self.headers: list[dict[str, str]] = []

    def send(self, *new: Any, stream: bool = False) -> Any:
        self.input.extend(new)
        kwargs: Any = {"model": MODEL, "input": self.input, "tools": TOOLS, "store": False}
        if stream:
            with self.api.responses.with_streaming_response.create(**kwargs, stream=True) as raw:
                headers = dict(raw.headers)
                done = [e for e in raw.parse() if e.type == "response.completed"]
            response = done[0].response
        else:
            raw = self.api.responses.with_raw_response.create(**kwargs)
            headers, response = dict(raw.headers), raw.parse()
        self.headers.append(headers)
        assert response.status == "completed" and response.output
        self.input += [item.model_dump(exclude_none=True) for item in response.output]
        return response

    def turn(self, i: int) -> None:
        stream = i % 4 == 1
        if i % 5 == 3:
            response = self.send(
                {"role": "user", "content": f"Turn {i}: please call tool lookup for city {i}."},
                stream=stream,
            )
            call = next(o for o in response.output if o.type == "function_call")
            output = f"City {i} has {i % 7 + 2} museums, a river walk and an old town."
            self.send({"type": "function_call_output", "call_id": call.call_id, "output": output})
        else:
            text = f"Turn {i}: tell me about day {i} of the trip, budget {i * 10} euros."
            self.send({"role": "user", "content": text}, stream=stream)


def prefix_share(requests: list[list[Any]]) -> float:
    pairs = list(itertools.pairwise(requests))
    return sum(1 for a, b in pairs if b[: len(a)] == a) / len(pairs)


def test_150_stateless_turns_are_reduced_stored_and_stay_valid(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        agent = Agent(url + "/v1")
        with agent.api:
            for i in range(150):
                agent.turn(i)
    counter = TokenCounter()
    sent = counter.count_messages(MODEL, agent.input)
    assert sent > 3 * WINDOW, sent
    forwarded = [r["input"] for r in upstream.responses_requests()]
    assert len(forwarded) == len(agent.headers)  # every request answered, none rejected
    # The history gets the trigger's share of what the tools leave.
    defined = counter.count_definitions(MODEL, [TOOLS])
    most = Budget(WINDOW, defined).limit + defined + REPLY_PRIMING
    for headers in agent.headers:
        assert int(headers["x-context-tokens-out"]) <= most
    kinds = [h["x-context-reduction"] for h in agent.headers]
    assert any("summarized" in k for k in kinds) and kinds[0] == "none"
    assert prefix_share(forwarded) >= 0.85, prefix_share(forwarded)
    assert len(upstream.summary_requests()) <= 0.15 * 150
    summaries = [
        r["input"][0] for r in upstream.responses_requests() if r["input"][0]["role"] == "developer"
    ]
    assert summaries and summaries[-1]["content"].startswith("Summary of the earlier conversation:")


def test_a_conversation_the_provider_holds_goes_through_as_sent(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        api = openai.OpenAI(base_url=url + "/v1", api_key="sk-responses", max_retries=0)
        with api:
            first = api.responses.create(model=MODEL, input="Hello, remember the number 7.")
            raw = api.responses.with_raw_response.create(
                model=MODEL, input="What number?", previous_response_id=first.id
            )
            with pytest.raises(openai.BadRequestError) as unknown:
                api.responses.create(model=MODEL, input="x", previous_response_id="resp_nope")
    assert raw.headers["x-context-reduction"] == "passthrough"
    assert "x-context-tokens-in" not in raw.headers
    chained = upstream.records("/v1/responses")[1]
    assert chained.body["previous_response_id"] == first.id
    assert chained.body["input"] == "What number?"  # forwarded as the app sent it
    assert unknown.value.status_code == 400  # the upstream's own answer, relayed


def test_a_request_without_input_goes_through_as_sent(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """OpenAI's reusable prompts: the stored prompt is the input, so the request has none."""
    upstream, upstream_url = fake
    prompt: Any = {"id": "pmpt_1", "variables": {"city": "Oslo"}}
    db = tmp_path / "p.db"
    with managed(upstream_url, db, "sk-responses") as api:
        raw = api.responses.with_raw_response.create(model=MODEL, prompt=prompt)
        stored = api.responses.create(model=MODEL, input="Hello.")  # a turn it continues
        chained = api.responses.with_raw_response.create(
            model=MODEL, previous_response_id=stored.id, input=[]
        )
    assert raw.status_code == chained.status_code == 200
    assert raw.headers["x-context-reduction"] == "passthrough"
    assert chained.headers["x-context-reduction"] == "passthrough"
    sent = upstream.responses_requests()
    assert sent[0] == {"model": MODEL, "prompt": prompt}
    assert sent[2] == {"model": MODEL, "previous_response_id": stored.id, "input": []}


@pytest.mark.parametrize("answer", ["local_shell_call_output", "function_call_output"])
def test_a_local_shell_call_keeps_its_output(
    fake: tuple[MockUpstream, str], tmp_path: Path, answer: str
) -> None:
    """A local shell call answered by `call_id`, as the Agents SDK (its own output type) and
    Codex (a function call's output) answer it: the output reaches the upstream."""
    upstream, upstream_url = fake
    shell = local_shell_call("call_sh")
    output = {"type": answer, "call_id": "call_sh", "output": "notes.txt"}
    with start_proxy(upstream_url, tmp_path / "p.db", reduction_strategy="mask+tokens") as url:
        agent = Agent(url + "/v1")
        with agent.api:
            agent.send({"role": "user", "content": "What files are here?"}, shell, output)
            agent.send({"role": "user", "content": "And which is newest?"})
    first, second = upstream.responses_requests()
    assert first["input"][1:] == [shell, output]
    assert second["input"][1:3] == [shell, output]


@pytest.mark.parametrize("strategy", ["messages", "tokens", "mask+tiered"])
def test_a_program_and_what_it_holds_are_reduced_together(
    fake: tuple[MockUpstream, str], tmp_path: Path, strategy: str
) -> None:
    """Programmatic tool calling: each turn the model ran a program that called a tool of
    the app's; reduced, a program goes whole or not at all, as OpenAI requires."""
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db", reduction_strategy=strategy) as url:
        agent = Agent(url + "/v1")
        with agent.api:
            for i in range(25):
                owner = {"type": "program", "caller_id": f"prog_{i}"}
                agent.send(
                    {"role": "user", "content": f"Turn {i}: add up the museums of city {i}."},
                    {"type": "program", "id": f"pg_{i}", "call_id": f"prog_{i}"}
                    | {"code": "const r = await tools.lookup({q: 'museums'}); text(r)"}
                    | {"fingerprint": f"fp{i}"},
                    {"type": "function_call", "call_id": f"call_{i}", "name": "lookup"}
                    | {"arguments": '{"q": "museums"}', "caller": owner},
                    {"type": "function_call_output", "call_id": f"call_{i}", "caller": owner}
                    | {"output": f"City {i} has {i % 7 + 2} museums. " * 8},
                    {"type": "program_output", "id": f"po_{i}", "call_id": f"prog_{i}"}
                    | {"result": f"{i % 7 + 2}", "status": "completed"},
                )
    kinds = [h["x-context-reduction"] for h in agent.headers]
    assert sum(k != "none" for k in kinds) >= 5, kinds
    assert not [c.error for c in upstream.calls if c.error]


def test_a_chain_that_asks_openai_to_compact_is_not_continued_by_the_proxy(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """With manage_server_state, a chained request ending with a compaction_trigger goes to
    OpenAI as sent: the app chose OpenAI's compaction of the chain it stored."""
    upstream, upstream_url = fake
    with managed(upstream_url, tmp_path / "p.db", "sk-responses") as api:
        first = api.responses.create(model=MODEL, input="Hello.")
        items: Any = [{"role": "user", "content": "Go on."}, {"type": "compaction_trigger"}]
        raw = api.responses.with_raw_response.create(
            model=MODEL, previous_response_id=first.id, input=items
        )
    assert raw.headers["x-context-reduction"] == "passthrough"
    sent = upstream.responses_requests()[-1]
    assert sent["previous_response_id"] == first.id and sent["input"] == items


def test_a_tool_output_larger_than_the_window_is_truncated_not_refused(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """An agent that read a big file: the output of the round under way cannot be dropped,
    so it is cut around the marker (as a chat tool message is), not answered with a 400."""
    upstream, upstream_url = fake
    big = "line of a very large file with many words in it; " * 2000  # ~24000 tokens
    db = tmp_path / "p.db"
    with start_proxy(upstream_url, db) as url:
        agent = Agent(url + "/v1", **{"X-Conversation-Id": "reader"})
        with agent.api:
            agent.send({"role": "user", "content": "Please call tool lookup to read the file."})
            call = agent.input[-1]
            agent.send({"type": "function_call_output", "call_id": call["call_id"], "output": big})
    assert agent.headers[-1]["x-context-reduction"] == "truncated"
    sent = upstream.responses_requests()[-1]["input"]
    output = next(i for i in sent if i.get("type") == "function_call_output")["output"]
    assert "[..." in output and len(output) < len(big) // 4
    assert output.startswith(big[:40]) and output.endswith(big[-40:])
    store = open_store("sqlite", path=str(db))
    archived = asyncio.run(store.archive(ConvKey(tenant_of("sk-responses"), "reader")))
    assert any(a.message.get("output") == big for a in archived)  # the archive keeps it whole


def test_a_long_history_is_summarised_within_the_small_window_of_its_own_model(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """A conversation first seen past its model's window (moved from a larger model): the
    summariser, the same model, gets calls that fit that window, and no fallback is needed."""
    upstream, upstream_url = fake
    history: list[Any] = []
    for i in range(90):
        history.append({"role": "user", "content": f"Day {i}: " + "what to see and eat " * 12})
        history.append({"role": "assistant", "content": f"On day {i} " + "walk the old town " * 12})
    history.append({"role": "user", "content": "And the last day?"})
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        api = openai.OpenAI(base_url=url + "/v1", api_key="sk-responses", max_retries=0)
        with api:
            raw = api.responses.with_raw_response.create(model=MODEL, input=history, store=False)
    assert TokenCounter().count_messages(MODEL, history) > 2 * WINDOW
    assert raw.headers["x-context-reduction"] == "summarized"
    assert not [c.error for c in upstream.calls if c.error]  # no call past the window
    assert upstream.summary_requests()


def test_append_mode_supplies_the_stored_items_the_answer_included(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        full = Agent(url + "/v1", **{"X-Conversation-Id": "trip"})
        with full.api:
            full.send({"role": "user", "content": "Plan a trip. Please call tool lookup first."})
            appended = Agent(
                url + "/v1", **{"X-Conversation-Id": "trip", "X-Context-Mode": "append"}
            )
            with appended.api:
                call = full.input[-1]
                output = {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": "Sunny.",
                }
                appended.send(output, stream=True)
                appended.input = []
                appended.send({"role": "user", "content": "Thanks. And the day after?"})
    requests = [r["input"] for r in upstream.responses_requests()]
    # The stored answer (a reasoning item and the call) came before the output the app sent.
    assert [i.get("type") for i in requests[1]] == [
        None,
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert requests[2][: len(requests[1])] == requests[1]
    assert requests[2][-1] == {"role": "user", "content": "Thanks. And the day after?"}


def test_an_agents_sdk_run_of_60_turns_completes_on_a_small_window(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """The OpenAI Agents SDK with its default (Responses) model and a function tool."""
    agents = pytest.importorskip("agents", reason="openai-agents does not install here")
    upstream, upstream_url = fake
    looked_up: list[str] = []

    @agents.function_tool
    def lookup(q: str) -> str:
        """Look up facts about a place."""
        looked_up.append(q)
        return f"{q[:40]}: three museums, a river walk and an old town with narrow streets."

    async def run(url: str) -> list[Any]:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-agents", max_retries=0)
        agent = agents.Agent(
            name="guide",
            instructions="You are a travel guide. Keep answers short.",
            model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client),
            tools=[lookup],
        )
        items: list[Any] = []
        async with client:
            for i in range(60):
                ask = f"Turn {i}: what should I see on day {i}, with a budget of {i * 10} euros?"
                if i % 5 == 3:
                    ask = f"Turn {i}: please call tool lookup for district {i}."
                result = await agents.Runner.run(agent, [*items, {"role": "user", "content": ask}])
                assert result.final_output
                items = result.to_input_list()
        return items

    agents.set_tracing_disabled(True)
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        items = asyncio.run(run(url))
    assert len(looked_up) == 12
    sent = TokenCounter().count_messages(MODEL, items)
    assert sent > WINDOW, sent  # the history outgrew the window; every turn still answered
    forwarded = [r["input"] for r in upstream.responses_requests()]
    assert len(forwarded) == 72  # a request a turn, and one more after each tool call
    summarised = [f for f in forwarded if f[0].get("role") == "developer"]
    assert summarised, "the history was never reduced"


def test_summaries_can_go_to_the_responses_api(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """`summarizer_api = "responses"`, for upstreams that serve nothing else."""
    upstream, upstream_url = fake
    db = tmp_path / "p.db"
    with start_proxy(upstream_url, db, reduction_summarizer_api="responses") as url:
        agent = Agent(url + "/v1")
        with agent.api:
            for i in range(60):
                agent.turn(i)
    assert not upstream.records("/v1/chat/completions")
    asked = [
        r
        for r in upstream.responses_requests()
        if "context-proxy summarizer" in str(r.get("instructions"))
    ]
    assert asked and all(r["input"].startswith("Summarise this conversation:") for r in asked)
    forwarded = [r["input"] for r in upstream.responses_requests() if r not in asked]
    summaries = [f[0]["content"] for f in forwarded if f[0].get("role") == "developer"]
    assert summaries and summaries[-1].startswith(
        "Summary of the earlier conversation:\n\nSUMMARY["
    )


def test_a_chain_of_previous_response_ids_is_continued_from_the_store(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """`[responses] manage_server_state`: the app chains by id, the upstream gets it stateless."""
    upstream, upstream_url = fake
    db = tmp_path / "p.db"
    with managed(upstream_url, db, "sk-chain") as api:
        raw = api.responses.with_raw_response.create(model=MODEL, input="Plan my trip.")
        first, ids = raw.parse(), {raw.headers["x-conversation-id"]}
        previous, kinds = first.id, []
        for i in range(40):
            ask: list[Any] = [{"role": "user", "content": f"Turn {i}: day {i}, what next? " * 3}]
            if i % 5 == 2:
                ask = [{"role": "user", "content": f"Turn {i}: please call tool lookup {i}."}]
            raw = api.responses.with_raw_response.create(
                model=MODEL, input=ask, previous_response_id=previous, stream=i % 3 == 0
            )
            if i % 3 == 0:
                events = list(raw.parse())
                answer = next(e for e in events if e.type == "response.completed").response
            else:
                answer = raw.parse()
            ids.add(raw.headers["x-conversation-id"])
            kinds.append(raw.headers["x-context-reduction"])
            calls = [o for o in answer.output if o.type == "function_call"]
            previous = answer.id
            if calls:
                output = {
                    "type": "function_call_output",
                    "call_id": calls[0].call_id,
                    "output": "ok",
                }
                answer = api.responses.create(
                    model=MODEL, input=[output], previous_response_id=previous
                )
                previous = answer.id
        with pytest.raises(openai.BadRequestError):  # an id the proxy never saw: as sent
            api.responses.create(model=MODEL, input="x", previous_response_id="resp_unseen")
    assert len(ids) == 1 and "passthrough" not in kinds
    assert any("summarized" in k for k in kinds)
    *chained, unseen = upstream.responses_requests()
    assert all("previous_response_id" not in r for r in chained)  # all of them stateless
    assert all(isinstance(r["input"], list) for r in chained[1:])
    assert unseen["previous_response_id"] == "resp_unseen"


def test_recall_brings_a_fact_back_into_a_reduced_responses_input(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    fact = "My passport number is X1234567 and it expires in March 2031."
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db", recall_enabled="true") as url:
        agent = Agent(url + "/v1", **{"X-Conversation-Id": "trip"})
        with agent.api:
            for i in range(120):
                if i == 4:
                    agent.send({"role": "user", "content": fact})
                else:
                    agent.turn(i)
            agent.send({"role": "user", "content": "Remind me when my passport expires?"})
    asked = upstream.responses_requests()[-1]["input"]
    assert all(fact not in str(i.get("content")) for i in asked[:-2]), "the fact was not reduced"
    block = asked[-2]
    assert block["role"] == "developer" and fact in block["content"]
    assert int(agent.headers[-1]["x-context-recall"]) >= 1


def test_a_chained_turn_never_takes_in_a_turn_another_chat_committed_meanwhile(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """Two chats under one key open alike (one derived id). While A's chained turn is
    answered, B arrives with a history of its own; A's next link carries A's turns only."""
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db", responses_manage_server_state="true") as url:
        api = openai.OpenAI(base_url=url + "/v1", api_key="sk-shared", max_retries=0)
        with api, ThreadPoolExecutor(1) as pool:
            a1 = api.responses.with_raw_response.create(model=MODEL, input="Hello")
            gate = upstream.hold_next()
            a2 = pool.submit(
                api.responses.create,
                model=MODEL,
                input="A: my dog is Rex.",
                previous_response_id=a1.parse().id,
            )
            while len(upstream.responses_requests()) < 2:  # A's turn is at the upstream
                time.sleep(0.01)
            b1 = api.responses.with_raw_response.create(
                model=MODEL,
                input=[
                    {"role": "user", "content": "Hello"},
                    {"role": "assistant", "content": "Hi, B."},
                    {"role": "user", "content": "B: my PIN is 4321."},
                ],
            )
            gate.set()
            a3 = api.responses.with_raw_response.create(
                model=MODEL, input="A: what is my dog called?", previous_response_id=a2.result().id
            )
    assert b1.headers["x-conversation-id"] == a1.headers["x-conversation-id"]
    assert a3.headers["x-context-reduction"] != "passthrough"
    sent = upstream.responses_requests()[-1]
    assert "previous_response_id" not in sent and "4321" not in json.dumps(sent)
    assert [i["content"] for i in sent["input"] if i.get("role") == "user"] == [
        "Hello",
        "A: my dog is Rex.",
        "A: what is my dog called?",
    ]


def test_an_agents_sdk_run_chained_by_response_id_keeps_its_tools_and_recalls(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """The OpenAI Agents SDK chaining its runs by `previous_response_id` (managed server
    state, recall on, `mask`): tool rounds, streamed runs and a handoff, each continued
    from the store and forwarded stateless; a fact said early comes back when asked."""
    from agents import Agent as SdkAgent
    from agents import OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def lookup(q: str) -> str:
        """Look up facts about a city."""
        return f"Facts about {q}: " + "museums, rivers, bridges. " * 20

    upstream, upstream_url = fake
    env = {"responses_manage_server_state": "true", "recall_enabled": "true"}
    with start_proxy(
        upstream_url, tmp_path / "p.db", reduction_strategy="mask+summarize", **env
    ) as url:

        async def run() -> list[str]:
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-agents", max_retries=0)
            model = OpenAIResponsesModel(MODEL, client)
            billing = SdkAgent(name="billing", instructions="You handle billing.", model=model)
            trip = SdkAgent(
                name="trip", instructions="Plan.", tools=[lookup], handoffs=[billing], model=model
            )
            said = {
                4: "My passport number is X1234567 and it expires in March 2031.",
                25: "please call tool transfer_to_billing",
                28: "Remind me when my passport expires?",
            }
            previous, agents = None, []
            for i in range(30):
                text = f"Turn {i}: tell me about day {i}, budget {i * 10} euros. " + "more " * 20
                if i % 6 == 2:
                    text = f"Turn {i}: please call tool lookup for city {i}."
                text = said.get(i, text)
                if i % 3 == 0:
                    streamed = Runner.run_streamed(trip, text, previous_response_id=previous)
                    async for _ in streamed.stream_events():
                        pass
                    previous, agent = streamed.last_response_id, streamed.last_agent.name
                else:
                    result = await Runner.run(trip, text, previous_response_id=previous)
                    previous, agent = result.last_response_id, result.last_agent.name
                agents.append(agent)
            await client.close()
            return agents

        agents = asyncio.run(run())
    assert agents[25] == "billing" and agents.count("billing") == 1
    sent = upstream.responses_requests()
    assert all("previous_response_id" not in r for r in sent)  # each continued from the store
    assert not [c.error for c in upstream.calls if c.error]
    asked = next(r for r in sent if "Remind me" in json.dumps(r["input"][-1]))
    assert "X1234567" in json.dumps(asked["input"][-2])  # the recall block
    assert "X1234567" not in json.dumps(asked["input"][:-2]), "the fact was reduced"


def test_only_the_latest_answer_of_a_conversation_is_continued(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """Two users of one key who open alike share a derived conversation; a retry names an
    earlier answer. Neither continues turns it never saw: both go through as sent."""
    upstream, upstream_url = fake
    db = tmp_path / "p.db"
    with managed(upstream_url, db, "sk-shared") as api:
        a = api.responses.create(model=MODEL, input="Hello")
        b = api.responses.create(model=MODEL, input="Hello")
        b2 = api.responses.create(model=MODEL, input="My PIN is 4321.", previous_response_id=b.id)
        raw = api.responses.with_raw_response.create(
            model=MODEL, input="What did I tell you?", previous_response_id=a.id
        )
        retry = api.responses.with_raw_response.create(
            model=MODEL, input="My PIN is 4321, again.", previous_response_id=b.id
        )
        api.responses.create(model=MODEL, input="Thanks.", previous_response_id=b2.id)
    assert raw.headers["x-context-reduction"] == "passthrough"
    assert retry.headers["x-context-reduction"] == "passthrough"
    sent = upstream.responses_requests()
    assert sent[3]["previous_response_id"] == a.id and sent[3]["input"] == "What did I tell you?"
    assert sent[4]["previous_response_id"] == b.id
    latest = sent[5]  # the latest answer's chain is continued from the store
    assert "previous_response_id" not in latest
    assert [i["content"] for i in latest["input"] if i.get("role") == "user"] == [
        "Hello",
        "My PIN is 4321.",
        "Thanks.",
    ]


def test_a_chain_the_store_cannot_keep_goes_to_openai_as_sent(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """With the store's file gone, a chained turn could not be stored: instead of the
    append mode's 503 it goes as sent, and OpenAI, which holds the chain, answers it."""
    upstream, upstream_url = fake
    db = tmp_path / "p.db"
    with managed(upstream_url, db, "sk-gone") as api:
        first = api.responses.create(model=MODEL, input="Hello")
        db.unlink()
        raw = api.responses.with_raw_response.create(
            model=MODEL, input="Still there?", previous_response_id=first.id
        )
    assert raw.status_code == 200
    assert raw.headers["x-context-reduction"] == "passthrough"
    assert upstream.responses_requests()[-1]["previous_response_id"] == first.id


def loaded(call_id: str | None, i: int) -> dict[str, Any]:
    """The output of a tool search (`call_id` None: hosted) that loaded a namespace of tools."""
    about = f"Customer records of region {i}: names, orders, invoices and open tickets. " * 3
    tool = {"type": "function", "name": f"get_customer_{i}", "description": about}
    crm = {"type": "namespace", "name": "crm", "description": "CRM", "tools": [tool]}
    execution = "server" if call_id is None else "client"
    output = {"type": "tool_search_output", "call_id": call_id, "execution": execution}
    return output | {"status": "completed", "tools": [crm]}


@pytest.mark.parametrize("strategy", ["summarize", "mask", "tokens"])
def test_tool_searches_are_reduced_with_their_outputs(
    fake: tuple[MockUpstream, str], tmp_path: Path, strategy: str
) -> None:
    """Each turn the model searches the app's deferred tools (the app runs the search and
    answers it), and every other turn the input also holds a search OpenAI ran (hosted, its
    output right after it); reduced, a search goes with its output or not at all."""
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db", reduction_strategy=strategy) as url:
        agent = Agent(url + "/v1")
        with agent.api:
            for i in range(30):
                ask: list[Any] = [{"role": "user", "content": f"Turn {i}: search tools for crm."}]
                if i % 2:
                    hosted = {"type": "tool_search_call", "call_id": None, "execution": "server"}
                    query = {"paths": ["crm"], "query": f"customers of region {i} " * 20}
                    ask = [hosted | {"arguments": query}, loaded(None, i), *ask]
                response = agent.send(*ask, stream=i % 3 == 0)
                search = response.output[-1]
                assert search.type == "tool_search_call" and search.execution == "client"
                agent.send(loaded(search.call_id, i))
    kinds = [h["x-context-reduction"] for h in agent.headers]
    assert sum(k not in ("none", "reused") for k in kinds) >= 2, kinds
    assert not [c.error for c in upstream.calls if c.error]
    last = upstream.responses_requests()[-1]["input"]
    assert len(last) < len(agent.input), "the last request went reduced"
    assert last[-1] == loaded(search.call_id, 29)


def test_a_chained_tool_search_is_answered_from_the_store(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """With manage_server_state the app answers a client-executed search by its output
    alone, chained by id; the proxy supplies the search from its store, reduced or not."""
    upstream, upstream_url = fake
    with managed(upstream_url, tmp_path / "p.db", "sk-search") as api:
        previous, kinds = None, []
        for i in range(20):
            ask = [{"role": "user", "content": f"Turn {i}: search tools for crm. " * 4}]
            extra: Any = {"previous_response_id": previous} if previous else {}
            answer = api.responses.create(model=MODEL, input=ask, **extra)
            search = answer.output[-1]
            assert search.type == "tool_search_call"
            raw = api.responses.with_raw_response.create(
                model=MODEL, input=[loaded(search.call_id, i)], previous_response_id=answer.id
            )
            kinds.append(raw.headers["x-context-reduction"])
            previous = raw.parse().id
    assert "passthrough" not in kinds and any("summarized" in k for k in kinds), kinds
    assert not [c.error for c in upstream.calls if c.error]
    assert all("previous_response_id" not in r for r in upstream.responses_requests())
