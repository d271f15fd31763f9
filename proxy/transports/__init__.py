"""The transports under the one upstream `httpx.AsyncClient`, and what they share.

httpx stays the client API (respx mocks it in tests; the summariser and the
pass-through routes use it), but httpcore's pool checks every idle socket on
every request, which caps a busy proxy. Underneath it sits one of:

- `aiohttp` (`over_aiohttp.py`): aiohttp's pool for everything. What a plain
  install uses: aiohttp is well kept, widely used and has wheels everywhere.
- `reqwest` (the `reqwest` extra): pyreqwest (`over_reqwest.py`), Rust's
  reqwest and hyper, for answers read whole; its connections, parsing and
  timers run on a Tokio thread of its own, so the event loop's thread, where
  a busy proxy runs out of CPU first, does a fraction of aiohttp's work a
  request (`docs/performance.md` has what that buys). Event streams (a chat
  request with `"stream": true`) go through aiohttp's pool instead: every
  chunk pyreqwest hands over is a wake-up from its thread that takes the GIL
  back, and with many concurrent streams those wake-ups cost more than the
  other thread saves. pyreqwest is young and has no musl wheel, so it is
  opt-in.
- `auto` (the default): reqwest when pyreqwest is installed, else aiohttp,
  as uvicorn picks uvloop when it is there.
- `httpx`: httpcore's own pool.

Both of ours read an answer of known, modest length whole before handing it
over (httpx then holds it as content, and `aread` costs nothing) and stream
everything else (server-sent events, large or unsized bodies) as it arrives;
both map their errors to the httpx exception that names them.
"""

from __future__ import annotations

import importlib.util
import ssl
from collections.abc import Sequence

import httpx

KINDS = ("auto", "aiohttp", "reqwest", "httpx")

# An answer up to this size with a Content-Length is read whole before it is
# handed over: a chat completion is a few KB, and the proxy keeps it anyway.
EAGER_BYTES = 1 << 20
_EVENT_STREAM = "text/event-stream"


def reads_whole(length: int | None, content_type: str | None) -> bool:
    """Whether an answer is read whole before it is handed over (see the module's doc)."""
    return (
        length is not None
        and length <= EAGER_BYTES
        and not (content_type or "").startswith(_EVENT_STREAM)
    )


def whole(
    status: int,
    headers: Sequence[tuple[str, str]] | Sequence[tuple[bytes, bytes]],
    content: bytes,
    request: httpx.Request,
    encoded: bool,
) -> httpx.Response:
    """An answer read whole from the wire, handed over as a one-chunk stream.

    It reads like any streamed answer (`aread`, or the relays' `aiter_raw`),
    so callers need not know the transport read it early. `encoded` is
    unused: `aread` undoes a Content-Encoding as it does for any answer.
    """
    del encoded
    return httpx.Response(
        status, headers=headers, stream=httpx.ByteStream(content), request=request
    )


def request_headers(request: httpx.Request, dropped: frozenset[bytes]) -> list[tuple[str, str]]:
    """The request's headers as text, without `dropped` (lower-case names).

    httpx's `multi_items` guesses an encoding over all headers on every call;
    a value that is not UTF-8 is taken as Latin-1, as HTTP/1.1 defined it.
    """
    out = []
    for name, value in request.headers.raw:
        if name.lower() in dropped:
            continue
        try:
            out.append((name.decode(), value.decode()))
        except UnicodeDecodeError:
            out.append((name.decode("latin-1"), value.decode("latin-1")))
    return out


# A request extension: this request's answer is an event stream (see the module's doc).
EVENTS = "context_proxy.events"


def create(
    kind: str, limits: httpx.Limits, timeout: httpx.Timeout
) -> tuple[httpx.AsyncBaseTransport | None, httpx.AsyncBaseTransport | None]:
    """The transports `upstream.transport` names: for every request, and for event streams.

    None for the second means the first.
    Each has a pool of `limits.max_connections`.
    """
    if kind == "httpx":
        return httpx.AsyncHTTPTransport(limits=limits), None
    from .over_aiohttp import AiohttpTransport

    if kind == "aiohttp" or (kind == "auto" and not has_reqwest()):
        return AiohttpTransport(limits), None
    from .over_reqwest import ReqwestTransport

    return ReqwestTransport(limits, timeout), AiohttpTransport(limits)


def has_reqwest() -> bool:
    """Whether pyreqwest (the `reqwest` extra) is installed."""
    return importlib.util.find_spec("pyreqwest") is not None


# pyreqwest is imported with this module, on the importing thread (the main one
# however the proxy is started), not when the first transport is made: imported
# first on a thread that then ends (a TestClient's portal, a server thread of an
# app that embeds the proxy), it crashes the process the next time a client is
# built on another thread.
if has_reqwest():
    importlib.import_module("pyreqwest.client")


def trusted() -> ssl.SSLContext:
    """certifi's roots (as httpx itself verifies) and the system's, as pyreqwest trusts them.

    A private CA an operator installed in the system store, or names with
    SSL_CERT_FILE or SSL_CERT_DIR, is then trusted whichever transport an
    answer takes.
    """
    context = httpx.create_ssl_context()
    context.load_default_certs()
    return context
