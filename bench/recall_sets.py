"""The recall evaluation's sets written apart from the recall rules, and a FILE of
conversations, as `bench.recall_set.Conversation`s (`bench.recall_eval` scores them)."""

from __future__ import annotations

import json

from .recall_fifth import fifth_chats
from .recall_fourth import chats as fourth_chats
from .recall_other import chats
from .recall_set import Conversation, Question
from .recall_third import chats as third_chats


def other_set(count: int = 6, seed: int = 0) -> list[Conversation]:
    """The set written apart from the recall rules (`bench.recall_other`)."""
    return [
        Conversation(
            c.messages, [Question(q.text, q.evidence, tuple(q.answer)) for q in c.questions]
        )
        for c in chats(count, seed)
    ]


def third_set(count: int = 6, seed: int = 0) -> list[Conversation]:
    """The third set, also written blind to the recall rules (`bench.recall_third`)."""
    return [
        Conversation(
            c.messages, [Question(q.text, q.evidence, tuple(q.answer)) for q in c.questions]
        )
        for c in third_chats(count, seed)
    ]


def fourth_set(count: int = 6, seed: int = 0) -> list[Conversation]:
    """The fourth set, written blind as well (`bench.recall_fourth`): lives told
    indirectly, facts corrected later, numbers in words."""
    return [conversation for conversation, _ in fourth_chats(count, seed)]


def fifth_set(count: int = 6, seed: int = 0) -> list[Conversation]:
    """The fifth set, written blind too (`bench.recall_fifth`): friends texting over
    months, facts in passing among long catch-ups, dates in three header styles."""
    return fifth_chats(count, seed)


def load(path: str) -> list[Conversation]:
    out: list[Conversation] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                data = json.loads(line)
                questions = [
                    Question(q["text"], q["evidence"], tuple(q.get("answer", ())))
                    for q in data["questions"]
                ]
                out.append(Conversation(data["messages"], questions))
    return out
