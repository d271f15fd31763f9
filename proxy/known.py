"""What the proxy worked out about a conversation's history last turn, reused while it is resent.

In full-history mode a client resends every message every turn, and in a
long conversation all but the last two were seen before. Validating,
hashing, counting and grouping them again made each turn cost as much as
the whole conversation. A `Known` keeps, per conversation, the last
request's messages with their digests, chain hashes, token counts and the
reduction core's grouped tail; the next request's resent prefix reuses them
and only its new messages are worked on.

The prefix is recognised by bytes, not by Python equality: the request's
message list is serialised once (orjson, in C, about as fast as copying it)
and must start with the bytes remembered from last time, so `1` never
passes for `true` and a reordered key never passes for the original. The
matched messages are then replaced by the remembered objects, which are
equal to the byte, so everything downstream (the core's memo, identity
lookups) finds the objects it saw before.

Pure: the app holds the cache and decides when to look and when to store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from .messages import Message
from .reduction.tail import Tail


@dataclass(frozen=True, eq=False, slots=True)
class Known:
    """A request's messages and what was computed for them (`counts` for `model`).

    `tail` is the reduction core's grouping of the body from `tail_start` on,
    as the next turn will see it, or None when there is none to reuse.
    """

    messages: tuple[Message, ...]
    raw: bytes  # orjson.dumps(list(messages)): the bytes the next request must start with
    digests: tuple[bytes, ...]
    hashes: tuple[str, ...]
    model: str
    counts: tuple[int, ...]
    leading: int = 0
    tail_start: int = 0
    tail: Tail | None = None

    @property
    def weight(self) -> int:
        """Roughly the bytes this entry holds: its raw form and the parsed objects."""
        return 2 * len(self.raw) + 64 * len(self.messages)


def resent(known: Known | None, messages: list[Message], raw: bytes) -> int:
    """How many leading `messages` are, byte for byte, the ones `known` remembers.

    Those entries of `messages` are replaced in place by the remembered
    objects. `raw` is `orjson.dumps(messages)`. An edit or a regeneration
    shares a shorter prefix; it is found message by message, then checked
    by bytes the same way.
    """
    if known is None or not known.messages or not messages:
        return 0
    n = len(known.messages)
    cut = len(known.raw) - 1  # the remembered list without its closing bracket
    if (
        n <= len(messages)
        and raw.startswith(known.raw[:cut])
        and raw[cut : cut + 1] in (b",", b"]")
    ):
        messages[:n] = known.messages
        return n
    n = _common(known.messages, messages)
    if n and orjson.dumps(messages[:n]) == orjson.dumps(list(known.messages[:n])):
        messages[:n] = known.messages[:n]
        return n
    return 0


def _common(old: Sequence[Message], new: Sequence[Message]) -> int:
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return i
    return min(len(old), len(new))
