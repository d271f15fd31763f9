"""`MockUpstream`: the mock provider as one Starlette app, what it recorded, and what it counts.

It routes each request to its wire's module (`chat`, `responses`,
`anthropic`, `embeddings`), records every request (`requests`) and every
answered model call with the prompt-cache hit the provider would have
given it (`calls`), and lets a test script trouble: canned failures, a
summariser that is down, slowness, a model's window, a request held until
the test lets it go (turns that overlap, in the order the test chooses).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..messages import chain_hashes
from ..tokens import REPLY_PRIMING, TokenCounter
from . import anthropic, chat, embeddings, responses
from .chat import SUMMARIZER_MARKER, Json, error_response, oai_error
from .voice import ECHO, Voice

# OpenAI caches prompts of at least 1024 tokens, in steps of 128 tokens.
CACHE_MIN_TOKENS = 1024
CACHE_STEP_TOKENS = 128
RATE_LIMITED = "Rate limit reached for requests. Please try again in 7s."
SERVER_ERROR = "The server had an error while processing your request. Sorry about that!"
# Chat models that always fail: model -> (status, message, type, code, headers).
CANNED: dict[str, tuple[int, str, str, str | None, dict[str, str]]] = {
    "error-429": (429, RATE_LIMITED, "requests", "rate_limit_exceeded", {"retry-after": "7"}),
    "error-500": (500, SERVER_ERROR, "server_error", None, {}),
    "error-401": (401, "Incorrect API key provided: sk-fake.", chat.INVALID, "invalid_api_key", {}),
}
CHAT = "/v1/chat/completions"
# Responses a request may name as its previous one (OpenAI keeps them for 30 days).
RESPONSES = 4096
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


@dataclass(frozen=True)
class Call:
    """One model call the mock answered (or refused, with `error`), as a bill would show it."""

    summary: bool
    messages: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    extends_previous: bool  # the prompt starts with the whole previous (non-summary) prompt
    error: str = ""


@dataclass
class Recorded:
    """One request as it arrived."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or the raw bytes when the body is not JSON (b"" when empty)
    raw: bytes = b""

    @property
    def is_summary(self) -> bool:
        return is_summary(self.path, self.body)


def is_summary(path: str, body: Any) -> bool:
    """Whether a request is the proxy's own summariser call, on whichever route."""
    if not isinstance(body, dict):
        return False
    if path == "/v1/messages":
        return SUMMARIZER_MARKER in json.dumps(body.get("system") or "")
    if path == "/v1/responses":
        return SUMMARIZER_MARKER in str(body.get("instructions"))
    return path.endswith("/chat/completions") and chat.is_summary_request(body)


@dataclass
class MockUpstream:
    """Serve `.app` (in-process through httpx.ASGITransport, or with uvicorn); read what it saw.

    `counter` counts prompts as the proxy does (the demo's cost figures);
    without it a prompt is its JSON's length over four.
    """

    voice: Voice = ECHO
    counter: TokenCounter | None = None
    summary_text: Callable[[Json], str] | None = None
    chunk_delay_s: float = 0.0
    context_limits: dict[str, int] = field(default_factory=dict)
    summarizer_down: bool = False
    embeddings_down: bool = False
    slow_s: float = 0.0
    requests: list[Recorded] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    failures: deque[tuple[int, Any, dict[str, str]]] = field(default_factory=deque)
    held: deque[threading.Event] = field(default_factory=deque)
    # Each response given, as it left its chain (its calls, those answered, its programs).
    given: LRUCache[str, responses.Chain] = field(default_factory=lambda: LRUCache(RESPONSES))
    app: Starlette = field(init=False, repr=False)
    _seen: OrderedDict[str, int] = field(default_factory=OrderedDict, repr=False)
    _previous_head: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        self.app = Starlette(routes=[Route("/{path:path}", self.handle, methods=_METHODS)])

    # -- what a test scripts and reads ---------------------------------------------------------
    def fail_next(
        self, status: int = 500, body: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        """Queue a canned error answer for the next (non-summariser) chat request."""
        body = oai_error(f"canned error {status}", "server_error") if body is None else body
        self.failures.append((status, body, dict(headers or {})))

    def hold_next(self) -> threading.Event:
        """Hold the next (non-summariser) request, once recorded, until the event is set."""
        gate = threading.Event()
        self.held.append(gate)
        return gate

    def reset(self) -> None:
        self.requests.clear()
        self.failures.clear()
        self.summarizer_down, self.slow_s = False, 0.0

    def records(self, path: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if path is None or r.path == path]

    def chat_records(self) -> list[Recorded]:
        return [r for r in self.records(CHAT) if not r.is_summary]

    def chat_requests(self) -> list[Json]:
        """Bodies of the chat completion requests, excluding summariser calls."""
        return [r.body for r in self.chat_records()]

    def responses_requests(self) -> list[Json]:
        """Bodies of the `/v1/responses` requests."""
        return [r.body for r in self.records("/v1/responses")]

    def messages_requests(self) -> list[Json]:
        """Bodies of the `/v1/messages` requests, excluding summariser calls."""
        return [r.body for r in self.records("/v1/messages") if not r.is_summary]

    def summary_requests(self) -> list[Json]:
        """Summariser calls, whichever API they went through."""
        paths = ("/v1/chat/completions", "/v1/messages")
        return [r.body for r in self.requests if r.path in paths and r.is_summary]

    def last_chat(self) -> Json:
        return self.chat_requests()[-1]

    @property
    def summary_calls(self) -> list[Call]:
        return [c for c in self.calls if c.summary]

    # -- HTTP ----------------------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else b""
        except ValueError:
            body = raw
        method, path, headers = request.method, request.url.path, dict(request.headers.items())
        self.requests.append(Recorded(method, path, request.url.query, headers, body, raw))
        if self.slow_s:
            await asyncio.sleep(self.slow_s)
        if self.held and not is_summary(path, body):
            await asyncio.to_thread(self.held.popleft().wait)  # set from the test's thread
        route = (method, path)
        if route == ("POST", CHAT):
            return self.chat(raw, body)
        if route == ("POST", "/v1/responses"):
            return self.responses(raw, body)
        if route == ("POST", "/v1/messages"):
            return self.messages(raw, body, headers)
        if route == ("POST", "/v1/messages/count_tokens"):
            return JSONResponse({"input_tokens": len(raw) // 4})
        if route == ("POST", "/v1/embeddings"):
            if self.embeddings_down:
                return error_response(503, SERVER_ERROR, type_="server_error")
            return embeddings.embeddings(body)
        if method == "GET" and (path == "/v1/models" or path.startswith("/v1/models/")):
            return embeddings.models(path)
        return error_response(404, f"Invalid URL ({method} {path})")

    def chat(self, raw: bytes, body: Any) -> Response:
        try:
            if isinstance(body, bytes):
                raise chat.BadRequest("We could not parse the JSON body of your request.")
            messages = chat.validate_chat(body)
        except chat.BadRequest as e:
            self._refused(e)
            return error_response(400, str(e), param=e.param, code=e.code)
        summary, model = is_summary(CHAT, body), str(body["model"])
        if summary and self.summarizer_down:
            return error_response(500, "summariser is down", type_="server_error")
        if not summary and self.failures:
            status, fail_body, headers = self.failures.popleft()
            return JSONResponse(fail_body, status_code=status, headers=headers)
        if model in CANNED:
            status, said, type_, code, headers = CANNED[model]
            return JSONResponse(oai_error(said, type_, None, code), status, headers)
        prompt = self._tokens(model, messages)
        requested = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        limit = self.context_limits.get(model)
        if limit is not None and prompt + requested > limit:
            said = (
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt + requested} tokens ({prompt} in the messages, {requested} in the "
                "completion). Please reduce the length of the messages or completion."
            )
            return error_response(400, said, param="messages", code="context_length_exceeded")
        content: str | None
        if summary:
            summarise = self.summary_text or (lambda b: chat.summary_of(b["messages"], self.voice))
            content, call = summarise(body), None
        else:
            content, call = chat.answer_for(messages, self.voice)
        completion = max(1, math.ceil(len(content or json.dumps(call)) / 4))
        cached = self._bill(model, messages, summary, prompt, completion)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        cid = "chatcmpl-" + hashlib.sha256(raw).hexdigest()[:24]
        base = {"id": cid, "created": chat.CREATED, "model": model}
        base["system_fingerprint"] = chat.FINGERPRINT
        message: Json = {"role": "assistant", "content": content, "refusal": None}
        message.update({"annotations": [], "tool_calls": [call]} if call else {"annotations": []})
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            shown = usage if include_usage else None
            events = chat.events(base, message, shown, self.chunk_delay_s)
            return StreamingResponse(events, media_type="text/event-stream")
        finish = "tool_calls" if call else "stop"
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        return JSONResponse(
            {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
        )

    def responses(self, raw: bytes, body: Any) -> Response:
        try:
            items, chain = responses.validate(body, self.context_limits, self.given)
        except responses.Invalid as exc:
            self._refused(exc)
            error = oai_error(str(exc), param=exc.param, code=exc.code)
            return JSONResponse(error, status_code=400)
        digest = hashlib.sha256(raw).hexdigest()[:16]
        summary = is_summary("/v1/responses", body)
        if summary:
            texts = [chat.text_of(i.get("content")) for i in items]
            output = [responses.message(digest, self.voice.summary(texts))]
        else:
            chained = body.get("previous_response_id") is not None
            output = responses.output_for(items, digest, self.voice, body.get("tools"), chained)
        model = str(body["model"])
        prompt = self._tokens(model, items)
        completion = max(1, math.ceil(len(json.dumps(output)) / 4))
        cached = self._bill(model, items, summary, prompt, completion)
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }
        for item in output:
            chain.read(item, "output")
        self.given[f"resp_{digest}"] = chain
        final = responses.response_object(body, digest, output, "completed", usage)
        if body.get("stream"):
            return StreamingResponse(responses.events(final), media_type="text/event-stream")
        return JSONResponse(final)

    def messages(self, raw: bytes, body: Any, headers: dict[str, str]) -> Response:
        try:
            if not isinstance(body, dict):
                raise anthropic.Invalid("The request body is not valid JSON.")
            messages = anthropic.validate(body, headers, self.context_limits)
        except anthropic.Invalid as exc:
            self._refused(exc)
            return JSONResponse(anthropic.error_body(str(exc)), status_code=400)
        digest = hashlib.sha256(raw).hexdigest()[:16]
        summary = is_summary("/v1/messages", body)
        if summary:
            text = self.voice.summary([anthropic.text_of(m) for m in messages])
            content, stop = [{"type": "text", "text": text}], "end_turn"
        else:
            content, stop = anthropic.content_for(
                messages, digest, self.voice, body.get("tools") or []
            )
        model = str(body["model"])
        prompt = self._tokens(model, messages)
        completion = max(1, math.ceil(len(json.dumps(content)) / 4))
        cached = self._bill(model, messages, summary, prompt, completion)
        usage = {"input_tokens": prompt - cached, "cache_read_input_tokens": cached}
        final = {
            "id": f"msg_{digest}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": completion},
        }
        if body.get("stream"):
            return StreamingResponse(anthropic.events(final), media_type="text/event-stream")
        return JSONResponse(final)

    # -- what a call costs ---------------------------------------------------------------------
    def _refused(self, reason: Exception) -> None:
        """A call the provider would refuse: billed as nothing, with the reason."""
        self.calls.append(Call(False, 0, 0, 0, 0, False, error=str(reason)))

    def _tokens(self, model: str, items: Sequence[Json], prefix: bool = False) -> int:
        """A prompt's tokens (or a prefix's, without the reply priming)."""
        if self.counter is None:
            return chat.estimate_tokens(list(items))
        return self.counter.count_messages(model, items) - (REPLY_PRIMING if prefix else 0)

    def _bill(
        self, model: str, items: Sequence[Json], summary: bool, prompt: int, completion: int
    ) -> int:
        """Record the call; its cached prompt tokens: the longest prefix seen before.

        A prefix counts from 1024 tokens, in steps of 128, as OpenAI caches.
        """
        hashes = chain_hashes(items)
        hit = max((i + 1 for i, h in enumerate(hashes) if h in self._seen), default=0)
        tokens = self._tokens(model, items[:hit], prefix=True) if hit else 0
        cached = (
            tokens // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS if tokens >= CACHE_MIN_TOKENS else 0
        )
        extends = bool(self._previous_head) and self._previous_head in hashes
        for h in hashes:
            self._seen[h] = 1
            self._seen.move_to_end(h)
        while len(self._seen) > 200_000:
            self._seen.popitem(last=False)
        if not summary and hashes:
            self._previous_head = hashes[-1]
        self.calls.append(Call(summary, len(items), prompt, cached, completion, extends))
        return cached
