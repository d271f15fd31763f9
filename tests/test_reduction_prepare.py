"""Summaries off the critical path: prepared past a soft mark, used when the trigger is crossed."""

from __future__ import annotations

from proxy.messages import text_of
from proxy.reduction import Budget, Policy, ReductionState, Working, reduce

from .factories import chat, system, user

POLICY = Policy(strategy="summarize", prepare_ratio=0.8)
BUDGET = Budget(context_tokens=2000, trigger_ratio=0.5, keep_recent_ratio=0.3)  # limit 1000


def count(message: dict) -> int:
    return 4 + len(text_of(message)) // 4


def working(n_turns: int) -> Working:
    body = [*chat(n_turns, words=15), user("and now?")]
    return Working((system(),), tuple(body), ReductionState())


def tokens(w: Working) -> int:
    return sum(count(m) for m in (*w.leading, *w.tail))


def test_nothing_is_prepared_below_the_soft_mark() -> None:
    w = working(8)
    assert tokens(w) < 0.8 * BUDGET.limit
    r = reduce(w, POLICY, BUDGET, count)
    assert r.prepare == () and r.summary_requests == () and r.kinds == ("none",)


def test_past_the_soft_mark_the_next_summary_is_prepared_and_nothing_changes() -> None:
    w = working(17)
    assert 0.8 * BUDGET.limit < tokens(w) <= BUDGET.limit
    r = reduce(w, POLICY, BUDGET, count)
    assert r.summary_requests == () and r.dropped == 0
    assert r.messages == (*w.leading, *w.tail)
    (prepared,) = r.prepare
    assert prepared.messages == w.tail[: len(prepared.messages)]
    assert reduce(w, Policy(strategy="summarize", prepare_ratio=0), BUDGET, count).prepare == ()


def test_the_turn_crossing_the_trigger_uses_the_prepared_summary_without_waiting() -> None:
    early = working(17)
    (prepared,) = reduce(early, POLICY, BUDGET, count).prepare
    late = working(20)  # the same conversation, three turns on, now over the limit
    assert tokens(late) > BUDGET.limit
    cold = reduce(late, POLICY, BUDGET, count)
    assert cold.summary_requests and cold.summary_requests[0].key != prepared.key
    warm = reduce(late, POLICY, BUDGET, count, {prepared.key: "PREPARED SUMMARY"})
    assert warm.summary_requests == () and "summarized" in warm.kinds
    assert warm.messages[1] == {"role": "system", "content": warm.messages[1]["content"]}
    assert "PREPARED SUMMARY" in warm.messages[1]["content"]
    assert warm.dropped == len(prepared.messages)
    assert sum(count(m) for m in warm.messages) <= BUDGET.limit
