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
and must start with the bytes seen last time, so `1` never passes for
`true` and a reordered key never passes for the original. Only the length
and an xxh3-128 digest of those bytes are kept, not the bytes (hundreds of
kilobytes in a long conversation); as with message digests, a crafted
collision could only confuse the crafter's own conversation. The matched
messages are then replaced by the remembered objects, which are equal to
the byte, so everything downstream (the core's memo, identity lookups)
finds the objects it saw before.

Pure: the app holds the cache and decides when to look and when to store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson
import xxhash

from .messages import Message
from .reduction.tail import Tail


@dataclass(frozen=True, eq=False, slots=True)
class Known:
    """A request's messages and what was computed for them (`counts` for `model`).

    `tail` is the reduction core's grouping of the body from `tail_start` on,
    as the next turn will see it, or None when there is none to reuse.
    """

    messages: tuple[Message, ...]
    # orjson.dumps(list(messages)) without its closing bracket: what the next request's
    # message list must start with, as its length and xxh3-128 digest.
    prefix_len: int
    prefix_digest: bytes
    digests: tuple[bytes, ...]
    hashes: tuple[str, ...]
    model: str
    counts: tuple[int, ...]
    leading: int = 0
    tail_start: int = 0
    tail: Tail | None = None

    @property
    def weight(self) -> int:
        """Roughly the bytes this entry holds: the parsed messages and their bookkeeping."""
        return self.prefix_len + 200 * len(self.messages)


def prefix_of(raw: bytes) -> tuple[int, bytes]:
    """`Known.prefix_len` and `prefix_digest` for a message list that serialises to `raw`."""
    cut = len(raw) - 1
    return cut, xxhash.xxh3_128_digest(memoryview(raw)[:cut])


def resent(known: Known | None, messages: list[Message], raw: bytes) -> int:
    """How many leading `messages` are, byte for byte, the ones `known` remembers.

    Those entries of `messages` are replaced in place by the remembered
    objects. `raw` is `orjson.dumps(messages)`. An edit or a regeneration
    shares a shorter prefix; it is found message by message, then checked
    by serialising both sides.
    """
    if known is None or not known.messages or not messages:
        return 0
    n, cut = len(known.messages), known.prefix_len
    if (
        n <= len(messages)
        and raw[cut : cut + 1] in (b",", b"]")
        and xxhash.xxh3_128_digest(memoryview(raw)[:cut]) == known.prefix_digest
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
