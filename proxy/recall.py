"""Recall: archived messages a reduction took out come back when the question returns to them.

Pure query-building, selection and placement. The store ranks (FTS5 BM25 or
stored embeddings, with their relevance floors, in `proxy.store.search`);
the app decides the budget. Hits already forwarded this turn are dropped, and
the rest are quoted as text in one `system` message placed right before the
last user message: tool results become quotes, never raw `tool` messages, so
tool-chain integrity holds, and the previous turn's cached prefix survives.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
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
        if hit.text in forwarded or hit.text in seen:
            continue
        seen.add(hit.text)
        matched = stems(hit.text) & wanted
        if matched and any(matched <= words_in for words_in in covered):
            continue
        replies = tuple(r for r in hit.replies if r.text not in forwarded and r.text not in seen)
        seen.update(r.text for r in replies)
        if replies != hit.replies:
            hit = dataclasses.replace(hit, replies=replies)
        chosen.append(hit)
        if len(chosen) == k:
            break
    return chosen


RRF_K = 60


def fuse(*rankings: Sequence[SearchHit]) -> list[SearchHit]:
    """Reciprocal rank fusion: a message scores the sum of 1 / (RRF_K + rank) over the rankings.

    Ranks, not scores, are fused, since BM25 and cosine share no scale. A
    message in several rankings keeps the first one's hit (the lexical one
    carries its replies). Ties go to the later message, as the searches order.
    """
    fused: dict[int, SearchHit] = {}
    scores: defaultdict[int, float] = defaultdict(float)
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused.setdefault(hit.seq, hit)
            scores[hit.seq] += 1 / (RRF_K + rank)
    order = sorted(fused, key=lambda seq: (-scores[seq], -seq))
    return [dataclasses.replace(fused[seq], score=scores[seq]) for seq in order]


def quoted(hits: Sequence[SearchHit]) -> int:
    """How many messages a block of `hits` quotes: each hit, and the replies it carries."""
    return sum(1 + len(hit.replies) for hit in hits)


def quote(hits: Sequence[SearchHit], max_chars: int, question: str = "") -> str:
    """The recall block: each hit (then its replies) on a line, long ones cut to `max_chars`.

    A long message is quoted around the sentences sharing most words with
    the question, not from its head: the fact is rarely its opening line.
    """
    wanted = stems(question)
    lines = [HEADER]
    for hit in hits:
        for said in (hit, *hit.replies):
            text = excerpt(said.text, max_chars, wanted)
            lines.append(f"[turn {said.turn}, {said.role}] {text}")
    return "\n".join(lines)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def excerpt(text: str, max_chars: int, wanted: frozenset[str]) -> str:
    """`text`, or when longer than `max_chars` the run of its sentences around the best match."""
    if len(text) <= max_chars:
        return text
    sentences = [s for s in _SENTENCE_END.split(text) if s]
    best = max(range(len(sentences)), key=lambda i: (len(stems(sentences[i]) & wanted), -i))
    if not wanted or not stems(sentences[best]) & wanted:
        return text[:max_chars] + " [...]"
    start = end = best
    size = len(sentences[best])
    # Grow by whole sentences, after first (what follows a fact often completes it).
    while True:
        grown = False
        for side in (end + 1, start - 1):
            if 0 <= side < len(sentences) and size + 1 + len(sentences[side]) <= max_chars:
                start, end = min(start, side), max(end, side)
                size += 1 + len(sentences[side])
                grown = True
        if not grown:
            break
    body = " ".join(sentences[start : end + 1])[:max_chars]
    return ("[...] " if start > 0 else "") + body + (" [...]" if end < len(sentences) - 1 else "")


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
