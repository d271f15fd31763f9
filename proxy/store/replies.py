"""Reading a search index's rows back as messages: a message whole from its passages,
and what answered a hit that asks.

The index holds a long message as several rows (`english.passages`), each with
the message's seq, in order; a conversation's rows are added in order, so the
next row ids of its tag are what came next. `proxy.store.search` finds rows;
this module reads around them, only as far as it needs.
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
from collections.abc import Iterable, Iterator, Set

from proxy import english
from proxy.store import relevance
from proxy.store.base import SearchHit

# Hits that get their reply looked up: the best ones not forwarded, which the recall
# block quotes (its `k` is a handful); the rest of a search's hits are only compared.
REPLIED = 50
# The other role's messages a hit carries: the reply, and an answer the proxy stored
# before the client resent its own. The asker's next message past nods, or the rest
# of the hit's own message, comes on top.
MAX_REPLIES = 3
# Rows read at a time after a hit that asks: a few messages, or a long one's passages.
_AFTER_BATCH = 16

Row = tuple[int, int, str, str]  # seq, turn, role, body


class Replies:
    """What followed the hits of one search; the messages after each message are read once."""

    def __init__(self, db: sqlite3.Connection, tag: str, within: Set[str] | None = None) -> None:
        self._db, self._tag, self._within = db, tag, within
        self._answered: dict[tuple[int, bool], tuple[SearchHit, ...]] = {}

    def of(self, rowid: int, hit: SearchHit, rank: int) -> tuple[SearchHit, ...]:
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
        seq, asker = hit.seq, hit.role
        if rank >= REPLIED or not relevance.questions(hit.text):
            return ()
        # The rest of its message: its next passage that says something.
        rest = itertools.takewhile(lambda row: row[0] == seq, self._rows(rowid))
        led = [
            SearchHit(s, t, r, b.strip(), 0.0)
            for s, t, r, b in itertools.islice((row for row in rest if row[3].strip()), 1)
        ]
        key = (seq, bool(led))  # a message has one role
        if key not in self._answered:
            self._answered[key] = self._answers(rowid, seq, asker, going_on=bool(led))
        return (*led, *self._answered[key])

    def prompt(self, rowid: int, hit: SearchHit, rank: int) -> tuple[SearchHit, ...]:
        """The message right before the hit's, when the other side said it (one of the best
        `REPLIED` hits): what the hit may be reacting to."""
        if rank >= REPLIED:
            return ()
        kept = iter(self._rows(rowid, beyond=hit.seq, back=True))
        first = next(kept, None)
        if first is None or first[2] == hit.role:
            return ()
        # Its passages, read back as far as they go (a long answer has many).
        parts = [first, *itertools.takewhile(lambda row: row[0] == first[0], kept)]
        said = _said(first[0], first[1], first[2], reversed(parts))
        return (said,) if said.text else ()

    def _answers(
        self, rowid: int, seq: int, asker: str, *, going_on: bool
    ) -> tuple[SearchHit, ...]:
        """The messages after message `seq` up to the next of the `asker`'s role, and that
        one too when those only acknowledge and `seq` ended at its question."""
        answered: list[SearchHit] = []
        for (s, turn, role), parts in itertools.groupby(
            self._rows(rowid, beyond=seq), key=lambda row: row[:3]
        ):
            if role != asker and len(answered) < MAX_REPLIES:
                answered.append(_said(s, turn, role, parts))
                continue
            # Read only what is kept: a message that ends the reply is not read through.
            if (
                role == asker
                and not going_on
                and all(english.acknowledges(m.text) for m in answered)
            ):
                answered.append(_said(s, turn, role, parts))
            break
        return tuple(answered)

    def _rows(self, rowid: int, *, beyond: int | None = None, back: bool = False) -> Iterator[Row]:
        """The rows indexed after `rowid` in the conversation, in order (before it, nearest
        first, when `back`), of the messages beyond message `beyond` that way, if given,
        read in batches as needed; another branch's rows are passed over, as if they
        were not there."""
        within = self._within
        way, order = ("<", "DESC") if back else (">", "")
        query = (
            "SELECT rowid, seq, turn, role, body, hash FROM message_search"
            f" WHERE message_search MATCH ? AND rowid {way} ?"
            + ("" if beyond is None else f" AND seq {way} ?")
            + f" ORDER BY rowid {order} LIMIT ?"
        )
        while True:
            args = (self._tag, rowid) if beyond is None else (self._tag, rowid, beyond)
            rows = self._db.execute(query, (*args, _AFTER_BATCH)).fetchall()
            yield from (
                (int(s), int(t), str(r), str(b))
                for _, s, t, r, b, h in rows
                if within is None or h in within
            )
            if len(rows) < _AFTER_BATCH:
                return
            rowid = rows[-1][0]


def _said(seq: int, turn: int, role: str, parts: Iterable[Row]) -> SearchHit:
    return SearchHit(seq, turn, role, "".join(part for *_, part in parts).strip(), 0.0)


def whole(rows: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """`(seq, passage)` rows in order as `(seq, text)`: a message's passages joined."""
    for seq, parts in itertools.groupby(rows, key=operator.itemgetter(0)):
        yield seq, "".join(part for _, part in parts).strip()
