"""What a stored snapshot says about its conversation: the one definition, typed and versioned.

A snapshot's state is written once a turn completed and read when a later
turn continues it. The store keeps it as JSON; this module is the only
place that knows its shape. `from_json` reads every version written so far
(the first, unversioned shape included) and answers None for a version it
does not know, which the turn then treats as no stored state: a newer
release's snapshot is never misread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..reduction.types import ReductionState, SummaryBlock

VERSION = 1


@dataclass(frozen=True, slots=True)
class Stats:
    """A conversation's reduction figures, summed over its turns."""

    turns: int = 0
    reductions: Mapping[str, int] = field(default_factory=dict)
    summaries_made: int = 0
    summaries_reused: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    summarizer_tokens: int = 0

    def add(
        self,
        *,
        kinds: Sequence[str],
        tokens_in: int,
        tokens_out: int,
        summaries_made: int,
        summarizer_tokens: int,
    ) -> Stats:
        """These figures with one more turn's."""
        by_kind = dict(self.reductions)
        for kind in kinds:
            by_kind[kind] = by_kind.get(kind, 0) + 1
        return Stats(
            turns=self.turns + 1,
            reductions=by_kind,
            summaries_made=self.summaries_made + summaries_made,
            summaries_reused=self.summaries_reused + (1 if "reused" in kinds else 0),
            tokens_in=self.tokens_in + tokens_in,
            tokens_out=self.tokens_out + tokens_out,
            summarizer_tokens=self.summarizer_tokens + summarizer_tokens,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "reductions": dict(self.reductions),
            "summaries_made": self.summaries_made,
            "summaries_reused": self.summaries_reused,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "summarizer_tokens": self.summarizer_tokens,
        }

    @classmethod
    def from_json(cls, data: Any) -> Stats:
        if not isinstance(data, Mapping):
            return cls()
        kinds = data.get("reductions")
        return cls(
            turns=_int(data.get("turns")),
            reductions={str(k): _int(v) for k, v in kinds.items()}
            if isinstance(kinds, Mapping)
            else {},
            summaries_made=_int(data.get("summaries_made")),
            summaries_reused=_int(data.get("summaries_reused")),
            tokens_in=_int(data.get("tokens_in")),
            tokens_out=_int(data.get("tokens_out")),
            summarizer_tokens=_int(data.get("summarizer_tokens")),
        )


@dataclass(frozen=True, slots=True)
class SnapshotState:
    """The state a turn stores with its snapshot.

    `leading` counts the instructions that open the history (kept verbatim);
    `reduction` is where the verbatim tail starts and the summaries standing
    in for what came before; `answer_hash` chains the turn's answer, which
    the next append-mode turn extends; `stats` sums the conversation so far.
    `archived_head` is the archive's hash of the snapshot's head message when
    the archive chains it from further back than the request did (a client
    trimming its history, `conversation.Archived`); "" when it is the head.
    `prepared_for` is the stretch (`ReductionState.stretch`) a summary is being
    prepared for in the background: the process serving the next turn, whichever
    it is, does not prepare again, and at the crossing finds the text the
    preparation kept in the store (`Store.keep_summary`).
    `route` is the route whose wire format the stored history is in
    ("/v1/messages"): an append-mode turn on another route would forward items
    that format does not have ("" when not known).
    """

    leading: int = 0
    reduction: ReductionState = field(default_factory=ReductionState)
    answer_hash: str = ""
    stats: Stats = field(default_factory=Stats)
    archived_head: str = ""
    prepared_for: tuple[int, int] | None = None
    route: str = ""

    def to_json(self) -> dict[str, Any]:
        state = {
            "version": VERSION,
            "leading": self.leading,
            "reduction": reduction_to_json(self.reduction),
            "answer_hash": self.answer_hash,
            "stats": self.stats.to_json(),
        }
        if self.archived_head:  # rare: most states do without it
            state["archived_head"] = self.archived_head
        if self.prepared_for is not None:  # only near a reduction
            state["prepared_for"] = list(self.prepared_for)
        if self.route:
            state["route"] = self.route
        return state

    @classmethod
    def from_json(cls, data: Any) -> SnapshotState | None:
        """The state `data` describes; None if it is not a state this release can read."""
        if not isinstance(data, Mapping):
            return None
        version = data.get("version", 1)  # the first shape carried no version
        if version != VERSION:
            return None
        return cls(
            leading=_int(data.get("leading")),
            reduction=reduction_from_json(data.get("reduction")),
            answer_hash=str(data.get("answer_hash", "")),
            stats=Stats.from_json(data.get("stats")),
            archived_head=str(data.get("archived_head", "")),
            prepared_for=_stretch(data.get("prepared_for")),
            route=str(data.get("route", "")),
        )


def reduction_to_json(state: ReductionState) -> dict[str, Any]:
    return {
        "tail_start": state.tail_start,
        "summaries": [[b.text, b.covers] for b in state.summaries],
        "extra": dict(state.extra),
    }


def reduction_from_json(data: Any) -> ReductionState:
    if not isinstance(data, Mapping):
        return ReductionState()
    return ReductionState(
        tail_start=_int(data.get("tail_start")),
        summaries=tuple(SummaryBlock(str(t), int(c)) for t, c in data.get("summaries", [])),
        extra=dict(data.get("extra") or {}),
    )


def _stretch(value: Any) -> tuple[int, int] | None:
    if isinstance(value, list) and len(value) == 2:
        return (_int(value[0]), _int(value[1]))
    return None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
