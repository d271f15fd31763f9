"""The real server on 127.0.0.1, driven by the official `openai` client, as apps use it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.conversation import tenant_of
from proxy.mock import MockUpstream

from .servers import run_server, serve_proxy

pytestmark = pytest.mark.integration


@pytest.fixture
def fake() -> Iterator[tuple[MockUpstream, str]]:
    upstream = MockUpstream()
    with run_server(upstream.app) as url:
        yield upstream, url + "/v1"


@contextmanager
def proxy(upstream_url: str, db: Path, **env: str) -> Iterator[str]:
    with serve_proxy(upstream_url, db, **env) as url:
        yield url + "/v1"


def client(base_url: str, key: str = "sk-test", **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=base_url, api_key=key, max_retries=0, default_headers=headers or None
    )


def test_answers_match_a_direct_call(fake: tuple[MockUpstream, str], tmp_path: Path) -> None:
    upstream, direct_url = fake
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]
    direct = client(direct_url).chat.completions.create(model="gpt-4o", messages=messages)
    with proxy(direct_url, tmp_path / "p.db") as url:
        via = client(url).chat.completions.create(model="gpt-4o", messages=messages)
        raw = client(url).chat.completions.with_raw_response.create(
            model="gpt-4o", messages=messages
        )
    assert via.model_dump() == direct.model_dump()
    assert raw.headers["x-context-reduction"] == "none"
    forwarded = upstream.chat_records()[-1]
    assert forwarded.body["messages"] == messages
    assert not [h for h in forwarded.headers if h.startswith(("x-conversation", "x-context"))]
    assert forwarded.headers["authorization"] == "Bearer sk-test"


def test_streaming_is_incremental_and_identical(tmp_path: Path) -> None:
    upstream = MockUpstream(chunk_delay_s=0.15)
    with run_server(upstream.app) as raw_url, proxy(raw_url + "/v1", tmp_path / "p.db") as url:
        direct = [
            c.model_dump()
            for c in client(raw_url + "/v1").chat.completions.create(
                model="gpt-4o",
                stream=True,
                messages=[{"role": "user", "content": "one two three four five six"}],
            )
        ]
        arrivals: list[float] = []
        via = []
        for c in client(url).chat.completions.create(
            model="gpt-4o",
            stream=True,
            messages=[{"role": "user", "content": "one two three four five six"}],
        ):
            arrivals.append(time.monotonic())
            via.append(c.model_dump())
    assert via == direct
    # Chunks reach the client spread over the upstream's pacing, not all at the end.
    assert arrivals[-1] - arrivals[1] > 0.5


def test_streamed_tool_call_then_append_mode_then_restart(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    db = tmp_path / "p.db"
    with proxy(upstream_url, db) as url:
        app = client(url, **{"X-Conversation-Id": "trip"})
        stream = app.chat.completions.create(
            model="gpt-4o",
            stream=True,
            messages=[{"role": "user", "content": "please call tool get_weather for Paris"}],
        )
        calls: dict[int, dict[str, str]] = {}
        for c in stream:
            for tc in c.choices[0].delta.tool_calls or [] if c.choices else []:
                entry = calls.setdefault(tc.index, {"id": "", "args": ""})
                entry["id"] = tc.id or entry["id"]
                entry["args"] += tc.function.arguments or "" if tc.function else ""
        call_id = calls[0]["id"]
        appender = client(url, **{"X-Conversation-Id": "trip", "X-Context-Mode": "append"})
        answer = appender.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "tool", "tool_call_id": call_id, "content": "18 degrees"}],
        )
        assert answer.choices[0].message.content.startswith("Tool said: 18 degrees")
    sent = upstream.last_chat()["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == call_id
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == calls[0]["args"]
    with proxy(upstream_url, db) as url:  # a restart on the same SQLite file
        appender = client(url, **{"X-Conversation-Id": "trip", "X-Context-Mode": "append"})
        appender.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "and tomorrow?"}]
        )
    sent = upstream.last_chat()["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]


def test_async_client_full_history_conversation(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake

    async def talk(url: str) -> list[str]:
        api = openai.AsyncOpenAI(base_url=url, api_key="sk-a", max_retries=0)
        history: list[Any] = [{"role": "system", "content": "You echo."}]
        ids = []
        for i in range(4):
            history.append({"role": "user", "content": f"message {i}"})
            raw = await api.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=history
            )
            history.append(raw.parse().choices[0].message)
            ids.append(raw.headers["x-conversation-id"])
        await api.close()
        return ids

    with proxy(upstream_url, tmp_path / "p.db") as url:
        ids = asyncio.run(talk(url))
    assert len(set(ids)) == 1
    assert len(upstream.chat_requests()[-1]["messages"]) == 8


def test_models_and_embeddings_pass_through(fake: tuple[MockUpstream, str], tmp_path: Path) -> None:
    _, upstream_url = fake
    with proxy(upstream_url, tmp_path / "p.db") as url:
        direct, via = client(upstream_url), client(url)
        assert [m.id for m in via.models.list()] == [m.id for m in direct.models.list()]
        e1 = via.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
        e2 = direct.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
        assert e1.model_dump() == e2.model_dump()


@pytest.mark.parametrize("transport", ["reqwest", "aiohttp", "httpx"])
def test_errors_propagate(fake: tuple[MockUpstream, str], tmp_path: Path, transport: str) -> None:
    upstream, upstream_url = fake
    with (
        proxy(
            upstream_url, tmp_path / "p.db", upstream_transport=transport, upstream_timeout_s="0.5"
        ) as url,
        client(url) as api,
    ):
        with pytest.raises(openai.RateLimitError) as rate:
            api.chat.completions.create(
                model="error-429", messages=[{"role": "user", "content": "x"}]
            )
        assert rate.value.response.headers["retry-after"] == "7"
        with pytest.raises(openai.InternalServerError) as server:
            api.chat.completions.create(
                model="error-500", messages=[{"role": "user", "content": "x"}]
            )
        assert server.value.status_code == 500
        upstream.slow_s = 2.0
        with pytest.raises(openai.APIStatusError) as slow:
            api.chat.completions.create(
                model="gpt-4o",
                messages=[{"role": "user", "content": "x"}],
                extra_headers={"X-Conversation-Id": "slow"},
            )
        assert slow.value.status_code == 504
        assert slow.value.response.headers["x-conversation-id"] == "slow"
        upstream.slow_s = 0.0
        models = api.models.list()
        assert models.data
    with (
        proxy("http://127.0.0.1:9/v1", tmp_path / "q.db", upstream_transport=transport) as url,
        client(url) as api,
    ):
        with pytest.raises(openai.APIStatusError) as down:
            api.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        assert down.value.status_code == 502
        # A derived id is known too: the one the next request of this chat is filed under.
        assert down.value.response.headers["x-conversation-id"]


def test_tenants_are_isolated(fake: tuple[MockUpstream, str], tmp_path: Path) -> None:
    upstream, upstream_url = fake
    with proxy(upstream_url, tmp_path / "p.db") as url:
        client(url, "sk-alice", **{"X-Conversation-Id": "same"}).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "alice's secret"}]
        )
        mallory = client(
            url, "sk-mallory", **{"X-Conversation-Id": "same", "X-Context-Mode": "append"}
        )
        with pytest.raises(openai.NotFoundError):
            mallory.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "what did alice say?"}]
            )
    assert all(
        "alice's secret" not in str(r.body)
        for r in upstream.chat_records()
        if r.headers["authorization"] == "Bearer sk-mallory"
    )


def test_client_disconnect_cancels_the_turn(tmp_path: Path) -> None:
    upstream = MockUpstream(chunk_delay_s=0.2)
    with (
        run_server(upstream.app) as raw,
        proxy(raw + "/v1", tmp_path / "p.db", auth_admin_token="adm") as url,
    ):
        base = url.removesuffix("/v1")
        with httpx.Client(timeout=10) as http:
            body = {
                "model": "gpt-4o",
                "stream": True,
                "messages": [
                    {"role": "user", "content": "a long answer with many many words please"}
                ],
            }
            with http.stream(
                "POST",
                f"{url}/chat/completions",
                json=body,
                headers={"Authorization": "Bearer sk-d", "X-Conversation-Id": "gone"},
            ) as r:
                first = next(r.iter_raw())
                assert first.startswith(b"data: ")
            # The client hung up after the first chunk; the relay ends without committing.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                metrics = http.get(f"{base}/metrics").text
                if "context_proxy_active_streams 0.0" in metrics:
                    break
                time.sleep(0.05)
            assert "context_proxy_active_streams 0.0" in metrics
            stored = http.get(
                f"{base}/admin/conversations/gone",
                params={"tenant": tenant_of("sk-d")},
                headers={"Authorization": "Bearer adm"},
            )
            assert stored.status_code == 404


@pytest.mark.parametrize("streamed", [True, False])
def test_a_long_conversation_without_an_id_is_parsed_from_its_new_bytes(
    fake: tuple[MockUpstream, str], tmp_path: Path, reparsed: list[bool], streamed: bool
) -> None:
    """The SDK's own bodies (it puts `stream` before `messages`), with a tool round: after the
    first turn each request is parsed from its new bytes only, and what is forwarded is what
    the app sent."""
    upstream, upstream_url = fake
    history: list[Any] = [{"role": "system", "content": "You plan trips. " * 30}]
    with proxy(upstream_url, tmp_path / "p.db") as url:
        app = client(url)
        for turn in range(8):
            ask = "please call tool get_weather for Oslo" if turn == 4 else f"day {turn} " * 40
            history.append({"role": "user", "content": ask})
            answer = app.chat.completions.create(model="gpt-4o", messages=history, stream=streamed)
            message = assembled(answer) if streamed else answer.choices[0].message.model_dump()
            history.append(
                {k: v for k, v in message.items() if k in ("role", "content", "tool_calls") and v}
            )
            if message.get("tool_calls"):
                call_id = message["tool_calls"][0]["id"]
                history.append({"role": "tool", "tool_call_id": call_id, "content": "-3 degrees"})
            forwarded = upstream.chat_records()[-1].body["messages"]
            assert forwarded == history[: len(forwarded)]
    assert reparsed == [False] + [True] * 7


def assembled(stream: Any) -> dict[str, Any]:
    """The assistant message an app builds from a streamed answer."""
    content, calls = "", {}
    for chunk in stream:
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is None:
            continue
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] = tc.id or entry["id"]
            entry["name"] += (tc.function.name or "") if tc.function else ""
            entry["arguments"] += (tc.function.arguments or "") if tc.function else ""
    tool_calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in calls.values()
    ]
    return {"role": "assistant", "content": content or None, "tool_calls": tool_calls}
