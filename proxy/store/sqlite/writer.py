"""`Writer`: turns written in groups, one transaction a group, on the loop's thread or a worker.

Under load, turns of many conversations arrive together; committing each
alone costs more than the SQL itself. Jobs queued before a group runs are
run together, in order, each undone alone if it fails (a `Conflict`), and
their futures settled with what they returned or raised. The store says
what a job does and what follows a group (`GroupHooks`); this module owns
the queue, the lock discipline and the write errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from proxy.store.base import StoreError, standing
from proxy.store.schema import DATA_VERSION

from . import rows

T = TypeVar("T")
log = logging.getLogger("context_proxy.store")

# Text a group written from the loop holds at most; a turn with more is written alone,
# on the worker, so that the loop goes on serving meanwhile.
GROUP_BYTES = 1 << 20
# While another connection holds the write lock, the loop tries again this often.
LOCK_RETRY_S = 0.005


class GroupHooks(Protocol):
    """What the store does around a group of its jobs."""

    def group_begins(self, version: int) -> None:
        """On the loop's connection, under the write lock: the file's data version."""
        ...

    def rows_undone(self) -> None:
        """Jobs that ran were rolled back: nothing they wrote is in the file."""
        ...

    def group_written(self, jobs: int, size: int) -> None:
        """A group of `jobs` jobs and `size` bytes of text committed."""
        ...


@dataclass(frozen=True, slots=True)
class _Job:
    job: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    size: int  # bytes of text written, which the WAL will hold until a checkpoint


@dataclass(slots=True)
class _Ran:
    """What a group did, for the loop's thread to settle: the hooks touch the store's
    memory, which only that thread uses."""

    results: list[tuple[bool, Any]]
    jobs: list[_Job]
    undone: bool = False  # jobs ran and were rolled back
    failed: sqlite3.Error | None = None  # the group could not be written
    written: bool = False  # the group committed


class Writer:
    """Runs the store's write jobs in groups.

    `here` is the connection of the event loop's thread (busy timeout 0),
    None for a file only a worker may write (":memory:", a URI); `worker`
    gives the worker thread's connection, whose jobs run on `executor`.
    `error` says why the last group could not be written (None: it was);
    a group that commits clears it, so health follows the file's.
    """

    def __init__(
        self,
        path: str,
        here: sqlite3.Connection | None,
        worker: Callable[[], sqlite3.Connection | None],
        executor: ThreadPoolExecutor,
        busy_timeout_s: float,
        hooks: GroupHooks,
        backoff_s: float = 30.0,
    ) -> None:
        self.path = path
        self._backoff_s = backoff_s
        self.here = here
        self.error: str | None = None
        self._failed_at = float("-inf")  # `time.monotonic()` of the last group that failed
        self._worker = worker
        self._executor = executor
        self._busy_timeout_s = busy_timeout_s
        self._hooks = hooks
        self._queue: list[_Job] = []
        self._queue_lock = threading.Lock()  # the worker takes the queue from its thread
        self._locked_since: float | None = None  # the loop's groups wait for another's lock
        self._away = False  # a large job runs on the worker: the loop's groups wait for it
        self._closed = False

    def submit(self, job: Callable[[sqlite3.Connection], T], *, size: int) -> asyncio.Future[T]:
        """Run `job` in the next group of jobs: one transaction for all."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._queue_lock:
            self._queue.append(_Job(job, future, size))
            first = len(self._queue) == 1
        if first:
            if self.here is not None:
                loop.call_soon(self._drain_here, loop)
            else:
                self._executor.submit(self._drain, loop)
        return future

    def close(self) -> None:
        self._closed = True
        if self.here is not None:
            self.here.close()
            self.here = None

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
        in order, and fails after the store's busy timeout. Turns queued
        meanwhile wait (with their answers' ends, under several workers); a
        thread waiting on the lock would be slow under load, each statement
        waiting for the GIL. Only this thread drains a queue that has a
        loop connection, so the queue's lock is not needed here.
        """
        db = self.here
        if self._away or not self._queue:
            return  # the large job's end drains the rest, in order
        if self._queue[0].size > GROUP_BYTES and not self._closed:
            self._away = True
            self._executor.submit(self._drain_one, loop, self._queue.pop(0))
            return
        jobs = _first_bytes(self._queue, GROUP_BYTES)
        del self._queue[: len(jobs)]
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
            self._finish(self._run_group(db, jobs, here=True))
        if self._queue:  # the rest after the loop has served others
            loop.call_soon(self._drain_here, loop)

    def _drain_one(self, loop: asyncio.AbstractEventLoop, job: _Job) -> None:
        """On the worker thread: a job too large for the loop, alone in its transaction.

        SQLite works without the GIL, and Python's own steps give it up every
        few milliseconds, so the loop goes on serving while it runs. Its commit
        moves the loop connection's data version, so the store forgets what it
        remembers of the file before the loop's next group.
        """
        ran = self._on_worker([job])
        with contextlib.suppress(RuntimeError):  # the loop closed while the job ran
            loop.call_soon_threadsafe(self._back, loop, ran)

    def _back(self, loop: asyncio.AbstractEventLoop, ran: _Ran) -> None:
        self._away = False
        self._finish(ran)
        if self._queue:
            loop.call_soon(self._drain_here, loop)

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the worker thread: run every queued job, commit once, settle their futures."""
        with self._queue_lock:
            jobs, self._queue = self._queue, []
        ran = self._on_worker(jobs) if jobs else _Ran([], jobs)
        with contextlib.suppress(RuntimeError):  # the loop closed while the group ran
            loop.call_soon_threadsafe(self._finish, ran)

    def _on_worker(self, jobs: list[_Job]) -> _Ran:
        """On the worker thread: `jobs` in one transaction of the worker's connection; any
        failure becomes theirs, so the loop always hears back and writing goes on."""
        try:
            db = self._worker()
            if db is None:
                raise sqlite3.ProgrammingError("the SQLite store is closed")
            db.execute("BEGIN IMMEDIATE")
            return self._run_group(db, jobs, here=False)
        except BaseException as exc:
            return _Ran([(False, exc)] * len(jobs), jobs)

    def _run_group(self, db: sqlite3.Connection, jobs: list[_Job], *, here: bool) -> _Ran:
        """The jobs of one group in the transaction just begun on `db`, each in a savepoint.

        On the loop's connection (`here`), `db`'s data version, read under
        the write lock before the jobs, tells the store whether anyone else
        committed since this process's last group (another connection's
        data version says nothing of the loop's lookups). What else the
        store learns of the group, `_finish` tells it on the loop's thread.
        """
        ran = _Ran([], jobs)

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
                self._hooks.group_begins(int(db.execute(DATA_VERSION).fetchone()[0]))
            # Jobs rarely fail (an append-mode conflict): all of them in one
            # savepoint first, and one savepoint each only to redo a group
            # in which one did. Two statements a job fewer.
            db.execute("SAVEPOINT jobs")
            try:
                results = [(True, j.job(db)) for j in jobs]
            except Exception:
                db.execute("ROLLBACK TO jobs")
                ran.undone = True  # the jobs before the failed one are undone
                if here:  # before the jobs run again (the store's memory is this thread's)
                    self._hooks.rows_undone()
                results = one_by_one()
            db.execute("RELEASE jobs")
            return results

        try:
            ran.results = rows.write(db, run, begun=True)
        except sqlite3.Error as exc:
            ran.undone, ran.failed, ran.results = True, exc, [(False, exc)] * len(jobs)
            return ran
        ran.written = True
        return ran

    def _finish(self, ran: _Ran) -> None:
        """On the loop's thread: tell the store what the group did, then settle its jobs."""
        if ran.undone:
            self._hooks.rows_undone()
        if ran.failed is not None:
            self._failed(ran.failed)
        elif ran.written:
            self.error = None
            self._hooks.group_written(len(ran.jobs), sum(j.size for j in ran.jobs))
        _settle(ran.jobs, ran.results)

    def _failed(self, exc: sqlite3.Error) -> None:
        if self.error is None:
            log.error("SQLite store %s cannot write turns: %s", self.path, exc)
        self.error = str(exc)
        self._failed_at = time.monotonic()

    def refusing(self) -> str | None:
        """Why writes fail, while the last failed group's error stands (`standing`)."""
        failed = None if self.error is None else (f"writes fail: {self.error}", self._failed_at)
        return standing(failed, time.monotonic(), self._backoff_s)


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
