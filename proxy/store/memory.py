"""An in-process store: for tests, demos and single-process deployments that may forget.

Everything is held as serialised JSON (str), so a caller that later mutates the
dicts it committed (or received) can never alter what is stored. Every
method runs to completion without awaiting, so under asyncio each one is
atomic without a lock.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from cachetools import TTLCache

from proxy.messages import Message
from proxy.store.base import (
    DEFAULT_MAX_SNAPSHOTS,
    DEFAULT_TTL_S,
    SUMMARIES_KEPT,
    ArchivedMessage,
    Conflict,
    Conversation,
    ConversationSummary,
    ConvKey,
    Snapshot,
    TurnCommit,
    dumps,
    loads,
)
from proxy.store.indexed import ArchiveSearch, Searchable

# TTLCache needs a finite ttl; a century stands in for "never expire".
_NO_EXPIRY_S = 100 * 365 * 24 * 3600.0


@dataclass(slots=True)
class _Stored:
    created_at: float
    updated_at: float
    head: str = ""
    position: int = 0
    state: str = "{}"
    working: str = "[]"
    turns: int = 0
    archive: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    snapshots: dict[str, tuple[int, str, float]] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)  # summaries, oldest first


T = TypeVar("T")


class MemoryStore(Searchable):
    """Conversations in a `TTLCache`: bounded by `max_conversations`, idle ones expire.

    Idle means no commit for `ttl_s` seconds (reads do not extend a
    conversation's life, as with the SQLite store). `ttl_s <= 0` disables
    expiry. `now` is injectable so tests can move time without sleeping.
    """

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_conversations: int = 10_000,
        max_snapshots: int = DEFAULT_MAX_SNAPSHOTS,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._now = now
        self._max_snapshots = max(1, max_snapshots)
        ttl = float(ttl_s) if ttl_s > 0 else _NO_EXPIRY_S
        self._cache: TTLCache[ConvKey, _Stored] = TTLCache(
            maxsize=max_conversations, ttl=ttl, timer=now
        )
        self._search = ArchiveSearch(max_conversations)

    async def commit(self, turn: TurnCommit, *, wait: bool = True) -> None:
        # Serialise everything before touching the record, so a value orjson
        # rejects leaves the store exactly as it was. Kept as str: the bytes
        # orjson returns hold on to a 4 KB buffer each, whatever their length,
        # many times what a short message needs.
        entries = [(e.hash, e.parent, dumps(e.message)) for e in turn.archive]
        snap = turn.snapshot
        state = dumps(snap.state)
        working = dumps(turn.working)
        now = self._now()
        stored = self._cache.get(turn.key) or _Stored(created_at=now, updated_at=now)
        if turn.expected_turns is not None and stored.turns != turn.expected_turns:
            raise Conflict(
                f"{turn.key.conversation} is at turn {stored.turns}, not {turn.expected_turns}"
            )
        for hash_, parent, message in entries:
            if hash_ not in stored.archive:
                stored.archive[hash_] = (parent, message, len(stored.archive))
        stored.snapshots.pop(snap.head, None)
        stored.snapshots[snap.head] = (snap.position, state, snap.created_at)
        while len(stored.snapshots) > self._max_snapshots:
            del stored.snapshots[next(iter(stored.snapshots))]
        stored.head, stored.position, stored.state = snap.head, snap.position, state
        stored.working = working
        stored.turns += 1
        stored.updated_at = now
        self._cache[turn.key] = stored

    async def find_snapshot(self, key: ConvKey, heads: Sequence[str]) -> Snapshot | None:
        stored = self._cache.get(key)
        if stored is None or not stored.snapshots:
            return None
        for head in reversed(heads):
            found = stored.snapshots.get(head)
            if found is not None:
                position, state, created_at = found
                return Snapshot(head, position, loads(state), created_at)
        return None

    async def latest(self, key: ConvKey) -> Conversation | None:
        stored = self._cache.get(key)
        if stored is None:
            return None
        return Conversation(
            key=key,
            head=stored.head,
            position=stored.position,
            state=loads(stored.state),
            working=loads(stored.working),
            turns=stored.turns,
            created_at=stored.created_at,
            updated_at=stored.updated_at,
        )

    async def archive(
        self, key: ConvKey, *, limit: int = 1000, offset: int = 0
    ) -> list[ArchivedMessage]:
        stored = self._cache.get(key)
        if stored is None:
            return []
        rows = list(stored.archive.items())[offset : offset + max(0, limit)]
        return [ArchivedMessage(h, parent, loads(m), seq) for h, (parent, m, seq) in rows]

    async def chain(self, key: ConvKey, last: str, *, limit: int) -> list[Message]:
        stored = self._cache.get(key)
        found: list[Message] = []
        while stored is not None and last in stored.archive and len(found) < limit:
            last, message, _ = stored.archive[last]
            found.append(loads(message))
        return found[::-1]

    async def _indexed(
        self, key: ConvKey, op: Callable[[sqlite3.Connection, int], T], none: T
    ) -> T:
        async def fetch(k: ConvKey, offset: int, count: int) -> list[ArchivedMessage]:
            return await self.archive(k, limit=count, offset=offset)

        if self._cache.get(key) is None:
            return none
        return await self._search.run(key, fetch, op)

    async def keep_summary(self, key: ConvKey, request: str, text: str) -> None:
        stored = self._cache.get(key)
        if stored is None:
            return
        stored.kept.pop(request, None)
        stored.kept[request] = text
        while len(stored.kept) > SUMMARIES_KEPT:
            del stored.kept[next(iter(stored.kept))]

    async def kept_summaries(self, key: ConvKey) -> dict[str, str]:
        stored = self._cache.get(key)
        return dict(stored.kept) if stored is not None else {}

    async def delete(self, key: ConvKey) -> bool:
        self._search.forget(key)
        return self._cache.pop(key, None) is not None

    async def list_conversations(
        self, tenant: str | None, *, limit: int = 50, offset: int = 0
    ) -> list[ConversationSummary]:
        self._cache.expire()
        chosen = [
            (key, stored)
            for key, stored in self._cache.items()
            if tenant is None or key.tenant == tenant
        ]
        chosen.sort(key=lambda item: item[1].updated_at, reverse=True)
        return [
            ConversationSummary(
                key=key,
                turns=stored.turns,
                position=stored.position,
                messages=len(stored.archive),
                created_at=stored.created_at,
                updated_at=stored.updated_at,
            )
            for key, stored in chosen[offset : offset + max(0, limit)]
        ]

    def problem(self) -> str | None:
        return None

    def failing(self) -> bool:
        return False

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self._cache.clear()
        self._search.close()
