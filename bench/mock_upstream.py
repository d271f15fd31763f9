"""A fast, deterministic upstream (`python -m bench.mock_upstream`): chat, Responses, Messages.

A raw ASGI app on uvicorn with uvloop and httptools: every answer is
pre-serialised bytes, so the mock costs as little CPU as possible on a
machine whose two cores it shares with the proxy and the load generator.
Requests whose body carries the proxy's summariser prompt get a short
summary, which is what makes a steady summarising conversation possible.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from .bodies import ANSWER, SUMMARIZER_MARK, SUMMARY

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


def completion(text: str) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
        }
    )


def sse_chunks(text: str, pieces: int = 8) -> list[bytes]:
    """Role chunk, `pieces` content chunks, finish chunk and [DONE]: ten-odd events."""

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
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
            "created_at": 1700000000,
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
ANSWER_RESPONSE = response(ANSWER)
ANSWER_MESSAGE = message(ANSWER)
SUMMARY_MESSAGE = message(SUMMARY)
SUMMARY_JSON = completion(SUMMARY)
ANSWER_SSE = sse_chunks(ANSWER)


def make_app(answer_delay_s: float = 0.0, summary_delay_s: float = 0.0) -> Callable[..., Any]:
    """The mock; the delays stand for a real model's answer and summariser latency."""

    async def delayed(scope: Scope, receive: Receive, send: Send) -> None:
        await app(scope, receive, send, answer_delay_s, summary_delay_s)

    return delayed


async def app(
    scope: Scope,
    receive: Receive,
    send: Send,
    answer_delay_s: float = 0.0,
    summary_delay_s: float = 0.0,
) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    if scope["method"] == "GET":
        await _send_all(send, 200, JSON_HEADERS, [b'{"status":"ok"}'])
    elif SUMMARIZER_MARK in body[:4096]:
        if summary_delay_s:
            await asyncio.sleep(summary_delay_s)
        summary = SUMMARY_MESSAGE if scope["path"] == "/v1/messages" else SUMMARY_JSON
        await _send_all(send, 200, JSON_HEADERS, [summary])
    elif scope["path"] == "/v1/responses":  # whole answers only: the bench's Responses rows
        if answer_delay_s:
            await asyncio.sleep(answer_delay_s)
        await _send_all(send, 200, JSON_HEADERS, [ANSWER_RESPONSE])
    elif scope["path"] == "/v1/messages":  # whole answers only: the bench's Messages rows
        if answer_delay_s:
            await asyncio.sleep(answer_delay_s)
        await _send_all(send, 200, JSON_HEADERS, [ANSWER_MESSAGE])
    elif b'"stream":true' in body or b'"stream": true' in body:
        if answer_delay_s:
            await asyncio.sleep(answer_delay_s)
        await _send_all(send, 200, SSE_HEADERS, ANSWER_SSE)
    else:
        if answer_delay_s:
            await asyncio.sleep(answer_delay_s)
        await _send_all(send, 200, JSON_HEADERS, [ANSWER_JSON])


async def _send_all(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], parts: list[bytes]
) -> None:
    if len(parts) == 1:
        headers = [*headers, (b"content-length", str(len(parts[0])).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    for i, part in enumerate(parts):
        await send({"type": "http.response.body", "body": part, "more_body": i < len(parts) - 1})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--answer-delay", type=float, default=0.0, help="seconds per chat answer")
    parser.add_argument("--summary-delay", type=float, default=0.0, help="seconds per summary")
    args = parser.parse_args()
    delays = args.answer_delay or args.summary_delay
    uvicorn.run(
        make_app(args.answer_delay, args.summary_delay) if delays else app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        lifespan="on",
        backlog=4096,
    )


if __name__ == "__main__":
    main()
