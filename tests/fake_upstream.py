"""A small but realistic OpenAI-compatible upstream for tests: validates, records, answers.

Answers are deterministic. Chat: a last user message containing "call tool NAME" gets one
tool call to NAME; a last tool result gets "Tool said: ..."; anything else "Echo: ...".
Summariser requests (first message a system message containing "context-proxy summarizer")
get "SUMMARY[...]". Models "error-429" / "error-500" / "error-401" answer with that error.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import re
import struct
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import fake_anthropic, fake_responses

Json: TypeAlias = dict[str, Any]
SUMMARIZER_MARKER = "context-proxy summarizer"
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
MODELS = ("gpt-4o-mini", "gpt-4o", "gpt-4.1-mini", "text-embedding-3-small")
INVALID = "invalid_request_error"
CREATED = 1_700_000_000
FINGERPRINT = "fp_fake0001"
ORPHAN_TOOL = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
    "message with 'tool_calls'."
)
MISSING_RESULTS = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
)
RATE_LIMITED = "Rate limit reached for requests. Please try again in 7s."
SERVER_ERROR = "The server had an error while processing your request. Sorry about that!"
# model -> (status, message, type, code, headers)
CANNED: dict[str, tuple[int, str, str, str | None, dict[str, str]]] = {
    "error-429": (429, RATE_LIMITED, "requests", "rate_limit_exceeded", {"retry-after": "7"}),
    "error-500": (500, SERVER_ERROR, "server_error", None, {}),
    "error-401": (401, "Incorrect API key provided: sk-fake.", INVALID, "invalid_api_key", {}),
}


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


def missing(param: str) -> BadRequest:
    return BadRequest(
        f"Missing required parameter: '{param}'.", param, "missing_required_parameter"
    )


def invalid_type(param: str, expected: str) -> BadRequest:
    return BadRequest(f"Invalid type for '{param}': expected {expected}.", param, "invalid_type")


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or the raw bytes when the body is not JSON (b"" when empty)
    raw: bytes = b""

    @property
    def is_summary(self) -> bool:
        if self.path == "/v1/messages":
            system = self.body.get("system") if isinstance(self.body, dict) else None
            return SUMMARIZER_MARKER in json.dumps(system or "")
        return self.path.endswith("/chat/completions") and is_summary_request(self.body)


def oai_error(
    message: str, type_: str = INVALID, param: str | None = None, code: str | None = None
) -> Json:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(status: int, message: str, **kwargs: Any) -> JSONResponse:
    return JSONResponse(oai_error(message, **kwargs), status_code=status)


def text_of(content: Any) -> str:
    """The text of a message content: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def estimate_tokens(messages: list[Any]) -> int:
    """The fake's prompt-token estimate: total len(json.dumps(message)) / 4, rounded up."""
    return math.ceil(sum(len(json.dumps(m)) for m in messages) / 4)


def is_summary_request(body: Any) -> bool:
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
        return False
    marked = SUMMARIZER_MARKER in text_of(messages[0].get("content")).lower()
    return marked and messages[0].get("role") == "system"


def validate_chat(body: Any) -> None:
    """Raise BadRequest the way OpenAI's /v1/chat/completions rejects a body."""
    if not isinstance(body, dict):
        raise invalid_type("body", "an object")
    if not body.get("model"):
        raise BadRequest("you must provide a model parameter")
    messages = body.get("messages")
    if messages is None:
        raise missing("messages")
    if not isinstance(messages, list):
        raise invalid_type("messages", "an array of objects")
    if not messages:
        message = "Invalid 'messages': empty array. Expected an array with minimum length 1."
        raise BadRequest(message, "messages", "empty_array")
    if body.get("stream_options") is not None and not body.get("stream"):
        message = "The 'stream_options' parameter is only allowed when 'stream' is enabled."
        raise BadRequest(message, "stream_options", "invalid_value")
    for i, m in enumerate(messages):
        validate_message(f"messages[{i}]", m)
    validate_tool_chains(messages)


def validate_message(where: str, m: Any) -> None:
    if not isinstance(m, dict):
        raise invalid_type(where, "an object")
    role = m.get("role")
    if role is None:
        raise missing(f"{where}.role")
    if role not in ROLES:
        message = f"Invalid value: '{role}'. Supported values are: {', '.join(ROLES)}."
        raise BadRequest(message, f"{where}.role", "invalid_value")
    if role == "tool" and not m.get("tool_call_id"):
        raise missing(f"{where}.tool_call_id")
    if role != "assistant" and m.get("content") is None:
        raise missing(f"{where}.content")
    calls = m.get("tool_calls") or m.get("function_call")
    if role == "assistant" and m.get("content") is None and not calls:
        message = "Invalid value for 'content': expected a string, got null."
        raise BadRequest(message, f"{where}.content")
    for call in m.get("tool_calls") or []:
        if not isinstance(call, dict) or not call.get("id") or "function" not in call:
            raise invalid_type(f"{where}.tool_calls", "calls with an id and a function")


def validate_tool_chains(messages: list[Json]) -> None:
    """Each assistant tool_calls message is immediately followed by exactly its tool results."""
    i = 0
    while i < len(messages):
        m = messages[i]
        if m["role"] == "tool":
            raise BadRequest(ORPHAN_TOOL, f"messages.[{i}].role", None)
        i += 1
        if m["role"] != "assistant" or not m.get("tool_calls"):
            continue
        pending = [c["id"] for c in m["tool_calls"]]
        while i < len(messages) and messages[i]["role"] == "tool":
            if messages[i]["tool_call_id"] not in pending:
                raise BadRequest(ORPHAN_TOOL, f"messages.[{i}].role", None)
            pending.remove(messages[i]["tool_call_id"])
            i += 1
        if pending:
            raise BadRequest(MISSING_RESULTS + ", ".join(pending), f"messages.[{i - 1}].role", None)


def default_summary(body: Json) -> str:
    rest = [m for m in body["messages"][1:] if text_of(m.get("content"))]
    last = text_of(rest[-1].get("content")) if rest else ""
    return f"SUMMARY[{len(body['messages'])} messages; last: {last[:40]}]"


def answer_for(body: Json) -> tuple[str | None, Json | None]:
    """(content, tool_call) for a normal chat request."""
    messages = body["messages"]
    last = messages[-1]
    text = text_of(last.get("content"))
    if last["role"] == "user" and (match := re.search(r"call tool\s*(\w*)", text, re.IGNORECASE)):
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]
        fn = {"name": match.group(1) or "lookup", "arguments": json.dumps({"q": text[:60]})}
        return None, {"id": f"call_{digest}", "type": "function", "function": fn}
    if last["role"] == "tool":
        return f"Tool said: {text[:50]}", None
    users = [text_of(m.get("content")) for m in messages if m["role"] == "user"]
    return f"Echo: {(users[-1] if users else text)[:200]}", None


def usage_of(prompt: int, completion: int) -> Json:
    total = prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def pieces(text: str, size: int = 0) -> list[str]:
    """Split text into stream fragments: by words (keeping spaces), or fixed-size slices."""
    if size:
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]
    return re.findall(r"\S+\s*|\s+", text) or [""]


@dataclass
class FakeUpstream:
    summary_text: Callable[[Json], str] | None = None
    chunk_delay_s: float = 0.0
    context_limits: dict[str, int] = field(default_factory=dict)
    summarizer_down: bool = False
    slow_s: float = 0.0
    requests: list[RecordedRequest] = field(default_factory=list)
    failures: deque[tuple[int, Any, dict[str, str]]] = field(default_factory=deque)
    embeddings_down: bool = False
    response_ids: set[str] = field(default_factory=set)
    app: Starlette = field(init=False, repr=False)

    def __post_init__(self) -> None:
        methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
        self.app = Starlette(routes=[Route("/{path:path}", self.handle, methods=methods)])

    # -- test helpers -------------------------------------------------------------------------
    def fail_next(
        self, status: int = 500, body: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        """Queue a canned error answer for the next (non-summariser) chat request."""
        body = oai_error(f"canned error {status}", "server_error") if body is None else body
        self.failures.append((status, body, dict(headers or {})))

    def reset(self) -> None:
        self.requests.clear()
        self.failures.clear()
        self.summarizer_down, self.slow_s = False, 0.0

    def records(self, path: str | None = None) -> list[RecordedRequest]:
        return [r for r in self.requests if path is None or r.path == path]

    def chat_records(self) -> list[RecordedRequest]:
        return [r for r in self.records("/v1/chat/completions") if not r.is_summary]

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

    # -- HTTP ---------------------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else b""
        except ValueError:
            body = raw
        method, path, headers = request.method, request.url.path, dict(request.headers.items())
        self.requests.append(RecordedRequest(method, path, request.url.query, headers, body, raw))
        if self.slow_s:
            await asyncio.sleep(self.slow_s)
        route = (method, path)
        if route == ("POST", "/v1/chat/completions"):
            return await self.chat(raw, body)
        if route == ("POST", "/v1/responses"):
            return fake_responses.answer(body, raw, self.context_limits, self.response_ids)
        if route == ("POST", "/v1/messages"):
            return fake_anthropic.answer(body, raw, headers, self.context_limits)
        if route == ("POST", "/v1/messages/count_tokens"):
            return JSONResponse({"input_tokens": len(raw) // 4})
        if route == ("POST", "/v1/embeddings"):
            if self.embeddings_down:
                return error_response(503, SERVER_ERROR, type_="server_error")
            return embeddings(body)
        if route == ("GET", "/v1/models"):
            return JSONResponse({"object": "list", "data": [model_card(m) for m in MODELS]})
        if method == "GET" and path.startswith("/v1/models/"):
            model = path.removeprefix("/v1/models/")
            if model in MODELS:
                return JSONResponse(model_card(model))
            return error_response(
                404, f"The model '{model}' does not exist", code="model_not_found"
            )
        return error_response(404, f"Invalid URL ({method} {path})")

    async def chat(self, raw: bytes, body: Any) -> Response:
        if isinstance(body, bytes):
            return error_response(400, "We could not parse the JSON body of your request.")
        try:
            validate_chat(body)
        except BadRequest as e:
            return error_response(400, str(e), param=e.param, code=e.code)
        summary, model = is_summary_request(body), body["model"]
        if summary and self.summarizer_down:
            return error_response(500, "summariser is down", type_="server_error")
        if not summary and self.failures:
            status, fail_body, headers = self.failures.popleft()
            return JSONResponse(fail_body, status_code=status, headers=headers)
        if model in CANNED:
            status, message, type_, code, headers = CANNED[model]
            return JSONResponse(oai_error(message, type_, None, code), status, headers)
        prompt = estimate_tokens(body["messages"])
        requested = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        limit = self.context_limits.get(model)
        if limit is not None and prompt + requested > limit:
            message = (
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt + requested} tokens ({prompt} in the messages, {requested} in the "
                "completion). Please reduce the length of the messages or completion."
            )
            return error_response(400, message, param="messages", code="context_length_exceeded")
        if summary:
            content, call = (self.summary_text or default_summary)(body), None
        else:
            content, call = answer_for(body)
        usage = usage_of(prompt, max(1, math.ceil(len(content or json.dumps(call)) / 4)))
        cid = "chatcmpl-" + hashlib.sha256(raw).hexdigest()[:24]
        base = {"id": cid, "created": CREATED, "model": model, "system_fingerprint": FINGERPRINT}
        message: Json = {"role": "assistant", "content": content, "refusal": None}
        message.update({"annotations": [], "tool_calls": [call]} if call else {"annotations": []})
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = self.stream(base, message, usage if include_usage else None)
            return StreamingResponse(events, media_type="text/event-stream")
        finish = "tool_calls" if call else "stop"
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        return JSONResponse(
            {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
        )

    async def stream(self, base: Json, message: Json, usage: Json | None) -> AsyncIterator[bytes]:
        """OpenAI's SSE: role chunk, content or tool-call fragments, finish, [usage], [DONE]."""

        def event(delta: Json | None, finish: str | None = None) -> bytes:
            chunk: Json = {**base, "object": "chat.completion.chunk", "choices": []}
            if delta is not None:
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                chunk["choices"] = [choice]
            if usage is not None:  # include_usage: null in every chunk but the extra last one
                chunk["usage"] = usage if delta is None else None
            return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

        calls = message.get("tool_calls")
        if calls:
            head = {"index": 0, **calls[0], "function": {**calls[0]["function"], "arguments": ""}}
            deltas = [{"role": "assistant", "content": None, "tool_calls": [head], "refusal": None}]
            args = pieces(calls[0]["function"]["arguments"], 7)
            deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": a}}]} for a in args]
        else:
            deltas = [{"role": "assistant", "content": "", "refusal": None}]
            deltas += [{"content": p} for p in pieces(message["content"] or "")]
        for delta in deltas:
            yield event(delta)
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
        yield event({}, "tool_calls" if calls else "stop")
        if usage is not None:
            yield event(None)
        yield b"data: [DONE]\n\n"


def model_card(model: str) -> Json:
    return {"id": model, "object": "model", "created": 0, "owned_by": "fake"}


EMBEDDING_DIMS = 64
_EMBED_WORD = re.compile(r"[a-z0-9]{3,}")
_EMBED_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "are",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "how",
        "you",
        "your",
    ]
)


def embedding_of(text: str) -> list[float]:
    """Hashed bag of words, unit length: texts sharing rare words are similar, as with a model."""
    words = [w for w in _EMBED_WORD.findall(text.lower()) if w not in _EMBED_STOP] or [text]
    vector = [0.0] * EMBEDDING_DIMS
    for word in words:
        h = hashlib.sha256(word.encode()).digest()
        vector[h[0] % EMBEDDING_DIMS] += 1.0 if h[1] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [round(x / norm, 6) for x in vector]


def embeddings(body: Any) -> Response:
    if not isinstance(body, dict) or "input" not in body or not body.get("model"):
        return error_response(400, "Missing required parameter: 'input' or 'model'.")
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    texts = [x if isinstance(x, str) else json.dumps(x) for x in inputs]
    data = []
    for i, text in enumerate(texts):
        vector: Any = embedding_of(text)
        if body.get("encoding_format") == "base64":  # the openai client asks for this by default
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": vector})
    tokens = sum(max(1, len(t) // 4) for t in texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return JSONResponse({"object": "list", "data": data, "model": body["model"], "usage": usage})


def create_fake_upstream(
    *,
    summary_text: Callable[[Json], str] | None = None,
    chunk_delay_s: float = 0.0,
    context_limits: dict[str, int] | None = None,
) -> FakeUpstream:
    """A fresh fake; serve `.app` (TestClient or tests.servers.run_server), inspect `.requests`."""
    limits = dict(context_limits or {})
    return FakeUpstream(summary_text, chunk_delay_s, limits)
