"""The SQLite store's memory of its own recent turns, and turns written after the answer.

A process answers its next lookup from the snapshots it committed (queued
ones included), so a full-history turn is written after its response. These
tests hold it to the file: whatever another writer did, a lookup returns
what the file would once this process's queued turns are in it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proxy.store.sqlite.store as sqlite_store
from proxy.messages import Message, chain_hashes
from proxy.store import Conflict, ConvKey, Snapshot, SqliteStore, StoreError
from tests.factories import system, user
from tests.test_store import ALICE, history, turn


def stored_heads(path: Path) -> set[str]:
    """The snapshot heads in the file, read by a connection of its own (another process)."""
    db = sqlite3.connect(path)
    try:
        return {head for (head,) in db.execute("SELECT head FROM snapshots")}
    finally:
        db.close()


def store_with(monkeypatch: pytest.MonkeyPatch, path: Path, **limits: int) -> SqliteStore:
    """A store on `path` with the memory's limits (`RECENT_BYTES`, ...) set for the test."""
    for name, value in limits.items():
        monkeypatch.setattr(sqlite_store, name, value)
    return SqliteStore(str(path))


def request(turns: int) -> list[Message]:
    """The request of turn `turns + 1` in the `history` conversation."""
    return [*history(turns), user(f"question {turns}")]


async def found_then_written(
    store: SqliteStore, found: Snapshot | None, written: Any, queued: Snapshot
) -> None:
    """`found` is the queued snapshot, which is in the file soon after; then close."""
    assert found is not None and found.head == queued.head and found.state == queued.state
    await asyncio.wait_for(written, timeout=5)
    assert queued.head in stored_heads(Path(store.path))
    await store.close()


@pytest.mark.asyncio
async def test_a_queued_turn_is_found_before_it_is_written_and_written_soon_after(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queued.db"
    store = SqliteStore(str(path))
    await store.commit(turn(ALICE, request(0)))
    second = turn(ALICE, request(1))
    written = await store.commit(second, wait=False)
    assert written is not None and not written.done()
    assert second.snapshot.head not in stored_heads(path)

    found = await store.find_snapshot(ALICE, chain_hashes(request(2)))

    await found_then_written(store, found, written, second.snapshot)


@pytest.mark.asyncio
async def test_a_new_conversations_first_turn_is_found_before_it_is_written(
    tmp_path: Path,
) -> None:
    """The lookup that found nothing in the file is remembered: the second turn need not wait
    for the first one's write, here held back by another process's write lock."""
    path = tmp_path / "new.db"
    store = SqliteStore(str(path))
    assert await store.find_snapshot(ALICE, chain_hashes(request(0))) is None
    first = turn(ALICE, request(0))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        written = await store.commit(first, wait=False)
        lookup = store.find_snapshot(ALICE, chain_hashes(request(1)))
        found = await asyncio.wait_for(lookup, timeout=1)
        assert written is not None and not written.done()
    finally:
        other.execute("ROLLBACK")
        other.close()
    await found_then_written(store, found, written, first.snapshot)


@pytest.mark.asyncio
async def test_lookups_never_followed_by_a_turn_stay_within_the_byte_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each lookup the file answered is remembered; those whose turn never came still count."""
    store = store_with(monkeypatch, tmp_path / "lookups.db", RECENT_BYTES=20_000)
    for i in range(500):  # requests whose upstream failed: nothing committed
        assert await store.find_snapshot(ConvKey("a" * 64, f"failed-{i}"), ["h"]) is None
    await store.close()
    assert 0 < store._recent.currsize <= 20_000 and len(store._recent) < 500


@pytest.mark.asyncio
async def test_an_expired_conversation_asked_of_the_file_is_not_remembered(
    tmp_path: Path,
) -> None:
    """Its turn must delete the expired rows first, so its stale snapshots stay dead."""
    path = tmp_path / "expired.db"
    clock = [1_000_000.0]
    store = SqliteStore(str(path), ttl_s=60, now=lambda: clock[0])
    old = turn(ALICE, request(0))
    await store.commit(old)
    store._recent.clear()  # as after a restart
    clock[0] += 61
    assert await store.find_snapshot(ALICE, chain_hashes(request(1))) is None
    assert ALICE not in store._recent
    restarted = turn(ALICE, [system("again"), user("q")])
    await store.commit(restarted)
    # The old history again: its snapshot went with the expired rows.
    assert await store.find_snapshot(ALICE, chain_hashes(request(1))) is None
    assert stored_heads(path) == {restarted.snapshot.head}
    await store.close()


@pytest.mark.asyncio
async def test_reads_and_close_wait_for_queued_turns(tmp_path: Path) -> None:
    path = tmp_path / "flush.db"
    store = SqliteStore(str(path))
    await store.commit(turn(ALICE, request(0)), wait=False)
    latest = await store.latest(ALICE)  # read on the worker: after the queued write
    assert latest is not None and latest.turns == 1
    await store.commit(turn(ALICE, request(1)), wait=False)
    await store.close()  # writes the queued turn first

    reopened = SqliteStore(str(path))
    latest = await reopened.latest(ALICE)
    await reopened.close()
    assert latest is not None and latest.turns == 2


@pytest.mark.asyncio
async def test_another_replicas_turns_are_seen_through_the_data_version(
    tmp_path: Path,
) -> None:
    """Two replicas on one file: neither answers from a memory the other made stale."""
    path = str(tmp_path / "replicas.db")
    a, b = SqliteStore(path), SqliteStore(path)
    await a.commit(turn(ALICE, request(0)))
    await a.commit(turn(ALICE, request(1)))
    third = turn(ALICE, request(2))
    await b.commit(third)  # the load balancer sent turn 3 to the other replica

    found = await a.find_snapshot(ALICE, chain_hashes(request(3)))
    assert found is not None and found.head == third.snapshot.head

    await b.delete(ALICE)
    assert await a.find_snapshot(ALICE, chain_hashes(request(3))) is None
    await a.close()
    await b.close()


@pytest.mark.asyncio
async def test_concurrent_lookups_share_a_check_that_the_next_iteration_repeats(
    tmp_path: Path,
) -> None:
    """Lookups served in one pass of the loop share one data-version check; later ones do not.

    A request that arrives after another process committed is served by a
    callback queued after that commit, so it must see it.
    """
    path = tmp_path / "shared-check.db"
    store = SqliteStore(str(path))
    await store.commit(turn(ALICE, request(0)))
    heads = chain_hashes(request(1))
    assert await store.find_snapshot(ALICE, heads) is not None
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("PRAGMA foreign_keys = ON")
        other.execute("DELETE FROM conversations")  # another process, between two requests
    finally:
        other.close()
    await asyncio.sleep(0)
    assert await store.find_snapshot(ALICE, heads) is None
    await store.close()


@pytest.mark.asyncio
async def test_a_queued_turn_that_cannot_be_written_is_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "stuck.db"
    store = SqliteStore(str(path), busy_timeout_s=0.2)
    first = turn(ALICE, request(0))
    await store.commit(first)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock too long
    try:
        written = await store.commit(turn(ALICE, request(1)), wait=False)
        assert written is not None
        with pytest.raises(StoreError, match="locked"):
            await asyncio.wait_for(written, timeout=5)
    finally:
        other.execute("ROLLBACK")
        other.close()

    found = await store.find_snapshot(ALICE, chain_hashes(request(2)))
    await store.close()
    assert found is not None and found.head == first.snapshot.head


@pytest.mark.asyncio
async def test_a_forgotten_snapshot_later_in_the_history_wins_over_a_remembered_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory holds the newest turns; the file's answer is the longest matching prefix."""
    store = store_with(monkeypatch, tmp_path / "branches.db", RECENT_SNAPSHOTS=2)
    first = turn(ALICE, request(0))
    await store.commit(first)
    long = turn(ALICE, [*first.working, user("the long branch")])
    await store.commit(long)
    await store.commit(turn(ALICE, [*first.working, user("a regeneration")]))
    await store.commit(first)  # the first turn again: remembered now, `long` is not

    found = await store.find_snapshot(ALICE, chain_hashes([*long.working, user("next")]))
    await store.close()
    assert found is not None and found.head == long.snapshot.head


# A conversation as a tree: each step commits a turn that extends one of the
# requests seen so far (a regeneration when it is not the newest), by this
# replica or another one, waiting for the write or not; lookups use any
# request or an extension of one.
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["commit", "commit", "other", "find"]),
        st.integers(min_value=0, max_value=1_000),
        st.booleans(),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(steps=STEPS)
def test_lookups_match_the_file_whatever_the_order_of_turns_and_writers(
    steps: list[tuple[str, int, bool]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = str(tmp_path_factory.mktemp("recent") / "tree.db")

    async def play() -> None:
        # Fewer snapshots remembered than kept, so some lookups must use the file.
        here = SqliteStore(path, max_snapshots=4)
        other, truth = SqliteStore(path, max_snapshots=4), SqliteStore(path, max_snapshots=4)
        requests: list[list[Message]] = [[system(), user("start")]]
        try:
            for step, (action, pick, wait) in enumerate(steps):
                base = requests[pick % len(requests)]
                if action == "find":
                    incoming = [*base, user(f"more {step}")] if wait else base
                    found = await here.find_snapshot(ALICE, chain_hashes(incoming))
                    await here.flush()
                    # `truth` never commits: it answers from the file alone.
                    expected = await truth.find_snapshot(ALICE, chain_hashes(incoming))
                    assert (found and found.head) == (expected and expected.head)
                    assert (found and found.state) == (expected and expected.state)
                    continue
                committed = turn(ALICE, base, state={"step": step})
                if action == "other":
                    await here.flush()
                    await other.commit(committed)
                else:
                    await here.commit(committed, wait=wait)
                requests.append([*committed.working, user(f"question {step}")])
            # The rows this replica updated by id say what the file's lookups say.
            mine, theirs = await here.latest(ALICE), await truth.latest(ALICE)
            assert (mine and (mine.turns, mine.head, mine.working)) == (
                theirs and (theirs.turns, theirs.head, theirs.working)
            )
        finally:
            for store in (here, other, truth):
                await store.close()

    original = sqlite_store.RECENT_SNAPSHOTS
    sqlite_store.RECENT_SNAPSHOTS = 2
    try:
        asyncio.run(play())
    finally:
        sqlite_store.RECENT_SNAPSHOTS = original


@pytest.mark.asyncio
async def test_turns_are_counted_across_replicas_and_deletes(tmp_path: Path) -> None:
    """A remembered row is updated by id; another writer's turn or delete is not missed."""
    path = str(tmp_path / "turns.db")
    a, b = SqliteStore(path), SqliteStore(path)
    for i in range(2):
        await a.commit(turn(ALICE, request(i)), wait=False)
    await a.flush()
    await b.commit(turn(ALICE, request(2)))
    await a.commit(turn(ALICE, request(3)))
    latest = await b.latest(ALICE)
    assert latest is not None and latest.turns == 4
    await b.delete(ALICE)
    await a.commit(turn(ALICE, request(4)))
    latest = await b.latest(ALICE)
    await a.close()
    await b.close()
    assert latest is not None and latest.turns == 1


@pytest.mark.asyncio
async def test_a_failed_turn_in_a_group_leaves_the_others_counted_once(tmp_path: Path) -> None:
    """A group redone turn by turn after a conflict must not count its first try."""
    store = SqliteStore(str(tmp_path / "redo.db"))
    await store.commit(turn(ALICE, request(0)))
    await store.commit(turn(ALICE, request(1)))
    bob = ConvKey(ALICE.tenant, "bob")
    # Queued together, so written in one group, which the conflict makes redo.
    written = await store.commit(turn(ALICE, request(2)), wait=False)
    stale = turn(bob, [user("q")])
    conflicting = await store.commit(dataclasses.replace(stale, expected_turns=5), wait=False)
    assert written is not None and conflicting is not None
    await written
    with pytest.raises(Conflict):
        await conflicting
    latest = await store.latest(ALICE)
    await store.close()
    assert latest is not None and latest.turns == 3


@pytest.mark.asyncio
async def test_a_writer_outside_the_store_is_seen_whatever_it_changes(tmp_path: Path) -> None:
    """The sqlite3 shell, or an older release, writes no counter: SQLite's data version moves."""
    path = tmp_path / "shell.db"
    store = SqliteStore(str(path))
    first, second = turn(ALICE, request(0)), turn(ALICE, request(1))
    await store.commit(first)
    await store.commit(second)
    remembered = await store.find_snapshot(ALICE, chain_hashes(request(2)))
    assert remembered is not None and remembered.head == second.snapshot.head

    # Each lookup after a shell write is a later request, served on a later
    # pass of the loop (lookups on the same pass share one check).
    shell = sqlite3.connect(path, isolation_level=None)
    shell.execute("DELETE FROM snapshots WHERE head = ?", (second.snapshot.head,))
    await asyncio.sleep(0)
    found = await store.find_snapshot(ALICE, chain_hashes(request(2)))
    assert found is not None and found.head == first.snapshot.head

    shell.execute("UPDATE snapshots SET state = '{\"edited\": true}'")
    await asyncio.sleep(0)
    found = await store.find_snapshot(ALICE, chain_hashes(request(2)))
    assert found is not None and found.state == {"edited": True}

    shell.execute("DELETE FROM conversations")
    shell.close()
    assert await store.find_snapshot(ALICE, chain_hashes(request(2))) is None
    await store.close()


@pytest.mark.asyncio
async def test_the_memory_of_recent_turns_stays_within_its_byte_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Conversations past the budget are forgotten first; their lookups read the file."""
    store = store_with(monkeypatch, tmp_path / "budget.db", RECENT_BYTES=20_000)
    keys = [ConvKey("a" * 64, f"chat-{i}") for i in range(40)]
    state = {"summary": "s" * 900}  # about 1 KB a snapshot
    for key in keys:
        await store.commit(turn(key, request(0), state=state))
        await store.commit(turn(key, request(1), state=state))
    held = store._recent.currsize
    assert 0 < held <= 20_000 and len(store._recent) < len(keys)
    # Each entry's weight, kept as snapshots come and go, is what it holds.
    for recent in store._recent.values():
        states = [state for _, state, _ in recent.snapshots.values()]
        assert recent.weight == 200 + sum(len(state) + 200 for state in states)
    assert keys[0] not in store._recent and keys[-1] in store._recent
    oldest = await store.find_snapshot(keys[0], chain_hashes(request(2)))
    newest = await store.find_snapshot(keys[-1], chain_hashes(request(2)))
    # Asked of the file, a forgotten conversation is remembered as the file has
    # it: nothing in memory, and its highest snapshot position to look past.
    again = store._recent.get(keys[0])
    assert again is not None and not again.snapshots
    assert again.hidden == turn(keys[0], request(1), state=state).snapshot.position
    await store.close()
    second = turn(keys[0], request(1), state=state).snapshot.head
    assert oldest is not None and oldest.head == second
    assert newest is not None and newest.head == second
