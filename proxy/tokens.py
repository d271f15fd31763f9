"""Token counting: tiktoken per model family, OpenAI's per-message overhead, cached per message.

A turn in a long conversation resends hundreds of messages that were counted
before, so counts are cached by message content and only new messages are
tokenised. When no encoding can be loaded (an air-gapped machine without
`TIKTOKEN_CACHE_DIR`), counting falls back to ensemble's 4-characters-per-
token estimate and says so once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import operator
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from cachetools import LRUCache

from . import media
from .messages import Message, canonical, digest, tool_calls

log = logging.getLogger("context_proxy.tokens")

# OpenAI's accounting for chat messages (the "How to count tokens" cookbook):
# every message costs 3 tokens of framing, a `name` one more, and every reply
# is primed with 3 tokens.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
TOKENS_PER_TOOL_CALL = 7
CHARS_PER_TOKEN = 4
IMAGE_TOKENS_LOW = 85
IMAGE_TOKENS_HIGH = 765
AUDIO_CHARS_PER_TOKEN = 32  # base64 audio is far less dense than text
# A reasoning item's `encrypted_content` (an Anthropic `redacted_thinking` block's
# `data`) is base64 of the reasoning it carries: about five characters a token of
# the text inside, counted at four to stay on the safe side (a count that falls
# short is a request the upstream refuses). Tokenised as written, random base64
# counts several times that.
ENCRYPTED_CHARS_PER_TOKEN = 4
# Anthropic's blocks billed by what they show, not by their base64's length.
ANTHROPIC_MEDIA = ("image", "document")
ROLES_KEPT = 256
# New messages from which a request's counting leaves the event loop's thread:
# below it, the hop to a thread costs more than the counting.
OFF_LOOP_MESSAGES = 256

_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding")


@functools.lru_cache(maxsize=1024)  # model names come from clients: bounded
def encoding_name_for(model: str) -> str:
    """o200k_base for the gpt-4o / gpt-4.1 / o-series families, cl100k_base for gpt-4 and gpt-3.5.

    Unknown models (local ones served through an OpenAI-compatible API) get
    o200k_base: their real tokenizer is unknown anyway, and a modern BPE is the
    closer estimate.
    """
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return "o200k_base"


class Encoder(Protocol):
    def encode(self, text: str, *, disallowed_special: Any = ...) -> list[int]: ...


def _estimate(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class TokenCounter:
    """Counts tokens of messages for one process, sharing loaded encodings and a bounded cache.

    >>> counter = TokenCounter()
    >>> counter.count_messages("gpt-4o", [{"role": "user", "content": "hi"}])  # doctest: +SKIP
    8
    """

    def __init__(
        self,
        *,
        cache_size: int = 200_000,
        loader: Callable[[str], Encoder] | None = None,
    ) -> None:
        self._loader = loader or _load_tiktoken
        self._encoders: dict[str, Encoder | None] = {}
        self._cache: LRUCache[tuple[str, bytes], int] = LRUCache(maxsize=cache_size)
        # Roles are a handful of words, counted for every new message: each
        # count would be a call into tiktoken (and a release of the GIL) for a
        # number that never changes. Clients may send any role, so it is bounded.
        self._roles: dict[tuple[str, str], int] = {}
        self._warned = False

    def preload(self, encoding: str = "o200k_base") -> None:
        """Load an encoding on a daemon thread, so the first request does not wait for it.

        Loading takes most of a second (longer where tiktoken tries the
        network); a daemon thread never holds up the server's start or stop.
        """
        threading.Thread(target=self.encoder, args=(encoding,), daemon=True).start()

    def encoder(self, encoding: str) -> Encoder | None:
        if encoding not in self._encoders:
            try:
                self._encoders[encoding] = self._loader(encoding)
            except Exception as exc:  # tiktoken raises many kinds when offline
                self._encoders[encoding] = None
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "tiktoken encoding %s could not be loaded (%s); counting tokens as "
                        "characters / %d. Set TIKTOKEN_CACHE_DIR to a folder holding the "
                        "encoding files for exact counts.",
                        encoding,
                        type(exc).__name__,
                        CHARS_PER_TOKEN,
                    )
        return self._encoders[encoding]

    @property
    def exact(self) -> bool:
        """False once any encoding failed to load and estimates are in use."""
        return not self._warned

    def count_text(self, encoding: str, text: str) -> int:
        if not text:
            return 0
        enc = self.encoder(encoding)
        if enc is None:
            return _estimate(text)
        return len(enc.encode(text, disallowed_special=()))

    def count_message(self, model: str, message: Message, key: bytes | None = None) -> int:
        """Tokens of one message; `key` is its `messages.digest`, when the caller has it."""
        encoding = encoding_name_for(model)
        cache_key = (encoding, key if key is not None else digest(message))
        cached = self._cache.get(cache_key)
        if cached is None:
            cached = self._count_uncached(encoding, message)
            self._cache[cache_key] = cached
        return cached

    def count_definitions(self, model: str, definitions: Sequence[Any]) -> int:
        """Tokens of a request's definitions (tools, a response schema), read as their JSON.

        They fill the context like the history does. An app sends the same
        ones every turn, so the count is cached by their digest.
        """
        if not definitions:
            return 0
        encoding = encoding_name_for(model)
        cache_key = (encoding, b"defs" + digest({"definitions": list(definitions)}))
        cached = self._cache.get(cache_key)
        if cached is None:
            cached = self.count_text(encoding, canonical({"d": list(definitions)}).decode())
            self._cache[cache_key] = cached
        return cached

    async def prime(
        self, model: str, messages: Sequence[Message], digests: Sequence[bytes] | None = None
    ) -> None:
        """Count, on a worker thread, the messages the cache lacks, when they are many.

        tiktoken releases the GIL while it encodes, so a request carrying
        thousands of new messages is counted while the event loop serves
        everyone else. The counts enter the cache here, on the loop's thread
        (cachetools is not thread-safe); `count_message` then finds them.
        """
        if len(messages) < OFF_LOOP_MESSAGES:
            return
        encoding = encoding_name_for(model)
        keys = digests if digests is not None else [digest(m) for m in messages]
        missing = [
            (m, k) for m, k in zip(messages, keys, strict=True) if (encoding, k) not in self._cache
        ]
        if len(missing) < OFF_LOOP_MESSAGES:
            return
        self.encoder(encoding)  # loaded here, so the thread only reads the encoders

        def count_all() -> list[int]:
            return [self._count_uncached(encoding, m) for m, _ in missing]

        counts = await asyncio.to_thread(count_all)
        for (_, key), count in zip(missing, counts, strict=True):
            self._cache[(encoding, key)] = count

    def count_messages(self, model: str, messages: Iterable[Message]) -> int:
        """Prompt tokens of a request's messages, including the reply priming."""
        return REPLY_PRIMING + sum(self.count_message(model, m) for m in messages)

    def for_model(self, model: str) -> Callable[[Message], int]:
        """A one-argument counter, the shape the pure reduction core takes."""
        return lambda message: self.count_message(model, message)

    def _count_uncached(self, encoding: str, message: Message) -> int:
        total = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if key == "content":
                total += self._content_tokens(encoding, value)
            elif key == "name" and isinstance(value, str):
                total += TOKENS_PER_NAME + self.count_text(encoding, value)
            elif key in ("output", "summary") and isinstance(value, list | dict):
                # A Responses item's output (a call's result, a screenshot) or summary parts.
                parts = value if isinstance(value, list) else [value]
                total += self._content_tokens(encoding, parts)
            elif key in ("role", "tool_calls"):
                if key == "role" and isinstance(value, str):
                    total += self._role_tokens(encoding, value)
            elif key == "encrypted_content" and isinstance(value, str):
                total += len(value) // ENCRYPTED_CHARS_PER_TOKEN
            elif isinstance(value, str):
                total += self.count_text(encoding, value)
            elif isinstance(value, list | dict):
                # Any other structure (the tools a Responses tool search loaded, its
                # arguments, a computer call's action) reaches the model too: by its size.
                total += _estimate(canonical({key: value}).decode())
        for call in tool_calls(message):
            fn = call.get("function")
            if isinstance(fn, dict):
                total += TOKENS_PER_TOOL_CALL
                total += self.count_text(encoding, str(fn.get("name", "")))
                total += self.count_text(encoding, str(fn.get("arguments", "")))
        return total

    def _role_tokens(self, encoding: str, role: str) -> int:
        known = self._roles.get((encoding, role))
        if known is None:
            known = self.count_text(encoding, role)
            if len(self._roles) < ROLES_KEPT:
                self._roles[(encoding, role)] = known
        return known

    def _content_tokens(self, encoding: str, content: Any) -> int:
        if isinstance(content, str):
            return self.count_text(encoding, content)
        if not isinstance(content, list):
            return 0
        total = 0
        for part in content:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text" or isinstance(part.get("text"), str):
                total += self.count_text(encoding, str(part.get("text", "")))
            elif kind == "image_url":
                image = part.get("image_url")
                detail = image.get("detail") if isinstance(image, dict) else None
                total += IMAGE_TOKENS_LOW if detail == "low" else IMAGE_TOKENS_HIGH
            elif kind in ("input_image", "computer_screenshot"):
                low = part.get("detail") == "low"
                total += IMAGE_TOKENS_LOW if low else IMAGE_TOKENS_HIGH
            elif kind == "input_audio":
                audio = part.get("input_audio")
                data = audio.get("data", "") if isinstance(audio, dict) else ""
                total += max(1, len(str(data)) // AUDIO_CHARS_PER_TOKEN)
            elif kind in ANTHROPIC_MEDIA:
                total += self._media_tokens(encoding, part)
            elif kind == "thinking":  # its signature is Anthropic's check, not read
                total += self.count_text(encoding, str(part.get("thinking", "")))
            elif kind == "redacted_thinking":
                total += len(str(part.get("data", ""))) // ENCRYPTED_CHARS_PER_TOKEN
            elif kind == "tool_result":
                # Anthropic's result holds its own blocks (text, screenshots): each
                # counts as itself, the id and the framing as text.
                total += TOKENS_PER_TOOL_CALL + self.count_text(
                    encoding, str(part.get("tool_use_id", ""))
                )
                total += self._content_tokens(encoding, part.get("content"))
            elif isinstance(part.get("content"), dict | list):
                # A block holding others (a server tool's result: a fetched PDF, an MCP
                # tool's screenshot): they count as themselves, the rest by its size.
                inner = part["content"]
                rest = {k: v for k, v in part.items() if k != "content"}
                total += _estimate(canonical(rest).decode())
                total += self._content_tokens(encoding, [inner] if type(inner) is dict else inner)
            else:
                # Unknown part types are forwarded untouched; estimate them by size.
                total += _estimate(canonical(part).decode())
        return total

    def _media_tokens(self, encoding: str, part: dict[str, Any]) -> int:
        """An Anthropic `image` or `document` block, counted as Anthropic bills it (`media`)."""
        source = part.get("source")
        source = source if isinstance(source, dict) else {}
        data = source.get("data")
        if part.get("type") == "image":
            if source.get("type") == "base64" and isinstance(data, str):
                return media.base64_image_tokens(data)
            return media.IMAGE_TOKENS_MAX
        # A document's title and context go to the model as text beside it.
        total = sum(
            self.count_text(encoding, value)
            for value in (part.get("title"), part.get("context"))
            if isinstance(value, str)
        )
        kind = source.get("type")
        if kind == "text" and isinstance(data, str):
            return total + self.count_text(encoding, data)
        if kind == "content":
            return total + self._content_tokens(encoding, source.get("content"))
        if kind == "base64" and isinstance(data, str):
            return total + media.pdf_tokens(data)
        return total + media.UNSEEN_PDF_PAGES * media.PDF_TOKENS_PER_PAGE


def _load_tiktoken(encoding: str) -> Encoder:
    import tiktoken

    return tiktoken.get_encoding(encoding)


MAP_AFTER_MISSES = 16
# A miss digests the message and looks it up; an entry of the identity map
# costs a small fraction of that, so one miss pays for this many entries.
MAP_ENTRIES_PER_MISS = 12


class RequestCounts:
    """Token counts of one request's messages, looked up by object identity.

    The reduction core asks for the count of the same message objects many
    times; identity lookups spare it re-serialising them to find the cache
    key. Messages the core creates (truncated copies) fall back to the cache.

    `counts`, when the caller already has them (a resent prefix, see
    `known.py`), are trusted; the identity map is then built for the
    messages from `fresh` on only, and for the rest on the first lookup
    that needs it, so a turn that touches only its new messages stays cheap.
    """

    def __init__(
        self,
        counter: TokenCounter,
        model: str,
        messages: Iterable[Message],
        digests: Iterable[bytes] | None = None,
        counts: Iterable[int] | None = None,
        fresh: int = 0,
    ) -> None:
        self.counter = counter
        self.model = model
        items = list(messages)
        if counts is None:
            keys: Iterable[bytes | None] = digests if digests is not None else [None] * len(items)
            counts = [counter.count_message(model, m, k) for m, k in zip(items, keys, strict=True)]
            fresh = 0
        self.counts = tuple(counts)
        self._keep = items  # ids stay valid only while the objects live
        self._by_id = {id(m): c for m, c in zip(items[fresh:], self.counts[fresh:], strict=True)}
        self._misses = 0 if fresh else MAP_AFTER_MISSES
        self.total = REPLY_PRIMING + sum(self.counts)

    def __call__(self, message: Message) -> int:
        found = self._by_id.get(id(message))
        if found is None and self._misses < MAP_AFTER_MISSES:
            # A few old messages (the leading ones, say) are cheaper to count by
            # digest; a strategy that walks them all is worth a full map, and
            # for a short history the map is cheaper than a few misses.
            self._misses += 1
            if self._misses == MAP_AFTER_MISSES or self._misses * MAP_ENTRIES_PER_MISS >= len(
                self._keep
            ):
                self._misses = MAP_AFTER_MISSES
                self._by_id = {id(m): c for m, c in zip(self._keep, self.counts, strict=True)}
                found = self._by_id.get(id(message))
        return found if found is not None else self.counter.count_message(self.model, message)

    def total_of(self, messages: Sequence[Message]) -> int:
        """Tokens of `messages`, summed from the request's counts when they are its last ones.

        A full-history turn's working tail is such a run, and a turn under
        every threshold only needs its sum: a lookup a message would miss the
        identity map for the old messages, digest them and map them, for a
        sum the counts already hold. Anything else is summed message by
        message.
        """
        items = self._keep
        start = len(items) - len(messages)
        if messages and start >= 0 and all(map(operator.is_, messages, items[start:])):
            return sum(self.counts[start:])
        return sum(map(self, messages))


class _CharEstimate:
    """An encoder that counts 4 characters a token: offline, fast and the same everywhere."""

    def encode(self, text: str, *, disallowed_special: Any = ()) -> list[int]:
        return [0] * math.ceil(len(text) / 4)


def offline_counter() -> TokenCounter:
    """A TokenCounter that never downloads a tiktoken encoding (demo and simulate run offline)."""
    return TokenCounter(loader=lambda _name: _CharEstimate())
