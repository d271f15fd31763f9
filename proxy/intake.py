"""Reading a client's request body, whatever its wire format: size, time and media type.

What the body must hold is the dialect's to check (`dialects/`).
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from .errors import ProxyError


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, refusing more than `limit` bytes before reading them all.

    A client that takes longer than `timeout_s` to send it gets a 408, so a
    slow sender cannot hold a connection and its buffers for ever.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise ProxyError(
            408,
            f"The request body did not arrive within {timeout_s:g} s (server.body_timeout_s).",
            code="request_timeout",
        ) from None
    return b"".join(chunks)


def too_large(limit: int) -> ProxyError:
    return ProxyError(
        413,
        f"Request body exceeds the proxy's limit of {limit} bytes.",
        code="request_too_large",
    )


def check_content_type(value: str | None) -> None:
    """JSON or nothing: a form post (curl -d without a header) would be misread otherwise."""
    if value is None:
        return
    media = value.split(";", 1)[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        raise ProxyError(
            415,
            f"Content-Type must be application/json, not {media!r}.",
            code="unsupported_media_type",
        )
