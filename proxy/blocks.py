"""Content blocks (Anthropic's, and chat content parts): what they mean, and their cache marks.

A block may carry a prompt-cache breakpoint (`cache_control`): where the
client wants the cached prefix to end this turn, not part of what the
message says. A client moves it to its newest message every turn, so a
message's identity reads its blocks without it (`as_meant`), and what the
proxy forwards from its store can have it taken off (`unmarked`). Blocks
stay the client's dicts: every function returns its input itself when it
has nothing to change.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import orjson

Message = dict[str, Any]


def continued(prefill: Message, answer: Sequence[Message]) -> list[Message]:
    """The answer as the client keeps it: its first message opens with the prefill's text.

    A request ending with an assistant message (Anthropic's prefill) is answered
    with what follows that text; apps join the two into one message and resend it.
    """
    if not answer:
        return []
    opening = prefill.get("content")
    start = opening if isinstance(opening, str) else "".join(map(said, opening or []))
    first = answer[0]
    content = first.get("content")
    parts = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    # Thinking opens an assistant message; the text goes after it.
    lead = 0
    while lead < len(parts) and type(parts[lead]) is dict and parts[lead].get("type") in THINKING:
        lead += 1
    head = parts[lead] if lead < len(parts) else None
    if type(head) is dict and head.get("type") == "text":
        text = {**head, "text": start + str(head.get("text", ""))}
        joined = [*parts[:lead], text, *parts[lead + 1 :]]
    else:
        joined = [*parts[:lead], {"type": "text", "text": start}, *parts[lead:]]
    return [{**first, "content": joined}, *answer[1:]]


# Blocks of a model's reasoning, which open its message and Anthropic checks as made.
THINKING = ("thinking", "redacted_thinking")


def as_meant(content: list[Any]) -> list[Any] | str:
    """A message's `content` as its identity reads it; `content` itself when it is so already.

    Blocks lose their breakpoints and their null fields (an SDK's `model_dump()`
    writes `"citations": null`), and one plain text block is its string, as a
    tool result's content is read too.
    """
    meant = [_block_as_meant(b) for b in content]
    if len(meant) == 1 and _plain_text(meant[0]):
        return str(meant[0]["text"])
    return content if all(map(operator.is_, meant, content)) else meant


def _block_as_meant(block: Any) -> Any:
    if type(block) is not dict:
        return block
    nested = block.get("content")
    inner = nested
    if type(nested) is list:
        inner = as_meant(nested) if block.get("type") == "tool_result" else _unmarked(nested)
    if (
        "cache_control" not in block
        and inner is nested
        and None not in block.values()
        and not any(block.get(k) == [] for k in _EMPTY_SAYS_NOTHING)
    ):
        return block
    out = {
        k: v
        for k, v in block.items()
        if k != "cache_control" and v is not None and not (v == [] and k in _EMPTY_SAYS_NOTHING)
    }
    if inner is not nested:
        out["content"] = inner
    return out


def _plain_text(block: Any) -> bool:
    """A text block with nothing but its text, which means what the string would."""
    if type(block) is not dict or block.keys() != _TEXT_KEYS:
        return False
    kind = block["type"]  # any JSON: a list or an object is no text type, and unhashable
    return type(kind) is str and kind in _TEXT_TYPES and type(block["text"]) is str


_TEXT_KEYS = frozenset(["type", "text"])
# Anthropic's and chat's text block, and the Responses API's in a request and an answer.
_TEXT_TYPES = frozenset(["text", "input_text", "output_text"])
# A Responses answer's text block lists its citations and log probabilities, empty when
# it has none: as an app that resends the text alone says.
_EMPTY_SAYS_NOTHING = ("annotations", "logprobs")


def marked(message: Message) -> bool:
    """Whether a content block of the message holds a prompt-cache breakpoint."""
    content = message.get("content")
    return type(content) is list and _unmarked(content) is not content


def unmarked(message: Message) -> Message:
    """The message without its prompt-cache breakpoints; itself when it holds none."""
    content = message.get("content")
    if type(content) is not list:
        return message
    bare = _unmarked(content)
    return message if bare is content else {**message, "content": bare}


def unmarked_block(block: Any) -> Any:
    """The block without its breakpoint, nor those of blocks it holds; itself when unmarked."""
    if type(block) is not dict:
        return block
    nested = block.get("content")
    inner = _unmarked(nested) if type(nested) is list else nested
    if "cache_control" not in block and inner is nested:
        return block
    out = {k: v for k, v in block.items() if k != "cache_control"}
    if inner is not nested:
        out["content"] = inner
    return out


def _unmarked(content: list[Any]) -> list[Any]:
    bare = [unmarked_block(b) for b in content]
    return content if all(map(operator.is_, bare, content)) else bare


def said(part: Any) -> str:
    """What a content part says in words: its text; for Anthropic's blocks, a tool call (the
    app's, a server tool's, an MCP server's) as `name(input)` and a tool result as the
    text of what it holds. Images, thinking and other blocks say nothing here.

    A tool's output is what an agent reads most (a file, a command's log, the code
    it ran, a page it searched): search and summaries must see it inside a result
    block as they do in a chat `tool` message.
    """
    if type(part) is not dict:
        return ""
    text = part.get("text")
    if isinstance(text, str):
        return text
    kind = part.get("type")
    if kind in ("tool_result", "mcp_tool_result"):
        inner = part.get("content")
        if isinstance(inner, str):
            return inner
        if isinstance(inner, list):
            return "\n".join(t for t in map(said, inner) if t)
        return ""
    if kind in CALLS:
        arguments = orjson.dumps(part.get("input"), option=orjson.OPT_NON_STR_KEYS).decode()
        return f"{part.get('name', '')}({arguments})"
    if is_server_result(part):
        return "\n".join(_words(part.get("content")))
    return ""


# A tool Anthropic runs itself (web search, code execution, an MCP server's tool): the
# model's use of it and its result (`web_search_tool_result`, `mcp_tool_result`, ...) both
# sit in assistant messages, the result after the use.
SERVER_USES = frozenset({"server_tool_use", "mcp_tool_use"})
CALLS = frozenset({"tool_use", *SERVER_USES})


def is_server_result(block: dict[str, Any]) -> bool:
    kind = block.get("type")
    return isinstance(kind, str) and kind.endswith("_tool_result") and kind != "tool_result"


# What a server tool's result holds that reads as words: code's output, a file
# viewed, a search hit's title and address, a tool found; not the ids, error codes,
# nor the encrypted or base64 content Anthropic alone reads.
_WORDS = frozenset({"text", "stdout", "stderr", "content", "title", "url", "tool_name"})


def _words(value: Any) -> list[str]:
    if type(value) is list:
        return [w for v in value for w in _words(v)]
    if type(value) is not dict:
        return []
    found: list[str] = []
    for key, inner in value.items():
        if type(inner) is str:
            # A fetched page's text is its document's text source.
            if inner and (key in _WORDS or (key == "data" and value.get("type") == "text")):
                found.append(inner)
        else:
            found.extend(_words(inner))
    return found


def references(block: Any) -> list[str]:
    """The deferred tools a block loads (Anthropic's tool search): the names its
    `tool_reference`s give, in a `tool_search_tool_result` or in a `tool_result` (a search
    the app runs itself). The API puts each tool's definition where its reference is."""
    if type(block) is not dict:
        return []
    kind, inner = block.get("type"), block.get("content")
    if kind == "tool_search_tool_result" and type(inner) is dict:
        inner = inner.get("tool_references")
    elif kind != "tool_result":
        return []
    return [
        str(r.get("tool_name"))
        for r in (inner if type(inner) is list else ())
        if type(r) is dict and r.get("type") == "tool_reference"
    ]


def holds_results(content: Any) -> bool:
    """Whether a message's content holds Anthropic `tool_result` blocks (it answers calls)."""
    return type(content) is list and any(
        type(b) is dict and b.get("type") == "tool_result" for b in content
    )
