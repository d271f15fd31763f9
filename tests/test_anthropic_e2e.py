"""`/v1/messages` through the real server, driven by the official `anthropic` client.

The fake upstream validates requests the way Anthropic does (alternation,
tool_use answered by tool_result, signed thinking blocks first, required
headers and `max_tokens`, the window) and records what it was sent.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from proxy.conversation import tenant_of
from proxy.mock import MockUpstream
from proxy.mock import anthropic as mock_anthropic
from proxy.reduction.types import Budget
from proxy.tokens import REPLY_PRIMING, TokenCounter

from .servers import run_server, serve_proxy

pytestmark = pytest.mark.integration

MODEL = "claude-tiny"
WINDOW = 3000
MAX_TOKENS = 256
SYSTEM: Any = [
    {
        "type": "text",
        "text": "You are a travel assistant. Answer briefly.",
        "cache_control": {"type": "ephemeral"},
    }
]
TOOLS: Any = [
    {
        "name": "lookup",
        "description": "Look up facts about a city.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
]


@pytest.fixture
def fake() -> Iterator[tuple[MockUpstream, str]]:
    upstream = MockUpstream(context_limits={MODEL: WINDOW})
    with run_server(upstream.app) as url:
        yield upstream, url


def start_proxy(upstream_url: str, db: Path, **env: str) -> Any:
    windows = {MODEL: WINDOW}
    return serve_proxy(upstream_url + "/v1", db, windows=windows, anthropic_url=upstream_url, **env)


class App:
    """An app on the Messages API that keeps its history and sends it whole every turn."""

    def __init__(self, url: str, **headers: str) -> None:
        self.api = anthropic.Anthropic(
            base_url=url, api_key="sk-ant-test", max_retries=0, default_headers=headers
        )
        self.messages: list[Any] = []
        self.headers: list[dict[str, str]] = []

    def send(self, content: Any, stream: bool = False) -> Any:
        self.messages.append({"role": "user", "content": content})
        kwargs: Any = {
            "model": MODEL,
            "max_tokens": MAX_TOKENS,
            "system": SYSTEM,
            "tools": TOOLS,
            "messages": self.messages,
        }
        if stream:
            with self.api.messages.stream(**kwargs) as events:
                message = events.get_final_message()
                headers = dict(events.response.headers)
        else:
            raw = self.api.messages.with_raw_response.create(**kwargs)
            headers, message = dict(raw.headers), raw.parse()
        self.headers.append(headers)
        assert message.content
        self.messages.append(
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in message.content],
            }
        )
        return message

    def turn(self, i: int) -> None:
        stream = i % 4 == 1
        if i % 5 == 3:
            message = self.send(f"Turn {i}: please call tool lookup for city {i}.", stream=stream)
            assert [b.type for b in message.content] == ["thinking", "tool_use"]
            call = message.content[1]
            output = f"City {i} has {i % 7 + 2} museums, a river walk and an old town."
            self.send([{"type": "tool_result", "tool_use_id": call.id, "content": output}])
        else:
            self.send(
                f"Turn {i}: tell me about day {i} of the trip, budget {i * 10} euros.", stream
            )


def prefix_share(requests: list[list[Any]]) -> float:
    pairs = list(itertools.pairwise(requests))
    return sum(1 for a, b in pairs if b[: len(a)] == a) / len(pairs)


def test_150_turns_with_tools_thinking_and_streams_are_reduced_and_stay_valid(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        app = App(url)
        with app.api:
            for i in range(150):
                app.turn(i)
    sent = TokenCounter().count_messages(MODEL, app.messages)
    assert sent > 3 * WINDOW, sent
    records = upstream.records("/v1/messages")
    forwarded = upstream.messages_requests()
    assert len(forwarded) == len(app.headers) == 180  # every request answered, none rejected
    # The history gets the trigger's share of what max_tokens, system and tools leave.
    defined = TokenCounter().count_definitions(MODEL, [SYSTEM, TOOLS])
    most = Budget(WINDOW, MAX_TOKENS + defined).limit + defined + REPLY_PRIMING
    for headers in app.headers:
        assert int(headers["x-context-tokens-out"]) <= most
        assert headers["x-context-tokens-estimated"] == "true"
    kinds = [h["x-context-reduction"] for h in app.headers]
    assert any("summarized" in k for k in kinds) and kinds[0] == "none"
    histories = [r["messages"] for r in forwarded]
    assert prefix_share(histories) >= 0.85, prefix_share(histories)
    summarised = [r for r in upstream.requests if r.is_summary]
    assert 1 <= len(summarised) <= 0.15 * 150
    assert all(r.path == "/v1/messages" for r in summarised)  # through Anthropic: auto
    assert all(r["system"] == SYSTEM for r in forwarded)  # cache_control kept, never moved
    summaries = [h[0]["content"][0]["text"] for h in histories if isinstance(h[0]["content"], list)]
    assert any(s.startswith("Summary of the earlier conversation:") for s in summaries)
    for record in records:
        # The client's key goes as it sent it (SDKs use x-api-key or a bearer token).
        key = record.headers.get("x-api-key") or record.headers["authorization"]
        assert key.removeprefix("Bearer ") == "sk-ant-test"
        assert record.headers["anthropic-version"]


def test_errors_are_in_anthropics_shape(fake: tuple[MockUpstream, str], tmp_path: Path) -> None:
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db", server_max_body_bytes="20000") as url:
        api = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        with api:
            with pytest.raises(anthropic.BadRequestError) as bad:
                api.messages.create(
                    model=MODEL, max_tokens=10, messages=[{"role": "tool", "content": "x"}]
                )  # type: ignore[typeddict-item]
            assert bad.value.body["type"] == "error"  # type: ignore[index]
            assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
            with pytest.raises(anthropic.NotFoundError) as unknown:
                api.messages.create(
                    model=MODEL,
                    max_tokens=10,
                    messages=[{"role": "user", "content": "hi"}],
                    extra_headers={"X-Conversation-Id": "never-seen", "X-Context-Mode": "append"},
                )
            assert unknown.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
            with pytest.raises(anthropic.APIStatusError) as large:
                api.messages.create(
                    model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "x" * 30_000}]
                )
            assert large.value.status_code == 413
            assert large.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
        raw = httpx.post(url + "/v1/messages", content=b"{not json", headers={"x-api-key": "k"})
        assert raw.status_code == 400 and orjson.loads(raw.content)["type"] == "error"
    assert not upstream.records("/v1/messages")  # nothing bad went upstream


def test_access_lines_name_the_route_and_proxy_errors_name_the_conversation(
    fake: tuple[MockUpstream, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, upstream_url = fake
    with caplog.at_level(logging.INFO, logger="context_proxy.access"):
        with start_proxy(upstream_url, tmp_path / "p.db") as url:
            App(url, **{"X-Conversation-Id": "routed"}).send("hello")
            unknown = App(url, **{"X-Conversation-Id": "unknown", "X-Context-Mode": "append"})
            with pytest.raises(anthropic.NotFoundError):
                unknown.send("hello again")
        with start_proxy("http://127.0.0.1:9", tmp_path / "q.db") as url:
            api = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as down:
                api.messages.create(
                    model=MODEL,
                    max_tokens=10,
                    messages=[{"role": "user", "content": "hi"}],
                    extra_headers={"X-Conversation-Id": "down"},
                )
    lines = [r for r in caplog.records if r.name == "context_proxy.access"]
    assert [r.__dict__["route"] for r in lines] == ["/v1/messages"] * 3
    assert lines[0].getMessage().startswith("/v1/messages conversation=routed ")
    # A request the proxy refused has its line too, with the status the client got.
    assert [r.__dict__["conversation"] for r in lines] == ["routed", "unknown", "down"]
    assert [r.__dict__["upstream_status"] for r in lines] == [200, 404, 502]
    assert down.value.status_code == 502
    assert down.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert down.value.response.headers["x-conversation-id"] == "down"


def test_a_history_that_cannot_fit_is_refused_in_anthropics_words(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """Clients (LiteLLM's mapping, agents that compact) read the kind off the message."""
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        api = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        with api, pytest.raises(anthropic.BadRequestError) as refused:
            api.messages.create(
                model=MODEL,
                max_tokens=WINDOW - 5,  # leaves no room for the question
                system=SYSTEM,
                messages=[{"role": "user", "content": "Plan the whole trip for me, please."}],
            )
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert re.match(r"prompt is too long: \d+ tokens > \d+ maximum", error["message"])
    assert "mandatory part" in error["message"]  # and why, in the proxy's words
    assert not upstream.records("/v1/messages")


def test_count_tokens_and_provider_compaction_go_through_as_sent(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        api = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        with api:
            messages: Any = [{"role": "user", "content": "hello"}]
            raw = api.messages.with_raw_response.create(
                model=MODEL,
                max_tokens=10,
                messages=messages,
                extra_body={
                    "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}
                },
            )
            assert raw.headers["x-context-reduction"] == "passthrough"
            counted = api.messages.count_tokens(model=MODEL, messages=messages)
            assert counted.input_tokens > 0
    (sent,) = upstream.records("/v1/messages")
    assert sent.body["context_management"] == {"edits": [{"type": "clear_tool_uses_20250919"}]}
    (record,) = upstream.records("/v1/messages/count_tokens")
    key = record.headers.get("x-api-key") or record.headers["authorization"]
    assert key.removeprefix("Bearer ") == "sk-ant-test"


def test_an_operator_key_replaces_the_clients_and_a_refusal_names_no_key(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    env = {"anthropic_api_key": "sk-ant-operator", "auth_client_keys": "client-1"}
    with start_proxy(upstream_url, tmp_path / "p.db", **env) as url:
        api = anthropic.Anthropic(base_url=url, api_key="client-1", max_retries=0)
        with api:
            api.messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
            with pytest.raises(anthropic.AuthenticationError) as refused:
                anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0).messages.create(
                    model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
                )
            assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    (sent,) = upstream.records("/v1/messages")
    assert sent.headers["x-api-key"] == "sk-ant-operator"
    assert "client-1" not in str(sent.headers) and "authorization" not in sent.headers


def test_append_mode_supplies_the_stored_history_and_it_stays_valid(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    summarizer = {"anthropic_summarizer_model": "claude-haiku-4-5"}
    with start_proxy(upstream_url, tmp_path / "p.db", **summarizer) as url:
        api = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        headers = {"X-Conversation-Id": "trip", "X-Context-Mode": "append"}
        with api:
            history: list[Any] = []
            key = ""  # the conversation's id, from the first answer
            for i in range(60):
                text = f"Turn {i}: day {i}. " + "The museum opens at nine and closes at six. " * 4
                new: list[Any] = [{"role": "user", "content": text}]
                if i % 6 == 5:
                    new[0]["content"] = f"Turn {i}: please call tool lookup for {i}."
                sent = history + new if i == 0 else new
                raw = api.messages.with_raw_response.create(
                    model=MODEL,
                    max_tokens=MAX_TOKENS,
                    system=SYSTEM,
                    messages=sent,
                    extra_headers={} if i == 0 else headers | {"X-Conversation-Id": key},
                )
                key = raw.headers["x-conversation-id"]
                message = raw.parse()
                if message.stop_reason == "tool_use":
                    call = message.content[1]
                    result = {"type": "tool_result", "tool_use_id": call.id, "content": "42"}
                    api.messages.create(
                        model=MODEL,
                        max_tokens=MAX_TOKENS,
                        messages=[{"role": "user", "content": [result]}],
                        extra_headers=headers | {"X-Conversation-Id": key},
                    )
            # Unreduced, the stored history (summary included) goes as Anthropic takes it;
            # a model without a window at the fake, since nothing is cut.
            unreduced = api.messages.with_raw_response.create(
                model="claude-unlimited",
                max_tokens=MAX_TOKENS,
                messages=[{"role": "user", "content": "And now?"}],
                extra_headers=headers | {"X-Conversation-Id": key, "X-Context-Strategy": "none"},
            )
            assert unreduced.status_code == 200
    forwarded = upstream.messages_requests()
    summaries = [r for r in upstream.requests if r.is_summary]
    assert summaries, "past the window it is summarised"
    assert all(r.body["model"] == "claude-haiku-4-5" for r in summaries)
    # The stored history went upstream as Anthropic accepts it (the fake validates each).
    assert len(forwarded) == 60 + 10 + 1
    first = forwarded[-1]["messages"][0]["content"][0]
    assert first["text"].startswith("SUMMARY[")  # the stored summary, as a user text block


@pytest.mark.parametrize("arrives", ["turn by turn", "mid-conversation"])
def test_recall_brings_a_fact_back_as_a_text_block_of_the_question(
    fake: tuple[MockUpstream, str], tmp_path: Path, arrives: str
) -> None:
    """Mid-conversation: the app had its history before it used the proxy, which stored none."""
    fact = "My passport number is X1234567 and it expires in March 2031."
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db", recall_enabled="true") as url:
        app = App(url, **{"X-Conversation-Id": "trip"})
        with app.api:
            for i in range(100):
                if arrives == "mid-conversation":
                    said = fact if i == 4 else f"Turn {i}: tell me about day {i} of the trip."
                    answer = {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]}
                    app.messages += [{"role": "user", "content": said}, answer]
                elif i == 4:
                    app.send(fact)
                else:
                    app.turn(i)
            app.send("Remind me when my passport expires?", stream=arrives == "mid-conversation")
    requests = upstream.messages_requests()
    assert len(requests) == (1 if arrives == "mid-conversation" else 121)
    asked = requests[-1]["messages"]
    assert fact not in str(asked[:-1]), "the fact was reduced away before the question"
    question = asked[-1]["content"]
    assert question[0]["type"] == "text" and fact in question[0]["text"]
    assert question[-1] == {"type": "text", "text": "Remind me when my passport expires?"}
    assert int(app.headers[-1]["x-context-recall"]) >= 1


def test_recall_finds_a_fact_a_tool_result_holds(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """A tool's output is searched inside its `tool_result` block, as a chat `tool` message's is."""
    fact = "The deploy key lives in vault path secret/zebra-42 and rotates every Thursday."
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db", recall_enabled="true") as url:
        app = App(url, **{"X-Conversation-Id": "ops"})
        with app.api:
            call = app.send("Please call tool lookup for the deploy notes.").content[1]
            # The fake's answer repeats the result's opening only: the fact is in the result.
            output = [{"type": "text", "text": "Notes file, 2024 edition, section seven.\n" + fact}]
            app.send([{"type": "tool_result", "tool_use_id": call.id, "content": output}])
            assert "vault" not in str(app.messages[-1])
            for i in range(60):
                app.send(f"Turn {i}: tell me about day {i} of the trip.")
            app.send("Where does the deploy key live in vault?")
    asked = upstream.messages_requests()[-1]["messages"]
    assert fact not in str(asked[:-1]), "the result was reduced away before the question"
    question = asked[-1]["content"]
    assert isinstance(question, list), "no recall block"
    block = question[0]
    assert block["type"] == "text" and fact in block["text"]
    assert "[turn 1, tool result]" in block["text"]  # a tool's output, not the user's words


def exact(value: Any) -> int:
    """The fake's exact count (its `count_tokens` answer): four bytes of JSON a token."""
    return len(orjson.dumps(value)) // 4


@pytest.mark.parametrize("count", [False, True])
def test_count_tokens_keeps_the_exact_size_under_the_trigger(
    fake: tuple[MockUpstream, str], tmp_path: Path, count: bool
) -> None:
    upstream, upstream_url = fake
    env = {"anthropic_count_tokens": str(count).lower()}
    with start_proxy(upstream_url, tmp_path / "p.db", **env) as url:
        app = App(url)
        with app.api:
            for i in range(60):
                app.turn(i)
    # The history's budget: the trigger's share of the window less the answer and the
    # definitions (system, tools), all by the exact count.
    limit = 0.7 * (WINDOW - MAX_TOKENS - exact(SYSTEM) - exact(TOOLS))
    sizes = [exact(r["messages"]) for r in upstream.messages_requests()]
    counts = upstream.records("/v1/messages/count_tokens")
    if count:
        # Near the trigger the proxy asked, and what it sent then fits by the exact count.
        assert counts and max(sizes) <= limit, (len(counts), max(sizes), limit)
    else:  # the estimate alone lets some requests pass the trigger by the exact count
        assert not counts and max(sizes) > limit, (max(sizes), limit)


def test_a_large_screenshot_goes_upstream_counted_as_an_image(tmp_path: Path) -> None:
    """A 1.5 MB PNG counted as its base64 text needed 512,036 tokens: the proxy refused it."""
    from .test_media_tokens import b64, png

    upstream = MockUpstream()  # no window of its own: it would count the base64 as text too
    with (
        run_server(upstream.app) as upstream_url,
        start_proxy(upstream_url, tmp_path / "p.db") as url,
    ):
        api = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        shot: Any = {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/png",
                "data": b64(png(3000, 2000, 1_500_000)),
            },
        }
        question: Any = {"type": "text", "text": "What does this screenshot show?"}
        with api:
            raw = api.messages.with_raw_response.create(
                model="claude-vision-test",
                max_tokens=1024,
                messages=[{"role": "user", "content": [shot, question]}],
            )
    assert raw.http_response.status_code == 200
    assert int(raw.headers["x-context-tokens-in"]) < 2000
    (sent,) = upstream.messages_requests()
    assert sent["messages"][0]["content"] == [shot, question]


def test_a_stray_tool_result_is_dropped_alone_and_the_question_reaches_anthropic(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """A stray result used to take its whole message with it: the real result, the
    question, or every message there was."""
    upstream, upstream_url = fake
    call: Any = {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {"q": "Lyon"}}
    real: Any = {"type": "tool_result", "tool_use_id": "toolu_a", "content": "REAL RESULT"}
    stray: Any = {"type": "tool_result", "tool_use_id": "toolu_stale", "content": "old"}
    question: Any = {"type": "text", "text": "and what next?"}
    histories: list[Any] = [
        [
            {"role": "user", "content": "Look up Lyon."},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [real, stray, question]},
        ],
        [
            {"role": "user", "content": "Hello."},
            {"role": "assistant", "content": [{"type": "text", "text": "Hi."}]},
            {"role": "user", "content": [stray, {"type": "text", "text": "what now?"}]},
        ],
        [{"role": "user", "content": [stray]}],
    ]
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        api = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        with api:
            for i, messages in enumerate(histories):
                raw = api.messages.with_raw_response.create(
                    model=MODEL,
                    max_tokens=64,
                    messages=messages,
                    extra_headers={"X-Conversation-Id": f"stray-{i}"},
                )
                assert raw.http_response.status_code == 200  # the mock validates as Anthropic
                assert "repaired" in raw.headers["x-context-reduction"]
    first, second, lone = upstream.messages_requests()
    assert first["messages"][-1]["content"] == [real, question]
    assert first["messages"][:2] == histories[0][:2]
    assert second["messages"][-1] == {"role": "user", "content": [histories[1][-1]["content"][1]]}
    assert len(lone["messages"]) == 1 and lone["messages"][0]["role"] == "user"
    assert "toolu_stale" not in orjson.dumps([first, second, lone]).decode()


EPHEMERAL = {"type": "ephemeral"}
ADMIN = "admin-token"


class CachingApp(App):
    """An app that marks a message's last block for the prompt cache.

    Moving, it marks its newest message every turn and takes the mark off the
    one it marked before, as Anthropic's multi-turn caching pattern (and agent
    CLIs) do; otherwise it marks its first message and leaves it there.
    """

    def __init__(self, url: str, move: bool) -> None:
        super().__init__(url)
        self.move = move

    def send(self, content: Any, stream: bool = False) -> Any:
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if self.move or not self.messages:
            blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
        if self.move:
            for message in self.messages:
                if message["role"] == "user":
                    message["content"] = [
                        {k: v for k, v in b.items() if k != "cache_control"}
                        for b in message["content"]
                    ]
        return super().send(blocks, stream)


def unmarked(history: list[Any]) -> list[Any]:
    return [
        {
            **m,
            "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]],
        }
        if isinstance(m["content"], list)
        else m
        for m in history
    ]


def archived(url: str, conversation: str) -> list[Any]:
    found = httpx.get(
        f"{url}/admin/conversations/{conversation}",
        params={"tenant": tenant_of("sk-ant-test")},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert found.status_code == 200, found.text
    rows: list[Any] = found.json()["archive"]
    return rows


def caching_run(tmp_path: Path, move: bool) -> dict[str, Any]:
    upstream = MockUpstream(context_limits={MODEL: WINDOW})
    with (
        run_server(upstream.app) as upstream_url,
        start_proxy(upstream_url, tmp_path / f"{move}.db", auth_admin_token=ADMIN) as url,
    ):
        app = CachingApp(url, move)
        with app.api:
            for i in range(40):
                app.turn(i)
        ids = {h["x-conversation-id"] for h in app.headers}
        assert len(ids) == 1, "the derived id stays the conversation's"
        rows = archived(url, ids.pop())
    return {
        "app": app,
        "kinds": [h["x-context-reduction"] for h in app.headers],
        "summaries": sum(1 for r in upstream.requests if r.is_summary),
        "rows": rows,
        "forwarded": [r["messages"] for r in upstream.messages_requests()],
    }


def test_moving_the_cache_breakpoint_each_turn_is_not_an_edit(tmp_path: Path) -> None:
    staying, moving = caching_run(tmp_path, move=False), caching_run(tmp_path, move=True)
    # The same reductions, the same summaries reused, each message archived once.
    assert moving["kinds"] == staying["kinds"]
    assert "reused" in moving["kinds"] and moving["kinds"].count("summarized") <= 3
    assert moving["summaries"] == staying["summaries"] <= 3
    assert len(moving["rows"]) == len(staying["rows"]) == len(moving["app"].messages)
    # The archive keeps each message as it was first sent: then the newest, marked.
    questions = [r for r in moving["rows"] if r["role"] == "user"]
    assert all(r["content"][-1]["cache_control"] == EPHEMERAL for r in questions)
    # Upstream the breakpoint is where the client put it this turn, and only there.
    for history in moving["forwarded"]:
        marks = [
            (i, j)
            for i, m in enumerate(history)
            for j, b in enumerate(m["content"])
            if "cache_control" in b
        ]
        assert marks == [(len(history) - 1, len(history[-1]["content"]) - 1)]
    # Between reductions each request extends the last one but for where the mark is.
    assert prefix_share(list(map(unmarked, moving["forwarded"]))) == prefix_share(
        list(map(unmarked, staying["forwarded"]))
    )


def test_append_mode_forwards_the_breakpoint_the_client_moved_not_the_stored_ones(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        api = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        headers = {"X-Conversation-Id": "trip"}
        with api:
            for i in range(12):  # each a 400 past the fourth turn if stored marks stayed
                block = {"type": "text", "text": f"Turn {i}: day {i}.", "cache_control": EPHEMERAL}
                api.messages.create(
                    model=MODEL,
                    max_tokens=MAX_TOKENS,
                    system=SYSTEM,
                    messages=[{"role": "user", "content": [block]}],
                    extra_headers=headers,
                )
                headers["X-Context-Mode"] = "append"
    for history in upstream.messages_requests():
        marked = [m for m in history["messages"] if "cache_control" in str(m)]
        assert marked == [history["messages"][-1]]


def test_a_full_history_then_unmarked_appends_stay_within_four_breakpoints(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """The stored history is the archive's messages as first sent, each marked then."""
    upstream, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db") as url:
        app = CachingApp(url, move=True)
        app.api = app.api.with_options(default_headers={"X-Conversation-Id": "trip"})
        with app.api:
            for i in range(8):
                app.send(f"Turn {i}: tell me about day {i} of the trip.")
            append = app.api.with_options(
                default_headers={"X-Conversation-Id": "trip", "X-Context-Mode": "append"}
            )
            for i in range(3):
                append.messages.create(
                    model=MODEL,
                    max_tokens=MAX_TOKENS,
                    system=SYSTEM,
                    messages=[{"role": "user", "content": f"And day {i}?"}],
                )
    last = upstream.messages_requests()[-1]
    assert last["system"] == SYSTEM
    assert mock_anthropic.breakpoints(last) == 4  # the system's and the newest three


@pytest.mark.parametrize("resent", ["model_dump", "string"])
def test_an_answer_resent_as_the_sdk_parsed_it_is_archived_once(
    fake: tuple[MockUpstream, str], tmp_path: Path, resent: str
) -> None:
    _, upstream_url = fake
    with start_proxy(upstream_url, tmp_path / "p.db", auth_admin_token=ADMIN) as url:
        api = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        messages: list[Any] = []
        with api:
            for i in range(10):
                messages.append({"role": "user", "content": f"Turn {i}: day {i}."})
                raw = api.messages.with_raw_response.create(
                    model=MODEL, max_tokens=MAX_TOKENS, messages=messages
                )
                answer = raw.parse()
                if resent == "model_dump":  # text blocks carry "citations": null
                    content: Any = [b.model_dump() for b in answer.content]
                    assert content[0]["citations"] is None
                else:
                    content = answer.content[0].text
                messages.append({"role": "assistant", "content": content})
        rows = archived(url, raw.headers["x-conversation-id"])
    assert len(rows) == 20


def test_a_prefill_is_the_start_of_the_answer_the_app_keeps(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """An app that prefills "{" for JSON keeps the prefill and the answer as one message:
    the summary is reused between reductions and each message archived once, as without
    a prefill (every turn was summarised again, and archived twice, before)."""
    upstream, upstream_url = fake
    turns = 40

    def run(prefill: str | None, db: Path) -> tuple[list[str], int]:
        with start_proxy(upstream_url, db) as url:
            api = anthropic.Anthropic(base_url=url, api_key="sk-ant-prefill", max_retries=0)
            history: list[Any] = []
            kinds = []
            for i in range(turns):
                ask = f"Turn {i}: JSON about city {i}, its museums, parks and markets. " * 3
                history.append({"role": "user", "content": ask})
                sent = [*history, {"role": "assistant", "content": prefill}] if prefill else history
                raw = api.messages.with_raw_response.create(
                    model=MODEL, max_tokens=MAX_TOKENS, messages=sent
                )
                kinds.append(raw.headers["x-context-reduction"])
                if prefill:
                    assert upstream.messages_requests()[-1]["messages"][-1]["content"] == prefill
                said = (prefill or "") + raw.parse().content[0].text
                history.append({"role": "assistant", "content": said})
        with contextlib.closing(sqlite3.connect(db)) as conn:
            archived: int = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        return kinds, archived

    plain, plain_rows = run(None, tmp_path / "plain.db")
    made = len(upstream.summary_calls)
    prefilled, rows = run("{", tmp_path / "prefilled.db")
    assert "summarized" in plain and "reused" in plain, "long enough to be summarised"
    assert prefilled.count("summarized") <= plain.count("summarized") + 1
    assert "reused" in prefilled
    assert len(upstream.summary_calls) - made <= made + 1
    assert rows == plain_rows == 2 * turns
