"""The SQLite writer's groups: where a job runs, and that turns keep their order."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from proxy.store.sqlite import connections
from proxy.store.sqlite.writer import GROUP_BYTES, Writer


class Hooks:
    def __init__(self) -> None:
        self.written: list[tuple[int, int]] = []

    def group_begins(self, version: int) -> None:
        return None

    def rows_undone(self) -> None:
        return None

    def group_written(self, jobs: int, size: int) -> None:
        self.written.append((jobs, size))


def test_a_job_larger_than_a_group_runs_on_the_worker_and_the_order_holds(tmp_path: Path) -> None:
    path = str(tmp_path / "w.db")
    worker_db = connections.writer(path, 5.0)
    worker_db.execute("CREATE TABLE t (n INTEGER)")
    executor = ThreadPoolExecutor(max_workers=1)
    hooks = Hooks()
    ran: list[tuple[str, int]] = []

    def job(name: str, n: int) -> object:
        def run(db: sqlite3.Connection) -> int:
            ran.append((name, threading.get_ident()))
            db.execute("INSERT INTO t VALUES (?)", (n,))
            return n

        return run

    async def main() -> list[int]:
        here = connections.writer(path, 0.0)
        writer = Writer(path, here, lambda: worker_db, executor, 5.0, hooks)
        futures = [
            writer.submit(job("small-1", 1), size=10),  # type: ignore[arg-type]
            writer.submit(job("large", 2), size=GROUP_BYTES + 1),  # type: ignore[arg-type]
            writer.submit(job("small-2", 3), size=10),  # type: ignore[arg-type]
            writer.submit(job("small-3", 4), size=10),  # type: ignore[arg-type]
        ]
        ticks = 0
        while not all(f.done() for f in futures):
            ticks += 1  # the loop keeps running while the large job is away
            await asyncio.sleep(0)
        results = [await f for f in futures]
        writer.close()
        assert ticks > 0
        return results

    loop_thread = threading.get_ident()
    assert asyncio.run(main()) == [1, 2, 3, 4]
    assert [name for name, _ in ran] == ["small-1", "large", "small-2", "small-3"]
    threads = dict(ran)
    assert threads["small-1"] == threads["small-2"] == loop_thread
    assert threads["large"] != loop_thread
    rows = [n for (n,) in worker_db.execute("SELECT n FROM t ORDER BY rowid")]
    assert rows == [1, 2, 3, 4]
    assert [jobs for jobs, _ in hooks.written] == [1, 1, 2]
    executor.shutdown()
    worker_db.close()


def test_the_health_ping_never_waits_for_the_worker(tmp_path: Path) -> None:
    """A large turn being written on the worker must not hold `/healthz` up."""
    from proxy.store import SqliteStore

    async def main() -> tuple[bool, bool]:
        store = SqliteStore(str(tmp_path / "p.db"))
        gate = threading.Event()
        busy = store._executor.submit(gate.wait)  # the worker is busy (a large write, a sweep)
        try:
            await asyncio.wait_for(store.ping(), 1.0)  # a TimeoutError fails the test
            answered_while_busy = not busy.done()
        finally:
            gate.set()
            await store.close()
        return answered_while_busy, store.problem() is None

    answered_while_busy, healthy = asyncio.run(main())
    assert answered_while_busy, "the ping waited for the worker"
    assert healthy


def test_a_large_job_that_fails_on_the_worker_settles_and_the_loop_writes_on(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "w.db")
    setup = connections.writer(path, 5.0)
    setup.execute("CREATE TABLE t (n INTEGER)")
    executor = ThreadPoolExecutor(max_workers=1)
    hooks = Hooks()

    def broken() -> sqlite3.Connection:
        raise RuntimeError("the worker's connection is gone")

    def insert(n: int) -> object:
        def run(db: sqlite3.Connection) -> int:
            db.execute("INSERT INTO t VALUES (?)", (n,))
            return n

        return run

    async def main() -> tuple[BaseException | None, int]:
        writer = Writer(path, connections.writer(path, 0.0), broken, executor, 5.0, hooks)
        large = writer.submit(insert(1), size=GROUP_BYTES + 1)  # type: ignore[arg-type]
        small = writer.submit(insert(2), size=10)  # type: ignore[arg-type]
        done = await asyncio.wait_for(asyncio.gather(large, small, return_exceptions=True), 5)
        writer.close()
        return (done[0] if isinstance(done[0], BaseException) else None), int(done[1])

    error, written = asyncio.run(main())
    assert isinstance(error, RuntimeError) and written == 2
    assert [n for (n,) in setup.execute("SELECT n FROM t")] == [2]
    executor.shutdown()
    setup.close()
