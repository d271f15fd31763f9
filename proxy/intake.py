"""Reading a client's request body, whatever its wire format: size, time and media type.

What the body must hold is the dialect's to check (`dialects/`).
"""

from __future__ import annotations

import asyncio
import zlib

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


# Content-Encodings a client may compress its body with, as zlib's window bits.
# HTTP's "deflate" is zlib's format; some clients send raw deflate, tried next.
INFLATE = {"gzip": 31, "x-gzip": 31, "deflate": 15}


def decoded(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body with its Content-Encoding undone, refusing more than `limit` bytes of it.

    The proxy reads the history and forwards a body of its own, so it must
    see the JSON: a compressed body read as it is would be refused as
    malformed JSON, which sends an operator looking in the wrong place.
    """
    for name in reversed((encoding or "").lower().split(",")):  # the last applied first
        name = name.strip()
        if name in ("", "identity"):
            continue
        wbits = INFLATE.get(name)
        if wbits is None:
            raise ProxyError(
                415,
                f"Content-Encoding {name!r} is not supported: send the body as it is, "
                "or gzip or deflate it.",
                code="unsupported_encoding",
            )
        attempts = (wbits, -15) if wbits == 15 else (wbits,)
        for i, bits in enumerate(attempts, 1):
            try:
                body = _inflate(body, bits, limit)
                break
            except zlib.error:
                if i == len(attempts):
                    raise ProxyError(400, f"The request body is not valid {name} data.") from None
    return body


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    """Decompress every member of `data`, never holding more than `limit` + 1 bytes of it."""
    out: list[bytes] = []
    size = 0
    while True:
        inflater = zlib.decompressobj(wbits)
        chunk = inflater.decompress(data, limit + 1 - size)
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        if not inflater.eof:
            raise zlib.error("the data is cut short")
        out.append(chunk)
        data = inflater.unused_data
        if not data:  # gzip allows several members one after the other
            return b"".join(out)


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
