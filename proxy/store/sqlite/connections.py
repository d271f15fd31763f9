"""How the SQLite store opens its connections, and checks its files while it runs.

Each connection has one job: the worker's writes and slow reads (waits
for a busy file), the loop's group writes (never waits), the loop's
lookups (read-only), and `inspect`'s look at a file it must not change.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from proxy.store.base import StoreError
from proxy.store.schema import check, pending

# After a checkpoint resets it, the WAL file is truncated to this size.
WAL_SIZE_LIMIT = 64 << 20


def is_file(path: str) -> bool:
    """Whether `path` names a file (not ":memory:" or a URI), with WAL and checkpoints."""
    return path != ":memory:" and not path.startswith("file:")


def writer(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    """A writing connection; the worker's waits for a busy file, the loop's (0 s) does not."""
    db = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        if is_file(path):  # checkpoints are the checkpointer thread's (see the package's doc)
            db.execute("PRAGMA wal_autocheckpoint=0")
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    except BaseException:
        db.close()
        raise
    return db


def reader(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    """A read-only connection for the lookups each request makes before going upstream.

    They are a few indexed reads, which under WAL never wait for a writer,
    so they run on the caller's thread: a hop to the worker and back costs
    more than the reads. Only the event loop's thread uses it.
    """
    db = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    db.execute("PRAGMA query_only=ON")
    return db


def read_only(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection that cannot change the file, on a file of this release's schema."""
    if not is_file(path):
        raise sqlite3.OperationalError("a read-only store needs a file")
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    db = sqlite3.connect(
        uri, uri=True, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    try:
        todo = check(db)
        missing = pending(db)
    except BaseException:
        db.close()
        raise
    # Steps only add what this connection does not read: a file lacking them is read as is.
    if todo not in ("current", "steps"):
        db.close()
        raise sqlite3.DatabaseError(
            f"its schema is not this release's (missing {', '.join(missing)}); "
            "start `context-proxy serve` on it once to upgrade it"
        )
    return db


def _connect(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    # Autocommit (transactions are explicit); any thread, since each connection has one owner.
    return sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )


def ping(db: sqlite3.Connection) -> None:
    """Whether the file answers on `db`, as a `StoreError` when it does not."""
    try:
        db.execute("SELECT 1").fetchone()
    except sqlite3.Error as exc:
        raise StoreError(f"SQLite: {exc}") from exc


def identity(path: str) -> tuple[int, int]:
    found = os.stat(path)
    return (found.st_dev, found.st_ino)


def file_problem(path: str, opened: tuple[int, int]) -> str | None:
    """What SQLite itself does not notice: the file deleted or replaced under the running
    process (it would go on writing to the unlinked inode, and lose everything at restart),
    or made read-only."""
    try:
        now = identity(path)
    except OSError:
        return f"the database file {path} is gone"
    if now != opened:
        return f"the database file {path} was replaced"
    return unwritable(path)


def unwritable(path: str) -> str | None:
    """Which of the database's files exists but cannot be written, said as a problem.

    SQLite maps the `-shm` file into memory; one it cannot write makes every
    write fail, or worse, so it is checked with the database file itself.
    """
    for name in (path, path + "-wal", path + "-shm"):
        if os.path.exists(name) and not os.access(name, os.W_OK):
            return f"the database file {name} is not writable"
    return None
