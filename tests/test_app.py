"""The app with a respx-mocked upstream and a memory store: what is forwarded, answered, kept."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import load_settings
from proxy.conversation import tenant_of
from proxy.store import ConvKey, MemoryStore

from .factories import assistant, call, system, tool, user
from .transports import FreshStreams

UPSTREAM = "http://upstream.test/v1"
KEY = {"Authorization": "Bearer sk-client-one"}


def completion(content: str | None = "Hello back", tool_calls: list[Any] | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def sse(*chunks: dict[str, Any]) -> bytes:
    lines = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
    return b"".join(lines) + b"data: [DONE]\n\n"


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class Harness:
    def __init__(self, router: respx.MockRouter, store: MemoryStore, client: TestClient):
        self.router = router
        self.store = store
        self.client = client

    def forwarded(self, i: int = -1) -> dict[str, Any]:
        chat = [c for c in self.router.calls if c.request.url.path.endswith("/chat/completions")]
        return json.loads(chat[i].request.content)

    def chat(
        self, messages: list[Any], headers: dict[str, str] | None = None, **body: Any
    ) -> httpx.Response:
        return self.client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": messages, **body},
            headers={**KEY, **(headers or {})},
        )


def make(env: dict[str, str] | None = None) -> Iterator[Harness]:
    router = respx.MockRouter(assert_all_called=False, base_url=UPSTREAM)
    settings = load_settings(env={"CONTEXT_PROXY_UPSTREAM_BASE_URL": UPSTREAM, **(env or {})})
    store = MemoryStore(ttl_s=3600)
    app = create_app(settings, transport=FreshStreams(router), store=store)
    with TestClient(app) as client:
        yield Harness(router, store, client)


@pytest.fixture
def h() -> Iterator[Harness]:
    yield from make()


def test_answer_and_body_pass_through_unchanged(h: Harness) -> None:
    h.router.post("/chat/completions").respond(200, json=completion())
    r = h.chat(
        [system(), user("hi")],
        temperature=0.2,
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
    )
    assert r.status_code == 200
    assert r.json() == completion()
    sent = h.forwarded()
    assert sent["messages"] == [system(), user("hi")]
    assert sent["temperature"] == 0.2 and sent["tools"][0]["function"]["name"] == "f"
    assert r.headers["x-context-reduction"] == "none"
    assert int(r.headers["x-context-tokens-in"]) > 0
    assert r.headers["x-conversation-id"].startswith("conv_")


def test_an_unreduced_request_reaches_upstream_byte_for_byte(h: Harness) -> None:
    """Nothing to reduce: the client's own bytes go upstream (spacing, escapes, key order)."""
    h.router.post("/chat/completions").respond(200, json=completion())
    body = (
        b'{ "messages" : [ {"content":"caf\\u00e9 \\ud83d\\ude00 1.50","role":"user"} ],\n'
        b' "model":"gpt-4o", "temperature": 1.0, "metadata": {"z": 1, "a": [2.50, 1e3]} }'
    )
    r = h.client.post(
        "/v1/chat/completions",
        content=body,
        headers={**KEY, "content-type": "application/json", "X-Conversation-Id": "raw"},
    )
    assert r.status_code == 200 and r.headers["x-context-reduction"] == "none"
    assert h.router.calls.last.request.content == body
    # Once the history is reduced, the proxy writes the body itself.
    long = [system(), *[user(f"message {i} " + "word " * 400) for i in range(30)]]
    r = h.chat(
        long, model="gpt-4", headers={"X-Context-Strategy": "tokens", "X-Conversation-Id": "cut"}
    )
    sent = h.forwarded()
    assert r.status_code == 200 and r.headers["x-context-reduction"] != "none"
    assert len(sent["messages"]) < len(long)
    assert (
        h.router.calls.last.request.content
        != json.dumps({"model": "gpt-4o", "messages": long}).encode()
    )


def test_proxy_headers_never_reach_upstream(h: Harness) -> None:
    h.router.post("/chat/completions").respond(200, json=completion())
    h.chat(
        [user("hi")],
        headers={
            "X-Conversation-Id": "c1",
            "X-Context-Strategy": "tokens",
            "X-Context-Mode": "full",
        },
    )
    sent = h.router.calls.last.request.headers
    assert not [k for k in sent if k.lower().startswith(("x-conversation", "x-context"))]
    assert sent["authorization"] == "Bearer sk-client-one"


def test_turn_is_stored_and_next_turn_continues_it(h: Harness) -> None:
    h.router.post("/chat/completions").respond(200, json=completion("first answer"))
    first = [system(), user("one")]
    r1 = h.chat(first)
    conv_id = r1.headers["x-conversation-id"]
    key = ConvKey(tenant_of("sk-client-one"), conv_id)
    stored = asyncio.run(h.store.latest(key))
    assert stored is not None
    assert stored.working[-1] == {"role": "assistant", "content": "first answer"}
    r2 = h.chat([*first, assistant("first answer"), user("two")])
    assert r2.headers["x-conversation-id"] == conv_id
    archive = asyncio.run(h.store.archive(key))
    assert [a.message["content"] for a in archive] == [
        system()["content"],
        "one",
        "first answer",
        "two",
        "first answer",
    ]


def test_append_mode_supplies_the_stored_history(h: Harness) -> None:
    h.router.post("/chat/completions").respond(200, json=completion("a1"))
    h.chat([system(), user("q1")], headers={"X-Conversation-Id": "talk"})
    h.chat([user("q2")], headers={"X-Conversation-Id": "talk", "X-Context-Mode": "append"})
    assert h.forwarded()["messages"] == [system(), user("q1"), assistant("a1"), user("q2")]


def test_append_mode_unknown_conversation_is_404(h: Harness) -> None:
    r = h.chat([user("q")], headers={"X-Conversation-Id": "nope", "X-Context-Mode": "append"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "conversation_not_found"


def test_another_key_never_sees_the_conversation(h: Harness) -> None:
    h.router.post("/chat/completions").respond(200, json=completion("secret"))
    h.chat([user("q1")], headers={"X-Conversation-Id": "shared-id"})
    r = h.client.post(
        "/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [user("q2")]},
        headers={
            "Authorization": "Bearer sk-other",
            "X-Conversation-Id": "shared-id",
            "X-Context-Mode": "append",
        },
    )
    assert r.status_code == 404


def test_streamed_tool_call_is_relayed_and_assembled(h: Harness) -> None:
    body = sse(
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({}, "tool_calls"),
    )
    h.router.post("/chat/completions").respond(
        200, content=body, headers={"content-type": "text/event-stream"}
    )
    r = h.chat([user("weather?")], headers={"X-Conversation-Id": "w"}, stream=True)
    assert r.status_code == 200 and r.content == body
    stored = asyncio.run(h.store.latest(ConvKey(tenant_of("sk-client-one"), "w")))
    assert stored is not None
    assert stored.working[-1] == assistant(
        None, tool_calls=[call("call_1", "get_weather", '{"city":"Paris"}')]
    )
    h.router.post("/chat/completions").respond(200, json=completion("sunny"))
    h.chat([tool("call_1", "18C")], headers={"X-Conversation-Id": "w", "X-Context-Mode": "append"})
    assert [m["role"] for m in h.forwarded()["messages"]] == ["user", "assistant", "tool"]


def test_incomplete_stream_commits_nothing(h: Harness) -> None:
    partial = b"data: " + json.dumps(chunk({"content": "par"})).encode() + b"\n\n"
    h.router.post("/chat/completions").respond(
        200, content=partial, headers={"content-type": "text/event-stream"}
    )
    h.chat([user("q")], headers={"X-Conversation-Id": "cut"}, stream=True)
    assert asyncio.run(h.store.latest(ConvKey(tenant_of("sk-client-one"), "cut"))) is None


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b"[]", 400),
        (b'{"model": "gpt-4o"}', 400),
        (b'{"model": "gpt-4o", "messages": []}', 400),
        (b'{"model": "gpt-4o", "messages": [{"role": "wizard", "content": "x"}]}', 400),
        (b'{"model": 3, "messages": [{"role": "user", "content": "x"}]}', 400),
        (b'{"model": "m", "messages": [{"role": "user", "content": 5}]}', 400),
        (b'{"model": "m", "messages": [{"role": "tool", "content": "x"}]}', 400),
        (b'{"model": "m", "messages": ["hi"]}', 400),
        (b'{"model": "m", "max_tokens": "9", "messages": [{"role": "user"}]}', 400),
        (b"\xff\xfe", 400),
        (b"", 400),
    ],
)
def test_bad_bodies_get_openai_shaped_400(h: Harness, body: bytes, status: int) -> None:
    r = h.client.post("/v1/chat/completions", content=body, headers=KEY)
    assert r.status_code == status
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert not h.router.calls


def test_oversize_body_is_413() -> None:
    for h in make({"CONTEXT_PROXY_SERVER_MAX_BODY_BYTES": "1000"}):
        r = h.chat([user("x" * 2000)])
        assert r.status_code == 413
        assert r.json()["error"]["code"] == "request_too_large"


def test_upstream_errors_reach_the_client_unchanged(h: Harness) -> None:
    err = {
        "error": {
            "message": "Rate limit",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    h.router.post("/chat/completions").respond(429, json=err, headers={"retry-after": "7"})
    r = h.chat([user("q")], headers={"X-Conversation-Id": "rl"})
    assert r.status_code == 429 and r.headers["retry-after"] == "7" and r.json() == err
    assert asyncio.run(h.store.latest(ConvKey(tenant_of("sk-client-one"), "rl"))) is None


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (httpx.ConnectError("refused"), 502),
        (httpx.ReadTimeout("slow"), 504),
        (httpx.ConnectTimeout("slow"), 502),
    ],
)
def test_transport_failures_map_to_502_and_504(
    h: Harness, exc: Exception, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    h.router.post("/chat/completions").mock(side_effect=exc)
    with caplog.at_level(logging.INFO, logger="context_proxy.access"):
        r = h.chat([user("a private question")], headers={"X-Conversation-Id": "down"})
    assert r.status_code == status
    assert r.json()["error"]["type"] == "upstream_error"
    # The request still has its one access line, with the status the client got.
    lines = [rec for rec in caplog.records if rec.name == "context_proxy.access"]
    assert len(lines) == 1
    assert lines[0].__dict__["upstream_status"] == status
    assert lines[0].__dict__["conversation"] == "down"
    assert "private" not in lines[0].getMessage() and "sk-client-one" not in caplog.text


class Disconnecting(httpx.AsyncBaseTransport):
    """What httpx-aiohttp raised when the upstream closed the connection before answering."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        import aiohttp

        try:
            raise aiohttp.ServerDisconnectedError()
        except aiohttp.ServerDisconnectedError as exc:
            raise httpx.ConnectTimeout("Server disconnected", request=request) from exc


def test_a_502_names_the_transports_own_cause() -> None:
    """A transport may raise a coarse class (httpx-aiohttp: ConnectTimeout); say which cause."""
    settings = load_settings(env={"CONTEXT_PROXY_UPSTREAM_BASE_URL": UPSTREAM})
    app = create_app(settings, transport=Disconnecting(), store=MemoryStore(ttl_s=60))
    with TestClient(app) as client:
        r = client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [user("q")]},
            headers=KEY,
        )
    assert r.status_code == 502
    assert "ServerDisconnectedError" in r.json()["error"]["message"]


def test_other_v1_routes_pass_through(h: Harness) -> None:
    h.router.get("/models").respond(
        200, json={"object": "list", "data": []}, headers={"x-request-id": "r1"}
    )
    h.router.post("/embeddings").respond(200, json={"data": [{"embedding": [0.5]}]})
    r = h.client.get("/v1/models?limit=2", headers=KEY)
    assert r.status_code == 200 and r.json() == {"object": "list", "data": []}
    assert r.headers["x-request-id"] == "r1"
    assert h.router.calls.last.request.url.query == b"limit=2"
    r = h.client.post(
        "/v1/embeddings",
        json={"model": "e", "input": "hi"},
        headers={**KEY, "X-Context-Mode": "append"},
    )
    assert r.json() == {"data": [{"embedding": [0.5]}]}
    sent = h.router.calls.last.request
    assert json.loads(sent.content) == {"model": "e", "input": "hi"}
    assert "x-context-mode" not in sent.headers


def test_configured_upstream_key_replaces_the_clients_and_requires_client_keys() -> None:
    env = {
        "CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-owner",
        "CONTEXT_PROXY_AUTH_CLIENT_KEYS": "team-key",
    }
    for h in make(env):
        h.router.post("/chat/completions").respond(200, json=completion())
        assert h.chat([user("q")]).status_code == 401
        r = h.client.post(
            "/v1/chat/completions",
            headers={"Authorization": "Bearer team-key"},
            json={"model": "gpt-4o", "messages": [user("q")]},
        )
        assert r.status_code == 200
        assert h.router.calls.last.request.headers["authorization"] == "Bearer sk-owner"


def test_healthz_reports_the_store(h: Harness) -> None:
    r = h.client.get("/healthz")
    assert r.status_code == 200 and r.json()["store"] == "ok"


def test_admin_routes_need_the_token() -> None:
    for h in make({"CONTEXT_PROXY_AUTH_ADMIN_TOKEN": "adm"}):
        h.router.post("/chat/completions").respond(200, json=completion("a"))
        h.chat([user("q")], headers={"X-Conversation-Id": "c9"})
        tenant = tenant_of("sk-client-one")
        url = f"/admin/conversations/c9?tenant={tenant}"
        assert h.client.get(url).status_code == 401
        assert h.client.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
        r = h.client.get(url, headers={"Authorization": "Bearer adm"})
        assert r.status_code == 200 and len(r.json()["archive"]) == 2
        # Without the tenant only keyless clients' conversations are looked at: the 404 says so.
        nobody = h.client.get("/admin/conversations/c9", headers={"Authorization": "Bearer adm"})
        assert nobody.status_code == 404 and "?tenant=" in nobody.json()["error"]["message"]
        assert h.client.delete(url, headers={"Authorization": "Bearer adm"}).status_code == 200
        gone = h.client.get(url, headers={"Authorization": "Bearer adm"})
        assert gone.status_code == 404
        assert gone.json()["error"]["message"] == "No such conversation."


def test_recording_keeps_request_bodies_for_simulate(tmp_path: Any) -> None:
    path = tmp_path / "rec.jsonl"
    for h in make({"CONTEXT_PROXY_RECORD_ENABLED": "true", "CONTEXT_PROXY_RECORD_PATH": str(path)}):
        h.router.post("/chat/completions").respond(200, json=completion("a1"))
        h.chat([user("q1")])
        h.chat([user("q1"), assistant("a1"), user("q2")], temperature=0)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [len(body["messages"]) for body in lines] == [1, 3]
    assert lines[1]["temperature"] == 0
    assert "sk-client-one" not in path.read_text()


def test_admin_list_is_paginated_and_filtered_by_tenant() -> None:
    for h in make({"CONTEXT_PROXY_AUTH_ADMIN_TOKEN": "adm"}):
        h.router.post("/chat/completions").respond(200, json=completion("a"))
        for i in range(5):
            h.chat([user(f"q{i}")], headers={"X-Conversation-Id": f"list-{i}"})
        admin = {"Authorization": "Bearer adm"}
        assert h.client.get("/admin/conversations").status_code == 401
        page1 = h.client.get("/admin/conversations?limit=3", headers=admin).json()
        page2 = h.client.get("/admin/conversations?limit=3&offset=3", headers=admin).json()
        ids = [c["id"] for c in page1["data"] + page2["data"]]
        assert len(page1["data"]) == 3 and sorted(ids) == [f"list-{i}" for i in range(5)]
        other = h.client.get(
            f"/admin/conversations?tenant={tenant_of('sk-nobody')}", headers=admin
        ).json()
        assert other["data"] == []
        # '²' is a digit to str.isdigit() but not to int(); so many digits int() refuses.
        for limit in ("0", "abc", "%C2%B2", "1" * 5000):
            r = h.client.get(f"/admin/conversations?limit={limit}", headers=admin)
            assert r.status_code == 400 and r.json()["error"]["param"] == "limit"


def test_a_cookie_an_upstream_sets_never_reaches_another_request(h: Harness) -> None:
    h.router.post("/chat/completions").respond(
        200, json=completion(), headers={"set-cookie": "session=tenant-one; Path=/"}
    )
    h.router.get("/models").respond(
        200, json={"data": []}, headers={"set-cookie": "other=tenant-one; Path=/"}
    )
    first = h.chat([user("hi")])
    assert first.headers["set-cookie"].startswith("session=")  # relayed to its own client
    for key in ("sk-client-one", "sk-client-two"):
        h.client.cookies.clear()  # each request from a client that holds no cookie
        h.client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
        h.client.cookies.clear()
        h.chat([user("hello")], headers={"Authorization": f"Bearer {key}"})
    assert [c.request.headers.get("cookie") for c in h.router.calls] == [None] * 5


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/chat/completions", {"model": "gpt-4o", "messages": [user("hi")]}),
        ("/v1/responses", {"model": "gpt-4o", "input": "hi", "store": False}),
        # The provider holds this one's history: it goes upstream as sent.
        ("/v1/responses", {"model": "gpt-4o", "input": "hi", "previous_response_id": "resp_0"}),
        ("/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 9, "messages": [user("hi")]}),
    ],
)
def test_conversation_routes_forward_the_clients_query_string(
    route: str, body: dict[str, Any]
) -> None:
    """Azure's deployments are chosen by `?api-version=`: a reduced turn goes with it too."""
    for h in make({"CONTEXT_PROXY_ANTHROPIC_BASE_URL": "http://upstream.test"}):
        h.router.post(route[3:]).respond(200, json={"id": "x"})
        r = h.client.post(f"{route}?api-version=2025-04-01-preview", json=body, headers=KEY)
        assert r.status_code == 200, r.text
        assert h.router.calls.last.request.url.query == b"api-version=2025-04-01-preview"


@pytest.mark.parametrize(
    ("route", "field", "param"),
    [("/v1/chat/completions", "messages", "messages"), ("/v1/responses", "input", "input")],
)
def test_a_history_too_large_for_the_window_names_the_routes_field(
    route: str, field: str, param: str
) -> None:
    for h in make({"CONTEXT_PROXY_MODELS_TINY": "300"}):
        r = h.client.post(
            route, json={"model": "tiny", field: [system("word " * 2000), user("hi")]}, headers=KEY
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "context_length_exceeded"
        assert r.json()["error"]["param"] == param
