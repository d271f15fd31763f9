"""Memory per stored conversation, for each store.

N conversations of M turns each are stored through the real proxy (full-
history mode, unique content so nothing is shared), and the growth of the
proxy's RSS, and for SQLite of the database's pages in use, is divided by
N. RSS is what an operator pays for the memory store; for SQLite the file
is the stored state and RSS shows the page cache on top.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from .bodies import growing
from .load import replay
from .matrix import Plan
from .procs import Server


@dataclass
class MemoryCost:
    store: str
    conversations: int
    messages_per_conversation: int
    rss_kb: float
    file_kb: float | None


def _files_size(db: Path | None) -> int:
    """Bytes of the database's pages in use, read through the WAL.

    Not the files' sizes: the WAL is a bounded buffer the proxy reuses (up
    to about 8 MB), so its size says when the last checkpoint ran, not what
    a conversation costs.
    """
    if db is None:
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        pages, free, size = (
            con.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("page_count", "freelist_count", "page_size")
        )
    return int((pages - free) * size)


async def memory_cost(
    store: str, proxy: Server, db: Path | None, plan: Plan, tag: str
) -> MemoryCost:
    # Warm the process first, so loading tiktoken and first-use allocations
    # are not charged to the conversations.
    await replay(
        proxy.url, [(f"mem-warm-{tag}-{i}", growing(4, 2, seed=-1 - i)) for i in range(8)], 4
    )
    convs = [
        (f"mem-{tag}-{i}", growing(4, plan.mem_turns - 1, seed=50_000 + i))
        for i in range(plan.mem_convs)
    ]
    rss0, files0 = proxy.rss(), _files_size(db)
    statuses = await replay(proxy.url, convs, 4)
    rss1, files1 = proxy.rss(), _files_size(db)
    if set(statuses) != {200}:
        raise RuntimeError(f"memory run on {store} got statuses {dict(statuses)}")
    n = plan.mem_convs
    return MemoryCost(
        store,
        n,
        2 * plan.mem_turns + 1,
        (rss1 - rss0) / 1024 / n,
        (files1 - files0) / 1024 / n if db is not None else None,
    )
