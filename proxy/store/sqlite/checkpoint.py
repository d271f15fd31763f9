"""The SQLite store's checkpoints: the WAL copied back into the database file, off every commit.

SQLite's automatic checkpoint runs in whichever commit crosses 1,000 pages,
and that turn's answer would wait for its fsync. Here a thread and a
connection of their own run it instead, once enough pages are written or a
second has passed since the last one (see `Checkpointer`).
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
from pathlib import Path

log = logging.getLogger("context_proxy.store")

# A checkpoint is due once the WAL holds about this many pages, or after
# CHECKPOINT_EVERY_S with anything written. Pages are estimated: a turn of a
# few short messages adds about PAGES_PER_JOB, and its text adds one per 4 KB.
# SQLite's own default, 1,000, means many checkpoints a second under a steady
# stream of turns, each copying the same hot pages again; a longer WAL between
# checkpoints copies them less often and costs less CPU.
CHECKPOINT_PAGES = 4000
PAGES_PER_JOB = 12
CHECKPOINT_EVERY_S = 1.0
# A WAL this long (32 MB) is started over by a checkpoint that waits for writers.
WAL_RESTART_PAGES = 2 * CHECKPOINT_PAGES
# A checkpoint that starts the WAL over waits this long at most for the readers
# still in it, holding writers off meanwhile; under the connection's own busy
# timeout, steady lookups would hold writers off for all of it. It is tried
# again after the next writes.
RESTART_WAIT_MS = 1000


class Checkpointer:
    """Checkpoints of one database file, on a thread of its own.

    The writer calls `after_write` once a group of turns is committed; the
    thread waits for enough pages or a second, then checkpoints, then runs
    `after` (the store looks at its file there, off the event loop). Only the
    thread touches its connection; the counters are plain attributes, read
    and written under the GIL.
    """

    def __init__(
        self, path: str, busy_timeout_s: float, after: Callable[[], None] = lambda: None
    ) -> None:
        self.path = path
        self._after = after
        self._busy_timeout_s = busy_timeout_s
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="store-sqlite-checkpoint"
        )
        self._db: sqlite3.Connection | None = None
        self._pending = False
        self._wake = threading.Event()
        self._unchecked_pages = 0
        self._last = time.monotonic()
        self._closed = False

    def after_write(self, pages: int) -> None:
        """After a commit of about `pages` pages: make sure a checkpoint will follow."""
        self._unchecked_pages += pages
        if self._closed:
            return
        if self._pending:
            if self._unchecked_pages >= CHECKPOINT_PAGES:
                self._wake.set()
            return
        self._pending = True
        with contextlib.suppress(RuntimeError):  # shut down meanwhile
            self._executor.submit(self._run)

    def _run(self) -> None:
        """On the checkpointer thread: copy the WAL into the file once enough is written or a
        second has passed since the last checkpoint, whichever comes first.

        Waiting a second after a write, even if none follows, bounds what a
        power cut can take and keeps the next burst of turns from paying for
        this one's checkpoint. PASSIVE never blocks a writer or a reader;
        frames a reader still needs are left for the next checkpoint.
        """
        deadline = self._last + CHECKPOINT_EVERY_S
        while not self._closed and self._unchecked_pages < CHECKPOINT_PAGES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._wake.wait(remaining)
            self._wake.clear()
        self._unchecked_pages = 0
        try:
            if self._db is None:  # opened, never created: a file deleted meanwhile stays gone
                uri = f"{Path(self.path).resolve().as_uri()}?mode=rw"
                self._db = sqlite3.connect(
                    uri, uri=True, timeout=self._busy_timeout_s, isolation_level=None
                )
            db = self._db
            ((_, frames, _),) = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            if frames >= WAL_RESTART_PAGES:
                # Under steady load a concurrent checkpoint never finishes before
                # the next turn appends, so the WAL would never start over; this
                # one waits for the writer of the moment and holds the next ones
                # (the loop's groups stay queued meanwhile) until it has.
                db.execute(f"PRAGMA busy_timeout = {RESTART_WAIT_MS}")
                try:
                    db.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                finally:
                    db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
        except sqlite3.Error as exc:  # retried after the next write
            log.warning("SQLite checkpoint failed: %s", exc)
        finally:
            self._last = time.monotonic()
            self._pending = False
        self._after()

    async def close(self) -> None:
        """Run a waiting checkpoint now, then close the connection and the thread."""
        self._closed = True
        self._wake.set()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_db)
        self._executor.shutdown(wait=False)

    def abandon(self) -> None:
        """The store failed to open: stop the thread without waiting."""
        self._closed = True
        self._executor.shutdown(wait=False)

    def _close_db(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
