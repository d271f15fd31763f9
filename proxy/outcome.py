"""What a turn forwarded, and what it writes once the upstream's answer is complete.

Pure: the app decides when to write; these functions decide what.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from . import conversation as conv
from .messages import Message, chain_hashes
from .reduction.types import Reduction
from .store import ArchiveEntry, Conversation, ConvKey, Snapshot, TurnCommit, WorkingLayout
from .turn.state import SnapshotState

if TYPE_CHECKING:
    from .turn.sessions import Branch

MAX_REBASES = 8


@dataclass(frozen=True)
class Outcome:
    """A reconciled, reduced turn. `version` is the stored turn count it was built on
    (append mode), so a replica that lost a race can tell and rebase."""

    key: ConvKey
    turn: conv.Turn
    reduction: Reduction
    tokens_in: int
    summaries_made: int
    summarizer_tokens: int
    stateless: bool
    version: int | None = None
    # For summaries prepared after the response, with the client's own credentials.
    model: str = ""
    upstream_headers: Mapping[str, str] = field(default_factory=dict)
    recalled: int | None = None  # None when recall is off
    # The branch whose summaries this turn used and prepares (see `turn.sessions`).
    branch: Branch | None = field(default=None, compare=False)
    # The token counts are an estimate: the model's own tokenizer is not available offline.
    estimated: bool = False
    provider: str = "openai"  # which upstream the turn went to (its headers are that one's)
    began: float = 0.0  # `time.monotonic()` when the turn was loaded
    prefill: Message | None = None  # the answer's start the request ended with
    # A derived id's turn with recall on: the chain hashes of its branch as planned (empty:
    # not at hand), kept for the turns chained to it; None: not tracked.
    lineage: Set[str] | None = None
    route: str = ""  # the route the turn came on, whose wire format its items are in
    # When the stored conversation an append-mode turn builds on was created: a rebase
    # onto one created later is onto a conversation deleted and started again.
    created: float | None = None

    def headers(self) -> dict[str, str]:
        found = {
            "x-conversation-id": self.key.conversation,
            "x-context-reduction": ",".join(self.reduction.kinds),
            "x-context-tokens-in": str(self.tokens_in),
            "x-context-tokens-out": str(self.reduction.tokens_out),
        }
        if self.recalled is not None:
            found["x-context-recall"] = str(self.recalled)
        if self.estimated:
            found["x-context-tokens-estimated"] = "true"
        return found


def turn_commit(
    outcome: Outcome,
    answer: Sequence[Message],
    now: float,
    digests: Sequence[bytes] | None = None,
) -> TurnCommit:
    """The archive rows, snapshot and working history of a completed turn.

    `answer` is the items the upstream answered with: one message in chat,
    any number of output items (reasoning, calls, a message) in other dialects;
    `digests` are theirs, when the caller has them.
    """
    turn, reduction = outcome.turn, outcome.reduction
    answer_hashes = chain_hashes(answer, turn.tip, digests)
    answer_hash = answer_hashes[-1]
    parents = (turn.parent, *turn.new_hashes)[: len(turn.new)]
    entries = [
        ArchiveEntry(h, p, m) for h, p, m in zip(turn.new_hashes, parents, turn.new, strict=True)
    ]
    answer_parents = (turn.tip, *answer_hashes[:-1])
    entries += [
        ArchiveEntry(h, p, m) for h, p, m in zip(answer_hashes, answer_parents, answer, strict=True)
    ]
    evicted = reduction.state.tail_start - turn.working.state.tail_start
    working = [*turn.working.leading, *turn.working.tail[max(0, evicted) :], *answer]
    # A preparation for the stretch this turn stands in goes on with it (one for an
    # earlier stretch summarises what a reduction has replaced since).
    branch = outcome.branch
    preparing = branch is not None and branch.stretch == reduction.state.stretch
    state = SnapshotState(
        leading=len(turn.working.leading),
        reduction=reduction.state,
        answer_hash=answer_hash,
        stats=turn.prior.stats.add(
            kinds=reduction.kinds,
            tokens_in=outcome.tokens_in,
            tokens_out=reduction.tokens_out,
            summaries_made=outcome.summaries_made,
            summarizer_tokens=outcome.summarizer_tokens,
        ),
        archived_head="" if turn.rooted else turn.tip,
        prepared_for=branch.stretch if branch is not None and preparing else None,
        route=outcome.route,
    ).to_json()
    snapshot = Snapshot(head=turn.head, position=turn.position, state=state, created_at=now)
    layout = None
    # The layout names working messages by chain hashes the archive has: not those
    # of a request the archive chains from further back.
    if turn.hashes and evicted >= 0 and turn.rooted:
        leading = len(turn.working.leading)
        start = leading + reduction.state.tail_start
        layout = WorkingLayout(
            leading=leading,
            start=start,
            fresh=turn.position - len(turn.new),
            hashes=(*turn.hashes[:leading], *turn.hashes[start:], *answer_hashes),
        )
    return TurnCommit(
        outcome.key, entries, snapshot, working, expected_turns=outcome.version, layout=layout
    )


def rebase(outcome: Outcome, latest: Conversation) -> Outcome:
    """Re-apply an append-mode turn on top of turns another replica committed first.

    The answer was produced without the other turns, but nothing is lost: the
    new messages and the answer are appended after them, in commit order, and
    the stored reduction state is kept as the winner left it.
    """
    turn = conv.reconcile_append(
        outcome.turn.new, latest.working, latest.state, latest.position + 1
    )
    reduction = replace(outcome.reduction, state=turn.working.state)
    return replace(outcome, turn=turn, reduction=reduction, version=latest.turns)
