"""Pseudo-relevance feedback (`proxy.feedback`): the words of the hits recall chose lead to
more of what they are about, only into the places `k` leaves, and never to a block where
recall chose nothing. Pure pieces first, then the whole path through the real server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy import feedback, recall
from proxy.app import create_app
from proxy.config import load_settings
from proxy.english import porter
from proxy.mock import MockUpstream
from proxy.store import relevance
from proxy.store.base import SearchHit

from .factories import system, user
from .servers import run_server

WORDS = st.sampled_from(["biscuit", "beagle", "walk", "coffee", "plan", "2031", "outback"])
POSTINGS = st.dictionaries(WORDS, st.frozensets(st.integers(0, 29), max_size=30), max_size=6)
TEXTS = st.lists(
    st.sampled_from(
        [
            "We adopted a beagle named Biscuit.",
            "Biscuit had his first checkup today.",
            "Took the Outback to the lake.",
            "I walk to work with my coffee.",
            "What did you plan for the weekend?",
        ]
    ),
    max_size=6,
)


def hit(seq: int, text: str, score: float = 1.0, replies: tuple[SearchHit, ...] = ()) -> SearchHit:
    return SearchHit(seq=seq, turn=seq, role="user", text=text, score=score, replies=replies)


@given(POSTINGS, st.frozensets(st.integers(0, 29), max_size=4))
def test_feedback_leads_exactly_to_the_other_messages_of_a_word_the_hits_say_seldom(
    postings: dict[str, frozenset[int]], hits: frozenset[int]
) -> None:
    led = set(relevance.bridged(postings, hits))
    expected = {
        i
        for w, p in postings.items()
        if p & hits and len(p - hits) <= relevance.RARE_DOCS and not w.isdigit()
        for i in p - hits
    }
    assert led == expected
    assert not led & hits


def test_an_everyday_word_or_a_number_of_the_hits_leads_nowhere() -> None:
    everyday = frozenset(range(10))
    postings = {"walk": everyday, "2031": frozenset({1, 7}), "biscuit": frozenset({1, 12})}
    assert relevance.bridged(postings, frozenset({1})) == [12]
    assert relevance.bridged(postings, frozenset({3})) == []


@given(st.sampled_from(["What is my dog allergic to?", "When was the Biscuit checkup?", ""]), TEXTS)
def test_feedback_words_are_the_hits_words_the_question_did_not_search(
    question: str, texts: list[str]
) -> None:
    hits = [hit(i, t) for i, t in enumerate(texts)]
    words = feedback.words(question, hits)
    asked = recall.stems(question)
    assert len(set(words)) == len(words)
    assert not set(porter(words)) & asked
    # Every word of the hits the question did not search is there.
    said = {w for t in texts for w in recall.words(t)}
    assert {w for w in said if porter([w])[0] not in asked} == set(words)


@given(TEXTS, TEXTS, st.integers(1, 6))
def test_feedback_keeps_the_chosen_hits_first_and_only_fills_the_places_left(
    chosen: list[str], more: list[str], k: int
) -> None:
    found = recall.fresh([hit(i, t) for i, t in enumerate(chosen)], "?", [], k)
    extra = [hit(100 + i, t, score=-i) for i, t in enumerate(more)]
    out = feedback.extended(found, extra, "?", [], k, frozenset())
    assert out[: len(found)] == found
    assert len(out) <= max(k, len(found))
    texts = [s.text for s in feedback.said(out)]
    assert len(set(texts)) == len(texts)
    # Nothing chosen, nothing added: feedback never makes a block.
    assert feedback.extended([], extra, "?", [], k, frozenset()) == []


ADOPTED = "We adopted a beagle from the county shelter, his name is Biscuit."
CHECKUP = "Biscuit had his first checkup this morning: allergic to chicken, poor guy."
WINDOW = 3000


def filler(i: int) -> str:
    return f"Day {i}: plan a walk around district {i} with coffee stops."


def blocks(
    tmp_path: Path, said: list[Any], questions: list[str], *, stored: bool, on: bool
) -> list[str]:
    """The recall block each of `questions` gets after `said` ("" for none), through the real
    server driven by the OpenAI SDK, feedback `on` or off. With `stored`, a turn before the
    questions archives the conversation; else the proxy meets it whole with each question."""
    upstream = MockUpstream()
    with run_server(upstream.app) as upstream_url:
        settings = load_settings(
            env={
                "CONTEXT_PROXY_UPSTREAM_BASE_URL": upstream_url + "/v1",
                "CONTEXT_PROXY_STORE_PATH": str(tmp_path / f"{on}-{stored}.db"),
                "CONTEXT_PROXY_RECALL_ENABLED": "true",
                "CONTEXT_PROXY_RECALL_FEEDBACK": str(on).lower(),
            },
            overrides={"models": {"windows": {"tiny": WINDOW}}},
        )
        with run_server(create_app(settings)) as url:
            api = openai.OpenAI(
                base_url=url + "/v1",
                api_key="sk-f",
                max_retries=0,
                default_headers={"X-Conversation-Id": "dog"},
            )
            history = [*said]
            if stored:
                history.append(user(filler(len(said))))
                answer = api.chat.completions.create(model="tiny", messages=history)
                history.append({"role": "assistant", "content": answer.choices[0].message.content})
            found = []
            for question in questions:
                raw = api.chat.completions.with_raw_response.create(
                    model="tiny", messages=[*history, user(question)]
                )
                block = upstream.chat_requests()[-1]["messages"][-2]
                recalled = int(raw.headers["x-context-recall"])
                assert recalled == 0 or block["role"] == "system"
                found.append(str(block["content"]) if recalled else "")
            return found


@pytest.mark.parametrize("stored", [True, False], ids=["archived", "met-whole"])
def test_a_statement_naming_what_a_chosen_hit_names_fills_a_free_place(
    tmp_path: Path, stored: bool
) -> None:
    """ "What did the vet find about the beagle?" shares no word with the checkup; the
    adoption it finds names the dog, and the name leads to the checkup. Switched off, the
    block is the plain path's; a question recall finds nothing for gets no block either way."""
    said: list[Any] = [system("You are a friend.")]
    for i in range(1, 120):
        text = ADOPTED if i == 5 else CHECKUP if i == 40 else filler(i)
        said += [user(text), {"role": "assistant", "content": f"Nice! Day {i} noted."}]
    questions = [
        "What did the vet find about the beagle?",
        "Which pasta goes with a red wine sauce?",
    ]
    (fed, none), (plain, still_none) = (
        blocks(tmp_path, said, questions, stored=stored, on=on) for on in (True, False)
    )
    assert ADOPTED in fed and CHECKUP in fed
    assert ADOPTED in plain and CHECKUP not in plain
    assert none == still_none == ""
