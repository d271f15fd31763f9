"""A turn as the SQLite store writes it: serialised before the transaction, then its rows.

`TurnRows.of` serialises on the caller's side, so a value orjson rejects
fails before any transaction starts; `write` runs inside the writer's
group (see `writer.py`) and is plain SQL: the conversation's row, the new
archive rows, the working history (rows, or its place in the archived
chain), the snapshot, and the pruning of old snapshots.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from proxy.store.base import Conflict, ConvKey, TurnCommit, dumps
from proxy.store.schema import (
    PRUNE_SNAPSHOTS,
    UPDATE_CONVERSATION,
    UPSERT_CONVERSATION,
    UPSERT_SNAPSHOT,
)

from . import rows

# A conversation's row as this process last wrote it: (id, turns, described by its chain).
Row = tuple[int, int, bool]


@dataclass(frozen=True, slots=True)
class TurnRows:
    turn: TurnCommit
    state: str
    entries: list[tuple[str, str, str]]  # (hash, parent, message) of the new archive rows
    first: int  # the first working message that may need a row
    texts: list[str] | None  # every working message, when there is no layout
    chain: str | None  # [leading, start, head] of a layout: the chain that describes it
    first_parent: str  # the first new message's parent: archived, or "" (a whole history)

    @staticmethod
    def of(turn: TurnCommit) -> TurnRows:
        layout = turn.layout
        entries = [(e.hash, e.parent, dumps(e.message)) for e in turn.archive]
        # With a layout only the rows from `fresh` on are likely to be written; the rest
        # are serialised in the rare case the stored rows turn out not to match.
        texts = None if layout is not None else [dumps(m) for m in turn.working]
        chain = None if layout is None else dumps([layout.leading, layout.start, layout.hashes[-1]])
        return TurnRows(
            turn,
            dumps(turn.snapshot.state),
            entries,
            rows.first_fresh(layout, len(turn.working)),
            texts,
            chain,
            entries[0][1] if entries else "",
        )

    @property
    def size(self) -> int:
        """Bytes of text the turn writes (the WAL holds them until a checkpoint)."""
        texts = sum(map(len, self.texts)) if self.texts is not None else 0
        return len(self.state) + sum(len(e[2]) for e in self.entries) + texts

    def write(
        self,
        db: sqlite3.Connection,
        *,
        remembered: bool,
        known: Row | None,
        cutoff: float,
        now: float,
        max_snapshots: int,
    ) -> tuple[int, Row]:
        """The turn's rows; returns the highest position stored before it (0 when the
        process remembered the conversation) and the conversation's row now.

        `known` is the row this process last wrote, updated by id rather than
        looked up; `remembered` says the process committed this conversation
        within the TTL, so it is not expired.
        """
        turn, snap, key = self.turn, self.turn.snapshot, self.turn.key
        # An expired conversation that the sweep has not reached yet must not come
        # back to life with its stale snapshots.
        if not remembered:
            db.execute(
                "DELETE FROM conversations"
                " WHERE tenant = ? AND conversation = ? AND updated_at < ?",
                (key.tenant, key.conversation, cutoff),
            )
        if turn.expected_turns is not None:
            expect(db, key, turn.expected_turns)
        # A new conversation is described by its chain only if this turn archives all
        # of it; an existing one stays described only if it was (`working_chain` in
        # schema.py).
        if known is not None:
            cid, turns, described = known[0], known[1] + 1, self.chain if known[2] else None
            update = (snap.head, snap.position, self.state, turns, now, described, cid)
            if db.execute(UPDATE_CONVERSATION, update).rowcount != 1:
                known = None  # cannot happen while the process's memory is valid; look it up
        if known is None:
            whole = self.chain if self.first_parent == "" else None
            values = (key.tenant, key.conversation, snap.head, snap.position, self.state, now)
            cid, turns, described = db.execute(
                UPSERT_CONVERSATION, (*values, whole, self.chain)
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
            [(cid, h, parent, message) for h, parent, message in self.entries],
        )
        # A row this process remembers was deleted by nobody since (`Recent.row`), so
        # the chain it describes still starts in the archive.
        if (
            described is not None
            and self.first_parent
            and known is None
            and not rows.archived(db, cid, self.first_parent)
        ):
            # Turns of an earlier life of this conversation (deleted or expired since
            # this turn's lookup): its chain lacks its start for good.
            db.execute("UPDATE conversations SET working_chain = NULL WHERE id = ?", (cid,))
            described = None
        if described is None:
            rows.write_working(db, cid, turn, self.first, self.texts)
        db.execute(
            UPSERT_SNAPSHOT, (cid, snap.head, snap.position, self.state, snap.created_at, turns)
        )
        if turns > max_snapshots:  # one snapshot a turn: fewer need no pruning
            db.execute(PRUNE_SNAPSHOTS, (cid, cid, max_snapshots))
        return hidden, (cid, turns, described is not None)


def expect(db: sqlite3.Connection, key: ConvKey, turns: int) -> None:
    """Raise `Conflict` unless the conversation is at turn `turns` (append mode's check)."""
    row = db.execute(
        "SELECT turns FROM conversations WHERE tenant = ? AND conversation = ?",
        (key.tenant, key.conversation),
    ).fetchone()
    current = 0 if row is None else int(row[0])
    if current != turns:
        raise Conflict(f"{key.conversation} is at turn {current}, not {turns}")
