"""Shortening single messages with a `[...N...]` marker (Agent Zero's large-message compression).

Truncation keeps the start and the end of a message, where instructions and
conclusions usually are, and says how many characters were cut so the model
knows something is missing. It is the last resort of every strategy: a
message is only ever shortened when dropping whole units cannot make room.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ..dialects import Dialect
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


def shrink(
    message: Message, target_tokens: int, count: Counter, dialect: Dialect
) -> Message | None:
    """A copy of `message` whose texts (`Dialect.shortened`) are cut to about `target_tokens`.

    Each text keeps the same share of its characters, the message's own
    token-to-character ratio (a 600-token message asked to fit 100 tokens keeps
    a sixth of each), then the share tightens until the counter agrees. None
    when there is nothing to cut.
    """
    tokens = count(message)
    overhead = count(dialect.shortened(message, lambda _: ""))
    if overhead >= tokens:
        return None
    share = max(0, target_tokens - overhead) / (tokens - overhead)
    best: Message | None = None
    for _ in range(12):
        candidate = dialect.shortened(message, functools.partial(_cut, share=share))
        if candidate == best:  # every text is down to the shortest worth a marker
            break
        best = candidate
        if count(candidate) <= target_tokens:
            break
        share *= 0.85
    if best is None or best == message or count(best) >= tokens:
        return None
    return best


def _cut(text: str, share: float) -> str:
    if len(text) <= MIN_CHARS:
        return text
    return truncate_text(text, max(MIN_CHARS, min(int(len(text) * share), len(text) - 1)))


def truncate_to_fit(
    messages: list[Message],
    candidates: Sequence[int],
    excess: int,
    count: Counter,
    dialect: Dialect,
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
        smaller = shrink(out[i], max(0, before - excess), count, dialect)
        if smaller is None:
            continue
        if out is messages:
            out = list(messages)
        out[i] = smaller
        excess -= before - count(smaller)
    return out, excess
