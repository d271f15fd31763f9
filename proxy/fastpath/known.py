"""What the proxy worked out about a conversation's history last turn, reused while it is resent.

In full-history mode a client resends every message every turn, and in a
long conversation all but the last two were seen before. Validating,
hashing, counting and grouping them again would make each turn cost as much
as the whole conversation. A `Known` keeps, per conversation, the last
request's messages with their digests, chain hashes, token counts and the
reduction core's grouped tail; the next request's resent prefix reuses them
and only its new messages are worked on.

The prefix is recognised by bytes, not by Python equality: the request
body must start with the bytes of the last one up to the end of its last
message, so `1` never passes for `true` and a reordered key never passes
for the original. Those bytes are the client's own, so nothing is
serialised again; only where the message list ends in a body has to be
found (see `locate`). Only lengths and xxh3-128 digests are kept, not the bytes
(hundreds of kilobytes in a long conversation); as with message digests, a
crafted collision could only confuse the crafter's own conversation. The
matched messages are then replaced by the remembered objects, which are
equal to the byte, so everything downstream (the core's memo, identity
lookups) finds the objects it saw before.

Better still, a body that starts with those bytes need not be parsed up to
them (`reparse`): parsing a long history, and freeing the duplicate objects,
is otherwise the largest cost that grows with the conversation. A request
without a conversation id is matched to its conversation by `fingerprints`
of its first bytes.

Pure: `proxy.turn.sessions` holds what is remembered, and `proxy.fastpath`
decides when to look and what to remember.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import xxhash

from ..messages import Message
from ..reduction.tail import Tail

# Bytes JSON allows between tokens.
_SPACE = b" \t\r\n"
# A body whose keys after `messages` hold this many `]` is not worth locating.
_MAX_CANDIDATES = 64
# Lengths of a body's start that identify a conversation without an id: a
# conversation is filed under the longest one its history covers, which tells
# apart conversations sharing a long system prompt, and a request is looked up
# under every one its body covers, longest first (the history may have grown
# past the next one since). Powers of 4 from 256 bytes keep hashing all of
# them close to the cost of hashing the longest.
FINGERPRINT_LENGTHS = tuple(256 * 4**k for k in range(10))
# A lower-case letter written as a \u escape: how a second history key could hide
# from the byte search in `_resends` (JSON writers escape only other characters).
_ESCAPED_LETTER = re.compile(rb"\\u00(6[1-9a-fA-F]|7[0-9aA])")
# A placeholder for the remembered messages in the document `reparse` parses.
_PLACEHOLDER = b"0"


@dataclass(frozen=True, slots=True)
class Bounds:
    """Where a request body's message list ends: past its last message, and its `]`."""

    end: int
    close: int


@dataclass(frozen=True, eq=False, slots=True)
class Known:
    """A request's messages and what was computed for them (`counts` for `model`).

    `tail` is the reduction core's grouping of the body from `tail_start` on,
    as the next turn will see it, or None when there is none to reuse.
    """

    messages: tuple[Message, ...]
    # The body up to the end of its last message (what the next request's body
    # must start with) and from the message list's `]` to the end (what it likely
    # ends with), as lengths and xxh3-128 digests; -1: not located.
    prefix_len: int
    prefix_digest: bytes
    digests: tuple[bytes, ...]
    hashes: tuple[str, ...]
    model: str
    counts: tuple[int, ...]
    leading: int = 0
    tail_start: int = 0
    tail: Tail | None = None
    suffix_len: int = -1
    suffix_digest: bytes = b""
    # Where the message list's first element starts in the body (just past its
    # `[`); -1: not located, and the next request is parsed in full.
    list_start: int = -1

    @property
    def weight(self) -> int:
        """Roughly the bytes this entry holds: the parsed messages and their bookkeeping."""
        return max(0, self.prefix_len) + 200 * len(self.messages)


def _digest(body: bytes, start: int, stop: int) -> bytes:
    return xxhash.xxh3_128_digest(memoryview(body)[start:stop])


def locate(
    body: bytes, payload: Mapping[str, Any], known: Known | None = None, field: str = "messages"
) -> Bounds | None:
    """Where `payload[field]` (the history) ends in `body`, without scanning it; None: unsure.

    The list's `]` is the one after which the body holds exactly the keys
    that follow `field` in the parsed payload (orjson keeps their order),
    tried from the end of the body. A request usually ends with the same
    bytes as the last one (model, tools, stream), so that is checked first.
    """
    close = -1
    if known is not None and known.suffix_len > 0:
        at = len(body) - known.suffix_len
        if at > 0 and body[at] == 0x5D and _digest(body, at, len(body)) == known.suffix_digest:
            close = at
    if close < 0:
        close = _closing_bracket(body, payload, field)
    end = close
    while end > 0 and body[end - 1] in _SPACE:
        end -= 1
    return Bounds(end, close) if close > 0 and body[end - 1] == 0x7D else None  # `}`


def _closing_bracket(body: bytes, payload: Mapping[str, Any], field: str) -> int:
    keys = list(payload)
    after = {k: payload[k] for k in keys[keys.index(field) + 1 :]}
    stop = len(body)
    for _ in range(_MAX_CANDIDATES):
        at = body.rfind(b"]", 0, stop)
        if at < 0:
            return -1
        rest = body[at + 1 :].strip(_SPACE)
        if not after:
            if rest == b"}":
                return at
        elif rest[:1] == b",":
            try:
                if orjson.loads(b"{" + rest[1:]) == after:
                    return at
            except orjson.JSONDecodeError:
                pass
        stop = at
    return -1


def list_start(body: bytes, payload: Mapping[str, Any], field: str = "messages") -> int:
    """Where `payload[field]`'s first element starts in `body`; -1: unsure.

    The `"field"` key found is the one after which the body holds exactly
    the keys before it in the parsed payload (a string value can hold those
    bytes too, escaped), so only those keys are parsed, not the history.
    """
    keys = list(payload)
    before = {k: payload[k] for k in keys[: keys.index(field)]}
    name = _key(field)
    at = 0
    for _ in range(_MAX_CANDIDATES):
        at = body.find(name, at)
        if at < 0:
            return -1
        start = _skip(body, at + len(name))
        if body[start : start + 1] == b":":
            start = _skip(body, start + 1)
            if body[start : start + 1] == b"[":
                try:
                    head = orjson.loads(body[:at] + name + b":0}")
                except orjson.JSONDecodeError:
                    head = None
                if head == {**before, field: 0}:
                    return start + 1
        at += 1
    return -1


def reparse(body: bytes, known: Known | None, field: str = "messages") -> dict[str, Any] | None:
    """The request `body` parsed, if it resends `known`'s messages; only its new bytes are read.

    The body must start with the bytes `known` was parsed from up to the end
    of its last message. The document parsed is the body with those messages
    replaced by one placeholder: it is valid JSON exactly when the body is,
    because the replaced bytes were valid elements last time. The placeholder
    then gives way to the remembered objects. None (parse it all) on any
    doubt, including any `"field"` key after the cut (see `_resends`).
    """
    if known is None or not 0 < known.list_start < known.prefix_len or not known.messages:
        return None
    if not _resends(body, known, len(body), field):
        return None
    try:
        parsed = orjson.loads(body[: known.list_start] + _PLACEHOLDER + body[known.prefix_len :])
    except orjson.JSONDecodeError:
        return None  # the full parse says what is wrong
    if not isinstance(parsed, dict):
        return None
    payload: dict[str, Any] = parsed
    messages = payload.get(field)
    if not isinstance(messages, list) or not messages or type(messages[0]) is not int:
        return None
    messages[:1] = known.messages
    return payload


def fingerprints(tenant: str, body: bytes) -> list[tuple[str, int, bytes]]:
    """Keys of `body`'s first bytes for every length in FINGERPRINT_LENGTHS it covers, longest
    first: how a conversation without an id is found before its body is parsed."""
    return [
        (tenant, n, _digest(body, 0, n)) for n in reversed(FINGERPRINT_LENGTHS) if n <= len(body)
    ]


def remember(body: bytes, bounds: Bounds | None) -> tuple[int, bytes, int, bytes]:
    """`Known`'s prefix and suffix fields for a request `body` with these bounds."""
    if bounds is None:
        return -1, b"", -1, b""
    return (
        bounds.end,
        _digest(body, 0, bounds.end),
        len(body) - bounds.close,
        _digest(body, bounds.close, len(body)),
    )


def resent(
    known: Known | None,
    messages: list[Message],
    body: bytes,
    bounds: Bounds | None,
    field: str = "messages",
) -> int:
    """How many leading `messages` are, byte for byte, the ones `known` remembers.

    Those entries of `messages` are replaced in place by the remembered
    objects. `messages` were parsed from `body`, and end at `bounds`. An
    edit or a regeneration shares a shorter prefix; it is found message by
    message, then checked by serialising both sides.
    """
    if known is None or not known.messages or not messages:
        return 0
    n = len(known.messages)
    if bounds is not None and n <= len(messages) and _resends(body, known, bounds.end, field):
        messages[:n] = known.messages
        return n
    n = _common(known.messages, messages)
    if n and orjson.dumps(messages[:n]) == orjson.dumps(list(known.messages[:n])):
        messages[:n] = known.messages[:n]
        return n
    return 0


def _resends(body: bytes, known: Known, stop: int, field: str) -> bool:
    """Whether `body` starts with `known`'s bytes up to the end of its last message, and holds
    no `"field"` key from there to `stop`: with two such keys the last one counts.

    The bytes after the cut need no check: the same bytes before it leave a
    parser just past an element of the message list, where only `,` or `]`
    can follow in valid JSON, and the body is parsed (or is being) anyway.
    """
    cut = known.prefix_len
    return (
        0 < cut <= stop
        and body.find(_key(field), cut, stop) < 0
        and _ESCAPED_LETTER.search(body, cut, stop) is None
        and _digest(body, 0, cut) == known.prefix_digest
    )


def _key(field: str) -> bytes:
    return b'"' + field.encode() + b'"'


def _skip(body: bytes, at: int) -> int:
    """The index of the first byte at or after `at` that is not JSON whitespace."""
    while at < len(body) and body[at] in _SPACE:
        at += 1
    return at


def _common(old: Sequence[Message], new: Sequence[Message]) -> int:
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return i
    return min(len(old), len(new))
