"""Our transports (reqwest, aiohttp) and the client's direct `send`, against real sockets.

Each case is what an upstream does to a proxy in production: answer JSON,
stream events slowly, send a large or compressed body, take a streamed
upload, refuse, hang, hang up, or cut an answer short. Servers are uvicorn
(tests/servers.py) or, for the misbehaving ones, a raw asyncio socket server
in the test's own loop. Every case runs over each transport: they must say
the same thing of the same event.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import respx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy import transports
from proxy.settings import UpstreamSettings
from proxy.transports import EAGER_BYTES
from proxy.transports.over_aiohttp import AiohttpTransport
from proxy.transports.over_reqwest import ReqwestTransport
from proxy.upstream import UpstreamClient, create_client, transport_error

from .servers import run_server

BIG = bytes(range(256)) * (EAGER_BYTES // 256 + 4096)  # past the eager limit
RELEASE = threading.Event()
SEEN: list[tuple[dict[str, str], bytes]] = []


async def answer(request: Request) -> Response:
    port = request.client.port if request.client else 0  # one per connection
    return JSONResponse(
        {"id": "x", "path": request.url.path, "port": port}, headers={"x-request-id": "r1"}
    )


async def events(request: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield b"data: one\n\n"
        # The second event waits for the test to have read the first: a
        # transport that buffered the stream would never deliver the first.
        await asyncio.to_thread(RELEASE.wait, 10)
        yield b"data: two\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


async def big(request: Request) -> Response:
    return Response(BIG, media_type="application/octet-stream")


async def gzipped(request: Request) -> Response:
    return Response(
        gzip.compress(b'{"ok": true}'),
        media_type="application/json",
        headers={"content-encoding": "gzip"},
    )


async def echo(request: Request) -> Response:
    body = await request.body()
    SEEN.append((dict(request.headers), body))
    return Response(body, media_type="application/octet-stream")


async def redirect(request: Request) -> Response:
    return Response(status_code=302, headers={"location": "/answer"})


APP = Starlette(
    routes=[
        Route("/answer", answer, methods=["GET", "POST"]),
        Route("/events", events),
        Route("/big", big),
        Route("/gzipped", gzipped),
        Route("/echo", echo, methods=["POST"]),
        Route("/redirect", redirect),
    ]
)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with run_server(APP) as url:
        yield url


KINDS = {"reqwest": ReqwestTransport, "aiohttp": AiohttpTransport}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def client(kind: str, **limits: float) -> UpstreamClient:
    settings = UpstreamSettings(transport=kind, **limits)  # type: ignore[arg-type]
    made = create_client(settings)
    assert isinstance(made._direct, KINDS[kind])
    return made


@pytest.mark.asyncio
async def test_a_json_answer_reads_whole_or_relays_raw(server: str, kind: str) -> None:
    async with client(kind) as http:
        request = http.post_request(
            httpx.URL(server + "/answer"), b"{}", {"content-type": "application/json"}
        )
        response = await http.send(request, stream=True)
        assert response.status_code == 200
        assert response.request is request
        assert response.headers["x-request-id"] == "r1"
        content = await response.aread()
        assert response.json()["path"] == "/answer"
        await response.aclose()
        again = http.post_request(httpx.URL(server + "/answer"), b"{}", {})
        relayed = await http.send(again, stream=True)
        raw = b"".join([chunk async for chunk in relayed.aiter_raw()])
        assert orjson.loads(raw)["path"] == orjson.loads(content)["path"] == "/answer"
        await relayed.aclose()
        # Sequential requests reuse the one pooled connection.
        ports = {response.json()["port"]}
        for _ in range(5):
            again = await http.get(server + "/answer")
            assert again.status_code == 200
            ports.add(again.json()["port"])
        assert len(ports) == 1


@pytest.mark.asyncio
async def test_event_streams_take_aiohttp_under_reqwest(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyreqwest's per-chunk hand-over costs more than it saves on streams: see transports/."""
    took: list[str] = []
    for name, cls in KINDS.items():
        real = cls.handle_async_request

        async def spy(self: Any, request: httpx.Request, real: Any = real, name: str = name) -> Any:
            took.append(name)
            return await real(self, request)

        monkeypatch.setattr(cls, "handle_async_request", spy)
    async with client("reqwest") as http:
        url = httpx.URL(server + "/answer")
        for events in (False, True):
            request = http.post_request(url, b"{}", {}, events=events)
            response = await http.send(request)
            assert response.json()["path"] == "/answer"
    assert took == ["reqwest", "aiohttp"]
    async with client("aiohttp") as http:
        await http.send(http.post_request(url, b"{}", {}, events=True))
    assert took[2:] == ["aiohttp"]


def test_auto_takes_reqwest_only_where_its_extra_is_installed() -> None:
    """A plain install has no pyreqwest: `auto` is aiohttp, and asking for reqwest says why not."""
    import subprocess
    import sys

    made, events = transports.create("auto", httpx.Limits(), httpx.Timeout(5))
    assert isinstance(made, ReqwestTransport) and isinstance(events, AiohttpTransport)
    script = (
        "import sys\n"
        "sys.modules['pyreqwest'] = None  # as if the reqwest extra were not installed\n"
        "import httpx\n"
        "from proxy import transports\n"
        "from proxy.config import load_settings\n"
        "from proxy.errors import ConfigError\n"
        "made, events = transports.create('auto', httpx.Limits(), httpx.Timeout(5))\n"
        "print(type(made).__name__, events)\n"
        "try:\n"
        "    load_settings(env={'CONTEXT_PROXY_UPSTREAM_TRANSPORT': 'reqwest'})\n"
        "except ConfigError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "AiohttpTransport None", done.stdout + done.stderr
    assert "pip install 'context-proxy[reqwest]'" in lines[1]


def test_pass_through_routes_take_the_event_stream_transport(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass-through answer may be a stream (its body is not parsed): it goes as streams go."""
    from starlette.testclient import TestClient

    from proxy.app import create_app
    from proxy.config import load_settings

    took: list[str] = []
    for name, cls in KINDS.items():
        real = cls.handle_async_request

        async def spy(self: Any, request: httpx.Request, real: Any = real, name: str = name) -> Any:
            took.append(name)
            return await real(self, request)

        monkeypatch.setattr(cls, "handle_async_request", spy)
    settings = load_settings(env={"CONTEXT_PROXY_UPSTREAM_BASE_URL": server})
    with TestClient(create_app(settings)) as proxy:
        streamed = proxy.get("/v1/events", headers={"authorization": "Bearer sk-p"})
        answered = proxy.post("/v1/answer", json={}, headers={"authorization": "Bearer sk-p"})
    assert streamed.status_code == answered.status_code == 200
    assert answered.json()["path"] == "/answer"
    assert took == ["aiohttp", "aiohttp"]


@pytest.mark.asyncio
async def test_events_stream_as_they_come(server: str, kind: str) -> None:
    RELEASE.clear()
    async with client(kind) as http:
        request = http.build_request("GET", server + "/events")
        response = await asyncio.wait_for(http.send(request, stream=True), 5)
        chunks = response.aiter_raw()
        first = await asyncio.wait_for(anext(chunks), 5)
        assert first == b"data: one\n\n"
        RELEASE.set()
        rest = b"".join([chunk async for chunk in chunks])
        assert rest == b"data: two\n\n"
        await response.aclose()


@pytest.mark.asyncio
async def test_a_large_answer_streams_and_arrives_whole(server: str, kind: str) -> None:
    async with client(kind) as http:
        streamed = await http.send(http.build_request("GET", server + "/big"), stream=True)
        sizes = [len(chunk) async for chunk in streamed.aiter_raw()]
        await streamed.aclose()
        assert sum(sizes) == len(BIG) and len(sizes) > 1
        whole = await http.get(server + "/big")
        assert whole.content == BIG


@pytest.mark.asyncio
async def test_a_compressed_answer_relays_compressed_and_reads_decoded(
    server: str, kind: str
) -> None:
    async with client(kind) as http:
        request = http.build_request("GET", server + "/gzipped")
        response = await http.send(request, stream=True)
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
        await response.aclose()
        assert gzip.decompress(raw) == b'{"ok": true}'
        decoded = await http.get(server + "/gzipped")
        assert decoded.json() == {"ok": True}


@pytest.mark.asyncio
async def test_uploads_arrive_as_sent(server: str, kind: str) -> None:
    SEEN.clear()

    async def parts() -> AsyncIterator[bytes]:
        for i in range(3):
            yield f"part{i};".encode()

    async with client(kind) as http:
        streamed = await http.post(server + "/echo", content=parts())
        sized = await http.post(server + "/echo", content=parts(), headers={"content-length": "18"})
        plain = await http.post(server + "/echo", content=b"raw bytes")
    assert streamed.content == sized.content == b"part0;part1;part2;"
    assert plain.content == b"raw bytes"
    (h1, _), (h2, _), (h3, _) = SEEN
    assert h1["transfer-encoding"] == "chunked" and "content-length" not in h1
    assert h2["content-length"] == "18" and "transfer-encoding" not in h2
    # No Content-Type is invented for a body sent without one.
    assert "content-type" not in h3 and h3["content-length"] == "9"


@pytest.mark.asyncio
async def test_redirects_and_closed_clients_behave_as_httpx_does(server: str, kind: str) -> None:
    async with client(kind) as http:
        kept = await http.get(server + "/redirect")
        assert kept.status_code == 302  # the proxy relays redirects, never follows them
        followed = await http.get(server + "/redirect", follow_redirects=True)
        assert followed.status_code == 200 and followed.json()["path"] == "/answer"
    with pytest.raises(RuntimeError, match="closed"):
        await http.get(server + "/answer")


@pytest.mark.asyncio
async def test_no_log_line_per_request(
    server: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx's own send logs each request at INFO, which doubled the proxy's access log."""
    caplog.set_level(logging.INFO)
    async with client(kind) as http:
        await http.get(server + "/answer")
    assert not [r for r in caplog.records if r.name.startswith("httpx")]


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _raw_server(handle: Handler) -> tuple[asyncio.Server, str]:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handle(reader, writer)
        finally:
            writer.close()

    srv = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    return srv, f"http://127.0.0.1:{port}"


async def _read_head(reader: asyncio.StreamReader) -> None:
    await reader.readuntil(b"\r\n\r\n")


@pytest.mark.asyncio
async def test_a_refused_connection_is_a_connect_error(kind: str) -> None:
    srv, url = await _raw_server(_read_head)
    srv.close()
    await srv.wait_closed()
    async with client(kind) as http:
        with pytest.raises(httpx.ConnectError) as caught:
            await http.get(url)
    assert caught.value.request.url == httpx.URL(url)


@pytest.mark.asyncio
async def test_an_upstream_that_never_accepts_is_a_connect_timeout(kind: str) -> None:
    """A connection that never opens is the upstream being unreachable (502), not slow (504)."""
    with socket.socket() as listening, socket.socket() as queued:
        listening.bind(("127.0.0.1", 0))
        listening.listen(0)  # one connection fills the queue; the kernel drops later SYNs
        queued.connect(listening.getsockname())
        url = "http://{}:{}".format(*listening.getsockname())
        async with client(kind, connect_timeout_s=0.3) as http:
            with pytest.raises(httpx.ConnectTimeout) as caught:
                await http.get(url)
        assert transport_error(caught.value).status == 502


@pytest.mark.asyncio
async def test_an_upstream_that_hangs_up_is_a_protocol_error(kind: str) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        writer.close()

    srv, url = await _raw_server(hang_up)
    async with srv, client(kind) as http:
        with pytest.raises(httpx.RemoteProtocolError) as caught:
            await http.get(url)
    said = transport_error(caught.value).message
    assert said.endswith(("(ServerDisconnectedError).", "(RemoteProtocolError)."))


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_head(reader)
    await asyncio.sleep(5)


@pytest.mark.asyncio
async def test_a_silent_upstream_is_a_read_timeout(kind: str) -> None:
    srv, url = await _raw_server(_silent)
    async with srv, client(kind, timeout_s=0.3) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get(url)


@pytest.mark.asyncio
async def test_a_request_with_its_own_timeout_keeps_it(kind: str) -> None:
    """The summariser's own `timeout_s` bounds its call even when the client allows longer."""
    srv, url = await _raw_server(_silent)
    async with srv, client(kind, timeout_s=30) as http:
        started = asyncio.get_running_loop().time()
        with pytest.raises(httpx.TimeoutException) as caught:
            await http.post(url, content=b"{}", timeout=0.3)
        assert asyncio.get_running_loop().time() - started < 3
    assert transport_error(caught.value).status == 504


@pytest.mark.parametrize("cut_as", ["sized", "chunked"])
@pytest.mark.asyncio
async def test_an_answer_cut_short_is_a_read_error(cut_as: str, kind: str) -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        if cut_as == "sized":
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n"
            writer.write(head + b"\r\n" + b'{"partial":')
        else:
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            writer.write(head + b"transfer-encoding: chunked\r\n\r\nb\r\ndata: one\n\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()

    srv, url = await _raw_server(cut)
    async with srv, client(kind) as http:
        with pytest.raises(httpx.ReadError):
            response = await http.send(http.build_request("GET", url), stream=True)
            try:
                async for _ in response.aiter_raw():
                    pass
            finally:
                await response.aclose()


@pytest.mark.asyncio
async def test_waiting_for_a_pooled_connection_times_out(server: str, kind: str) -> None:
    """No free connection in time is the proxy's own limit, not a slow upstream: a 502."""
    RELEASE.clear()
    limits, timeout = httpx.Limits(max_connections=1), httpx.Timeout(5.0, pool=0.2)
    made, _ = transports.create(kind, limits, timeout)
    async with UpstreamClient(transport=made, timeout=timeout) as http:
        held = await http.send(http.build_request("GET", server + "/events"), stream=True)
        try:
            # aiohttp counts the wait for a pooled connection as connecting.
            with pytest.raises((httpx.PoolTimeout, httpx.ConnectTimeout)) as caught:
                await http.get(server + "/answer")
            assert transport_error(caught.value).status == 502
        finally:
            RELEASE.set()
            await held.aclose()


@pytest.mark.asyncio
async def test_an_auth_or_hooked_client_takes_httpx_path(server: str) -> None:
    """The direct send steps aside when anything it skips is in use."""
    seen: list[str] = []

    async def hook(request: httpx.Request) -> None:
        seen.append(str(request.url))

    with respx.mock(base_url="http://up") as router:
        router.get("/x").respond(200, json={"ok": 1})
        async with UpstreamClient(event_hooks={"request": [hook]}) as http:
            assert (await http.get("http://up/x")).json() == {"ok": 1}
        async with UpstreamClient(auth=("u", "p")) as http:
            await http.get("http://up/x")
        assert router.calls.last.request.headers["authorization"].startswith("Basic ")
    assert seen == ["http://up/x"]


@pytest.mark.skipif(not transports.has_reqwest(), reason="the reqwest extra is not installed")
def test_the_app_starts_again_under_a_new_thread_with_reqwest(tmp_path: Path) -> None:
    """Two `TestClient`s of the app in one process, as a user's test suite has them.

    Each runs the app's lifespan (which builds the reqwest transport) on a thread of
    its own that ends with it. In a fresh process, so that nothing imported pyreqwest
    before the app, and a crash is a failed test rather than a dead test run.
    """
    import subprocess
    import sys

    script = (
        "import gc, sys\n"
        "from starlette.testclient import TestClient\n"
        "from proxy.app import create_app\n"
        "from proxy.config import load_settings\n"
        "for n in range(3):\n"
        "    env = {'CONTEXT_PROXY_UPSTREAM_TRANSPORT': 'reqwest',\n"
        "           'CONTEXT_PROXY_STORE_PATH': sys.argv[1] + f'/{n}.db'}\n"
        "    with TestClient(create_app(load_settings(env=env))) as client:\n"
        "        print(n, client.get('/healthz').status_code, flush=True)\n"
        "    gc.collect()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["0", "200", "1", "200", "2", "200"]
