"""The third recall set (`bench.recall_third`): well-formed, deterministic, annotated right.

Only the file is checked here, never recall's figures on it.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from bench.recall_eval import load
from bench.recall_third import KINDS, PEOPLE, AnnotationError, chats, main, self_check


@pytest.fixture(scope="module")
def six() -> list[dict[str, object]]:
    return [c.as_json() for c in chats(6, seed=0)]


def test_a_seed_gives_the_same_file_and_another_seed_a_different_one() -> None:
    first = [c.as_json() for c in chats(2, seed=3)]
    assert first == [c.as_json() for c in chats(2, seed=3)]
    assert first != [c.as_json() for c in chats(2, seed=4)]


def test_roles_alternate_and_messages_carry_no_speaker_prefix(six: list[dict]) -> None:
    for convo in six:
        roles = [m["role"] for m in convo["messages"]]
        assert roles == ["user" if i % 2 == 0 else "assistant" for i in range(len(roles))]
        assert 480 <= len(roles) <= 720
        tags = tuple(f"{name}:" for name, _, _ in PEOPLE)
        assert not any(m["content"].startswith(tags) for m in convo["messages"])


def test_every_answer_word_is_in_an_evidence_message(six: list[dict]) -> None:
    answerable = 0
    for convo in six:
        said = [m["content"] for m in convo["messages"]]
        for q in convo["questions"]:
            assert q["evidence"] == sorted(set(q["evidence"]))
            assert all(0 <= i < len(said) for i in q["evidence"])
            if not q["evidence"]:
                assert q["answer"] == [] and q["kind"] == "adversarial"
                continue
            answerable += 1
            for word in q["answer"]:
                assert any(word in said[i] for i in q["evidence"]), (q, word)
            # Each evidence message holds part of the answer (or is the date's message).
            for i in q["evidence"]:
                assert any(w in said[i] for w in q["answer"]), (q, said[i])
    assert answerable >= 60


def test_the_kinds_are_mixed_as_the_benchmark_mixes_them(six: list[dict]) -> None:
    kinds = Counter(q["kind"] for c in six for q in c["questions"])
    assert set(kinds) == set(KINDS)
    assert all(n >= 10 for n in kinds.values()), kinds
    total = sum(kinds.values())
    assert 80 <= total <= 100
    assert 0.15 <= kinds["adversarial"] / total <= 0.25
    never = [q for c in six for q in c["questions"] if not q["evidence"]]
    assert 5 <= len(never) < kinds["adversarial"]  # some are about the other person


def test_temporal_evidence_includes_the_sessions_dated_message(six: list[dict]) -> None:
    for convo in six:
        for q in (q for q in convo["questions"] if q["kind"] == "temporal"):
            first, _statement = q["evidence"]
            assert re.search(r"20\d\d", convo["messages"][first]["content"])
            assert q["answer"][-1] in convo["messages"][first]["content"]


def test_the_check_rejects_a_shifted_evidence_index() -> None:
    (chat,) = chats(1, seed=1)
    self_check(chat)
    broken = copy.deepcopy(chat)
    target = next(q for q in broken.questions if q.kind == "single-hop")
    target.evidence = [target.evidence[0] + 2]
    with pytest.raises(AnnotationError):
        self_check(broken)


def test_the_check_rejects_a_never_said_question_whose_topic_was_said() -> None:
    (chat,) = chats(1, seed=2)
    broken = copy.deepcopy(chat)
    target = next(q for q in broken.questions if not q.evidence)
    broken.messages[5]["content"] += " " + " ".join(target.forbid)
    with pytest.raises(AnnotationError):
        self_check(broken)


def test_the_command_writes_a_file_the_evaluator_loads(tmp_path: Path) -> None:
    out = tmp_path / "third.jsonl"
    assert main([str(out), "--seed", "5", "--count", "2"]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [c.as_json() for c in chats(2, seed=5)]
    loaded = load(str(out))
    assert len(loaded) == 2 and all(c.questions for c in loaded)
    assert loaded[0].questions[0].text == json.loads(lines[0])["questions"][0]["text"]


def test_the_check_rejects_a_detail_filled_in_after_its_own_article() -> None:
    (chat,) = chats(1, seed=2)
    broken = copy.deepcopy(chat)
    broken.messages[7]["content"] += " Our a holiday food drive was yesterday."
    with pytest.raises(AnnotationError, match="article"):
        self_check(broken)
