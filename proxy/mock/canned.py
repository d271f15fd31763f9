"""The mock's fast path for load tests: fixed answers, pre-serialised, as a bare ASGI app.

The bench runs the mock on the two cores it measures the proxy on, so the
mock must cost next to nothing: no validation, no recording, no parsing.
Every answer is bytes made once. A body that carries the proxy's
summariser prompt gets `SUMMARY`, anything else `ANSWER`, in the shape of
the route it came to (chat, streamed or whole; Responses and Messages,
whole). Clients that resend the history resend `ANSWER` as the assistant's
turn, so the proxy sees a continuation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

ANSWER = "Understood. Here is a short, deterministic answer from the bench mock upstream."
SUMMARY = "The user and the assistant discussed benchmark topics; nothing is pending."
SUMMARIZER_MARK = b"context-proxy summarizer"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
CREATED = 1_700_000_000


def completion(text: str) -> bytes:
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": CREATED,
            "model": "bench",
            "choices": [choice],
            "usage": USAGE,
        }
    )


def sse_chunks(text: str, pieces: int = 8) -> list[bytes]:
    """Role chunk, `pieces` content chunks, finish chunk and [DONE]: ten-odd events."""

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    step = -(-len(text) // pieces)
    parts = [text[i : i + step] for i in range(0, len(text), step)]
    return [
        event({"role": "assistant", "content": ""}),
        *(event({"content": p}) for p in parts),
        event({}, "stop"),
        b"data: [DONE]\n\n",
    ]


def response(text: str) -> bytes:
    """A whole Responses answer: one output message."""
    part = {"type": "output_text", "text": text, "annotations": []}
    message = {"type": "message", "id": "msg_bench", "role": "assistant", "content": [part]}
    usage = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
    return orjson.dumps(
        {
            "id": "resp_bench",
            "object": "response",
            "created_at": CREATED,
            "model": "bench",
            "status": "completed",
            "output": [message],
            "usage": usage,
        }
    )


def message(text: str) -> bytes:
    """A whole Messages (Anthropic) answer: one text block."""
    return orjson.dumps(
        {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": "bench",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }
    )


ANSWER_JSON = completion(ANSWER)
ANSWER_SSE = sse_chunks(ANSWER)
ANSWER_RESPONSE = response(ANSWER)
ANSWER_MESSAGE = message(ANSWER)
SUMMARY_JSON = completion(SUMMARY)
SUMMARY_MESSAGE = message(SUMMARY)


def app(answer_delay_s: float = 0.0, summary_delay_s: float = 0.0) -> App:
    """The canned mock; the delays stand for a model's answer and summariser latency."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _body(receive)
        path = scope["path"]
        if scope["method"] == "GET":
            await _send_all(send, JSON_HEADERS, [b'{"status":"ok"}'])
            return
        summary = SUMMARIZER_MARK in body[:4096]
        delay = summary_delay_s if summary else answer_delay_s
        if delay:
            await asyncio.sleep(delay)
        if summary:
            answer = SUMMARY_MESSAGE if path == "/v1/messages" else SUMMARY_JSON
            await _send_all(send, JSON_HEADERS, [answer])
        elif path == "/v1/responses":
            await _send_all(send, JSON_HEADERS, [ANSWER_RESPONSE])
        elif path == "/v1/messages":
            await _send_all(send, JSON_HEADERS, [ANSWER_MESSAGE])
        elif b'"stream":true' in body or b'"stream": true' in body:
            await _send_all(send, SSE_HEADERS, ANSWER_SSE)
        else:
            await _send_all(send, JSON_HEADERS, [ANSWER_JSON])

    return serve


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _send_all(send: Send, headers: list[tuple[bytes, bytes]], parts: list[bytes]) -> None:
    if len(parts) == 1:
        headers = [*headers, (b"content-length", str(len(parts[0])).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for i, part in enumerate(parts):
        await send({"type": "http.response.body", "body": part, "more_body": i < len(parts) - 1})
