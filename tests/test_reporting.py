"""What the proxy reports is what it did: `X-Context-Reduction` and the token headers.

The real server in front of a fake upstream that validates like OpenAI's,
driven by the official `openai` client; the bytes the client sent are taken
from its own HTTP client, and what was forwarded from the upstream's log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.app import create_app
from proxy.config import load_settings
from proxy.mock import MockUpstream
from proxy.tokens import TokenCounter

from .servers import run_server

pytestmark = pytest.mark.integration

MODEL = "tiny-window"
WINDOW = 4000
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the project and return its whole text.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "The file's path."}},
                "required": ["path"],
            },
        },
    }
]


@pytest.fixture
def fake() -> Iterator[tuple[MockUpstream, str]]:
    upstream = MockUpstream()
    with run_server(upstream.app) as url:
        yield upstream, url + "/v1"


def proxy(upstream_url: str, db: Path, strategy: str) -> Any:
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": upstream_url,
            "CONTEXT_PROXY_STORE_PATH": str(db),
            "CONTEXT_PROXY_REDUCTION_STRATEGY": strategy,
            "CONTEXT_PROXY_REDUCTION_TARGET_MESSAGES": "30",
            "CONTEXT_PROXY_REDUCTION_THRESHOLD_MESSAGES": "10",
        },
        overrides={"models": {"windows": {MODEL: WINDOW}}},
    )
    return run_server(create_app(settings))


class Agent:
    """An app that resends its history, reads a file now and then, and keeps each body it sent."""

    def __init__(self, url: str) -> None:
        self.sent: list[list[dict[str, Any]]] = []
        hooks = {"request": [self._record]}
        self.api = openai.OpenAI(
            base_url=url,
            api_key="sk-report",
            max_retries=0,
            default_headers={"X-Conversation-Id": "report"},
            http_client=httpx.Client(event_hooks=hooks),
        )
        self.history: list[Any] = [{"role": "system", "content": "You are a coding agent."}]
        self.kinds: list[str] = []

    def _record(self, request: httpx.Request) -> None:
        self.sent.append(orjson.loads(request.content)["messages"])

    def send(self, *new: Any) -> Any:
        self.history.extend(new)
        raw = self.api.chat.completions.with_raw_response.create(
            model=MODEL, messages=self.history, tools=TOOLS
        )
        self.kinds.append(raw.headers["x-context-reduction"])
        message = raw.parse().choices[0].message
        self.history.append(message.model_dump(exclude_none=True))
        return message

    def turn(self, i: int) -> None:
        if i % 2 == 0:
            reply = self.send({"role": "user", "content": f"Turn {i}: call tool read_file {i}"})
            call = reply.tool_calls[0]
            text = f"file {i}: " + " ".join(f"line{i}_{n} = compute({n})" for n in range(25))
            self.send({"role": "tool", "tool_call_id": call.id, "content": text})
        else:
            self.send({"role": "user", "content": f"Turn {i}: what does step {i} change?"})


STRATEGIES = ["none", "messages", "tokens", "summarize", "tiered", "filter", "mask", "mask+tokens"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_reduction_header_says_none_exactly_when_the_history_is_forwarded_as_sent(
    fake: tuple[MockUpstream, str], tmp_path: Path, strategy: str
) -> None:
    upstream, upstream_url = fake
    with proxy(upstream_url, tmp_path / "p.db", strategy) as url:
        agent = Agent(url + "/v1")
        with agent.api:
            for i in range(45):
                agent.turn(i)
    forwarded = [r["messages"] for r in upstream.chat_requests()]
    assert len(forwarded) == len(agent.sent) == len(agent.kinds)
    for sent, out, kinds in zip(agent.sent, forwarded, agent.kinds, strict=True):
        assert ("none" in kinds.split(",")) == (out == sent), (kinds, len(sent), len(out))
    reduced = [k for k in agent.kinds if k != "none"]
    if strategy == "none":
        assert not reduced
    else:
        assert reduced and "none" in agent.kinds  # both kinds of turn were seen
    if strategy.startswith("mask"):
        assert any("masked" in k for k in agent.kinds)


def test_tool_definitions_count_in_the_budget_and_the_token_headers(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    many = [
        {**TOOLS[0], "function": {**TOOLS[0]["function"], "name": f"read_file_{n}"}}  # type: ignore[dict-item]
        for n in range(30)
    ]
    defined = TokenCounter().count_definitions(MODEL, [many])
    assert defined > 1000
    # A history of about 2,000 tokens fits the 2,800 a 4,000-token window leaves, but not
    # once 30 tool definitions take their share.
    history = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(40):
        history.append({"role": "user", "content": f"question {i} " + "word " * 40})
        history.append({"role": "assistant", "content": f"answer {i}"})
    history.append({"role": "user", "content": "and now?"})
    with proxy(upstream_url, tmp_path / "p.db", "tokens") as url:
        api = openai.OpenAI(base_url=url + "/v1", api_key="sk-report", max_retries=0)
        with api:
            bare = api.chat.completions.with_raw_response.create(model=MODEL, messages=history)
            tooled = api.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=history,
                tools=many,
                extra_headers={"X-Conversation-Id": "tooled"},
            )
    assert bare.headers["x-context-reduction"] == "none"
    assert "windowed" in tooled.headers["x-context-reduction"]
    assert (
        int(tooled.headers["x-context-tokens-in"])
        == int(bare.headers["x-context-tokens-in"]) + defined
    )
    forwarded = upstream.chat_requests()[-1]["messages"]
    out = TokenCounter().count_messages(MODEL, forwarded) + defined
    assert int(tooled.headers["x-context-tokens-out"]) == out <= 0.7 * WINDOW


def test_a_request_picks_a_mask_chain_and_an_unknown_one_is_a_400(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    with proxy(upstream_url, tmp_path / "p.db", "summarize") as url:
        api = openai.OpenAI(base_url=url + "/v1", api_key="sk-report", max_retries=0)
        with api:
            agent_history: list[Any] = [{"role": "user", "content": "hello"}]
            ok = api.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=agent_history,
                extra_headers={"X-Context-Strategy": "mask+tokens"},
            )
            assert ok.headers["x-context-reduction"] == "none"
            with pytest.raises(openai.BadRequestError) as refused:
                api.chat.completions.create(
                    model=MODEL,
                    messages=agent_history,
                    extra_headers={"X-Context-Strategy": "mask+mask"},
                )
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == "X-Context-Strategy"
    assert "mask+<strategy>" in error["message"]
    assert len(upstream.chat_requests()) == 1
