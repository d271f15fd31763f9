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


def by_count(target: int, threshold: int = 0) -> Budget:
    return Budget(10**7, target_messages=target, threshold_messages=threshold)


def test_filter_waits_for_a_threshold() -> None:
    tail = (*(m for n in range(6) for m in segment(n, tools=n == 1)), user("now"))
    red = reduce(Working((system(),), tail), FILTER, by_count(14, 1), count)
    assert red.kinds == ("none",) and red.messages == (system(), *tail)


def test_filter_prefers_the_newest_segment_with_tool_calls() -> None:
    tail = (*segment(0), *segment(1, tools=True), *segment(2), *segment(3), user("now"))
    red = reduce(Working((system(),), tail), FILTER, by_count(4, 2), count)
    assert red.kinds == ("filtered",)
    assert red.messages == (system(), *segment(1, tools=True), *segment(3), user("now"))
    # Everything before the newest segment left the tail; the tool segment is stored.
    assert red.dropped == 8 and red.state.tail_start == 8
    assert [e[0] for e in red.state.extra["kept"]] == [2, 3, 5]


def test_filter_between_reductions_extends_the_previous_request() -> None:
    tail = (*segment(0), *segment(1, tools=True), *segment(2), *segment(3), user("now"))
    budget = by_count(4, 4)
    red = reduce(Working((system(),), tail), FILTER, budget, count)
    rest = tail[red.dropped :]
    for turn in range(2):
        rest = (*rest, assistant(f"r{turn}"), user(f"next {turn}"))
        nxt = reduce(Working((system(),), rest, red.state), FILTER, budget, count)
        assert nxt.kinds == ("reused",) and nxt.dropped == 0  # the standing filter
        assert nxt.messages[: len(red.messages)] == red.messages
        red = nxt
    rest = (*rest, assistant("r2"), user("next 2"))
    again = reduce(Working((system(),), rest, red.state), FILTER, budget, count)
    assert again.kinds == ("filtered",) and again.dropped > 0


def test_long_conversation_under_pressure_keeps_one_segment() -> None:
    tail = (*(m for n in range(7) for m in segment(n, tools=n == 2)), user("now"))
    relaxed = reduce(Working((), tail), FILTER, by_count(10), count)
    assert relaxed.messages == (*segment(2, tools=True), *segment(6), user("now"))
    tight = Budget(int(sum(count(m) for m in tail) / 0.7) - 10)
    pressed = reduce(Working((), tail), FILTER, tight, count)
    assert pressed.messages == (*segment(6), user("now"))


def test_pinned_context_injections_survive_in_original_order() -> None:
    pin = [user(f'SYSTEM CONTEXT (JSON): {{"n": {n}}}') for n in range(3)]
    tail = (pin[0], *segment(0), *segment(1), pin[1], *segment(2), *segment(3), user("now"))
    budget = by_count(4, 2)
    red = reduce(Working((system(),), tail), FILTER, budget, count)
    assert red.messages[:3] == (system(), pin[0], pin[1])
    assert segment(0)[0] not in red.messages and red.messages[-1] == user("now")
    # A second reduction keeps the stored injections right after the leading block.
    rest = (*tail[red.dropped :], assistant("a"), pin[2])
    rest = (*rest, *(m for n in range(4, 8) for m in segment(n)), user("later"))
    again = reduce(Working((system(),), rest, red.state), FILTER, budget, count)
    assert again.kinds == ("filtered",)
    assert again.messages[:4] == (system(), pin[0], pin[1], pin[2])
    assert again.messages[-1] == user("later") and user("now") not in again.messages


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


def test_tiered_waits_until_the_history_is_over_its_budget() -> None:
    tail = (*(m for n in range(8) for m in segment(n)), user("now"))
    red = reduce(Working((system(),), tail), TIERED, BIG, count)
    assert red.kinds == ("none",) and not red.summary_requests
    assert red.messages == (system(), *tail)


def test_historical_topic_is_compressed_keeping_first_and_last_message() -> None:
    old = [user("topic one"), *[assistant(f"{i} " + "w" * 400) for i in range(1, 12)]]
    current = user("current " + "c" * 7600)
    tail = (*old, current)
    budget = Budget(4300)
    first, done = tiered_run(Working((), tail), budget)
    (request,) = first.summary_requests
    assert request.messages == tuple(old[1:8])
    assert done.kinds == ("summarized",) and done.dropped == 0
    assert done.messages[0] == old[0] and done.messages[-2:] == (old[-1], current)
    assert done.messages[1] == {
        "role": "assistant",
        "content": "[summary of 7 earlier messages] S7/0",
    }
    assert len(done.messages) == 6 + 1
    assert done.state.extra["spans"] == [[1, 8, request.key, "S7/0"]]
    later = (*tail, assistant("ok"), user("next"))
    cached = reduce(Working((), later, done.state), TIERED, budget, count)
    assert cached.kinds == ("reused",) and not cached.summary_requests
    assert cached.messages == (*done.messages, assistant("ok"), user("next"))


def test_topics_beyond_three_become_one_bulk_in_the_summary_message() -> None:
    def topic(n: int) -> list[Message]:
        return [user(f"q{n} " + "x" * 200), assistant(f"a{n} " + "y" * 200)]

    tail = (*(m for n in range(5) for m in topic(n)), user("now " + "n" * 9100))
    first, done = tiered_run(Working((system(),), tail), Budget(4000))
    (request,) = first.summary_requests
    assert request.messages == tail[:4] and first.dropped == 4
    assert done.state.summaries == (SummaryBlock("S4/0", 4),)
    assert role(done.messages[1]) == "system" and "S4/0" in done.messages[1]["content"]
    assert done.messages[2:] == tail[4:]


def test_bulks_are_merged_three_at_a_time_then_dropped() -> None:
    bulks = tuple(SummaryBlock("b" * 400, i + 1) for i in range(4))
    state = ReductionState(4, bulks)
    budget = Budget(2000)
    first, done = tiered_run(Working((), (user("now " + "n" * 4000),), state), budget)
    (merge,) = first.summary_requests
    assert merge.messages == () and merge.previous == tuple(b.text for b in bulks[:3])
    assert first.state.summaries == bulks[3:] and "windowed" in first.kinds
    assert done.state.summaries == (SummaryBlock("S0/3", 3), bulks[3])
    assert done.kinds == ("summarized",)


def test_large_historical_message_is_truncated_with_a_marker() -> None:
    tail = (user("paste"), assistant("L" * 4000), user("now"))
    budget = Budget(1400)
    red = reduce(Working((), tail), TIERED, budget, count)
    assert red.kinds == ("truncated",) and "[..." in red.messages[1]["content"]
    assert count(red.messages[1]) <= int(0.25 * int(0.3 * budget.limit))
    later = (*tail, assistant("ok"), user("next"))
    steady = reduce(Working((), later, red.state), TIERED, budget, count)
    assert steady.kinds == ("reused",)
    assert steady.messages == (*red.messages, assistant("ok"), user("next"))


def test_tiered_without_summaries_falls_back_to_dropping() -> None:
    tail = (*chat(6, words=200), user("now"))
    red = reduce(Working((), tuple(tail)), TIERED, Budget(1500), count)
    assert red.summary_requests and "windowed" in red.kinds
    assert red.messages[-1] == user("now")


def simulate(policy: Policy, turns: int) -> tuple[int, float]:
    """A long chat with a tool round every 5 turns: (summaries made, share of prefix extensions)."""
    budget = Budget(4000, target_messages=40, threshold_messages=20)
    leading, state = (system(),), ReductionState()
    tail: tuple[Message, ...] = ()
    previous: tuple[Message, ...] | None = None
    made = hits = 0
    for i in range(turns):
        new = [
            user(f"q{i} " + "x" * 120),
            *(tool_round(f"t{i}", result="r" * 60) if i % 5 == 3 else []),
            assistant(f"a{i} " + "y" * 160),
        ]
        tail = (*tail, *new[:-1])
        red = reduce(Working(leading, tail, state), policy, budget, count)
        if red.summary_requests:
            made += len(red.summary_requests)
            texts = {r.key: f"summary of {len(r.messages)} messages" for r in red.summary_requests}
            red = reduce(Working(leading, tail, state), policy, budget, count, texts)
        assert sum(count(m) for m in red.messages) <= budget.limit
        if previous is not None and red.messages[: len(previous)] == previous:
            hits += 1
        previous, state = red.messages, red.state
        tail = (*tail[red.dropped :], new[-1])
    return made, hits / (turns - 1)


def test_long_runs_reduce_rarely_and_keep_prompt_caches_hitting() -> None:
    for policy in (FILTER, TIERED):
        made, share = simulate(policy, 300)
        assert made <= 0.15 * 300 and share >= 0.85, (policy.strategy, made, share)
