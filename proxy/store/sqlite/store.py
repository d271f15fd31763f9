"""`SqliteStore`: the file opened, what a turn's write does around its SQL, lookups and reads.

The package's docstring (`__init__.py`) says how writes, lookups and
checkpoints share the file, and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from cachetools import LRUCache

from proxy.messages import Message
from proxy.store import indexed
from proxy.store.base import (
    DEFAULT_MAX_SNAPSHOTS,
    DEFAULT_TTL_S,
    ArchivedMessage,
    Conversation,
    ConversationSummary,
    ConvKey,
    Snapshot,
    StoreError,
    TurnCommit,
)
from proxy.store.schema import (
    DATA_VERSION,
    DELETE_IDLE,
    LIVE_POSITION,
    migrate,
)
from proxy.store.schema import check as check_schema

from . import connections, rows
from .checkpoint import PAGES_PER_JOB, Checkpointer
from .recent import RECENT_BYTES, RECENT_SNAPSHOTS, Recent, weight_of
from .turn_rows import TurnRows
from .writer import Writer

T = TypeVar("T")
log = logging.getLogger("context_proxy.store")


class SqliteStore(indexed.Searchable):
    """Conversations in a SQLite file at `path` (":memory:" works, but forgets on close).

    Conversations with no commit for `ttl_s` seconds read as absent at once
    and are deleted by a sweep at open and then at most every
    `sweep_interval_s` (checked on commit). `ttl_s <= 0` disables expiry.
    `now` is injectable so tests can move time without sleeping.

    `read_only` opens the file for the tools that only look (`inspect`):
    SQLite itself refuses every write, nothing is migrated or swept, and
    nothing expires, since only the server knows its configured TTL. A file
    whose schema is not this release's is refused rather than upgraded.
    """

    def __init__(
        self,
        path: str,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_snapshots: int = DEFAULT_MAX_SNAPSHOTS,
        sweep_interval_s: float = 300.0,
        busy_timeout_s: float = 5.0,
        now: Callable[[], float] = time.time,
        read_only: bool = False,
        backoff_s: float = 30.0,
    ) -> None:
        self.path = path
        self._read_only = read_only
        self._ttl_s = 0 if read_only else ttl_s
        self._max_snapshots = max(1, max_snapshots)
        self._sweep_interval_s = sweep_interval_s
        self._busy_timeout_s = busy_timeout_s
        self._now = now
        self._last_sweep = float("-inf")
        self._closed = False
        self._db: sqlite3.Connection | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-sqlite")
        self._reader: sqlite3.Connection | None = None
        self._file = connections.is_file(path)
        self._checkpoints = (
            Checkpointer(path, busy_timeout_s, self._look) if self._file and not read_only else None
        )
        # See `Recent`. Valid while the writing connection's data version
        # reads `_version`: nobody else committed since this process's last group.
        self._recent: LRUCache[ConvKey, Recent] = LRUCache(RECENT_BYTES, getsizeof=weight_of)
        self._version = -1
        self._unchanged_now = False  # see `_unchanged`
        # The last turn of each conversation queued and not yet written (a
        # conversation's turns are written in order, so waiting for it waits for all).
        self._queued: dict[ConvKey, asyncio.Future[Any]] = {}
        # Turns are written from the loop's thread when the file allows it (see `writer`).
        db, executor = (lambda: self._db), self._executor
        self._writer = Writer(path, None, db, executor, busy_timeout_s, self, backoff_s)
        self._identity: tuple[int, int] | None = None  # the file's (device, inode) at open
        self._lost: str | None = None  # what the checkpointer last found wrong with the file
        try:
            self._executor.submit(self._open).result()
            if self._file:
                self._identity = connections.identity(path)
            if self._file and not read_only:
                self._reader = connections.reader(path, busy_timeout_s)
                here = self._writer.here = connections.writer(path, busy_timeout_s=0.0)
                self._version = int(here.execute(DATA_VERSION).fetchone()[0])
        except sqlite3.Error as exc:
            self._executor.shutdown(wait=False)
            if self._checkpoints is not None:
                self._checkpoints.abandon()
            self._closed = True
            raise StoreError(f"cannot open SQLite store at {path!r}: {exc}") from exc

    def _open(self) -> None:
        if self._read_only:
            self._db = connections.read_only(self.path, self._busy_timeout_s)
            return
        if self._file and os.path.exists(self.path):
            # Checked before the connection below switches the file to WAL: a
            # file this release cannot use is left exactly as it was.
            with contextlib.closing(sqlite3.connect(self.path)) as probe:
                check_schema(probe)
        db = connections.writer(self.path, self._busy_timeout_s)
        try:
            migrate(db)
        except BaseException:
            db.close()
            raise
        self._db = db
        self._sweep(db)

    async def _run(self, job: Callable[[sqlite3.Connection], T]) -> T:
        await self.flush()  # a read sees this process's turns, written or not
        if self._closed or self._db is None:
            raise StoreError("the SQLite store is closed")
        db = self._db
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, job, db)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite: {exc}") from exc

    # What the store does around its writer's groups (`writer.GroupHooks`).
    def group_begins(self, version: int) -> None:
        """`_recent` is forgotten before any job uses it if someone else committed since
        this process's last group (a connection's own commits leave the version alone)."""
        if version != self._version:
            self._recent.clear()
            self._version = version

    def rows_undone(self) -> None:
        """After writes were undone: no remembered row is known to match the file any more."""
        for recent in self._recent.values():
            recent.row = None

    def group_written(self, jobs: int, size: int) -> None:
        if self._checkpoints is not None:
            self._checkpoints.after_write(jobs * PAGES_PER_JOB + size // 4096)
        if self._now() - self._last_sweep >= self._sweep_interval_s:  # a failed one retries
            self._last_sweep = self._now()
            with contextlib.suppress(RuntimeError):  # shut down meanwhile
                self._executor.submit(self._sweep_quietly)

    def problem(self) -> str | None:
        """Why turns cannot be written now; None while the file takes them."""
        if self._identity is None or self._read_only:
            return self._writer.refusing()
        return self._writer.refusing() or connections.file_problem(self.path, self._identity)

    def failing(self) -> bool:
        # A deleted file still takes writes: the checkpointer's thread looks at the path.
        return self._writer.error is not None or self._lost is not None

    def _look(self) -> None:
        self._lost = connections.file_problem(self.path, self._identity) if self._identity else None

    def _sweep_quietly(self) -> None:
        if self._db is not None and not self._closed:
            with contextlib.suppress(sqlite3.Error):
                self._sweep(self._db)

    def _cutoff(self) -> float:
        return self._now() - self._ttl_s if self._ttl_s > 0 else float("-inf")

    def _sweep(self, db: sqlite3.Connection) -> None:
        self._last_sweep = self._now()
        if self._ttl_s > 0:
            rows.write(db, lambda: db.execute(DELETE_IDLE, (self._cutoff(),)))

    async def commit(self, turn: TurnCommit, *, wait: bool = True) -> asyncio.Future[Any] | None:
        """Write a turn; with `wait=False`, return once it is queued (see `Store.commit`).

        This process's lookups see a queued turn at once (`Recent`), and its
        other reads wait for it, so the response need not wait for the
        write, which would otherwise add to every turn's latency.
        """
        if self._read_only:
            raise StoreError("the SQLite store is open read-only")
        key, snap = turn.key, turn.snapshot
        prepared = TurnRows.of(turn)
        if self._closed or self._db is None:
            raise StoreError("the SQLite store is closed")
        cached = (snap.position, prepared.state, snap.created_at)
        remembered = self._remember(key, snap.head, cached)

        def job(db: sqlite3.Connection) -> int:
            # A remembered row is updated by id (`Recent.row`), not looked up; `_recent`
            # is the loop thread's, so a job on the worker looks it up.
            here = db is self._writer.here
            use = here and remembered and turn.expected_turns is None
            recent = self._recent.get(key) if use else None
            hidden, row = prepared.write(
                db,
                remembered=remembered,
                known=recent.row if recent is not None else None,
                cutoff=self._cutoff(),
                now=self._now(),
                max_snapshots=self._max_snapshots,
            )
            if here:
                recent = self._recent.get(key)
                if recent is not None:
                    recent.row = row
            return hidden

        written = self._writer.submit(job, size=prepared.size)
        written.add_done_callback(
            lambda done: self._written(key, snap.head, cached, remembered, done)
        )
        self._queued[key] = written
        if wait:
            await written
            return None
        return written

    async def flush(self) -> None:
        """Return once every turn queued so far is written (or failed to be)."""
        if self._queued:
            await asyncio.wait(list(self._queued.values()))

    def _remember(self, key: ConvKey, head: str, cached: tuple[int, str, float]) -> bool:
        """Add a queued turn's snapshot to `_recent`; False if the conversation is not there."""
        if self._reader is None:
            return False
        recent = self._recent.get(key)
        if recent is None:
            return False
        if recent.updated_at < self._cutoff():  # expired: the commit deletes what it knew
            del self._recent[key]
            return False
        self._add(key, recent, head, cached)
        return True

    def _add(self, key: ConvKey, recent: Recent, head: str, cached: tuple[int, str, float]) -> None:
        """Add a snapshot to `recent` and (re)insert it, so the cache weighs it as it is now."""
        recent.add(head, cached, self._now(), min(RECENT_SNAPSHOTS, self._max_snapshots))
        if recent.weight > RECENT_BYTES:  # past the whole budget: not kept
            self._recent.pop(key, None)
        else:
            self._recent[key] = recent

    def _written(
        self,
        key: ConvKey,
        head: str,
        cached: tuple[int, str, float],
        remembered: bool,
        done: asyncio.Future[Any],
    ) -> None:
        """After a turn's write: forget what `_recent` said of it if it failed, else learn it."""
        if self._queued.get(key) is done:
            del self._queued[key]
        if done.cancelled() or done.exception() is not None:
            self._recent.pop(key, None)
            return
        if remembered or self._reader is None:
            return
        recent = self._recent.get(key) or Recent(hidden=done.result(), updated_at=self._now())
        self._add(key, recent, head, cached)

    async def find_snapshot(self, key: ConvKey, heads: Sequence[str]) -> Snapshot | None:
        recent = self._recent.get(key)
        if recent is not None and self._unchanged():
            if recent.updated_at < self._cutoff():
                return None
            found = recent.find(heads)
            if found is not None or recent.hidden == 0:
                return found
        queued = self._queued.get(key)
        if queued is not None:  # the file has this process's turns once this one is written
            await asyncio.wait([queued])

        def job(db: sqlite3.Connection) -> Snapshot | None:
            return rows.snapshot(db, key, heads, self._cutoff())

        reader = self._reader
        if reader is None:  # an in-memory database exists on the worker's connection only
            return await self._run(job)
        if self._closed:
            raise StoreError("the SQLite store is closed")
        try:
            found = job(reader)
            if key not in self._recent:
                self._expect(reader, key)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite: {exc}") from exc
        return found

    def _expect(self, db: sqlite3.Connection, key: ConvKey) -> None:
        """Remember a conversation the file was just asked about, as the file has it.

        Its turn, once queued, is then in `_recent`, and the next turn's
        lookup need not wait for it to be written, which for many long
        conversations starting at once means waiting behind large writes.
        Trusted only if nobody but this process wrote
        since its last group; an expired row is not, because its turn's
        write must delete it first.
        """
        row = db.execute(LIVE_POSITION, (key.tenant, key.conversation)).fetchone()
        # Checked after the read: a commit by anyone else before it shows here.
        if not self._unchanged():
            return
        if row is not None and row[0] < self._cutoff():
            return
        hidden = 0 if row is None else int(row[1] or 0)
        self._recent[key] = Recent(hidden=hidden, updated_at=self._now())

    def _unchanged(self) -> bool:
        """Whether nobody but this process's groups committed since its last group.

        Asked of the writing connection, the only one whose data version its
        own groups leave alone; between groups it holds no transaction.
        """
        here = self._writer.here
        if here is None or self._closed:
            return False
        if self._unchanged_now:
            return True
        try:
            unchanged = int(here.execute(DATA_VERSION).fetchone()[0]) == self._version
        except sqlite3.Error:
            return False
        if unchanged:
            # Trusted until the loop's callbacks queued after this one run: a turn
            # served meanwhile was asked for before this check, so any commit that
            # preceded it (another replica's answer) shows here. Lookups of concurrent
            # requests share a check rather than each paying its SQL.
            self._unchanged_now = True
            asyncio.get_running_loop().call_soon(setattr, self, "_unchanged_now", False)
        return unchanged

    async def latest(self, key: ConvKey) -> Conversation | None:
        cutoff = self._cutoff()
        return await self._run(lambda db: rows.read(db, lambda: rows.conversation(db, key, cutoff)))

    async def archive(
        self, key: ConvKey, *, limit: int = 1000, offset: int = 0
    ) -> list[ArchivedMessage]:
        return await self._archived(key, lambda db, c: rows.archived_page(db, c, limit, offset))

    async def chain(self, key: ConvKey, last: str, *, limit: int) -> list[Message]:
        return await self._archived(key, lambda db, cid: rows.chain(db, cid, last, limit))

    async def _archived(
        self, key: ConvKey, op: Callable[[sqlite3.Connection, int], list[T]]
    ) -> list[T]:
        def job(db: sqlite3.Connection) -> list[T]:
            cid = rows.live_id(db, key, self._cutoff())
            return [] if cid is None else op(db, cid)

        return await self._run(lambda db: rows.read(db, lambda: job(db)))

    async def _indexed(
        self, key: ConvKey, op: Callable[[sqlite3.Connection, int], T], none: T
    ) -> T:
        def job(db: sqlite3.Connection) -> T:
            cid = rows.live_id(db, key, self._cutoff())
            return none if cid is None else op(db, rows.indexed(db, cid))

        return await self._run(lambda db: rows.write(db, lambda: job(db)))

    async def keep_summary(self, key: ConvKey, request: str, text: str) -> None:
        def job(db: sqlite3.Connection) -> None:
            if (cid := rows.live_id(db, key, self._cutoff())) is not None:
                rows.keep_summary(db, cid, request, text, self._now())

        await self._run(lambda db: rows.write(db, lambda: job(db)))

    async def kept_summaries(self, key: ConvKey) -> dict[str, str]:
        return dict(await self._archived(key, rows.kept_summaries))

    async def delete(self, key: ConvKey) -> bool:
        if self._read_only:
            raise StoreError("the SQLite store is open read-only")

        def job(db: sqlite3.Connection) -> bool:
            existed = rows.live_id(db, key, self._cutoff()) is not None
            db.execute(
                "DELETE FROM conversations WHERE tenant = ? AND conversation = ?",
                (key.tenant, key.conversation),
            )
            return existed

        self._recent.pop(key, None)
        return await self._run(lambda db: rows.write(db, lambda: job(db)))

    def remembers(self, key: ConvKey) -> bool:
        """Whether this process keeps anything of the conversation in memory."""
        return key in self._recent or key in self._queued

    async def list_conversations(
        self, tenant: str | None, *, limit: int = 50, offset: int = 0
    ) -> list[ConversationSummary]:
        return await self._run(lambda db: rows.listing(db, tenant, self._cutoff(), limit, offset))

    async def ping(self) -> None:
        """Whether the file answers and takes writes; it never waits for queued turns, so a
        health check stays quick while a large turn is being written."""
        if self._reader is None:  # an in-memory database exists on the worker's connection only
            await self._run(connections.ping)
        elif self._closed:
            raise StoreError("the SQLite store is closed")
        else:
            connections.ping(self._reader)
        problem = self.problem()
        if problem is not None:
            raise StoreError(problem)

    async def close(self) -> None:
        await self.flush()  # queued turns are written before the store closes
        if self._closed or self._db is None:
            return
        db, self._closed = self._db, True
        if self._reader is not None:
            self._reader.close()
        self._writer.close()
        loop = asyncio.get_running_loop()
        if self._checkpoints is not None:  # a waiting checkpoint runs now, not in a second
            await self._checkpoints.close()
        # The writer closes last: the last connection to close checkpoints and removes the WAL.
        await loop.run_in_executor(self._executor, db.close)
        self._executor.shutdown(wait=False)
