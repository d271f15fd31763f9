"""Pseudo-relevance feedback: more recall hits, reached through the words of those chosen.

A question worded otherwise than its statement ("What color is Nate's car?"
for "I got a dark green Subaru Outback") may still find another message about
the same thing ("First real road trip in the Subaru Outback!"). The words such
a chosen hit says seldom elsewhere (a dog's name, a car's make) lead to the
other messages about it: the conversation's own index is the feedback, as in
Rocchio's and RM3's query expansion, with no model and no extra upstream call.
The store decides which words lead somewhere (`proxy.store.relevance.bridged`).

Bounded so that it never makes a block nor moves a hit recall chose: it runs
only where recall chose a hit for a turn that asks, it only fills the places
of `k` the chosen hits leave free, after them, and the hits it adds are judged
by `recall.fresh` as any are (what the model reads already is not quoted).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence, Set

from . import recall
from .english import porter
from .store.base import SearchHit


def said(hits: Sequence[SearchHit]) -> list[SearchHit]:
    """The chosen `hits` and the replies they carry, in the block's order."""
    return [s for hit in hits for s in (*hit.prompt, hit, *hit.replies)]


def words(question: str, hits: Sequence[SearchHit]) -> list[str]:
    """The words of the chosen `hits` (and their replies) to search for more: each once,
    the best hit's first, and none whose stem the `question` has (it searched those)."""
    asked = recall.stems(question)
    found = dict.fromkeys(w for s in said(hits) for w in recall.words(s.text))
    return [w for w, stem in zip(found, porter(found), strict=True) if stem not in asked]


def seqs(hits: Sequence[SearchHit]) -> frozenset[int]:
    """The messages (by seq) the chosen `hits` quote: the feedback itself."""
    return frozenset(s.seq for s in said(hits))


def extended(
    found: Sequence[SearchHit],
    more: Sequence[SearchHit],
    question: str,
    context: Sequence[str],
    k: int,
    forwarded: Set[str],
) -> list[SearchHit]:
    """The chosen hits `found`, then those of `more` (the feedback search's, best first)
    that `recall.fresh` keeps, in the places of `k` left free. Nothing is quoted twice,
    and where nothing was chosen nothing is added: feedback never makes a block."""
    if not found or len(found) >= k:
        return list(found)
    quoted = {s.text for s in said(found)}
    fresh = recall.fresh(
        [h for h in more if h.text not in quoted],
        question,
        context,
        k - len(found),
        forwarded=forwarded,
        quoted=found,
    )
    added = []
    for hit in fresh:
        prompt = tuple(p for p in hit.prompt if p.text not in quoted)
        replies = tuple(r for r in hit.replies if r.text not in quoted)
        quoted.update({hit.text, *(s.text for s in (*prompt, *replies))})
        added.append(dataclasses.replace(hit, prompt=prompt, replies=replies))
    return [*found, *added]
