"""The embedded default store: one SQLite file, survives restarts, no server to run.

Turns (`commit`) are written by a writer process of the store's own
(`proxy.store.writer`), grouped: the turns queued before a group is sent
share one transaction there (one savepoint each only if one fails). On the
event loop's thread the SQL of a turn was the proxy's largest cost after
HTTP (0.13 of 0.95 CPU ms a small request at 32 at a time); a thread did
not help (each statement hands the GIL to and from the busy loop). The
loop now only pickles a group and reads back its results. A worker thread
runs what may be slow (listings, deletes, search indexing, the expiry
sweep). The lookup every full-history request makes first
(`find_snapshot`) runs on the loop's thread, on a read-only connection of
its own: a few indexed reads that WAL never makes wait. (aiosqlite puts a
thread behind every connection; here the thread is kept for what can wait.)

A full-history turn is written after its answer went out (`commit(...,
wait=False)`): the process keeps the snapshots it committed, queued ones
included, in memory (`_Recent`) and answers its own next lookup from there,
and every other read of this process waits for the queued turns. Whether
someone else (another replica, an operator's delete, the sweep) changed
snapshots since is one read of `PRAGMA data_version` while nobody committed
at all, and one more of `last_writer` (migration m008) when someone did: the
writer names itself there after each group, with the number of groups at
whose start it found another's commit, and anyone else's write clears the
name. So a replica never answers from a memory another one made stale. At
one request at a time, writing before answering cost 0.2-0.4 ms of every turn.

Checkpoints (copying the WAL back into the database file, with an fsync)
are the writer's, between groups, never inside a turn's commit: SQLite's
automatic checkpoint ran in whichever commit crossed 1,000 pages, and that
turn's answer waited for the fsync (p99 10 ms against a p50 of 1.7 ms at
one request at a time; 3.5 ms without).

WAL lets readers in other processes (the `sqlite3` shell, a second replica
on the same disk) read while a turn is being written; each write takes the
lock up front with `BEGIN IMMEDIATE`, so two writers wait on the busy
timeout instead of failing half way.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
    WorkingLayout,
    dumps,
    loads,
)
from proxy.store.schema import (
    DATA_VERSION,
    DELETE_IDLE,
    LAST_WRITER,
    LIST_CONVERSATIONS,
    LIVE_POSITION,
    SELECT_SNAPSHOTS,
    SELECT_WORKING,
    WALK_CHAIN,
    migrate,
)
from proxy.store.writer import (
    CHECKPOINT_EVERY_S,
    CHECKPOINT_PAGES,
    Result,
    TurnRow,
    Writer,
    connect,
    frame,
    frames,
)

T = TypeVar("T")
log = logging.getLogger("context_proxy.store")

# Well under SQLite's bound-parameter limit (999 on old builds).
_IN_CHUNK = 500
# The newest turn's head is nearly always among the last few messages.
_FIRST_CHUNK = 8
# Text a group holds at most (one turn may exceed it).
GROUP_BYTES = 1 << 20
# This process's own recent turns, kept to answer `find_snapshot` without the
# file (see `_Recent`): snapshots per conversation, and the bytes of their
# states (plus 200 a snapshot for the rest) that all conversations may hold.
RECENT_SNAPSHOTS = 8
RECENT_BYTES = 32 << 20
# Up to this many, the texts of the working messages before a turn's fresh ones
# are sent with it whether or not the writer will need them (see `commit`):
# cheaper than making sure (a few us against 6-12).
_TEXTS_ANYWAY = 8
# Where the writer process finds the `proxy` package.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class SqliteStore(search.Searchable):
    """Conversations in a SQLite file at `path` (":memory:" works, but forgets on close).

    Conversations with no commit for `ttl_s` seconds read as absent at once
    and are deleted by a sweep at open and then at most every
    `sweep_interval_s` (checked on commit). `ttl_s <= 0` disables expiry.
    `now` is injectable so tests can move time without sleeping. A
    checkpoint is due after `checkpoint_pages` of WAL or `checkpoint_every_s`
    after a write (see `proxy.store.writer`).
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
        checkpoint_pages: int = CHECKPOINT_PAGES,
        checkpoint_every_s: float = CHECKPOINT_EVERY_S,
    ) -> None:
        self.path = path
        self._checkpoints = (checkpoint_pages, checkpoint_every_s)
        self._ttl_s = ttl_s
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
        self._file = path != ":memory:" and not path.startswith("file:")
        # The writer: a process (`_pipe`) for a file, else a `Writer` on the worker thread.
        self._token = uuid.uuid4().hex
        self._pipe: _Pipe | None = None
        self._local: Writer | None = None
        # See `_Recent`. Valid while the reader's data version reads `_version`,
        # or `last_writer` names this store's writer with `_foreign` (`_unchanged`).
        self._recent: LRUCache[ConvKey, _Recent] = LRUCache(RECENT_BYTES, getsizeof=_weight)
        self._version = -1
        self._foreign = 0
        # The last turn of each conversation queued and not yet written (a
        # conversation's turns are written in order, so waiting for it waits for all).
        self._queued: dict[ConvKey, asyncio.Future[Any]] = {}
        try:
            self._executor.submit(self._open).result()
            if self._file:
                self._reader = self._open_reader()
                self._version = int(self._reader.execute(DATA_VERSION).fetchone()[0])
        except sqlite3.Error as exc:
            self._executor.shutdown(wait=False)
            self._closed = True
            raise StoreError(f"cannot open SQLite store at {path!r}: {exc}") from exc

    def _open_reader(self) -> sqlite3.Connection:
        """A read-only connection for the lookups each request makes before going upstream.

        They are a few indexed reads, which under WAL never wait for a
        writer, so they run on the caller's thread: a hop to the worker and
        back cost more than the reads. Only the event loop's thread uses it.
        """
        reader = sqlite3.connect(
            self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        reader.execute("PRAGMA query_only=ON")
        return reader

    def _open(self) -> None:
        db = connect(self.path, self._busy_timeout_s)
        try:
            migrate(db)
        except BaseException:
            db.close()
            raise
        self._db = db
        if not self._file:  # only this connection sees the database
            self._local = Writer(db, token=self._token, max_snapshots=self._max_snapshots)
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

    def _batched(self, row: TurnRow) -> asyncio.Future[tuple[int, bool]]:
        """Write `row` in the next group of turns: one transaction for all.

        Under load, turns of many conversations arrive together; committing
        each alone cost more than the SQL itself. The turns queued before
        the group is sent go together, in order.
        """
        if self._closed or self._db is None:
            raise StoreError("the SQLite store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, bool]] = loop.create_future()
        with self._queue_lock:
            self._queue.append(_Job(row, future))
            first = len(self._queue) == 1
        if first:
            if self._file:
                loop.call_soon(self._send, loop)
            else:
                self._executor.submit(self._drain, loop)
        return future

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the event loop's thread: send the queued turns to the writer, GROUP_BYTES a frame."""
        while self._queue:
            jobs = _first_bytes(self._queue, GROUP_BYTES)
            del self._queue[: len(jobs)]
            if self._closed:
                _settle(jobs, [(False, ("error", "the SQLite store is closed"))] * len(jobs))
                continue
            try:
                if self._pipe is None or self._pipe.loop is not loop:
                    self._pipe = _Pipe.start(self, loop)
                self._pipe.send(jobs)
            except OSError as exc:
                _settle(jobs, [(False, ("error", f"the SQLite writer: {exc}"))] * len(jobs))

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the worker thread (no file): write every queued turn, commit once, settle them."""
        with self._queue_lock:
            jobs, self._queue = self._queue, []
        if not jobs:
            return
        writer = self._local
        results: list[Result]
        if writer is None or self._closed:
            results = [(False, ("error", "the SQLite store is closed"))] * len(jobs)
        else:
            results = writer.group([j.row for j in jobs])
        with contextlib.suppress(RuntimeError):  # the loop closed while the group ran
            loop.call_soon_threadsafe(self._written_group, jobs, results)

    def _written_group(self, jobs: list[_Job], results: list[Result]) -> None:
        """On the event loop's thread: settle a group's turns; a sweep, if one is due."""
        _settle(jobs, results)
        if self._now() - self._last_sweep >= self._sweep_interval_s and not self._closed:
            # The turns are committed already; a failed sweep is retried next time.
            self._last_sweep = self._now()
            with contextlib.suppress(RuntimeError):  # shut down meanwhile
                self._executor.submit(self._sweep_quietly)

    def _sweep_quietly(self) -> None:
        if self._db is not None and not self._closed:
            with contextlib.suppress(sqlite3.Error):
                self._sweep(self._db)

    def _cutoff(self) -> float:
        return self._now() - self._ttl_s if self._ttl_s > 0 else float("-inf")

    def _sweep(self, db: sqlite3.Connection) -> None:
        self._last_sweep = self._now()
        if self._ttl_s > 0:
            _write(db, lambda: db.execute(DELETE_IDLE, (self._cutoff(),)))

    def _live_id(self, db: sqlite3.Connection, key: ConvKey) -> int | None:
        row = db.execute(
            "SELECT id FROM conversations"
            " WHERE tenant = ? AND conversation = ? AND updated_at >= ?",
            (key.tenant, key.conversation, self._cutoff()),
        ).fetchone()
        return None if row is None else int(row[0])

    async def commit(self, turn: TurnCommit, *, wait: bool = True) -> asyncio.Future[Any] | None:
        """Write a turn; with `wait=False`, return once it is queued (see `Store.commit`).

        This process's lookups see a queued turn at once (`_Recent`), and its
        other reads wait for it, so the response need not wait for the
        write: at one request at a time that was 0.2-0.4 ms of every turn.
        """
        key, snap, layout = turn.key, turn.snapshot, turn.layout
        # Serialised here, on the caller's side, so a value orjson rejects
        # fails before anything is queued.
        state = dumps(snap.state)
        entries = [(e.hash, e.parent, dumps(e.message)) for e in turn.archive]
        first = _first_fresh(layout, len(turn.working))
        # With a layout every working message is archived, and its row refers to that,
        # or the conversation's row describes them all (`m005_working_chain`).
        chain = None if layout is None else dumps([layout.leading, layout.start, layout.hashes[-1]])
        if self._closed:
            raise StoreError("the SQLite store is closed")
        cached = (snap.position, state, snap.created_at)
        recent = self._remember(key, snap.head, cached)
        remembered = recent is not None
        texts: list[str] | None = None
        if layout is None:
            texts = [dumps(m) for m in turn.working]
        elif first and (
            recent is None
            or not recent.described
            or first <= _TEXTS_ANYWAY
            or not self._unchanged()
        ):
            # The writer may (re)write the working rows, those before the fresh
            # ones with their own text: the conversation is not known to be
            # described by its chain, or someone else wrote since (it may have
            # been deleted, archive and all, during this turn's upstream call).
            texts = [dumps(m) for m in turn.working[:first]]
        now = self._now()
        row = TurnRow(
            key.tenant,
            key.conversation,
            snap.head,
            snap.position,
            state,
            snap.created_at,
            now,
            now - self._ttl_s if self._ttl_s > 0 else float("-inf"),
            turn.expected_turns,
            remembered,
            entries,
            chain,
            layout,
            first,
            texts,
            len(state) + sum(len(e[2]) for e in entries),
        )
        written = self._batched(row)
        written.add_done_callback(
            lambda done: self._written(key, snap.head, cached, remembered, done)
        )
        self._queued[key] = written
        if wait:
            await written
            return None
        return written

    async def flush(self) -> None:
        """Return once every turn queued so far is written (or failed to be).

        Turns queued from an event loop that has ended since are not waited
        for: nothing would ever settle them (their writer may have had them).
        """
        if self._queued:
            loop = asyncio.get_running_loop()
            pending = [f for f in self._queued.values() if f.get_loop() is loop]
            if pending:
                await asyncio.wait(pending)

    def _remember(self, key: ConvKey, head: str, cached: tuple[int, str, float]) -> _Recent | None:
        """Add a queued turn's snapshot to `_recent`; None if the conversation is not there."""
        if self._reader is None:
            return None
        recent = self._recent.get(key)
        if recent is None:
            return None
        if recent.updated_at < self._cutoff():  # expired: the commit deletes what it knew
            del self._recent[key]
            return None
        self._add(key, recent, head, cached)
        return recent

    def _add(
        self, key: ConvKey, recent: _Recent, head: str, cached: tuple[int, str, float]
    ) -> None:
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
        if self._reader is None:
            return
        hidden, described = done.result()
        recent = self._recent.get(key)
        if remembered:
            if recent is not None:
                recent.described = described
            return
        recent = recent or _Recent(hidden=hidden, updated_at=self._now())
        recent.described = described
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
            for end, size in _chunks(len(heads)):
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
        lookup need not wait for it to be written: 32 long conversations
        starting at once each wrote 400 KB, and their second turns waited
        up to 0.3 s for that. Trusted only if nobody but this process wrote
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
        self._recent[key] = _Recent(hidden=hidden, updated_at=self._now())

    def _unchanged(self) -> bool:
        """Whether nobody but this store's writer committed since `_recent` was last trusted.

        The reader's data version moves for every commit, the writer's
        included; when it has moved, `last_writer` tells whose the last one
        was, and the writer's count of groups that found another's commit
        before them tells about the ones before (see migration m008). The
        version is read first: a commit between the two reads is checked
        again next time. Anything else forgets all of `_recent`.
        """
        reader = self._reader
        if reader is None or self._closed:
            return False
        try:
            version = int(reader.execute(DATA_VERSION).fetchone()[0])
            if version == self._version:
                return True
            row = reader.execute(LAST_WRITER).fetchone()
        except sqlite3.Error:
            return False
        self._version = version
        if row is not None and row[0] == self._token:
            if row[1] == self._foreign:
                return True
            self._foreign = int(row[1])
        self._recent.clear()
        return False

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
                texts = _working_of_chain(db, cid, position, loads(described))
            if None in texts:
                raise sqlite3.DatabaseError("a working row refers to a missing archive row")
            working = [loads(m) for m in texts]
            return Conversation(
                key, head, position, loads(state), working, turns, created_at, updated_at
            )

        return await self._run(lambda db: _read(db, lambda: job(db)))

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

        return await self._run(lambda db: _read(db, lambda: job(db)))

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

        return await self._run(lambda db: _write(db, lambda: job(db)))

    async def delete(self, key: ConvKey) -> bool:
        def job(db: sqlite3.Connection) -> bool:
            existed = self._live_id(db, key) is not None
            db.execute(
                "DELETE FROM conversations WHERE tenant = ? AND conversation = ?",
                (key.tenant, key.conversation),
            )
            return existed

        self._recent.pop(key, None)
        return await self._run(lambda db: _write(db, lambda: job(db)))

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

    async def close(self) -> None:
        await self.flush()  # queued turns are written before the store closes
        if self._closed or self._db is None:
            return
        db, self._closed = self._db, True
        if self._reader is not None:
            self._reader.close()
        loop = asyncio.get_running_loop()
        if self._pipe is not None:
            self._pipe.detach()
            # The writer closes first: the last connection to close checkpoints
            # and removes the WAL, and that is the worker's, below.
            await loop.run_in_executor(self._executor, self._pipe.close)
            self._pipe = None
        await loop.run_in_executor(self._executor, db.close)
        self._executor.shutdown(wait=False)


class _Pipe:
    """The writer process of one store, and the socket its frames go through.

    Frames are answered in order, so the groups sent wait in `inflight`.
    Sending never blocks the loop: what the socket does not take at once
    waits in `out` until it is writable. Results are read by a thread of
    their own, blocked in `recv`, which hands each frame to the loop (one
    wake-up a group). If the writer dies, its groups fail (their turns may
    or may not be written) and the next group starts another.
    """

    def __init__(
        self,
        store: SqliteStore,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        process: subprocess.Popen[bytes],
    ) -> None:
        self.store = store
        self.loop = loop
        self.sock = sock
        self.process = process
        self.inflight: collections.deque[list[_Job]] = collections.deque()
        self.out = bytearray()
        self.open = True
        # A store dropped without `close` still ends its writer (which writes
        # what it received first) and reaps it.
        self.end = weakref.finalize(self, _end_writer, sock, process)
        results = sock.dup()
        results.setblocking(True)
        threading.Thread(
            target=_read_results,
            args=(results, loop, weakref.WeakMethod(self._answered)),
            name="store-sqlite-results",
            daemon=True,
        ).start()

    @classmethod
    def start(cls, store: SqliteStore, loop: asyncio.AbstractEventLoop) -> _Pipe:
        if store._pipe is not None:  # another loop's: its groups are answered there
            store._pipe.detach()
        ours, theirs = socket.socketpair()
        try:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p
            )
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys; from proxy.store.writer import main; sys.exit(main(sys.argv[1:]))",
                    str(theirs.fileno()),
                    store.path,
                    store._token,
                    str(store._max_snapshots),
                    str(store._busy_timeout_s),
                    *map(str, store._checkpoints),
                ],
                pass_fds=[theirs.fileno()],
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        return cls(store, loop, ours, process)

    def send(self, jobs: list[_Job]) -> None:
        if not self.open:
            raise OSError("the writer process has exited")
        data = frame([j.row for j in jobs])
        self.inflight.append(jobs)
        if self.out:
            self.out += data
            return
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._answered(None)
            return
        if sent < len(data):
            self.out += memoryview(data)[sent:]
            self.loop.add_writer(self.sock.fileno(), self._writable)

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self.out)
        except BlockingIOError:
            return
        except OSError:
            self._answered(None)
            return
        del self.out[:sent]
        if not self.out:
            self.loop.remove_writer(self.sock.fileno())

    def _answered(self, results: list[Result] | None) -> None:
        """On the loop's thread: a group's results, or None: the writer is gone."""
        if results is not None:
            if self.inflight:
                self.store._written_group(self.inflight.popleft(), results)
            return
        if not self.open:
            return
        log.warning("the SQLite writer process exited (code %s)", self.process.poll())
        self.detach()
        while self.inflight:
            jobs = self.inflight.popleft()
            _settle(jobs, [(False, ("error", "the SQLite writer process exited"))] * len(jobs))
        if self.store._pipe is self:
            self.store._pipe = None

    def detach(self) -> None:
        """Take no more groups (the socket stays open until `close`)."""
        if self.open:
            self.open = False
            if self.out and not self.loop.is_closed():
                self.loop.remove_writer(self.sock.fileno())

    def close(self) -> None:
        """On the worker thread, after every group was answered: end the writer and wait for it."""
        self.end()


def _read_results(
    sock: socket.socket,
    loop: asyncio.AbstractEventLoop,
    answered: weakref.WeakMethod[Callable[[list[Result] | None], None]],
) -> None:
    """The results thread: each frame the writer sends, to the loop; None once it hangs up."""
    buffer = bytearray()
    try:
        while True:
            try:
                chunk = sock.recv(1 << 20)
            except OSError:
                chunk = b""
            buffer += chunk
            batch: list[list[Result] | None] = list(frames(buffer)) if chunk else [None]
            callback = answered()
            if callback is None:
                return
            for results in batch:
                loop.call_soon_threadsafe(callback, results)
            del callback
            if not chunk:
                return
    except RuntimeError:  # the loop is closed
        return
    finally:
        sock.close()


def _end_writer(sock: socket.socket, process: subprocess.Popen[bytes]) -> None:
    """Hang up on a writer, which then writes what it received and exits; wait for it."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    sock.close()


def _weight(recent: _Recent) -> int:
    return recent.weight


@dataclass(slots=True)
class _Recent:
    """The newest snapshots this process committed for one conversation, queued ones included.

    The file may hold older ones too; `hidden` is the highest position among
    those (0: there are none), so a head matched at a later position is the
    one the file's lookup would return: a head's position is its index in
    the history plus one, and the lookup returns the match latest in it.
    Trusted only while the writing connection's data version shows no other writer.
    """

    hidden: int
    updated_at: float
    snapshots: dict[str, tuple[int, str, float]] = field(default_factory=dict)  # oldest first
    # Roughly its bytes: 200 for itself and for each snapshot, and the snapshots'
    # states. Never 0, so that conversations looked up but never committed
    # (their upstream failed, say) also count against the budget. Kept as
    # snapshots come and go, because the cache weighs an entry at every turn.
    weight: int = 200
    # Whether the last turn written left the working history described by its
    # chain (no working rows; see m005); None: not known yet.
    described: bool | None = None

    def add(self, head: str, cached: tuple[int, str, float], now: float, limit: int) -> None:
        snapshots = self.snapshots
        self._drop(head)
        snapshots[head] = cached
        self.weight += len(cached[1]) + 200
        while len(snapshots) > limit:
            oldest = next(iter(snapshots))
            self.hidden = max(self.hidden, snapshots[oldest][0])
            self._drop(oldest)
        self.updated_at = now

    def _drop(self, head: str) -> None:
        dropped = self.snapshots.pop(head, None)
        if dropped is not None:
            self.weight -= len(dropped[1]) + 200

    def find(self, heads: Sequence[str]) -> Snapshot | None:
        """The match latest in `heads` past `hidden`; None: none there (look in the file)."""
        snapshots = self.snapshots
        for i in range(len(heads) - 1, self.hidden - 1, -1):
            found = snapshots.get(heads[i])
            if found is not None:
                position, state, created_at = found
                return Snapshot(heads[i], position, loads(state), created_at)
        return None


@dataclass(frozen=True, slots=True)
class _Job:
    row: TurnRow
    future: asyncio.Future[tuple[int, bool]]


def _settle(jobs: list[_Job], results: list[Result]) -> None:
    for job, (ok, value) in zip(jobs, results, strict=True):
        if job.future.done():  # the caller was cancelled; the job ran all the same
            continue
        if ok:
            job.future.set_result(value)
        else:
            kind, message = value
            if kind == "conflict":
                job.future.set_exception(Conflict(message))
            else:
                job.future.set_exception(
                    StoreError(f"SQLite: {message}" if kind == "sqlite" else message)
                )


def _first_bytes(jobs: list[_Job], limit: int) -> list[_Job]:
    """The leading jobs whose text stays within `limit` bytes, and at least one."""
    size = 0
    for i, job in enumerate(jobs):
        size += job.row.size
        if size > limit and i > 0:
            return jobs[:i]
    return list(jobs)


def _chunks(n: int) -> list[tuple[int, int]]:
    """(end, size) of the slices of n heads to look up, newest first: a small one, then big ones."""
    out: list[tuple[int, int]] = []
    end, size = n, _FIRST_CHUNK
    while end > 0:
        out.append((end, size))
        end, size = end - size, _IN_CHUNK
    return out


def _first_fresh(layout: WorkingLayout | None, n: int) -> int:
    """Index of the first working message at or after `layout.fresh`: the ones a commit writes."""
    if layout is None:
        return 0
    if layout.fresh <= layout.leading:
        return min(layout.fresh, n)
    return max(layout.leading, min(n, layout.leading + layout.fresh - layout.start))


def _working_of_chain(
    db: sqlite3.Connection, cid: int, position: int, described: list[Any]
) -> list[str | None]:
    """The working messages `conversations.working_chain` describes, read from the archive.

    The chain is walked from its last message back to the first (one index
    lookup a message, in SQLite), at most as many as the head's position and
    the answer after it.
    """
    leading, start, last = described
    rows = db.execute(WALK_CHAIN, (cid, last, position + 2)).fetchall()
    if not rows or rows[0][0] != "":
        raise sqlite3.DatabaseError("the archived chain of the working history is incomplete")
    texts = [message for _, message in rows]
    return [*texts[:leading], *texts[start:]]


def _write(db: sqlite3.Connection, body: Callable[[], T]) -> T:
    """`body` in one write transaction, undone on error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        result = body()
    except BaseException:
        # SQLite has already rolled back after some errors (disk full, I/O).
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return result


def _read(db: sqlite3.Connection, body: Callable[[], T]) -> T:
    """Several SELECTs in one read transaction see one consistent state of the file."""
    db.execute("BEGIN")
    try:
        return body()
    finally:
        db.execute("COMMIT")
