"""httpx's transport API over aiohttp's connection pool, with none of the adapter work.

The `httpx-aiohttp` package bridges the two, with work on every request that
shows in the proxy's CPU: it re-parses the URL, rebuilds a timeout object,
maps exceptions through a context manager on every chunk, and hands a JSON
answer over in 16 KB async chunks that httpx then reassembles. This transport
caches the parsed URL and the timeout and reads answers as `reads_whole` says.

aiohttp's errors map to the httpx exception that names them (refused ->
ConnectError, a silent upstream -> ReadTimeout, a dropped connection ->
RemoteProtocolError), where httpx-aiohttp turns every connection error into
ConnectTimeout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import aiohttp
import httpx
import yarl

from . import reads_whole, request_headers, trusted, whole

_URLS_KEPT = 64
_NONE: frozenset[bytes] = frozenset()
# aiohttp frames a streamed body itself, chunked unless a Content-Length was given.
_FRAMING = frozenset({b"transfer-encoding"})


@contextmanager
def _mapped(request: httpx.Request) -> Iterator[None]:
    """aiohttp's errors as the httpx ones that say the same thing."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:
        # aiohttp counts the wait for a free pooled connection as connecting too.
        raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
    except aiohttp.ServerTimeoutError as exc:  # sock_read
        raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
    except TimeoutError as exc:
        raise httpx.TimeoutException(str(exc) or "timed out", request=request) from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(str(exc), request=request) from exc
    except aiohttp.ClientPayloadError as exc:
        raise httpx.ReadError(str(exc), request=request) from exc
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientResponseError) as exc:
        raise httpx.RemoteProtocolError(str(exc), request=request) from exc
    except aiohttp.InvalidURL as exc:
        raise httpx.UnsupportedProtocol(str(exc), request=request) from exc
    except aiohttp.ClientError as exc:  # ClientOSError and the rest: the socket failed
        raise httpx.NetworkError(str(exc) or type(exc).__name__, request=request) from exc


class _Body(httpx.AsyncByteStream):
    """A streamed answer: aiohttp's chunks as they arrive; closing returns the connection."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped(self._request):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One aiohttp session (one pool) for every request the client sends."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, yarl.URL] = {}
        self._timeouts: dict[tuple[float | None, float | None, float | None], aiohttp.ClientTimeout]
        self._timeouts = {}

    def _open(self) -> aiohttp.ClientSession:
        """The session, made on first use: aiohttp binds it to the running loop."""
        connector = aiohttp.TCPConnector(
            limit=self._limits.max_connections or 0,
            keepalive_timeout=self._limits.keepalive_expiry,
            ssl=trusted(),
        )
        # httpx sets the headers it means to send; aiohttp must not add its own
        # Content-Type (application/octet-stream) to a body sent without one.
        self._session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False, skip_auto_headers=("Content-Type",)
        )
        return self._session

    def _url(self, request: httpx.Request) -> yarl.URL:
        text = str(request.url)
        url = self._urls.get(text)
        if url is None:
            if len(self._urls) >= _URLS_KEPT:  # pass-through paths and queries vary
                self._urls.clear()
            url = self._urls[text] = yarl.URL(text, encoded=True)
        return url

    def _timeout(self, request: httpx.Request) -> aiohttp.ClientTimeout:
        given = request.extensions.get("timeout") or {}
        key = (given.get("connect"), given.get("read"), given.get("pool"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            # httpx's read timeout bounds each read, as aiohttp's sock_read does;
            # its pool timeout bounds the wait for a connection (aiohttp's connect).
            timeout = aiohttp.ClientTimeout(sock_connect=key[0], sock_read=key[1], connect=key[2])
            self._timeouts[key] = timeout
        return timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session or self._open()
        data: bytes | httpx.AsyncByteStream | None
        try:
            data, dropped = request.content or None, _NONE
        except httpx.RequestNotRead:  # a body streamed through (the pass-through routes)
            data, dropped = request.stream, _FRAMING  # type: ignore[assignment]
        headers = request_headers(request, dropped)
        with _mapped(request):
            response = await session.request(
                request.method,
                self._url(request),
                headers=headers,
                data=data,
                allow_redirects=False,
                compress=False,
                timeout=self._timeout(request),
            )
            if reads_whole(response.content_length, response.headers.get("content-type")):
                try:
                    content = await response.read()
                finally:
                    response.release()
                encoded = "content-encoding" in response.headers
                return whole(response.status, response.raw_headers, content, request, encoded)
        return httpx.Response(
            response.status,
            headers=response.raw_headers,
            stream=_Body(response, request),
            request=request,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
