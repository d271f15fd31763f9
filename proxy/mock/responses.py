"""The mock's `/v1/responses`: OpenAI's validation of input items, answers and event stream.

Checks: the fields it reads have their types; items are well-formed; every
output follows a call it may answer, by `call_id`, and every call has its
output (a function, custom tool or local shell call; Codex answers a local
shell call with a `function_call_output`), the calls of the response
`previous_response_id` names included; a `program_output`, and a call a
program makes (its `caller`), follow the `program` they name, and none
follows its completed output; a reasoning item is followed by the item it
belongs to; instructions, input and tools fit the model's window
(`context_limits`, estimated at four characters a token);
`previous_response_id` names a response this mock gave; a stored `prompt`
or the previous response may stand for the input. A last user message
containing "call tool NAME" gets a reasoning item and a call to NAME, one
containing "search tools" a client-executed tool search, as does one calling a
deferred function (or "call mcp tool NAME on SERVER", a deferred MCP server's tool)
no tool search output in the input loaded; one calling a loaded MCP server's tool
gets the `mcp_call` OpenAI made, with its output, and a message; a last
function output or user message gets the voice's answer to it. Streams carry
OpenAI's event sequence and end with `response.completed`, with no `[DONE]`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .chat import BadRequest, check_types, text_of
from .voice import Voice, tool_name

Json = dict[str, Any]
ROLES = ("user", "assistant", "system", "developer")


class Invalid(Exception):
    """Input OpenAI would answer with 400, with the parameter and code it names."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


# A call's item type, the output types that may answer it (by `call_id`), and how an
# error names it. Codex answers a local shell call with a function call's output.
CALLS = {
    "function_call": (("function_call_output",), "function call"),
    "custom_tool_call": (("custom_tool_call_output",), "custom tool call"),
    "local_shell_call": (("local_shell_call_output", "function_call_output"), "local shell call"),
}
OUTPUTS = frozenset(answer for answers, _ in CALLS.values() for answer in answers)
REQUIRED = {
    "function_call": ("call_id", "name", "arguments"),
    "custom_tool_call": ("call_id", "name", "input"),
    "local_shell_call": ("call_id",),
    "program": ("call_id", "code", "fingerprint"),
    "program_output": ("call_id", "result"),
    # A call of an MCP server's tool, run by OpenAI (its output in it): by the server's label.
    "mcp_call": ("id", "server_label", "name", "arguments"),
    "mcp_approval_request": ("id", "server_label", "name", "arguments"),
}
# Tool search: what each item must carry, and how an error names the search.
SEARCH, SEARCHED = "tool_search_call", "tool_search_output"
SEARCH_FIELDS = {SEARCH: ("arguments", dict), SEARCHED: ("tools", list)}


@dataclass
class Chain:
    """What a request's items (after those of the response it continues) have made so far:
    calls by id (their type), the calls answered, the programs run and those completed."""

    calls: dict[str, str] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    programs: set[str] = field(default_factory=set)
    completed: set[str] = field(default_factory=set)
    # Hosted tool searches (no `call_id`) whose output has not come yet.
    hosted: int = 0

    def read(self, item: Json, where: str) -> None:
        """Take in one item, or Invalid where OpenAI refuses it."""
        kind = item.get("type", "message")
        for key in REQUIRED.get(kind, ()):
            if not isinstance(item.get(key), str):
                raise Invalid(f"Missing required parameter: '{where}.{key}'.", f"{where}.{key}")
        caller = item.get("caller")
        if isinstance(caller, dict) and caller.get("type") == "program":
            self._owned(str(caller.get("caller_id")))
        if kind in SEARCH_FIELDS:
            self._search(item, kind, where)
        elif kind in CALLS:
            self.calls[item["call_id"]] = kind
        elif kind in OUTPUTS:
            call_id = item.get("call_id")
            if kind not in CALLS.get(self.calls.get(str(call_id), ""), ((), ""))[0]:
                raise Invalid(
                    f"No tool call found for {kind.removesuffix('_output').replace('_', ' ')} "
                    f"output with call_id {call_id}.",
                    "input",
                )
            self.answered.add(str(call_id))
        elif kind == "program":
            self.programs.add(item["call_id"])
        elif kind == "program_output":
            self._owned(item["call_id"])
            if item.get("status") not in ("completed", "incomplete"):
                raise Invalid(f"Invalid value: '{item.get('status')}'.", f"{where}.status")
            if item["status"] == "completed":
                self.completed.add(item["call_id"])

    def _search(self, item: Json, kind: str, where: str) -> None:
        key, wanted = SEARCH_FIELDS[kind]
        if not isinstance(item.get(key), wanted):
            raise Invalid(f"Missing required parameter: '{where}.{key}'.", f"{where}.{key}")
        call_id = item.get("call_id")
        if kind == SEARCH:
            if call_id is None:
                self.hosted += 1
            else:
                self.calls[str(call_id)] = kind
            return
        if call_id is None and self.hosted:
            self.hosted -= 1
        elif call_id is None or self.calls.get(str(call_id)) != SEARCH:
            raise Invalid(f"No tool search call found for tool search output {call_id}.", "input")
        else:
            self.answered.add(str(call_id))

    def _owned(self, program: str) -> None:
        if program not in self.programs:
            raise Invalid(f"No program found with call_id {program}.", "input")
        if program in self.completed:
            raise Invalid(f"Program {program} has already completed.", "input")

    def copy(self) -> Chain:
        return Chain(
            dict(self.calls),
            set(self.answered),
            set(self.programs),
            set(self.completed),
            self.hosted,
        )

    def unanswered(self) -> None:
        for call_id in sorted(set(self.calls) - self.answered):
            kind = self.calls[call_id]
            name = CALLS[kind][1] if kind in CALLS else "tool search call"
            raise Invalid(f"No tool output found for {name} {call_id}.", "input")
        if self.hosted:
            raise Invalid("No tool search output found for a hosted tool search call.", "input")


def validate(
    body: Any, windows: dict[str, int], known: Mapping[str, Chain]
) -> tuple[list[Json], Chain]:
    """The input items and what they and the response they continue made, or Invalid the
    way OpenAI's /v1/responses rejects them. `known`: each response this mock gave, as it
    left its chain (a request naming it may answer its calls)."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise Invalid("Missing required parameter: 'model'.", "model")
    try:
        check_types(
            body, {"instructions": str, "previous_response_id": str, "max_output_tokens": int}
        )
    except BadRequest as exc:
        raise Invalid(str(exc), exc.param, exc.code) from None
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if items is None and (body.get("prompt") or body.get("previous_response_id")):
        items = []  # a stored prompt or the previous response supplies the input
    if not isinstance(items, list):
        raise Invalid("Invalid type for 'input': expected a string or an array.", "input")
    previous = body.get("previous_response_id")
    if previous is not None and previous not in known:
        raise Invalid(f"Previous response with id '{previous}' not found.", "previous_response_id")
    chain = known[previous].copy() if previous is not None else Chain()
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise Invalid(f"Invalid type for '{where}': expected an object.", where)
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in ROLES:
                raise Invalid(f"Invalid value: '{item.get('role')}'.", f"{where}.role")
            if not isinstance(item.get("content"), str | list):
                raise Invalid(f"Missing required parameter: '{where}.content'.", f"{where}.content")
        elif kind == "reasoning":
            after = items[i + 1] if i + 1 < len(items) else None
            if not isinstance(after, dict) or after.get("type") == "reasoning":
                raise Invalid(
                    f"Item '{item.get('id')}' of type 'reasoning' was provided without its "
                    "required following item.",
                    "input",
                )
        chain.read(item, where)
    chain.unanswered()
    limit = windows.get(body["model"])
    parts = [body.get("instructions") or "", json.dumps(items), json.dumps(body.get("tools") or [])]
    tokens = sum(len(p) for p in parts) // 4
    if limit is not None and tokens + int(body.get("max_output_tokens") or 0) > limit:
        raise Invalid(
            "Your input exceeds the context window of this model. Please adjust your input "
            "and try again.",
            "input",
            "context_length_exceeded",
        )
    return items, chain


# "search tools ..." asks for a tool search the client runs (`execution: client`).
SEARCHING = re.compile(r"search tools", re.IGNORECASE)
# "call mcp tool NAME on SERVER" asks for a call of an MCP server's tool, which OpenAI runs.
MCP = re.compile(r"call mcp tool (\w+) on (\w+)", re.IGNORECASE)


def _key(tool: Any) -> str | None:
    """A function by its name, an MCP server as `mcp:` and its label."""
    if not isinstance(tool, dict):
        return None
    if tool.get("type") == "mcp":
        return f"mcp:{tool.get('server_label')}"
    name = tool.get("name")
    return name if isinstance(name, str) else None


def deferred(tools: Any) -> set[str]:
    """The functions (a namespace's included) and MCP servers `tools` defers (`defer_loading`),
    keyed by `_key`."""
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict):
            names |= deferred(tool.get("tools"))
            key = _key(tool)
            if tool.get("defer_loading") is True and key is not None:
                names.add(key)
    return names


def loaded(items: list[Json]) -> set[str]:
    """The functions (a namespace's included) and MCP servers the input's tool search outputs
    load, keyed by `_key`."""
    names: set[str] = set()
    for item in items:
        if item.get("type") == SEARCHED:
            for tool in item.get("tools") or ():
                inner = tool.get("tools") if isinstance(tool, dict) else None
                for t in inner if isinstance(inner, list) else [tool]:
                    key = _key(t)
                    if key is not None:
                        names.add(key)
    return names


def output_for(
    items: list[Json], digest: str, voice: Voice, tools: Any = None, chained: bool = False
) -> list[Json]:
    """The output items answering the input's last item. A deferred function of `tools` that
    no output in the input (`chained`: or in the responses before it) loaded is not
    available to the model (OpenAI's tool search guide), so it searches instead."""
    last = items[-1] if items else {"type": "none"}
    kind = last.get("type", "message")
    if kind == "message" and last.get("role") == "user":
        text = text_of(last.get("content"))
        mcp = MCP.search(text)
        name = f"mcp:{mcp.group(2)}" if mcp else tool_name(text)
        unloaded = name in deferred(tools) - loaded(items) and not chained
        if SEARCHING.search(text) or unloaded:
            return [
                {
                    "id": f"ts_{digest}",
                    "type": SEARCH,
                    "call_id": f"tsc_{digest}",
                    "execution": "client",
                    "status": "completed",
                    "arguments": {"query": text},
                }
            ]
        if mcp:
            return [mcp_call(digest, mcp.group(2), mcp.group(1)), message(digest, "Done.")]
        if name:
            return [
                {
                    "id": f"rs_{digest}",
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": f"Deciding to call {name}."}],
                },
                {
                    "id": f"fc_{digest}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": f"call_{digest}",
                    "name": name,
                    "arguments": voice.arguments(text),
                },
            ]
        answer = voice.reply(text)
    elif kind == "function_call_output":
        answer = voice.tool_reply(text_of(last.get("output")))
    else:
        answer = "Noted."
    return [message(digest, answer)]


def mcp_call(digest: str, server: str, name: str) -> Json:
    """A call OpenAI made of tool `name` on the MCP server `server`, with its output."""
    return {
        "id": f"mcp_{digest}",
        "type": "mcp_call",
        "status": "completed",
        "server_label": server,
        "name": name,
        "arguments": "{}",
        "output": f"{name} on {server}: 3 results.",
    }


def message(digest: str, text: str) -> Json:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {
        "id": f"msg_{digest}",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [part],
    }


def response_object(
    body: Json, digest: str, output: list[Json], status: str, usage: Json | None = None
) -> Json:
    """The Response OpenAI returns, with `usage` or an estimate (four characters a token)."""
    size = len(json.dumps(body.get("input"))) // 4
    estimate = {
        "input_tokens": size,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 8,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": size + 8,
    }
    return {
        "id": f"resp_{digest}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body["model"],
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage or estimate,
        "user": None,
        "metadata": {},
    }


async def events(final: Json) -> AsyncIterator[bytes]:
    """The events of a streamed Response, from `response.created` to `response.completed`."""
    sequence = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal sequence
        data = {"type": kind, "sequence_number": sequence, **fields}
        sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

    yield event("response.created", response={**final, "status": "in_progress", "output": []})
    yield event("response.in_progress", response={**final, "status": "in_progress", "output": []})
    for index, item in enumerate(final["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event(
                "response.output_item.added", output_index=index, item={**item, "content": []}
            )
            empty = {"type": "output_text", "text": "", "annotations": []}
            ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
            yield event("response.content_part.added", **ids, part=empty)
            for piece in re.findall(r"\S+\s*|\s+", text) or [""]:
                yield event("response.output_text.delta", **ids, delta=piece, logprobs=[])
            yield event("response.output_text.done", **ids, text=text, logprobs=[])
            yield event("response.content_part.done", **ids, part=item["content"][0])
        elif item["type"] == "function_call":
            yield event(
                "response.output_item.added", output_index=index, item={**item, "arguments": ""}
            )
            ids = {"item_id": item["id"], "output_index": index}
            for i in range(0, len(item["arguments"]), 7):
                yield event(
                    "response.function_call_arguments.delta",
                    **ids,
                    delta=item["arguments"][i : i + 7],
                )
            yield event("response.function_call_arguments.done", **ids, arguments=item["arguments"])
        else:
            yield event("response.output_item.added", output_index=index, item=item)
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=final)
