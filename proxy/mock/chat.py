"""The mock's `/v1/chat/completions`: OpenAI's validation, answers and event stream.

Validation rejects what OpenAI rejects, with its messages: a body without
model or messages, a field of the wrong type, an unknown role, a tool result
that answers no call before it, a call left without its result. A reduction
that split a tool chain therefore shows up as a 400, as it would in production.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse

from .voice import Voice, tool_name

Json = dict[str, Any]
SUMMARIZER_MARKER = "context-proxy summarizer"
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
INVALID = "invalid_request_error"
CREATED = 1_700_000_000
FINGERPRINT = "fp_mock0001"
ORPHAN_TOOL = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
    "message with 'tool_calls'."
)
MISSING_RESULTS = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
)


class BadRequest(Exception):
    """A body OpenAI would answer with 400, with the parameter and code it names."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


def missing(param: str) -> BadRequest:
    return BadRequest(
        f"Missing required parameter: '{param}'.", param, "missing_required_parameter"
    )


def invalid_type(param: str, expected: str) -> BadRequest:
    return BadRequest(f"Invalid type for '{param}': expected {expected}.", param, "invalid_type")


# How OpenAI's messages name the JSON types a field must have.
TYPE_NAMES = {str: "a string", int: "an integer", dict: "an object"}


def check_types(body: Json, fields: dict[str, type]) -> None:
    """BadRequest for the first of `fields` that `body` sets (not null) to another JSON type."""
    for name, kind in fields.items():
        value = body.get(name)
        # A bool is an int to Python, not to OpenAI.
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise invalid_type(name, TYPE_NAMES[kind])


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
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def estimate_tokens(messages: list[Any]) -> int:
    """The mock's prompt-token estimate: total len(json.dumps(message)) / 4, rounded up."""
    return math.ceil(sum(len(json.dumps(m)) for m in messages) / 4)


def is_summary_request(body: Any) -> bool:
    """A chat body whose first message is the proxy's summariser prompt."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
        return False
    marked = SUMMARIZER_MARKER in text_of(messages[0].get("content")).lower()
    return marked and messages[0].get("role") == "system"


def validate_chat(body: Any) -> list[Json]:
    """The body's messages, or BadRequest the way OpenAI's /v1/chat/completions rejects it."""
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
    check_types(body, {"stream_options": dict, "max_tokens": int, "max_completion_tokens": int})
    if body.get("stream_options") is not None and not body.get("stream"):
        message = "The 'stream_options' parameter is only allowed when 'stream' is enabled."
        raise BadRequest(message, "stream_options", "invalid_value")
    for i, m in enumerate(messages):
        validate_message(f"messages[{i}]", m)
    validate_tool_chains(messages)
    return messages


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


def summary_of(messages: list[Json], voice: Voice) -> str:
    """The voice's summary of a summariser request's transcript (after its system prompt)."""
    return voice.summary([text_of(m.get("content")) for m in messages[1:]])


def answer_for(messages: list[Json], voice: Voice) -> tuple[str | None, Json | None]:
    """(content, tool_call) for an ordinary chat request."""
    last = messages[-1]
    text = text_of(last.get("content"))
    if last["role"] == "user" and (name := tool_name(text)):
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]
        function = {"name": name, "arguments": voice.arguments(text)}
        return None, {"id": f"call_{digest}", "type": "function", "function": function}
    if last["role"] == "tool":
        return voice.tool_reply(text), None
    users = [text_of(m.get("content")) for m in messages if m["role"] == "user"]
    return voice.reply(users[-1] if users else text), None


def pieces(text: str, size: int = 0) -> list[str]:
    """Split text into stream fragments: by words (keeping spaces), or fixed-size slices."""
    if size:
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]
    return re.findall(r"\S+\s*|\s+", text) or [""]


async def events(
    base: Json, message: Json, usage: Json | None, delay_s: float = 0.0
) -> AsyncIterator[bytes]:
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
    deltas: list[Json]
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
        if delay_s:
            await asyncio.sleep(delay_s)
    yield event({}, "tool_calls" if calls else "stop")
    if usage is not None:
        yield event(None)
    yield b"data: [DONE]\n\n"
