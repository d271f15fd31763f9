"""The recall eval's score of one configuration (`bench.recall_eval`), and its report line."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


@dataclass
class Score:
    name: str
    answerable: int = 0
    found: int = 0
    evidence_turns: int = 0
    turns_found: int = 0
    # Questions with at least one evidence turn forwarded (whole, or its answer's sentence):
    # the held-out benchmark's own measure, stricter than answer words found anywhere.
    with_turn: int = 0
    unanswerable: int = 0
    false_recalls: int = 0
    shares: list[float] | None = None
    recalled_falsely: list[str] | None = None  # the questions nothing answers that got a block
    # The replay's requests: how many, how many got a recall block, and how many of those
    # with one before them extend it (what a provider's prompt cache needs).
    replayed: int = 0
    fired: int = 0
    followed: int = 0  # requests with one before them in their conversation
    extended: int = 0
    said: int = 0  # messages the replayed conversations hold
    archived: int = 0  # rows the store archived for them

    @property
    def found_share(self) -> float:
        return _share(self.found, self.answerable)

    @property
    def with_turn_share(self) -> float:
        return _share(self.with_turn, self.answerable)

    @property
    def turns_share(self) -> float:
        return _share(self.turns_found, self.evidence_turns)

    @property
    def tokens_share(self) -> float:
        return statistics.mean(self.shares) if self.shares else 0.0

    @property
    def fired_share(self) -> float:
        return _share(self.fired, self.replayed)

    @property
    def extended_share(self) -> float:
        return _share(self.extended, self.followed)

    def line(self) -> str:
        replay = (
            f"  replay: recall on {self.fired_share:5.1%}, prefix kept {self.extended_share:5.1%}"
            if self.replayed
            else ""
        )
        if self.said:
            replay += f", {self.archived / self.said:.2f} archived rows a message"
        return (
            f"{self.name:<28} evidence forwarded {self.found_share:6.1%} "
            f"({self.found}/{self.answerable})  with a turn {self.with_turn_share:6.1%}  "
            f"evidence turns {self.turns_share:6.1%}  "
            f"tokens forwarded {self.tokens_share:6.1%}  "
            f"false recalls {self.false_recalls}/{self.unanswerable}{replay}"
        )
