"""Recall: a fact summarised away comes back when the question returns to it; nothing else does.

Ranking itself (FTS5 BM25, stored vectors, relevance floors) is tested per store
backend in test_store.py; here: the pure selection and placement, and recall
through the app, lexical in process and embeddings through real servers.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from proxy import english, feedback, quoting, recall
from proxy.app import create_app
from proxy.config import load_settings
from proxy.dialects.chat_completions import CHAT as CHAT_ITEMS
from proxy.messages import split_leading
from proxy.mock import MockUpstream
from proxy.store import SqliteStore
from proxy.store.base import SearchHit
from proxy.tokens import TokenCounter

from .factories import assistant, call, system, tool, user
from .servers import run_server

PASSPORT = "My passport number is X1234567 and it expires in March 2031."
CHAT = "/v1/chat/completions"
WINDOW = 3000


def hit(text: str, turn: int = 1, role: str = "user", score: float = 1.0) -> SearchHit:
    return SearchHit(seq=turn, turn=turn, role=role, text=text, score=score)


def test_words_drop_stopwords_and_repeats_and_keep_numbers() -> None:
    assert recall.words("When does my passport expire? The PASSPORT, in 2031!") == [
        "passport",
        "expire",
        "2031",
    ]
    assert recall.words("is it ok?") == []


def test_fresh_skips_the_question_repeats_and_what_the_context_covers() -> None:
    question = "When does my passport expire?"
    hits = [
        hit(question, 9),
        hit(PASSPORT, 2),
        hit(PASSPORT, 5),
        hit("The passport office opens at nine.", 3, "assistant"),
    ]
    assert recall.fresh(hits, question, [], k=3) == [hits[1], hits[3]]
    assert recall.fresh(hits, question, [], k=1) == [hits[1]]
    # A forwarded message containing every matched question word covers the hit.
    covering = "Your passport expires soon, renew it."
    assert recall.fresh(hits, question, [covering], k=3) == []
    # Partial overlap does not: "expire" is matched by the fact, absent here. Nor does a
    # message sharing one word of the question's two: it says little of what it is about.
    photos = "Passport photos cost 5 euros."
    assert recall.fresh(hits, question, [photos], k=3) == [hits[1], hits[3]]
    # One word of two covers nothing; the question's one word, or two of them, do.
    asked = "What class did Tomás sign up for?"
    signed = [hit("Signed up for bouldering on thursday evenings", 4, score=5.6)]
    assert recall.fresh(signed, asked, ["Mei signed us up for a fun run."], k=3) == signed
    assert recall.fresh(signed, asked, ["Mei signed us up for a spin class."], k=3) == []
    assert recall.fresh(signed, "Sign?", ["Mei signed us up for a fun run."], k=3) == []
    # A hit found by meaning alone shares its word by chance: one forwarded covers it.
    run = ["Mei signed us up for a fun run."]
    assert recall.fresh(signed, asked, run, k=3, meant={4}) == []
    # A word is one with its other forms: "chose" says one word of the question, not three.
    chose = [hit("Chose bouldering on thursday evenings", 4, score=5.6)]
    asked = "Which class did Tomás choose?"
    assert recall.fresh(chose, asked, ["Mei chose a fun run."], k=3) == chose


def test_a_hit_whose_sentences_on_the_question_a_chosen_hit_said_tells_nothing_more() -> None:
    question = "What did Frank do before he retired?"
    refrain = "Mowed the lawn and took a nap. Retirement is hard work."
    hits = [
        hit(f"{refrain} Have you eaten yet today?", 120, score=3.7),
        hit(f"No way! {refrain} I ironed shirts.", 173, score=3.5),
        hit("mowed the lawn.  RETIREMENT is hard work.", 68, score=3.4),
        hit("Thirty-one years in the fire department. Retired now.", 26, score=3.3),
    ]
    kept = recall.fresh(hits, question, [], k=3)
    assert [h.seq for h in kept] == [120, 26]
    # Nor one whose sentences on it the model reads in a forwarded message.
    window = f"Hey! {refrain} How are you?"
    kept = recall.fresh([hit(window, 200, score=3.0), *hits], question, [window], k=3)
    assert [h.seq for h in kept] == [26]
    # Nor one the feedback search finds after them: the chosen hits' sentences are said.
    again = hit(f"Ha. {refrain} Anyway.", 201, score=2.0)
    found = recall.fresh(hits, question, [], k=3)
    assert feedback.extended(found, [again], question, [], 5, frozenset()) == found
    # A hit saying the refrain and more on the question's words is news.
    more = hit(f"{refrain} I retired from the fire department.", 30, score=3.6)
    assert [h.seq for h in recall.fresh([hits[0], more], question, [], k=3)] == [120, 30]


LINES = (
    "Retirement is hard work.",
    "retirement is  HARD work.",
    "I retired from the fire department.",
    "Mowed the lawn.",
    "We retired the old boat.",
)


@given(
    st.lists(st.lists(st.sampled_from(LINES), min_size=1, max_size=3), min_size=1, max_size=6),
    st.sets(st.integers(0, 5)),
)
def test_each_chosen_hit_says_something_on_the_question_no_earlier_one_said(
    texts: list[list[str]], shown: set[int]
) -> None:
    """Whatever the hits and which of them are forwarded: a chosen hit that speaks of
    the question holds a sentence on it that no forwarded hit and no hit chosen before
    it holds (sentences compared folded), and a hit saying one is not left out for it."""
    question = "What did Frank do before he retired?"
    hits = [hit(" ".join(t), i, score=10.0 - i) for i, t in enumerate(texts)]
    window = [h.text for h in hits if h.seq in shown]
    kept = recall.fresh(hits, question, window, k=len(hits))

    def on(text: str) -> set[str]:
        return {" ".join(s.lower().split()) for s in LINES if s in text and "etire" in s}

    told = set().union(*(on(t) for t in window))
    for h in kept:
        assert on(h.text) - told or not on(h.text)
        told |= on(h.text)
    # Of the hits ranking above every forwarded one (the others rank below one:
    # `outranking`), each with news the ones kept before it lacked is kept.
    first = min((h.seq for h in hits if h.text in window), default=len(hits))
    told = set().union(*(on(t) for t in window))
    for h in hits[:first]:
        if h.text in window or h.text in {k.text for k in kept if k.seq < h.seq}:
            continue
        if on(h.text) - told:
            assert h in kept
            told |= on(h.text)


# A subject as a question asks it, and as a message says it: a verb in another form.
SUBJECTS = {
    "kayak": "kayak",
    "museum": "museum",
    "passport": "passport",
    "see": "saw",
    "choose": "chose",
    "ramen": "ramen",
}


@given(
    st.sets(st.sampled_from(sorted(SUBJECTS)), min_size=1, max_size=4),
    st.sets(st.sampled_from(sorted(SUBJECTS)), max_size=4),
    st.sets(st.sampled_from(sorted(SUBJECTS)), max_size=4),
    st.booleans(),
)
def test_a_forwarded_message_covers_a_hit_only_with_two_of_the_questions_words_or_all(
    asked: set[str], said: set[str], forwarded: set[str], meant: bool
) -> None:
    """The hit is skipped exactly when one forwarded message holds every question word it
    matched, and that message holds two of the question's words or all of them; or
    any of them, for a hit found by meaning alone."""
    question = f"{' and '.join(sorted(asked))}?"
    hit_text = f"Notes: {' '.join(SUBJECTS[w] for w in sorted(said))} then lunch."
    window = f"Earlier: {' '.join(SUBJECTS[w] for w in sorted(forwarded))} and coffee."
    matched, held = said & asked, forwarded & asked
    judged = meant or len(held) > 1 or held == asked
    skipped = bool(matched) and matched <= held and judged
    found = {3} if meant else set()
    kept = recall.fresh([hit(hit_text, 3)], question, [window], k=3, meant=found)
    assert [h.text for h in kept] == ([] if skipped else [hit_text])


def test_fresh_stops_below_a_message_the_model_already_sees() -> None:
    question = "Which museum did we book?"
    forwarded = "We booked the Rijksmuseum for Tuesday."
    hits = [
        hit("Museum booking confirmed, ticket 55-AB.", 3, score=9.0),
        hit(forwarded, 8, score=7.0),
        hit("A museum pass costs 60 euros.", 1, score=6.0),
    ]
    assert recall.fresh(hits, question, [forwarded, "ok"], k=3) == [hits[0]]
    assert recall.fresh(hits[1:], question, [forwarded], k=3) == []
    # Without the forwarded message among the hits, nothing is known to outrank.
    assert recall.fresh(hits, question, ["ok"], k=3) == hits
    # A margin (embeddings) asks a hit to beat the forwarded one clearly.
    assert recall.outranking(hits, {forwarded}, margin=2.5) == []
    assert recall.outranking(hits, {forwarded}, margin=1.5) == [hits[0]]


def test_the_block_goes_right_before_the_last_user_message_and_quotes_tool_results() -> None:
    chain = [assistant(None, tool_calls=[call("c9")]), tool("c9", "done")]
    messages = [system(), user("q1"), *chain, assistant("a"), user("museum hours?")]
    content = quoting.quote([hit("museum opens at 9", 3, "tool result")], 500)
    out = recall.inject(messages, content, CHAT_ITEMS)
    assert out[:-2] == messages[:-1] and out[-1] == messages[-1]
    assert out[-2] == {"role": "system", "content": content}
    assert content == f"{quoting.HEADER}\n[turn 3, tool result] museum opens at 9"
    assert quoting.quote([hit("a" * 50)], 10).endswith("aaaaaaaaaa [...]")


def filler(i: int) -> str:
    return f"Day {i}: plan a walk around district {i} with coffee stops."


@contextmanager
def in_process(tmp_path: Path, **env: str) -> Iterator[tuple[TestClient, MockUpstream]]:
    """The app with recall on, a SQLite file store, and the fake upstream in process."""
    upstream = MockUpstream()
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1",
            "CONTEXT_PROXY_RECALL_ENABLED": "true",
            **{f"CONTEXT_PROXY_{k.upper()}": v for k, v in env.items()},
        },
        overrides={"models": {"windows": {"tiny": WINDOW}}},
    )
    store = SqliteStore(str(tmp_path / "recall.db"))
    proxy = create_app(settings, transport=httpx.ASGITransport(upstream.app), store=store)
    with TestClient(proxy) as client:
        yield client, upstream


@pytest.fixture
def lexical(tmp_path: Path) -> Iterator[tuple[TestClient, MockUpstream]]:
    with in_process(tmp_path) as app:
        yield app


def conversation(client: TestClient) -> Callable[[Any], httpx.Response]:
    history: list[Any] = [system("You are a travel agent.")]

    def send(*messages: Any) -> httpx.Response:
        history.extend(messages)
        r = client.post(
            CHAT,
            json={"model": "tiny", "messages": history},
            headers={"Authorization": "Bearer sk-r", "X-Conversation-Id": "trip"},
        )
        assert r.status_code == 200, r.text
        history.append(r.json()["choices"][0]["message"])
        return r

    return send


def test_a_fact_from_turn_5_comes_back_at_turn_200(
    lexical: tuple[TestClient, MockUpstream],
) -> None:
    client, upstream = lexical
    send = conversation(client)
    for i in range(1, 200):
        send(user(PASSPORT if i == 5 else filler(i)))
    forwarded = upstream.chat_requests()[-1]["messages"]
    assert all(PASSPORT not in str(m.get("content")) for m in forwarded), "not reduced yet"
    assert any("Summary" in str(m.get("content")) for m in forwarded[:3]), "not summarised"

    r = send(user("Remind me when my passport expires?"))
    block = upstream.chat_requests()[-1]["messages"][-2]
    # The fact, then the fake upstream's echo of it at the same turn.
    assert block == {
        "role": "system",
        "content": f"{quoting.HEADER}\n[turn 5, user] {PASSPORT}\n"
        f"[turn 5, assistant] Echo: {PASSPORT}",
    }
    assert r.headers["x-context-recall"] == "2"
    tokens = TokenCounter().count_messages("tiny", upstream.chat_requests()[-1]["messages"])
    assert tokens - 3 <= 0.7 * WINDOW
    metrics = client.get("/metrics").text
    assert "context_proxy_recall_hits_total 2.0" in metrics

    r = send(user("Which pasta recipe goes with a red wine sauce?"))
    assert r.headers["x-context-recall"] == "0"
    assert upstream.chat_requests()[-1]["messages"][-2]["role"] == "assistant"
    # Common words alone ("plan", "walk", "coffee") are below the floor.
    r = send(user("Should I plan a pasta dinner after the walk and coffee?"))
    assert r.headers["x-context-recall"] == "0"


def test_a_turn_that_asks_nothing_recalls_only_what_names_something_said_once_or_twice(
    lexical: tuple[TestClient, MockUpstream],
) -> None:
    client, upstream = lexical
    history: list[Any] = [system("You are a travel agent.")]
    garden = "Weeding the community garden plot by the station again."
    for i in range(1, 200):
        said = PASSPORT if i == 5 else garden if i in (9, 13, 17, 21) else filler(i)
        history += [user(said), {"role": "assistant", "content": f"Echo: {said}"}]

    probes = itertools.count()

    def turn(text: str, *, met_whole: bool = False) -> tuple[int, Any]:
        """`text` as the next turn, in a conversation of its own (no probe finds another):
        the recall count, and the message forwarded before it. The history is stored by
        a turn before, or (`met_whole`) arrives with `text`."""
        headers = {"Authorization": "Bearer sk-r", "X-Conversation-Id": f"p{next(probes)}"}
        sent = [*history]
        if not met_whole:
            sent.append(user(filler(200)))
            r = client.post(CHAT, json={"model": "tiny", "messages": sent}, headers=headers)
            sent.append(r.json()["choices"][0]["message"])
        sent.append(user(text))
        r = client.post(CHAT, json={"model": "tiny", "messages": sent}, headers=headers)
        assert r.status_code == 200, r.text
        return int(r.headers["x-context-recall"]), upstream.chat_requests()[-1]["messages"][-2]

    for met_whole in (False, True):
        # "community" and "garden" are in 8 of the 400 archived messages: specific for a
        # question, everyday chat for a statement.
        found, before = turn("The community garden is lovely.", met_whole=met_whole)
        assert found == 0 and before["role"] == "assistant"
        # Asked, with or without its "?", the same words bring the garden back.
        for asked in (
            "What did I say about the community garden?",
            "what was that community garden",
            "I forgot what I said about the community garden.",
        ):
            found, before = turn(asked, met_whole=met_whole)
            assert found > 0 and garden in before["content"], asked
        # A statement naming something said once brings it back.
        found, before = turn("My passport is in the drawer.", met_whole=met_whole)
        assert found > 0 and PASSPORT in before["content"]


@pytest.mark.parametrize("method", ["lexical", "hybrid"])
def test_a_conversation_met_with_its_whole_history_recalls_from_that_history(
    tmp_path: Path, method: str
) -> None:
    """An app that starts using the proxy mid-conversation: the store holds none of it yet.

    (Hybrid: none of it is embedded yet, so its BM25 part alone finds the fact.)
    """
    history: list[Any] = [system("You are a travel agent.")]
    seat = "On long flights I always book an aisle seat near the front."
    for i in range(1, 200):
        said = {5: PASSPORT, 7: seat}.get(i, filler(i))
        history += [user(said), {"role": "assistant", "content": f"Echo: {said}"}]
    headers = {"Authorization": "Bearer sk-r", "X-Conversation-Id": "met-whole"}
    with in_process(tmp_path, recall_method=method) as (client, upstream):
        # What the history does not hold is not recalled from it.
        unrelated = [*history, user("Which pasta goes with red wine?")]
        other = {**headers, "X-Conversation-Id": "met-whole-too"}
        r = client.post(CHAT, json={"model": "tiny", "messages": unrelated}, headers=other)
        assert r.headers["x-context-recall"] == "0"

        history.append(user("Remind me when my passport expires?"))
        r = client.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
        assert r.status_code == 200, r.text
        forwarded = upstream.chat_requests()[-1]["messages"]
        assert all(PASSPORT not in str(m.get("content")) for m in forwarded[:-2]), "not reduced"
        assert forwarded[-2] == {
            "role": "system",
            "content": f"{quoting.HEADER}\n[turn 5, user] {PASSPORT}\n"
            f"[turn 5, assistant] Echo: {PASSPORT}",
        }
        assert r.headers["x-context-recall"] == "2"

        # The next turn finds the history archived. (Hybrid may add a hit of the mock's
        # vectors, once the archive's embeddings, made in the background, are in.)
        history += [r.json()["choices"][0]["message"], user("Which seat do I book on flights?")]
        r = client.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
        block = upstream.chat_requests()[-1]["messages"][-2]["content"]
        assert block.startswith(
            f"{quoting.HEADER}\n[turn 7, user] {seat}\n[turn 7, assistant] Echo: {seat}"
        ), block
        assert r.headers["x-context-recall"] == "2" or method == "hybrid"


def test_a_conversation_back_with_more_than_the_store_holds_recalls_from_that_history(
    lexical: tuple[TestClient, MockUpstream],
) -> None:
    """One turn through the proxy, then 200 elsewhere: the store holds the first only."""
    client, upstream = lexical
    headers = {"Authorization": "Bearer sk-r", "X-Conversation-Id": "came-back"}
    history: list[Any] = [system("You are a travel agent."), user(filler(0))]
    r = client.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
    history.append(r.json()["choices"][0]["message"])
    for i in range(1, 200):
        said = PASSPORT if i == 5 else filler(i)
        history += [user(said), {"role": "assistant", "content": f"Echo: {said}"}]
    history.append(user("Remind me when my passport expires?"))
    r = client.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
    assert r.headers["x-context-recall"] == "2"
    block = upstream.chat_requests()[-1]["messages"][-2]["content"]
    assert block.startswith(f"{quoting.HEADER}\n[turn 6, user] {PASSPORT}\n"), block


TRIMMED = {"Authorization": "Bearer sk-r", "X-Conversation-Id": "trimmed"}


def window(history: list[Any], keep: int) -> list[Any]:
    """What a client that trims its history sends: its instructions, its newest messages."""
    return [system("You are a travel agent."), *history[-keep:]]


def trim_along(client: TestClient, history: list[Any], turns: int, keep: int, fact: str) -> None:
    """Play `turns` turns (`fact` said at the fifth) as a client resending `window`s."""
    for i in range(1, turns):
        history.append(user(fact if i == 5 else filler(i)))
        r = client.post(
            CHAT, json={"model": "tiny", "messages": window(history, keep)}, headers=TRIMMED
        )
        assert r.status_code == 200, r.text
        history.append(r.json()["choices"][0]["message"])


def test_a_client_trimming_its_own_history_still_gets_what_the_store_archived(
    lexical: tuple[TestClient, MockUpstream],
) -> None:
    """The client resends only its newest 150 messages: no request extends a stored one."""
    client, upstream = lexical
    history: list[Any] = []
    trim_along(client, history, 200, 150, PASSPORT)
    history.append(user("Remind me when my passport expires?"))
    sent = window(history, 150)
    assert all(PASSPORT not in str(m.get("content")) for m in sent), "the client trimmed it"
    r = client.post(CHAT, json={"model": "tiny", "messages": sent}, headers=TRIMMED)
    forwarded = upstream.chat_requests()[-1]["messages"]
    assert r.headers["x-context-reduction"] != "none", "the proxy reduced the request too"
    # Archived once, where it was said (each window is not archived anew).
    assert f"[turn 5, user] {PASSPORT}" in forwarded[-2]["content"].splitlines()


def test_two_chats_that_open_alike_never_recall_each_other(
    lexical: tuple[TestClient, MockUpstream],
) -> None:
    """One key serving many end users, no X-Conversation-Id: chats opening with the same
    messages share a derived id as branches of one conversation, and recall stays in its
    own branch, as does an edited chat's recall out of the branch its edit left."""
    client, upstream = lexical
    headers = {"Authorization": "Bearer sk-shared"}

    def chat(*said: str) -> tuple[httpx.Response, list[Any]]:
        history: list[Any] = [system("You are a helpful assistant."), user("Hi")]
        r = client.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
        for text in said:
            history += [r.json()["choices"][0]["message"], user(text)]
            r = client.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
            assert r.status_code == 200, r.text
        return r, history

    secret = "My bank password is hunter2-ALICE, please keep it safe."
    first, _ = chat(secret, *(filler(i) for i in range(60)))
    r, _ = chat("What is my bank password?")
    assert r.headers["x-conversation-id"] == first.headers["x-conversation-id"]
    assert "hunter2" not in str(upstream.chat_requests()[-1]["messages"])
    assert r.headers["x-context-recall"] == "0"

    # The same user edits an early message: the text it replaced is not recalled.
    chat("My locker code is 1111.", *(filler(i) for i in range(60)))
    r, _ = chat("My locker code is 2468.", *(filler(i) for i in range(60)), "My locker code?")
    forwarded = str(upstream.chat_requests()[-1]["messages"])
    assert "2468" in forwarded and "1111" not in forwarded
    assert r.headers["x-context-recall"] != "0"


def test_a_block_computed_for_one_chat_never_serves_another_that_asks_alike(
    lexical: tuple[TestClient, MockUpstream],
) -> None:
    """The block is repeated within a turn (tool results): only on the branch it was
    computed for, not for another chat of the derived id asking the same words."""
    client, upstream = lexical
    headers = {"Authorization": "Bearer sk-shared"}
    asked = "What is my bank password?"

    def post(history: list[Any]) -> httpx.Response:
        r = client.post(CHAT, json={"model": "tiny", "messages": history}, headers=headers)
        assert r.status_code == 200, r.text
        return r

    def chat(*said: str) -> list[Any]:
        history: list[Any] = [system("You are a helpful assistant."), user("Hi")]
        r = post(history)
        for text in said:
            history += [r.json()["choices"][0]["message"], user(text)]
            r = post(history)
        return [*history, r.json()["choices"][0]["message"]]

    alice = chat("My bank password is hunter2-ALICE, keep it safe.", *map(filler, range(60)))
    bob = chat(asked)[:-1]
    r = post([*alice, user(asked)])
    assert r.headers["x-context-recall"] != "0", "Alice's own question recalls it"
    r = post([*bob, assistant(None, tool_calls=[call("c1")]), tool("c1", "no data")])
    assert "hunter2" not in str(upstream.chat_requests()[-1]["messages"])


def test_a_derived_conversation_continued_by_response_id_recalls_its_own_branch_alone(
    tmp_path: Path,
) -> None:
    """Chained by previous_response_id, each request sends only its new items: the branch
    kept with the answer it continues is searched, answers of several items (reasoning and
    a call) included, and another chat that opened alike is not."""
    headers = {"Authorization": "Bearer sk-shared"}
    with in_process(tmp_path, responses_manage_server_state="true") as (client, upstream):

        def ask(text: Any, previous: str | None = None) -> httpx.Response:
            body: dict[str, Any] = {"model": "tiny", "instructions": "Be brief.", "input": text}
            if previous is not None:
                body["previous_response_id"] = previous
            r = client.post("/v1/responses", json=body, headers=headers)
            assert r.status_code == 200, r.text
            return r

        first = ask("Hello")
        r = ask("My bank password is hunter2-ALICE, keep it safe.", first.json()["id"])
        for i in range(60):
            r = ask(filler(i), r.json()["id"])
            if i % 20 == 0:  # a tool round: reasoning and a call answer, then its output
                r = ask("Please call tool lookup for the notes.", r.json()["id"])
                call = next(o for o in r.json()["output"] if o["type"] == "function_call")
                output = {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": "ok",
                }
                r = ask([output], r.json()["id"])
        r = ask("What is my bank password?", r.json()["id"])
        assert r.headers["x-context-reduction"] != "none", "the password left the window"
        assert r.headers["x-context-recall"] != "0", "her own branch is recalled"
        assert "hunter2" in str(upstream.responses_requests()[-1])

        second = ask("Hello")
        assert second.headers["x-conversation-id"] == first.headers["x-conversation-id"]
        r = ask("What is my bank password?", second.json()["id"])
        assert r.headers["x-context-recall"] == "0"
        assert "hunter2" not in str(upstream.responses_requests()[-1])


def test_a_named_conversation_is_searched_whole_by_a_process_that_never_saw_it(
    tmp_path: Path,
) -> None:
    """A trimming client's window chains into nothing a new process knows (after a restart,
    or on another worker): the conversation it names is still searched whole."""
    history: list[Any] = []
    with in_process(tmp_path) as (client, _):
        trim_along(client, history, 120, 100, PASSPORT)
    history.append(user("Remind me when my passport expires?"))
    with in_process(tmp_path) as (client, upstream):
        sent = window(history, 100)
        r = client.post(CHAT, json={"model": "tiny", "messages": sent}, headers=TRIMMED)
    assert r.status_code == 200, r.text
    assert f"[turn 5, user] {PASSPORT}" in upstream.chat_requests()[-1]["messages"][-2]["content"]


def test_hybrid_still_asks_the_stores_embeddings_when_no_words_are_found(
    tmp_path: Path,
) -> None:
    """A client trimming its history; BM25 finds nothing in the store nor in the request.

    "baril" is where the mock's hashed vectors put "passport": a synonym to them, a
    word never said to BM25.
    """
    fact = "My passport expires soon."
    with in_process(tmp_path, recall_method="hybrid") as (client, upstream):
        history: list[Any] = []
        trim_along(client, history, 200, 150, fact)
        history.append(user("baril?"))
        sent = window(history, 150)
        r = client.post(CHAT, json={"model": "tiny", "messages": sent}, headers=TRIMMED)
    assert int(r.headers["x-context-recall"]) >= 1
    block = upstream.chat_requests()[-1]["messages"][-2]["content"]
    assert f"[turn 5, user] {fact}" in block.splitlines()


@pytest.mark.parametrize("method", ["hybrid", "embeddings"])
def test_a_hit_found_by_meaning_alone_is_covered_by_the_one_word_it_shares_with_the_window(
    tmp_path: Path, method: str
) -> None:
    """To the mock's vectors "Baril walk." means "Is the passport walk on?" exactly;
    BM25 finds nothing ("walk" is in every message, "passport" in none). The hit shares
    only "walk" with the question, and so does every forwarded message: judged by that
    word, as a hit found by meaning always is, the window covers it. Asked with a word
    only the archive holds ("quay"), its message is found by words, and recalled."""
    with in_process(tmp_path, recall_method=method) as (client, upstream):
        send = conversation(client)
        for i in range(1, 60):
            send(
                user(
                    "Baril walk." if i == 5 else "Baril walk at the quay." if i == 7 else filler(i)
                )
            )
        r = send(user("Is the passport walk on?"))
        assert r.headers["x-context-recall"] == "0"
        r = send(user("Is the passport walk at the quay on?"))
        assert int(r.headers["x-context-recall"]) >= 1
        block = upstream.chat_requests()[-1]["messages"][-2]["content"]
        assert "[turn 7, user] Baril walk at the quay." in block


@pytest.mark.parametrize("method", ["lexical", "hybrid"])
def test_a_question_asking_beyond_its_subject_recalls_though_the_window_holds_the_subject(
    tmp_path: Path, method: str
) -> None:
    """The shelter comes up every 25 turns, so also in the window; the role is nowhere."""
    fact = "At the shelter they made me coordinator of the weekend volunteers."
    latest = "Another Saturday at the shelter."
    with in_process(tmp_path, recall_method=method) as (client, upstream):
        send = conversation(client)
        for i in range(1, 200):
            if i == 190:  # the window's, short: BM25 ranks it above the fact
                send(user(latest))
            elif i % 25 == 0:  # the archive's, long: BM25 ranks the fact above them
                day = f"Saturday {i} at the animal shelter: the dogs walked, the kennels cleaned"
                send(user(f"{day}, the food sorted and the yard swept before the adoption hour."))
            else:
                send(user(fact if i == 5 else filler(i)))
        forwarded = upstream.chat_requests()[-1]["messages"]
        assert all(fact not in str(m.get("content")) for m in forwarded), "not reduced yet"
        assert any(latest == m.get("content") for m in forwarded), "no shelter in the window"

        r = send(user("What role do I have at the shelter?"))
        assert int(r.headers["x-context-recall"]) >= 1
        block = upstream.chat_requests()[-1]["messages"][-2]["content"]
        assert f"[turn 5, user] {fact}" in block
        # Asking only in words the window holds, the window answers: no block.
        r = send(user("Did I walk the dogs at the shelter?"))
        assert r.headers["x-context-recall"] == "0"


def test_a_long_forwarded_message_on_the_subject_does_not_crowd_the_fact_out(
    tmp_path: Path,
) -> None:
    """The window ends with notes on the shelter in one message: each of their passages
    outranks the fact, and the search asks for enough hits to get past them all."""
    fact = "At the shelter they made me coordinator of the weekend volunteers."
    week = "Week {}: the shelter dogs walked, the shelter yard swept."
    notes = " ".join(week.format(i) for i in range(60))
    with in_process(tmp_path, recall_k="1") as (client, upstream):
        send = conversation(client)
        for i in range(1, 120):
            send(user(fact if i == 5 else filler(i)))
        send(user(notes))
        r = send(user("What role do I have at the shelter?"))
        forwarded = upstream.chat_requests()[-1]["messages"]
    assert all(fact not in str(m.get("content")) for m in forwarded[:-2]), "not reduced yet"
    assert any(m.get("content") == notes for m in forwarded), "the notes are not in the window"
    assert len(english.passages(notes)) > len(forwarded), "the notes do not crowd"
    assert r.headers["x-context-recall"] == "1"
    assert "coordinator of the weekend volunteers" in forwarded[-2]["content"]


def test_a_question_asking_beyond_gets_the_message_saying_something_new_not_the_shortest(
    tmp_path: Path,
) -> None:
    """Routine mentions of the shelter, shorter than the fact, outrank it by length alone."""
    fact = "At the shelter they made me coordinator of the weekend volunteers."
    routine = ["Quiet Saturday at the shelter.", "Saturday at the shelter, quiet."]
    with in_process(tmp_path, recall_k="2") as (client, upstream):
        send = conversation(client)
        for i in range(1, 200):
            if i == 190:
                send(user("Another Saturday at the shelter."))
            elif i % 25 == 0:
                send(user(routine[i // 25 % 2]))
            else:
                send(user(fact if i == 5 else filler(i)))
        r = send(user("What role do I have at the shelter?"))
    assert r.headers["x-context-recall"] == "2"
    block = upstream.chat_requests()[-1]["messages"][-2]["content"]
    assert block == f"{quoting.HEADER}\n[turn 5, user] {fact}\n[turn 5, assistant] Echo: {fact}"


def test_the_block_takes_the_headroom_when_the_history_stands_just_below_the_trigger(
    lexical: tuple[TestClient, MockUpstream],
) -> None:
    """On the turn before a summary the history leaves recall no room below the trigger;
    the block takes the window's headroom above it, which the history never fills."""
    client, _ = lexical
    counter, limit = TokenCounter(), int(0.7 * WINDOW)
    question = user("Remind me when my passport expires?")
    history: list[Any] = [system("You are a travel agent.")]
    out = 0

    def post(messages: list[Any]) -> httpx.Response:
        headers = {"Authorization": "Bearer sk-r", "X-Conversation-Id": "trip"}
        r = client.post(CHAT, json={"model": "tiny", "messages": messages}, headers=headers)
        assert r.status_code == 200, r.text
        return r

    for i in range(1, 400):
        # What the question's turn would forward: the reduced history so far, grown by
        # the last answer and the question (no reduction in between while below the trigger).
        coming = out + counter.count_messages("tiny", [history[-1], question])
        if i > 80 and limit - 45 < coming <= limit - 2:
            break
        history.append(user(PASSPORT if i == 5 else filler(i)))
        r = post(history)
        assert r.headers["x-context-recall"] == "0"
        out = int(r.headers["x-context-tokens-out"])
        history.append(r.json()["choices"][0]["message"])
    else:
        pytest.fail("the history never stood just below the trigger")
    r = post([*history, question])
    assert r.headers["x-context-recall"] == "2"
    assert limit < int(r.headers["x-context-tokens-out"]) <= WINDOW


def test_tool_results_within_a_turn_repeat_the_same_block(
    lexical: tuple[TestClient, MockUpstream],
) -> None:
    client, upstream = lexical
    send = conversation(client)
    for i in range(1, 80):
        if i % 10 == 0:  # tool rounds: recall must keep every chain whole
            r = send(user(f"Please call tool lookup for district {i}."))
            tool_call = r.json()["choices"][0]["message"]["tool_calls"][0]
            send(tool(tool_call["id"], f"District {i} has {i % 7} cafes."))
        else:
            send(user(PASSPORT if i == 3 else filler(i)))
    r = send(user("When does my passport expire? Please call tool passport first."))
    tool_call = r.json()["choices"][0]["message"]["tool_calls"][0]
    assert r.headers["x-context-recall"] == "2"
    r = send(tool(tool_call["id"], "Passport valid."))
    assert r.headers["x-context-recall"] == "2"
    first, follow_up = (req["messages"] for req in upstream.chat_requests()[-2:])
    assert follow_up[: len(first)] == first, "the turn's second request extends its first"
    quoted = [m for m in follow_up if str(m.get("content", "")).startswith(quoting.HEADER)]
    assert len(quoted) == 1 and f"[turn 3, user] {PASSPORT}" in quoted[0]["content"]


def test_recall_off_adds_no_header(tmp_path: Path) -> None:
    upstream = MockUpstream()
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1",
            "CONTEXT_PROXY_STORE_PATH": str(tmp_path / "p.db"),
        }
    )
    proxy = create_app(settings, transport=httpx.ASGITransport(upstream.app))
    with TestClient(proxy) as client:
        r = client.post(
            CHAT,
            json={"model": "gpt-4o-mini", "messages": [user(PASSPORT)]},
            headers={"Authorization": "Bearer sk-r", "X-Context-Store": "none"},
        )
    assert r.status_code == 200 and "x-context-recall" not in r.headers


@pytest.mark.integration
def test_embeddings_recall_through_real_servers(tmp_path: Path) -> None:
    """The official client, the real proxy and an upstream serving /v1/embeddings on loopback."""
    upstream = MockUpstream()
    with run_server(upstream.app) as upstream_url:
        settings = load_settings(
            env={
                "CONTEXT_PROXY_UPSTREAM_BASE_URL": upstream_url + "/v1",
                "CONTEXT_PROXY_STORE_PATH": str(tmp_path / "p.db"),
                "CONTEXT_PROXY_RECALL_ENABLED": "true",
                "CONTEXT_PROXY_RECALL_METHOD": "embeddings",
                "CONTEXT_PROXY_RECALL_EMBEDDING_MODEL": "text-embedding-3-small",
            },
            overrides={"models": {"windows": {"tiny": WINDOW}}},
        )
        with run_server(create_app(settings)) as url:
            api = openai.OpenAI(
                base_url=url + "/v1",
                api_key="sk-tenant-7",
                max_retries=0,
                default_headers={"X-Conversation-Id": "emb"},
            )
            history: list[Any] = [system("You are a travel agent.")]

            def ask(text: str) -> tuple[str, str]:
                history.append(user(text))
                raw = api.chat.completions.with_raw_response.create(model="tiny", messages=history)
                history.append(
                    {"role": "assistant", "content": raw.parse().choices[0].message.content}
                )
                return raw.headers["x-context-recall"], raw.headers["x-context-reduction"]

            for i in range(1, 120):
                ask(PASSPORT if i == 5 else filler(i))
            recalled, reduction = ask("Remind me when my passport expires?")
            last = upstream.chat_requests()[-1]["messages"]
            assert recalled == "2", reduction
            header, *quoted = last[-2]["content"].split("\n")
            assert header == quoting.HEADER and last[-2]["role"] == "system"
            # In similarity order, which the fake's hashed bag of words decides.
            assert sorted(quoted) == [
                f"[turn 5, assistant] Echo: {PASSPORT}",
                f"[turn 5, user] {PASSPORT}",
            ]
            assert ask("Which pasta recipe goes with a red wine sauce?")[0] == "0"
            metrics = httpx.get(url + "/metrics").text

    embeds = upstream.records("/v1/embeddings")
    assert embeds, "no embeddings requested"
    # Paid by the tenant: the client's own key, never anything else.
    assert {r.headers["authorization"] for r in embeds} == {"Bearer sk-tenant-7"}
    # Each archived message is embedded once, in batches after turns, plus one per question.
    inputs = [x for r in embeds for x in r.body["input"]]
    questions = [x for r in embeds if len(r.body["input"]) == 1 for x in r.body["input"]]
    assert inputs.count(PASSPORT) == 1
    assert len(questions) >= 2
    assert 'context_proxy_embeddings_total{outcome="ok"}' in metrics
    leading, _ = split_leading(last)
    assert leading[0] == system("You are a travel agent.")


def test_embeddings_down_costs_recall_never_a_request_and_heals(tmp_path: Path) -> None:
    with in_process(tmp_path, recall_method="embeddings") as (client, upstream):
        send = conversation(client)
        upstream.embeddings_down = True
        for i in range(1, 60):
            r = send(user(PASSPORT if i == 5 else filler(i)))
            assert r.headers["x-context-recall"] == "0"
        metrics = client.get("/metrics").text
        assert 'context_proxy_embeddings_total{outcome="failed"}' in metrics
        assert 'context_proxy_embeddings_total{outcome="ok"} 0.0' in metrics

        upstream.embeddings_down = False
        send(user(filler(60)))  # its background job embeds the backlog
        for _ in range(200):
            if 'context_proxy_embeddings_total{outcome="ok"} 1' in client.get("/metrics").text:
                break
            time.sleep(0.02)
        r = send(user("Remind me when my passport expires?"))
        assert int(r.headers["x-context-recall"]) >= 1
        block = upstream.chat_requests()[-1]["messages"][-2]["content"]
        assert f"[turn 5, user] {PASSPORT}" in block


@pytest.mark.parametrize(
    ("turn", "asks"),
    [("My passport number expires in March, so I renew it.", False), ("Passport expiry?", True)],
)
def test_embeddings_recall_only_for_a_turn_that_asks(tmp_path: Path, turn: str, asks: bool) -> None:
    """A statement is close in meaning to what was said before it, as chat is: its
    similarity to the archive brings no block; asked, the same subject does."""
    with in_process(tmp_path, recall_method="embeddings") as (client, upstream):
        send = conversation(client)
        settled = client.app_state["ctx"].background.settled
        for i in range(1, 60):
            send(user(PASSPORT if i == 5 else filler(i)))
            client.portal.call(settled)  # the archive's vectors are in
        r = send(user(turn))
    block = upstream.chat_requests()[-1]["messages"][-2]["content"]
    assert (f"[turn 5, user] {PASSPORT}" in block) is asks
    assert (r.headers["x-context-recall"] != "0") is asks


def test_hybrid_recall_fuses_both_searches_and_keeps_the_lexical_when_embeddings_fail(
    tmp_path: Path,
) -> None:
    locker = "My gym locker code is 4471, at the Central station gym."
    with in_process(tmp_path, recall_method="hybrid") as (client, upstream):
        send = conversation(client)
        for i in range(1, 60):
            send(user(PASSPORT if i == 5 else locker if i == 7 else filler(i)))
        r = send(user("Remind me when my passport expires?"))
        assert int(r.headers["x-context-recall"]) >= 1
        block = upstream.chat_requests()[-1]["messages"][-2]["content"]
        assert f"[turn 5, user] {PASSPORT}" in block
        embedded = [req for req in upstream.requests if req.path.endswith("/embeddings")]
        assert any("Remind me" in str(req.body) for req in embedded)

        upstream.embeddings_down = True
        r = send(user("Which locker is mine at the gym?"))
        assert int(r.headers["x-context-recall"]) >= 1
        assert f"[turn 7, user] {locker}" in upstream.chat_requests()[-1]["messages"][-2]["content"]
        assert 'context_proxy_embeddings_total{outcome="failed"}' in client.get("/metrics").text


def test_the_block_keeps_the_best_hits_that_fit_max_tokens(tmp_path: Path) -> None:
    # 40 tokens: one quoted fact, not two.
    with in_process(tmp_path, recall_max_tokens="40") as (client, upstream):
        send = conversation(client)
        for i in range(1, 60):
            send(user(PASSPORT if i == 5 else filler(i)))
        r = send(user("Remind me when my passport expires?"))
    block = upstream.chat_requests()[-1]["messages"][-2]
    assert r.headers["x-context-recall"] == "1"
    assert block["content"] == f"{quoting.HEADER}\n[turn 5, user] {PASSPORT}"
    assert TokenCounter().count_message("tiny", block) <= 40


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "answer", "reason"),
    [
        (503, {"error": {"message": "down"}}, "status 503"),
        (200, {"data": [{"index": 0, "embedding": [1.0, 0.0]}]}, "does not match"),
        (200, {"data": [{"index": 0}, {"index": 1}]}, "malformed"),
        (200, {"data": [{"index": 0, "embedding": [0, 0]}, {"index": 1, "embedding": [1]}]}, ""),
    ],
)
async def test_embedder_maps_upstream_answers(status: int, answer: Any, reason: str) -> None:
    import respx

    from proxy.embeddings import Embedder, EmbeddingsUnavailable

    async with httpx.AsyncClient() as client:
        embedder = Embedder(client, base_url="http://up/v1", model="emb", timeout_s=1)
        with respx.mock() as mock:
            route = mock.post("http://up/v1/embeddings").respond(status, json=answer)
            if reason:
                with pytest.raises(EmbeddingsUnavailable, match=reason):
                    await embedder.embed(["a", "b"], {"authorization": "Bearer sk-x"})
            else:
                first, second = await embedder.embed(["a", "b"], {"authorization": "Bearer sk-x"})
                assert first == bytes(8) and len(second) == 4  # zero stays zero; unit length
                # Remembered per key: the same texts cost no second call.
                await embedder.embed(["b"], {"authorization": "Bearer sk-x"})
                assert route.call_count == 1
                # Another key pays for its own (this canned answer has two vectors: refused).
                with pytest.raises(EmbeddingsUnavailable, match="does not match"):
                    await embedder.embed(["b"], {"authorization": "Bearer sk-other"})
                assert route.call_count == 2
            assert route.calls[0].request.headers["authorization"] == "Bearer sk-x"


def test_a_masked_tool_result_comes_back_when_a_question_needs_it(tmp_path: Path) -> None:
    """mask clears the result from the forwarded history; the archive still answers for it."""
    fact = "The deploy key rotates every 45 days on the staging cluster."
    with in_process(tmp_path, reduction_strategy="mask+tokens") as (client, upstream):
        send = conversation(client)
        for i in range(1, 40):
            r = send(user(f"Step {i}: please call tool read_file for notes {i}."))
            found = r.json()["choices"][0]["message"]["tool_calls"][0]
            # The fact comes after the part of the result the mock's answer quotes.
            text = "padding words " * 60 + (fact if i == 2 else filler(i))
            if (
                "masked"
                in send(tool(found["id"], f"notes {i}: {text}")).headers["x-context-reduction"]
            ):
                break
        forwarded = upstream.chat_requests()[-1]["messages"]
        assert all("deploy" not in str(m.get("content")) for m in forwarded), "not masked"
        assert any("Tool result cleared" in str(m.get("content")) for m in forwarded)
        r = send(user("How often does the deploy key rotate on staging?"))
    assert int(r.headers["x-context-recall"]) >= 1
    block = upstream.chat_requests()[-1]["messages"][-2]
    assert block["role"] == "system" and fact in block["content"]
