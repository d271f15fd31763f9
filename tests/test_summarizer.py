"""The summariser: prompt, chunking of spans larger than its window, failures, circuit breaker."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from proxy.dialects.anthropic import ANTHROPIC
from proxy.reduction.types import SummaryRequest
from proxy.summarizer import (
    SUMMARY_PROMPT,
    AnthropicRoute,
    CircuitBreaker,
    Summarizer,
    SummarizerUnavailable,
    transcript,
)

from .factories import assistant, call, tool, user


def answering(calls: list[dict[str, Any]], status: int = 200, content: Any = "SUM") -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "down"}})
        text = content if content != "SUM" else f"SUM{len(calls)}"
        return httpx.Response(
            200, json={"choices": [{"message": {"content": text}}], "usage": {"total_tokens": 10}}
        )

    return handler


def summarizer(
    handler: Any, window: int = 100_000, breaker: CircuitBreaker | None = None, model: str = ""
) -> Summarizer:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return Summarizer(
        client,
        base_url="http://up/v1",
        model=model,
        timeout_s=5,
        window_tokens=window,
        breaker=breaker,
    )


def test_transcript_quotes_roles_tool_calls_and_results() -> None:
    text = transcript(
        SummaryRequest(
            "k",
            (
                user("book a flight"),
                assistant(None, tool_calls=[call("c1", "search", '{"to": "Oslo"}')]),
                tool("c1", "3 flights found"),
            ),
            previous=("The user lives in Bergen.",),
        )
    )
    assert "The user lives in Bergen." in text
    assert "user: book a flight" in text
    assert 'search({"to": "Oslo"})' in text
    assert "tool result (c1): 3 flights found" in text


def test_transcript_quotes_anthropic_results_as_tool_output() -> None:
    calls = [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.py"}}]
    results = [{"type": "tool_result", "tool_use_id": "t1", "content": "def main(): ..."}]
    text = transcript(
        SummaryRequest(
            "k",
            (
                {"role": "user", "content": "read a.py"},
                {"role": "assistant", "content": calls},
                {"role": "user", "content": results},
            ),
            dialect=ANTHROPIC,
        )
    )
    assert "user: read a.py" in text
    assert 'assistant: Read({"path":"a.py"})' in text
    assert "tool result (t1): def main(): ..." in text  # the file, not the user's words


def test_a_summary_goes_to_the_configured_model_with_the_prompt() -> None:
    calls: list[dict[str, Any]] = []
    s = summarizer(answering(calls), model="gpt-4o-mini")
    result = asyncio.run(
        s.summarize(
            SummaryRequest("k", (user("hi"),)),
            model="gpt-4o",
            headers={"authorization": "Bearer sk"},
        )
    )
    assert result.text == "SUM1" and result.tokens == 10
    assert calls[0]["model"] == "gpt-4o-mini"
    assert calls[0]["messages"][0] == {"role": "system", "content": SUMMARY_PROMPT}


def test_a_span_larger_than_the_window_is_summarised_in_chunks_then_merged() -> None:
    calls: list[dict[str, Any]] = []
    s = summarizer(answering(calls), window=2_000)  # about 4,000 characters per call
    span = tuple(user(f"fact {i}: " + "detail " * 100) for i in range(20))
    result = asyncio.run(s.summarize(SummaryRequest("k", span), model="m", headers={}))
    assert len(calls) > 2  # several chunks, then one merge
    assert all(len(c["messages"][1]["content"]) <= 4_000 + 100 for c in calls)
    merge = calls[-1]["messages"][1]["content"]
    assert all(f"SUM{i}" in merge for i in range(1, len(calls)))
    assert result.text == f"SUM{len(calls)}"


def test_each_call_fits_the_window_of_the_model_that_writes_it() -> None:
    """Without a summarizer_model the conversation's own model summarises: its window,
    not the default model's, bounds each call, and one long message never passes half."""
    calls: list[dict[str, Any]] = []
    client = httpx.AsyncClient(transport=httpx.MockTransport(answering(calls)))
    windows = {"small-local": 2_000}
    s = Summarizer(
        client,
        base_url="http://up/v1",
        model="",
        timeout_s=5,
        window_tokens=128_000,
        window_of=lambda model: windows.get(model, 128_000),
    )
    span = (
        user("a long file: " + "line of text " * 2_000),
        *(user(f"fact {i}: " + "detail " * 100) for i in range(20)),
    )
    asyncio.run(s.summarize(SummaryRequest("k", span), model="small-local", headers={}))
    assert len(calls) > 2  # chunks, then a merge
    assert all(len(c["messages"][1]["content"]) <= 4_000 + 100 for c in calls)
    calls.clear()
    asyncio.run(s.summarize(SummaryRequest("k", span), model="gpt-4o", headers={}))
    assert len(calls) == 1  # a large window takes the span in one call


@pytest.mark.parametrize(("status", "content"), [(500, "SUM"), (200, ""), (200, None)])
def test_failures_and_empty_answers_raise_unavailable(status: int, content: Any) -> None:
    s = summarizer(answering([], status=status, content=content))
    with pytest.raises(SummarizerUnavailable):
        asyncio.run(s.summarize(SummaryRequest("k", (user("hi"),)), model="m", headers={}))


def test_the_breaker_opens_after_three_failures_and_half_opens_after_cooldown() -> None:
    now = [0.0]
    breaker = CircuitBreaker(threshold=3, cooldown_s=30, clock=lambda: now[0])
    calls: list[dict[str, Any]] = []
    s = summarizer(answering(calls, status=503), breaker=breaker)
    request = SummaryRequest("k", (user("hi"),))
    for _ in range(5):
        with pytest.raises(SummarizerUnavailable):
            asyncio.run(s.summarize(request, model="m", headers={}))
    assert len(calls) == 3  # the last two were refused without a call
    now[0] = 31.0
    with pytest.raises(SummarizerUnavailable):
        asyncio.run(s.summarize(request, model="m", headers={}))
    assert len(calls) == 4  # one trial call after the cooldown, which failed again
    assert breaker.open


def recording(seen: list[httpx.Request]) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/messages"):
            content = [{"type": "text", "text": "SUM"}]
            usage = {"input_tokens": 7, "output_tokens": 3}
            return httpx.Response(200, json={"type": "message", "content": content, "usage": usage})
        return httpx.Response(200, json={"choices": [{"message": {"content": "SUM"}}]})

    return handler


def routed(
    seen: list[httpx.Request], api: str, openai_key: str = "", anthropic_key: str = ""
) -> Summarizer:
    client = httpx.AsyncClient(transport=httpx.MockTransport(recording(seen)))
    route = AnthropicRoute("http://claude/v1/messages", "claude-haiku", anthropic_key, "2023-06-01")
    return Summarizer(
        client,
        base_url="http://up/v1",
        model="gpt-mini",
        timeout_s=5,
        window_tokens=100_000,
        api=api,
        openai_key=openai_key,
        anthropic=route,
    )


ANTHROPIC_CLIENT = {
    "authorization": "Bearer sk-ant-client",
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "oauth-2025-04-20",  # an OAuth token is refused without it
}
OPENAI_CLIENT = {"authorization": "Bearer sk-openai-client"}


@pytest.mark.parametrize(
    ("api", "dialect", "given", "keys", "url", "sent", "absent"),
    [
        # auto: an Anthropic conversation through Anthropic, with the client's own key
        (
            "auto",
            "anthropic",
            ANTHROPIC_CLIENT,
            {},
            "http://claude/v1/messages",
            {"authorization": "Bearer sk-ant-client", "anthropic-beta": "oauth-2025-04-20"},
            (),
        ),
        # an operator key replaces the client's credentials and their beta flags
        (
            "auto",
            "anthropic",
            ANTHROPIC_CLIENT,
            {"anthropic_key": "sk-ant-op"},
            "http://claude/v1/messages",
            {"x-api-key": "sk-ant-op"},
            ("authorization", "anthropic-beta"),
        ),
        # auto: a chat conversation through chat, as before
        (
            "auto",
            "chat",
            OPENAI_CLIENT,
            {},
            "http://up/v1/chat/completions",
            {"authorization": "Bearer sk-openai-client"},
            ("x-api-key",),
        ),
        # chat for an Anthropic conversation: the Anthropic key never goes to OpenAI
        (
            "chat",
            "anthropic",
            ANTHROPIC_CLIENT,
            {},
            "http://up/v1/chat/completions",
            {},
            ("authorization", "x-api-key"),
        ),
        (
            "chat",
            "anthropic",
            ANTHROPIC_CLIENT,
            {"openai_key": "sk-op"},
            "http://up/v1/chat/completions",
            {"authorization": "Bearer sk-op"},
            ("x-api-key",),
        ),
        # anthropic for a chat conversation: the OpenAI key never goes to Anthropic
        (
            "anthropic",
            "chat",
            OPENAI_CLIENT,
            {"anthropic_key": "sk-ant-op"},
            "http://claude/v1/messages",
            {"x-api-key": "sk-ant-op"},
            ("authorization", "anthropic-beta"),
        ),
    ],
)
def test_each_summary_carries_only_its_providers_credentials(
    api: str,
    dialect: str,
    given: dict[str, str],
    keys: dict[str, str],
    url: str,
    sent: dict[str, str],
    absent: tuple[str, ...],
) -> None:
    from proxy.dialects.anthropic import ANTHROPIC
    from proxy.dialects.chat_completions import CHAT

    seen: list[httpx.Request] = []
    items = ANTHROPIC if dialect == "anthropic" else CHAT
    request = SummaryRequest("k", (user("hello there"),), (), items)
    summarizer = routed(seen, api, **keys)
    result = asyncio.run(summarizer.summarize(request, model="conv-model", headers=given))
    assert result.text == "SUM"
    (call_,) = seen
    assert str(call_.url) == url
    for name, value in sent.items():
        assert call_.headers[name] == value
    for name in absent:
        assert name not in call_.headers
    body = json.loads(call_.content)
    if url.endswith("/messages"):
        assert body["model"] == "claude-haiku" and body["max_tokens"] > 0
        assert call_.headers["anthropic-version"] == "2023-06-01"
        assert body["system"] == SUMMARY_PROMPT
    else:
        assert body["model"] == "gpt-mini"
