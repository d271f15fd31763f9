"""A conversation's in-process state has one home: bounded, forgotten at once, kept per branch."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from proxy import conversation as conv
from proxy.app import create_app
from proxy.config import load_settings
from proxy.context import AppContext, KeyedLocks
from proxy.conversation import tenant_of
from proxy.fastpath.known import Known
from proxy.mock import MockUpstream
from proxy.outcome import Outcome
from proxy.reduction.types import Reduction
from proxy.store import ArchiveEntry, ConvKey, SqliteStore
from proxy.turn.background import Background
from proxy.turn.commit import _branch
from proxy.turn.sessions import HASH_BYTES, OVERHEAD, Branch, Recalled, Sessions, Unwritten
from proxy.turn.state import SnapshotState

from .factories import system, user

CHAT = "/v1/chat/completions"
KEY = "sk-sessions"
TENANT = tenant_of(KEY)
WINDOW = 1500


def known(size: int) -> Known:
    return Known((), size, b"", (), (), "m", ())


# -- Sessions alone ---------------------------------------------------------------------------

KEYS = [ConvKey("t", f"c{i}") for i in range(5)]
ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["remember", "recalled", "advance", "unwritten", "take", "take every", "forget"]
        ),
        st.sampled_from(KEYS),
        st.integers(0, 3),
        st.integers(0, 3000),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_sessions_stay_bounded_and_forget_leaves_nothing(steps: list[Any]) -> None:
    sessions = Sessions(max_bytes=8000, max_openings=6)
    for op, key, n, size in steps:
        if op == "remember":
            sessions.remember(key, known(size), [(key.conversation, n)])
        elif op == "recalled":
            sessions.recalled(key, Recalled(b"q", "x" * size, n))
        elif op == "advance":
            branch = sessions.branch(key, f"head{n}")
            branch.stretch = (n, 0)
            sessions.advance(key, branch, f"head{n + 1}")
            sessions.prepared(key, branch, {"span": "s" * size}, {"span": 1})
        elif op == "unwritten":
            sessions.unwritten(key, Unwritten(_written, size))
        elif op == "take":
            before = sessions.get(key)
            kept = before.unwritten if before is not None else None
            assert sessions.take_unwritten(key) is kept
            assert sessions.take_unwritten(key) is None  # taken once
        elif op == "take every":
            held = [s.unwritten for k in KEYS if (s := sessions.get(k)) and s.unwritten]
            taken = sessions.take_every_unwritten()
            assert len(taken) == len(held) and all(any(t is h for h in held) for t in taken)
            assert all(sessions.take_unwritten(k) is None for k in KEYS)
        else:
            sessions.forget(key)
            assert not sessions.holds(key)
            assert sessions.take_unwritten(key) is None
        held = [s for k in KEYS if (s := sessions.get(k)) is not None]
        assert sum(s.weight for s in held) <= 8000
        for k in KEYS:
            session = sessions.get(k)
            for mark in session.openings if session is not None else ():
                assert sessions.opened_by(mark) in (k, None)
        # Every opening leads to a session that is still held.
        for k in KEYS:
            for n2 in range(4):
                found = sessions.opened_by((k.conversation, n2))
                assert found is None or found in sessions


async def _written() -> bool:
    return True


def test_a_branch_follows_its_turns_and_the_oldest_branches_go() -> None:
    sessions = Sessions()
    key = KEYS[0]
    first = sessions.branch(key, "h1")
    assert sessions.branch(key, "h1") is not first, "an unkept branch is not remembered"
    first.stretch = (4, 0)
    sessions.advance(key, first, "h2")
    assert sessions.branch(key, "h2") is first
    sessions.advance(key, first, "h3")
    assert sessions.branch(key, "h3") is first and sessions.branch(key, "h2") is not first
    others = []
    for i in range(4):
        branch = Branch(stretch=(i, 0))
        sessions.advance(key, branch, f"other{i}")
        others.append(branch)
    assert sessions.branch(key, "h3") is not first, "the oldest of five branches went"
    assert all(sessions.branch(key, f"other{i}") is b for i, b in enumerate(others))


def test_only_a_deletion_stops_the_turns_under_way_from_being_stored() -> None:
    """A session the bound drops (too large to keep) is forgotten by the process only:
    its turns are stored as usual; a deletion's turns under way are not."""
    sessions = Sessions(max_bytes=5_000)
    began = time.monotonic()
    sessions.remember(KEYS[0], known(10_000))  # past the whole bound: dropped at once
    assert KEYS[0] not in sessions
    assert not sessions.forgotten_since(KEYS[0], began)
    sessions.forget(KEYS[1])
    assert sessions.forgotten_since(KEYS[1], began)
    assert not sessions.forgotten_since(KEYS[1], time.monotonic())


def test_weight_counts_what_a_session_holds() -> None:
    sessions = Sessions()
    key = KEYS[0]
    sessions.remember(key, known(1000))
    sessions.recalled(key, Recalled(b"q", "r" * 300, 1))
    branch = Branch(stretch=(1, 0))
    sessions.advance(key, branch, "h")
    sessions.prepared(key, branch, {"k": "s" * 50}, {"k": 1})
    session = sessions.get(key)
    assert session is not None and session.weight == OVERHEAD + 1000 + 300 + 50
    sessions.answered(key, "resp_1", "h9", frozenset(f"h{i}" for i in range(10)))
    assert session.weight == OVERHEAD + 1000 + 300 + 50 + 10 * HASH_BYTES
    sessions.unwritten(key, Unwritten(_written, 700))
    assert session.weight == OVERHEAD + 1000 + 300 + 50 + 10 * HASH_BYTES + 700
    sessions.forget(key)
    assert sessions.take_unwritten(key) is None
    assert sessions.lineage(key, "h9") == frozenset()


def test_a_kept_turn_replaced_by_another_is_logged_lost(caplog: pytest.LogCaptureFixture) -> None:
    # Two kept at once: an append turn cut while it wrote the kept one let the next
    # turn in, which the store refused too.
    sessions = Sessions()
    sessions.unwritten(KEYS[0], Unwritten(_written, 10))
    sessions.unwritten(KEYS[0], Unwritten(_written, 20))
    assert [r.levelname for r in caplog.records if "not stored" in r.getMessage()] == ["ERROR"]


# -- Through the app ---------------------------------------------------------------------------


def test_a_chained_turn_waiting_for_its_turn_when_the_conversation_is_deleted_is_not_stored(
    tmp_path: Path,
) -> None:
    """Two requests chained to the same answer (a retry): the second waits for the first,
    which the upstream holds; the conversation is deleted meanwhile. Neither brings back
    what the deletion removed."""
    admin = {"params": {"tenant": TENANT}, "headers": {"Authorization": "Bearer adm"}}
    headers = {"Authorization": f"Bearer {KEY}", "X-Conversation-Id": "trip"}
    with proxy(tmp_path, "chained", responses_manage_server_state="true") as (client, upstream):
        body = {"model": "tiny", "input": "Where should we go?"}
        first = client.post("/v1/responses", json=body, headers=headers).json()
        chained = {"model": "tiny", "input": "and then?", "previous_response_id": first["id"]}
        gate = upstream.hold_next()
        locks = ctx_of(client).locks = WatchedLocks()
        lock = locks.get(ConvKey(TENANT, "trip"))
        with ThreadPoolExecutor(2) as pool:
            turns = [pool.submit(client.post, "/v1/responses", json=chained, headers=headers)]
            until(lambda: lock.locked())  # the first holds the conversation's turn
            turns.append(pool.submit(client.post, "/v1/responses", json=chained, headers=headers))
            until(lambda: lock.asked == 2)  # the second has read the stored turn and waits
            deleted = client.delete("/admin/conversations/trip", **admin)
            gate.set()
            answered = [t.result() for t in turns]
        settle(client)
        assert deleted.status_code == 200, deleted.text
        assert [a.status_code for a in answered] == [200, 200]
        gone = client.get("/admin/conversations/trip", **admin)
        assert gone.status_code == 404, gone.text


class WatchedLock(asyncio.Lock):
    """A conversation's lock that counts the turns that asked for it (holding or waiting)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def acquire(self) -> Literal[True]:
        self.asked += 1
        return await super().acquire()


class WatchedLocks(KeyedLocks):
    """One `WatchedLock` a key, kept for the test to look at."""

    def __init__(self) -> None:
        super().__init__()
        self.made: dict[Hashable, WatchedLock] = {}

    def get(self, key: Hashable) -> WatchedLock:
        return self.made.setdefault(key, WatchedLock())


def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the server never got there"
        time.sleep(0.01)


@contextlib.contextmanager
def proxy(tmp_path: Path, name: str, **env: str) -> Iterator[tuple[TestClient, MockUpstream]]:
    upstream = MockUpstream()
    config = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1",
            "CONTEXT_PROXY_AUTH_ADMIN_TOKEN": "adm",
            "CONTEXT_PROXY_REDUCTION_STRATEGY": "summarize",
            **{f"CONTEXT_PROXY_{k.upper()}": v for k, v in env.items()},
        },
        overrides={"models": {"windows": {"tiny": WINDOW}}},
    )
    store = SqliteStore(str(tmp_path / f"{name}.db"))
    app = create_app(config, transport=httpx.ASGITransport(upstream.app), store=store)
    with TestClient(app) as client:
        yield client, upstream


def ctx_of(client: TestClient) -> AppContext:
    ctx: AppContext = client.app_state["ctx"]
    return ctx


def settle(client: TestClient) -> None:
    """Wait until the turns' background work (preparations, embeddings) is done."""
    ctx = ctx_of(client)
    for _ in range(500):
        if not len(ctx.background):
            return
        time.sleep(0.01)
    raise AssertionError("background work did not finish")


def talker(client: TestClient, first: str, conversation: str | None) -> Callable[[str], None]:
    history: list[Any] = [system("You plan trips."), user(first)]
    headers = {"Authorization": f"Bearer {KEY}"}
    if conversation is not None:
        headers["X-Conversation-Id"] = conversation

    def say(text: str) -> None:
        if len(history) > 2:
            history.append(user(text))
        r = client.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
        assert r.status_code == 200, r.text
        history.append(r.json()["choices"][0]["message"])
        settle(client)

    return say


def line(who: str, i: int) -> str:
    return f"{who} asks about day {i}: museums, parks and a long dinner in district {i}."


def test_two_conversations_sharing_a_derived_id_summarise_as_if_apart(tmp_path: Path) -> None:
    """Both begin alike, so their id is the same; each then goes its own way."""
    turns = 40
    apart = 0
    for who in ("ann", "bob"):
        with proxy(tmp_path, who) as (client, upstream):
            say = talker(client, "Where should we go?", None)
            for i in range(turns):
                say(line(who, i))
            apart += len(upstream.summary_requests())
    with proxy(tmp_path, "together") as (client, upstream):
        ann = talker(client, "Where should we go?", None)
        bob = talker(client, "Where should we go?", None)
        for i in range(turns):
            ann(line("ann", i))
            bob(line("bob", i))
        together = len(upstream.summary_requests())
        waits = client.get("/metrics").text
    assert apart >= 4, "the conversations are long enough to be summarised"
    assert together <= apart
    assert "context_proxy_summary_waits_total 0.0" in waits


@contextlib.contextmanager
def two_processes(tmp_path: Path) -> Iterator[tuple[list[TestClient], MockUpstream]]:
    """Two apps on one SQLite file and one upstream, as `serve --workers 2` runs them."""
    upstream = MockUpstream()
    config = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1",
            "CONTEXT_PROXY_REDUCTION_STRATEGY": "summarize",
        },
        overrides={"models": {"windows": {"tiny": WINDOW}}},
    )
    apps = [
        create_app(
            config,
            transport=httpx.ASGITransport(upstream.app),
            store=SqliteStore(str(tmp_path / "shared.db")),
        )
        for _ in range(2)
    ]
    with TestClient(apps[0]) as first, TestClient(apps[1]) as second:
        yield [first, second], upstream


def test_a_summary_prepared_by_one_process_serves_the_turn_another_process_takes(
    tmp_path: Path,
) -> None:
    """Turns alternate between two processes: each neither prepares what the other is
    preparing nor summarises at the crossing what the other prepared, so the
    conversation costs the summaries, and forwards the reductions, of one process."""
    turns = 40

    def run(clients: list[TestClient]) -> list[str]:
        history: list[Any] = [system("You plan trips.")]
        headers = {"Authorization": f"Bearer {KEY}", "X-Conversation-Id": "trip"}
        kinds = []
        for i in range(turns):
            client = clients[i % len(clients)]
            history.append(user(line("ann", i)))
            r = client.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
            assert r.status_code == 200, r.text
            kinds.append(r.headers["x-context-reduction"])
            history.append(r.json()["choices"][0]["message"])
            for each in clients:
                settle(each)
        return kinds

    with proxy(tmp_path, "alone") as (client, upstream):
        alone = run([client])
        summaries = len(upstream.summary_requests())
    with two_processes(tmp_path) as (clients, upstream):
        shared = run(clients)
        assert len(upstream.summary_requests()) == summaries
        waits = [c.get("/metrics").text for c in clients]
    assert summaries >= 3 and "summarized" in alone, "long enough to be summarised"
    assert shared == alone
    assert all("context_proxy_summary_waits_total 0.0" in w for w in waits)


def test_a_summary_prepared_by_a_process_that_serves_no_more_turns_spares_the_crossing_its_wait(
    tmp_path: Path,
) -> None:
    """The first process serves turns until it starts a preparation, then never again (a
    restart, a balancer's choice): the other finds the summary it kept in the store."""
    history: list[Any] = [system("You plan trips.")]
    headers = {"Authorization": f"Bearer {KEY}", "X-Conversation-Id": "trip"}
    with two_processes(tmp_path) as (clients, upstream):
        first, second = clients
        serving = first
        kinds = []
        for i in range(40):
            history.append(user(line("ann", i)))
            r = serving.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
            assert r.status_code == 200, r.text
            kinds.append(r.headers["x-context-reduction"])
            history.append(r.json()["choices"][0]["message"])
            settle(serving)
            if "context_proxy_summaries_prepared_total 1.0" in first.get("/metrics").text:
                serving = second
        assert serving is second, "the first process prepared a summary"
        made = [first.get("/metrics").text, second.get("/metrics").text]
    assert "summarized" in kinds
    assert "context_proxy_summary_waits_total 0.0" in made[1]
    assert "context_proxy_summaries_made_total 0.0" in made[1]
    assert len(upstream.summary_requests()) >= 2


def count(db: Path, table: str) -> int:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        found: int = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    return found


TABLES = (
    "conversations",
    "messages",
    "snapshots",
    "working",
    "message_search",
    "message_vectors",
    "kept_summaries",
)


def test_delete_leaves_nothing_of_the_conversation_in_the_process_or_the_store(
    tmp_path: Path,
) -> None:
    key = ConvKey(TENANT, "trip")
    env = {"recall_enabled": "true", "recall_method": "embeddings"}
    with proxy(tmp_path, "deleted", **env) as (client, _):
        ctx = ctx_of(client)
        say = talker(client, "Where should we go?", "trip")
        for i in range(40):
            say(line("ann", i))
        say("What did I ask about day 3 and its museums?")
        session = ctx.sessions.get(key)
        assert session is not None and session.known is not None
        assert session.recalled is not None and session.branches, "state to forget"
        db = tmp_path / "deleted.db"
        before = {table: count(db, table) for table in TABLES}
        # Working rows are written only where the chain does not describe them.
        assert all(n for table, n in before.items() if table != "working"), before

        r = client.delete(
            "/admin/conversations/trip",
            params={"tenant": TENANT},
            headers={"Authorization": "Bearer adm"},
        )

        assert r.status_code == 200, r.text
        assert not ctx.sessions.holds(key) and not ctx.background.holds(key)
        assert isinstance(ctx.store, SqliteStore) and ctx.store.remembers(key) is False
        assert {table: count(db, table) for table in TABLES} == dict.fromkeys(TABLES, 0)
        assert (
            client.get(
                "/admin/conversations/trip",
                params={"tenant": TENANT},
                headers={"Authorization": "Bearer adm"},
            ).status_code
            == 404
        )


def test_a_turn_under_way_when_its_conversation_is_deleted_is_not_stored(
    tmp_path: Path,
) -> None:
    """The operator deletes a conversation while its next turn waits on the upstream: the
    answer still reaches the client, and nothing of the conversation comes back."""
    admin = {"params": {"tenant": TENANT}, "headers": {"Authorization": "Bearer adm"}}
    with proxy(tmp_path, "deleted") as (client, upstream):
        say = talker(client, "Where should we go?", "trip")
        for i in range(3):
            say(line("ann", i))
        upstream.slow_s = 1.0
        history = [system("You plan trips."), user("Where should we go?"), user("and then?")]
        headers = {"Authorization": f"Bearer {KEY}", "X-Conversation-Id": "trip"}
        with ThreadPoolExecutor(1) as pool:
            turn = pool.submit(
                client.post, CHAT, json={"model": "tiny", "messages": history}, headers=headers
            )
            time.sleep(0.3)
            deleted = client.delete("/admin/conversations/trip", **admin)
            answered = turn.result()
        settle(client)
        assert deleted.status_code == 200, deleted.text
        assert answered.status_code == 200, answered.text
        gone = client.get("/admin/conversations/trip", **admin)
        assert gone.status_code == 404, gone.text
        # A turn that starts after the deletion is a new conversation, stored as usual.
        upstream.slow_s = 0.0
        r = client.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
        assert r.status_code == 200, r.text
        settle(client)
        back = client.get("/admin/conversations/trip", **admin)
        assert back.status_code == 200, back.text


def test_a_conversation_keeps_its_latest_answer_id_only_and_forget_drops_it() -> None:
    sessions = Sessions()
    key, other = ConvKey("t", "c1"), ConvKey("t", "c2")
    for n in range(3):
        sessions.answered(key, f"resp_{n}", f"hash_{n}")
    sessions.answered(other, "resp_x", "hash_x")
    assert sessions.chained("t", "resp_2") == (key, "hash_2")
    assert sessions.chained("t", "resp_1") is None  # an earlier answer: not continued
    assert sessions.chained("another tenant", "resp_2") is None
    sessions.forget(key)
    assert sessions.chained("t", "resp_2") is None and not sessions.holds(key)
    assert sessions.chained("t", "resp_x") == (other, "hash_x")


def test_a_chained_turn_applied_after_another_chats_keeps_no_branch() -> None:
    """An append-mode turn rebased onto what another chat of the derived id committed first
    ends that chat's branch, not its own: it keeps none, and the next turn recalls nothing."""
    prior = SnapshotState(answer_hash="mine").to_json()
    turn = conv.reconcile_append([user("and then?")], [user("hi")], prior, 1)
    planned = frozenset({"h0", "mine", *turn.new_hashes})
    nothing = Reduction(messages=(), state=turn.working.state, kinds=(), tokens_out=0)
    outcome = Outcome(KEYS[0], turn, nothing, 0, 0, 0, False)
    archived = [ArchiveEntry("answer", turn.new_hashes[-1], user("ok"))]
    assert _branch(dataclasses.replace(outcome, lineage=planned), archived) == (planned, ["answer"])
    assert _branch(outcome, archived) == (frozenset(), []), "not tracked"
    theirs = conv.reconcile_append(
        [user("and then?")], [user("hi")], SnapshotState(answer_hash="theirs").to_json(), 1
    )
    rebased = dataclasses.replace(outcome, turn=theirs, lineage=planned)
    assert _branch(rebased, archived) == (frozenset(), [])


def test_a_chained_turn_extends_the_branch_kept_and_any_other_replaces_it() -> None:
    """The branch kept with the latest answer grows by what a turn continuing it adds (not
    copied whole each turn); a turn planned on another branch leaves that one as it was."""
    sessions, key = Sessions(), KEYS[0]
    sessions.answered(key, "resp_1", "a1", frozenset({"u1", "a1"}))
    kept = sessions.lineage(key, "a1")
    sessions.answered(key, "resp_2", "a2", kept, ["u2", "a2"])
    assert sessions.lineage(key, "a2") is kept and kept == {"u1", "a1", "u2", "a2"}
    # A turn forked from the earlier answer is not on the branch kept.
    assert sessions.lineage(key, "a1") == frozenset()
    other = frozenset({"u1", "b1"})
    sessions.answered(key, "resp_b", "b2", other, ["b2"])
    assert sessions.lineage(key, "b2") == {"u1", "b1", "b2"} and other == {"u1", "b1"}
    assert kept == {"u1", "a1", "u2", "a2"}, "a branch no longer kept is not changed"
    session = sessions.get(key)
    assert session is not None and session.weight == OVERHEAD + 3 * HASH_BYTES


def test_a_cut_request_waits_for_its_kept_turns_write_before_it_lets_the_lock_go() -> None:
    from proxy.turn.load import _written

    async def scenario() -> tuple[bool, bool, bool]:
        release, wrote = asyncio.Event(), asyncio.Event()

        async def write() -> bool:
            await release.wait()
            wrote.set()
            return True

        lock = asyncio.Lock()

        async def turn() -> None:
            async with lock:  # as the pipeline holds the conversation's lock
                await _written(Unwritten(write, 0))

        task = asyncio.create_task(turn())
        await asyncio.sleep(0)
        task.cancel()  # the client left
        await asyncio.sleep(0.01)
        held_while_writing = lock.locked() and not wrote.is_set()
        release.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return held_while_writing, wrote.is_set(), lock.locked()

    held, wrote, still_locked = asyncio.run(scenario())
    assert held and wrote and not still_locked


@pytest.mark.asyncio
async def test_background_settled_waits_for_every_task_and_those_they_start() -> None:
    background, done = Background(), []
    key = ConvKey("t", "c")

    async def second() -> None:
        await asyncio.sleep(0.01)
        done.append("second")

    async def first() -> None:
        await asyncio.sleep(0.01)
        background.spawn((key, "second"), second())
        done.append("first")

    async def failing() -> None:
        raise RuntimeError("a task's failure is its own")

    background.spawn((key, "first"), first())
    background.spawn((key, "failing"), failing())
    await background.settled()
    assert done == ["first", "second"] and len(background) == 0
    await background.settled()  # nothing left: returns at once


async def _waits(event: asyncio.Event, log: list[str], name: str) -> None:
    try:
        await event.wait()
        log.append(f"{name} done")
    except asyncio.CancelledError:
        log.append(f"{name} cancelled")
        raise


@pytest.mark.asyncio
async def test_a_task_spawned_again_after_a_cancel_stays_tracked() -> None:
    """A cancelled task ends after its key went to a new task: its end must not
    forget the new one (`settled` would return before it, `close` not cancel it)."""
    background, log, event = Background(), [], asyncio.Event()
    key = (ConvKey("t", "c"), "embed")
    background.spawn(key, _waits(event, log, "old"))
    await asyncio.sleep(0)
    background.cancel(ConvKey("t", "c"))
    background.spawn(key, _waits(event, log, "new"))
    await asyncio.sleep(0.01)
    assert len(background) == 1
    await background.close()
    event.set()
    await asyncio.sleep(0.01)
    assert log == ["old cancelled", "new cancelled"]


@pytest.mark.asyncio
async def test_giving_up_waiting_for_settled_cancels_no_task() -> None:
    background, log, event = Background(), [], asyncio.Event()
    background.spawn((ConvKey("t", "c"), "embed"), _waits(event, log, "task"))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(background.settled(), 0.05)
    event.set()
    await asyncio.sleep(0.01)
    assert log == ["task done"]
