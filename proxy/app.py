"""The Starlette app: routes, errors and lifespan. Glue only; decisions live elsewhere."""

from __future__ import annotations

import contextlib
import email.utils
import functools
import hmac
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import transports
from .context import AppContext
from .conversation import tenant_of
from .embeddings import Embedder
from .errors import ProxyError, anthropic_error_body, error_body
from .intake import too_large
from .metrics import Metrics, RequestMetrics
from .models import context_window
from .record import Recorder
from .settings import Settings
from .stopping import CutAtShutdown
from .store import ConvKey, Store, StoreError, open_store
from .summarizer import AnthropicRoute, Summarizer
from .tokens import TokenCounter
from .turn.commit import write_kept
from .turn.pipeline import authorize, chat_completions, messages, responses
from .upstream import (
    create_client,
    forward_headers,
    provider_of,
    providers,
    refused_operator_key,
    response_headers,
    speaks_anthropic,
    subpath,
    transport_error,
)

log = logging.getLogger("context_proxy.app")

JSON = "application/json"


def create_app(
    settings: Settings,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    store: Store | None = None,
    counter: TokenCounter | None = None,
) -> Starlette:
    """Build the proxy. Tests inject a transport (no network) and a store."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        client = create_client(settings.upstream, transport)
        s = settings.store
        the_store = store or open_store(
            s.backend,
            path=s.path,
            url=s.url,
            ttl_s=s.ttl_s,
            max_conversations=s.max_conversations,
            backoff_s=s.backoff_s,
        )
        r = settings.reduction
        summarizer_model = r.summarizer_model
        window = context_window(
            summarizer_model or "gpt-4o-mini",
            settings.models.windows,
            settings.models.default_context_tokens,
        )
        summarizer = Summarizer(
            client,
            base_url=r.summarizer_base_url or settings.upstream.base_url,
            model=summarizer_model,
            timeout_s=r.summarizer_timeout_s,
            window_tokens=window,
            window_of=functools.partial(
                context_window,
                overrides=settings.models.windows,
                default=settings.models.default_context_tokens,
            ),
            api=r.summarizer_api,
            openai_key=settings.upstream.api_key,
            anthropic=anthropic_route(settings),
        )
        ctx = AppContext(
            settings, client, the_store, counter or TokenCounter(), summarizer, metrics
        )
        ctx.counter.preload()
        if settings.record.enabled:
            ctx.recorder = Recorder(settings.record.path)
        if settings.recall.enabled and settings.recall.method in ("embeddings", "hybrid"):
            ctx.embedder = Embedder(
                client,
                base_url=settings.upstream.base_url,
                model=settings.recall.embedding_model,
                timeout_s=r.summarizer_timeout_s,
            )
        try:
            yield {"ctx": ctx}
        finally:
            await write_kept(ctx)
            await ctx.background.close()
            await client.aclose()
            metrics.close()
            if store is None:
                await the_store.close()

    metrics = Metrics()

    async def metrics_endpoint(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route(
            "/v1/{path:path}",
            passthrough,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
        ),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/admin/conversations", admin_list, methods=["GET"]),
        Route("/admin/conversations/{id}", admin_conversation, methods=["GET", "DELETE"]),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[
            Middleware(RequestMetrics, metrics=metrics),
            Middleware(DateHeader),
            Middleware(CutAtShutdown),
        ],
        exception_handlers={
            ProxyError: proxy_error,
            ClientDisconnect: client_gone,
            Exception: unexpected_error,
        },
    )


def anthropic_route(settings: Settings) -> AnthropicRoute:
    """Where summaries through Anthropic's Messages API go."""
    a, r = settings.anthropic, settings.reduction
    explicit = r.summarizer_api == "anthropic"
    base = r.summarizer_base_url if explicit and r.summarizer_base_url else a.base_url
    model = a.summarizer_model or (r.summarizer_model if explicit else "")
    url = providers(settings)["anthropic"]._replace(base_url=base).url("/v1/messages")
    return AnthropicRoute(url, model, a.api_key, a.version)


async def proxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProxyError)
    # After a body that never arrived, the connection is in an unknown state: close it.
    headers = {**exc.headers, "connection": "close"} if exc.status == 408 else exc.headers
    body = exc.body(anthropic=speaks_anthropic(request.url.path, request.headers))
    return Response(body, status_code=exc.status, media_type=JSON, headers=headers)


async def client_gone(request: Request, exc: Exception) -> Response:
    # Nobody is left to read an answer; one line says what happened.
    log.info("client disconnected while sending %s %s", request.method, request.url.path)
    return Response(status_code=400)


async def unexpected_error(request: Request, exc: Exception) -> Response:
    # A bug of ours must not look like the upstream's 500; say whose fault it is.
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    message = "The proxy failed to handle this request."
    if speaks_anthropic(request.url.path, request.headers):
        body = anthropic_error_body(502, message)
    else:
        body = error_body(message, type="proxy_error", code="proxy_internal_error")
    return Response(body, status_code=502, media_type=JSON)


class DateHeader:
    """Pure ASGI middleware: a `Date` header on the responses the proxy makes itself.

    `serve` turns uvicorn's own Date off, so a relayed answer carries the
    upstream's Date alone instead of two that may disagree.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._second = 0
        self._value = b""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def dated(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers") or []
                if not any(name == b"date" for name, _ in headers):
                    message["headers"] = [*headers, (b"date", self._now())]
            await send(message)

        await self.app(scope, receive, dated)

    def _now(self) -> bytes:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._value = email.utils.formatdate(second, usegmt=True).encode()
        return self._value


async def passthrough(request: Request) -> Response:
    """Every other /v1/ route: method, path, query, body and status unchanged, streamed."""
    ctx: AppContext = request.state.ctx
    authorize(ctx, request.headers)
    limit = ctx.settings.server.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    path = subpath(request.scope.get("raw_path") or request.url.path.encode())
    provider = ctx.providers[provider_of(path, request.headers)]
    headers = forward_headers(request.headers.items(), provider)
    if declared is not None:
        headers["content-length"] = declared
    has_body = request.method not in ("GET", "HEAD") and (
        declared not in (None, "0") or "transfer-encoding" in request.headers
    )
    upstream_request = ctx.client.build_request(
        request.method,
        provider.url(path, request.url.query),
        headers=headers,
        content=request.stream() if has_body else None,
        # The body is not parsed, so whether the answer streams is unknown: the
        # transport that relays event streams well takes them all.
        extensions={transports.EVENTS: True},
    )
    try:
        response = await ctx.client.send(upstream_request, stream=True)
    except httpx.HTTPError as exc:
        raise transport_error(exc) from None
    refused = refused_operator_key(provider, response.status_code)
    if refused is not None:
        await response.aclose()
        return Response(refused, status_code=response.status_code, media_type=JSON)
    return StreamingResponse(
        response.aiter_raw(),
        status_code=response.status_code,
        headers=response_headers(response.headers),
        background=BackgroundTask(response.aclose),
    )


async def healthz(request: Request) -> Response:
    ctx: AppContext = request.state.ctx
    problem = None
    try:
        await ctx.store.ping()
        store_status, status = "ok", 200
    except StoreError as exc:
        store_status, status, problem = "unreachable", 503, str(exc)
    body = {
        "status": "ok" if status == 200 else "degraded",
        "store": store_status,
        "backend": ctx.settings.store.backend,
        "tokenizer": "tiktoken" if ctx.counter.exact else "estimate",
    } | ({"problem": problem} if problem else {})
    return Response(orjson.dumps(body), status_code=status, media_type=JSON)


def _admin(request: Request) -> AppContext:
    ctx: AppContext = request.state.ctx
    token = ctx.settings.auth.admin_token
    if not token:
        raise ProxyError(404, "Admin routes are disabled (set auth.admin_token).", code="not_found")
    given = request.headers.get("authorization", "")
    given = given[7:] if given[:7].lower() == "bearer " else ""
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise ProxyError(
            401, "Admin token required.", type="authentication_error", code="invalid_admin_token"
        )
    return ctx


def _tenant(request: Request) -> str:
    """Admins address a tenant by its hash, or by the client key it belongs to."""
    tenant = request.query_params.get("tenant")
    if tenant:
        return tenant
    return tenant_of(request.headers.get("x-client-key", ""))


async def admin_list(request: Request) -> Response:
    ctx = _admin(request)
    limit = _int_param(request, "limit", 50, 1, 1000)
    offset = _int_param(request, "offset", 0, 0, 10**9)
    tenant = request.query_params.get("tenant") or None
    try:
        items = await ctx.store.list_conversations(tenant, limit=limit, offset=offset)
    except StoreError:
        raise ProxyError(503, "The store is unreachable.", type="server_error") from None
    data = [
        {
            "tenant": c.key.tenant,
            "id": c.key.conversation,
            "turns": c.turns,
            "updated_at": c.updated_at,
        }
        for c in items
    ]
    return Response(
        orjson.dumps({"object": "list", "data": data, "limit": limit, "offset": offset}),
        media_type=JSON,
    )


async def admin_conversation(request: Request) -> Response:
    ctx = _admin(request)
    key = ConvKey(_tenant(request), request.path_params["id"])
    try:
        if request.method == "DELETE":
            ctx.forget(key)
            deleted = await ctx.store.delete(key)
            if not deleted:
                raise _no_such(request)
            return Response(
                orjson.dumps({"id": key.conversation, "deleted": True}), media_type=JSON
            )
        latest = await ctx.store.latest(key)
        if latest is None:
            raise _no_such(request)
        archive = await ctx.store.archive(key, limit=_int_param(request, "limit", 1000, 1, 100_000))
    except StoreError:
        raise ProxyError(503, "The store is unreachable.", type="server_error") from None
    body = {
        "id": key.conversation,
        "tenant": key.tenant,
        "turns": latest.turns,
        "state": latest.state,
        "working": latest.working,
        "archive": [a.message for a in archive],
    }
    return Response(orjson.dumps(body), media_type=JSON)


def _no_such(request: Request) -> ProxyError:
    """A 404 that says whose conversations were looked at, when the request named nobody."""
    message = "No such conversation."
    if not request.query_params.get("tenant") and not request.headers.get("x-client-key"):
        message += (
            " Only keyless clients' conversations were searched: name the tenant with"
            " ?tenant=<SHA-256 of the client's key> or the X-Client-Key header."
        )
    return ProxyError(404, message, code="conversation_not_found")


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    # str.isdigit() also takes digits int() refuses ('²'), and int() refuses a number
    # of over 4300 digits: only a short run of ASCII digits is read.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 12) or not low <= int(raw) <= high:
        raise ProxyError(400, f"'{name}' must be an integer from {low} to {high}.", param=name)
    return int(raw)
