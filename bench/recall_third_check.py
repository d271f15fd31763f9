"""The third recall set's annotated chat (`Chat`, `Question`) and its self-check.

`self_check` holds a generated chat to what its annotations claim: messages
alternate user/assistant, every session's first message carries its date,
every answer word is in an evidence message and every evidence message holds
part of the answer, the evidence was said by the person the question names
(or, for an adversarial question about the other person, by the other one),
a multi-hop question's evidence spans sessions, a temporal question's
includes its session's dated message, and nothing in the conversation
answers a question annotated as never said.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any

KINDS = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")
ROLES = ("user", "assistant")


class AnnotationError(ValueError):
    """A question's annotation does not match the conversation it was written for."""


@dataclass
class Question:
    text: str
    evidence: list[int]  # indexes of the messages that hold the answer (empty: never said)
    answer: list[str]  # words the answer needs, each in an evidence message
    kind: str
    about: str  # the role of the person the question names
    topic: str = ""
    forbid: tuple[str, ...] = ()  # for a never-said question: words that would answer it

    def as_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "evidence": self.evidence,
            "answer": self.answer,
            "kind": self.kind,
        }


@dataclass
class Chat:
    messages: list[dict[str, str]]
    names: dict[str, str]  # role -> the name of the person speaking in it
    firsts: list[int]  # the index of each session's first message
    dates: list[str]  # each session's date, as its first message writes it
    questions: list[Question] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "questions": [q.as_json() for q in self.questions],
        }


def said(text: str, word: str) -> bool:
    """Whether `word` occurs in `text` as a whole word, ignoring case."""
    return re.search(rf"\b{re.escape(word)}\b", text, re.IGNORECASE) is not None


def self_check(chat: Chat) -> None:
    """Raise `AnnotationError` at the first annotation that does not hold."""
    messages = chat.messages
    for i, message in enumerate(messages):
        if message["role"] != ROLES[i % 2]:
            raise AnnotationError(f"message {i}: roles do not alternate")
        text = message["content"]
        if not text.strip() or re.search(r"\{\w+\}", text) or re.search(r"(^|[.!?] )[a-z]", text):
            raise AnnotationError(f"message {i}: empty, unfilled or uncapitalised: {text!r}")
        if re.search(r"\b(?:[Oo]ur|[Tt]he|[Mm]y|[Aa]n?) (?:a|an|the)\b", text):
            raise AnnotationError(
                f"message {i}: a detail filled in after its own article: {text!r}"
            )
    if len(chat.firsts) != len(chat.dates) or chat.firsts != sorted(set(chat.firsts)):
        raise AnnotationError("session starts and dates do not pair up")
    for first, day in zip(chat.firsts, chat.dates, strict=True):
        if day not in messages[first]["content"]:
            raise AnnotationError(f"message {first}: the session's date {day!r} is missing")
    for question in chat.questions:
        _check(chat, question)


def _check(chat: Chat, q: Question) -> None:
    messages = chat.messages
    where = f"question {q.text!r}"
    if q.kind not in KINDS:
        raise AnnotationError(f"{where}: unknown kind {q.kind!r}")
    named = [role for role, name in chat.names.items() if name in q.text]
    # A question may name a thread's detail instead ("What did Lily pick up?"), but an
    # adversarial one is about the person it names.
    if named not in ([q.about], [] if q.kind != "adversarial" else [q.about]):
        raise AnnotationError(f"{where}: does not name {chat.names[q.about]} alone")
    if any(q.text in m["content"] for m in messages):
        raise AnnotationError(f"{where}: asked word for word in the conversation")
    if q.evidence != sorted(set(q.evidence)) or not all(0 <= i < len(messages) for i in q.evidence):
        raise AnnotationError(f"{where}: evidence {q.evidence} is not a set of message indexes")
    if not q.evidence:
        if q.kind != "adversarial" or q.answer or not q.forbid:
            raise AnnotationError(f"{where}: no evidence, so it must be a never-said question")
        for m in messages:
            for word in q.forbid:
                if said(m["content"], word):
                    raise AnnotationError(f"{where}: {word!r} is said: {m['content']!r}")
        return
    texts = [messages[i]["content"] for i in q.evidence]
    if not q.answer:
        raise AnnotationError(f"{where}: evidence without answer words")
    for word in q.answer:
        if not any(word in text for text in texts):
            raise AnnotationError(f"{where}: answer {word!r} is in no evidence message")
    for i, text in zip(q.evidence, texts, strict=True):
        if not any(word in text for word in q.answer):
            raise AnnotationError(f"{where}: evidence message {i} holds none of the answer")
    dated = [i for i in q.evidence if i in chat.firsts]
    statements = [i for i in q.evidence if i not in chat.firsts]
    if q.kind == "temporal":
        day = chat.dates[chat.firsts.index(dated[0])] if len(dated) == 1 else None
        if day is None or day not in q.answer or len(statements) != 1:
            raise AnnotationError(f"{where}: needs its statement and its session's dated message")
        if _session(chat, dated[0]) != _session(chat, statements[0]):
            raise AnnotationError(f"{where}: the dated message is from another session")
    elif dated:
        raise AnnotationError(f"{where}: a greeting is not evidence for a {q.kind} question")
    speaker_is_named = [messages[i]["role"] == q.about for i in statements]
    if q.kind == "adversarial" and any(speaker_is_named):
        raise AnnotationError(f"{where}: said by the person it names, so not adversarial")
    if q.kind != "adversarial" and not all(speaker_is_named):
        raise AnnotationError(f"{where}: evidence said by the other person")
    if q.kind == "multi-hop" and len({_session(chat, i) for i in statements}) < 2:
        raise AnnotationError(f"{where}: multi-hop evidence from a single session")


def _session(chat: Chat, index: int) -> int:
    return bisect.bisect_right(chat.firsts, index) - 1
