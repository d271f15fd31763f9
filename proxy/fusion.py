"""Reciprocal rank fusion: hybrid recall's one ranking of its lexical and embeddings hits.

Ranks, not scores, are fused, since BM25 and cosine share no scale; each ranking
comes cut where its own search alone would stop (`proxy.turn.recall`), and
`proxy.recall` judges the fused hits as each search alone would.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from .store.base import SearchHit

RRF_K = 60


def fuse(*rankings: Sequence[SearchHit]) -> list[SearchHit]:
    """Reciprocal rank fusion: a hit scores the sum of 1 / (RRF_K + rank) over the rankings.

    A message in several rankings keeps the first one's hit (the lexical one
    carries its replies), and where that ranking has several passages of it,
    the others' ranks go to its best one. Ties go to the later message, as
    the searches order.
    """
    fused: dict[tuple[int, str], SearchHit] = {}
    scores: defaultdict[tuple[int, str], float] = defaultdict(float)
    for ranking in rankings:
        # Each message's best hit in the rankings before this one.
        earlier = {key[0]: key for key in reversed(fused)}
        for rank, hit in enumerate(ranking, start=1):
            key = earlier.get(hit.seq, (hit.seq, hit.text))
            fused.setdefault(key, hit)
            scores[key] += 1 / (RRF_K + rank)
    order = sorted(fused, key=lambda key: (-scores[key], -key[0]))
    return [dataclasses.replace(fused[key], score=scores[key]) for key in order]
