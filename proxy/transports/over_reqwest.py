"""httpx's transport API over pyreqwest: Rust's reqwest and hyper, on a thread of their own.

A busy proxy runs out of CPU on its event loop's thread first. aiohttp's
client does all of a request's work there. pyreqwest hands the request to
a Tokio runtime on another thread, where connecting, pooling, writing,
parsing and timers run without the GIL; the loop's thread only builds the
request and wakes when the answer's head (or a chunk of a streamed body) is
in, a small part of the work, the rest running on the other core.

What it does differently from httpx's own transport, and why:

- It never decompresses (`aread` on the httpx side does, from the raw
  bytes the relays need) and adds no Accept-Encoding: the client's own
  headers go upstream as they came, after httpx's defaults.
- It follows no redirect and uses no environment proxy (HTTPS_PROXY):
  the upstream is the one configured, as with the aiohttp transport.
- Certificates are checked against the system's trust store, which honours
  SSL_CERT_FILE and SSL_CERT_DIR (rustls-platform-verifier), where httpx
  uses certifi's bundle.
- Timeouts are the client's: connect, read (each read), and the wait for a
  free connection (pool). A request that asks for other timeouts (the
  summariser's and the embeddings' own `timeout_s`) gets a deadline for the
  whole exchange instead, the largest of them: reqwest has no per-request
  phases.
- HTTP/1.1 only, as the other transports and the bench's floors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
from pyreqwest import exceptions as errors
from pyreqwest.client import ClientBuilder
from pyreqwest.request import StreamRequest
from pyreqwest.response import Response

from . import reads_whole, request_headers, whole

# reqwest sets Host from the URL and Content-Length from a body of bytes.
_DROPPED_FOR_BYTES = frozenset({b"host", b"content-length"})
_DROPPED_FOR_STREAM = frozenset({b"host", b"transfer-encoding"})
# While sending and waiting for the head; the most specific first (isinstance picks it).
_SENDING: tuple[tuple[type[errors.PyreqwestError], type[httpx.TransportError]], ...] = (
    (errors.PoolTimeoutError, httpx.PoolTimeout),
    (errors.ReadTimeoutError, httpx.ReadTimeout),
    (errors.WriteTimeoutError, httpx.WriteTimeout),
    (errors.RequestTimeoutError, httpx.ReadTimeout),  # the whole-exchange deadline
    (errors.WriteError, httpx.WriteError),
    (errors.ReadError, httpx.ReadError),
    (errors.BuilderError, httpx.UnsupportedProtocol),
)
# hyper's word for a failure of the connector, before any byte of the request went out.
_CONNECTING = "client error (Connect)"


def _sending_error(exc: errors.PyreqwestError, request: httpx.Request) -> Exception:
    """The httpx exception that says what went wrong before the answer's head came.

    pyreqwest calls any timeout there a connect timeout and an upstream that
    hangs up a connect error; the causes it lists tell them apart: only a
    failure to connect has passed through hyper's connector.
    """
    reason = _reason(exc)
    connecting = _CONNECTING in reason
    if isinstance(exc, errors.ConnectTimeoutError):
        kind: type[httpx.TransportError] = httpx.ConnectTimeout if connecting else httpx.ReadTimeout
    elif isinstance(exc, errors.ConnectError):
        kind = httpx.ConnectError if connecting else httpx.RemoteProtocolError
    elif isinstance(exc, errors.ClientClosedError):
        return RuntimeError("Cannot send a request, as the client has been closed.")
    else:
        kind = next(
            (ours for theirs, ours in _SENDING if isinstance(exc, theirs)), httpx.NetworkError
        )
    return kind(_text(exc, reason), request=request)


def _reading_error(exc: errors.PyreqwestError, request: httpx.Request) -> Exception:
    """The httpx exception for a failure while the answer's body was read."""
    kind = httpx.ReadTimeout if isinstance(exc, TimeoutError) else httpx.ReadError
    return kind(_text(exc, _reason(exc)), request=request)


def _reason(exc: errors.PyreqwestError) -> str:
    """The causes pyreqwest lists, outermost first ("tcp connect error: Connection refused")."""
    causes = (getattr(exc, "details", None) or {}).get("causes") or []
    return ": ".join(str(c.get("message", "")) for c in causes)


def _text(exc: errors.PyreqwestError, reason: str) -> str:
    # Raised `from None`: the class chosen is the precise one, and
    # `upstream.transport_error` names the innermost cause to the client.
    return f"{exc.message}: {reason}" if reason else str(exc.message)


class _Body(httpx.AsyncByteStream):
    """A streamed answer: chunks as they arrive; closing returns the connection to the pool."""

    def __init__(self, sending: StreamRequest, response: Response, request: httpx.Request) -> None:
        self._sending = sending
        self._reader = response.body_reader
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while (chunk := await self._reader.read_chunk()) is not None:
                yield bytes(chunk)
        except errors.PyreqwestError as exc:
            raise _reading_error(exc, self._request) from None

    async def aclose(self) -> None:
        await self._sending.__aexit__(None, None, None)


class ReqwestTransport(httpx.AsyncBaseTransport):
    """One pyreqwest client (one pool, one Tokio thread) for every request the client sends."""

    def __init__(self, limits: httpx.Limits, timeout: httpx.Timeout) -> None:
        self._timeouts = timeout.as_dict()
        builder = (
            ClientBuilder()
            .no_proxy()
            .follow_redirects(False)
            .gzip(False)
            .brotli(False)
            .zstd(False)
            .deflate(False)
            .http1_only()
            .max_connections(limits.max_connections)
        )
        if limits.keepalive_expiry is not None:
            builder = builder.pool_idle_timeout(timedelta(seconds=limits.keepalive_expiry))
        if limits.max_keepalive_connections is not None:
            builder = builder.pool_max_idle_per_host(limits.max_keepalive_connections)
        for name, setting in (
            ("connect", builder.connect_timeout),
            ("read", builder.read_timeout),
            ("pool", builder.pool_timeout),
        ):
            seconds = self._timeouts.get(name)
            if seconds is not None:
                builder = setting(timedelta(seconds=seconds))
        self._client = builder.build()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            body: bytes | None = request.content
            dropped = _DROPPED_FOR_BYTES
        except httpx.RequestNotRead:  # a body streamed through (the pass-through routes)
            body, dropped = None, _DROPPED_FOR_STREAM
        built = self._client.request(request.method, str(request.url)).headers(
            request_headers(request, dropped)
        )
        if body is None:
            built = built.body_stream(request.stream)
        elif body:
            built = built.body_bytes(body)
        given = request.extensions.get("timeout")
        if given and given != self._timeouts:
            deadline = max((v for v in given.values() if v is not None), default=None)
            if deadline is not None:
                built = built.timeout(timedelta(seconds=deadline))
        # Hand the answer over at its head: pyreqwest would first buffer up to
        # 64 KB of body, which holds server-sent events back.
        sending = built.streamed_read_buffer_limit(0).build_streamed()
        try:
            response = await sending.__aenter__()
        except errors.PyreqwestError as exc:
            raise _sending_error(exc, request) from None
        headers = list(response.headers.items())
        if not reads_whole(_length(response), response.get_header("content-type")):
            stream = _Body(sending, response, request)
            return httpx.Response(response.status, headers=headers, stream=stream, request=request)
        try:
            content = bytes(await response.body_reader.bytes())
        except errors.PyreqwestError as exc:
            raise _reading_error(exc, request) from None
        finally:
            await sending.__aexit__(None, None, None)
        encoded = response.get_header("content-encoding") is not None
        return whole(response.status, headers, content, request, encoded)

    async def aclose(self) -> None:
        await self._client.close()


def _length(response: Response) -> int | None:
    text = response.get_header("content-length")
    return int(text) if text is not None and text.isdigit() else None
