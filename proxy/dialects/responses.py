"""OpenAI's `/v1/responses`: its input items as the core sees them, and the route's wire.

An input item is a message (`type` "message", or a bare `role`/`content`
pair), a call (`function_call`, `custom_tool_call`, `computer_call`, ...)
or the output answering one (matched by `call_id`), a reasoning item, or
an item the model produced and consumes whole (a web search, an MCP call).
A tool search (`tool_search_call`, loading deferred tools) is a call its
`tool_search_output` answers by `call_id` when the client ran it; run by
OpenAI (hosted, no `call_id`), its output comes right after it.
Calls made together arrive as separate items and their outputs follow
them all; a reasoning item must reach the upstream together with the item
after it. Requests are read and written in `responses_request.py`,
answers in `responses_answer.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ..messages import LEADING_ROLES
from . import Answer, Item, cut_blocks, responses_request
from . import body as body_checks
from .responses_answer import ResponsesAssembler, items_from_response, response_id

# A call's item type, the type of the item answering it, and the answer's key naming the call.
CALLS = {
    "function_call": ("function_call_output", "call_id"),
    "custom_tool_call": ("custom_tool_call_output", "call_id"),
    "computer_call": ("computer_call_output", "call_id"),
    "shell_call": ("shell_call_output", "call_id"),
    "apply_patch_call": ("apply_patch_call_output", "call_id"),
    # OpenAI reads its output's `call_id`; the SDK's type names the call in `id` (`answers`).
    "local_shell_call": ("local_shell_call_output", "call_id"),
    "mcp_approval_request": ("mcp_approval_response", "approval_request_id"),
    # Programmatic tool calling: a program's output names it; the calls it makes name
    # it as their `caller` (all are the program's run: `held_by`).
    "program": ("program_output", "call_id"),
    # A hosted search has no `call_id` (`_anonymous`): its output follows it, as reasoning's item.
    "tool_search_call": ("tool_search_output", "call_id"),
}
ANSWERS = {answer: key for answer, key in CALLS.values()}
# Outputs that may be a plain string, so a placeholder (or a cleared text) can stand in.
PLACEHOLDERS = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
}
TEXT_OUTPUTS = frozenset(PLACEHOLDERS.values())
SEARCH, SEARCHED = "tool_search_call", "tool_search_output"
MCP_CALLS = frozenset({"mcp_call", "mcp_approval_request"})
TOOL_TYPES = frozenset(CALLS) | frozenset(ANSWERS)
TEXT_PARTS = frozenset({"input_text", "output_text"})


def kind(item: Item) -> str:
    """The item's type; a bare `{"role", "content"}` item is a message."""
    found = item.get("type")
    return found if isinstance(found, str) else "message"


def _call_id(item: Item) -> str:
    key = "id" if kind(item) == "mcp_approval_request" else "call_id"
    return str(item.get(key, ""))


def _anonymous(item: Item) -> bool:
    """A tool search OpenAI ran itself, or its output: neither names the other."""
    return kind(item) in (SEARCH, SEARCHED) and not isinstance(item.get("call_id"), str)


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(p["text"]) for p in value if isinstance(p, dict) and "text" in p]
    return []


class ResponsesItems:
    name = "responses"
    separate_calls = True
    opaque_items = True
    # OpenAI: tools no output lists "will not be available to the model".
    searches_again = True

    def is_instruction(self, item: Item) -> bool:
        return kind(item) == "message" and item.get("role") in LEADING_ROLES

    def opens_turn(self, item: Item) -> bool:
        return kind(item) == "message" and item.get("role") == "user"

    def call_ids(self, item: Item) -> list[str]:
        return [_call_id(item)] if kind(item) in CALLS and not _anonymous(item) else []

    def answers(self, item: Item) -> tuple[str, ...]:
        found = kind(item)
        key = ANSWERS.get(found)
        if key is None or _anonymous(item):
            return ()
        if key not in item and found == "local_shell_call_output":
            key = "id"
        return (str(item.get(key, "")),)

    def call_names(self, item: Item) -> dict[str, str]:
        found = kind(item)
        if found not in CALLS:
            return {}
        name = item.get("name")
        return {_call_id(item): name if isinstance(name, str) else found.removesuffix("_call")}

    def travels_with_next(self, item: Item) -> bool:
        return kind(item) == "reasoning" or (kind(item) == SEARCH and _anonymous(item))

    def held_by(self, item: Item) -> tuple[str, ...]:
        # A program's run: the program, its output, and the calls naming it as `caller`.
        program = item.get("call_id") if kind(item) in ("program", "program_output") else None
        caller = item.get("caller")
        if isinstance(caller, dict) and caller.get("type") == "program":
            program = caller.get("caller_id")
        return (str(program),) if program else ()

    def loaders(self, items: Sequence[Item], carried: Sequence[Item]) -> list[Item]:
        # A tool is callable while an output listing it is in the input (OpenAI: tools not
        # listed "will not be available to the model"), and an output may be trimmed to
        # the tools wanted: each search loading a tool the carried ones do not goes on as
        # its call and its output holding only those, paired as sent (a hosted search's
        # output right after it, a client's by `call_id`).
        have: set[str] = set()
        for item in carried:
            if kind(item) == SEARCHED:
                _new_tools(item.get("tools"), have)
        calls = {_call_id(i): i for i in items if kind(i) == SEARCH and not _anonymous(i)}
        out: list[Item] = []
        hosted: Item | None = None
        for item in items:
            if kind(item) == SEARCH and _anonymous(item):
                hosted = item
            elif kind(item) == SEARCHED:
                call = hosted if _anonymous(item) else calls.get(_call_id(item))
                hosted = None
                tools = _new_tools(item.get("tools"), have)
                if call is not None and tools:
                    out += [call, _holding(item, tools)]
        return out

    def loads(self, items: Sequence[Item]) -> set[str]:
        # By the name a call gives: a namespace's function by its own name (a call names its
        # namespace apart), an MCP server by its label (`_server`).
        names: set[str] = set()
        for item in items:
            for tool in item.get("tools") or () if kind(item) == SEARCHED else ():
                inner = tool.get("tools") if isinstance(tool, dict) else None
                for t in inner if isinstance(inner, list) else [tool]:
                    if isinstance(t, dict) and isinstance(t.get("name"), str):
                        names.add(t["name"])
                    elif isinstance(t, dict) and t.get("type") == "mcp":
                        names.add(_server(t))
        return names

    def uses(self, item: Item) -> set[str]:
        # A tool of a loaded MCP server is called by `server_label` and `name`, run by
        # OpenAI (`mcp_call`) or awaiting the app's approval (`mcp_approval_request`).
        if kind(item) in MCP_CALLS:
            return {_server(item)}
        return set(self.call_names(item).values())

    def holds_tools(self, items: Sequence[Item]) -> bool:
        return any(kind(i) in TOOL_TYPES for i in items)

    def text(self, item: Item) -> str:
        found = kind(item)
        if found == "message":
            return "\n".join(_texts(item.get("content")))
        if found == "reasoning":
            return "\n".join(_texts(item.get("summary")))
        if found == SEARCHED:
            return "tool search loaded: " + ", ".join(_tool_names(item.get("tools")))
        if found in ANSWERS:
            return "\n".join(_texts(item.get("output", item.get("result"))))
        if found in CALLS:
            said = item.get("arguments", item.get("input", item.get("code", "")))
            if not isinstance(said, str):
                said = orjson.dumps(said).decode()
            return f"{item.get('name', found)}({said})"
        return ""

    def summary(self, text: str) -> Item:
        return {"type": "message", "role": "developer", "content": text}

    def note(self, text: str) -> Item:
        return {"type": "message", "role": "assistant", "content": text}

    def placeholder(self, call: Item, call_id: str, text: str) -> Item | None:
        # Other calls' outputs are structures (a screenshot, a patch's status, an
        # approval) that cannot be made up: such a call goes as the client sent it.
        # A search the client ran and never answered loaded nothing.
        if kind(call) == SEARCH:
            return {"type": SEARCHED, "call_id": call_id, "execution": "client", "tools": []}
        answer = PLACEHOLDERS.get(kind(call))
        return None if answer is None else {"type": answer, "call_id": call_id, "output": text}

    def cleared(self, item: Item, call_id: str, text: str) -> Item:
        # A shell or computer call's output is a structure, not text: it stays.
        if kind(item) not in TEXT_OUTPUTS:
            return item
        return {**item, "output": text}

    def without_answers(self, item: Item, call_ids: Sequence[str]) -> Item | None:
        return None  # an output item is one result

    def shortened(self, item: Item, cut: Callable[[str], str]) -> Item:
        found = kind(item)
        if found == "message" and item.get("content") is not None:
            return {**item, "content": cut_blocks(item["content"], TEXT_PARTS, cut)}
        if found in TEXT_OUTPUTS and item.get("output") is not None:
            return {**item, "output": cut_blocks(item["output"], TEXT_PARTS, cut)}
        return item  # calls, reasoning, structured outputs


def _server(item: Item) -> str:
    """The key of an MCP server, loaded (an `mcp` tool) or called: no function name has a
    colon, so it is never a function's."""
    return f"mcp:{item.get('server_label')}"


def _tool_names(tools: Any) -> list[str]:
    """The names of the tools a search loaded: functions, and namespaces with theirs."""
    names: list[str] = []
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict):
            inner = _tool_names(tool.get("tools"))
            name = str(tool.get("name") or tool.get("server_label") or tool.get("type"))
            names.append(f"{name} ({', '.join(inner)})" if inner else name)
    return names


def _new_tools(tools: Any, have: set[str]) -> list[Any]:
    """The loaded tools (a namespace with its functions) not in `have`, which gains them."""
    out: list[Any] = []
    for tool in tools if isinstance(tools, list) else ():
        inner = tool.get("tools") if isinstance(tool, dict) else None
        if isinstance(inner, list):  # a namespace: its functions are loaded one by one
            prefix = f"{tool.get('name')}."
            fresh = [t for t in inner if _fresh(t, have, prefix)]
            if fresh:
                out.append(tool if len(fresh) == len(inner) else {**tool, "tools": fresh})
        elif _fresh(tool, have):
            out.append(tool)
    return out


def _holding(output: Item, tools: list[Any]) -> Item:
    """The search's output holding `tools`: itself when they are all it holds."""
    sent = output.get("tools")
    if not isinstance(sent, list) or len(sent) != len(tools):
        return {**output, "tools": tools}
    same = all(a is b for a, b in zip(sent, tools, strict=True))
    return output if same else {**output, "tools": tools}


def _fresh(tool: Any, have: set[str], prefix: str = "") -> bool:
    """Whether `tool` is not in `have` yet (by its type and name or server's label, or as
    written), which it then is."""
    name = (tool.get("name") or tool.get("server_label")) if isinstance(tool, dict) else None
    if isinstance(name, str):
        key = f"{prefix}{tool.get('type')}:{name}"
    else:
        key = prefix + orjson.dumps(tool).decode()
    if key in have:
        return False
    have.add(key)
    return True


RESPONSES = ResponsesItems()


class ResponsesWire(body_checks.JsonWire):
    items = RESPONSES
    provider = "openai"
    upstream_path = "/v1/responses"
    history_field = "input"
    limit_fields = ("max_output_tokens",)
    definition_fields = ("instructions", "tools", "text")

    def server_state(self, payload: dict[str, Any]) -> str | None:
        return responses_request.server_state(payload)

    parse = staticmethod(responses_request.parse)

    def assembler(self, limit: int) -> ResponsesAssembler:
        return ResponsesAssembler(limit=limit)

    def answer(self, content: bytes) -> Answer | None:
        try:
            body = orjson.loads(content)
        except orjson.JSONDecodeError:
            return None
        items = items_from_response(body)
        return None if items is None else Answer(items, response_id(body))


RESPONSES_WIRE = ResponsesWire()
