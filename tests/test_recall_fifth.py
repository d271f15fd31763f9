"""The fifth recall set (`bench.recall_fifth`): well formed, its annotations true, and what
recall finds in it held."""

from __future__ import annotations

import copy
import re
from collections import Counter
from pathlib import Path

import pytest
import tiktoken

from bench.recall_eval import evaluate, fifth_set, load
from bench.recall_fifth import DATED, check, fifth_chats, main
from bench.recall_set import Conversation

# A few points under what lexical recall held on `fifth_set(3, seed=3)` when the set was
# written (docs/recall.md, "A fifth set written blind").
FOUND, WITH_TURN, FALSE_RECALLS = 0.15, 0.25, 4


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_every_annotation_holds(seed: int) -> None:
    assert check(fifth_chats(6, seed)) == []


def test_a_false_annotation_is_reported() -> None:
    # `check` is what proves the set: each kind of mistake it exists for, it names.
    (made,) = fifth_chats(1, 0)
    said = made.messages
    answerable = next(q for q in made.questions if q.evidence and len(q.answer) == 1)
    nothing = next(q for q in made.questions if not q.evidence)
    broken = copy.deepcopy(made)
    moved = next(q for q in broken.questions if q.text == answerable.text)
    moved.evidence = [moved.evidence[0] + 10]  # a turn that does not hold the answer
    out = next(q for q in broken.questions if q.text != answerable.text and q.evidence)
    out.evidence = [len(said)]
    said_now = next(q for q in broken.questions if q.text == nothing.text)
    broken.messages[5]["content"] += f" {said_now.answer[0]}"
    problems = check([broken])
    assert any(answerable.text in p and "not in its evidence" in p for p in problems), problems
    assert any(out.text in p and "out of range" in p for p in problems), problems
    assert any(nothing.text in p and "nothing should answer it" in p for p in problems), problems
    swapped = copy.deepcopy(made)
    swapped.messages[0]["role"] = "assistant"
    assert check([swapped]) == ["0: roles do not alternate user, assistant"]


def test_the_same_seed_writes_the_same_file(tmp_path: Path) -> None:
    first, again, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert main([str(first), "--count", "2"]) == 0
    assert main([str(again), "--count", "2"]) == 0
    assert main([str(other), "--count", "2", "--seed", "9"]) == 0
    assert first.read_bytes() == again.read_bytes() != other.read_bytes()
    loaded = load(str(first))
    assert [c.as_json() for c in loaded] == [c.as_json() for c in fifth_chats(2, 0)]


def test_a_conversation_is_the_size_and_shape_the_benchmark_describes() -> None:
    encoding = tiktoken.get_encoding("cl100k_base")
    for convo in fifth_chats(6, 1):
        said = convo.messages
        tokens = sum(len(encoding.encode(m["content"])) for m in said)
        sittings = sum(1 for m in said if DATED.match(m["content"]))
        assert 480 <= len(said) <= 720 and 15_000 <= tokens <= 24_000, (len(said), tokens)
        assert 20 <= sittings <= 24
        assert [m["role"] for m in said] == ["user", "assistant"] * (len(said) // 2)
        answerable = [q for q in convo.questions if q.evidence]
        assert len(answerable) == 15 and len(convo.questions) == 17
        assert sum(len(q.evidence) == 2 for q in answerable) >= 3  # multi-hop, told twice
        lengths = Counter(min(len(m["content"]) // 40, 5) for m in said)
        assert lengths[0] >= 100 and lengths[5] >= 50  # one-word replies and paragraphs


def test_a_temporal_answer_is_its_sittings_date_as_the_header_writes_it() -> None:
    for convo in fifth_chats(3, 2):
        temporal = [q for q in convo.questions if q.text.startswith("When did")]
        assert len(temporal) == 3
        for q in temporal:
            (at,) = q.evidence
            before = [m["content"] for m in convo.messages[: at + 1] if DATED.match(m["content"])]
            assert q.answer[0] in before[-1]
            assert re.search(r"\d{4}", q.answer[0])


@pytest.mark.integration
def test_lexical_recall_finds_more_than_plain_bm25_and_recalls_falsely_less() -> None:
    # Written blind to the recall rules. Seed 3, three conversations: 45 answerable, 6 not.
    conversations: list[Conversation] = fifth_set(3, seed=3)
    window = evaluate(conversations, "window only, fifth", recall=False)
    plain = evaluate(conversations, "plain BM25, fifth", recall=False, plain=True)
    recall = evaluate(conversations, "lexical recall, fifth")
    lines = (window.line(), plain.line(), recall.line())
    assert recall.found_share >= FOUND, lines
    assert recall.with_turn_share >= WITH_TURN, lines
    assert recall.found_share > plain.found_share, lines
    assert recall.false_recalls <= FALSE_RECALLS < plain.false_recalls, lines
    assert recall.tokens_share <= window.tokens_share + 0.02, lines
