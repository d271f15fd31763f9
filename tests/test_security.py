"""Adversarial checks: no path leaves the base, no client credential leaks, no unbounded metrics.

Requests go over real sockets to the real server (`http.client` sends a
path exactly as written, where httpx would normalise it first), in front of
a fake upstream that records what reached it.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import random
import socket
import string
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import load_settings
from proxy.metrics import route_of
from proxy.mock import MockUpstream
from proxy.settings import requires_client_key
from proxy.upstream import subpath

from .servers import free_port, proxy_process, run_server

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


@contextlib.contextmanager
def proxy_before_mock_upstream(**env: str) -> Iterator[tuple[MockUpstream, str]]:
    """The proxy (memory store, `env` on top) in front of a recording fake upstream."""
    upstream = MockUpstream()
    with run_server(upstream.app) as upstream_url:
        settings = load_settings(
            env={
                "CONTEXT_PROXY_UPSTREAM_BASE_URL": upstream_url + "/v1",
                "CONTEXT_PROXY_STORE_BACKEND": "memory",
                **{"CONTEXT_PROXY_" + k: v for k, v in env.items()},
            }
        )
        with run_server(create_app(settings)) as url:
            yield upstream, url


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[MockUpstream, str]]:
    with proxy_before_mock_upstream(
        UPSTREAM_API_KEY=OPERATOR_KEY, AUTH_CLIENT_KEYS=CLIENT_KEY
    ) as stack:
        yield stack


@pytest.fixture
def stack(servers: tuple[MockUpstream, str]) -> tuple[MockUpstream, str]:
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
def test_no_path_shape_leaves_the_base_path(stack: tuple[MockUpstream, str], path: str) -> None:
    upstream, url = stack
    status, body = raw_request(url, "GET", path, {"Authorization": f"Bearer {CLIENT_KEY}"})
    assert status == 400, body
    assert b"invalid_path" in body
    assert upstream.requests == [], "nothing reached the upstream"


def test_a_line_break_in_the_path_never_reaches_the_upstream(
    stack: tuple[MockUpstream, str],
) -> None:
    upstream, url = stack
    path = "/v1/x%0d%0aInjected:%20yes"
    status, _ = raw_request(url, "GET", path, {"Authorization": f"Bearer {CLIENT_KEY}"})
    assert status in (400, 404)  # no route matches a decoded line break
    assert upstream.requests == []


def test_ordinary_paths_pass_as_sent(stack: tuple[MockUpstream, str]) -> None:
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
    stack: tuple[MockUpstream, str], header: str
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
    stack: tuple[MockUpstream, str],
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


def test_a_header_outside_ascii_is_a_400_not_a_502(stack: tuple[MockUpstream, str]) -> None:
    upstream, url = stack
    host, port = url.removeprefix("http://").split(":")
    body = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'
    for path in ("/v1/chat/completions", "/v1/models"):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode()
                + f"Authorization: Bearer {CLIENT_KEY}\r\n".encode()
                + b"Content-Type: application/json\r\nX-Note: caf\xe9\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            answer = read_all(sock)
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b"invalid_header" in answer
    assert upstream.requests == []


def test_content_nested_too_deep_to_re_encode_is_a_400(stack: tuple[MockUpstream, str]) -> None:
    """orjson reads 1,024 levels but writes 254: deeper content is the client's error, not a 502."""
    upstream, url = stack
    for depth in (255, 300, 1000):
        content = "[" * depth + "]" * depth
        body = (
            '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": ' + content + "}]}"
        )
        with httpx.Client(base_url=url) as client:
            r = client.post(
                "/v1/chat/completions",
                content=body.encode(),
                headers={
                    "authorization": f"Bearer {CLIENT_KEY}",
                    "content-type": "application/json",
                },
            )
        assert r.status_code == 400, (depth, r.text)
        assert "nested" in r.json()["error"]["message"]
    assert upstream.chat_requests() == []


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        data = sock.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


@pytest.fixture(scope="module")
def open_proxy() -> Iterator[tuple[MockUpstream, str]]:
    """Keyless clients required to send a key, and a short body deadline."""
    with proxy_before_mock_upstream(
        AUTH_REQUIRE_CLIENT_KEY="true", SERVER_BODY_TIMEOUT_S="0.5"
    ) as stack:
        yield stack


def test_keyless_requests_are_refused_where_a_key_is_required(
    open_proxy: tuple[MockUpstream, str],
) -> None:
    upstream, url = open_proxy
    upstream.requests.clear()
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=url) as client:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
        assert client.get("/v1/models").status_code == 401
        assert upstream.requests == []
        r = client.post("/v1/chat/completions", json=body, headers={"authorization": "Bearer a"})
        assert r.status_code == 200


def test_require_client_key_follows_the_listening_address() -> None:
    def required(**env: str) -> bool:
        return requires_client_key(
            load_settings(env={"CONTEXT_PROXY_" + k: v for k, v in env.items()})
        )

    assert not required()
    assert not required(SERVER_HOST="::1")
    assert required(SERVER_HOST="0.0.0.0")
    assert required(SERVER_HOST="10.1.2.3")
    assert not required(SERVER_HOST="0.0.0.0", AUTH_REQUIRE_CLIENT_KEY="false")
    assert required(AUTH_REQUIRE_CLIENT_KEY="true")


def test_a_body_sent_too_slowly_gets_a_408_and_frees_the_connection(
    open_proxy: tuple[MockUpstream, str],
) -> None:
    _, url = open_proxy
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        started = time.monotonic()
        answer = read_all(sock)
        closed_after = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert closed_after < 3, "the server closes the connection with the 408"
    assert b"body_timeout_s" in answer


def test_a_client_gone_during_the_body_is_one_info_line(
    open_proxy: tuple[MockUpstream, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, url = open_proxy
    host, port = url.removeprefix("http://").split(":")
    caplog.set_level(logging.INFO)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        time.sleep(0.1)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
        "disconnected" in r.getMessage() for r in caplog.records
    ):
        time.sleep(0.02)
    gone = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert len(gone) == 1 and gone[0].levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_served_answers_carry_one_date_and_no_upstream_server_header(tmp_path: Path) -> None:
    upstream = MockUpstream()
    with run_server(upstream.app) as upstream_url:
        port = free_port()
        process = proxy_process(
            port,
            CONTEXT_PROXY_UPSTREAM_BASE_URL=upstream_url + "/v1",
            CONTEXT_PROXY_STORE_PATH=str(tmp_path / "p.db"),
        )
        try:
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
            with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
                auth = {"authorization": "Bearer k"}
                for r in (
                    client.post("/v1/chat/completions", json=body, headers=auth),
                    client.get("/v1/models", headers=auth),
                    client.get("/healthz"),
                    client.post("/v1/chat/completions", content=b"{", headers=auth),
                ):
                    assert len(r.headers.get_list("date")) == 1, r.headers
                    assert "uvicorn" not in r.headers.get("server", "")
        finally:
            process.terminate()
            process.wait(10)
