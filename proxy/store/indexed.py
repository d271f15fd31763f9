"""Keeping a search index in step with an archive, and the `Store` search methods over it.

The SQLite store keeps its index in its own file and catches it up in its
writer; the memory and Redis stores have no index of their own, so an
`ArchiveSearch` keeps one in process, fed from their archives by offset.
Either way a backend gives `Searchable` one way to run an operation on a
caught-up index, and gets the `Store` search methods (`proxy.store.search`'s
functions) from it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence, Set
from typing import TypeVar

from proxy.store.base import ArchivedMessage, ConvKey, SearchHit, StoreError
from proxy.store.search import add, create, forget, search
from proxy.store.vectors import nearest, put_vectors, unembedded

T = TypeVar("T")

# Archived messages read at a time while catching an index up.
_BATCH = 1000

Fetch = Callable[[ConvKey, int, int], Awaitable[list[ArchivedMessage]]]


class ArchiveSearch:
    """An in-process FTS5 index over the archives of a store that has none of its own.

    The store hands `search` a way to read its archive by offset; the index
    catches up from where it stopped. Before trusting what it holds, it checks
    that the archive still has the last message it indexed at the same place
    (chain hashes make that a proof of the whole prefix), so a conversation
    deleted, expired or replaced by another replica is re-indexed from scratch.
    Only the `max_conversations` most recently searched are kept. One lock
    serialises searches, so two turns never index the same messages twice.
    """

    def __init__(self, max_conversations: int = 1000) -> None:
        self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        create(self._db)
        self._max = max(1, max_conversations)
        # Per conversation: (index id, messages indexed, chain hash of the last one).
        self._known: OrderedDict[ConvKey, tuple[int, int, str]] = OrderedDict()
        self._next_id = 1
        self._lock = asyncio.Lock()

    async def run(
        self, key: ConvKey, fetch: Fetch, op: Callable[[sqlite3.Connection, int], T]
    ) -> T:
        """Bring the conversation's index up to date with its archive, then run `op` on it."""
        async with self._lock:
            try:
                conv = await self._catch_up(key, fetch)
                return op(self._db, conv)
            except sqlite3.Error as exc:
                raise StoreError(f"search index: {exc}") from exc

    async def _catch_up(self, key: ConvKey, fetch: Fetch) -> int:
        conv, count, last = self._known.pop(key, (0, 0, ""))
        if conv and count:
            check = await fetch(key, count - 1, 1)
            if not check or check[0].hash != last:
                forget(self._db, conv)
                count, last = 0, ""
        if not conv:
            conv, self._next_id = self._next_id, self._next_id + 1
        while True:
            batch = await fetch(key, count, _BATCH)
            if not batch:
                break
            add(self._db, conv, [(count + i, a.hash, a.message) for i, a in enumerate(batch)])
            count, last = count + len(batch), batch[-1].hash
            if len(batch) < _BATCH:
                break
        self._known[key] = (conv, count, last)
        while len(self._known) > self._max:
            _, (old, _, _) = self._known.popitem(last=False)
            forget(self._db, old)
        return conv

    def forget(self, key: ConvKey) -> None:
        known = self._known.pop(key, None)
        if known is not None:
            forget(self._db, known[0])

    def close(self) -> None:
        self._db.close()


class Searchable:
    """The `Store` search methods, given a backend's way to run an operation on a fresh index."""

    async def _indexed(
        self, key: ConvKey, op: Callable[[sqlite3.Connection, int], T], none: T
    ) -> T:
        """Catch the conversation's index up with its archive, then `op(db, conv)`.

        `none` is the answer for a conversation that does not exist.
        """
        raise NotImplementedError

    async def search(
        self,
        key: ConvKey,
        words: Sequence[str | tuple[str, ...]],
        *,
        limit: int,
        asks: bool = True,
        forwarded: Set[str] = frozenset(),
        within: Set[str] | None = None,
        feedback: Set[int] | None = None,
    ) -> list[SearchHit]:
        words = list(words)

        def op(db: sqlite3.Connection, conv: int) -> list[SearchHit]:
            return search(
                db,
                conv,
                words,
                limit,
                asks=asks,
                forwarded=forwarded,
                within=within,
                feedback=feedback,
            )

        return await self._indexed(key, op, [])

    async def unembedded(self, key: ConvKey, model: str, *, limit: int) -> list[tuple[int, str]]:
        return await self._indexed(key, lambda db, c: unembedded(db, c, model, limit), [])

    async def put_vectors(
        self, key: ConvKey, model: str, vectors: Sequence[tuple[int, bytes]]
    ) -> None:
        vectors = list(vectors)
        await self._indexed(key, lambda db, c: put_vectors(db, c, model, vectors), None)

    async def nearest(
        self,
        key: ConvKey,
        model: str,
        vector: bytes,
        *,
        limit: int,
        min_similarity: float,
        within: Set[str] | None = None,
        names: Sequence[str] = (),
    ) -> list[SearchHit]:
        def op(db: sqlite3.Connection, conv: int) -> list[SearchHit]:
            return nearest(db, conv, model, vector, limit, min_similarity, within, names)

        return await self._indexed(key, op, [])
