"""The embedded default store: one SQLite file, survives restarts, no server to run.

Turns (`commit`) are written from the event loop's thread, grouped: the
turns that arrive before a group runs share one transaction (one savepoint
each only if one fails). A group is short, and handing it to a thread
costs more (see `Writer._drain_here`). The loop never waits
on another connection's write lock, though: its connection does not wait,
and a group that finds the file locked is tried again a few milliseconds
later, until the busy timeout. A worker thread runs what may be slow (listings,
deletes, search indexing, the expiry sweep). The lookup every full-history
request makes first (`find_snapshot`) runs on the loop's thread too, on a
read-only connection of its own: a few indexed reads that WAL never makes
wait. (aiosqlite puts a thread behind every connection; here the thread is
kept for what can wait.)

A full-history turn is queued (`commit(..., wait=False)`), and the turn
awaits the write, if at all, only before its answer's end, so its bookkeeping
runs meanwhile: the process keeps the snapshots it committed, queued ones
included, in memory (`_Recent`) and answers its own next lookup from there,
and every other read of this process waits for the queued turns. Whether
someone else (another replica, an operator's delete, the sweep) changed
snapshots since is one read of the writing connection's `PRAGMA
data_version`, which SQLite moves for every commit but that connection's own,
so a replica never answers from a memory another one made
stale. With several workers the answer's end waits for the write all the
same, because a client that has it may send its next turn to another worker.

Checkpoints (copying the WAL back into the database file, with an fsync)
run on a thread and connection of their own, never inside a turn's commit:
SQLite's automatic checkpoint runs in whichever commit crosses 1,000 pages,
and that turn's answer would wait for the fsync, which shows in the tail of
the latencies.

WAL lets readers in other processes (the `sqlite3` shell, a second replica
on the same disk) read while a turn is being written; each write takes the
lock up front with `BEGIN IMMEDIATE`, so two writers wait on the busy
timeout instead of failing half way.

The package: `store.py` (`SqliteStore`: opening the file, lookups and
reads, what a write does around its SQL), `writer.py` (the groups of
turns, written from the loop or the worker), `turn_rows.py` (a turn's SQL),
`connections.py` (each connection's settings, the file's health),
`checkpoint.py`, `recent.py` (this process's own recent turns), `rows.py`
(transactions and the working history's rows) and, beside it, `schema.py`.
"""

from proxy.store.sqlite.connections import unwritable
from proxy.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore", "unwritable"]
