"""Reading a search index's rows back as messages: a message whole from its passages,
and what answered a hit that asks.

The index holds a long message as several rows (`english.passages`), each with
the message's seq, in order; a conversation's rows are added in order, so the
next row ids of its tag are what came next. `proxy.store.search` finds rows;
this module reads around them.
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
from collections.abc import Iterable, Iterator

from proxy import english
from proxy.store import relevance
from proxy.store.base import SearchHit

# Hits that get their reply looked up: the best ones, which the recall block quotes
# (its `k` is a handful); the rest of a search's hits are only compared.
REPLIED = 50
# The reply, and an answer the proxy stored before the client resent its own.
MAX_REPLIES = 3
# Rows read at a time after a hit that asks: a few messages, or a long one's passages.
_AFTER_BATCH = 16

Row = tuple[int, int, str, str]  # seq, turn, role, body


def replies(
    db: sqlite3.Connection, tag: str, rowid: int, hit: tuple[int, str, str], rank: int
) -> tuple[SearchHit, ...]:
    """What followed a hit that asks something: the messages after it up to the next
    of its role, led by its message's next passage when its message goes on.

    A message that goes on past its question is often a transcript (a session
    sent as one message), whose next line answers: its next passage comes
    first. When what came between only acknowledges ("ok", "No.") or nothing
    came between, and the message ended at its question, the next message of
    the hit's role comes too: a conversation sent as one role's messages (each
    speaker's turn a user message, the other role answering "ok", or nothing).
    Only the best `REPLIED` hits are looked up.
    """
    seq, asker, text = hit
    if rank >= REPLIED or not relevance.questions(text):
        return ()
    rows = _after(db, tag, rowid)
    first = next(rows, None)
    if first is None:
        return ()
    going_on = first[0] == seq
    led = [SearchHit(first[0], first[1], first[2], first[3].strip(), 0.0)] if going_on else []
    # Lazily: the rows are read in batches only as far as the replies go.
    rest = (
        itertools.dropwhile(lambda row: row[0] == seq, rows)
        if going_on
        else itertools.chain([first], rows)
    )
    said = [
        SearchHit(s, turn, role, "".join(part for *_, part in parts).strip(), 0.0)
        for (s, turn, role), parts in itertools.islice(
            itertools.groupby(rest, key=lambda row: row[:3]), MAX_REPLIES + 1
        )
    ]
    answered = list(itertools.takewhile(lambda m: m.role != asker, said[:MAX_REPLIES]))
    if (
        not going_on
        and len(answered) < len(said)
        and said[len(answered)].role == asker
        and all(english.acknowledges(m.text) for m in answered)
    ):
        answered.append(said[len(answered)])
    return (*led, *answered)


def _after(db: sqlite3.Connection, tag: str, rowid: int) -> Iterator[Row]:
    """The rows indexed after `rowid` in its conversation, in order, read as needed."""
    while True:
        rows = db.execute(
            "SELECT rowid, seq, turn, role, body FROM message_search WHERE message_search MATCH ?"
            " AND rowid > ? ORDER BY rowid LIMIT ?",
            (tag, rowid, _AFTER_BATCH),
        ).fetchall()
        yield from ((int(s), int(t), str(r), str(b)) for _, s, t, r, b in rows)
        if len(rows) < _AFTER_BATCH:
            return
        rowid = rows[-1][0]


def whole(rows: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """`(seq, passage)` rows in order as `(seq, text)`: a message's passages joined."""
    for seq, parts in itertools.groupby(rows, key=operator.itemgetter(0)):
        yield seq, "".join(part for _, part in parts).strip()
