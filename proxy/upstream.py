"""The one pooled upstream client, and the rules for what crosses to the upstream.

One `httpx.AsyncClient` is created in the app's lifespan and shared by every
request (never a global), so connections are reused across conversations.
Tests inject a transport (respx or `httpx.MockTransport`) instead of the
network.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import httpx
import orjson

from . import transports
from .errors import ProxyError, UpstreamError
from .settings import Settings, UpstreamSettings

# RFC 9110 §7.6.1 connection-specific headers, plus those httpx recomputes.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
PROXY_PREFIXES = ("x-conversation-id", "x-context-")
# Headers that carry a client's credential (OpenAI's, Azure's, Anthropic's).
CREDENTIALS = frozenset({"authorization", "api-key", "x-api-key"})
FOREIGN_CREDENTIALS = {"openai": frozenset({"x-api-key"}), "anthropic": frozenset({"api-key"})}


class _NoCookies(httpx.Cookies):
    """A cookie jar that never keeps anything an upstream sets."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class UpstreamClient(httpx.AsyncClient):
    """The shared upstream client: no cookie jar, and a direct `send`.

    One client serves every tenant, so a cookie an upstream set in answer to
    one client must never ride along with another's request. httpx keeps
    cookies per client; this one keeps none, which also spares every
    response the jar's parsing.
    """

    def __init__(
        self,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        events_transport: httpx.AsyncBaseTransport | None = None,
        **options: Any,
    ) -> None:
        super().__init__(transport=transport, **options)
        # The transport `send` talks to directly; without one, httpx's own path is taken.
        self._direct = transport
        # Requests marked `transports.EVENTS` go through this one (see transports/).
        self._events = events_transport
        self._no_cookies = _NoCookies()
        self._defaults = {k.lower(): v for k, v in self.headers.items()}
        self._timeouts = self.timeout.as_dict()

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        """httpx's `send` without the layers this client never uses.

        It has no auth, follows no redirect, keeps no cookie and sets no event
        hook, yet httpx's own `send` walks an auth-flow generator, a redirect
        loop, the hooks and the jar, wraps the answer's stream to time it, and
        logs an INFO line per request that repeats the access log, all of it
        work every request pays for. A call that asks for auth or redirects
        takes httpx's path.
        """
        if (
            self._direct is None
            or auth is not httpx.USE_CLIENT_DEFAULT
            or follow_redirects is not httpx.USE_CLIENT_DEFAULT
            or self.auth is not None
            or self.follow_redirects
            or any(self.event_hooks.values())
        ):
            return await super().send(
                request, stream=stream, auth=auth, follow_redirects=follow_redirects
            )
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        request.extensions.setdefault("timeout", self._timeouts)
        if self._events is not None and request.extensions.get(transports.EVENTS):
            transport = self._events
        else:
            transport = self._direct
        response = await transport.handle_async_request(request)
        response.request = request
        if not stream:
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        return response

    def post_request(
        self, url: httpx.URL, content: bytes, headers: Mapping[str, str], *, events: bool = False
    ) -> httpx.Request:
        """A POST as `build_request` makes it, minus its per-call work.

        The URL is parsed once by the caller (the upstream is fixed); cookies
        are never sent, and the default headers and timeouts are read once.
        Host and Content-Length are set here, which lets httpx take the body
        as a ready stream instead of encoding it and rebuilding the headers.
        `events`: the answer will be an event stream.
        """
        request = httpx.Request(
            "POST",
            url,
            headers={
                "host": url.netloc.decode("ascii"),
                **self._defaults,
                **headers,
                "content-length": str(len(content)),
            },
            stream=httpx.ByteStream(content),
            extensions={"timeout": self._timeouts, transports.EVENTS: events},
        )
        request.read()  # a ByteStream: this only keeps `content` readable
        return request

    async def aclose(self) -> None:
        await super().aclose()
        await self._close_events()

    async def __aexit__(self, *exc_info: Any) -> None:
        await super().__aexit__(*exc_info)  # closes the transports it knows, not `aclose`
        await self._close_events()

    async def _close_events(self) -> None:
        if self._events is not None:
            await self._events.aclose()

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, value: object) -> None:
        return None


def create_client(
    settings: UpstreamSettings, transport: httpx.AsyncBaseTransport | None = None
) -> UpstreamClient:
    timeout = httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s, pool=30.0)
    limits = httpx.Limits(
        max_connections=settings.max_connections,
        max_keepalive_connections=settings.max_connections,
        keepalive_expiry=settings.keepalive_s,
    )
    events = None
    if transport is None:
        transport, events = transports.create(settings.transport, limits, timeout)
    return UpstreamClient(
        timeout=timeout,
        limits=limits,
        transport=transport,
        events_transport=events,
        follow_redirects=False,
    )


def subpath(raw_path: bytes) -> str:
    """The client's path as sent, refused (400) where it could leave the configured base path.

    Dot segments, encoded slashes, backslashes and control characters are
    refused in every decoding of the path (clients and servers disagree on
    how often to decode), so no form of `..` reaches the URL parser that
    would resolve it above the base.
    """
    raw = text = raw_path.decode("latin-1")
    for _ in range(4):
        _refuse_escapes(text)
        decoded = urllib.parse.unquote(text, encoding="latin-1")
        if decoded == text:
            return raw
        if decoded.count("/") != text.count("/"):  # an encoded slash
            raise _bad_path()
        text = decoded
    raise _bad_path()  # encoded over and over: nobody means that


def _refuse_escapes(path: str) -> None:
    if "\\" in path or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise _bad_path()
    if any(segment in (".", "..") for segment in path.split("/")):
        raise _bad_path()


def _bad_path() -> ProxyError:
    return ProxyError(
        400,
        "The path may not contain dot segments, encoded slashes or control characters.",
        code="invalid_path",
    )


class Provider(NamedTuple):
    """One upstream API: where its routes go and how the operator's key is sent to it."""

    name: str  # "openai" | "anthropic"
    base_url: str
    api_key: str  # the operator's key; "" forwards the client's
    key_setting: str  # the setting that holds it, for error messages

    def url(self, path: str, query: str = "") -> str:
        """The upstream URL of client path `path` (under /v1/).

        An OpenAI base ends in /v1 (`https://api.openai.com/v1`); Anthropic's
        is a host (`https://api.anthropic.com`, as `ANTHROPIC_BASE_URL`
        takes it), unless it too ends in /v1.
        """
        if self.name == "anthropic" and not self.base_url.rstrip("/").endswith("/v1"):
            url = self.base_url.rstrip("/") + path
            return f"{url}?{query}" if query else url
        return upstream_url(self.base_url, path, query)


def openai_side(headers: dict[str, str], provider: str, api_key: str) -> dict[str, str]:
    """Headers for a call to the OpenAI upstream (embeddings) made for a request to `provider`:
    an Anthropic request's credentials never go there, the operator's OpenAI key may."""
    if provider == "openai":
        return headers
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def providers(settings: Settings) -> dict[str, Provider]:
    upstream, anthropic = settings.upstream, settings.anthropic
    return {
        "openai": Provider("openai", upstream.base_url, upstream.api_key, "upstream.api_key"),
        "anthropic": Provider(
            "anthropic", anthropic.base_url, anthropic.api_key, "anthropic.api_key"
        ),
    }


def provider_of(path: str, headers: Mapping[str, str]) -> str:
    """Which upstream a pass-through request is for: Anthropic's routes and SDKs, or OpenAI."""
    if path.startswith("/v1/messages") or "anthropic-version" in headers:
        return "anthropic"
    return "openai"


def speaks_anthropic(path: str, headers: Mapping[str, str]) -> bool:
    """Whether the client reads Anthropic's error shape: its routes, or its SDK elsewhere."""
    if path in ("/v1/chat/completions", "/v1/responses"):
        return False
    return provider_of(path, headers) == "anthropic"


def upstream_url(base_url: str, path: str, query: str = "") -> str:
    """Join the configured base (which ends in /v1) with a client path under /v1/."""
    base = base_url.rstrip("/")
    suffix = path[3:] if path.startswith("/v1/") or path == "/v1" else path
    url = f"{base}/{suffix.lstrip('/')}"
    return f"{url}?{query}" if query else url


NOT_RELAYED = HOP_BY_HOP | {"server"}


def forward_headers(headers: Iterable[tuple[str, str]], provider: Provider) -> dict[str, str]:
    """The client's headers minus hop-by-hop and the proxy's own, with the configured key.

    With an operator key, no credential of the client's goes upstream, under
    whichever header it came.
    """
    out: dict[str, str] = {}
    replaced = bool(provider.api_key)
    # A credential only the other provider takes never goes to this one.
    foreign = FOREIGN_CREDENTIALS[provider.name]
    for name, value in headers:
        lower = name.lower()
        if lower in HOP_BY_HOP or lower.startswith(PROXY_PREFIXES):
            continue
        if lower in CREDENTIALS and (replaced or lower in foreign):
            continue
        if not value.isascii():  # HTTP clients send ASCII header values only
            raise ProxyError(
                400, f"The {lower} header holds bytes outside ASCII.", code="invalid_header"
            )
        out[lower] = value
    if replaced and provider.name == "anthropic":
        out["x-api-key"] = provider.api_key
    elif replaced:
        out["authorization"] = f"Bearer {provider.api_key}"
    return out


def response_headers(headers: httpx.Headers) -> dict[str, str]:
    """Upstream response headers safe to relay: not framing (the server sets it), not `Server`.

    The upstream's `Server` says what runs behind the proxy, which is the
    operator's to disclose, not every client's to read.
    """
    return {k: v for k, v in headers.items() if k.lower() not in NOT_RELAYED}


def refused_operator_key(provider: Provider, status: int) -> bytes | None:
    """The proxy's own body for an upstream 401/403 to the operator's key, else None.

    The upstream's body names the key it refused (masked), which is the
    operator's, not the client's: clients learn that the proxy's
    configuration is at fault, and nothing of the key.
    """
    if not provider.api_key or status not in (401, 403):
        return None
    refused = UpstreamError(
        status,
        f"The upstream refused the proxy's own API key ({provider.key_setting}); "
        "the proxy's operator must fix its configuration.",
        type="upstream_error",
        code="upstream_refused_proxy_key",
    )
    return refused.body(anthropic=provider.name == "anthropic")


def transport_error(exc: httpx.HTTPError) -> UpstreamError:
    """Map an httpx failure to a gateway status: 504 for timeouts, else 502.

    A client can then tell an upstream that did not answer in time from one
    that could not be reached or broke off.
    """
    # Waiting for a connection (ours, or one to open) is not the upstream being slow.
    if isinstance(exc, httpx.TimeoutException) and not isinstance(
        exc, (httpx.ConnectTimeout, httpx.PoolTimeout)
    ):
        return UpstreamError(
            504, "The upstream did not answer in time.", type="upstream_error", code="timeout"
        )
    # A transport's class for an error can be coarse (httpx-aiohttp makes every
    # aiohttp connection error a ConnectTimeout); the innermost cause it chains
    # (e.g. ServerDisconnectedError) says what happened.
    cause: BaseException = exc
    seen = {id(exc)}
    while cause.__cause__ is not None and id(cause.__cause__) not in seen:  # chains can loop
        cause = cause.__cause__
        seen.add(id(cause))
    return UpstreamError(
        502,
        f"The upstream could not be reached ({type(cause).__name__}).",
        type="upstream_error",
        code="upstream_unreachable",
    )


def bearer_token(headers: Mapping[str, str]) -> str:
    """The client's key: `Authorization: Bearer` as OpenAI SDKs send it, Azure's `api-key`,
    or Anthropic's `x-api-key`."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return (headers.get("api-key") or headers.get("x-api-key") or "").strip()


# What of a client's forwarded headers the proxy's own calls carry: whom to bill, nothing
# else, and only the provider's own (an Anthropic key never goes to OpenAI).
SIDE_CALL_HEADERS = ("authorization", "api-key", "openai-organization", "openai-project")
# anthropic-beta goes with the client's own credentials: an OAuth token is refused without
# its beta flag.
ANTHROPIC_SIDE_CALL_HEADERS = ("x-api-key", "authorization", "anthropic-version", "anthropic-beta")


class SideCallFailed(Exception):
    """A call the proxy makes on its own behalf (summary, embeddings) failed; never the client's."""


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    body: Any,
    headers: Mapping[str, str],
    timeout_s: float,
    failure: type[Exception] = SideCallFailed,
    allowed: tuple[str, ...] = SIDE_CALL_HEADERS,
) -> Any:
    """POST `body` as JSON and return the decoded 200 answer, or raise `failure`.

    Of `headers` (the client's, as forwarded) only the `allowed` go.
    The reason carries no body or header: it goes to logs, and keys must not.
    """
    sent = {name: headers[name] for name in allowed if name in headers}
    try:
        response = await client.post(
            url,
            content=orjson.dumps(body),
            headers={**sent, "content-type": "application/json"},
            timeout=timeout_s,
        )
    except httpx.HTTPError as exc:
        raise failure(type(exc).__name__) from exc
    if response.status_code != 200:
        raise failure(f"status {response.status_code}")
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise failure("answer is not JSON") from exc
