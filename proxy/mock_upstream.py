"""A deterministic OpenAI-compatible upstream for `demo` and `simulate`: no key, no network.

It answers `/v1/chat/completions` (plain and SSE), including the proxy's own
summariser calls, `/v1/responses` and `/v1/messages` (whole answers),
rejects broken tool chains the way the providers do (so a reduction that
split a chain shows up as a 400, not as a pretty number), and records every
call with the prompt-cache hit the provider would have given it.
Answers depend only on the request, so two runs print the same report.

- a last user message containing "call tool NAME" gets one tool call to NAME;
- a last tool result gets a short answer quoting it;
- anything else gets a paragraph about the user's words;
- a first system message containing "context-proxy summarizer" gets a summary.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .messages import Message, chain_hashes, role, text_of
from .tokens import REPLY_PRIMING, TokenCounter

SUMMARIZER_MARKER = "context-proxy summarizer"
# OpenAI caches prompts of at least 1024 tokens, in steps of 128 tokens.
CACHE_MIN_TOKENS = 1024
CACHE_STEP_TOKENS = 128
ORPHAN_TOOL = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
    "message with 'tool_calls'."
)
MISSING_RESULTS = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
)
_FILLER = (
    "I checked this against what we decided earlier and it still holds.",
    "The main risk is the ordering of the steps, so I would do them one at a time.",
    "Keep an eye on the error rate for a day before moving on.",
    "If anything looks off, roll back first and investigate afterwards.",
    "This also keeps the change small enough to review in one sitting.",
    "The numbers you gave are consistent with the earlier measurements.",
    "I would write this down in the runbook so the next person finds it.",
    "A short test on a copy of production data would settle the question.",
)


class _CharEstimate:
    """An encoder that counts 4 characters a token: offline, fast and the same everywhere."""

    def encode(self, text: str, *, disallowed_special: Any = ()) -> list[int]:
        return [0] * math.ceil(len(text) / 4)


def offline_counter() -> TokenCounter:
    """A TokenCounter that never downloads a tiktoken encoding (demo and simulate run offline)."""
    return TokenCounter(loader=lambda _name: _CharEstimate())


@dataclass(frozen=True)
class Call:
    """One chat-completions call as the mock saw it."""

    summary: bool
    messages: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    extends_previous: bool  # the prompt starts with the whole previous (chat) prompt
    error: str = ""


class BadRequest(Exception):
    pass


def validate_tool_chains(messages: Sequence[Message]) -> None:
    """Each assistant tool_calls message is followed by exactly its tool results."""
    i = 0
    while i < len(messages):
        m = messages[i]
        if role(m) == "tool":
            raise BadRequest(ORPHAN_TOOL)
        i += 1
        if role(m) != "assistant" or not m.get("tool_calls"):
            continue
        pending = [c.get("id") for c in m["tool_calls"]]
        while i < len(messages) and role(messages[i]) == "tool":
            if messages[i].get("tool_call_id") not in pending:
                raise BadRequest(ORPHAN_TOOL)
            pending.remove(messages[i].get("tool_call_id"))
            i += 1
        if pending:
            raise BadRequest(MISSING_RESULTS + ", ".join(str(p) for p in pending))


def is_summary_request(messages: Sequence[Message]) -> bool:
    first = messages[0] if messages else {}
    return role(first) == "system" and SUMMARIZER_MARKER in text_of(first).lower()


def mock_summary(messages: Sequence[Message]) -> str:
    """A compact, deterministic summary: the user's requests and the tools used, in order."""
    text = "\n".join(text_of(m) for m in messages[1:])
    asks = [line[6:].split(". ")[0][:70] for line in text.splitlines() if line.startswith("user: ")]
    tools = sorted(set(re.findall(r"call tool (\w+)", text)))
    earlier = "earlier summary kept; " if "[summary of the conversation" in text else ""
    shown = [*asks[:3], "...", *asks[-3:]] if len(asks) > 6 else asks
    return (
        f"Summary ({earlier}{len(asks)} user requests): "
        + "; ".join(shown)
        + (f". Tools used: {', '.join(tools)}." if tools else ".")
    )


def answer_for(messages: Sequence[Message]) -> tuple[str | None, dict[str, Any] | None]:
    """(content, tool_call) for an ordinary chat request."""
    last = messages[-1]
    text = text_of(last)
    if role(last) == "user" and (match := re.search(r"call tool (\w+)", text, re.IGNORECASE)):
        digest = hashlib.sha256(json.dumps(list(messages), sort_keys=True).encode()).hexdigest()
        fn = {"name": match.group(1), "arguments": json.dumps({"query": text[:80]})}
        return None, {"id": f"call_{digest[:16]}", "type": "function", "function": fn}
    if role(last) == "tool":
        return f"The tool returned: {text[:160]}. That answers the question.", None
    seed = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    extra = [_FILLER[(seed >> (4 * i)) % len(_FILLER)] for i in range(2 + seed % 3)]
    return f"About \u201c{text[:120]}\u201d: " + " ".join(extra), None


@dataclass
class MockUpstream:
    """Serve `.app` (in-process through httpx.ASGITransport, or with uvicorn); read `.calls`."""

    counter: TokenCounter = field(default_factory=offline_counter)
    calls: list[Call] = field(default_factory=list)
    app: Starlette = field(init=False, repr=False)
    _seen: OrderedDict[str, int] = field(default_factory=OrderedDict, repr=False)
    _previous_head: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/responses", self.responses, methods=["POST"]),
                Route("/v1/messages", self.messages, methods=["POST"]),
            ],
        )

    @property
    def summary_calls(self) -> list[Call]:
        return [c for c in self.calls if c.summary]

    def _count(self, model: str, messages: Sequence[Message]) -> int:
        return self.counter.count_messages(model, messages)

    def _cached(self, model: str, messages: Sequence[Message]) -> tuple[int, bool]:
        """Cached prompt tokens (longest previously seen prefix) and whether the
        prompt extends the previous chat prompt; then remember this prompt's prefixes."""
        hashes = chain_hashes(messages)
        hit = max((i + 1 for i, h in enumerate(hashes) if h in self._seen), default=0)
        prefix = self._count(model, messages[:hit]) - REPLY_PRIMING if hit else 0
        cached = (
            prefix // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS if prefix >= CACHE_MIN_TOKENS else 0
        )
        extends = bool(self._previous_head) and self._previous_head in hashes
        for h in hashes:
            self._seen[h] = 1
            self._seen.move_to_end(h)
        while len(self._seen) > 200_000:
            self._seen.popitem(last=False)
        return cached, extends

    async def chat(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
            messages = body["messages"]
            model = str(body["model"])
            validate_tool_chains(messages)
        except (ValueError, KeyError, TypeError, BadRequest) as exc:
            reason = str(exc) if isinstance(exc, BadRequest) else "Invalid request body."
            self.calls.append(Call(False, 0, 0, 0, 0, False, error=reason))
            error = {"message": reason, "type": "invalid_request_error", "param": "messages"}
            return JSONResponse({"error": {**error, "code": None}}, status_code=400)
        summary = is_summary_request(messages)
        cached, extends = self._cached(model, messages)
        content: str | None
        call: dict[str, Any] | None
        if summary:
            content, call = mock_summary(messages), None
        else:
            content, call = answer_for(messages)
            self._previous_head = chain_hashes(messages)[-1]
        prompt = self._count(model, messages)
        completion = max(1, math.ceil(len(content or json.dumps(call)) / 4))
        self.calls.append(Call(summary, len(messages), prompt, cached, completion, extends))
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        cid = "chatcmpl-mock" + hashlib.sha256(json.dumps(body).encode()).hexdigest()[:20]
        base = {"id": cid, "created": 1_700_000_000, "model": model}
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if call:
            message["tool_calls"] = [call]
        finish = "tool_calls" if call else "stop"
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            events = _stream(base, message, finish, usage if include else None)
            return StreamingResponse(events, media_type="text/event-stream")
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        return JSONResponse(
            {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
        )

    async def responses(self, request: Request) -> Response:
        """A whole Responses answer; an output without its call is OpenAI's 400."""
        try:
            body = json.loads(await request.body())
            model = str(body["model"])
            items = body["input"]
            items = [{"role": "user", "content": items}] if isinstance(items, str) else items
            calls = {i.get("call_id") for i in items if i.get("type") == "function_call"}
            for item in items:
                if item.get("type") == "function_call_output" and item.get("call_id") not in calls:
                    raise BadRequest(f"No tool call found for output {item.get('call_id')}.")
        except (ValueError, KeyError, TypeError, AttributeError, BadRequest) as exc:
            reason = str(exc) if isinstance(exc, BadRequest) else "Invalid request body."
            self.calls.append(Call(False, 0, 0, 0, 0, False, error=reason))
            error = {"message": reason, "type": "invalid_request_error", "param": "input"}
            return JSONResponse({"error": {**error, "code": None}}, status_code=400)
        cached, extends = self._cached(model, items)
        self._previous_head = chain_hashes(items)[-1]
        last = items[-1]
        text = text_of(last) if last.get("role") == "user" else "the tool's result"
        digest = hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]
        if match := re.search(r"call tool (\w+)", text, re.IGNORECASE):
            arguments = json.dumps({"query": text[:80]})
            output: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_{digest}",
                "call_id": f"call_{digest}",
                "name": match.group(1),
                "arguments": arguments,
            }
        else:
            part = {"type": "output_text", "text": f"About {text[:120]}.", "annotations": []}
            output = {
                "type": "message",
                "id": f"msg_{digest}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        prompt = self._count(model, items)
        completion = max(1, math.ceil(len(json.dumps(output)) / 4))
        self.calls.append(Call(False, len(items), prompt, cached, completion, extends))
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion,
            "total_tokens": prompt + completion,
        }
        answer = {
            "id": f"resp_{digest}",
            "object": "response",
            "created_at": 1_700_000_000,
            "model": model,
            "status": "completed",
            "output": [output],
            "usage": usage,
        }
        return JSONResponse(answer)

    async def messages(self, request: Request) -> Response:
        """A whole Messages answer; a tool_result that answers no call of the message before
        it is Anthropic's 400."""
        try:
            body = json.loads(await request.body())
            model = str(body["model"])
            messages = body["messages"]
            calls: set[str] = set()
            for message in messages:
                blocks = message["content"] if isinstance(message["content"], list) else []
                answered = {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"}
                if answered != calls:
                    raise BadRequest(f"tool_use ids {sorted(calls ^ answered)} are not paired.")
                calls = {b["id"] for b in blocks if b["type"] == "tool_use"}
        except (ValueError, KeyError, TypeError, AttributeError, BadRequest) as exc:
            reason = str(exc) if isinstance(exc, BadRequest) else "Invalid request body."
            self.calls.append(Call(False, 0, 0, 0, 0, False, error=reason))
            error = {"type": "invalid_request_error", "message": reason}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        system = body.get("system")
        system_text = system if isinstance(system, str) else json.dumps(system or "")
        summary = SUMMARIZER_MARKER in system_text.lower()
        cached, extends = self._cached(model, messages)
        text = text_of(messages[-1]) or "the tool's result"
        digest = hashlib.sha256(json.dumps(messages).encode()).hexdigest()[:16]
        content: list[dict[str, Any]]
        if summary:
            content = [{"type": "text", "text": mock_summary([{}, *messages])}]
        elif match := re.search(r"call tool (\w+)", text, re.IGNORECASE):
            call = {"type": "tool_use", "id": f"toolu_{digest}", "name": match.group(1)}
            content = [{**call, "input": {"query": text[:80]}}]
        else:
            content = [{"type": "text", "text": f"About {text[:120]}."}]
        if not summary:
            self._previous_head = chain_hashes(messages)[-1]
        prompt = self._count(model, messages)
        completion = max(1, math.ceil(len(json.dumps(content)) / 4))
        self.calls.append(Call(summary, len(messages), prompt, cached, completion, extends))
        usage = {"input_tokens": prompt - cached, "cache_read_input_tokens": cached}
        answer = {
            "id": f"msg_{digest}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if content[0]["type"] == "tool_use" else "end_turn",
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": completion},
        }
        return JSONResponse(answer)


async def _stream(
    base: dict[str, Any], message: dict[str, Any], finish: str, usage: dict[str, Any] | None
) -> AsyncIterator[bytes]:
    """OpenAI's SSE framing: a role chunk, content or tool-call fragments, finish, [usage], DONE."""

    def event(delta: dict[str, Any] | None, finish_reason: str | None = None) -> bytes:
        chunk: dict[str, Any] = {**base, "object": "chat.completion.chunk", "choices": []}
        if delta is not None:
            chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        if usage is not None:
            chunk["usage"] = usage if delta is None else None
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    calls = message.get("tool_calls")
    if calls:
        head = {"index": 0, **calls[0], "function": {**calls[0]["function"], "arguments": ""}}
        yield event({"role": "assistant", "content": None, "tool_calls": [head]})
        arguments = calls[0]["function"]["arguments"]
        for i in range(0, len(arguments), 16):
            piece = arguments[i : i + 16]
            yield event({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    else:
        yield event({"role": "assistant", "content": ""})
        for word in re.findall(r"\S+\s*", message["content"] or ""):
            yield event({"content": word})
    yield event({}, finish)
    if usage is not None:
        yield event(None)
    yield b"data: [DONE]\n\n"
