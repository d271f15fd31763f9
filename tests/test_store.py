"""Behaviour every store backend shares, plus what only the SQLite file promises."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis
from hypothesis import given
from hypothesis import strategies as st

from proxy import english, recall
from proxy.errors import ConfigError
from proxy.messages import Message, chain_hashes
from proxy.store import (
    ArchiveEntry,
    Conflict,
    ConvKey,
    MemoryStore,
    Snapshot,
    SqliteStore,
    Store,
    StoreError,
    TurnCommit,
    WorkingLayout,
    open_store,
)
from proxy.store import replies as replies_module
from proxy.store import search as search_index
from proxy.store.base import SUMMARIES_KEPT, SearchHit
from proxy.store.schema import migrate
from proxy.store.search import search_messages
from tests.factories import STORE_TTL, Clock, assistant, call, system, tool, user

ALICE = ConvKey("a" * 64, "chat-1")
MALLORY = ConvKey("b" * 64, "chat-1")
TTL = STORE_TTL
TABLES = ("conversations", "messages", "snapshots", "working")


Factory = Callable[..., Store]


@pytest_asyncio.fixture
async def store(make_store: Factory) -> AsyncIterator[Store]:
    opened = make_store()
    yield opened
    await opened.close()


def contents(path: str) -> bytes | None:
    """A file's bytes, or None if there is no such file (sync: the tests read small files)."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        return None


@pytest.mark.asyncio
async def test_sqlite_checkpoints_off_the_commit_and_leaves_no_wal_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit never copies the WAL into the file itself; the checkpointer thread does."""
    import proxy.store.sqlite.checkpoint as sqlite_store

    path = tmp_path / "wal.db"
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_EVERY_S", 3600.0)
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_PAGES", 1 << 30)
    store = SqliteStore(str(path))
    first = [system(), user("marker-first " + "x" * 5_000_000)]
    await store.commit(turn(ALICE, first))
    # Not due: the text is in the WAL only, which SQLite alone would have checkpointed
    # in this very commit once past 1,000 pages; here nothing but the checkpointer does.
    assert b"marker-first" not in path.read_bytes()
    assert b"marker-first" in contents(f"{path}-wal")

    monkeypatch.setattr(sqlite_store, "CHECKPOINT_PAGES", 1)
    await store.commit(turn(MALLORY, [system(), user("marker-second")]))
    for _ in range(200):  # the checkpointer runs on its own thread
        if b"marker-second" in path.read_bytes():
            break
        await asyncio.sleep(0.01)
    assert b"marker-first" in path.read_bytes() and b"marker-second" in path.read_bytes()
    await store.close()
    assert contents(f"{path}-wal") is None
    reopened = SqliteStore(str(path))
    latest = await reopened.latest(MALLORY)
    await reopened.close()
    assert latest is not None and latest.working[1] == user("marker-second")


@pytest.mark.asyncio
async def test_sqlite_commit_waits_for_another_writer_without_blocking_the_loop(
    tmp_path: Path,
) -> None:
    """Turns are written from the loop's thread; a locked file is tried again, the loop runs on."""
    path = tmp_path / "locked.db"
    store = SqliteStore(str(path), busy_timeout_s=5.0)
    await store.commit(turn(ALICE, [system(), user("first")]))
    other = sqlite3.connect(path, isolation_level=None)  # another replica, mid-transaction
    other.execute("BEGIN IMMEDIATE")
    try:
        first = asyncio.ensure_future(store.commit(turn(MALLORY, [system(), user("one")])))
        later = asyncio.ensure_future(
            store.commit(turn(ALICE, [system(), user("first"), assistant("a"), user("two")]))
        )
        ticks = 0
        for _ in range(20):  # the loop keeps running while the file is locked
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 20 and not first.done() and not later.done()
    finally:
        other.execute("COMMIT")
        other.close()
    await asyncio.wait_for(asyncio.gather(first, later), timeout=5)
    mallory, alice = await store.latest(MALLORY), await store.latest(ALICE)
    # And the next turn is written from the loop again.
    await store.commit(turn(MALLORY, [system(), user("one"), assistant("b"), user("three")]))
    again = await store.latest(MALLORY)
    await store.close()
    assert mallory is not None and mallory.turns == 1
    assert alice is not None and alice.turns == 2 and alice.working[-2] == user("two")
    assert again is not None and again.turns == 2


@pytest.mark.asyncio
async def test_sqlite_gives_up_on_a_lock_held_past_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "stuck.db"
    store = SqliteStore(str(path), busy_timeout_s=0.2)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked"):
            await store.commit(turn(ALICE, [system(), user("one")]))
    finally:
        other.execute("ROLLBACK")
        other.close()
    await store.commit(turn(ALICE, [system(), user("one")]))
    latest = await store.latest(ALICE)
    await store.close()
    assert latest is not None and latest.turns == 1


def turn(
    key: ConvKey,
    request: list[Message],
    answer: Message | None = None,
    *,
    state: dict[str, Any] | None = None,
) -> TurnCommit:
    """The commit a proxy makes after forwarding `request` and receiving `answer`."""
    messages = [*request, answer or assistant(f"answer {len(request)}")]
    hashes = chain_hashes(messages)
    parents = ["", *hashes[:-1]]
    archive = [ArchiveEntry(h, p, m) for h, p, m in zip(hashes, parents, messages, strict=True)]
    head = hashes[len(request) - 1]
    snapshot = Snapshot(head, len(request), state or {"upto": len(request)}, 0.0)
    return TurnCommit(key, archive, snapshot, working=messages)


def history(turns: int) -> list[Message]:
    """system, then `turns` user/assistant pairs matching what `turn` answers."""
    messages = [system()]
    for i in range(turns):
        messages.append(user(f"question {i}"))
        messages.append(assistant(f"answer {len(messages)}"))
    return messages


async def commit_turns(store: Store, key: ConvKey, count: int) -> list[Message]:
    """Commit `count` growing turns in full-history mode; return the final history."""
    for i in range(count):
        await store.commit(turn(key, [*history(i), user(f"question {i}")]))
    return history(count)


@pytest.mark.asyncio
async def test_find_snapshot_picks_the_longest_stored_prefix(store: Store) -> None:
    messages = await commit_turns(store, ALICE, 3)
    incoming = [*messages, user("question 3")]

    found = await store.find_snapshot(ALICE, chain_hashes(incoming))

    assert found is not None
    assert found.position == 6 and found.state == {"upto": 6}
    assert found.head == chain_hashes(incoming)[5]


@pytest.mark.asyncio
async def test_edit_falls_back_to_the_snapshot_before_the_branch(store: Store) -> None:
    messages = await commit_turns(store, ALICE, 3)
    edited = [*messages[:3], user("question 1, reworded"), *messages[4:]]

    found = await store.find_snapshot(ALICE, chain_hashes(edited))

    assert found is not None and found.position == 2


@pytest.mark.asyncio
async def test_unknown_history_finds_no_snapshot(store: Store) -> None:
    await commit_turns(store, ALICE, 2)

    assert await store.find_snapshot(ALICE, chain_hashes([user("something else")])) is None
    assert await store.find_snapshot(ALICE, []) is None
    assert await store.find_snapshot(ConvKey(ALICE.tenant, "other"), ["x"]) is None


@pytest.mark.asyncio
async def test_find_snapshot_scans_histories_longer_than_one_query(store: Store) -> None:
    long = [user(f"message {i}") for i in range(2500)]
    await store.commit(turn(ALICE, long[:1201]))
    incoming = [*long, user("more")]

    found = await store.find_snapshot(ALICE, chain_hashes(incoming))

    assert found is not None and found.position == 1201


@pytest.mark.asyncio
async def test_resending_the_history_archives_only_new_messages(store: Store) -> None:
    await commit_turns(store, ALICE, 3)

    archived = await store.archive(ALICE)

    assert [a.message for a in archived] == history(3)
    assert [a.parent for a in archived[1:]] == [a.hash for a in archived[:-1]]
    assert [a.seq for a in archived] == sorted(a.seq for a in archived)


@pytest.mark.asyncio
async def test_an_edit_archives_a_sibling_branch(store: Store) -> None:
    messages = await commit_turns(store, ALICE, 2)
    await store.commit(turn(ALICE, [*messages[:3], user("question 1, reworded")]))

    archived = await store.archive(ALICE)

    assert len(archived) == 5 + 2
    assert archived[-2].parent == archived[2].hash == archived[3].parent


@pytest.mark.asyncio
async def test_a_chain_is_read_back_from_its_last_message_along_its_branch(
    store: Store, clock: Clock
) -> None:
    messages = await commit_turns(store, ALICE, 2)
    await store.commit(turn(ALICE, [*messages[:3], user("question 1, reworded")]))
    archived = await store.archive(ALICE)
    edited = [*messages[:3], user("question 1, reworded"), archived[-1].message]

    assert await store.chain(ALICE, archived[-1].hash, limit=100) == edited
    assert await store.chain(ALICE, archived[-1].hash, limit=2) == edited[-2:]
    assert await store.chain(ALICE, archived[-1].hash, limit=0) == []
    assert await store.chain(ALICE, archived[4].hash, limit=3) == messages[2:5]
    assert await store.chain(ALICE, "not archived", limit=5) == []
    assert await store.chain(MALLORY, archived[-1].hash, limit=5) == []
    clock.advance(TTL + 1)
    assert await store.chain(ALICE, archived[-1].hash, limit=5) == []


@pytest.mark.asyncio
async def test_archive_pages_in_insertion_order(store: Store) -> None:
    await commit_turns(store, ALICE, 3)

    first = await store.archive(ALICE, limit=4)
    rest = await store.archive(ALICE, limit=100, offset=4)

    assert [a.message for a in first + rest] == history(3)


@pytest.mark.asyncio
async def test_latest_returns_the_last_turns_working_history(store: Store, clock: Clock) -> None:
    assert await store.latest(ALICE) is None
    await store.commit(turn(ALICE, [system(), user("hi")]))
    clock.advance(10)
    working = [system(), {"role": "system", "content": "summary"}, user("again")]
    last = turn(ALICE, [system(), user("hi"), assistant("answer 2"), user("again")])
    await store.commit(TurnCommit(ALICE, last.archive, last.snapshot, working))

    latest = await store.latest(ALICE)

    assert latest is not None
    assert latest.working == working
    assert latest.turns == 2 and latest.position == 4
    assert latest.head == last.snapshot.head and latest.state == {"upto": 4}
    assert latest.updated_at - latest.created_at == 10


@pytest.mark.asyncio
async def test_regenerating_a_turn_refreshes_its_snapshot(store: Store) -> None:
    request = [system(), user("hi")]
    await store.commit(turn(ALICE, request, assistant("first try"), state={"v": 1}))
    await store.commit(turn(ALICE, request, assistant("second try"), state={"v": 2}))

    found = await store.find_snapshot(ALICE, chain_hashes(request))
    latest = await store.latest(ALICE)

    assert found is not None and found.state == {"v": 2}
    assert latest is not None and latest.turns == 2
    assert len(await store.archive(ALICE)) == 4


@pytest.mark.asyncio
async def test_another_tenant_cannot_read_find_extend_or_delete(store: Store) -> None:
    messages = await commit_turns(store, ALICE, 2)
    heads = chain_hashes(messages)

    assert await store.latest(MALLORY) is None
    assert await store.find_snapshot(MALLORY, heads) is None
    assert await store.archive(MALLORY) == []
    assert await store.delete(MALLORY) is False
    await store.commit(turn(MALLORY, [user("mine now")]))

    latest = await store.latest(ALICE)
    assert latest is not None and latest.turns == 2
    assert len(await store.archive(ALICE)) == 5
    assert [c.key for c in await store.list_conversations(ALICE.tenant)] == [ALICE]


@pytest.mark.asyncio
async def test_idle_conversations_expire(store: Store, clock: Clock) -> None:
    messages = await commit_turns(store, ALICE, 2)
    clock.advance(TTL + 1)

    assert await store.latest(ALICE) is None
    assert await store.find_snapshot(ALICE, chain_hashes(messages)) is None
    assert await store.archive(ALICE) == []
    assert await store.list_conversations(None) == []
    assert await store.delete(ALICE) is False


@pytest.mark.asyncio
async def test_a_commit_after_expiry_starts_afresh(store: Store, clock: Clock) -> None:
    messages = await commit_turns(store, ALICE, 2)
    clock.advance(TTL + 1)
    await store.commit(turn(ALICE, [user("new start")]))

    latest = await store.latest(ALICE)

    assert latest is not None and latest.turns == 1
    assert await store.find_snapshot(ALICE, chain_hashes(messages)) is None
    assert len(await store.archive(ALICE)) == 2


@pytest.mark.asyncio
async def test_each_commit_keeps_a_conversation_alive(store: Store, clock: Clock) -> None:
    await commit_turns(store, ALICE, 1)
    clock.advance(TTL - 1)
    await commit_turns(store, ALICE, 2)
    clock.advance(TTL - 1)

    assert await store.latest(ALICE) is not None


@pytest.mark.asyncio
async def test_only_the_newest_snapshots_are_kept(make_store: Factory) -> None:
    store = make_store(max_snapshots=3)
    heads = chain_hashes(await commit_turns(store, ALICE, 5))

    # Turn i forwarded 2 * i + 2 messages, so its snapshot sits at that position.
    kept = [n for n in (2, 4, 6, 8, 10) if await store.find_snapshot(ALICE, [heads[n - 1]])]
    await store.close()

    assert kept == [6, 8, 10]


@pytest.mark.asyncio
async def test_delete_forgets_everything(store: Store) -> None:
    messages = await commit_turns(store, ALICE, 2)

    assert await store.delete(ALICE) is True
    assert await store.delete(ALICE) is False
    assert await store.latest(ALICE) is None
    assert await store.find_snapshot(ALICE, chain_hashes(messages)) is None
    assert await store.archive(ALICE) == []


@pytest.mark.asyncio
async def test_kept_summaries_are_the_newest_few_of_a_stored_conversation_and_go_with_it(
    store: Store, clock: Clock
) -> None:
    await store.keep_summary(ALICE, "early", "nothing to keep it with")
    assert await store.kept_summaries(ALICE) == {}
    await commit_turns(store, ALICE, 1)
    await commit_turns(store, MALLORY, 1)
    for i in range(SUMMARIES_KEPT + 2):
        clock.advance(1)
        await store.keep_summary(ALICE, f"span-{i}", f"summary {i}")
    clock.advance(1)
    await store.keep_summary(ALICE, "span-2", "summary 2, made again")

    # The newest four distinct ones, span-2 as made last.
    assert await store.kept_summaries(ALICE) == {
        "span-2": "summary 2, made again",
        "span-3": "summary 3",
        "span-4": "summary 4",
        "span-5": "summary 5",
    }
    assert await store.kept_summaries(MALLORY) == {}
    clock.advance(STORE_TTL + 1)
    assert await store.kept_summaries(ALICE) == {}, "expired with its conversation"


@pytest.mark.asyncio
async def test_delete_forgets_kept_summaries(store: Store) -> None:
    await commit_turns(store, ALICE, 1)
    await store.keep_summary(ALICE, "span", "summary")
    assert await store.delete(ALICE) is True
    await commit_turns(store, ALICE, 1)
    assert await store.kept_summaries(ALICE) == {}


@pytest.mark.asyncio
async def test_list_conversations_newest_first_per_tenant(store: Store, clock: Clock) -> None:
    second = ConvKey(ALICE.tenant, "chat-2")
    await commit_turns(store, ALICE, 2)
    clock.advance(5)
    await commit_turns(store, second, 1)
    clock.advance(5)
    await commit_turns(store, MALLORY, 1)

    mine = await store.list_conversations(ALICE.tenant)
    everyone = await store.list_conversations(None, limit=2)

    assert [(c.key, c.turns, c.messages) for c in mine] == [(second, 1, 3), (ALICE, 2, 5)]
    assert [c.key for c in everyone] == [MALLORY, second]
    assert [c.key for c in await store.list_conversations(None, offset=2)] == [ALICE]


@pytest.mark.asyncio
async def test_callers_mutating_their_dicts_never_alter_the_store(store: Store) -> None:
    committed = turn(ALICE, [user("original")], state={"summary": "kept"})
    await store.commit(committed)
    committed.archive[0].message["content"] = "tampered"
    committed.snapshot.state["summary"] = "tampered"
    committed.working.append(user("tampered"))
    latest = await store.latest(ALICE)
    assert latest is not None
    latest.working[0]["content"] = "tampered"

    again = await store.latest(ALICE)

    assert again is not None and again.working == [user("original"), assistant("answer 1")]
    assert again.state == {"summary": "kept"}
    assert (await store.archive(ALICE))[0].message == user("original")


@pytest.mark.asyncio
async def test_concurrent_commits_are_each_applied_whole(store: Store) -> None:
    keys = [ConvKey(ALICE.tenant, f"parallel-{i}") for i in range(20)]
    same = [turn(ALICE, [system(), user(f"variant {i}")]) for i in range(30)]

    await asyncio.gather(
        *(commit_turns(store, key, 3) for key in keys), *(store.commit(t) for t in same)
    )

    for key in keys:
        latest = await store.latest(key)
        assert latest is not None and latest.turns == 3
        assert [a.message for a in await store.archive(key)] == history(3)
    latest = await store.latest(ALICE)
    assert latest is not None and latest.turns == 30
    assert len(await store.archive(ALICE)) == 1 + 30 * 2


@pytest.mark.asyncio
async def test_ping_answers_while_open(store: Store) -> None:
    assert await store.ping() is None  # raises StoreError when unreachable


@pytest.mark.asyncio
async def test_sqlite_store_keeps_everything_across_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "restart.db")
    store = SqliteStore(path)
    messages = await commit_turns(store, ALICE, 3)
    await store.close()

    reopened = SqliteStore(path)
    latest = await reopened.latest(ALICE)
    found = await reopened.find_snapshot(ALICE, chain_hashes(messages))
    archived = await reopened.archive(ALICE)
    await reopened.close()

    assert latest is not None and latest.turns == 3
    assert found is not None and found.position == 6
    assert [a.message for a in archived] == messages


@pytest.mark.asyncio
async def test_sweep_at_open_deletes_expired_rows(tmp_path: Path, clock: Clock) -> None:
    path = str(tmp_path / "sweep.db")
    store = SqliteStore(path, ttl_s=TTL, now=clock)
    await commit_turns(store, ALICE, 2)
    await store.close()
    clock.advance(TTL + 1)

    await SqliteStore(path, ttl_s=TTL, now=clock).close()

    with sqlite3.connect(path) as db:
        counts = [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES]
    assert counts == [0, 0, 0, 0]


def test_migrating_twice_is_a_noop(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "m.db", isolation_level=None) as db:
        first = migrate(db)
        schema = db.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()

        assert first and migrate(db) == []
        assert db.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == schema
        assert db.execute("SELECT COUNT(*) FROM _migrations").fetchone()[0] == len(first)


@pytest.mark.asyncio
async def test_a_closed_sqlite_store_raises_store_error(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "closed.db"))
    await store.close()
    await store.close()

    with pytest.raises(StoreError):
        await store.ping()


def test_an_unopenable_sqlite_path_raises_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open"):
        SqliteStore(str(tmp_path / "missing" / "dir" / "x.db"))


@pytest.mark.asyncio
async def test_open_store_names_the_backend_it_cannot_open() -> None:
    assert isinstance(open_store("memory"), MemoryStore)
    with pytest.raises(ConfigError, match="unknown backend"):
        open_store("postgres")


@pytest.mark.asyncio
async def test_an_unreachable_redis_fails_ping_with_store_error() -> None:
    store = open_store("redis", url="redis://127.0.0.1:1/0")
    with pytest.raises(StoreError, match="unreachable"):
        await store.ping()
    await store.close()


@pytest.mark.asyncio
async def test_stores_without_expiry_keep_idle_conversations(make_store: Factory) -> None:
    clock = Clock()
    store = make_store(ttl_s=0, now=clock)
    await commit_turns(store, ALICE, 1)
    clock.advance(10 * 365 * 24 * 3600)

    assert await store.latest(ALICE) is not None
    assert len(await store.list_conversations(None)) == 1
    await store.close()


@pytest.mark.asyncio
async def test_a_stale_expected_turn_count_conflicts_and_writes_nothing(store: Store) -> None:
    key = ConvKey("t", "versioned")
    await store.commit(dataclasses.replace(turn(key, [user("q0")]), expected_turns=0))
    before = await store.latest(key)
    assert before is not None and before.turns == 1
    stale = dataclasses.replace(
        turn(key, [user("q0"), assistant("a"), user("q1")]), expected_turns=0
    )
    with pytest.raises(Conflict):
        await store.commit(stale)
    after = await store.latest(key)
    assert after == before
    assert len(await store.archive(key)) == 2
    await store.commit(dataclasses.replace(stale, expected_turns=1))
    latest = await store.latest(key)
    assert latest is not None and latest.turns == 2


@pytest.mark.asyncio
async def test_an_expired_conversation_counts_as_turn_0_and_a_refused_commit_keeps_it(
    store: Store, clock: Clock
) -> None:
    key = ConvKey("t", "expired")
    await store.commit(turn(key, [user("q0")]))
    await store.commit(turn(key, [user("q0"), assistant("a"), user("q1")]))
    clock.advance(TTL + 1)
    # Built on the turn count the replica saw before expiry: refused, and nothing
    # (not even the expired rows) is touched, as a refused commit promises.
    stale = dataclasses.replace(turn(key, [user("q9")]), expected_turns=2)
    with pytest.raises(Conflict):
        await store.commit(stale)
    clock.advance(-(TTL + 1))
    kept = await store.latest(key)
    # Only Redis keeps expired rows until its own TTL; the memory store's TTLCache
    # and the SQLite sweep may drop them at any time, as designed.
    if not isinstance(store, (MemoryStore, SqliteStore)):
        assert kept is not None and kept.turns == 2
    clock.advance(TTL + 1)
    await store.commit(dataclasses.replace(stale, expected_turns=0))
    fresh = await store.latest(key)
    assert fresh is not None and fresh.turns == 1
    assert [a.message for a in await store.archive(key)] == [user("q9"), assistant("answer 1")]


@pytest.mark.asyncio
async def test_racing_commits_on_one_version_let_exactly_one_win(make_store: Factory) -> None:
    # Two store objects on one file or server stand for two proxy replicas.
    first, second = make_store(), make_store()
    key = ConvKey("t", "race")
    try:
        await first.commit(turn(key, [user("q0")]))
        results = await asyncio.gather(
            *(
                s.commit(
                    dataclasses.replace(
                        turn(key, [user("q0"), assistant("a"), user(f"q{i}")]), expected_turns=1
                    )
                )
                for i, s in enumerate((first, second, first, second))
            ),
            return_exceptions=True,
        )
        assert sum(r is None for r in results) == 1
        assert all(isinstance(r, Conflict) for r in results if r is not None)
        latest = await first.latest(key)
        assert latest is not None and latest.turns == 2
    finally:
        await first.close()
        await second.close()


@pytest.mark.asyncio
async def test_a_conflict_among_concurrent_commits_undoes_only_its_own_turn(store: Store) -> None:
    keys = [ConvKey("t", f"group-{i}") for i in range(6)]
    await store.commit(turn(keys[3], [user("q0")]))
    commits = [
        dataclasses.replace(turn(k, [user("q0"), assistant("a"), user("q1")]), expected_turns=0)
        for k in keys
    ]
    results = await asyncio.gather(*(store.commit(c) for c in commits), return_exceptions=True)
    assert [isinstance(r, Conflict) for r in results] == [i == 3 for i in range(6)]
    for i, key in enumerate(keys):
        latest = await store.latest(key)
        assert latest is not None and latest.turns == 1
        assert latest.working == (turn(key, [user("q0")]) if i == 3 else commits[i]).working
        found = await store.find_snapshot(key, chain_hashes(commits[i].working))
        assert found is not None and found.position == (1 if i == 3 else 3)


# -- search: FTS5 BM25 and stored vectors, the same for every backend ---------------------------

MUSEUM_ARGS = '{"museum": "Rijksmuseum", "day": "Tuesday"}'
PASSPORT = "My passport number is X1234567 and it expires on 14 March 2031."


def travel_chat() -> list[Message]:
    """One fact at turn 2, one tool call at turn 3, and walks planned at every other turn."""
    walks: list[Message] = []
    for day in range(2, 10):
        walks += [
            assistant("Done."),
            user(f"Day {day}: plan a walk in district {day} with coffee."),
        ]
    return [
        system("You are a travel agent."),
        user("Day one: plan a walk around the old town with coffee stops."),
        assistant("Start at the cathedral, then coffee at the market."),
        user(PASSPORT),
        assistant("Noted."),
        user("Book the museum for the day after."),
        assistant(None, tool_calls=[call("c1", "book_museum", MUSEUM_ARGS)]),
        tool("c1", "Rijksmuseum booked for Tuesday at 10:00, ticket 55-AB."),
        user("Booked?"),
        assistant("Booked."),
        *walks[1:],
    ]


SEARCHED = sum(m["role"] != "system" for m in travel_chat()) + 1  # with the stored answer
LAST_TURN = sum(m["role"] == "user" for m in travel_chat())


@pytest.mark.asyncio
async def test_search_finds_the_fact_with_its_turn_and_role(store: Store) -> None:
    await store.commit(turn(ALICE, travel_chat()))
    hits = await store.search(ALICE, ["passport", "expire"], limit=5)
    assert [(h.turn, h.role, h.text) for h in hits] == [(2, "user", PASSPORT)]
    tool_hits = await store.search(ALICE, ["rijksmuseum", "tuesday"], limit=5)
    # The tool result, and the call whose arguments are quoted with the function name.
    assert sorted((h.turn, h.role) for h in tool_hits) == [(3, "assistant"), (3, "tool result")]
    texts = {h.role: h.text for h in tool_hits}
    assert texts["assistant"] == f"book_museum({MUSEUM_ARGS})"
    assert "ticket 55-AB" in texts["tool result"]


@pytest.mark.asyncio
async def test_search_has_a_relevance_floor(store: Store) -> None:
    await store.commit(turn(ALICE, travel_chat()))
    # Words the conversation never used, and words it uses everywhere, find nothing.
    assert await store.search(ALICE, ["pasta", "recipe", "sauce"], limit=5) == []
    assert await store.search(ALICE, ["plan", "walk", "coffee", "pasta"], limit=5) == []
    # New words do not drown an old subject: a specific word seen before is enough.
    hits = await store.search(ALICE, ["passport", "lasagne", "renewal"], limit=5)
    assert [h.text for h in hits] == [PASSPORT]
    # A word said in one or two messages is enough alone: "passport" (said once) and
    # "rijksmuseum" (twice, in the museum call and its result) each bring theirs back.
    hits = await store.search(ALICE, ["passport", "rijksmuseum"], limit=5)
    assert sorted(h.role for h in hits) == ["assistant", "tool result", "user"]
    assert PASSPORT in [h.text for h in hits]
    # A statement's words need their share: "rijksmuseum" alone does not carry
    # "plan", "walk" and "district", said in most of the chat.
    said = ["rijksmuseum", "plan", "walk", "district"]
    assert await store.search(ALICE, said, limit=5, asks=False) == []
    assert len(await store.search(ALICE, said, limit=5)) == 2
    assert await store.search(ALICE, [], limit=5) == []
    assert await store.search(ALICE, ["passport", "expires"], limit=0) == []


SAID = st.lists(
    st.sampled_from(["Hey Evan!", "walk", "coffee", "passport", "expires", "saw", "see", "bear"]),
    min_size=1,
    max_size=8,
).map(" ".join)
ASKED = st.lists(st.sampled_from(["Evan", "walk", "passport", "expires", "see", "bear", "new"]))


@given(st.lists(SAID, min_size=1, max_size=30), ASKED, st.integers(1, 10), st.booleans())
def test_messages_no_store_holds_are_searched_as_their_archive_will_be(
    said: list[str], words: list[str], limit: int, asks: bool
) -> None:
    messages = [system(), *(user(t) if i % 2 else assistant(t) for i, t in enumerate(said))]
    commit = turn(ALICE, messages)

    async def archived() -> list[SearchHit]:
        store = MemoryStore(ttl_s=TTL)
        try:
            await store.commit(commit)
            return await store.search(ALICE, words, limit=limit, asks=asks)
        finally:
            await store.close()

    assert search_messages(commit.working, [(words, asks)], limit) == [asyncio.run(archived())]


def chat_between_friends() -> list[Message]:
    """Maya greets Evan by name every time; Evan says what he drives once, asked about his car."""
    messages: list[Message] = [system()]
    for day in range(1, 13):
        messages += [
            user(f"Hey Evan! Day {day} was long, the train was late again."),
            assistant(f"Hi Maya, sorry to hear. Day {day} here was quiet."),
        ]
    messages[9:9] = [
        user("Are you still driving that old car, Evan?"),
        assistant("No, I traded it in for a silver Prius last weekend."),
    ]
    return messages


@pytest.mark.asyncio
async def test_search_leaves_out_the_names_the_sides_call_each_other(store: Store) -> None:
    messages = chat_between_friends()
    await store.commit(turn(ALICE, messages))
    # "evan" is in every greeting: it would rank them first, and carry the floor's weight.
    hits = await store.search(ALICE, ["evan", "driving"], limit=5)
    assert [h.text for h in hits] == [messages[9]["content"]]
    # A name said of someone rather than to them is an ordinary word.
    assert await store.search(ALICE, ["maya"], limit=5) == []
    other = [system(), user("My cousin Maya moved to Lisbon."), assistant("Nice."), user("ok")]
    await store.commit(turn(MALLORY, other))
    assert [h.text for h in await store.search(MALLORY, ["maya"], limit=5)] == [other[1]["content"]]


@pytest.mark.asyncio
async def test_a_word_given_with_its_forms_matches_any_and_weighs_as_one(store: Store) -> None:
    messages = chat_between_friends()
    messages[5:5] = [
        user("On our last hike we saw a black bear near the trail."),
        assistant("A bear! Glad you are safe."),
    ]
    await store.commit(turn(ALICE, messages))
    see = ("see", "saw", "seen")
    (hit,) = await store.search(ALICE, [see, "hike"], limit=5)
    assert hit.text == messages[5]["content"]
    # Without its past form "see" is a word the chat never used, and in a statement the
    # hike alone does not carry half the weight of words three of which are new.
    said = ["see", "hike", "forest", "river"]
    assert await store.search(ALICE, said, limit=5, asks=False) == []
    (hit,) = await store.search(ALICE, [see, *said[1:]], limit=5, asks=False)
    assert hit.text == messages[5]["content"]
    # A question needs no share: the hike, said once, is what it asks about.
    assert [h.text for h in await store.search(ALICE, said, limit=5)] == [hit.text]
    # One word whatever its case, its forms merged.
    again = await store.search(ALICE, ["see", "Hike", see, "hike", "forest", "river"], limit=5)
    assert [h.text for h in again] == [hit.text]


@pytest.mark.asyncio
async def test_a_question_naming_whom_it_asks_about_needs_only_a_specific_word(
    store: Store,
) -> None:
    messages = chat_between_friends() * 3  # 75 messages: a word in 3 of them is specific
    studio = [
        "Pottery class was great: I threw a pitcher on the wheel at the studio.",
        "The studio is closed this week.",
        "Maya, the studio has a new kiln!",
    ]
    for at, text in zip((10, 30, 50), studio, strict=True):
        messages[at] = user(text)
    await store.commit(turn(ALICE, messages))
    # Asked about Evan in the asker's own words: three of them never said, so "studio"
    # carries less than half the question's weight.
    asked = ["Evan", "ceramic", "piece", "create", "studio"]
    hits = await store.search(ALICE, asked, limit=5)
    assert sorted(h.text for h in hits) == sorted(studio)
    # The same words naming no one (a question to the other side) need their share, and
    # an identifier ("UserService") names no one either.
    assert await store.search(ALICE, asked[1:], limit=5) == []
    assert await store.search(ALICE, ["UserService", *asked[1:]], limit=5) == []
    assert await store.search(ALICE, asked, limit=5, asks=False) == []


@pytest.mark.asyncio
async def test_a_relation_is_searched_by_the_names_it_is_called_by(store: Store) -> None:
    messages = chat_between_friends()
    told = "Family news: my little sister Rosa is moving to Seattle."
    later = "I spent the weekend at Rosa's new place. We went kayaking!"
    messages[3], messages[15] = user(told), user(later)
    messages[7] = assistant("My friend Maya says the museum is worth it.")
    await store.commit(turn(ALICE, messages))
    # "What did Evan and his sister do when he went to visit?": only "Rosa" finds the visit.
    hits = await store.search(ALICE, ["Evan", "sister", "visit", "together"], limit=5)
    assert sorted(h.text for h in hits) == sorted([told, later])
    # A name the sides call each other by ("Hi Maya") is no friend's other name.
    hits = await store.search(ALICE, ["Evan", "friend", "museum"], limit=5)
    assert [h.text for h in hits] == [messages[7]["content"]]


@pytest.mark.asyncio
async def test_a_relative_is_searched_by_every_name_the_relation_goes_by(store: Store) -> None:
    messages = chat_between_friends()
    came = "My dad Joe flew in for a week. Now the whole lab wants to adopt him."
    cooked = "Joe cooked biryani for everyone on Friday."
    kids = "Our child starts school on Monday, finally."
    messages[3], messages[15], messages[19] = user(came), user(cooked), user(kids)
    await store.commit(turn(ALICE, messages))
    # Asked by "father", told by "dad", then by his name.
    hits = await store.search(ALICE, recall.terms("What is Priya's father up to?"), limit=5)
    assert sorted(h.text for h in hits) == sorted([came, cooked])
    # "children" is "child" to Porter's eyes only through the list: its plural is irregular.
    hits = await store.search(ALICE, recall.terms("When do Priya's children start?"), limit=5)
    assert [h.text for h in hits] == [kids]


@pytest.mark.asyncio
async def test_a_day_a_word_also_written_in_lower_case_or_one_of_many_names_is_no_alias(
    store: Store,
) -> None:
    messages = chat_between_friends() * 4  # 100 messages: a word in 5 of them is specific
    dog = "Our dog Max chewed the sofa."
    tokens = "I set max tokens to 500 and it still cut off."
    friends = [f"My friend {n} came over." for n in ("Ana", "Bea", "Cai", "Dov")]
    mom = "Lunch with my mom Friday: she is doing much better."
    messages[3], messages[5], messages[15] = user(dog), user(tokens), user("Ana is funny.")
    messages[25], messages[27] = user(mom), user("The release ships on Friday, fingers crossed.")
    for at, text in zip((17, 19, 21, 23), friends, strict=True):
        messages[at] = user(text)
    await store.commit(turn(ALICE, messages))
    # "How is Evan's mom?": the release is not what "Friday" says of her.
    assert [h.text for h in await store.search(ALICE, ["Evan", "mom"], limit=5)] == [mom]
    # "max" is a word here too: the dog's question does not bring the tokens back.
    assert [h.text for h in await store.search(ALICE, ["Evan", "dog"], limit=5)] == [dog]
    # Four friends named: "Evan's friend" is no one of them in particular ("Ana is funny"
    # does not come back with them).
    hits = await store.search(ALICE, ["Evan", "friend"], limit=5)
    assert sorted(h.text for h in hits) == sorted(friends)


@pytest.mark.asyncio
async def test_a_hit_that_asks_carries_what_answered_it(store: Store) -> None:
    messages = chat_between_friends()
    await store.commit(turn(ALICE, messages))
    (hit,) = await store.search(ALICE, ["driving"], limit=5)
    assert [(r.role, r.text) for r in hit.replies] == [("assistant", messages[10]["content"])]
    # A statement carries nothing; the answer is its own hit.
    (answer,) = await store.search(ALICE, ["prius"], limit=5)
    assert answer.replies == ()


@pytest.mark.parametrize("between", ["Ok.", "Got it, thanks!", None])
@pytest.mark.asyncio
async def test_a_conversation_sent_as_user_messages_carries_the_next_one_as_the_reply(
    store: Store, between: str | None
) -> None:
    # Both friends' turns sent as user messages naming the speaker, the assistant
    # acknowledging each one (or not answering at all): the answer is the next user message.
    said = [m for m in chat_between_friends() if m["role"] != "system"]
    messages: list[Message] = [system()]
    for m in said:
        speaker = "Maya" if m["role"] == "user" else "Evan"
        messages.append(user(f"{speaker}: {m['content']}"))
        if between is not None:
            messages.append(assistant(between))
    await store.commit(turn(ALICE, messages))
    (hit,) = await store.search(ALICE, ["driving"], limit=5)
    assert hit.text == "Maya: Are you still driving that old car, Evan?"
    reply = [("user", "Evan: No, I traded it in for a silver Prius last weekend.")]
    nod = [] if between is None else [("assistant", between)]
    assert [(r.role, r.text) for r in hit.replies] == nod + reply


@pytest.mark.asyncio
async def test_an_answer_that_says_something_ends_the_reply_at_the_asking_role(
    store: Store,
) -> None:
    # "Yes, a Prius." answers: the user's next message is theirs, not a reply.
    messages = chat_between_friends()
    messages[10] = assistant("Yes, a Prius.")
    await store.commit(turn(ALICE, messages))
    (hit,) = await store.search(ALICE, ["driving"], limit=5)
    assert [r.text for r in hit.replies] == ["Yes, a Prius."]


@pytest.mark.asyncio
async def test_a_short_answer_is_kept_when_the_next_message_comes_along(store: Store) -> None:
    # "No." reads as a nod, so the asker's next message comes too; the answer stays.
    messages = chat_between_friends()
    messages[10] = assistant("No.")
    await store.commit(turn(ALICE, messages))
    (hit,) = await store.search(ALICE, ["driving"], limit=5)
    assert [r.text for r in hit.replies] == ["No.", messages[11]["content"]]


@pytest.mark.asyncio
async def test_an_answer_the_client_replaced_comes_along_with_its_replacement(
    store: Store,
) -> None:
    messages = chat_between_friends()
    # The proxy stored the upstream's answer to the question; the client then sent its own.
    await store.commit(turn(ALICE, messages[:10]))
    stored = (await store.archive(ALICE))[-1].message
    assert stored["role"] == "assistant" and stored != messages[10]
    await store.commit(turn(ALICE, messages))
    (hit,) = await store.search(ALICE, ["driving"], limit=5)
    assert [r.text for r in hit.replies] == [stored["content"], messages[10]["content"]]


@pytest.mark.asyncio
async def test_search_ranks_by_bm25_and_stays_in_its_conversation(store: Store) -> None:
    await store.commit(turn(ALICE, travel_chat()))
    other = [system(), user("My passport expires soon, my passport is old."), assistant("Ok.")]
    await store.commit(turn(MALLORY, other))
    hits = await store.search(ALICE, ["passport", "expires", "march"], limit=5)
    assert [h.text for h in hits] == [PASSPORT]
    mallory = await store.search(MALLORY, ["passport", "expires"], limit=5)
    assert [h.text for h in mallory] == [other[1]["content"]]
    assert await store.search(ConvKey("c" * 64, "nobody"), ["passport", "expires"], limit=5) == []


@pytest.mark.asyncio
async def test_search_catches_up_with_new_turns_and_forgets_deleted_ones(store: Store) -> None:
    messages = travel_chat()
    await store.commit(turn(ALICE, messages))
    assert await store.search(ALICE, ["volcano", "hike"], limit=5) == []
    messages += [assistant("Harbour walk planned."), user("Can we add a volcano hike on day 3?")]
    await store.commit(turn(ALICE, messages))
    hits = await store.search(ALICE, ["volcano", "hike"], limit=5)
    assert [(h.turn, h.text) for h in hits] == [(LAST_TURN + 1, messages[-1]["content"])]
    assert await store.delete(ALICE)
    assert await store.search(ALICE, ["volcano", "hike"], limit=5) == []
    # A new conversation under the same id starts from nothing.
    await store.commit(turn(ALICE, [system(), user("Tell me about passports."), assistant("Ok")]))
    assert await store.search(ALICE, ["volcano", "hike"], limit=5) == []


@pytest.mark.asyncio
async def test_search_skips_expired_conversations(store: Store, clock: Clock) -> None:
    await store.commit(turn(ALICE, travel_chat()))
    assert await store.search(ALICE, ["passport", "expires"], limit=5)
    clock.advance(TTL + 1)
    assert await store.search(ALICE, ["passport", "expires"], limit=5) == []


def unit(*values: float) -> bytes:
    from proxy.store.vectors import unit_vector

    return unit_vector(values)


@pytest.mark.asyncio
async def test_vectors_are_stored_per_message_and_ranked_by_cosine(store: Store) -> None:
    await store.commit(turn(ALICE, travel_chat()))
    pending = await store.unembedded(ALICE, "emb", limit=100)
    # user, assistant, tool and assistant-with-call messages; the system prompt is not searched.
    assert len(pending) == SEARCHED and pending == sorted(pending)
    assert pending[2][1] == PASSPORT
    # Everything gets an orthogonal-ish vector; the passport message points along x.
    vectors = [(seq, unit(0, 1, i)) for i, (seq, _) in enumerate(pending)]
    vectors[2] = (pending[2][0], unit(1, 0, 0))
    await store.put_vectors(ALICE, "emb", vectors[:5])
    assert [s for s, _ in await store.unembedded(ALICE, "emb", limit=100)] == [
        s for s, _ in pending[5:]
    ]
    assert await store.unembedded(ALICE, "other-model", limit=3) == pending[:3]
    await store.put_vectors(ALICE, "emb", vectors[5:])
    assert await store.unembedded(ALICE, "emb", limit=100) == []

    hits = await store.nearest(ALICE, "emb", unit(1, 0.1, 0), limit=3, min_similarity=0.5)
    assert [(h.turn, h.text) for h in hits] == [(2, PASSPORT)]
    assert hits[0].score == pytest.approx(0.995, abs=0.01)
    several = await store.nearest(ALICE, "emb", unit(0, 1, 0), limit=3, min_similarity=0.0)
    assert len(several) == 3 and several[0].score >= several[1].score >= several[2].score
    # Other models and other dimensions never mix.
    assert await store.nearest(ALICE, "other-model", unit(1, 0, 0), limit=3, min_similarity=0) == []
    assert await store.nearest(ALICE, "emb", unit(1, 0), limit=3, min_similarity=0) == []
    assert await store.delete(ALICE)
    assert await store.nearest(ALICE, "emb", unit(1, 0, 0), limit=3, min_similarity=0) == []


@pytest.mark.asyncio
async def test_a_search_within_one_branch_never_reads_another(store: Store) -> None:
    """Two chats that open alike are branches of one conversation: a search given one
    branch's chain hashes finds neither the other's messages nor its answers."""
    opening = [system(), user("Hi"), assistant("Hello!")]
    asked = user("Where is the spare key hidden?")
    mine = [*opening, asked, assistant("In the garage drawer, next to the tape.")]
    theirs = [*opening, user("My bank password is hunter2, keep it safe.")]
    await store.commit(turn(ALICE, theirs, assistant("Noted, your bank password is safe.")))
    await store.commit(turn(ALICE, [*theirs[:3], asked], assistant("Under the blue flowerpot.")))
    await store.commit(turn(ALICE, mine[:4], mine[4]))
    branch = frozenset(chain_hashes(mine))
    words = ["bank", "password", "hunter2"]

    assert await store.search(ALICE, words, limit=5), "found when every branch is searched"
    assert await store.search(ALICE, words, limit=5, within=branch) == []
    (found,) = await store.search(ALICE, ["spare", "key", "hidden"], limit=5, within=branch)
    assert found.text == asked["content"]
    assert [r.text for r in found.replies] == ["In the garage drawer, next to the tape."]
    every = await store.search(ALICE, ["spare", "key", "hidden"], limit=5)
    assert "Under the blue flowerpot." in [r.text for h in every for r in h.replies]

    pending = await store.unembedded(ALICE, "emb", limit=100)
    await store.put_vectors(ALICE, "emb", [(seq, unit(1, 0, seq / 10)) for seq, _ in pending])
    near = await store.nearest(ALICE, "emb", unit(1, 0, 0), limit=20, min_similarity=0.0)
    assert any("hunter2" in h.text for h in near)
    mine_only = await store.nearest(
        ALICE, "emb", unit(1, 0, 0), limit=20, min_similarity=0.0, within=branch
    )
    assert mine_only and not any("hunter2" in h.text or "flowerpot" in h.text for h in mine_only)


@pytest.mark.asyncio
async def test_other_branches_never_crowd_a_branchs_own_nearest_hit_out(store: Store) -> None:
    opening = [system(), user("Hi"), assistant("Hello!")]
    mine = [*opening, user("My spare key is under the blue flowerpot."), assistant("Noted.")]
    await store.commit(turn(ALICE, mine[:4], mine[4]))
    for i in range(10):  # ten other chats that opened alike
        await store.commit(turn(ALICE, [*opening, user(f"user {i} on keys")], assistant("ok")))
    pending = await store.unembedded(ALICE, "emb", limit=1000)
    near = {"flowerpot": unit(1, 0.2, 0), "user ": unit(1, 0.05, 0)}
    vectors = [
        (seq, next((v for word, v in near.items() if word in text), unit(0, 0, 1)))
        for seq, text in pending
    ]
    await store.put_vectors(ALICE, "emb", vectors)
    found = await store.nearest(
        ALICE,
        "emb",
        unit(1, 0, 0),
        limit=3,
        min_similarity=0.5,
        within=frozenset(chain_hashes(mine)),
    )
    assert [h.text for h in found] == ["My spare key is under the blue flowerpot."]


def a_session_in_one_message() -> list[Message]:
    """A whole exchange pasted as one message: 30 lines, one of them the fact."""
    lines = [f"Maya: Day {day} was long, the train was late again." for day in range(30)]
    lines[17] = "Evan: I traded my old car in for a silver Prius last weekend."
    return [system(), user("\n".join(lines)), assistant("ok"), user("Thanks.")]


@pytest.mark.asyncio
async def test_a_long_message_is_searched_by_its_passages(store: Store) -> None:
    messages = a_session_in_one_message()
    await store.commit(turn(ALICE, messages))
    (hit,) = await store.search(ALICE, ["prius"], limit=5)
    # The passage with the fact, not the whole session: it is what the block quotes.
    assert "silver Prius" in hit.text and hit.text in messages[1]["content"]
    assert len(hit.text) <= english.PASSAGE + 100 < len(messages[1]["content"])
    # Embeddings read the message whole, once.
    pending = await store.unembedded(ALICE, "emb", limit=100)
    texts = [text for _, text in pending]
    assert texts[:3] == [m["content"] for m in messages[1:]] and len(texts) == 4  # and the answer
    await store.put_vectors(
        ALICE, "emb", [(seq, unit(1, 0.1 * i, 0)) for i, (seq, _) in enumerate(pending)]
    )
    (best, *_) = await store.nearest(ALICE, "emb", unit(1, 0, 0), limit=5, min_similarity=0.5)
    assert best.text == messages[1]["content"]


@pytest.mark.asyncio
async def test_a_question_in_a_long_message_carries_what_answered_it(store: Store) -> None:
    # A whole exchange in one message, cut into passages between the question and
    # the line that answers it: that line's passage comes first, then the reply.
    lines = [f"Maya: Day {day} was long, the train was late again." for day in range(30)]
    lines[7] = "Maya: Are you still driving that old car?"
    lines[8] = "Evan: No, I traded it in for a silver Prius last weekend."
    messages = [system(), user("\n".join(lines)), assistant("ok"), user("Thanks.")]
    await store.commit(turn(ALICE, messages))
    (hit,) = await store.search(ALICE, ["driving"], limit=5)
    assert "still driving" in hit.text and "silver Prius" not in hit.text
    assert [r.role for r in hit.replies] == ["user", "assistant"]
    assert hit.replies[0].text.startswith(lines[8]) and hit.replies[1].text == "ok"


@pytest.mark.asyncio
async def test_a_question_before_pasted_text_carries_the_answer_after_it(store: Store) -> None:
    pasted = "\n".join(f"setting_{i} = value_{i}" for i in range(60))
    answer = "The port is wrong: staging listens on 5433."
    messages = [
        system(),
        user(f"What is wrong with this config?\n{pasted}"),
        assistant(answer),
        user("Thanks, fixed."),
    ]
    await store.commit(turn(ALICE, messages))
    (hit,) = await store.search(ALICE, ["config"], limit=5)
    assert hit.text.startswith("What is wrong")
    (rest, reply) = hit.replies
    assert rest.role == "user" and rest.text in pasted and not pasted.startswith(rest.text)
    assert (reply.role, reply.text) == ("assistant", answer)


@pytest.mark.asyncio
async def test_the_reply_to_a_question_is_the_whole_next_message(store: Store) -> None:
    # Each speaker's turn a user message, "ok" between: the answer is a long message,
    # carried whole (the block quotes it around its match), not its first passage.
    lines = [f"Evan: Day {day} was long, the train was late again." for day in range(30)]
    lines[20] = "I started learning the cello, my teacher is strict but kind."
    answer = "\n".join(lines)
    messages = [
        system(),
        user("Maya: Are you still thinking about picking up an instrument?"),
        assistant("ok"),
        user(answer),
        assistant("ok"),
        user("Maya: Nice."),
    ]
    await store.commit(turn(ALICE, messages))
    (hit,) = await store.search(ALICE, ["instrument"], limit=5)
    assert [(r.role, r.text) for r in hit.replies] == [("assistant", "ok"), ("user", answer)]


def searched_with_reads(
    messages: list[Message], words: list[str], *, forwarded: frozenset[str] = frozenset()
) -> tuple[list[SearchHit], int]:
    """`search_index.search` over `messages`, and how many reads of rows after a hit it made."""
    db = sqlite3.connect(":memory:")
    search_index.create(db)
    search_index.add(db, 1, [(seq, "", m) for seq, m in enumerate(messages)])
    reads: list[str] = []
    db.set_trace_callback(lambda sql: reads.append(sql) if "rowid >" in sql else None)
    hits = search_index.search(db, 1, words, limit=60, forwarded=forwarded)
    db.close()
    return hits, len(reads)


def test_a_reply_is_read_only_as_far_as_it_goes() -> None:
    # The question opens a long conversation: its message's rest and its reply are each
    # a read of the rows after it, never the whole archive.
    days = [user(f"Day {day} was long, the train was late again.") for day in range(500)]
    messages = [user("Are you still driving that old car?"), assistant("No, a Prius."), *days]
    (hit,), reads = searched_with_reads(messages, ["driving"])
    assert [r.text for r in hit.replies] == ["No, a Prius."] and reads == 2
    # The asker's long paste after the answer ends the reply unread.
    paste = user("\n".join(f"setting_{i} = value_{i}" for i in range(3000)))
    (hit,), reads = searched_with_reads([*messages[:2], paste, *days], ["driving"])
    assert [r.text for r in hit.replies] == ["No, a Prius."] and reads == 2


def test_the_messages_after_a_long_message_are_read_once_for_all_its_questions() -> None:
    lines = [f"Maya: Day {day} was long, the train was late again." for day in range(3000)]
    lines[::60] = [f"Maya: Still driving the old car on day {day}?" for day in range(50)]
    messages = [user("\n".join(lines)), assistant("ok"), user("Thanks.")]
    hits, reads = searched_with_reads(messages, ["driving"])
    assert len(hits) == 50 and all(h.replies[-1].text == "ok" for h in hits)
    # A read of its next passage each, and one of what followed the message (two: the
    # last passage's question has no next passage, and reads on).
    assert reads <= len(hits) + 2


def test_a_forwarded_hit_carries_no_reply_nor_counts_among_the_replied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replies_module, "REPLIED", 1)
    messages = [
        user("Are you still driving that old car, still driving it daily?"),
        assistant("Yes."),
        user("Are you still driving to work?"),
        assistant("No, I take the train."),
    ]
    forwarded = frozenset([messages[0]["content"]])
    first, second = searched_with_reads(messages, ["driving"], forwarded=forwarded)[0]
    assert first.text in forwarded and first.replies == ()
    assert [r.text for r in second.replies] == ["No, I take the train."]
    # Not forwarded, the first takes the one place.
    first, second = searched_with_reads(messages, ["driving"])[0]
    assert [r.text for r in first.replies] == ["Yes.", messages[2]["content"]]
    assert second.replies == ()


def test_a_blank_stretch_in_a_long_message_is_no_reply() -> None:
    question = "Maya: Are you still driving that old car?"
    answer = "Evan: No, I traded it in for a silver Prius last weekend."
    messages = [user(question + "\n" * 900 + answer), assistant("ok"), user("Thanks.")]
    (hit,), _ = searched_with_reads(messages, ["driving"])
    assert [r.text for r in hit.replies] == [answer, "ok"]


@pytest.mark.asyncio
async def test_sqlite_deleting_a_conversation_drops_its_index_rows(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    dated = [*travel_chat(), user("(8 May 2023) Back again!")]
    try:
        await store.commit(turn(ALICE, dated))
        await store.commit(turn(MALLORY, travel_chat()))
        (hit, *_) = await store.search(ALICE, ["back"], limit=5)
        assert hit.dated == "8 May 2023"
        assert await store.search(MALLORY, ["passport", "expires"], limit=5)
        await store.put_vectors(ALICE, "emb", [(1, unit(1, 0))])
        assert await store.delete(ALICE)
    finally:
        await store.close()
    db = sqlite3.connect(tmp_path / "s.db")
    rows = db.execute("SELECT COUNT(*) FROM message_search").fetchone()[0]
    vectors = db.execute("SELECT COUNT(*) FROM message_vectors").fetchone()[0]
    progress = db.execute("SELECT COUNT(*) FROM search_progress").fetchone()[0]
    headers = db.execute("SELECT COUNT(*) FROM search_dates").fetchone()[0]
    db.close()
    assert (rows, vectors, progress, headers) == (SEARCHED, 0, 1, 0)  # only Mallory's


@pytest.mark.asyncio
async def test_redis_replicas_index_what_the_other_one_committed(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    a, b = open_store("redis", url=redis_url), open_store("redis", url=redis_url)
    try:
        messages = travel_chat()
        await a.commit(turn(ALICE, messages))
        assert await b.search(ALICE, ["passport", "expires"], limit=5)
        messages += [assistant("Ok."), user("Add a volcano hike on day three.")]
        await a.commit(turn(ALICE, messages))
        found = await b.search(ALICE, ["volcano", "hike"], limit=5)
        assert [h.turn for h in found] == [LAST_TURN + 1]
        # Replaced behind b's back: b notices and re-indexes from scratch.
        assert await a.delete(ALICE)
        await a.commit(turn(ALICE, [system(), user("Volcano hike gear list?"), assistant("Boots")]))
        hits = await b.search(ALICE, ["volcano", "hike"], limit=5)
        assert [(h.turn, h.text) for h in hits] == [(1, "Volcano hike gear list?")]
    finally:
        await a.close()
        await b.close()


@pytest.mark.asyncio
async def test_redis_replicas_share_vectors_through_redis(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    a, b = open_store("redis", url=redis_url), open_store("redis", url=redis_url)
    try:
        await a.commit(turn(ALICE, travel_chat()))
        pending = await a.unembedded(ALICE, "emb", limit=100)
        passport = next(seq for seq, text in pending if text == PASSPORT)
        await a.put_vectors(
            ALICE, "emb", [(s, unit(1, 0) if s == passport else unit(0, 1)) for s, _ in pending]
        )
        # b never embedded anything: it takes a's vectors instead of asking for new ones.
        assert await b.unembedded(ALICE, "emb", limit=100) == []
        hits = await b.nearest(ALICE, "emb", unit(1, 0.05), limit=2, min_similarity=0.9)
        assert [h.text for h in hits] == [PASSPORT]
        assert len(await b.unembedded(ALICE, "other", limit=100)) == len(pending)
        assert client.exists(f"context-proxy:c:{ALICE.tenant}:{ALICE.conversation}:vecs")
        assert await b.delete(ALICE)
        assert not client.exists(f"context-proxy:c:{ALICE.tenant}:{ALICE.conversation}:vecs")
    finally:
        client.close()
        await a.close()
        await b.close()


def laid_out(key: ConvKey, history: list[Message], fresh: int) -> TurnCommit:
    """A full-history commit whose messages from position `fresh` on are new this turn."""
    hashes = chain_hashes(history)
    parents = ["", *hashes[:-1]]
    archive = [
        ArchiveEntry(h, p, m)
        for h, p, m in list(zip(hashes, parents, history, strict=True))[fresh:]
    ]
    snapshot = Snapshot(hashes[-2], len(history) - 1, {"upto": len(history) - 1}, 0.0)
    layout = WorkingLayout(leading=1, start=1, fresh=fresh, hashes=tuple(hashes))
    return TurnCommit(key, archive, snapshot, working=history, layout=layout)


@pytest.mark.asyncio
async def test_working_rows_written_by_turn_are_read_back_whole(store: Store, clock: Clock) -> None:
    key = ConvKey("t", "rows")
    first = [system(), user("q0"), assistant("a0")]
    await store.commit(laid_out(key, first, 0))
    second = [*first, user("q1"), assistant("a1")]
    await store.commit(laid_out(key, second, 2))
    latest = await store.latest(key)
    assert latest is not None and latest.working == second
    clock.advance(TTL + 1)  # expired between the lookup and the commit of a continued turn
    third = [*second, user("q2"), assistant("a2")]
    await store.commit(laid_out(key, third, 4))
    latest = await store.latest(key)
    assert latest is not None and latest.working == third and latest.turns == 1


def working_rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT COUNT(*) FROM working").fetchone()[0])


@pytest.mark.asyncio
async def test_a_full_history_working_list_is_described_by_its_chain_until_append_mode(
    tmp_path: Path,
) -> None:
    """No row per working message while the archive holds them all; rows again after append."""
    path = tmp_path / "chain.db"
    store = SqliteStore(str(path))
    key = ConvKey("t", "chain")
    first = [system(), user("q0"), assistant("a0")]
    second = [*first, user("q1"), assistant("a1")]
    # A reduction moved the tail's start: the working list skips positions 1 and 2.
    evicted = dataclasses.replace(
        laid_out(key, [*second, user("q2"), assistant("a2")], 5),
        working=[system(), user("q1"), assistant("a1"), user("q2"), assistant("a2")],
    )
    full = chain_hashes([*second, user("q2"), assistant("a2")])
    layout = WorkingLayout(leading=1, start=3, fresh=5, hashes=(full[0], *full[3:]))
    evicted = dataclasses.replace(evicted, layout=layout)
    try:
        await store.commit(laid_out(key, first, 0))
        await store.commit(laid_out(key, second, 3))
        latest = await store.latest(key)
        assert latest is not None and latest.working == second
        await store.commit(evicted)
        latest = await store.latest(key)
        assert latest is not None and latest.working == evicted.working
        assert working_rows(path) == 0
        await store.commit(turn(key, [user("appended")]))  # append mode: no layout
        latest = await store.latest(key)
        assert latest is not None and working_rows(path) == len(latest.working) > 0
        after = [*evicted.working, user("q3"), assistant("a3")]
        await store.commit(dataclasses.replace(laid_out(key, after, 7), working=after))
        latest = await store.latest(key)
        assert latest is not None and latest.working == after
    finally:
        await store.close()


@pytest.mark.asyncio
async def test_a_replica_that_never_saw_the_new_life_keeps_rows_too(tmp_path: Path) -> None:
    """As above, committed by a process with no memory of the conversation, past turn 1."""
    path = tmp_path / "again-elsewhere.db"
    a, b, c = SqliteStore(str(path)), SqliteStore(str(path)), SqliteStore(str(path))
    key = ConvKey("t", "again")
    old = [system(), user("q0"), assistant("a0")]
    try:
        await a.commit(laid_out(key, old, 0))
        assert await b.delete(key)
        other = [system("other"), user("x"), assistant("y")]
        await b.commit(laid_out(key, other, 0))
        await b.commit(laid_out(key, [*other, user("x2"), assistant("y2")], 3))
        continued = [*old, user("q1"), assistant("a1")]
        await c.commit(laid_out(key, continued, 3))  # a turn built on a's old history
        latest = await c.latest(key)
        assert latest is not None and latest.working == continued
        assert working_rows(path) == len(continued)
    finally:
        for store in (a, b, c):
            await store.close()


@pytest.mark.asyncio
async def test_a_turn_of_a_conversation_deleted_and_begun_again_meanwhile_keeps_rows(
    tmp_path: Path,
) -> None:
    """Its new messages continue a chain the new conversation's archive does not hold."""
    path = tmp_path / "again.db"
    a, b = SqliteStore(str(path)), SqliteStore(str(path))
    key = ConvKey("t", "again")
    old = [system(), user("q0"), assistant("a0")]
    try:
        await a.commit(laid_out(key, old, 0))
        assert await b.delete(key)
        await b.commit(laid_out(key, [system("other"), user("x"), assistant("y")], 0))
        continued = [*old, user("q1"), assistant("a1")]
        await a.commit(laid_out(key, continued, 3))  # built on a's lookup before the delete
        latest = await a.latest(key)
        assert latest is not None and latest.working == continued
        assert working_rows(path) == len(continued)
    finally:
        await a.close()
        await b.close()


@pytest.mark.asyncio
async def test_sqlite_read_only_sees_expired_turns_and_cannot_write(
    tmp_path: Path, clock: Clock
) -> None:
    """What the read-only tools open: no TTL applies, and neither the store nor SQLite writes."""
    path = str(tmp_path / "store.db")
    writer = SqliteStore(path, ttl_s=TTL, now=clock)
    messages = await commit_turns(writer, ALICE, 2)
    await writer.close()
    clock.advance(TTL * 10)

    looker = SqliteStore(path, ttl_s=TTL, now=clock, read_only=True)
    try:
        latest = await looker.latest(ALICE)
        assert latest is not None and latest.turns == 2
        assert len(await looker.archive(ALICE)) == len(messages)
        with pytest.raises(StoreError):
            await looker.commit(turn(ALICE, [*messages, user("more")]))
        with pytest.raises(StoreError):
            await looker.delete(ALICE)
        with pytest.raises(StoreError, match="readonly"):  # SQLite's own refusal
            await looker.search(ALICE, ["question"], limit=3)
    finally:
        await looker.close()
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM conversations").fetchone() == (1,)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("Oregon", "Last spring I finally moved to Portland, Oregon."),
        ("Jake", "Went to the concert with my brother, Jake. Loved it."),
        ("Lisbon", "Lisbon, what a city! The food was amazing."),
    ],
)
async def test_nearest_leaves_out_only_messages_spoken_to_whom_the_sides_call_so(
    store: Store, name: str, said: str
) -> None:
    """A name after a comma addresses someone only where the conversation calls someone so:
    "Talk soon, Audrey!" is what is said to Audrey, and says nothing of her; "Portland,
    Oregon." names a place, as the conversation's other messages naming it show."""
    chat = [
        system(),
        user("Hey Audrey! How was the week?"),
        assistant(said),
        user(f"I have never been to {name} myself."),
        assistant("Talk soon, Audrey!"),
        user(f"Tell me more about {name} next time."),
        assistant("Thanks, Audrey. Bye!"),
    ]
    await store.commit(turn(ALICE, chat))
    pending = await store.unembedded(ALICE, "emb", limit=100)
    await store.put_vectors(ALICE, "emb", [(seq, unit(1, 0, seq / 10)) for seq, _ in pending])
    near = await store.nearest(
        ALICE, "emb", unit(1, 0, 0), limit=20, min_similarity=0.0, names=["Audrey", name]
    )
    texts = [h.text for h in near]
    assert said in texts and not any("Audrey" in t for t in texts), texts
    every = await store.nearest(ALICE, "emb", unit(1, 0, 0), limit=20, min_similarity=0.0)
    assert "Talk soon, Audrey!" in [h.text for h in every]
