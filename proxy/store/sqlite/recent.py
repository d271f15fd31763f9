"""This process's own recent turns: the snapshots it committed, answered without the file.

A full-history turn is written as its answer ends, or just after, and the next turn of the
same conversation looks its snapshot up first thing; `Recent` keeps
a conversation's newest snapshots (queued ones included) so that lookup
needs no read of the file while nobody else writes to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from proxy.store.base import Snapshot, loads

# Snapshots kept per conversation, and the bytes of their states (plus 200 a
# snapshot for the rest) that all conversations may hold.
RECENT_SNAPSHOTS = 8
RECENT_BYTES = 32 << 20


def weight_of(recent: Recent) -> int:
    return recent.weight


@dataclass(slots=True)
class Recent:
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
    # The conversation's row as this process's last write left it: id, turns,
    # and whether its chain describes the working history. A turn then updates
    # the row by id, which costs less than upserting it and reading it back.
    # Set as a job writes, so a later turn in the same group sees it; unset
    # when a group's writes are undone.
    row: tuple[int, int, bool] | None = None

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
