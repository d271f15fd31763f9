"""Hostile and broken input, store faults, metrics and logs: never a 500, never a leak."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import load_settings
from proxy.conversation import tenant_of
from proxy.mock import MockUpstream
from proxy.store import ConvKey, MemoryStore, StoreError, TurnCommit

from .factories import user

KEY = "sk-hardening-secret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def proxy_client() -> Iterator[tuple[TestClient, MemoryStore]]:
    upstream = MockUpstream()
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1",
            "CONTEXT_PROXY_SERVER_MAX_BODY_BYTES": "200000",
        }
    )
    store = MemoryStore(ttl_s=3600)
    app = create_app(settings, transport=httpx.ASGITransport(upstream.app), store=store)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, store


def ok_body(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [user("hi")], **extra}


def enc(value: Any) -> bytes:
    return json.dumps(value).encode()


DEEP = b'{"model": "gpt-4o", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"

MALFORMED: list[tuple[str, bytes, dict[str, str]]] = [
    ("empty", b"", {}),
    ("whitespace", b"   ", {}),
    ("truncated json", b'{"model": "gpt-4o", "messages": [', {}),
    ("not an object", b"[1, 2]", {}),
    ("null body", b"null", {}),
    ("string body", b'"hello"', {}),
    ("number body", b"42", {}),
    ("invalid utf-8", b'{"model": "\xff\xfe", "messages": []}', {}),
    (
        "lone surrogate",
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "\\ud800"}]}',
        {},
    ),
    ("deep nesting", DEEP, {}),
    ("model missing", enc({"messages": [user()]}), {}),
    ("model null", enc({"model": None, "messages": [user()]}), {}),
    ("model number", enc({"model": 4, "messages": [user()]}), {}),
    ("model empty", enc({"model": "", "messages": [user()]}), {}),
    ("messages missing", enc({"model": "gpt-4o"}), {}),
    ("messages null", enc({"model": "gpt-4o", "messages": None}), {}),
    ("messages object", enc({"model": "gpt-4o", "messages": {"role": "user"}}), {}),
    ("messages empty", enc({"model": "gpt-4o", "messages": []}), {}),
    ("message null", enc({"model": "gpt-4o", "messages": [None]}), {}),
    ("message string", enc({"model": "gpt-4o", "messages": ["hi"]}), {}),
    ("role missing", enc({"model": "gpt-4o", "messages": [{"content": "x"}]}), {}),
    (
        "role unknown",
        enc({"model": "gpt-4o", "messages": [{"role": "wizard", "content": "x"}]}),
        {},
    ),
    ("role list", enc({"model": "gpt-4o", "messages": [{"role": ["user"], "content": "x"}]}), {}),
    ("role number", enc({"model": "gpt-4o", "messages": [{"role": 1, "content": "x"}]}), {}),
    ("content number", enc({"model": "gpt-4o", "messages": [{"role": "user", "content": 1}]}), {}),
    ("content object", enc({"model": "gpt-4o", "messages": [{"role": "user", "content": {}}]}), {}),
    (
        "tool without id",
        enc({"model": "gpt-4o", "messages": [{"role": "tool", "content": "x"}]}),
        {},
    ),
    (
        "tool_calls not list",
        enc(
            {
                "model": "gpt-4o",
                "messages": [{"role": "assistant", "content": None, "tool_calls": "x"}],
            }
        ),
        {},
    ),
    (
        "tool call without id",
        enc(
            {
                "model": "gpt-4o",
                "messages": [
                    {"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}
                ],
            }
        ),
        {},
    ),
    ("max_tokens string", enc(ok_body(max_tokens="10")), {}),
    ("max_tokens negative", enc(ok_body(max_tokens=-1)), {}),
    ("max_tokens bool", enc(ok_body(max_completion_tokens=True)), {}),
    ("stream string", enc(ok_body(stream="yes")), {}),
    ("huge string", enc(ok_body(messages=[user("x" * 300_000)])), {}),
    ("form content type", b"model=gpt-4o", {"content-type": "application/x-www-form-urlencoded"}),
    ("text content type", enc(ok_body()), {"content-type": "text/plain"}),
    ("bad mode header", enc(ok_body()), {"x-context-mode": "sideways"}),
    ("bad strategy header", enc(ok_body()), {"x-context-strategy": "magic"}),
    ("bad conversation id", enc(ok_body()), {"x-conversation-id": "has space"}),
    ("long conversation id", enc(ok_body()), {"x-conversation-id": "a" * 500}),
    ("append unknown", enc(ok_body()), {"x-context-mode": "append", "x-conversation-id": "no"}),
    ("oversize header", enc(ok_body()), {"x-filler": "y" * 20_000}),
]


@pytest.mark.parametrize(("name", "body", "headers"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_requests_get_openai_shaped_4xx(
    proxy_client: tuple[TestClient, MemoryStore],
    name: str,
    body: bytes,
    headers: dict[str, str],
) -> None:
    client, _ = proxy_client
    headers = {"content-type": "application/json", **AUTH, **headers}
    r = client.post("/v1/chat/completions", content=body, headers=headers)
    if name == "oversize header":
        # A large but legal header is the upstream's business; the proxy stays healthy.
        assert r.status_code in (200, 431)
    else:
        assert 400 <= r.status_code < 500, (name, r.status_code, r.text)
        error = r.json()["error"]
        assert isinstance(error["message"], str) and error["message"]
        assert set(error) == {"message", "type", "param", "code"}
    assert client.get("/healthz").status_code == 200


def test_unknown_content_part_types_pass_through(
    proxy_client: tuple[TestClient, MemoryStore],
) -> None:
    client, store = proxy_client
    parts = [{"type": "text", "text": "look"}, {"type": "hologram", "hologram": {"id": "h1"}}]
    r = client.post(
        "/v1/chat/completions",
        headers={**AUTH, "x-conversation-id": "parts"},
        json={
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": parts}],
            "brand_new_option": {"x": 1},
        },
    )
    assert r.status_code == 200
    archived = asyncio.run(store.archive(ConvKey(tenant_of(KEY), "parts")))
    assert archived[0].message["content"] == parts


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "content",
                    "model",
                    "messages",
                    "tool_calls",
                    "tool_call_id",
                    "name",
                    "stream",
                    "max_tokens",
                    "x",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=st.one_of(
        json_values.map(enc),
        st.fixed_dictionaries(
            {"model": st.text(max_size=8), "messages": st.lists(json_values, max_size=4)}
        ).map(enc),
        st.binary(max_size=64),
    )
)
def test_generated_bodies_never_get_a_500(
    proxy_client: tuple[TestClient, MemoryStore], body: bytes
) -> None:
    client, _ = proxy_client
    r = client.post(
        "/v1/chat/completions", content=body, headers={**AUTH, "content-type": "application/json"}
    )
    assert r.status_code < 500, (body, r.status_code, r.text)
    if r.status_code != 200:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


class BrokenStore(MemoryStore):
    """A store whose backend went away: every operation fails."""

    async def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise StoreError("connection refused")

    commit = find_snapshot = latest = archive = delete = ping = _fail  # type: ignore[assignment]

    async def list_conversations(
        self, tenant: str | None, *, limit: int = 50, offset: int = 0
    ) -> Sequence[Any]:
        raise StoreError("connection refused")


def test_store_down_full_mode_serves_append_mode_503_health_reports_it() -> None:
    upstream = MockUpstream()
    settings = load_settings(env={"CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1"})
    app = create_app(
        settings, transport=httpx.ASGITransport(upstream.app), store=BrokenStore(ttl_s=60)
    )
    with TestClient(app) as client:
        r = client.post("/v1/chat/completions", json=ok_body(), headers=AUTH)
        assert r.status_code == 200
        assert "stateless" in r.headers["x-context-reduction"]
        r = client.post(
            "/v1/chat/completions",
            json=ok_body(),
            headers={**AUTH, "x-context-mode": "append", "x-conversation-id": "c"},
        )
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        health = client.get("/healthz")
        assert health.status_code == 503 and health.json()["store"] == "unreachable"
        metrics = client.get("/metrics").text
        assert 'context_proxy_store_errors_total{operation="find_snapshot"} 1.0' in metrics


class LateFailingStore(MemoryStore):
    """Queues full-history turns (as the SQLite store does) and then fails to write them."""

    async def commit(self, turn: TurnCommit, *, wait: bool = True) -> asyncio.Future[Any] | None:
        if wait:
            await super().commit(turn)
            return None
        written: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(
            written.set_exception, StoreError("database is locked")
        )
        return written


def test_a_turn_that_fails_to_be_written_after_the_answer_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    upstream = MockUpstream()
    settings = load_settings(env={"CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1"})
    app = create_app(
        settings, transport=httpx.ASGITransport(upstream.app), store=LateFailingStore(ttl_s=60)
    )
    with TestClient(app) as client, caplog.at_level(logging.ERROR, "context_proxy.chat"):
        r = client.post(
            "/v1/chat/completions", json=ok_body(), headers={**AUTH, "x-conversation-id": "late"}
        )
        assert r.status_code == 200
        metrics = client.get("/metrics").text
    assert 'context_proxy_store_errors_total{operation="commit"} 1.0' in metrics
    assert any(
        "could not store turn of late" in rec.getMessage() and "locked" in rec.getMessage()
        for rec in caplog.records
    )


def test_metrics_count_requests_reductions_and_tokens(
    proxy_client: tuple[TestClient, MemoryStore],
) -> None:
    client, _ = proxy_client
    client.post("/v1/chat/completions", json=ok_body(), headers=AUTH)
    client.post("/v1/chat/completions", content=b"{", headers=AUTH)
    text = client.get("/metrics").text
    assert 'context_proxy_requests_total{route="/v1/chat/completions",status="200"} 1.0' in text
    assert 'context_proxy_requests_total{route="/v1/chat/completions",status="400"} 1.0' in text
    assert 'context_proxy_reductions_total{kind="none"} 1.0' in text
    assert "context_proxy_upstream_latency_seconds_count" in text
    assert "context_proxy_active_streams 0.0" in text


def test_logs_hold_no_key_and_no_content(
    proxy_client: tuple[TestClient, MemoryStore], caplog: pytest.LogCaptureFixture
) -> None:
    client, _ = proxy_client
    secret_text = "my bank PIN is 90210"
    with caplog.at_level(logging.INFO):
        client.post(
            "/v1/chat/completions",
            json=ok_body(messages=[user(secret_text)]),
            headers={**AUTH, "x-conversation-id": "logged"},
        )
        client.post(
            "/v1/chat/completions",
            json=ok_body(messages=[user(secret_text)]),
            headers={**AUTH, "x-context-mode": "append", "x-conversation-id": "zz"},
        )
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "conversation=logged" in text  # the access line is there
    assert KEY not in text and secret_text not in text
