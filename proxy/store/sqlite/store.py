"""`SqliteStore`: the file opened, turns written in groups from the event loop, lookups and reads.

The package's docstring (`__init__.py`) says how writes, lookups and
checkpoints share the file, and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cachetools import LRUCache

from proxy.store import search
from proxy.store.base import (
    DEFAULT_MAX_SNAPSHOTS,
    DEFAULT_TTL_S,
    ArchivedMessage,
    Conflict,
    Conversation,
    ConversationSummary,
    ConvKey,
    Snapshot,
    StoreError,
    TurnCommit,
    dumps,
    loads,
)
from proxy.store.schema import (
    DATA_VERSION,
    DELETE_IDLE,
    LIST_CONVERSATIONS,
    LIVE_POSITION,
    PRUNE_SNAPSHOTS,
    SELECT_SNAPSHOTS,
    SELECT_WORKING,
    UPDATE_CONVERSATION,
    UPSERT_CONVERSATION,
    UPSERT_SNAPSHOT,
    migrate,
    pending,
)
from proxy.store.schema import check as check_schema

from . import rows
from .checkpoint import PAGES_PER_JOB, Checkpointer
from .recent import RECENT_BYTES, RECENT_SNAPSHOTS, Recent, weight_of

T = TypeVar("T")
log = logging.getLogger("context_proxy.store")

# Text a group written from the loop holds at most (one turn may exceed it).
GROUP_BYTES = 1 << 20
# While another connection holds the write lock, the loop tries again this often.
LOCK_RETRY_S = 0.005
# After a checkpoint resets it, the WAL file is truncated to this size.
WAL_SIZE_LIMIT = 64 << 20


class SqliteStore(search.Searchable):
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
        self._queue: list[_Job] = []
        self._queue_lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._here: sqlite3.Connection | None = None  # writes from the event loop's thread
        self._locked_since: float | None = None  # the loop's groups wait for another's lock
        self._file = path != ":memory:" and not path.startswith("file:")
        self._checkpoints = (
            Checkpointer(path, busy_timeout_s) if self._file and not read_only else None
        )
        # See `Recent`. Valid while the writing connection's data version
        # reads `_version`: nobody else committed since this process's last group.
        self._recent: LRUCache[ConvKey, Recent] = LRUCache(RECENT_BYTES, getsizeof=weight_of)
        self._version = -1
        self._unchanged_now = False  # see `_unchanged`
        # The last turn of each conversation queued and not yet written (a
        # conversation's turns are written in order, so waiting for it waits for all).
        self._queued: dict[ConvKey, asyncio.Future[Any]] = {}
        # Why the last group of turns could not be written (None: it was). A
        # successful group clears it, so health follows the file's.
        self._write_error: str | None = None
        self._identity: tuple[int, int] | None = None  # the file's (device, inode) at open
        try:
            self._executor.submit(self._open).result()
            if self._file:
                found = os.stat(path)
                self._identity = (found.st_dev, found.st_ino)
            if self._file and not read_only:
                self._reader = self._open_reader()
                self._here = self._connect(busy_timeout_s=0.0)
                self._version = int(self._here.execute(DATA_VERSION).fetchone()[0])
        except sqlite3.Error as exc:
            self._executor.shutdown(wait=False)
            if self._checkpoints is not None:
                self._checkpoints.abandon()
            self._closed = True
            raise StoreError(f"cannot open SQLite store at {path!r}: {exc}") from exc

    def _open_reader(self) -> sqlite3.Connection:
        """A read-only connection for the lookups each request makes before going upstream.

        They are a few indexed reads, which under WAL never wait for a
        writer, so they run on the caller's thread: a hop to the worker and
        back costs more than the reads. Only the event loop's thread uses it.
        """
        reader = sqlite3.connect(
            self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        reader.execute("PRAGMA query_only=ON")
        return reader

    def _connect_read_only(self) -> sqlite3.Connection:
        """A connection that cannot change the file, on a file of this release's schema."""
        if not self._file:
            raise sqlite3.OperationalError("a read-only store needs a file")
        uri = f"{Path(self.path).resolve().as_uri()}?mode=ro"
        db = sqlite3.connect(
            uri,
            uri=True,
            timeout=self._busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            missing = pending(db)
        except BaseException:
            db.close()
            raise
        if missing:
            db.close()
            raise sqlite3.DatabaseError(
                f"its schema is not this release's (missing {', '.join(missing)}); "
                "start `context-proxy serve` on it once to upgrade it"
            )
        return db

    def _connect(self, busy_timeout_s: float) -> sqlite3.Connection:
        """A writing connection; the worker's waits for a busy file, the loop's does not."""
        db = sqlite3.connect(
            self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            if self._file:  # checkpoints are the checkpointer thread's (see the module's doc)
                db.execute("PRAGMA wal_autocheckpoint=0")
                db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        except BaseException:
            db.close()
            raise
        return db

    def _open(self) -> None:
        if self._read_only:
            self._db = self._connect_read_only()
            return
        if self._file and os.path.exists(self.path):
            # Checked before the connection below switches the file to WAL: a
            # file this release cannot use is left exactly as it was.
            with contextlib.closing(sqlite3.connect(self.path)) as probe:
                check_schema(probe)
        db = self._connect(self._busy_timeout_s)
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

    def _batched(self, job: Callable[[sqlite3.Connection], T], *, size: int) -> asyncio.Future[T]:
        """Run `job` in the next group of jobs: one transaction for all.

        Under load, turns of many conversations arrive together; committing
        each alone costs more than the SQL itself. Jobs queued before the
        group runs are run together, in order, each inside its own
        savepoint, so one job's failure (a `Conflict`) undoes only that job
        and the others still commit.
        """
        if self._closed or self._db is None:
            raise StoreError("the SQLite store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._queue_lock:
            self._queue.append(_Job(job, future, size))
            first = len(self._queue) == 1
            here = self._here is not None
        if first:
            if here:
                loop.call_soon(self._drain_here, loop)
            else:
                self._executor.submit(self._drain, loop)
        return future

    def _drain_here(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the event loop's thread: run the next group of queued jobs, unless the file is locked.

        Running a group on the loop's thread costs less than handing it to
        a worker and back, where the GIL changes hands at every statement
        and the hand-offs cost more CPU than the SQL. A group is at most
        about GROUP_BYTES of text, so the loop is never held for long, even
        by the first turns of many long conversations. The loop never waits
        for the write lock: this connection's busy timeout is 0, and while
        another connection holds the lock (a checkpoint starting the WAL
        over, another process) the group is tried again every LOCK_RETRY_S,
        in order, and fails after the store's busy timeout. Turns written
        after their answer (the usual case) only queue up meanwhile; a
        thread waiting on the lock would be slow under load, each statement
        waiting for the GIL.
        """
        db = self._here
        jobs = _first_bytes(self._queue, GROUP_BYTES)
        del self._queue[: len(jobs)]
        if not jobs:
            return
        if db is None or self._closed:
            _settle(jobs, [(False, sqlite3.ProgrammingError("the store is closed"))] * len(jobs))
            return
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:  # another connection holds the write lock
            now = time.monotonic()
            self._locked_since = self._locked_since or now
            if now - self._locked_since < self._busy_timeout_s:
                self._queue[:0] = jobs
                loop.call_later(LOCK_RETRY_S, self._drain_here, loop)
                return
            self._locked_since = None
            self._failed(exc)
            _settle(jobs, [(False, exc)] * len(jobs))
        except sqlite3.Error as exc:
            self._failed(exc)
            _settle(jobs, [(False, exc)] * len(jobs))
        else:
            self._locked_since = None
            _settle(jobs, self._run_group(db, jobs, here=True))
        if self._queue:  # the rest after the loop has served others
            loop.call_soon(self._drain_here, loop)

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the worker thread: run every queued job, commit once, settle their futures."""
        with self._queue_lock:
            jobs, self._queue = self._queue, []
        db = self._db
        results: list[tuple[bool, Any]] = []
        if jobs:
            try:
                if db is None:
                    raise sqlite3.ProgrammingError("the SQLite store is closed")
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                results = [(False, exc)] * len(jobs)
            else:
                assert db is not None
                # Another connection's data version: the file's lookups (and
                # `_recent`) are the loop's connections' alone.
                results = self._run_group(db, jobs, here=False)
        with contextlib.suppress(RuntimeError):  # the loop closed while the group ran
            loop.call_soon_threadsafe(_settle, jobs, results)

    def _run_group(
        self, db: sqlite3.Connection, jobs: list[_Job], *, here: bool
    ) -> list[tuple[bool, Any]]:
        """The jobs of one group in the transaction just begun on `db`, each in a savepoint.

        On the loop's connection (`here`), `db`'s data version, read under
        the write lock before the jobs, tells whether anyone else committed
        since this process's last group; if so, what the process remembers
        of the file (`_recent`) is forgotten before any job uses it.
        It then reads the same until someone else commits (a connection's
        own commits leave it alone).
        """

        def one_by_one() -> list[tuple[bool, Any]]:
            results: list[tuple[bool, Any]] = []
            for j in jobs:
                db.execute("SAVEPOINT job")
                try:
                    results.append((True, j.job(db)))
                except Exception as exc:
                    db.execute("ROLLBACK TO job")
                    results.append((False, exc))
                db.execute("RELEASE job")
            return results

        def run() -> list[tuple[bool, Any]]:
            if here:
                version = int(db.execute(DATA_VERSION).fetchone()[0])
                if version != self._version:  # someone else committed meanwhile
                    self._recent.clear()
                    self._version = version
            # Jobs rarely fail (an append-mode conflict): all of them in one
            # savepoint first, and one savepoint each only to redo a group
            # in which one did. Two statements a job fewer.
            db.execute("SAVEPOINT jobs")
            try:
                results = [(True, j.job(db)) for j in jobs]
            except Exception:
                db.execute("ROLLBACK TO jobs")
                self._forget_rows()  # the jobs before the failed one are undone
                results = one_by_one()
            db.execute("RELEASE jobs")
            return results

        try:
            results = rows.write(db, run, begun=True)
        except sqlite3.Error as exc:
            self._forget_rows()
            self._failed(exc)
            return [(False, exc)] * len(jobs)
        self._write_error = None
        if self._checkpoints is not None:
            self._checkpoints.after_write(sum(PAGES_PER_JOB + j.size // 4096 for j in jobs))
        if self._now() - self._last_sweep >= self._sweep_interval_s:
            # The turns are committed already; a failed sweep is retried next time.
            self._last_sweep = self._now()
            with contextlib.suppress(RuntimeError):  # shut down meanwhile
                self._executor.submit(self._sweep_quietly)
        return results

    def _failed(self, exc: sqlite3.Error) -> None:
        if self._write_error is None:
            log.error("SQLite store %s cannot write turns: %s", self.path, exc)
        self._write_error = str(exc)

    def problem(self) -> str | None:
        """Why turns cannot be written now; None while the file takes them.

        Checks what SQLite itself does not notice: a file deleted or replaced
        under the running process (it would go on writing to the unlinked
        inode, and lose everything at restart) or made read-only.
        """
        if self._write_error is not None:
            return f"writes fail: {self._write_error}"
        if self._identity is None or self._read_only:
            return None
        try:
            found = os.stat(self.path)
        except OSError:
            return f"the database file {self.path} is gone"
        if (found.st_dev, found.st_ino) != self._identity:
            return f"the database file {self.path} was replaced"
        return unwritable(self.path)

    def _forget_rows(self) -> None:
        """After writes were undone: no remembered row is known to match the file any more."""
        for recent in self._recent.values():
            recent.row = None

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

    def _live_id(self, db: sqlite3.Connection, key: ConvKey) -> int | None:
        row = db.execute(
            "SELECT id FROM conversations"
            " WHERE tenant = ? AND conversation = ? AND updated_at >= ?",
            (key.tenant, key.conversation, self._cutoff()),
        ).fetchone()
        return None if row is None else int(row[0])

    async def commit(self, turn: TurnCommit, *, wait: bool = True) -> asyncio.Future[Any] | None:
        """Write a turn; with `wait=False`, return once it is queued (see `Store.commit`).

        This process's lookups see a queued turn at once (`Recent`), and its
        other reads wait for it, so the response need not wait for the
        write, which would otherwise add to every turn's latency.
        """
        if self._read_only:
            raise StoreError("the SQLite store is open read-only")
        key, snap, layout = turn.key, turn.snapshot, turn.layout
        # Serialised here, on the caller's side, so a value orjson rejects
        # fails before any transaction starts. With a layout only the rows from
        # `fresh` on are likely to be written; the rest are serialised in the
        # rare case the stored rows turn out not to match.
        state = dumps(snap.state)
        entries = [(e.hash, e.parent, dumps(e.message)) for e in turn.archive]
        first = rows.first_fresh(layout, len(turn.working))
        # With a layout every working message is archived, and its row refers to that,
        # or the conversation's row describes them all (`working_chain`).
        texts = None if layout is not None else [dumps(m) for m in turn.working]
        chain = None if layout is None else dumps([layout.leading, layout.start, layout.hashes[-1]])
        # The first new message's parent: archived, or none (a whole history).
        first_parent = entries[0][1] if entries else ""
        if self._closed:
            raise StoreError("the SQLite store is closed")
        cached = (snap.position, state, snap.created_at)
        remembered = self._remember(key, snap.head, cached)

        def job(db: sqlite3.Connection) -> int:
            now = self._now()
            # An expired conversation that the sweep has not reached yet
            # must not come back to life with its stale snapshots. One this
            # process committed within the TTL (`remembered`) is not expired.
            if not remembered:
                db.execute(
                    "DELETE FROM conversations"
                    " WHERE tenant = ? AND conversation = ? AND updated_at < ?",
                    (key.tenant, key.conversation, self._cutoff()),
                )
            if turn.expected_turns is not None:
                row = db.execute(
                    "SELECT turns FROM conversations WHERE tenant = ? AND conversation = ?",
                    (key.tenant, key.conversation),
                ).fetchone()
                current = 0 if row is None else int(row[0])
                if current != turn.expected_turns:
                    raise Conflict(
                        f"{key.conversation} is at turn {current}, not {turn.expected_turns}"
                    )
            # A new conversation is described by its chain only if this turn archives
            # all of it; an existing one stays described only if it was (see
            # `working_chain` in schema.py).
            # A remembered row is updated by id (`Recent.row`), not looked up.
            recent = self._recent.get(key) if remembered and turn.expected_turns is None else None
            known = recent.row if recent is not None else None
            if known is not None:
                cid, turns, described = known[0], known[1] + 1, chain if known[2] else None
                values = (snap.head, snap.position, state, turns, now, described, cid)
                if db.execute(UPDATE_CONVERSATION, values).rowcount != 1:
                    known = None  # cannot happen while `_recent` is valid; looked up, then
            if known is None:
                cid, turns, described = db.execute(
                    UPSERT_CONVERSATION,
                    (
                        key.tenant,
                        key.conversation,
                        snap.head,
                        snap.position,
                        state,
                        now,
                        chain if first_parent == "" else None,
                        chain,
                    ),
                ).fetchall()[0]
            hidden = 0
            if not remembered and turns > 1:
                (highest,) = db.execute(
                    "SELECT MAX(position) FROM snapshots WHERE conversation_id = ?", (cid,)
                ).fetchone()
                hidden = int(highest or 0)
            db.executemany(
                "INSERT OR IGNORE INTO messages (conversation_id, hash, parent, message)"
                " VALUES (?, ?, ?, ?)",
                [(cid, h, parent, message) for h, parent, message in entries],
            )
            # A row this process remembers was deleted by nobody since (see
            # `Recent.row`), so the chain it describes still starts in the archive.
            if (
                described is not None
                and first_parent
                and known is None
                and not rows.archived(db, cid, first_parent)
            ):
                # Turns of an earlier life of this conversation (deleted or expired
                # since this turn's lookup): its chain lacks its start for good.
                db.execute("UPDATE conversations SET working_chain = NULL WHERE id = ?", (cid,))
                described = None
            if described is None:
                rows.write_working(db, cid, turn, first, texts)
            db.execute(
                UPSERT_SNAPSHOT, (cid, snap.head, snap.position, state, snap.created_at, turns)
            )
            if turns > self._max_snapshots:  # one snapshot a turn: fewer need no pruning
                db.execute(PRUNE_SNAPSHOTS, (cid, cid, self._max_snapshots))
            if self._here is not None:  # `_recent` is the loop thread's
                recent = self._recent.get(key)
                if recent is not None:
                    recent.row = (cid, turns, described is not None)
            return hidden

        size = len(state) + sum(len(e[2]) for e in entries)
        written = self._batched(job, size=size)
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
            # Scan from the end: the newest turn's head is usually the last
            # or second-to-last message, so one query settles it. A chunk
            # matches at most `max_snapshots` rows, so reading them whole is cheap.
            # No read transaction: a commit landing between two chunks can only
            # add a head this scan has passed, as if the scan had come first.
            for end, size in rows.chunks(len(heads)):
                chunk = heads[max(0, end - size) : end]
                marks = ",".join("?" * len(chunk))
                sql = f"{SELECT_SNAPSHOTS} AND s.head IN ({marks})"
                params = (key.tenant, key.conversation, self._cutoff(), *chunk)
                found = {row[0]: row for row in db.execute(sql, params)}
                for head in reversed(chunk):
                    if head in found:
                        _, position, state, created_at = found[head]
                        return Snapshot(head, position, loads(state), created_at)
            return None

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
        if row is None:
            hidden = 0
        elif row[0] < self._cutoff():
            return
        else:
            hidden = int(row[1] or 0)
        self._recent[key] = Recent(hidden=hidden, updated_at=self._now())

    def _unchanged(self) -> bool:
        """Whether nobody but this process's groups committed since its last group.

        Asked of the writing connection, the only one whose data version its
        own groups leave alone; between groups it holds no transaction.
        """
        here = self._here
        if here is None or self._closed:
            return False
        if self._unchanged_now:
            return True
        try:
            unchanged = int(here.execute(DATA_VERSION).fetchone()[0]) == self._version
        except sqlite3.Error:
            return False
        if unchanged:
            # Trusted until the loop's callbacks queued after this one run: a
            # turn served meanwhile was asked for before this check, so any
            # commit that preceded it (another replica's answer) shows here.
            # Lookups of concurrent requests share a check rather than each paying its SQL.
            self._unchanged_now = True
            asyncio.get_running_loop().call_soon(self._recheck)
        return unchanged

    def _recheck(self) -> None:
        self._unchanged_now = False

    async def latest(self, key: ConvKey) -> Conversation | None:
        def job(db: sqlite3.Connection) -> Conversation | None:
            row = db.execute(
                "SELECT id, head, position, state, turns, created_at, updated_at, working_chain"
                " FROM conversations WHERE tenant = ? AND conversation = ? AND updated_at >= ?",
                (key.tenant, key.conversation, self._cutoff()),
            ).fetchone()
            if row is None:
                return None
            cid, head, position, state, turns, created_at, updated_at, described = row
            if described is None:
                texts = [m for (m,) in db.execute(SELECT_WORKING, (cid,))]
            else:
                texts = rows.working_of_chain(db, cid, position, loads(described))
            if None in texts:
                raise sqlite3.DatabaseError("a working row refers to a missing archive row")
            working = [loads(m) for m in texts]
            return Conversation(
                key, head, position, loads(state), working, turns, created_at, updated_at
            )

        return await self._run(lambda db: rows.read(db, lambda: job(db)))

    async def archive(
        self, key: ConvKey, *, limit: int = 1000, offset: int = 0
    ) -> list[ArchivedMessage]:
        def job(db: sqlite3.Connection) -> list[ArchivedMessage]:
            cid = self._live_id(db, key)
            if cid is None:
                return []
            rows = db.execute(
                "SELECT hash, parent, message, seq FROM messages WHERE conversation_id = ?"
                " ORDER BY seq LIMIT ? OFFSET ?",
                (cid, max(0, limit), max(0, offset)),
            )
            return [ArchivedMessage(h, parent, loads(m), seq) for h, parent, m, seq in rows]

        return await self._run(lambda db: rows.read(db, lambda: job(db)))

    async def _indexed(
        self, key: ConvKey, op: Callable[[sqlite3.Connection, int], T], none: T
    ) -> T:
        def job(db: sqlite3.Connection) -> T:
            cid = self._live_id(db, key)
            if cid is None:
                return none
            last, _ = search.progress(db, cid)
            rows = db.execute(
                "SELECT seq, hash, message FROM messages WHERE conversation_id = ? AND seq > ?"
                " ORDER BY seq",
                (cid, last),
            ).fetchall()
            search.add(db, cid, [(seq, h, loads(m)) for seq, h, m in rows])
            return op(db, cid)

        return await self._run(lambda db: rows.write(db, lambda: job(db)))

    async def delete(self, key: ConvKey) -> bool:
        if self._read_only:
            raise StoreError("the SQLite store is open read-only")

        def job(db: sqlite3.Connection) -> bool:
            existed = self._live_id(db, key) is not None
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
        where = "WHERE c.updated_at >= ?" + ("" if tenant is None else " AND c.tenant = ?")
        sql = f"{LIST_CONVERSATIONS} {where} ORDER BY c.updated_at DESC, c.id DESC LIMIT ? OFFSET ?"

        def job(db: sqlite3.Connection) -> list[ConversationSummary]:
            params: tuple[Any, ...] = (self._cutoff(),) + (() if tenant is None else (tenant,))
            rows = db.execute(sql, (*params, max(0, limit), max(0, offset)))
            return [
                ConversationSummary(ConvKey(t, c), turns, pos, count, created, updated)
                for t, c, turns, pos, created, updated, count in rows
            ]

        return await self._run(job)

    async def ping(self) -> None:
        await self._run(lambda db: db.execute("SELECT 1").fetchone())
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
        if self._here is not None:
            self._here.close()
            self._here = None
        loop = asyncio.get_running_loop()
        if self._checkpoints is not None:  # a waiting checkpoint runs now, not in a second
            await self._checkpoints.close()
        # The writer closes last: the last connection to close checkpoints and removes the WAL.
        await loop.run_in_executor(self._executor, db.close)
        self._executor.shutdown(wait=False)


def unwritable(path: str) -> str | None:
    """Which of the database's files exists but cannot be written, said as a problem.

    SQLite maps the `-shm` file into memory; one it cannot write makes every
    write fail, or worse, so it is checked with the database file itself.
    """
    for name in (path, path + "-wal", path + "-shm"):
        if os.path.exists(name) and not os.access(name, os.W_OK):
            return f"the database file {name} is not writable"
    return None


@dataclass(frozen=True, slots=True)
class _Job:
    job: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    size: int  # bytes of text written, which the WAL will hold until a checkpoint


def _settle(jobs: list[_Job], results: list[tuple[bool, Any]]) -> None:
    for job, (ok, value) in zip(jobs, results, strict=True):
        if job.future.done():  # the caller was cancelled; the job ran all the same
            continue
        if ok:
            job.future.set_result(value)
        elif isinstance(value, sqlite3.Error):
            error = StoreError(f"SQLite: {value}")
            error.__cause__ = value
            job.future.set_exception(error)
        else:
            job.future.set_exception(value)


def _first_bytes(jobs: list[_Job], limit: int) -> list[_Job]:
    """The leading jobs whose text stays within `limit` bytes, and at least one."""
    size = 0
    for i, job in enumerate(jobs):
        size += job.size
        if size > limit and i > 0:
            return jobs[:i]
    return list(jobs)
