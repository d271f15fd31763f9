"""Recall: archived messages a reduction took out come back when the question returns to them.

Pure query-building, selection and placement. The store ranks (FTS5 BM25 or
stored embeddings, with their relevance floors, in `proxy.store.search`);
the app decides the budget. Hits already forwarded this turn are dropped, and
the rest are quoted as text in one `system` message placed right before the
last user message: tool results become quotes, never raw `tool` messages, so
tool-chain integrity holds, and the previous turn's cached prefix survives.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .dialects import Dialect
from .messages import Message
from .store.base import SearchHit

HEADER = "Earlier messages that may be relevant:"
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


def words(text: str) -> list[str]:
    """The question's searchable words, lower-cased, without stopwords, each once.

    No stemming here: FTS5's porter tokenizer stems both sides.
    """
    found = (m.lower() for m in _WORD.findall(text))
    return list(dict.fromkeys(w for w in found if w not in STOPWORDS))


def stem(word: str) -> str:
    """A light suffix strip, so "expires" meets "expire" when comparing word sets here."""
    for suffix in ("ing", "ies", "ed", "es", "s", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def stems(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in words(text))


def fresh(
    hits: Sequence[SearchHit],
    question: str,
    context: Sequence[str],
    k: int,
    margin: float = 0.0,
) -> list[SearchHit]:
    """The first `k` hits that tell the model something `context` does not already.

    `hits` come best first; `context` holds the texts of the conversation
    messages forwarded this turn, the question excluded. Recall exists to
    bring back what the context lacks, so:

    - hits that do not outscore every message the model already sees by
      `margin` add nothing: the context answers to the question about as
      well (the search ranks forwarded messages too, when the archive has them);
    - a hit whose matched question words all appear in one forwarded message
      is covered by it (a recurring question would otherwise recall its own
      earlier instances every time);
    - the question itself, and repeats of an earlier hit, are skipped.
    """
    wanted = stems(question)
    covered = [stems(text) & wanted for text in context]
    forwarded = set(context)
    best_forwarded = max((h.score for h in hits if h.text in forwarded), default=None)
    seen = {question.strip()}
    chosen: list[SearchHit] = []
    for hit in hits:
        if best_forwarded is not None and hit.score < best_forwarded + margin:
            break
        if hit.text in forwarded:
            continue
        if hit.text in seen:
            continue
        seen.add(hit.text)
        matched = stems(hit.text) & wanted
        if matched and any(matched <= words_in for words_in in covered):
            continue
        chosen.append(hit)
        if len(chosen) == k:
            break
    return chosen


def quote(hits: Sequence[SearchHit], max_chars: int) -> str:
    lines = [HEADER]
    for hit in hits:
        text = hit.text if len(hit.text) <= max_chars else hit.text[:max_chars] + " [...]"
        lines.append(f"[turn {hit.turn}, {hit.role}] {text}")
    return "\n".join(lines)


def question_index(messages: Sequence[Message], dialect: Dialect) -> int:
    """Index of the last message that opens a user's turn (not a tool result), or -1."""
    for i in range(len(messages) - 1, -1, -1):
        if dialect.opens_turn(messages[i]):
            return i
    return -1


def inject(messages: Sequence[Message], content: str, dialect: Dialect) -> list[Message]:
    """The forwarded messages with the recall block right before the last user message.

    The block is an instruction where the wire has them in its history (a
    system or developer message); on Anthropic's, a user message that the
    wire merges into the question's.
    """
    at = question_index(messages, dialect)
    block = dialect.summary(content)
    if at < 0:
        return [*messages, block]
    return [*messages[:at], block, *messages[at:]]
