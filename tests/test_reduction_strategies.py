"""Seed worked examples and behaviour of the none / messages / tokens / summarize strategies."""

from __future__ import annotations

import math

import pytest

from proxy.messages import Message, role, text_of
from proxy.reduction import (
    SUMMARY_HEADER,
    Budget,
    ContextTooLarge,
    Policy,
    Reduction,
    ReductionState,
    SummaryBlock,
    Working,
    reduce,
)
from proxy.tokens import TokenCounter
from tests.factories import assistant, call, chat, system, tool, tool_round, user

BIG = Budget(context_tokens=10**7)


def count(message: Message) -> int:
    return 3 + len(text_of(message)) // 4 + 1


def numbered(n: int, start: int = 1) -> list[Message]:
    return [(user if i % 2 else assistant)(f"M{i}") for i in range(start, start + n)]


def summarised(working: Working, policy: Policy, budget: Budget) -> tuple[Reduction, Reduction]:
    first = reduce(working, policy, budget, count)
    texts = {r.key: f"summary of {len(r.messages)}" for r in first.summary_requests}
    return first, reduce(working, policy, budget, count, texts)


def test_none_forwards_everything_and_only_repairs() -> None:
    tail = (user(), assistant(None, tool_calls=[call("a")]))
    red = reduce(Working((system(),), tail), Policy(strategy="none"), Budget(10), count)
    assert red.kinds == ("none", "repaired")
    assert red.messages[:3] == (system(), *tail) and role(red.messages[3]) == "tool"
    clean = reduce(Working((), tuple(chat(3))), Policy(strategy="none"), BIG, count)
    assert clean.kinds == ("none",) and clean.messages == tuple(chat(3))


def test_messages_window_waits_for_the_threshold_then_cuts_to_target() -> None:
    policy, budget = (
        Policy(strategy="messages"),
        Budget(10**6, target_messages=6, threshold_messages=2),
    )
    under = reduce(Working((), tuple(numbered(8))), policy, budget, count)
    assert under.kinds == ("none",) and under.dropped == 0
    over = reduce(Working((system(),), tuple(numbered(9))), policy, budget, count)
    assert over.kinds == ("windowed",) and over.dropped == 3
    assert over.messages == (system(), *numbered(6, start=4))
    assert over.state.tail_start == 3


def test_tool_chain_is_never_split_by_a_window() -> None:
    tail = (user("q"), *tool_round("t", 3), assistant("a"), user("q2"))
    budget = Budget(10**6, target_messages=3, threshold_messages=0)
    red = reduce(Working((), tail), Policy(strategy="messages"), budget, count)
    assert red.messages == (assistant("a"), user("q2"))
    assert red.dropped == 5


def test_last_user_message_onward_is_kept_even_past_the_target() -> None:
    tail = (user("old"), assistant("old"), user("q"), *tool_round("t", 3))
    budget = Budget(10**6, target_messages=1, threshold_messages=0)
    red = reduce(Working((), tail), Policy(strategy="messages"), budget, count)
    assert red.messages == tail[2:]


def test_tokens_window_cuts_back_to_keep_recent_and_then_grows() -> None:
    policy = Policy(strategy="tokens")
    budget = Budget(1000, trigger_ratio=0.5, keep_recent_ratio=0.4)
    tail = tuple(chat(20, words=10))
    red = reduce(Working((), tail), policy, budget, count)
    kept = sum(count(m) for m in red.messages)
    assert red.kinds == ("windowed",)
    assert kept <= budget.keep_recent < budget.limit
    grown = (*tail[red.dropped :], assistant("more"), user("again"))
    nxt = reduce(Working((), grown, red.state), policy, budget, count)
    assert nxt.dropped == 0 and nxt.messages[: len(red.messages)] == red.messages


def test_summary_walk_through_of_the_cache_aware_reducer() -> None:
    policy = Policy(strategy="summarize", summarize_by="messages")
    budget = Budget(10**6, target_messages=20, threshold_messages=5)
    body = numbered(50)
    first, done = summarised(Working((), tuple(body)), policy, budget)
    (request,) = first.summary_requests
    assert request.messages == tuple(body[:30]) and request.previous == ()
    assert first.messages == tuple(body[30:]) and first.kinds == ("windowed",)
    assert done.kinds == ("summarized",) and len(done.messages) == 21
    assert done.messages[0] == {
        "role": "system",
        "content": f"{SUMMARY_HEADER}\n\nsummary of 30",
    }
    assert done.state == ReductionState(30, (SummaryBlock("summary of 30", 30),))
    requests, state, tail = 1, done.state, tuple(body[30:])
    for turn in range(2, 8):
        tail = (*tail, (user if turn % 2 else assistant)(f"R{turn}"))
        red = reduce(Working((), tail, state), policy, budget, count)
        if turn < 7:
            assert red.kinds == ("reused",) and not red.summary_requests
            assert len(red.messages) == 1 + 20 + turn - 1
            continue
        (request,) = red.summary_requests
        requests += 1
        assert request.previous == ("summary of 30",) and len(request.messages) == 6
        _, red = summarised(Working((), tail, state), policy, budget)
        assert len(red.messages) == 21 and red.state.tail_start == 36
        assert red.state.summaries == (SummaryBlock("summary of 6", 36),)
    assert requests == 2


def test_layered_summaries_append_a_block() -> None:
    policy = Policy(summarize_by="messages", single_summary=False)
    budget = Budget(10**6, target_messages=4, threshold_messages=0)
    state = ReductionState(10, (SummaryBlock("old", 10),))
    first, done = summarised(Working((), tuple(numbered(6)), state), policy, budget)
    assert first.summary_requests[0].previous == ()
    assert first.kinds == ("reused", "windowed")
    assert done.state.summaries == (SummaryBlock("old", 10), SummaryBlock("summary of 2", 12))
    assert done.messages[0]["content"] == f"{SUMMARY_HEADER}\n\nold\n\nsummary of 2"


def test_ensemble_compaction_keeps_the_newest_thirty_percent() -> None:
    window = 10_000
    budget = Budget(window, trigger_ratio=0.7, keep_recent_ratio=0.3)
    leading = (system("Be precise."),)
    body: list[Message] = []
    while sum(count(m) for m in [*leading, *body]) <= 0.7 * window:
        body.extend(chat(1, words=40))
    body.append(user("latest question"))
    first, done = summarised(Working(leading, tuple(body)), Policy(), budget)
    assert first.summary_requests and done.kinds == ("summarized",)
    assert done.messages[0] == leading[0]
    assert role(done.messages[1]) == "system" and SUMMARY_HEADER in done.messages[1]["content"]
    kept = sum(count(m) for m in done.messages[2:])
    assert 0.25 * budget.limit <= kept <= budget.keep_recent == math.floor(0.3 * 7000)
    assert done.messages[-1] == user("latest question")


def test_stored_summary_is_reused_until_threshold() -> None:
    state = ReductionState(40, (SummaryBlock("earlier", 40),))
    red = reduce(Working((), tuple(chat(2)), state), Policy(), BIG, count)
    assert red.kinds == ("reused",) and red.dropped == 0 and not red.summary_requests


def test_second_call_makes_the_same_decision() -> None:
    working = Working((system(),), tuple(chat(40, words=30)))
    budget = Budget(4000)
    first, done = summarised(working, Policy(), budget)
    again = reduce(working, Policy(), budget, count, {first.summary_requests[0].key: "x"})
    assert done.state.tail_start == first.state.tail_start
    assert again.state.summaries[0].covers == first.state.tail_start


def test_oversized_active_turn_truncates_older_tool_results_first() -> None:
    tail = (user("what is in the log?"), *tool_round("t", 2, result="L" * 8000))
    red = reduce(Working((system(),), tail), Policy(), Budget(2000), count)
    assert "truncated" in red.kinds
    assert red.messages[1] == user("what is in the log?")
    assert all("[..." in m["content"] for m in red.messages[3:])
    assert sum(count(m) for m in red.messages) <= Budget(2000).limit


def test_oversized_user_message_is_truncated_only_to_the_hard_limit() -> None:
    budget = Budget(2000, reserved_output=500)
    red = reduce(Working((), (user("Q" * 8000),)), Policy(), budget, count)
    assert red.kinds == ("truncated",) and red.tokens_out <= budget.hard_limit


def test_context_too_large_when_instructions_alone_do_not_fit() -> None:
    with pytest.raises(ContextTooLarge) as info:
        reduce(Working((system("S" * 8000),), (user(),)), Policy(), Budget(1000), count)
    assert info.value.available == 1000 and info.value.needed > 1000


def test_real_token_counter_fits_the_budget() -> None:
    counter = TokenCounter().for_model("gpt-4o")
    body = [*chat(30, words=60), user("and now?"), *tool_round("z", 2, result="data " * 50)]
    budget = Budget(3000)
    for strategy in ("messages", "tokens", "summarize", "filter", "tiered"):
        red = reduce(Working((system(),), tuple(body)), Policy(strategy=strategy), budget, counter)
        assert sum(counter(m) for m in red.messages) <= budget.limit, strategy
        assert red.messages[-3:] == tuple(body[-3:])


def test_tool_results_are_summarised_with_their_calls() -> None:
    body = [user("q"), *tool_round("t", 2), assistant("a"), *chat(30), user("now")]
    policy = Policy(summarize_by="messages")
    budget = Budget(10**6, target_messages=10, threshold_messages=0)
    first = reduce(Working((), tuple(body)), policy, budget, count)
    assert first.summary_requests[0].messages[:4] == tuple(body[:4])
    assert role(first.messages[0]) != "tool"


def test_tool_result_with_wrong_role_sequence_is_reported_as_repaired() -> None:
    tail = (tool("ghost"), user("q"))
    red = reduce(Working((), tail), Policy(), BIG, count)
    assert red.kinds == ("none", "repaired")
    assert red.messages == (user("q"),)
    unrepaired = reduce(Working((), tail), Policy(repair_tool_chains=False), BIG, count)
    assert unrepaired.messages == tail
