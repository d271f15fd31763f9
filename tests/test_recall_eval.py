"""Recall on the development set (`bench.recall_set`), through the real recall path.

The figures are this release's on three generated conversations: a change to
recall that loses evidence, or recalls for questions nothing answers, fails
here. They are not the goal (the held-out benchmark is); see docs/recall.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from bench.recall_eval import (
    Score,
    _reached,
    evaluate,
    fourth_set,
    load,
    main,
    other_set,
    third_set,
)
from bench.recall_set import (
    FACTS,
    THEMES,
    Conversation,
    Question,
    conversation,
    dev_set,
)
from bench.recall_third import chats as third_chats
from bench.recall_variants import VARIANTS
from bench.recall_wires import WIRES
from proxy.mock.embeddings import embedding_of

pytestmark = pytest.mark.integration


def test_the_generator_is_deterministic_and_annotates_its_evidence() -> None:
    first, again = conversation(7), conversation(7)
    assert first.messages == again.messages and first.as_json() == again.as_json()
    statements = {fact[0] for fact in FACTS} | {fact[0] for _, fact in THEMES}
    for question in first.questions:
        if question.evidence:
            (at,) = question.evidence
            said = first.messages[at]["content"]
            assert any(s in said for s in statements)
            assert all(word in said for word in question.answer)
    assert sum(1 for q in first.questions if not q.evidence) == 2


def test_each_side_keeps_coming_back_to_an_interest_the_window_also_holds() -> None:
    convo = conversation(0)
    for pool, _ in THEMES[:2]:  # the two interests of seed 0
        sessions = {
            n // 24 for n, m in enumerate(convo.messages) if any(s in m["content"] for s in pool)
        }
        assert len(sessions) >= 8 and max(sessions) >= 20, sessions
    # Talkative people bring their interest up in about a twelfth of the messages.
    talkative = VARIANTS["talkative"](0)
    for pool, _ in THEMES[:2]:
        said = [m for m in talkative.messages if any(s in m["content"] for s in pool)]
        assert len(talkative.messages) / 15 <= len(said) <= len(talkative.messages) / 10


def test_recall_brings_back_evidence_the_window_lost_within_the_token_goal() -> None:
    conversations = dev_set(3)
    window = evaluate(conversations, "window only", recall=False)
    recall = evaluate(conversations, "lexical recall")
    assert window.found_share <= 0.10
    assert recall.found_share >= 0.65, recall.line()
    assert recall.tokens_share <= 0.12, recall.line()
    # Most unanswerable questions still get a block: a word of theirs said once or twice
    # is enough ("How many cousins?" brings back a cousin's move, "first job" a first
    # marathon), where the set written apart from the rules (below) needs it.
    assert recall.false_recalls <= 4, recall.line()


def test_a_conversation_met_with_its_whole_history_recalls_from_that_history() -> None:
    # An app that starts using the proxy mid-conversation: no turn of it is archived
    # yet, and its history is searched as the archive will be once it is.
    conversations = dev_set(3)
    window = evaluate(conversations, "window only, met whole", recall=False, replay=False)
    met = evaluate(conversations, "lexical recall, met whole", replay=False)
    assert window.found_share <= 0.05, window.line()
    assert met.found_share >= 0.65, met.line()
    assert met.tokens_share <= 0.12, met.line()
    assert met.false_recalls <= 4, met.line()


@pytest.mark.parametrize("variant", ["nicknames", "speakers named", "talkative", "one role"])
def test_other_replays_nicknames_and_talkative_people_find_as_much(variant: str) -> None:
    # "Evan: ..." in every message: the name is no longer only in greetings, and the
    # quoted sentence must still be the one with the fact, not the labelled first one.
    # "Hey Ev!": the name the questions use is one the conversation never wrote.
    # Talkative: an interest's own word is in too many messages to single out its fact.
    # One role: both people's turns sent as user messages, "ok" between, so the answer
    # to an asking hit is the next user message.
    conversations = [VARIANTS[variant](seed) for seed in range(3)]
    recall = evaluate(conversations, f"lexical recall, {variant}")
    assert recall.found_share >= 0.65, recall.line()
    assert recall.tokens_share <= 0.12, recall.line()


def test_an_app_of_another_wire_format_gets_the_same_recall() -> None:
    # The core reduces and recalls one neutral turn; Responses and Anthropic place the
    # block their own way (Anthropic merges it into the question's user message, and
    # estimates its tokens, so the block's room is smaller). The mock upstream
    # validates each request as the provider does.
    conversations = [conversation(seed) for seed in range(2)]
    chat = evaluate(conversations, "lexical recall, chat completions")
    assert chat.found_share >= 0.6, chat.line()
    for wire in WIRES:
        other = evaluate(conversations, f"lexical recall, {wire}", wire=wire)
        assert (other.found, other.with_turn, other.false_recalls) == (
            chat.found,
            chat.with_turn,
            chat.false_recalls,
        ), (chat.line(), other.line())
        assert other.replayed == chat.replayed and other.tokens_share <= 0.12, other.line()


def test_a_session_sent_as_one_message_is_found_by_its_passages() -> None:
    # Each session one message of 24 lines: the fact is one line of about 850 tokens.
    # Searched whole, such messages rank by length and fill the block's budget two at a
    # time; by passages, the line with the fact is the hit.
    conversations = [VARIANTS["a message a session"](seed) for seed in range(3)]
    recall = evaluate(conversations, "lexical recall, a message a session")
    assert recall.found_share >= 0.6, recall.line()
    assert recall.tokens_share <= 0.12, recall.line()


def test_chat_in_everyday_words_gets_few_blocks_and_keeps_the_prefix_cache() -> None:
    # Small talk that rarely repeats a sentence shares its everyday words ("the garden
    # near my aunt's house") with much of the conversation. A turn that asks nothing
    # recalls only what names something in at most two messages, so ordinary turns seldom
    # get a block, and the requests keep extending the one before for the prompt cache.
    conversations = [VARIANTS["varied small talk"](seed) for seed in range(3)]
    window = evaluate(conversations, "window only, varied small talk", recall=False)
    recall = evaluate(conversations, "lexical recall, varied small talk")
    assert recall.found_share >= 0.65, recall.line()
    # Words said once or twice, as above, and "What was Maya's first job as a teenager?":
    # a question naming whom it asks about needs only a specific word, and the small
    # talk's frames say "job" in about 3 % of the messages.
    assert recall.false_recalls <= 3, recall.line()
    assert recall.replayed == window.replayed == 900
    assert recall.fired_share <= 0.15, recall.line()
    assert recall.extended_share >= window.extended_share - 0.10, (window.line(), recall.line())
    # Where the reduction's cycle stands at the question decides most of the tokens.
    assert recall.tokens_share <= window.tokens_share + 0.02, (window.line(), recall.line())


def against_plain(conversations: list[Conversation], name: str) -> tuple[Score, Score, Score]:
    """The window alone, the window with plain BM25's top 5, and lexical recall."""
    window = evaluate(conversations, f"window only, {name}", recall=False)
    plain = evaluate(conversations, f"plain BM25, {name}", recall=False, plain=True)
    return window, plain, evaluate(conversations, f"lexical recall, {name}")


def test_a_set_written_apart_from_the_rules_finds_more_than_plain_bm25() -> None:
    # `bench.recall_other` was written without reading the recall rules: friends whose
    # questions word a fact in their own words ("Which shade is the bedroom now?" for
    # "we painted the bedroom navy"), and whose chat asks each other things all along.
    # Seed 7: the rules were measured on seed 0's conversations.
    window, plain, recall = against_plain(other_set(3, seed=7), "set written apart")
    lines = (window.line(), plain.line(), recall.line())
    assert recall.found_share >= plain.found_share + 0.15, lines
    # About what plain BM25 costs. Its questions all name whom they ask about, so
    # those nothing answers get a block too, as with plain BM25: docs/recall.md.
    assert recall.tokens_share <= plain.tokens_share + 0.01, lines
    assert recall.tokens_share <= window.tokens_share + 0.02, lines


# Both written without reading the recall rules. The third: dated sessions, warm
# persona chat, photos described in text, temporal and inference questions. The
# fourth: lives told indirectly ("the boys finally have their own rooms"), facts
# corrected later, numbers in words. Seed 3: their figures were only read on seed 0.
@pytest.mark.parametrize("made", [third_set, fourth_set], ids=["third", "fourth"])
def test_a_set_written_blind_finds_more_than_plain_bm25_and_recalls_falsely_less(
    made: Callable[..., list[Conversation]],
) -> None:
    window, plain, recall = against_plain(made(3, seed=3), made.__name__)
    lines = (window.line(), plain.line(), recall.line())
    assert recall.found_share >= plain.found_share + 0.15, lines
    assert recall.false_recalls <= plain.false_recalls - 3, lines
    assert recall.tokens_share <= window.tokens_share + 0.02, lines


def test_a_temporal_question_gets_its_statement_with_the_date_of_its_sitting() -> None:
    # The third set's "When did ...?" questions count as found when the statement ("I
    # played at a recital earlier today") and its sitting's date ("(3 June 2023) Hi!",
    # another message) both reach the model: a recalled statement is quoted with it.
    conversations = [
        Conversation(c.messages, [Question(q.text, q.evidence, tuple(q.answer))])
        for c in third_chats(3, seed=3)
        for q in c.questions
        if q.kind == "temporal"
    ]
    recall = evaluate(conversations, "lexical recall, temporal questions of the third set")
    assert recall.answerable == 9
    assert recall.found >= 7, recall.line()


def test_hybrid_finds_what_either_search_does_and_recalls_falsely_only_where_one_does() -> None:
    # Hybrid fuses what each search alone would keep, so it quotes a hit only where one
    # of them alone would. (The mock's vectors are hashed words: this is the fusion's
    # logic, not semantics.)
    conversations = dev_set(3)
    alone = [evaluate(conversations, m, method=m) for m in ("lexical", "embeddings")]
    hybrid = evaluate(conversations, "hybrid", method="hybrid")
    assert hybrid.found >= max(s.found for s in alone), hybrid.line()
    either = {q for s in alone for q in s.recalled_falsely or ()}
    assert set(hybrid.recalled_falsely or ()) <= either, hybrid.line()


def test_the_eval_answers_embeddings_with_the_vectors_it_is_given() -> None:
    """A model's vectors (`--embeddings-model`) come in as `vectors`: here the mock's
    own, so the row is the mock's, and the same on every run."""
    convo = dev_set(1)
    asked: list[str] = []

    def vectors(texts: Sequence[str]) -> list[list[float]]:
        asked.extend(texts)
        return [embedding_of(t) for t in texts]

    given = evaluate(convo, "row", method="embeddings", vectors=vectors)
    assert given.line() == evaluate(convo, "row", method="embeddings").line()
    assert {q.text for q in convo[0].questions} <= set(asked)
    assert {m["content"] for m in convo[0].messages[:-4]} <= set(asked)  # archived, embedded


def test_the_eval_refuses_embeddings_rows_without_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["--only", "dev", "--methods", "lexical,hybrid"],
        ["--only", "dev", "--embeddings-model", str(tmp_path)],
    ):
        with pytest.raises(SystemExit):
            main(argv)
    err = capsys.readouterr().err
    assert "needs --embeddings-model" in err
    assert "holds no sentence-transformers model" in err


def test_an_evidence_turn_reached_the_model_whole_or_by_its_answer_sentence() -> None:
    said = "Work was busy. I am allergic to peanuts, so I check labels. The train was late."
    assert _reached(said, (), f"[turn 3, user] {said}")
    cut = "[...] I am allergic to peanuts, so I check labels. [...]"
    assert _reached(said, ("peanuts",), cut)
    assert not _reached(said, (), cut)  # no answer words: only the whole turn counts
    assert not _reached(said, ("peanuts",), "Work was busy.")


def test_a_file_of_conversations_is_scored_by_its_evidence_turns(tmp_path: Path) -> None:
    convo = conversation(3)
    questions = [
        {"text": q.text, "evidence": q.evidence} for q in convo.questions
    ]  # no answer words, as a benchmark file may have
    path = tmp_path / "convos.jsonl"
    path.write_text(json.dumps({"messages": convo.messages, "questions": questions}) + "\n")
    (loaded,) = load(str(path))
    assert [q.answer for q in loaded.questions] == [()] * len(questions)
    window, recall = evaluate([loaded], "window", recall=False), evaluate([loaded], "recall")
    assert window.evidence_turns == recall.evidence_turns == 12
    # A question counts when one of its (here single) evidence turns reached the model.
    assert recall.found == recall.turns_found > window.found == window.turns_found
