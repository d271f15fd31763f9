"""The `filter` (smart tool-chain filtering) and `tiered` (Agent Zero) strategies."""

from __future__ import annotations

from proxy.messages import Message, role, text_of
from proxy.reduction import Budget, Policy, Reduction, ReductionState, SummaryBlock, Working, reduce
from proxy.reduction.tiered import allocation, compress_count, compressed_length
from tests.factories import assistant, chat, system, tool_round, user

BIG = Budget(context_tokens=10**7)
FILTER, TIERED = Policy(strategy="filter"), Policy(strategy="tiered")


def count(message: Message) -> int:
    return 3 + len(text_of(message)) // 4 + 1


def segment(n: int, *, tools: bool = False) -> list[Message]:
    return [user(f"q{n}"), *(tool_round(f"t{n}") if tools else []), assistant(f"a{n}")]


def test_short_conversations_keep_both_recent_segments() -> None:
    tail = (*segment(0), *segment(1), user("now"))
    red = reduce(Working((system(),), tail), FILTER, BIG, count)
    assert red.kinds == ("none",) and red.messages == (system(), *tail)


def test_filter_prefers_the_newest_segment_with_tool_calls() -> None:
    tail = (*segment(0), *segment(1, tools=True), *segment(2), *segment(3), user("now"))
    red = reduce(Working((system(),), tail), FILTER, BIG, count)
    assert red.kinds == ("filtered",) and red.dropped == 0
    assert red.messages == (system(), *segment(1, tools=True), *segment(3), user("now"))
    assert red.state.tail_start == 0


def test_long_conversation_under_pressure_keeps_one_segment() -> None:
    tail = (*(m for n in range(7) for m in segment(n, tools=n == 2)), user("now"))
    relaxed = reduce(Working((), tail), FILTER, BIG, count)
    assert relaxed.messages == (*segment(2, tools=True), *segment(6), user("now"))
    tight = Budget(int(sum(count(m) for m in tail) / 0.7) - 10)
    pressed = reduce(Working((), tail), FILTER, tight, count)
    assert pressed.messages == (*segment(6), user("now"))


def test_pinned_context_injections_are_kept_in_place() -> None:
    pinned = user('SYSTEM CONTEXT (JSON): {"cwd": "/"}')
    tail = (pinned, *segment(0), *segment(1), *segment(2), *segment(3), user("now"))
    red = reduce(Working((), tail), FILTER, BIG, count)
    assert red.messages[0] == pinned and red.messages[-1] == user("now")
    assert segment(0)[0] not in red.messages


def test_tiered_budget_split_of_the_120k_example() -> None:
    budget = Budget(context_tokens=120_000, trigger_ratio=0.7)
    assert budget.limit == 84_000
    alloc = allocation(budget)
    assert (alloc.current, alloc.topics, alloc.bulks) == (42_000, 25_200, 16_800)


def test_topic_compression_matches_the_seed_examples() -> None:
    assert [compress_count(n) for n in (4, 6, 8, 12)] == [2, 3, 4, 7]
    assert [compressed_length(n) for n in (4, 6, 8, 12)] == [3, 4, 5, 6]
    assert compress_count(22) == 13 and compressed_length(2) == 2


def tiered_run(working: Working, budget: Budget) -> tuple[Reduction, Reduction]:
    first = reduce(working, TIERED, budget, count)
    texts = {r.key: f"S{len(r.messages)}/{len(r.previous)}" for r in first.summary_requests}
    return first, reduce(working, TIERED, budget, count, texts)


def test_historical_topic_is_compressed_keeping_first_and_last_message() -> None:
    old = [user("topic one"), *[assistant(f"{i} " + "w" * 400) for i in range(1, 12)]]
    tail = (*old, user("current"))
    budget = Budget(3000)
    first, done = tiered_run(Working((), tail), budget)
    (request,) = first.summary_requests
    assert request.messages == tuple(old[1:8])
    assert done.kinds == ("summarized",)
    assert done.messages[0] == old[0] and done.messages[-2:] == (old[-1], user("current"))
    assert done.messages[1] == {
        "role": "assistant",
        "content": "[summary of 7 earlier messages] S7/0",
    }
    assert len(done.messages) == 6 + 1
    cached = reduce(Working((), tail, done.state), TIERED, budget, count)
    assert cached.kinds == ("reused",) and cached.messages == done.messages


def test_topics_beyond_three_become_bulks_in_the_summary_message() -> None:
    tail = (*(m for n in range(5) for m in segment(n)), user("now"))
    first, done = tiered_run(Working((system(),), tail), BIG)
    assert len(first.summary_requests) == 2 and first.dropped == 4
    assert done.state.summaries == (SummaryBlock("S2/0", 2), SummaryBlock("S2/0", 4))
    assert role(done.messages[1]) == "system" and "S2/0" in done.messages[1]["content"]
    assert done.messages[2:] == tail[4:]


def test_bulks_are_merged_three_at_a_time_then_dropped() -> None:
    bulks = tuple(SummaryBlock("b" * 400, i + 1) for i in range(4))
    state = ReductionState(4, bulks)
    budget = Budget(1500)
    first, done = tiered_run(Working((), (user("now"),), state), budget)
    (merge,) = first.summary_requests
    assert merge.messages == () and merge.previous == tuple(b.text for b in bulks[:3])
    assert first.state.summaries == bulks[3:] and "windowed" in first.kinds
    assert done.state.summaries == (SummaryBlock("S0/3", 3), bulks[3])
    assert done.kinds == ("summarized",)


def test_large_historical_message_is_truncated_with_a_marker() -> None:
    tail = (user("paste"), assistant("L" * 4000), user("now"))
    red = reduce(Working((), tail), TIERED, Budget(4000), count)
    assert red.kinds == ("truncated",) and "[..." in red.messages[1]["content"]
    assert count(red.messages[1]) <= int(0.25 * int(0.3 * Budget(4000).limit))


def test_tiered_without_summaries_falls_back_to_dropping() -> None:
    tail = (*chat(6, words=200), user("now"))
    red = reduce(Working((), tuple(tail)), TIERED, Budget(1500), count)
    assert red.summary_requests and "windowed" in red.kinds
    assert red.messages[-1] == user("now")
