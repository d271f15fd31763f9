"""Bare pass-through floors (`python -m bench.floors --kind KIND`): what a proxy costs at least.

Each floor is a minimal Starlette + uvicorn app that forwards
`/v1/chat/completions` and streams the answer back, with no history work.
It does parse and re-serialise the body with orjson, because any proxy that
looks at the messages must, so "proxy minus floor" is the cost of the history
work itself ("beyond parsing and re-serialising the body").

Kinds, the choices the benchmark settles:
- `httpx`: httpx with its default (httpcore) transport;
- `httpx-aiohttp`: httpx's API over aiohttp (`httpx_aiohttp.AiohttpTransport`);
- `aiohttp`: the aiohttp client directly, the practical limit for Python.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.settings import UpstreamSettings

KINDS = ("httpx", "httpx-aiohttp", "aiohttp")
# Idle upstream connections are kept as long as the proxy keeps them: below the
# mock's (uvicorn's) 5 s, so no request meets a connection the mock is closing.
# httpx's default is the same 5 s, which made the floors answer an occasional
# 500, or reset the bench's connection, after a few idle seconds.
KEEPALIVE_S = UpstreamSettings().keepalive_s
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})
SEND_HEADERS = {"content-type": "application/json", "accept-encoding": "identity"}


def _relay_headers(items: Any) -> dict[str, str]:
    return {k: v for k, v in items if k.lower() not in HOP_BY_HOP}


def httpx_app(upstream: str, kind: str) -> Starlette:
    import httpx

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        limits = httpx.Limits(
            max_connections=512, max_keepalive_connections=512, keepalive_expiry=KEEPALIVE_S
        )
        transport: httpx.AsyncBaseTransport | None = None
        if kind == "httpx-aiohttp":
            from httpx_aiohttp import AiohttpTransport

            transport = AiohttpTransport(limits=limits)
        async with httpx.AsyncClient(limits=limits, timeout=600.0, transport=transport) as client:
            yield {"client": client}

    async def chat(request: Request) -> Response:
        client: httpx.AsyncClient = request.state.client
        body = orjson.dumps(orjson.loads(await request.body()))
        req = client.build_request(
            "POST",
            upstream + request.url.path.removeprefix("/v1"),
            content=body,
            headers=SEND_HEADERS,
        )
        resp = await client.send(req, stream=True)
        return StreamingResponse(
            resp.aiter_raw(),
            status_code=resp.status_code,
            headers=_relay_headers(resp.headers.items()),
            background=BackgroundTask(resp.aclose),
        )

    return _app(chat, lifespan)


def aiohttp_app(upstream: str) -> Starlette:
    import aiohttp

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        connector = aiohttp.TCPConnector(limit=512, keepalive_timeout=KEEPALIVE_S)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
            yield {"session": session}

    async def chat(request: Request) -> Response:
        session: aiohttp.ClientSession = request.state.session
        body = orjson.dumps(orjson.loads(await request.body()))
        url = upstream + request.url.path.removeprefix("/v1")
        resp = await session.post(url, data=body, headers=SEND_HEADERS)

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.content.iter_any():
                    yield chunk
            finally:
                resp.release()

        return StreamingResponse(
            relay(), status_code=resp.status, headers=_relay_headers(resp.headers.items())
        )

    return _app(chat, lifespan)


def _app(chat: Any, lifespan: Any) -> Starlette:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/responses", chat, methods=["POST"]),
            Route("/v1/messages", chat, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL ending in /v1")
    args = parser.parse_args()
    upstream = args.upstream.rstrip("/")
    app = aiohttp_app(upstream) if args.kind == "aiohttp" else httpx_app(upstream, args.kind)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
