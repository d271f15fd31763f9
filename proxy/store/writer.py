"""The SQLite store's writer: a process of its own that writes the turns, off the proxy's loop.

Writing a turn is a dozen SQLite statements; on the event loop's thread
they were the proxy's largest cost after HTTP itself (0.13 of 0.95 CPU ms a
small request at 32 at a time, measured), and a thread does not help:
each statement hands the GIL back and forth with a loop that is busy.
In a process of its own the SQL runs on the other core. The proxy sends
each group of turns as one pickled frame over a socket pair and gets back
one frame of results, in order; the writer keeps no state the proxy needs
but the rows it last wrote (`Writer.rows`), which it forgets whenever
anyone else has committed.

The writer also runs the checkpoints (copying the WAL into the database
file, with an fsync), between groups, so no turn's commit waits for one:
once about CHECKPOINT_PAGES are written or a second after a write.

`Writer` runs in the proxy's process too, on its worker thread, for a
database that only one connection can see (":memory:").
"""

from __future__ import annotations

import contextlib
import pickle
import select
import signal
import socket
import sqlite3
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from proxy.store.base import Conflict, WorkingLayout
from proxy.store.schema import (
    DATA_VERSION,
    MARK_WRITER,
    PRUNE_SNAPSHOTS,
    UPDATE_CONVERSATION,
    UPSERT_CONVERSATION,
    UPSERT_SNAPSHOT,
)

# A frame: its length (4 bytes, little-endian), then a pickle.
HEADER = struct.Struct("<I")
# Well under SQLite's bound-parameter limit (999 on old builds).
IN_CHUNK = 500
# A checkpoint is due once the WAL holds about this many pages (SQLite's own
# default), or CHECKPOINT_EVERY_S after a write. Pages are estimated: a turn
# of a few short messages adds about 12 (measured: 50 KB of WAL a commit),
# and its text one per 4 KB.
CHECKPOINT_PAGES = 1000
PAGES_PER_TURN = 12
CHECKPOINT_EVERY_S = 1.0
# A WAL this long (8 MB) is started over by a checkpoint that waits for writers.
WAL_RESTART_PAGES = 2 * CHECKPOINT_PAGES
# A checkpoint that starts the WAL over waits this long at most for the readers
# still in it (with the usual 5 s busy timeout one held writers 5.4 s under
# steady lookups, measured); it is tried again after the next writes.
RESTART_WAIT_MS = 1000
# After a checkpoint resets it, the WAL file is truncated to this size.
WAL_SIZE_LIMIT = 64 << 20

# A job's result: (True, (hidden, described)) or (False, (kind, message)); kind is
# "conflict" (append mode lost a race), "sqlite" or "error".
Result = tuple[bool, Any]


class TurnRow(NamedTuple):
    """What one turn writes, as plain data the proxy computed (see `SqliteStore.commit`)."""

    tenant: str
    conversation: str
    head: str
    position: int
    state: str
    created_at: float
    now: float
    cutoff: float  # rows last updated before this have expired
    expected_turns: int | None
    # The proxy committed or looked up this conversation within the TTL, so it
    # has not expired; otherwise the turn deletes an expired row first and
    # reports the highest snapshot position it finds (`_Recent.hidden`).
    remembered: bool
    entries: list[tuple[str, str, str]]  # archive rows: hash, parent, message text
    chain: str | None  # what describes the working history (m005), or None
    layout: WorkingLayout | None
    first: int  # index of the first working message at or after `layout.fresh`
    # Append mode (no layout): every working message's text. Otherwise the
    # texts of working[:first], sent when the archive may lack them (a
    # conversation not remembered may have expired): None, read from the archive.
    texts: list[str] | None
    size: int  # bytes of text, which the WAL holds until a checkpoint


class _Lost(Exception):
    """The archive no longer holds messages this turn's working history keeps."""


def connect(path: str, busy_timeout_s: float, *, checkpoints: bool = False) -> sqlite3.Connection:
    """A writing connection; with `checkpoints`, SQLite leaves them to the writer (see above)."""
    db = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        if checkpoints:
            db.execute("PRAGMA wal_autocheckpoint=0")
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    except BaseException:
        db.close()
        raise
    return db


class Writer:
    """Writes groups of turns on one connection, one transaction a group.

    `token` names this writer in `last_writer` (migration m008) at the end
    of each group, with the number of groups at whose start the
    connection's data version had moved: someone else committed. SQLite
    never moves it for the connection's own commits.
    """

    def __init__(self, db: sqlite3.Connection, *, token: str, max_snapshots: int) -> None:
        self.db = db
        self.token = token
        self.max_snapshots = max(1, max_snapshots)
        self.version = int(db.execute(DATA_VERSION).fetchone()[0])
        self.foreign = 0
        # A conversation's row as this writer's last group left it: id, turns,
        # and whether its chain describes the working history. A turn then
        # updates it by id (9 us) instead of upserting it and reading it back
        # (41 us). Valid until someone else commits, or a group is undone.
        self.rows: dict[tuple[str, str], tuple[int, int, bool]] = {}

    def group(self, turns: Sequence[TurnRow]) -> list[Result]:
        """The turns in one transaction; a savepoint each only to redo a group in which one failed.

        Jobs rarely fail (an append-mode conflict), so all of them run in
        one savepoint first: two statements a turn fewer.
        """
        db = self.db
        try:
            db.execute("BEGIN IMMEDIATE")
            version = int(db.execute(DATA_VERSION).fetchone()[0])
            if version != self.version:  # someone else committed since the last group
                self.version = version
                self.foreign += 1
                self.rows.clear()
            db.execute("SAVEPOINT jobs")
            try:
                results: list[Result] = [(True, self._turn(t)) for t in turns]
            except Exception:
                db.execute("ROLLBACK TO jobs")
                self.rows.clear()  # the turns before the failed one are undone
                results = [self._one(t) for t in turns]
            db.execute("RELEASE jobs")
            db.execute(MARK_WRITER, (self.token, self.foreign))
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            # SQLite has already rolled back after some errors (disk full, I/O).
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            self.rows.clear()
            return [(False, ("sqlite", str(exc)))] * len(turns)
        return results

    def _one(self, turn: TurnRow) -> Result:
        db = self.db
        db.execute("SAVEPOINT job")
        try:
            result: Result = (True, self._turn(turn))
        except Exception as exc:
            db.execute("ROLLBACK TO job")
            self.rows.pop((turn.tenant, turn.conversation), None)
            result = (False, _failure(exc))
        db.execute("RELEASE job")
        return result

    def _turn(self, t: TurnRow) -> tuple[int, bool]:
        """Write one turn; return the highest snapshot position of an earlier life (see
        TurnRow), and whether the working history is described by its chain now (m005)."""
        db = self.db
        key = (t.tenant, t.conversation)
        # An expired conversation that the sweep has not reached yet must not
        # come back to life with its stale snapshots.
        if not t.remembered:
            self.rows.pop(key, None)
            db.execute(
                "DELETE FROM conversations"
                " WHERE tenant = ? AND conversation = ? AND updated_at < ?",
                (t.tenant, t.conversation, t.cutoff),
            )
        if t.expected_turns is not None:
            row = db.execute(
                "SELECT turns FROM conversations WHERE tenant = ? AND conversation = ?", key
            ).fetchone()
            current = 0 if row is None else int(row[0])
            if current != t.expected_turns:
                raise Conflict(f"{t.conversation} is at turn {current}, not {t.expected_turns}")
        # The first new message's parent: archived, or none (a whole history).
        first_parent = t.entries[0][1] if t.entries else ""
        # A new conversation is described by its chain only if this turn archives
        # all of it; an existing one stays described only if it was (see m005).
        known = self.rows.get(key) if t.remembered and t.expected_turns is None else None
        if known is not None:
            cid, turns, described = known[0], known[1] + 1, t.chain if known[2] else None
            values = (t.head, t.position, t.state, turns, t.now, described, cid)
            if db.execute(UPDATE_CONVERSATION, values).rowcount != 1:
                known = None  # cannot happen while `rows` is valid; looked up, then
        if known is None:
            cid, turns, described = db.execute(
                UPSERT_CONVERSATION,
                (
                    t.tenant,
                    t.conversation,
                    t.head,
                    t.position,
                    t.state,
                    t.now,
                    t.chain if first_parent == "" else None,
                    t.chain,
                ),
            ).fetchall()[0]
        hidden = 0
        if not t.remembered and turns > 1:
            (highest,) = db.execute(
                "SELECT MAX(position) FROM snapshots WHERE conversation_id = ?", (cid,)
            ).fetchone()
            hidden = int(highest or 0)
        db.executemany(
            "INSERT OR IGNORE INTO messages (conversation_id, hash, parent, message)"
            " VALUES (?, ?, ?, ?)",
            [(cid, h, parent, message) for h, parent, message in t.entries],
        )
        # A row this writer remembers was deleted by nobody since, so the chain
        # it describes still starts in the archive.
        if (
            described is not None
            and first_parent
            and known is None
            and not _archived(db, cid, first_parent)
        ):
            # Turns of an earlier life of this conversation (deleted or expired
            # since this turn's lookup): its chain lacks its start for good.
            db.execute("UPDATE conversations SET working_chain = NULL WHERE id = ?", (cid,))
            described = None
        if described is None:
            _write_working(db, cid, t)
        db.execute(UPSERT_SNAPSHOT, (cid, t.head, t.position, t.state, t.created_at, turns))
        if turns > self.max_snapshots:  # one snapshot a turn: fewer need no pruning
            db.execute(PRUNE_SNAPSHOTS, (cid, cid, self.max_snapshots))
        self.rows[key] = (cid, turns, described is not None)
        return hidden, described is not None


def _failure(exc: Exception) -> tuple[str, str]:
    if isinstance(exc, Conflict):
        return ("conflict", str(exc))
    if isinstance(exc, sqlite3.Error):
        return ("sqlite", str(exc))
    if isinstance(exc, _Lost):
        return ("error", f"the turn was not stored: {exc}")
    return ("error", f"{type(exc).__name__}: {exc}")


def _write_working(db: sqlite3.Connection, cid: int, t: TurnRow) -> None:
    """Bring the working rows to the turn's, writing the rows from `first` on if that suffices.

    The rows kept must be the same history: the row before the first fresh
    one carries the chain hash the layout expects, and every kept position
    has a row. Otherwise (append mode, an edit past the rows, a first turn)
    all rows are rewritten. With a layout, rows carry chain hashes, and the
    rows of messages archived by this commit no text (see migration m003);
    without one (append mode), text and no hash.
    """
    layout, first = t.layout, t.first
    insert = "INSERT INTO working (conversation_id, pos, hash, message) VALUES (?, ?, ?, ?)"
    if layout is None:
        db.execute("DELETE FROM working WHERE conversation_id = ?", (cid,))
        db.executemany(insert, [(cid, i, None, text) for i, text in enumerate(t.texts or ())])
        return
    if first > 0 and _rows_match(db, cid, layout, first):
        db.execute(
            "DELETE FROM working WHERE conversation_id = ? AND pos >= ? AND pos < ?",
            (cid, layout.leading, layout.start),
        )
        db.execute(
            "DELETE FROM working WHERE conversation_id = ? AND pos >= ?",
            (cid, layout.position(first)),
        )
        older: list[tuple[int, int, str, str | None]] = []
    else:
        # The messages before `first` keep their own text: their archive may
        # have expired in this very commit.
        texts = t.texts if t.texts is not None else _archived_texts(db, cid, layout, first)
        db.execute("DELETE FROM working WHERE conversation_id = ?", (cid,))
        older = [(cid, layout.position(i), layout.hashes[i], texts[i]) for i in range(first)]
    db.executemany(
        insert,
        older
        + [
            (cid, layout.position(i), layout.hashes[i], None)
            for i in range(first, len(layout.hashes))
        ],
    )


def _archived_texts(
    db: sqlite3.Connection, cid: int, layout: WorkingLayout, first: int
) -> list[str]:
    """The archived texts of working[:first], which a remembered conversation's archive holds.

    Only someone else deleting the conversation between this turn's lookup
    and its write takes them away; the turn then fails (it raced the delete
    and lost), and the client's next full-history request starts over.
    """
    wanted = layout.hashes[:first]
    found: dict[str, str] = {}
    for i in range(0, len(wanted), IN_CHUNK):
        chunk = wanted[i : i + IN_CHUNK]
        marks = ",".join("?" * len(chunk))
        found.update(
            db.execute(
                "SELECT hash, message FROM messages"
                f" WHERE conversation_id = ? AND hash IN ({marks})",
                (cid, *chunk),
            ).fetchall()
        )
    missing = len(set(wanted) - found.keys())
    if missing:
        raise _Lost(f"{missing} of its messages were deleted meanwhile")
    return [found[h] for h in wanted]


def _archived(db: sqlite3.Connection, cid: int, digest: str) -> bool:
    row = db.execute(
        "SELECT 1 FROM messages WHERE conversation_id = ? AND hash = ?", (cid, digest)
    ).fetchone()
    return row is not None


def _rows_match(db: sqlite3.Connection, cid: int, layout: WorkingLayout, first: int) -> bool:
    """Whether the stored rows hold `working[:first]` of this layout, by a few index lookups.

    Stored rows always form one history's working list: a leading block from
    position 0 and one contiguous run (every write keeps or rewrites them so).
    The row before the first fresh one carrying the expected chain hash means
    the same history up to there; the rows at the run's and the block's ends
    being present means none of the kept ones is missing.
    """
    last = layout.position(first - 1)
    probes = [last]
    if first > layout.leading:
        probes.append(layout.start)
        if layout.leading:
            probes.append(layout.leading - 1)
    marks = ",".join("?" * len(probes))
    found = dict(
        db.execute(
            f"SELECT pos, hash FROM working WHERE conversation_id = ? AND pos IN ({marks})",
            (cid, *probes),
        ).fetchall()
    )
    return len(found) == len(set(probes)) and found[last] == layout.hashes[first - 1]


def frame(value: Any) -> bytes:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def frames(buffer: bytearray) -> list[Any]:
    """The whole frames at the start of `buffer`, removed from it."""
    out: list[Any] = []
    start = 0
    while len(buffer) - start >= HEADER.size:
        (size,) = HEADER.unpack_from(buffer, start)
        end = start + HEADER.size + size
        if len(buffer) < end:
            break
        out.append(pickle.loads(memoryview(buffer)[start + HEADER.size : end]))
        start = end
    del buffer[:start]
    return out


class _Checkpoints:
    """When the writer copies the WAL into the file (see the module's doc)."""

    def __init__(
        self, db: sqlite3.Connection, busy_timeout_s: float, due_pages: int, every_s: float
    ) -> None:
        self.db = db
        self.busy_ms = int(busy_timeout_s * 1000)
        self.due_pages = due_pages
        self.every_s = every_s
        self.pages = 0
        self.last = time.monotonic()

    def wrote(self, turns: Sequence[TurnRow]) -> None:
        if not self.pages:  # the second starts with the first write after a checkpoint
            self.last = time.monotonic()
        self.pages += sum(PAGES_PER_TURN + t.size // 4096 for t in turns)

    def wait(self) -> float | None:
        """Seconds until one is due; None: none is (nothing written since the last)."""
        if not self.pages:
            return None
        if self.pages >= self.due_pages:
            return 0.0
        return max(0.0, self.last + self.every_s - time.monotonic())

    def run(self) -> None:
        """PASSIVE never blocks a writer or a reader; frames a reader still needs wait for the next.

        Under steady load one never finishes before the next group appends,
        so the WAL would never start over; past WAL_RESTART_PAGES one waits
        for the readers of the moment (at most RESTART_WAIT_MS) until it has.
        """
        self.pages = 0
        self.last = time.monotonic()
        db = self.db
        try:
            ((_, frames_left, _),) = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            if frames_left >= WAL_RESTART_PAGES:
                db.execute(f"PRAGMA busy_timeout = {RESTART_WAIT_MS}")
                try:
                    db.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                finally:
                    db.execute(f"PRAGMA busy_timeout = {self.busy_ms}")
        except sqlite3.Error as exc:  # tried again after the next writes
            print(f"context-proxy store writer: checkpoint failed: {exc}", file=sys.stderr)


def serve(sock: socket.socket, writer: Writer, checkpoints: _Checkpoints) -> None:
    """Answer each frame of turns with a frame of results, in order, until the proxy hangs up.

    Frames already received when the proxy goes away (it closed the store,
    or was killed) are written all the same.
    """
    buffer = bytearray()
    open_ = True
    while open_ or buffer:
        if checkpoints.wait() == 0.0:
            checkpoints.run()
        if open_:
            ready, _, _ = select.select([sock], [], [], checkpoints.wait())
            if not ready:
                continue
            try:
                chunk = sock.recv(1 << 20)
            except OSError:  # reset: the proxy is gone
                chunk = b""
            if not chunk:
                open_ = False
            buffer += chunk
        groups = frames(buffer)
        if not groups:
            if not open_:
                break
            continue
        for turns in groups:
            results = writer.group(turns)
            checkpoints.wrote(turns)
            with contextlib.suppress(OSError):  # the proxy is gone; write the rest anyway
                sock.sendall(frame(results))


def main(argv: list[str]) -> int:
    """Run by the store: `python -m proxy.store.writer FD PATH TOKEN MAX_SNAPSHOTS BUSY_S ...`.

    ... then the checkpoint's pages and seconds (see `_Checkpoints`).
    """
    fd, path, token, max_snapshots, busy_timeout_s, due_pages, every_s = argv
    # Ctrl-C in a terminal reaches the whole process group: the proxy closes
    # the store, and the writer ends when the socket does, after the last frame.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=int(fd))
    db = connect(path, float(busy_timeout_s), checkpoints=True)
    try:
        writer = Writer(db, token=token, max_snapshots=int(max_snapshots))
        checkpoints = _Checkpoints(db, float(busy_timeout_s), int(due_pages), float(every_s))
        serve(sock, writer, checkpoints)
    finally:
        db.close()
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
