"""Anthropic's prompt-cache breakpoints in what goes upstream: never more than it allows.

A request may mark at most four blocks with `cache_control`, system, tools
and messages together; a fifth is a 400. The proxy adds no breakpoint and
moves none, but what it forwards from its store (the stored history of an
append-mode turn) may carry breakpoints the client placed on earlier turns
and has since moved on from. Those give way, oldest first, to the ones the
request places itself.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from ..blocks import unmarked_block
from . import Item

MAX_BREAKPOINTS = 4


def within_limit(payload: dict[str, Any], items: Sequence[Item]) -> Sequence[Item]:
    """`items` without as many of the oldest breakpoints the request did not place as
    take it past Anthropic's four; `items` itself when it is within them.

    The client's own messages go as it sent them: if it marked more than four
    blocks itself, Anthropic says so, as it would without the proxy.
    """
    sent = payload.get("messages")
    if not isinstance(sent, list):
        return items
    if len(items) == len(sent) and all(map(operator.is_, items, sent)):
        return items
    over = (
        marks(payload.get("system"))
        + marks(payload.get("tools"))
        + sum(marks(item.get("content")) for item in items)
        - MAX_BREAKPOINTS
    )
    if over <= 0:
        return items
    own = {id(b) for m in sent if isinstance(m, dict) for b in _list(m.get("content"))}
    out = list(items)
    for i, item in enumerate(out):
        content = _list(item.get("content"))
        blocks = list(content)
        for j, block in enumerate(content):
            n = marks([block])
            if over <= 0 or not n or id(block) in own:
                continue
            blocks[j], over = unmarked_block(block), over - n
        if blocks != content:
            out[i] = {**item, "content": blocks}
        if over <= 0:
            break
    return out


def marks(value: Any) -> int:
    """Breakpoints in a list of blocks (or of tools), a tool result's blocks included."""
    return sum(
        ("cache_control" in b) + marks(b.get("content")) for b in _list(value) if type(b) is dict
    )


def _list(value: Any) -> list[Any]:
    return value if type(value) is list else []
