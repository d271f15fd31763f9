"""Conversation storage: the `Store` protocol and the backend chosen by `[store].backend`.

store = open_store("sqlite", path="context-proxy.db", ttl_s=30 * 24 * 3600)
try:
    await store.commit(turn)
finally:
    await store.close()
"""

from __future__ import annotations

import time
from collections.abc import Callable

from proxy.errors import ConfigError
from proxy.store.base import (
    DEFAULT_MAX_SNAPSHOTS,
    DEFAULT_TTL_S,
    ArchivedMessage,
    ArchiveEntry,
    Conflict,
    Conversation,
    ConversationSummary,
    ConvKey,
    Snapshot,
    Store,
    StoreError,
    TurnCommit,
    WorkingLayout,
)
from proxy.store.memory import MemoryStore
from proxy.store.sqlite import SqliteStore

__all__ = [
    "ArchiveEntry",
    "ArchivedMessage",
    "Conflict",
    "ConvKey",
    "Conversation",
    "ConversationSummary",
    "MemoryStore",
    "Snapshot",
    "SqliteStore",
    "Store",
    "StoreError",
    "TurnCommit",
    "WorkingLayout",
    "open_store",
]

BACKENDS = ("memory", "sqlite", "redis")


def open_store(
    backend: str,
    *,
    path: str = "context-proxy.db",
    url: str = "redis://127.0.0.1:6379/0",
    ttl_s: int = DEFAULT_TTL_S,
    max_snapshots: int = DEFAULT_MAX_SNAPSHOTS,
    max_conversations: int = 10_000,
    now: Callable[[], float] = time.time,
    read_only: bool = False,
    backoff_s: float = 30.0,
) -> Store:
    """The store named by `backend`, ready to use.

    Raises `ConfigError` for a backend name or Redis URL the operator got wrong, and
    `StoreError` when the SQLite file cannot be opened. The Redis client
    connects lazily: `await store.ping()` at start-up to fail fast.
    `max_conversations` bounds the memory backend only. `read_only` (SQLite
    only) opens a file for looking: no migration, no expiry, no write.
    `backoff_s`: how long a failed write refuses append turns (and Redis is skipped
    after a call times out).
    """
    if backend == "memory":
        return MemoryStore(
            ttl_s=ttl_s, max_conversations=max_conversations, max_snapshots=max_snapshots, now=now
        )
    if backend == "sqlite":
        return SqliteStore(
            path,
            ttl_s=ttl_s,
            max_snapshots=max_snapshots,
            now=now,
            read_only=read_only,
            backoff_s=backoff_s,
        )
    if backend == "redis":
        # Imported here: redis is an optional extra, needed only by this backend.
        try:
            from proxy.store.redis import RedisStore
        except ImportError as exc:
            raise ConfigError(
                "store.backend = 'redis' needs the redis package: "
                "pip install 'context-proxy[redis]'"
            ) from exc
        try:
            return RedisStore(
                url, ttl_s=ttl_s, max_snapshots=max_snapshots, now=now, backoff_s=backoff_s
            )
        except ValueError as exc:  # redis-py's reading of the URL (a port that is no number)
            raise ConfigError(f"store.url: {exc}") from None
    raise ConfigError(f"store.backend: unknown backend {backend!r}; expected one of {BACKENDS}")
