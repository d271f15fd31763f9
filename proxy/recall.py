"""Recall: archived messages a reduction took out come back when the question returns to them.

Pure ranking and placement; the app fetches candidates and decides the budget.
Ranking is Okapi BM25 over the conversation's archived messages that are not
forwarded this turn. A relevance floor keeps unrelated questions from
injecting anything: at least two distinct query terms matched (or the only
one), carrying at least half of the question's IDF weight, so a question that
shares only common words with earlier turns recalls nothing. The recalled
messages are quoted as text in one `system` message placed right before the
last user message, so tool-chain integrity holds and the previous turn's cached prefix survives.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .messages import Message, last_user_index, role, text_of

HEADER = "Earlier messages that may be relevant:"
K1, B = 1.5, 0.75
MATCHED_SHARE = 0.5
_WORD = re.compile(r"[^\W_]{3,}|\d{2,}", re.UNICODE)
STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "are",
        "but",
        "not",
        "you",
        "your",
        "with",
        "this",
        "that",
        "what",
        "was",
        "were",
        "has",
        "have",
        "had",
        "can",
        "could",
        "would",
        "should",
        "will",
        "about",
        "from",
        "into",
        "they",
        "them",
        "their",
        "there",
        "then",
        "than",
        "when",
        "where",
        "which",
        "who",
        "why",
        "how",
        "all",
        "any",
        "its",
        "our",
        "out",
        "also",
        "just",
        "like",
        "some",
        "did",
        "does",
        "tell",
        "please",
    ]
)


def terms(text: str) -> list[str]:
    return [stem(w) for w in (m.lower() for m in _WORD.findall(text)) if w not in STOPWORDS]


def stem(word: str) -> str:
    """A light suffix strip, so "expires" meets "expire" and "flights" meets "flight"."""
    for suffix in ("ing", "ies", "ed", "es", "s", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


@dataclass(frozen=True)
class Candidate:
    """An archived message that is not forwarded this turn; `turn` counts user messages."""

    turn: int
    role: str
    text: str


def rank(query: str, candidates: Sequence[Candidate], k: int) -> list[Candidate]:
    """The `k` best candidates above the relevance floor, best first."""
    wanted = set(terms(query))
    if not wanted or not candidates or k <= 0:
        return []
    docs = [Counter(terms(c.text)) for c in candidates]
    avg = sum(sum(d.values()) for d in docs) / len(docs) or 1.0
    df = Counter(t for d in docs for t in wanted if t in d)
    idf = {t: math.log(1 + (len(docs) - df[t] + 0.5) / (df[t] + 0.5)) for t in wanted}
    weight = sum(idf.values())
    floor = min(2, len(wanted))
    scored: list[tuple[float, int]] = []
    for i, doc in enumerate(docs):
        matched = [t for t in wanted if t in doc]
        # Matching many common words ("day", "trip") is not relevance: the matched
        # terms must carry at least MATCHED_SHARE of the question's IDF weight.
        if len(matched) < floor or sum(idf[t] for t in matched) < MATCHED_SHARE * weight:
            continue
        length = sum(doc.values())
        score = 0.0
        for t in matched:
            tf = doc[t]
            score += idf[t] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avg))
        scored.append((score, i))
    scored.sort(key=lambda item: (-item[0], -candidates[item[1]].turn))
    return [candidates[i] for _, i in scored[:k]]


def quote(candidates: Sequence[Candidate], max_chars: int) -> str:
    lines = [HEADER]
    for c in candidates:
        text = c.text if len(c.text) <= max_chars else c.text[:max_chars] + " [...]"
        lines.append(f"[turn {c.turn}, {c.role}] {text}")
    return "\n".join(lines)


def inject(messages: Sequence[Message], content: str) -> list[Message]:
    """The forwarded messages with the recall block right before the last user message."""
    at = last_user_index(messages)
    block: Message = {"role": "system", "content": content}
    if at < 0:
        return [*messages, block]
    return [*messages[:at], block, *messages[at:]]


def candidates_from(archive: Sequence[Message], exclude: set[str]) -> list[Candidate]:
    """Archive messages (in arrival order) worth recalling, minus texts already forwarded."""
    found: list[Candidate] = []
    seen: set[str] = set(exclude)
    turn = 0
    for message in archive:
        who = role(message)
        if who == "user":
            turn += 1
        text = text_of(message).strip()
        if who not in ("user", "assistant", "tool") or not text or text in seen:
            continue
        seen.add(text)
        found.append(Candidate(max(turn, 1), "tool result" if who == "tool" else who, text))
    return found
