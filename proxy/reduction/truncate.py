"""Shortening single messages with a `[...N...]` marker (Agent Zero's large-message compression).

Truncation keeps the start and the end of a message, where instructions and
conclusions usually are, and says how many characters were cut so the model
knows something is missing. It is the last resort of every strategy: a
message is only ever shortened when dropping whole units cannot make room.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message
from .types import Counter

MIN_CHARS = 48
"""Below this a message is not worth shortening: the marker would be most of it."""


def marker(removed: int) -> str:
    return f"[...{removed}...]"


def truncate_text(text: str, length: int) -> str:
    """`text` cut to `length` characters marker included, keeping its start and end.

    The marker's width depends on the number it shows, so the cut is solved as
    a small fixed point; it converges in a few steps because the number only grows.
    """
    if len(text) <= length:
        return text
    removed = len(text) - length
    for _ in range(8):
        keep = max(0, length - len(marker(removed)))
        if len(text) - keep == removed:
            break
        removed = len(text) - keep
    keep = len(text) - removed
    head = (keep + 1) // 2
    return text[:head] + marker(removed) + text[len(text) - (keep - head) :]


# Responses' text parts. Chat's and Anthropic's `text` parts stay whole: an Anthropic
# assistant message goes back exactly as sent, beside its signed thinking.
TEXT_PARTS = frozenset({"input_text", "output_text"})


def _text_of(message: Message) -> tuple[str, int | None, str] | None:
    """Where a message's text is: its key, the part's index in a list (None for a string), and
    the text; for a list, its longest text part. None when it holds no text to cut.

    A message keeps it in `content`, a Responses tool output in `output`; either may be a
    string or, in Responses, a list of parts (an image or a file part is never cut).
    """
    for key in ("content", "output"):
        value = message.get(key)
        if isinstance(value, str):
            return key, None, value
        if isinstance(value, list):
            parts = [
                (len(p["text"]), i)
                for i, p in enumerate(value)
                if isinstance(p, dict)
                and p.get("type") in TEXT_PARTS
                and isinstance(p.get("text"), str)
            ]
            if parts:
                index = max(parts)[1]
                return key, index, value[index]["text"]
    return None


def _with_text(message: Message, key: str, index: int | None, text: str) -> Message:
    if index is None:
        return {**message, key: text}
    parts = list(message[key])
    parts[index] = {**parts[index], "text": text}
    return {**message, key: parts}


def shrink(message: Message, target_tokens: int, count: Counter) -> Message | None:
    """A copy of `message` whose text is cut to about `target_tokens`.

    The cut keeps the message's own token-to-character ratio (a 600-token
    message asked to fit 100 tokens keeps a sixth of its characters), then
    tightens until the counter agrees. None when there is nothing to cut.
    """
    found = _text_of(message)
    if found is None or len(found[2]) <= MIN_CHARS:
        return None
    key, index, content = found
    tokens = count(message)
    overhead = count(_with_text(message, key, index, ""))
    content_tokens = max(1, tokens - overhead)
    length = int(len(content) * max(0, target_tokens - overhead) / content_tokens)
    length = max(MIN_CHARS, min(length, len(content) - 1))
    best: Message | None = None
    for _ in range(12):
        candidate = _with_text(message, key, index, truncate_text(content, length))
        best = candidate
        if count(candidate) <= target_tokens or length <= MIN_CHARS:
            break
        length = max(MIN_CHARS, int(length * 0.85))
    if best is None or count(best) >= tokens:
        return None
    return best


def truncate_to_fit(
    messages: list[Message], candidates: Sequence[int], excess: int, count: Counter
) -> tuple[list[Message], int]:
    """Shorten the largest candidates first until `excess` tokens are gone.

    Returns the new list (a copy when anything changed) and the excess left.
    """
    out = messages
    order = sorted(candidates, key=lambda i: (-count(messages[i]), i))
    for i in order:
        if excess <= 0:
            break
        before = count(out[i])
        smaller = shrink(out[i], max(0, before - excess), count)
        if smaller is None:
            continue
        if out is messages:
            out = list(messages)
        out[i] = smaller
        excess -= before - count(smaller)
    return out, excess
