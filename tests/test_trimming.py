"""A client that trims its own history (resends only its newest messages).

No request of such a client extends a stored snapshot, yet each resends a
window of what was stored: the store archives every message once, in one
chain, and keeps whatever the client changed inside its window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from proxy import conversation as conv
from proxy.app import create_app
from proxy.config import load_settings
from proxy.conversation import tenant_of
from proxy.messages import Message, chain_hashes, digest
from proxy.mock import MockUpstream
from proxy.outcome import Outcome, turn_commit
from proxy.reduction.types import Reduction
from proxy.store import ConvKey, Store, StoreError
from proxy.store.base import ArchivedMessage, Conversation
from proxy.turn.state import SnapshotState

from .factories import system, user

KEY = "sk-trims"
CONV = ConvKey(tenant_of(KEY), "trimmed")
HEADERS = {"Authorization": f"Bearer {KEY}", "X-Conversation-Id": CONV.conversation}
SYSTEM = system("You are a travel agent.")
WINDOW = 10  # messages the client resends after its instructions

Factory = Callable[..., Store]


@contextmanager
def proxy(make_store: Factory, **env: str) -> Iterator[tuple[TestClient, MockUpstream, Store]]:
    upstream = MockUpstream()
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1",
            **{f"CONTEXT_PROXY_{k.upper()}": v for k, v in env.items()},
        },
        overrides={"models": {"windows": {"tiny": 400}}},
    )
    store = make_store()
    app = create_app(settings, transport=httpx.ASGITransport(upstream.app), store=store)
    with TestClient(app) as client:
        try:
            yield client, upstream, store
        finally:  # a store handed to the app is the caller's to close
            client.portal.call(store.close)  # type: ignore[union-attr]


def post(
    client: TestClient, messages: list[Any], model: str = "gpt-4.1", **headers: str
) -> Message:
    r = client.post(
        "/v1/chat/completions",
        json={"model": model, "messages": messages},
        headers={**HEADERS, **headers},
    )
    assert r.status_code == 200, r.text
    answer: Message = r.json()["choices"][0]["message"]
    return answer


def trimming(client: TestClient, turns: int, said: list[Any], model: str = "gpt-4.1") -> list[Any]:
    """`turns` requests of a client resending its instructions and last WINDOW messages."""
    for i in range(turns):
        said.append(user(f"Day {i}: what should I see in district {i}? {'Tell me more. ' * 6}"))
        sent = [SYSTEM, *said[-WINDOW:]]
        said.append(post(client, sent, model))
    return said


def stored(client: TestClient, store: Store) -> tuple[list[ArchivedMessage], Conversation]:
    archive = client.portal.call(store.archive, CONV)  # type: ignore[union-attr]
    latest = client.portal.call(store.latest, CONV)  # type: ignore[union-attr]
    assert latest is not None
    return archive, latest


def contents(messages: list[Any]) -> list[str]:
    return [m["content"] for m in messages]


def assert_one_chain(archive: list[ArchivedMessage], messages: list[Any]) -> None:
    """The archive holds `messages` once each, in order, each chained to the one before."""
    assert contents([a.message for a in archive]) == contents(messages)
    assert [a.parent for a in archive] == ["", *(a.hash for a in archive[:-1])]
    assert [a.hash for a in archive] == chain_hashes([a.message for a in archive])


def test_a_trimming_clients_messages_are_archived_once_in_one_chain(make_store: Factory) -> None:
    with proxy(make_store) as (client, upstream, store):
        said = trimming(client, 30, [])
        archive, latest = stored(client, store)
        sent = upstream.chat_requests()
    assert_one_chain(archive, [SYSTEM, *said])
    # Forwarded as the client sent it; the working history is the last request and answer.
    assert contents(sent[-1]["messages"]) == contents([SYSTEM, *said[-WINDOW - 1 : -1]])
    assert contents(latest.working) == contents([SYSTEM, *said[-WINDOW - 1 :]])
    state = SnapshotState.from_json(latest.state)
    assert state is not None and state.answer_hash == archive[-1].hash
    assert state.stats.turns == 30, "the conversation's figures add up across its turns"


def test_a_window_the_proxy_reduces_is_still_archived_once(make_store: Factory) -> None:
    """Its first messages are summarised away, so only the archive's chain shows them stored."""
    with proxy(make_store) as (client, _, store):
        said = trimming(client, 20, [], model="tiny")
        archive, latest = stored(client, store)
    assert_one_chain(archive, [SYSTEM, *said])
    state = SnapshotState.from_json(latest.state)
    assert state is not None and state.reduction.tail_start > 0, "the proxy reduced the window"
    assert len(latest.working) < 1 + WINDOW + 1


def test_append_mode_and_a_resent_history_continue_a_trimmed_conversation(
    make_store: Factory,
) -> None:
    """The turns after a trimmed one chain on in the archive, whichever way they come."""
    with proxy(make_store) as (client, upstream, store):
        said = trimming(client, 12, [])
        said.append(user("And the museums?"))
        said.append(post(client, [user("And the museums?")], **{"X-Context-Mode": "append"}))
        forwarded = upstream.chat_requests()[-1]["messages"]
        assert contents(forwarded) == contents([SYSTEM, *said[-WINDOW - 3 : -1]])
        # The client resends its last request whole, with the two turns after it.
        window = [SYSTEM, *said[-WINDOW - 3 :]]
        for question in ("And the parks?", "And the markets?"):
            window.append(user(question))
            window.append(post(client, window))
        said += window[-4:]
        archive, latest = stored(client, store)
    assert_one_chain(archive, [SYSTEM, *said])
    assert contents(latest.working) == contents(window)


def test_a_window_the_client_changed_is_archived_anew_and_nothing_is_lost(
    make_store: Factory,
) -> None:
    with proxy(make_store) as (client, _, store):
        said = trimming(client, 8, [])
        edited = [*said[-WINDOW:]]
        edited[2] = user("Actually, skip district 5.")
        edited.append(user("What next?"))
        post(client, [SYSTEM, *edited])
        archive, _ = stored(client, store)
    texts = [a.message["content"] for a in archive]
    assert texts[: 1 + len(said)] == [m["content"] for m in [SYSTEM, *said]]
    assert "Actually, skip district 5." in texts and "What next?" in texts


def test_other_instructions_are_archived_with_the_window(make_store: Factory) -> None:
    with proxy(make_store) as (client, _, store):
        said = trimming(client, 8, [])
        post(client, [system("You are a museum guide."), *said[-WINDOW:], user("Next?")])
        archive, _ = stored(client, store)
    texts = contents([a.message for a in archive])
    assert texts[: 1 + len(said)] == contents([SYSTEM, *said])
    assert "You are a museum guide." in texts and texts[-2] == "Next?"


def test_a_chain_the_store_cannot_read_leaves_the_window_archived_anew(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unreachable(*args: Any, **kwargs: Any) -> list[Message]:
        raise StoreError("unreachable")

    with proxy(make_store) as (client, _, store):
        monkeypatch.setattr(store, "chain", unreachable)
        said = trimming(client, 8, [])
        archive, _ = stored(client, store)
        errors = client.get("/metrics").text
    texts = contents([a.message for a in archive])
    assert set(texts) == set(contents([SYSTEM, *said])), "every message, some twice"
    assert len(texts) > 1 + len(said)
    assert 'context_proxy_store_errors_total{operation="chain"}' in errors


def test_the_fast_path_off_changes_nothing_of_it(make_store: Factory) -> None:
    with proxy(make_store, server_fast_path="false") as (client, _, store):
        said = trimming(client, 14, [])
        archive, _ = stored(client, store)
    assert_one_chain(archive, [SYSTEM, *said])


# --- the pure parts ---------------------------------------------------------------


@given(st.lists(st.sampled_from([b"a", b"b", b"c"]), max_size=12), st.integers(0, 3))
def test_a_window_ends_after_the_last_copy_of_the_answer_past_the_instructions(
    incoming: list[bytes], leading: int
) -> None:
    end = conv.window_end(incoming, leading, b"a")
    if end:
        assert end > leading and incoming[end - 1] == b"a" and b"a" not in incoming[end:]
    else:
        assert b"a" not in incoming[leading:]


def texts(n: int, prefix: str = "m") -> list[Message]:
    return [user(f"{prefix}{i}") for i in range(n)]


@given(st.integers(0, 6), st.integers(0, 6))
def test_a_turn_archives_what_follows_its_stored_window_chained_from_it(
    window: int, new: int
) -> None:
    incoming = [system("s"), *texts(window), *texts(new, "new")]
    hashes = chain_hashes(incoming)
    archived = conv.Archived(1 + window, "stored-tip")
    turn = conv.reconcile_full(incoming, hashes, None, None, archived)
    assert turn.new == tuple(incoming[1 + window :])
    assert turn.parent == "stored-tip"
    assert turn.new_hashes == tuple(chain_hashes(turn.new, "stored-tip"))
    assert turn.tip == (turn.new_hashes[-1] if new else "stored-tip")
    assert turn.head == hashes[-1] and not turn.rooted
    # Without it, the request's own chain is the archive's.
    plain = conv.reconcile_full(incoming, hashes, None, None)
    assert plain.new == tuple(incoming) and plain.new_hashes == tuple(hashes)
    assert plain.tip == plain.head and plain.rooted


def test_the_answer_chains_from_the_archive_and_the_next_turn_continues_there() -> None:
    incoming = [system("s"), *texts(4), user("q")]
    hashes = chain_hashes(incoming)
    turn = conv.reconcile_full(incoming, hashes, None, None, conv.Archived(5, "stored-tip"))
    answer = [{"role": "assistant", "content": "a"}]
    reduction = Reduction(tuple(incoming), turn.working.state, ("none",), 0)
    outcome = Outcome(CONV, turn, reduction, 0, 0, 0, False)
    commit = turn_commit(outcome, answer, 0.0)
    assert turn_commit(outcome, answer, 0.0, [digest(m) for m in answer]) == commit
    tip = chain_hashes([incoming[-1]], "stored-tip")[0]
    assert [e.hash for e in commit.archive] == [tip, chain_hashes(answer, tip)[0]]
    assert [e.parent for e in commit.archive] == ["stored-tip", tip]
    assert commit.layout is None, "the request's hashes do not name archived messages"
    state = SnapshotState.from_json(commit.snapshot.state)
    assert state is not None and state.archived_head == tip
    assert state.answer_hash == commit.archive[-1].hash
    assert commit.snapshot.head == hashes[-1]
    # A request resending this one and more continues the snapshot, and the archive's chain.
    more = [*incoming, *answer, user("q2")]
    later = conv.reconcile_full(
        more, chain_hashes(more), commit.snapshot.position, commit.snapshot.state
    )
    assert later.continued and later.new == tuple(more[len(incoming) :])
    assert later.new_hashes[0] == state.answer_hash
    assert later.parent == tip
    assert digest(later.new[0]) == digest(answer[0])
