"""The forward and relay stages: the reduced turn goes upstream, the answer comes back.

The answer is relayed as it arrives, byte for byte. The turn is committed
only once the answer completed: for a stream, inside the relaying generator
before the chunk carrying `[DONE]` is passed on (SDKs return to the app at
`[DONE]`, and the app's next turn must find this one stored), so a client
that disconnects (which cancels the generator and closes the upstream
response) leaves nothing half-written.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from ..dialects import Answer, Assembler
from ..outcome import Outcome
from ..upstream import transport_error
from .commit import commit

if TYPE_CHECKING:
    from ..context import AppContext

log = logging.getLogger("context_proxy.relay")


async def send(
    ctx: AppContext, url: httpx.URL, content: bytes, headers: dict[str, str], *, events: bool
) -> httpx.Response:
    # The proxy reads the answer to keep it, so it asks for an uncompressed one.
    request = ctx.client.post_request(
        url,
        content,
        {**headers, "content-type": "application/json", "accept-encoding": "identity"},
        events=events,
    )
    try:
        return await ctx.client.send(request, stream=True)
    except httpx.HTTPError as exc:
        raise transport_error(exc) from None


async def relay(
    ctx: AppContext,
    response: httpx.Response,
    outcome: Outcome,
    assembler: Assembler,
    release: Callable[[], None],
    anthropic: bool = False,
) -> AsyncIterator[bytes]:
    """Yield the upstream's bytes as they come; commit the turn when the answer completed."""
    ctx.metrics.active_streams.inc()
    committed = False
    try:
        async for chunk in response.aiter_raw():
            assembler.feed(chunk)
            if assembler.done and not committed and assembler.complete:
                committed = True
                await commit(ctx, outcome, assembler.items(), assembler.answer_id)
            yield chunk
        assembler.close()
        if assembler.complete and not committed:
            await commit(ctx, outcome, assembler.items(), assembler.answer_id)
        elif not committed:
            not_stored(outcome, assembler.broken or ("too large" if assembler.too_large else ""))
    except httpx.HTTPError as exc:
        # Headers are gone already; end the stream with an error event in the client's shape.
        err = transport_error(exc)
        event = b"event: error\n" if anthropic else b""
        yield event + b"data: " + err.body(anthropic) + b"\n\n"
    finally:
        ctx.metrics.active_streams.dec()
        await response.aclose()
        release()


@dataclass
class Oversized:
    """A whole answer past `upstream.max_answer_bytes`: what was read, and the rest to relay."""

    head: list[bytes]
    rest: AsyncIterator[bytes]
    response: httpx.Response

    async def chunks(self, release: Callable[[], None]) -> AsyncIterator[bytes]:
        try:
            for chunk in self.head:
                yield chunk
            async for chunk in self.rest:
                yield chunk
        finally:
            await self.response.aclose()
            release()


async def read_whole(
    ctx: AppContext,
    response: httpx.Response,
    outcome: Outcome,
    answer_of: Callable[[bytes], Answer | None],
) -> bytes | Oversized:
    """A JSON answer, read whole; the turn is committed if it is a completed answer.

    An answer past `upstream.max_answer_bytes` is not held: the caller relays
    it as it comes, and the turn is not stored.
    """
    limit = ctx.settings.upstream.max_answer_bytes
    if response.is_stream_consumed:  # a transport that read it whole already (httpx's mocks)
        content = response.content
    else:
        chunks: list[bytes] = []
        size = 0
        raw = response.aiter_raw()
        async for chunk in raw:
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                not_stored(outcome, "too large")
                return Oversized(chunks, raw, response)
        content = b"".join(chunks)
    if response.status_code == 200:
        answer = answer_of(content)
        if answer is not None and answer.items:
            await commit(ctx, outcome, answer.items, answer.id)
    return content


def not_stored(outcome: Outcome, why: str) -> None:
    """Say once why a 200 answer was relayed but its turn not stored (empty: it did not finish)."""
    if why:
        log.warning(
            "conversation=%s answer relayed but not stored: %s",
            outcome.key.conversation,
            why,
            extra={"conversation": outcome.key.conversation, "not_stored": why},
        )
