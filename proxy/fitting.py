"""The recall block fitted to its token budget: which hits it quotes, and how much of each.

`proxy.recall` chooses the hits and writes the block; this module decides what
of them a budget holds, counting with the caller's counter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from . import recall
from .store.base import SearchHit

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
        chars = max(MIN_QUOTE, budget * 4 // recall.quoted(hits))
        content = recall.quote(found, chars, question)
        if count(content) <= budget:
            return content, recall.quoted(found)
    while hits:
        quoted = recall.quoted(hits)
        chars = max(MIN_QUOTE, budget * 4 // quoted)
        while True:
            content = recall.quote(hits, chars, question)
            tokens = count(content)
            if tokens <= budget:
                return content, quoted
            if chars == MIN_QUOTE:
                break
            chars = max(MIN_QUOTE, min(chars - 1, chars * budget // tokens))
        hits = hits[:-1]
    return "", 0
