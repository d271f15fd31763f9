"""The snapshot state: one typed definition, read back as written, old files included."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy import conversation as conv
from proxy.messages import chain_hashes
from proxy.reduction.types import ReductionState, SummaryBlock
from proxy.turn.state import VERSION, SnapshotState, Stats

from .factories import system, user

# A state exactly as the release before this module wrote it (no version key).
UNVERSIONED: dict[str, Any] = {
    "leading": 1,
    "reduction": {"tail_start": 6, "summaries": [["the trip so far", 6]], "extra": {"kept": []}},
    "answer_hash": "9f0c",
    "stats": {
        "turns": 12,
        "reductions": {"none": 9, "summarized": 1, "reused": 2},
        "summaries_made": 1,
        "summaries_reused": 2,
        "tokens_in": 4800,
        "tokens_out": 3100,
        "summarizer_tokens": 410,
    },
}

texts = st.text(max_size=20)
states = st.builds(
    SnapshotState,
    leading=st.integers(0, 5),
    reduction=st.builds(
        ReductionState,
        tail_start=st.integers(0, 500),
        summaries=st.lists(st.builds(SummaryBlock, texts, st.integers(0, 500)), max_size=3).map(
            tuple
        ),
        extra=st.dictionaries(texts, st.integers() | texts, max_size=3),
    ),
    answer_hash=texts,
    stats=st.builds(
        Stats,
        turns=st.integers(0, 10**6),
        reductions=st.dictionaries(texts, st.integers(0, 100), max_size=4),
        summaries_made=st.integers(0, 100),
        summaries_reused=st.integers(0, 100),
        tokens_in=st.integers(0, 10**9),
        tokens_out=st.integers(0, 10**9),
        summarizer_tokens=st.integers(0, 10**9),
    ),
    archived_head=texts,
    prepared_for=st.none() | st.tuples(st.integers(0, 500), st.integers(0, 5)),
    route=st.sampled_from(["", "/v1/chat/completions", "/v1/responses", "/v1/messages"]),
)


@given(states)
def test_a_state_reads_back_as_it_was_written(state: SnapshotState) -> None:
    assert SnapshotState.from_json(state.to_json()) == state
    assert state.to_json()["version"] == VERSION


def test_a_state_written_before_versions_reads_the_same() -> None:
    state = SnapshotState.from_json(UNVERSIONED)
    assert state is not None
    assert state.leading == 1 and state.answer_hash == "9f0c"
    assert state.reduction == ReductionState(6, (SummaryBlock("the trip so far", 6),), {"kept": []})
    assert state.stats.turns == 12 and state.stats.reductions["reused"] == 2
    assert {k: v for k, v in state.to_json().items() if k != "version"} == UNVERSIONED


def test_a_turn_continues_an_unversioned_snapshot() -> None:
    history = [system(), *[user(f"m{i}") for i in range(10)]]
    turn = conv.reconcile_full(history, chain_hashes(history), 8, UNVERSIONED)
    assert turn.continued and turn.working.state.tail_start == 6
    assert turn.prior.stats.tokens_in == 4800


def test_a_state_of_an_unknown_version_is_never_misread() -> None:
    newer = {**UNVERSIONED, "version": VERSION + 1}
    assert SnapshotState.from_json(newer) is None
    history = [system(), *[user(f"m{i}") for i in range(10)]]
    turn = conv.reconcile_full(history, chain_hashes(history), 8, newer)
    assert not turn.continued and turn.working.state == ReductionState()


def test_stats_add_one_turn() -> None:
    stats = Stats().add(
        kinds=("summarized", "reused"),
        tokens_in=10,
        tokens_out=4,
        summaries_made=1,
        summarizer_tokens=7,
    )
    assert stats == Stats(1, {"summarized": 1, "reused": 1}, 1, 1, 10, 4, 7)
