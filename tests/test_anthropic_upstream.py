"""`/v1/messages` against an Anthropic upstream's edge cases (respx): failures, refusals,
broken streams, and what each leaves in the store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import respx
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import load_settings
from proxy.conversation import tenant_of
from proxy.store import ConvKey, MemoryStore

from .transports import FreshStreams

ANTHROPIC = "http://anthropic.test"
KEY = {"x-api-key": "sk-ant-client", "anthropic-version": "2023-06-01"}
BODY = {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


def events(*items: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in items)


START = {"type": "message_start", "message": {"id": "msg_1", "content": []}}
TEXT = [
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_stop", "index": 0},
]
END = [{"type": "message_delta", "delta": {"stop_reason": "end_turn"}}, {"type": "message_stop"}]


class Breaking(httpx.AsyncBaseTransport):
    """An upstream that sends the start of a stream, then drops the connection."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        async def body() -> AsyncIterator[bytes]:
            yield events(START, *TEXT)
            raise httpx.ReadError("connection reset", request=request)

        class Stream(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in body():
                    yield chunk

        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=Stream(), request=request)


def client(transport: httpx.AsyncBaseTransport, **env: str) -> tuple[TestClient, MemoryStore]:
    settings = load_settings(
        env={"CONTEXT_PROXY_ANTHROPIC_BASE_URL": ANTHROPIC, **env},
    )
    store = MemoryStore(ttl_s=3600)
    return TestClient(create_app(settings, transport=transport, store=store)), store


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    yield respx.MockRouter(assert_all_called=False, base_url=ANTHROPIC)


def stored(store: MemoryStore, conversation: str) -> Any:
    return asyncio.run(store.latest(ConvKey(tenant_of("sk-ant-client"), conversation)))


def test_a_stream_cut_by_the_upstream_ends_with_anthropics_error_event_and_stores_nothing() -> None:
    test, store = client(Breaking())
    with test:
        headers = {**KEY, "X-Conversation-Id": "cut"}
        r = test.post("/v1/messages", json={**BODY, "stream": True}, headers=headers)
    assert r.status_code == 200
    *_, last = [block for block in r.text.split("\n\n") if block.strip()]
    kind, data = last.split("\n", 1)
    assert kind == "event: error"
    error = json.loads(data.removeprefix("data: "))
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    assert stored(store, "cut") is None


def test_a_complete_stream_is_stored_and_an_unfinished_one_is_not(
    router: respx.MockRouter,
) -> None:
    test, store = client(FreshStreams(router))
    sse = {"content-type": "text/event-stream"}
    with test:
        router.post("/v1/messages").respond(200, content=events(START, *TEXT, *END), headers=sse)
        stream = {**BODY, "stream": True}
        test.post("/v1/messages", json=stream, headers={**KEY, "X-Conversation-Id": "done"})
        router.post("/v1/messages").respond(200, content=events(START, *TEXT), headers=sse)
        test.post("/v1/messages", json=stream, headers={**KEY, "X-Conversation-Id": "half"})
    latest = stored(store, "done")
    assert latest is not None
    assert latest.working[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hello"}],
    }
    assert stored(store, "half") is None


def test_upstream_failures_are_anthropic_shaped_and_errors_pass_unchanged(
    router: respx.MockRouter,
) -> None:
    test, _ = client(FreshStreams(router))
    with test:
        router.post("/v1/messages").mock(side_effect=httpx.ConnectError("refused"))
        unreachable = test.post("/v1/messages", json=BODY, headers=KEY)
        overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Busy"}}
        router.post("/v1/messages").respond(529, json=overloaded, headers={"retry-after": "3"})
        busy = test.post("/v1/messages", json=BODY, headers=KEY)
    assert unreachable.status_code == 502
    assert unreachable.json()["type"] == "error"
    assert unreachable.json()["error"]["type"] == "api_error"
    assert busy.status_code == 529 and busy.json() == overloaded
    assert busy.headers["retry-after"] == "3"


def test_a_refused_operator_key_is_the_proxys_own_message(router: respx.MockRouter) -> None:
    env = {
        "CONTEXT_PROXY_ANTHROPIC_API_KEY": "sk-ant-operator",
        "CONTEXT_PROXY_AUTH_CLIENT_KEYS": "sk-ant-client",
    }
    test, _ = client(FreshStreams(router), **env)
    refusal = {
        "type": "error",
        "error": {"type": "authentication_error", "message": "sk-ant-op***"},
    }
    with test:
        router.post("/v1/messages").respond(401, json=refusal)
        r = test.post("/v1/messages", json=BODY, headers=KEY)
        count = router.post("/v1/messages/count_tokens").respond(401, json=refusal)
        counted = test.post("/v1/messages/count_tokens", json=BODY, headers=KEY)
    assert r.status_code == 401 and "sk-ant-op" not in r.text
    assert r.json()["type"] == "error" and "anthropic.api_key" in r.json()["error"]["message"]
    assert counted.status_code == 401 and "sk-ant-op" not in counted.text
    assert count.calls.last.request.headers["x-api-key"] == "sk-ant-operator"
    assert "sk-ant-client" not in str(count.calls.last.request.headers)


def test_a_credential_of_one_provider_never_goes_to_the_other() -> None:
    from proxy.upstream import Provider, forward_headers, openai_side

    openai = Provider("openai", "https://api.openai.com/v1", "", "upstream.api_key")
    anthropic = Provider("anthropic", ANTHROPIC, "", "anthropic.api_key")
    sent = [("authorization", "Bearer sk-a"), ("x-api-key", "sk-ant-b"), ("api-key", "az-c")]
    assert forward_headers(sent, openai) == {"authorization": "Bearer sk-a", "api-key": "az-c"}
    assert forward_headers(sent, anthropic) == {
        "authorization": "Bearer sk-a",
        "x-api-key": "sk-ant-b",
    }
    # Embeddings for an Anthropic conversation: the OpenAI operator key, or nothing.
    assert openai_side({"authorization": "Bearer sk-ant-oat"}, "anthropic", "") == {}
    assert openai_side({"authorization": "Bearer x"}, "anthropic", "sk-op") == {
        "authorization": "Bearer sk-op"
    }


def test_conversations_that_differ_only_in_system_are_two(router: respx.MockRouter) -> None:
    test, _ = client(FreshStreams(router))
    answer = {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "x"}]}
    with test:
        router.post("/v1/messages").respond(200, json=answer)
        ids = {
            test.post("/v1/messages", json={**BODY, "system": s}, headers=KEY).headers[
                "x-conversation-id"
            ]
            for s in ("You are a pirate.", "You are a lawyer.", "You are a pirate.")
        }
    assert len(ids) == 2
