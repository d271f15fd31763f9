"""The fourth recall set is well formed: deterministic for a seed, its annotations true."""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from bench.recall_eval import load
from bench.recall_fourth import KINDS, LIVES, build, chats, main, problems


def test_same_seed_writes_the_same_file_and_another_seed_another(tmp_path: Path) -> None:
    first, again, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert main([str(first)]) == 0
    assert main([str(again)]) == 0
    assert main([str(other), "--seed", "7"]) == 0
    assert first.read_bytes() == again.read_bytes()
    assert first.read_bytes() != other.read_bytes()


def test_the_file_loads_as_the_eval_reads_it_and_its_answers_are_in_its_evidence(
    tmp_path: Path,
) -> None:
    out = tmp_path / "set.jsonl"
    main([str(out), "--count", "6"])
    convos = load(str(out))
    assert len(convos) == 6
    assert sum(len(c.questions) for c in convos) >= 90
    for convo in convos:
        said = convo.messages
        assert [m["role"] for m in said] == ["user", "assistant"] * (len(said) // 2)
        for q in convo.questions:
            texts = [said[i]["content"] for i in q.evidence]
            # What the eval checks: each answer word, as written, in what holds the answer.
            assert all(any(word in t for t in texts) for word in q.answer), q.text
            assert all(word == word.lower() for word in q.answer), q.text


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_every_annotation_holds_for_several_seeds(seed: int) -> None:
    made = chats(len(LIVES), seed)
    for (convo, kinds), life in zip(made, LIVES, strict=True):
        assert problems(convo, kinds, life) == []
    counted = Counter(kind for _, ks in made for kind in ks)
    assert all(counted[kind] >= 10 for kind in KINDS), counted
    assert 0.15 <= counted["adversarial"] / sum(counted.values()) <= 0.25


def test_a_temporal_question_points_at_its_sessions_dated_first_message() -> None:
    convo, kinds = build(LIVES[0], 0)
    dated = re.compile(r"\b(19|20)\d\d\b")
    temporal = [q for q, k in zip(convo.questions, kinds, strict=True) if k == "temporal"]
    assert temporal
    for q in temporal:
        year = next(w for w in q.answer if re.fullmatch(r"20\d\d", w))
        holders = [i for i in q.evidence if dated.search(convo.messages[i]["content"])]
        assert holders, q.text
        assert all(year in convo.messages[i]["content"] for i in holders)


def test_a_question_never_said_has_no_evidence_and_its_topic_is_nowhere() -> None:
    convo, kinds = build(LIVES[1], 3)
    never = [
        (q, ask)
        for q, k, ask in zip(convo.questions, kinds, LIVES[1].asks, strict=True)
        if k == "adversarial" and not q.evidence
    ]
    assert never
    chat = json.dumps(convo.messages).lower()
    for q, ask in never:
        assert q.answer == ()
        assert not any(re.search(rf"\b{word}\b", chat) for word in ask.absent), q.text


def test_the_check_finds_a_moved_evidence_index_a_foreign_word_and_a_leaked_topic() -> None:
    life = LIVES[2]
    convo, kinds = build(life, 0)
    moved = copy.deepcopy(convo)
    moved.questions[0].evidence = [moved.questions[0].evidence[0] + 1]
    assert any("holds no answer word" in p for p in problems(moved, kinds, life))
    foreign = copy.deepcopy(convo)
    foreign.questions[0].answer = (*foreign.questions[0].answer, "zeppelin")
    assert any("'zeppelin'" in p for p in problems(foreign, kinds, life))
    leaked = copy.deepcopy(convo)
    index = next(i for i, q in enumerate(leaked.questions) if not q.evidence)
    word = life.asks[index].absent[0]
    leaked.messages[5]["content"] += f" Anyway, the {word} thing went fine."
    assert any("never said" in p for p in problems(leaked, kinds, life))
