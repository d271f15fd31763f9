"""SQL helpers of the SQLite store: transactions, a conversation's rows read back, the
working history's rows, the search index caught up, and the summaries kept ahead of
their reduction.

A full-history working list is described by its place in the archived chain
or kept as rows (schema.py says when); these functions read and write it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from proxy.messages import Message
from proxy.store import search
from proxy.store.base import (
    SUMMARIES_KEPT,
    ArchivedMessage,
    Conversation,
    ConversationSummary,
    ConvKey,
    Snapshot,
    TurnCommit,
    WorkingLayout,
    dumps,
    loads,
)
from proxy.store.schema import (
    KEEP_SUMMARY,
    LIST_CONVERSATIONS,
    PRUNE_KEPT_SUMMARIES,
    SELECT_SNAPSHOTS,
    SELECT_WORKING,
    WALK_CHAIN,
)

T = TypeVar("T")

# Most items one answer adds after the request's last message (a Responses
# answer's reasoning, calls and message); bounds the walk of a chain.
MAX_ANSWER_ITEMS = 4096
# Well under SQLite's bound-parameter limit (999 on old builds).
IN_CHUNK = 500
# The newest turn's head is nearly always among the last few messages.
FIRST_CHUNK = 8


def live_id(db: sqlite3.Connection, key: ConvKey, cutoff: float) -> int | None:
    """The conversation's row id, unless it is absent or idle since before `cutoff`."""
    row = db.execute(
        "SELECT id FROM conversations WHERE tenant = ? AND conversation = ? AND updated_at >= ?",
        (key.tenant, key.conversation, cutoff),
    ).fetchone()
    return None if row is None else int(row[0])


def conversation(db: sqlite3.Connection, key: ConvKey, cutoff: float) -> Conversation | None:
    """The conversation's latest turn and working history, unless idle since before `cutoff`."""
    row = db.execute(
        "SELECT id, head, position, state, turns, created_at, updated_at, working_chain"
        " FROM conversations WHERE tenant = ? AND conversation = ? AND updated_at >= ?",
        (key.tenant, key.conversation, cutoff),
    ).fetchone()
    if row is None:
        return None
    cid, head, position, state, turns, created_at, updated_at, described = row
    if described is None:
        texts = [m for (m,) in db.execute(SELECT_WORKING, (cid,))]
    else:
        texts = working_of_chain(db, cid, position, loads(described))
    if None in texts:
        raise sqlite3.DatabaseError("a working row refers to a missing archive row")
    working = [loads(m) for m in texts]
    return Conversation(key, head, position, loads(state), working, turns, created_at, updated_at)


def archived_page(
    db: sqlite3.Connection, cid: int, limit: int, offset: int
) -> list[ArchivedMessage]:
    found = db.execute(
        "SELECT hash, parent, message, seq FROM messages WHERE conversation_id = ?"
        " ORDER BY seq LIMIT ? OFFSET ?",
        (cid, max(0, limit), max(0, offset)),
    )
    return [ArchivedMessage(h, parent, loads(m), seq) for h, parent, m, seq in found]


def listing(
    db: sqlite3.Connection, tenant: str | None, cutoff: float, limit: int, offset: int
) -> list[ConversationSummary]:
    """Live conversations, the most recently updated first (of one tenant, or all)."""
    where = "WHERE c.updated_at >= ?" + ("" if tenant is None else " AND c.tenant = ?")
    sql = f"{LIST_CONVERSATIONS} {where} ORDER BY c.updated_at DESC, c.id DESC LIMIT ? OFFSET ?"
    params: tuple[Any, ...] = (cutoff,) + (() if tenant is None else (tenant,))
    found = db.execute(sql, (*params, max(0, limit), max(0, offset)))
    return [
        ConversationSummary(ConvKey(t, c), turns, pos, count, created, updated)
        for t, c, turns, pos, created, updated, count in found
    ]


def snapshot(
    db: sqlite3.Connection, key: ConvKey, heads: Sequence[str], cutoff: float
) -> Snapshot | None:
    """The live snapshot whose head comes latest in `heads` (`Store.find_snapshot`)."""
    # Scan from the end: the newest turn's head is usually the last or second-to-last
    # message, so one query settles it. A chunk matches at most `max_snapshots` rows,
    # so reading them whole is cheap. No read transaction: a commit landing between two
    # chunks can only add a head this scan has passed, as if the scan had come first.
    for end, size in chunks(len(heads)):
        chunk = heads[max(0, end - size) : end]
        marks = ",".join("?" * len(chunk))
        sql = f"{SELECT_SNAPSHOTS} AND s.head IN ({marks})"
        found = {row[0]: row for row in db.execute(sql, (*key, cutoff, *chunk))}
        for head in reversed(chunk):
            if head in found:
                _, position, state, created_at = found[head]
                return Snapshot(head, position, loads(state), created_at)
    return None


def chunks(n: int) -> list[tuple[int, int]]:
    """(end, size) of the slices of n heads to look up, newest first: a small one, then big ones."""
    out: list[tuple[int, int]] = []
    end, size = n, FIRST_CHUNK
    while end > 0:
        out.append((end, size))
        end, size = end - size, IN_CHUNK
    return out


def first_fresh(layout: WorkingLayout | None, n: int) -> int:
    """Index of the first working message at or after `layout.fresh`: the ones a commit writes."""
    if layout is None:
        return 0
    if layout.fresh <= layout.leading:
        return min(layout.fresh, n)
    return max(layout.leading, min(n, layout.leading + layout.fresh - layout.start))


def write_working(
    db: sqlite3.Connection, cid: int, turn: TurnCommit, first: int, texts: list[str] | None
) -> None:
    """Bring the working rows to `turn.working`, writing the rows from `first` on if that suffices.

    The rows kept must be the same history: the row before the first fresh
    one carries the chain hash the layout expects, and every kept position
    has a row. Otherwise (append mode, an edit past the rows, a first turn)
    all rows are rewritten. With a layout, rows carry chain hashes, and the
    rows of messages archived by this commit no text (schema.py says why);
    without one (append mode), text and no hash.
    """
    layout, working = turn.layout, turn.working
    insert = "INSERT INTO working (conversation_id, pos, hash, message) VALUES (?, ?, ?, ?)"
    if layout is None or texts is not None:
        db.execute("DELETE FROM working WHERE conversation_id = ?", (cid,))
        db.executemany(insert, [(cid, i, None, text) for i, text in enumerate(texts or ())])
        return
    if first > 0 and rows_match(db, cid, layout, first):
        db.execute(
            "DELETE FROM working WHERE conversation_id = ? AND pos >= ? AND pos < ?",
            (cid, layout.leading, layout.start),
        )
        db.execute(
            "DELETE FROM working WHERE conversation_id = ? AND pos >= ?",
            (cid, layout.position(first)),
        )
        older = []
    else:
        # The messages before `first` may predate an archive that expired in
        # this very commit, so their rows keep their own text.
        db.execute("DELETE FROM working WHERE conversation_id = ?", (cid,))
        older = [
            (cid, layout.position(i), layout.hashes[i], dumps(working[i])) for i in range(first)
        ]
    db.executemany(
        insert,
        older
        + [(cid, layout.position(i), layout.hashes[i], None) for i in range(first, len(working))],
    )


def working_of_chain(
    db: sqlite3.Connection, cid: int, position: int, described: list[Any]
) -> list[str | None]:
    """The working messages `conversations.working_chain` describes, read from the archive.

    The chain is walked from its last message back to the first (one index
    lookup a message, in SQLite), at most as many as the head's position and
    the answer's items after it.
    """
    leading, start, last = described
    rows = db.execute(WALK_CHAIN, (cid, last, position + 1 + MAX_ANSWER_ITEMS)).fetchall()
    if not rows or rows[0][0] != "":
        raise sqlite3.DatabaseError("the archived chain of the working history is incomplete")
    texts = [message for _, message in rows]
    return [*texts[:leading], *texts[start:]]


def chain(db: sqlite3.Connection, cid: int, last: str, limit: int) -> list[Message]:
    """The archived message `last` and those it follows, oldest first, at most `limit`."""
    if limit <= 0:  # the walk's first row comes whatever its bound
        return []
    return [loads(m) for _, m in db.execute(WALK_CHAIN, (cid, last, limit))]


def archived(db: sqlite3.Connection, cid: int, digest: str) -> bool:
    row = db.execute(
        "SELECT 1 FROM messages WHERE conversation_id = ? AND hash = ?", (cid, digest)
    ).fetchone()
    return row is not None


def rows_match(db: sqlite3.Connection, cid: int, layout: WorkingLayout, first: int) -> bool:
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


def indexed(db: sqlite3.Connection, cid: int) -> int:
    """`cid`, once the search index holds every message of it the archive does."""
    last, _ = search.progress(db, cid)
    new = db.execute(
        "SELECT seq, hash, message FROM messages WHERE conversation_id = ? AND seq > ?"
        " ORDER BY seq",
        (cid, last),
    ).fetchall()
    search.add(db, cid, [(seq, h, loads(m)) for seq, h, m in new])
    return cid


def keep_summary(db: sqlite3.Connection, cid: int, request: str, text: str, now: float) -> None:
    db.execute(KEEP_SUMMARY, (cid, request, text, now))
    db.execute(PRUNE_KEPT_SUMMARIES, (cid, SUMMARIES_KEPT))


def kept_summaries(db: sqlite3.Connection, cid: int) -> list[tuple[str, str]]:
    query = "SELECT request, text FROM kept_summaries WHERE conversation_id = ?"
    return [(request, text) for request, text in db.execute(query, (cid,))]


def write(db: sqlite3.Connection, body: Callable[[], T], *, begun: bool = False) -> T:
    """`body` in one write transaction (`begun`: the caller has opened it), undone on error."""
    if not begun:
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


def read(db: sqlite3.Connection, body: Callable[[], T]) -> T:
    """Several SELECTs in one read transaction see one consistent state of the file."""
    db.execute("BEGIN")
    try:
        return body()
    finally:
        db.execute("COMMIT")
