"""The mock's `/v1/messages`: Anthropic's validation of a request, answers and event stream.

Checks: `x-api-key` (or a bearer token) and `anthropic-version` headers;
`model`, a positive `max_tokens`, `system` a string or text blocks; messages
that start with a user message and alternate (system messages aside); a
system message in `messages` right after a user message, holding text or
tool change blocks; every `tool_use` answered by
a `tool_result` at the start of the next user message, and every result
answering a call of the message before; thinking blocks first in their
message, with the signature this mock gave them (a signature
it never issues, from a recorded transcript, passes unchecked); at most four
`cache_control` breakpoints; server tool results (web search, code execution,
MCP) after their use, tools called from code naming that code, and their
results alone in their message; tool search: a `tool_reference` (in a
`tool_search_tool_result` or a `tool_result`) names a tool of `tools` with
`defer_loading: true`, as Anthropic documents (an `mcp_toolset` deferring by
default: any name `tools` does not list undeferred), and a `tool_use` of such a tool
comes after a reference that loaded it (the definition enters the context at
the reference; that a call without one is refused is this mock's reading,
stricter than what Anthropic documents); the prompt and `max_tokens` within
the model's window (`context_limits`, four characters a token). A last user message
containing "call tool NAME" gets a thinking block and a call to NAME, one
containing "run code calling NAME" code that calls NAME (programmatic tool
calling), whose result follows the call's, one containing "search tools
WORD" a regex tool search loading the deferred tools whose name holds WORD;
a last tool result or user
message gets the voice's answer to it. Streams
carry Anthropic's event sequence.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Mapping, Set
from typing import Any

from .voice import Voice, tool_name

Json = dict[str, Any]


class Invalid(Exception):
    """A request Anthropic would answer with 400 `invalid_request_error`."""


def error_body(message: str, kind: str = "invalid_request_error") -> Json:
    return {"type": "error", "error": {"type": kind, "message": message}}


_SIGNED = "sig_"


def signature(thinking: str) -> str:
    """The signature this mock gives a thinking block (and checks when it comes back)."""
    return _SIGNED + hashlib.sha256(thinking.encode()).hexdigest()[:24]


def signed(block: Json) -> bool:
    """Whether a thinking block is as this mock gave it.

    A signature this mock never issues (one Anthropic gave a recorded
    transcript that `simulate` replays) cannot be checked here, so it passes.
    """
    given = block.get("signature")
    if not isinstance(given, str) or not given.startswith(_SIGNED):
        return isinstance(given, str) and bool(given)
    return given == signature(str(block.get("thinking", "")))


def blocks(message: Json) -> list[Json]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def text_of(message: Json) -> str:
    parts = []
    for b in blocks(message):
        if b.get("type") == "text":
            parts.append(str(b.get("text", "")))
        elif b.get("type") == "tool_result":
            content = b.get("content")
            parts.append(content if isinstance(content, str) else json.dumps(content))
    return " ".join(parts)


def breakpoints(value: Any) -> int:
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(breakpoints(v) for v in value.values())
    if isinstance(value, list):
        return sum(breakpoints(v) for v in value)
    return 0


def validate(body: Any, headers: Mapping[str, str], windows: dict[str, int]) -> list[Json]:
    """The request's messages, or Invalid the way Anthropic's /v1/messages rejects it."""
    if not (headers.get("x-api-key") or headers.get("authorization")):
        raise Invalid("x-api-key header is required")
    if not headers.get("anthropic-version"):
        raise Invalid("anthropic-version: header is required")
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise Invalid("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise Invalid("max_tokens: Field required")
    system = body.get("system")
    if system is not None and not (
        isinstance(system, str)
        or (
            isinstance(system, list)
            and all(isinstance(b, dict) and b.get("type") == "text" for b in system)
        )
    ):
        raise Invalid("system: Input should be a valid string or a list of text blocks")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Invalid("messages: Field required")
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str | list) or not all(
            isinstance(b, dict) for b in blocks(message)
        ):
            raise Invalid(f"messages.{i}: Input should be a message with content blocks")
    if messages[0].get("role") != "user":
        raise Invalid('messages: first message must use the "user" role')
    calls: list[str] = []
    served: set[str] = set()  # server and MCP tool uses so far (their results follow them)
    programmatic: set[str] = set()  # calls made from code execution
    loading = Loading(deferred(body.get("tools")), undeferred(body.get("tools")))
    said: str | None = None  # the role of the last message that is not a system message
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "system":
            system_message(i, message, messages[i - 1])
            continue
        server_tools(i, message, served, programmatic)
        loading.read(i, message)
        if role == said:
            raise Invalid(f'messages.{i}: roles must alternate between "user" and "assistant"')
        said = role
        content = blocks(message)
        results = [b.get("tool_use_id") for b in content if b.get("type") == "tool_result"]
        if role == "user":
            leading = [b.get("type") == "tool_result" for b in content]
            if results and leading != sorted(leading, reverse=True):
                raise Invalid(f"messages.{i}: tool_result blocks must come first")
            if sorted(map(str, results)) != sorted(calls):
                raise Invalid(
                    f"messages.{i}: tool_use ids were found without tool_result blocks "
                    f"immediately after: {sorted(set(calls) - set(map(str, results)))}"
                    if set(calls) - set(map(str, results))
                    else f"messages.{i}: unexpected tool_use_id found in tool_result blocks"
                )
            calls = []
        else:
            if calls:
                raise Invalid(f"messages.{i}: tool_use without tool_result")
            if results:
                raise Invalid(f"messages.{i}: tool_result blocks belong in user messages")
            seen_other = False
            for b in content:
                if b.get("type") in ("thinking", "redacted_thinking"):
                    if seen_other:
                        raise Invalid(f"messages.{i}: thinking blocks must come first")
                    if b.get("type") == "thinking" and not signed(b):
                        raise Invalid(f"messages.{i}: Invalid `signature` in `thinking` block")
                else:
                    seen_other = True
            calls = [str(b.get("id")) for b in content if b.get("type") == "tool_use"]
    if calls:
        raise Invalid("the last message makes tool calls that no tool_result answers")
    if breakpoints(body) > 4:
        raise Invalid("A maximum of 4 blocks with cache_control may be provided.")
    limit = windows.get(body["model"])
    parts = [json.dumps(system or ""), json.dumps(messages), json.dumps(body.get("tools") or [])]
    tokens = sum(len(p) for p in parts) // 4
    if limit is not None and tokens + max_tokens > limit:
        raise Invalid(f"prompt is too long: {tokens} tokens > {limit - max_tokens} maximum")
    return messages


# What a mid-conversation system message may hold: instructions, and the tool changes of
# the beta `mid-conversation-tool-changes-2026-07-01`.
SYSTEM_BLOCKS = frozenset({"text", "tool_addition", "tool_removal"})


def system_message(i: int, message: Json, before: Json) -> None:
    """Anthropic's documented rules for a system message in `messages`: its content, and
    its place right after a user message (the first message is a user's, checked before)."""
    if any(b.get("type") not in SYSTEM_BLOCKS for b in blocks(message)):
        raise Invalid(f"messages.{i}: a system message holds text or tool change blocks only")
    if before.get("role") != "user":
        raise Invalid(f"messages.{i}: a system message must come right after a user message")


# Among `deferred` names: an MCP toolset defers its tools by default, whose names the
# request does not give (no tool name has a star).
ANY_MCP_TOOL = "*"


def deferred(tools: Any) -> set[str]:
    """The names of the tools a request defers (`defer_loading: true`): tool search loads them;
    an `mcp_toolset`'s, by its `configs` or, with `ANY_MCP_TOOL`, its `default_config`."""
    names: set[str] = set()
    for t in tools if isinstance(tools, list) else ():
        if not isinstance(t, dict):
            continue
        if t.get("defer_loading") is True:
            names.add(str(t.get("name")))
        if t.get("type") == "mcp_toolset":
            default = t.get("default_config")
            if isinstance(default, dict) and default.get("defer_loading") is True:
                names.add(ANY_MCP_TOOL)
            configs = t.get("configs")
            for name, config in configs.items() if isinstance(configs, dict) else ():
                if isinstance(config, dict) and config.get("defer_loading") is True:
                    names.add(str(name))
    return names


def undeferred(tools: Any) -> set[str]:
    """The names of the tools a request lists without deferring them: no reference may name
    one, even where an `mcp_toolset` defers any other name."""
    listed = tools if isinstance(tools, list) else []
    named = {str(t["name"]) for t in listed if isinstance(t, dict) and "name" in t}
    return named - deferred(tools)


def references(block: Json) -> list[str]:
    """The tools a block loads: the `tool_reference`s of a tool search's result, or of a
    `tool_result` (a search the app runs itself)."""
    content = block.get("content")
    if block.get("type") == "tool_search_tool_result" and isinstance(content, dict):
        content = content.get("tool_references")
    if block.get("type") not in ("tool_search_tool_result", "tool_result"):
        return []
    inner = content if isinstance(content, list) else []
    return [
        str(r.get("tool_name"))
        for r in inner
        if isinstance(r, dict) and r.get("type") == "tool_reference"
    ]


class Loading:
    """Tool search over a history: which deferred tools references loaded so far."""

    def __init__(self, deferred: set[str], undeferred: Set[str] = frozenset()) -> None:
        self.deferred, self.undeferred, self.loaded = deferred, undeferred, set[str]()

    def read(self, i: int, message: Json) -> None:
        for b in blocks(message):
            for name in references(b):
                if name not in self.deferred and (
                    ANY_MCP_TOOL not in self.deferred or name in self.undeferred
                ):
                    raise Invalid(
                        f"messages.{i}: tool_reference {name!r} names no tool of `tools` with "
                        "defer_loading: true"
                    )
                self.loaded.add(name)
            name = str(b.get("name"))
            if b.get("type") == "tool_use" and name in self.deferred - self.loaded:
                raise Invalid(
                    f"messages.{i}: tool_use of deferred tool {name!r}, which no tool_reference "
                    "before it loaded"
                )


# Blocks the model writes about a tool Anthropic runs: the use, then its result
# (`web_search_tool_result`, `code_execution_tool_result`, ...), in assistant messages.
SERVER_USES = ("server_tool_use", "mcp_tool_use")


def server_result(block: Json) -> bool:
    kind = str(block.get("type", ""))
    return kind != "tool_result" and kind.endswith("_tool_result")


def server_tools(i: int, message: Json, served: set[str], programmatic: set[str]) -> None:
    """Anthropic's rules for server tools and programmatic tool calling, on one message.

    A server tool's result answers a use made before it (in its message, or an earlier
    one, when code execution waited on the client's tools); a tool called from code
    names that code's use; the results of such calls come alone in their message.
    """
    content = blocks(message)
    if message.get("role") == "user":
        answers = {str(b.get("tool_use_id")) for b in content if b.get("type") == "tool_result"}
        if answers & programmatic and any(b.get("type") != "tool_result" for b in content):
            raise Invalid(
                f"messages.{i}: a message answering tool calls made from code execution "
                "can only contain tool_result blocks"
            )
        if any(server_result(b) or b.get("type") in SERVER_USES for b in content):
            raise Invalid(f"messages.{i}: server tool blocks belong in assistant messages")
        return
    for b in content:
        if b.get("type") in SERVER_USES:
            served.add(str(b.get("id")))
        elif server_result(b) and str(b.get("tool_use_id")) not in served:
            raise Invalid(
                f"messages.{i}: {b.get('type')} block's tool_use_id does not match any "
                "server_tool_use before it"
            )
        caller = b.get("caller") if b.get("type") == "tool_use" else None
        if isinstance(caller, dict) and caller.get("type") != "direct":
            if str(caller.get("tool_id")) not in served:
                raise Invalid(f"messages.{i}: caller.tool_id names no server_tool_use")
            programmatic.add(str(b.get("id")))


# "run code calling NAME" asks for code (a code execution server tool use) that calls
# the app's tool NAME: programmatic tool calling.
CODE = re.compile(r"run code calling\s*(\w*)", re.IGNORECASE)


# "search tools WORD" asks for a tool search loading the deferred tools named with WORD.
SEARCH = re.compile(r"search tools\s*(\w*)", re.IGNORECASE)


def content_for(
    messages: list[Json], digest: str, voice: Voice, tools: Any = ()
) -> tuple[list[Json], str]:
    """The content blocks answering the last message, and the stop reason."""
    # A system message instructs; the answer is to the user's message before it.
    messages = [m for m in messages if m.get("role") != "system"]
    last = messages[-1]
    results = [b for b in blocks(last) if b.get("type") == "tool_result"]
    if results:
        reply = voice.tool_reply(text_of(last))
        code = _running(messages)
        if code is None:
            return [{"type": "text", "text": reply}], "end_turn"
        output = {
            "type": "code_execution_result",
            "stdout": reply,
            "stderr": "",
            "return_code": 0,
            "content": [],
        }
        done = {"type": "code_execution_tool_result", "tool_use_id": code, "content": output}
        return [done, {"type": "text", "text": "The code finished."}], "end_turn"
    text = text_of(last)
    search = SEARCH.search(text)
    if search:
        use = f"srvtoolu_{digest}"
        named = deferred(tools) - {ANY_MCP_TOOL}  # a toolset's tools are not in the request
        found = sorted(n for n in named if search.group(1).lower() in n.lower())
        refs = [{"type": "tool_reference", "tool_name": n} for n in found]
        result = {"type": "tool_search_tool_search_result", "tool_references": refs}
        return [
            {
                "type": "server_tool_use",
                "id": use,
                "name": "tool_search_tool_regex",
                "input": {"query": search.group(1)},
            },
            {"type": "tool_search_tool_result", "tool_use_id": use, "content": result},
            {"type": "text", "text": f"Found {len(found)} tools."},
        ], "end_turn"
    coded = CODE.search(text)
    if coded:
        code, name = f"srvtoolu_{digest}", coded.group(1) or "lookup"
        caller = {"type": "code_execution_20250825", "tool_id": code}
        return [
            {
                "type": "server_tool_use",
                "id": code,
                "name": "code_execution",
                "input": {"code": f"print({name}())"},
            },
            {
                "type": "tool_use",
                "id": f"toolu_{digest}",
                "name": name,
                "input": {},
                "caller": caller,
            },
        ], "tool_use"
    name = tool_name(text)
    if name:
        thought = f"The user wants {name}; I will call it ({digest[:6]})."
        arguments = json.loads(voice.arguments(text))
        return [
            {"type": "thinking", "thinking": thought, "signature": signature(thought)},
            {"type": "tool_use", "id": f"toolu_{digest}", "name": name, "input": arguments},
        ], "tool_use"
    return [{"type": "text", "text": voice.reply(text)}], "end_turn"


def _running(messages: list[Json]) -> str | None:
    """The code whose calls the last message answers, if they were made from code."""
    if len(messages) < 2:
        return None
    for b in blocks(messages[-2]):
        caller = b.get("caller")
        if b.get("type") == "tool_use" and isinstance(caller, dict) and "tool_id" in caller:
            return str(caller["tool_id"])
    return None


async def events(final: Json) -> AsyncIterator[bytes]:
    """Anthropic's stream of a message: message_start, the blocks' deltas, message_stop."""

    def event(kind: str, **fields: Any) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()

    start = {**final, "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": final["usage"]["input_tokens"], "output_tokens": 1}
    yield event("message_start", message=start)
    yield event("ping")
    for index, block in enumerate(final["content"]):
        kind = block["type"]
        if kind == "text":
            yield event(
                "content_block_start", index=index, content_block={"type": "text", "text": ""}
            )
            for piece in re.findall(r"\S+\s*|\s+", block["text"]) or [""]:
                delta = {"type": "text_delta", "text": piece}
                yield event("content_block_delta", index=index, delta=delta)
        elif kind == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            yield event("content_block_start", index=index, content_block=empty)
            for piece in re.findall(r"\S+\s*|\s+", block["thinking"]):
                delta = {"type": "thinking_delta", "thinking": piece}
                yield event("content_block_delta", index=index, delta=delta)
            delta = {"type": "signature_delta", "signature": block["signature"]}
            yield event("content_block_delta", index=index, delta=delta)
        elif kind in ("tool_use", "server_tool_use"):
            yield event("content_block_start", index=index, content_block={**block, "input": {}})
            arguments = json.dumps(block["input"])
            for i in range(0, len(arguments), 7):
                delta = {"type": "input_json_delta", "partial_json": arguments[i : i + 7]}
                yield event("content_block_delta", index=index, delta=delta)
        else:  # a server tool's result arrives whole
            yield event("content_block_start", index=index, content_block=block)
        yield event("content_block_stop", index=index)
    delta = {"stop_reason": final["stop_reason"], "stop_sequence": None}
    yield event("message_delta", delta=delta, usage={"output_tokens": 8})
    yield event("message_stop")
