"""A request the server cuts when it stops: answered 503 in its route's shape, if anyone is there.

Past `server.shutdown_timeout_s`, uvicorn cancels the requests still under
way, and answers those that had no answer yet with a plain-text 500; the
client's SDK can tell a 503 is worth retrying, elsewhere. An answer already
streaming is cut as it is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ProxyError
from .upstream import speaks_anthropic

log = logging.getLogger("context_proxy.app")

# What a route leaves in the request's state (`request.state`, `turn/pipeline.py`) for
# an answer it does not make itself: the conversation's id, and the access line to
# write with the status answered.
CONVERSATION = "conversation"
CUT_LINE = "cut_line"


def leave_conversation(request: Request, conversation: str) -> None:
    """Leave the request's conversation id for a 503 this middleware answers."""
    setattr(request.state, CONVERSATION, conversation)


def leave_cut_line(request: Request, line: Callable[[int], None]) -> None:
    """Leave the access line to write, with the status, if this middleware answers."""
    setattr(request.state, CUT_LINE, line)


class CutAtShutdown:
    """Pure ASGI middleware: a request the server cancels before it answered gets a 503.

    The server cancels a request's task itself only when it stops: uvicorn
    does it past its graceful timeout and never for a client that left (its
    request runs on, and its answer goes nowhere); a server that cancels for
    a client that left leaves nobody to answer. So the 503 goes to a client
    still connected, with the `X-Conversation-Id` and the access line any
    other error the proxy answers has; a client gone gets nothing.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            if started:
                raise
            if _gone(receive):
                log.info("request to %s cancelled: its client left", scope["path"])
                return
            log.warning("request to %s cut: the server is stopping", scope["path"])
            await _answer(scope, send)


def _gone(receive: Receive) -> bool:
    """Whether the client has hung up: the server has a disconnect to give at once.

    ASGI gives no way to ask without waiting, so the `receive` awaitable is
    stepped once by hand (public Python: `__await__`, `next`), relying on the
    server to answer a disconnect it already saw without suspending, as
    uvicorn does; one that suspends reads as a client still there (the 503 is
    then sent to nobody, as before this check).

    The routes read the body first, so what the server has left to say is the
    disconnect, if there was one; a client still there makes `receive` wait,
    and that wait is left at its first step, never handed to the event loop:
    past the cut the server ends its loop, cancelling whatever still waits.
    """
    step = receive().__await__()
    try:
        next(step)
    except StopIteration as answered:
        return bool(answered.value["type"] == "http.disconnect")
    finally:
        step.close()
    return False


async def _answer(scope: Scope, send: Send) -> None:
    error = ProxyError(503, "The proxy is stopping; retry the request.", type="server_error")
    state = scope.get("state") or {}
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    body = error.body(anthropic=speaks_anthropic(scope["path"], headers))
    sent = [(b"content-type", b"application/json"), (b"connection", b"close")]
    conversation = state.get(CONVERSATION)
    if isinstance(conversation, str):
        sent.append((b"x-conversation-id", conversation.encode("latin-1")))
    line: Callable[[int], None] | None = state.get(CUT_LINE)
    if line is not None:
        line(error.status)
    await send({"type": "http.response.start", "status": error.status, "headers": sent})
    await send({"type": "http.response.body", "body": body})
