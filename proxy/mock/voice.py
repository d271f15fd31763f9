"""What the mock upstream says: the words of its answers and summaries.

The words are the only part of the mock its users want different. Tests
read short answers they can check (`ECHO`: "Echo: ...", "Tool said: ...",
"SUMMARY[...]"). The demo and `simulate` show a reader answers and
summaries of a realistic length (`PROSE`), because their token and cost
figures depend on it. Every answer depends only on the request, so two
runs say the same.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# "call tool NAME" in the last user message asks for a call to NAME.
CALL = re.compile(r"call tool\s*(\w*)", re.IGNORECASE)


@dataclass(frozen=True)
class Voice:
    """How the mock words an answer to a user, an answer to a tool result, a call and a summary."""

    reply: Callable[[str], str]
    tool_reply: Callable[[str], str]
    # The JSON arguments of a call asked for in this text.
    arguments: Callable[[str], str]
    # A summary of a transcript: the texts of its messages, in order.
    summary: Callable[[Sequence[str]], str]


def tool_name(text: str) -> str | None:
    """The tool a user's text asks for ("call tool NAME"), or None."""
    match = CALL.search(text)
    return (match.group(1) or "lookup") if match else None


def _echo_summary(texts: Sequence[str]) -> str:
    said = [t for t in texts if t]
    size = sum(map(len, texts))
    return f"SUMMARY[{size} characters; last: {(said[-1] if said else '')[:40]}]"


ECHO = Voice(
    reply=lambda text: f"Echo: {text[:200]}",
    tool_reply=lambda text: f"Tool said: {text[:50]}",
    arguments=lambda text: json.dumps({"q": text[:60]}),
    summary=_echo_summary,
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


def _prose_reply(text: str) -> str:
    seed = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    extra = [_FILLER[(seed >> (4 * i)) % len(_FILLER)] for i in range(2 + seed % 3)]
    return f"About \u201c{text[:120]}\u201d: " + " ".join(extra)


def prose_summary(texts: Sequence[str]) -> str:
    """The user's requests and the tools used, in order, from the summariser's transcript."""
    text = "\n".join(texts)
    asks = [line[6:].split(". ")[0][:70] for line in text.splitlines() if line.startswith("user: ")]
    tools = sorted(set(re.findall(r"call tool (\w+)", text)))
    earlier = "earlier summary kept; " if "[summary of the conversation" in text else ""
    shown = [*asks[:3], "...", *asks[-3:]] if len(asks) > 6 else asks
    return (
        f"Summary ({earlier}{len(asks)} user requests): "
        + "; ".join(shown)
        + (f". Tools used: {', '.join(tools)}." if tools else ".")
    )


PROSE = Voice(
    reply=_prose_reply,
    tool_reply=lambda text: f"The tool returned: {text[:160]}. That answers the question.",
    arguments=lambda text: json.dumps({"query": text[:80]}),
    summary=prose_summary,
)
