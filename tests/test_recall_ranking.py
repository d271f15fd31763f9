"""Recall's ranking pieces, pure: the relevance floor, names, fusion, replies and excerpts.

The store's search runs them over FTS5 (test_store.py); the app runs the whole
path (test_recall.py, and the development set in test_recall_eval.py).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy import recall
from proxy.store import relevance
from proxy.store.base import SearchHit

WORDS = st.sampled_from(["passport", "museum", "walk", "coffee", "plan", "2031", "tuesday"])
POSTINGS = st.dictionaries(WORDS, st.frozensets(st.integers(0, 39), max_size=40), max_size=6)


def hit(seq: int, text: str = "", role: str = "user", score: float = 1.0) -> SearchHit:
    return SearchHit(seq=seq, turn=seq, role=role, text=text or f"message {seq}", score=score)


@given(POSTINGS, st.integers(40, 400))
def test_a_passing_message_holds_a_specific_word_and_half_the_weight(
    postings: dict[str, frozenset[int]], total: int
) -> None:
    passed = relevance.passing(postings, total)
    rare = max(relevance.RARE_DOCS, relevance.RARE_SHARE * total)
    weights = {w: relevance.idf(total, len(p)) for w, p in postings.items() if p}
    for i in passed:
        held = [w for w, p in postings.items() if i in p]
        assert any(len(postings[w]) <= rare and not w.isdigit() for w in held)
        assert sum(weights[w] for w in held) >= relevance.MATCHED_SHARE * sum(weights.values())
    assert len(set(passed)) == len(passed)


@given(POSTINGS, st.integers(40, 400), st.text(min_size=3, max_size=8))
def test_a_word_the_conversation_never_used_changes_nothing(
    postings: dict[str, frozenset[int]], total: int, new: str
) -> None:
    before = sorted(relevance.passing(postings, total))
    assert sorted(relevance.passing({**postings, f"new{new}": frozenset()}, total)) == before


def test_only_everyday_words_or_a_bare_number_pass_nothing() -> None:
    everyday = frozenset(range(30))
    assert relevance.passing({"walk": everyday, "coffee": everyday}, 100) == []
    assert relevance.passing({"2031": frozenset({3}), "walk": everyday}, 100) == []
    assert relevance.passing({"passport": frozenset({3}), "walk": everyday}, 100) == [3]


def test_a_name_is_one_the_sides_address_each_other_by() -> None:
    greetings = ["Hey Evan!", "Hi Evan, how was the trip?", "Thanks, Evan.", "Evan! Long time."]
    assert relevance.addressed("evan", greetings)
    assert relevance.addressed("evan", [*greetings, "Evan said he would come."])
    said_of = ["My cousin Maya moved to Lisbon.", "Maya loves it there.", "Hey Tom!"]
    assert not relevance.addressed("maya", said_of)
    # Capitalised at the start of a message and followed by a comma or "!" only.
    assert not relevance.addressed("denver", ["Denver is lovely.", "We flew to Denver."])
    assert not relevance.addressed("evan", [])


@given(
    st.lists(st.integers(0, 30), unique=True, max_size=12),
    st.lists(st.integers(0, 30), unique=True, max_size=12),
)
def test_fusion_keeps_every_message_once_and_agrees_where_the_rankings_do(
    lexical: list[int], semantic: list[int]
) -> None:
    fused = recall.fuse([hit(s) for s in lexical], [hit(s) for s in semantic])
    assert sorted(h.seq for h in fused) == sorted(set(lexical) | set(semantic))
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
    if lexical and semantic and lexical[0] == semantic[0]:
        assert fused[0].seq == lexical[0]
    # One ranking alone keeps its order.
    assert [h.seq for h in recall.fuse([hit(s) for s in lexical])] == lexical


def test_fusion_keeps_the_lexical_hit_and_its_replies() -> None:
    answer = hit(4, "A silver Prius.", "assistant")
    asked = SearchHit(3, 3, "user", "Still driving that old car?", 9.0, (answer,))
    fused = recall.fuse([asked], [hit(3, asked.text, score=0.8), hit(7)])
    assert fused[0].replies == (answer,) and fused[0].seq == 3


def test_a_reply_already_forwarded_or_quoted_is_left_out() -> None:
    answer = hit(4, "A silver Prius.", "assistant")
    asked = SearchHit(3, 3, "user", "Still driving that old car?", 9.0, (answer,))
    question = "What does Evan drive?"
    assert recall.fresh([asked], question, [], k=3)[0].replies == (answer,)
    assert recall.fresh([asked], question, [answer.text], k=3)[0].replies == ()
    # The answer as a hit of its own after the question that carried it: not twice.
    assert recall.fresh([asked, answer], question, [], k=3) == [asked]
    assert recall.quoted([asked]) == 2


def test_the_block_quotes_each_hit_then_its_replies() -> None:
    answer = hit(4, "A silver Prius.", "assistant")
    asked = SearchHit(3, 3, "user", "Still driving that old car?", 9.0, (answer,))
    assert recall.quote([asked, hit(9, "Car wash on Sunday.")], 500) == "\n".join(
        [
            recall.HEADER,
            "[turn 3, user] Still driving that old car?",
            "[turn 4, assistant] A silver Prius.",
            "[turn 9, user] Car wash on Sunday.",
        ]
    )


def test_a_long_message_is_quoted_around_its_match_not_its_head() -> None:
    filler = [f"Line {i} about the weather and the train." for i in range(20)]
    text = " ".join([*filler[:10], "I am allergic to peanuts.", *filler[10:]])
    quoted = recall.excerpt(text, 200, recall.stems("What is Evan allergic to?"))
    assert "I am allergic to peanuts." in quoted
    assert quoted.startswith("[...] ") and quoted.endswith(" [...]")
    assert len(quoted) <= 200 + len("[...]  [...]")
    # No word in common: the head, as before; short texts whole.
    assert recall.excerpt(text, 50, recall.stems("Which opera?")) == text[:50] + " [...]"
    assert recall.excerpt("short", 50, frozenset()) == "short"


@given(st.lists(st.sampled_from(["Cats sleep.", "I like tea!", "Rain again?", "x"]), max_size=30))
def test_an_excerpt_never_exceeds_its_budget_and_is_made_of_the_text(lines: list[str]) -> None:
    text = " ".join(lines)
    quoted = recall.excerpt(text, 40, recall.stems("tea"))
    core = quoted.removeprefix("[...] ").removesuffix(" [...]")
    assert len(core) <= 40 and core in text
