"""Adversarial checks: no path leaves the base, no client credential leaks, no unbounded metrics.

Requests go over real sockets to the real server (`http.client` sends a
path exactly as written, where httpx would normalise it first), in front of
a fake upstream that records what reached it.
"""

from __future__ import annotations

import http.client
import random
import string
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import load_settings
from proxy.metrics import route_of
from proxy.upstream import subpath

from .fake_upstream import FakeUpstream, create_fake_upstream
from .servers import run_server

pytestmark = pytest.mark.integration

OPERATOR_KEY = "sk-operator-secret"
CLIENT_KEY = "sk-client"

ESCAPES = [
    "/v1/%2e%2e/%2e%2e/internal/admin",
    "/v1/..%2f..%2finternal/admin",
    "/v1/../../x",
    "/v1/%252e%252e/x",
    "/v1/%25252e%25252e/x",
    "/v1/chat/completions/../../../x",
    "/v1/models/%2E%2E/%2E%2E/x",
    "/v1/./models",
    "/v1/models/..",
    "/v1/..\\..\\x",
    "/v1/%5c..%5c../x",
    "/v1/x%00y",
    "/v1/x%09y",
]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeUpstream, str]]:
    upstream = create_fake_upstream()
    with run_server(upstream.app) as upstream_url:
        settings = load_settings(
            env={
                "CONTEXT_PROXY_UPSTREAM_BASE_URL": upstream_url + "/v1",
                "CONTEXT_PROXY_UPSTREAM_API_KEY": OPERATOR_KEY,
                "CONTEXT_PROXY_AUTH_CLIENT_KEYS": CLIENT_KEY,
                "CONTEXT_PROXY_STORE_BACKEND": "memory",
            }
        )
        with run_server(create_app(settings)) as url:
            yield upstream, url


@pytest.fixture
def stack(servers: tuple[FakeUpstream, str]) -> tuple[FakeUpstream, str]:
    """The module's servers, with the upstream's record cleared for this test."""
    servers[0].requests.clear()
    return servers


def raw_request(url: str, method: str, path: str, headers: dict[str, str]) -> tuple[int, Any]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path", ESCAPES)
def test_no_path_shape_leaves_the_base_path(stack: tuple[FakeUpstream, str], path: str) -> None:
    upstream, url = stack
    status, body = raw_request(url, "GET", path, {"Authorization": f"Bearer {CLIENT_KEY}"})
    assert status == 400, body
    assert b"invalid_path" in body
    assert upstream.requests == [], "nothing reached the upstream"


def test_a_line_break_in_the_path_never_reaches_the_upstream(
    stack: tuple[FakeUpstream, str],
) -> None:
    upstream, url = stack
    path = "/v1/x%0d%0aInjected:%20yes"
    status, _ = raw_request(url, "GET", path, {"Authorization": f"Bearer {CLIENT_KEY}"})
    assert status in (400, 404)  # no route matches a decoded line break
    assert upstream.requests == []


def test_ordinary_paths_pass_as_sent(stack: tuple[FakeUpstream, str]) -> None:
    upstream, url = stack
    auth = {"Authorization": f"Bearer {CLIENT_KEY}"}
    assert raw_request(url, "GET", "/v1/models", auth)[0] == 200
    assert raw_request(url, "GET", "/v1/models/gpt-4o", auth)[0] == 200
    raw_request(url, "GET", "/v1/files/my%20file.jsonl?purpose=batch", auth)
    assert [r.path for r in upstream.requests] == [
        "/v1/models",
        "/v1/models/gpt-4o",
        "/v1/files/my file.jsonl",
    ]
    assert upstream.requests[-1].query == "purpose=batch"


@pytest.mark.parametrize("header", ["authorization", "api-key", "x-api-key"])
def test_no_client_credential_goes_upstream_next_to_the_operator_key(
    stack: tuple[FakeUpstream, str], header: str
) -> None:
    upstream, url = stack
    value = f"Bearer {CLIENT_KEY}" if header == "authorization" else CLIENT_KEY
    headers = {header: value}
    if header != "authorization":  # the proxy itself still wants the client's key
        headers["authorization"] = f"Bearer {CLIENT_KEY}"
        headers[header] = "sk-client-second-credential"
    with httpx.Client(base_url=url) as client:
        chat = client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            headers=headers,
        )
        models = client.get("/v1/models", headers=headers)
    assert chat.status_code == models.status_code == 200
    for seen in upstream.requests:
        assert seen.headers["authorization"] == f"Bearer {OPERATOR_KEY}"
        leaked = [k for k, v in seen.headers.items() if CLIENT_KEY in v]
        assert leaked == [], f"{seen.path} carried the client's key in {leaked}"


def test_side_calls_carry_only_the_allowed_headers() -> None:
    import asyncio

    from proxy.upstream import post_json

    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    async def call() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            headers = {
                "authorization": "Bearer sk-op",
                "openai-organization": "org-1",
                "x-api-key": "sk-anthropic",
                "cookie": "session=1",
                "x-custom": "yes",
            }
            await post_json(client, "http://up/v1/embeddings", {}, headers, 5)

    asyncio.run(call())
    (request,) = seen
    assert request.headers["authorization"] == "Bearer sk-op"
    assert request.headers["openai-organization"] == "org-1"
    for absent in ("x-api-key", "cookie", "x-custom"):
        assert absent not in request.headers


def test_metrics_labels_stay_bounded_whatever_paths_clients_send() -> None:
    settings = load_settings(
        env={
            "CONTEXT_PROXY_STORE_BACKEND": "memory",
            "CONTEXT_PROXY_AUTH_CLIENT_KEYS": CLIENT_KEY,
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://127.0.0.1:9/v1",
        }
    )
    rng = random.Random(7)
    with TestClient(create_app(settings)) as client:
        before = len(client.get("/metrics").text)
        for _ in range(300):
            word = "".join(rng.choices(string.ascii_lowercase, k=12))
            assert client.get(f"/v1/{word}/x").status_code == 401  # counted all the same
        after = client.get("/metrics").text
    assert "/v1/other" in after
    assert len(after) - before < 2000, "one series for all unknown routes"
    assert route_of("/v1/responses") == "/v1/responses"
    assert route_of("/v1/anything-else") == "/v1/other"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(b"/v1/models", "/v1/models"), (b"/v1/files/a%20b", "/v1/files/a%20b")],
)
def test_subpath_keeps_what_is_safe_as_sent(raw: bytes, expected: str) -> None:
    assert subpath(raw) == expected


def test_a_wrong_key_is_refused_before_the_body_is_read(
    stack: tuple[FakeUpstream, str],
) -> None:
    """A body that would fail parsing gets the 401, not the 400: it was never parsed."""
    _, url = stack
    with httpx.Client(base_url=url) as client:
        r = client.post(
            "/v1/chat/completions",
            content=b"{not json" + b" " * 100_000,
            headers={"authorization": "Bearer sk-wrong", "content-type": "application/json"},
        )
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
