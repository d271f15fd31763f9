"""The recall block's text: each chosen hit quoted around its match, as many as a budget holds.

`proxy.recall` chooses the hits; this module writes them as the block the model
reads (labelled with turn, role and the date of their sitting, long messages
cut around the sentence that matches) and decides what of them a token budget
holds, counting with the caller's counter.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from .english import SENTENCE, porter
from .recall import WORD, stems
from .store.base import SearchHit

HEADER = "Earlier messages that may be relevant:"
# The shortest quote of a message worth a place in the block.
MIN_QUOTE = 200


def fitted(
    found: Sequence[SearchHit], question: str, budget: int, count: Callable[[str], int]
) -> tuple[str, int]:
    """The block of as many of `found` (best first) as `budget` tokens hold (`count`
    measures a block), and how many messages it quotes; ("", 0) when none fits.

    Each message gets an even share of the budget, and long ones are cut to it (around
    their match); what a hit reacts to (its `prompt`) is context for the hit, not what
    the question matched: it takes no share, and is quoted only where the block with it
    fits as the hits alone would be quoted. Then long messages are cut further before a
    hit is given up: the cut narrows in proportion to the excess, down to `MIN_QUOTE`.
    """
    hits = [dataclasses.replace(h, prompt=()) for h in found]
    if any(h.prompt for h in found):
        chars = max(MIN_QUOTE, budget * 4 // quoted(hits))
        content = quote(found, chars, question)
        if count(content) <= budget:
            return content, quoted(found)
    while hits:
        messages = quoted(hits)
        chars = max(MIN_QUOTE, budget * 4 // messages)
        while True:
            content = quote(hits, chars, question)
            tokens = count(content)
            if tokens <= budget:
                return content, messages
            if chars == MIN_QUOTE:
                break
            chars = max(MIN_QUOTE, min(chars - 1, chars * budget // tokens))
        hits = hits[:-1]
    return "", 0


def quoted(hits: Sequence[SearchHit]) -> int:
    """How many messages a block of `hits` quotes: each hit, what it reacts to and its replies."""
    return sum(1 + len(hit.prompt) + len(hit.replies) for hit in hits)


def quote(hits: Sequence[SearchHit], max_chars: int, question: str = "") -> str:
    """The recall block: each hit (after what it reacts to, then its replies) on a line,
    long ones cut to `max_chars`, labelled with its turn, its role and the date of its
    sitting (`SearchHit.dated`).

    A long message is quoted around the sentences sharing most words with
    the question, not from its head: the fact is rarely its opening line.
    """
    wanted = stems(question)
    lines = [HEADER]
    for hit in hits:
        dated = ""
        for said in (*hit.prompt, hit, *hit.replies):
            text = excerpt(said.text, max_chars, wanted)
            # The date of its sitting, where the conversation wrote one: once a hit, as
            # its replies were said under it, and not where the quote writes it anyway.
            when = f", {said.dated}" if said.dated not in (dated, "") else ""
            dated = said.dated
            if when and said.dated in text:
                when = ""
            lines.append(f"[turn {said.turn}, {said.role}{when}] {text}")
    return "\n".join(lines)


def excerpt(text: str, max_chars: int, wanted: frozenset[str]) -> str:
    """`text`, or when longer than `max_chars` the stretch of it around the best match.

    The stretch is whole sentences (or lines) grown around the one sharing most
    words with the question, cut from the text as written; " [...]" marks each
    side where text is left out.
    """
    if len(text) <= max_chars:
        return text
    spans = [m.span() for m in SENTENCE.finditer(text) if m.group().strip()]
    scores = [len(stems(text[a:b]) & wanted) for a, b in spans]
    best = max(range(len(spans)), key=lambda i: (scores[i], -i), default=0)
    if not spans or not scores[best]:
        return _marked(text, 0, max_chars)
    start, end = spans[best]
    if end - start > max_chars:  # one long sentence: a window from a little before its match
        found = (m.start() for m in WORD.finditer(text, start, end) if _wanted(m, wanted))
        at = next(found, start)
        start = max(start, at - max_chars // 4)
        return _marked(text, start, start + max_chars)
    first = last = best
    # Grow by whole sentences, the following one first (it often completes a fact).
    grown = True
    while grown:
        grown = False
        if last + 1 < len(spans) and spans[last + 1][1] - start <= max_chars:
            last, end, grown = last + 1, spans[last + 1][1], True
        if first > 0 and end - spans[first - 1][0] <= max_chars:
            first, start, grown = first - 1, spans[first - 1][0], True
    return _marked(text, start, end)


def _wanted(word: re.Match[str], wanted: frozenset[str]) -> bool:
    (stemmed,) = porter([word.group().lower()])
    return stemmed in wanted


def _marked(text: str, start: int, end: int) -> str:
    body = text[start:end].strip()
    head = "[...] " if text[:start].strip() else ""
    return head + body + (" [...]" if text[end:].strip() else "")
