"""Invariants 1-5 of the design, checked by hypothesis for every strategy."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proxy.messages import Message, last_user_index, role, text_of, tool_call_ids
from proxy.reduction import (
    STRATEGIES,
    Budget,
    ContextTooLarge,
    Policy,
    Reduction,
    ReductionState,
    SummaryBlock,
    SummaryRequest,
    Tail,
    Working,
    reduce,
)
from proxy.reduction.summarize import under_threshold
from tests.factories import assistant, call, developer, system, tool, user


def count(message: Message) -> int:
    return 3 + len(text_of(message)) // 4 + 1


def fake_summary(request: SummaryRequest) -> str:
    return f"S({len(request.messages)},{len(request.previous)})"


PINNED = "SYSTEM CONTEXT (JSON):"
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def texts(draw: st.DrawFn, tag: str) -> str:
    return tag + " " + "x" * draw(st.integers(0, 300))


@st.composite
def rounds(draw: st.DrawFn, n: int, *, finished: bool = True) -> list[Message]:
    """One segment: a user message, 0-2 tool rounds of 1-3 calls, usually a final answer."""
    out: list[Message] = [user(draw(texts(f"u{n}")))]
    if draw(st.integers(0, 9)) == 0:
        out.append(user(PINNED + " {}"))
    for r in range(draw(st.integers(0, 2))):
        ids = [f"c{n}_{r}_{i}" for i in range(draw(st.integers(1, 3)))]
        out.append(assistant(None, tool_calls=[call(i) for i in ids]))
        results = [tool(i, draw(texts("r"))) for i in ids]
        out.extend(draw(st.permutations(results)))
    if finished or draw(st.booleans()):
        out.append(assistant(draw(texts(f"a{n}"))))
    return out


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[Message], list[Message]]:
    leading = draw(st.lists(st.sampled_from([system(), developer()]), max_size=2))
    body: list[Message] = []
    segments = draw(st.integers(1, 12))
    for n in range(segments):
        body.extend(draw(rounds(n, finished=n < segments - 1)))
    return leading, body


@st.composite
def broken(draw: st.DrawFn) -> tuple[list[Message], list[Message]]:
    leading, body = draw(conversations())
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["drop_result", "orphan", "dangling"]))
        tools = [i for i, m in enumerate(body) if role(m) == "tool"]
        if kind == "drop_result" and tools:
            body.pop(draw(st.sampled_from(tools)))
        elif kind == "orphan":
            body.insert(draw(st.integers(0, len(body))), tool("ghost", "lost"))
        else:
            body.insert(draw(st.integers(0, len(body))), assistant(None, tool_calls=[call("open")]))
    return leading, body


budgets = st.builds(
    Budget,
    context_tokens=st.integers(40, 4000),
    reserved_output=st.integers(0, 50),
    trigger_ratio=st.floats(0.4, 0.9),
    keep_recent_ratio=st.floats(0.1, 0.5),
    target_messages=st.integers(1, 15),
    threshold_messages=st.integers(0, 6),
)
policies = st.builds(
    Policy,
    strategy=st.sampled_from(STRATEGIES),
    single_summary=st.booleans(),
    summarize_by=st.sampled_from(["tokens", "messages", "both"]),
)


def assert_chains_intact(messages: tuple[Message, ...]) -> None:
    i = 0
    while i < len(messages):
        message = messages[i]
        assert role(message) != "tool", f"orphaned tool result at {i}"
        ids = tool_call_ids(message)
        i += 1
        if ids:
            answered = []
            while i < len(messages) and role(messages[i]) == "tool":
                answered.append(messages[i]["tool_call_id"])
                i += 1
            assert sorted(answered) == sorted(set(ids))


def uncleared(forwarded: Message, sent: Message) -> Message:
    """`sent` where `forwarded` is it with its text cleared by `mask` (an agent's active turn
    may hold many tool rounds; their old results are what mask clears), else `forwarded`."""
    if (
        role(sent) == "tool"
        and text_of(forwarded).startswith("[Tool result cleared to save context:")
        and {**forwarded, "content": sent.get("content")} == sent
    ):
        return sent
    return forwarded


def assert_invariants(
    red: Reduction, working: Working, policy: Policy, budget: Budget, *, valid: bool
) -> None:
    out = red.messages
    leading = list(working.leading)
    assert list(out[: len(leading)]) == leading
    rest = list(out[len(leading) :])
    summary = [rest.pop(0)] if red.state.summaries else []
    assert all(role(m) not in ("system", "developer") or PINNED in text_of(m) for m in rest)
    assert_chains_intact(out) if policy.repair_tool_chains or valid else None
    tail = list(working.tail)
    lu = last_user_index(tail)
    active = tail[lu:] if lu >= 0 else tail[-1:]
    if valid and "truncated" not in red.kinds:
        forwarded = rest[len(rest) - len(active) :]
        assert [uncleared(f, a) for f, a in zip(forwarded, active, strict=True)] == active
    history = sum(count(m) for m in out)
    assert red.tokens_out == history + 3
    assert red.state.tail_start == working.state.tail_start + red.dropped
    assert red.kinds and all(k != "fallback" for k in red.kinds)
    if policy.strategy == "none":
        return
    assert history + 3 <= budget.hard_limit or history <= budget.limit
    pinned = [m for m in tail[:lu] if policy.strategy == "filter" and PINNED in text_of(m)]
    mandatory = sum(count(m) for m in [*leading, *summary, *pinned, *active])
    if valid and mandatory <= budget.limit:
        assert history <= budget.limit
    if valid and "truncated" in red.kinds and policy.strategy != "tiered":
        assert mandatory > budget.limit


def check_reduction(
    working: Working, policy: Policy, budget: Budget, *, valid: bool, summariser_ok: bool = True
) -> Reduction | None:
    try:
        first = reduce(working, policy, budget, count)
    except ContextTooLarge as exc:
        assert exc.needed > exc.available
        return None
    assert_invariants(first, working, policy, budget, valid=valid)
    if not first.summary_requests or not summariser_ok:
        return first
    texts: Mapping[str, str] = {r.key: fake_summary(r) for r in first.summary_requests}
    try:
        second = reduce(working, policy, budget, count, texts)
    except ContextTooLarge as exc:
        assert policy.strategy == "tiered" and exc.needed > exc.available
        return first
    assert_invariants(second, working, policy, budget, valid=valid)
    assert reduce(working, policy, budget, count, texts) == second
    if policy.strategy == "summarize":
        assert not second.summary_requests and second.dropped >= first.dropped
        assert "summarized" in second.kinds or second.kinds == first.kinds
    return second


@FAST
@given(conversations(), policies, budgets)
def test_every_strategy_keeps_the_invariants(
    conv: tuple[list[Message], list[Message]], policy: Policy, budget: Budget
) -> None:
    leading, body = conv
    check_reduction(Working(tuple(leading), tuple(body)), policy, budget, valid=True)


@FAST
@given(broken(), policies, budgets)
def test_repair_makes_every_forwarded_request_valid(
    conv: tuple[list[Message], list[Message]], policy: Policy, budget: Budget
) -> None:
    leading, body = conv
    check_reduction(Working(tuple(leading), tuple(body)), policy, budget, valid=False)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conversations(),
    st.sampled_from(STRATEGIES),
    st.sampled_from(["tokens", "messages", "both"]),
    st.booleans(),
    budgets,
    st.lists(st.booleans(), min_size=3, max_size=10),
)
def test_forwarded_request_extends_the_previous_one_until_a_threshold_is_crossed(
    conv: tuple[list[Message], list[Message]],
    strategy: str,
    summarize_by: str,
    single: bool,
    budget: Budget,
    summariser_ok: list[bool],
) -> None:
    leading, body = conv
    policy = Policy(strategy=strategy, summarize_by=summarize_by, single_summary=single)
    tail = tuple(body)
    state = ReductionState()
    previous: Reduction | None = None
    for turn, ok in enumerate(summariser_ok):
        working = Working(tuple(leading), tail, state)
        red = check_reduction(working, policy, budget, valid=True, summariser_ok=ok)
        if red is None:
            return
        reduced = {"masked", "summarized", "windowed", "filtered", "truncated"} & set(red.kinds)
        if (
            previous is not None
            and not reduced
            and red.dropped == 0
            and red.state.summaries == state.summaries
            and "truncated" not in previous.kinds
        ):
            assert red.messages[: len(previous.messages)] == previous.messages
            assert red.state.extra == state.extra and not red.summary_requests
        previous, state = red, red.state
        tail = (*tail[red.dropped :], assistant(f"answer {turn}"), user(f"next {turn}"))


@FAST
@given(st.one_of(conversations(), broken()), policies, budgets, st.data())
def test_a_reused_tail_gives_the_same_reduction_as_grouping_afresh(
    conv: tuple[list[Message], list[Message]], policy: Policy, budget: Budget, data: st.DataObject
) -> None:
    leading, body = conv
    split = data.draw(st.integers(0, len(body)), label="split")
    try:
        earlier = grouped(Working(tuple(leading), tuple(body[:split])), policy, budget)
        fresh = grouped(Working(tuple(leading), tuple(body)), policy, budget)
    except ContextTooLarge:
        return
    assert earlier.tail is not None and fresh.tail is not None
    reused = grouped(Working(tuple(leading), tuple(body)), policy, budget, memo=earlier.tail)
    assert reused == fresh
    assert reduce(Working(tuple(leading), tuple(body)), policy, budget, count) == fresh
    assert reused.tail is not None and reused.tail.units == fresh.tail.units
    for name in ("sizes", "token_sums", "message_sums", "forward", "forward_sums", "repaired"):
        assert getattr(reused.tail, name) == getattr(fresh.tail, name), name
    rest = fresh.tail.since(fresh.dropped)
    if rest is not None:
        later = Working(tuple(leading), tuple(body[fresh.dropped :]), fresh.state)
        try:
            expected = reduce(later, policy, budget, count)
        except ContextTooLarge:
            return
        assert grouped(later, policy, budget, memo=rest) == expected


@FAST
@given(st.one_of(conversations(), broken()), policies, st.integers(1, 12))
def test_a_tail_grouped_in_steps_is_the_tail_grouped_at_once(
    conv: tuple[list[Message], list[Message]], policy: Policy, step: int
) -> None:
    """A long first-seen tail is grouped a few messages at a time, the loop free between steps."""
    import asyncio

    from proxy.reduction.tail import grouped_tail
    from proxy.turn.fairness import grouped_in_steps

    _, body = conv
    stepped = asyncio.run(grouped_in_steps(tuple(body), count, policy, step))
    at_once = grouped_tail(tuple(body), count, policy.repair_tool_chains, None, policy.dialect)
    assert stepped.units == at_once.units
    for name in ("messages", "sizes", "token_sums", "message_sums", "forward", "forward_sums"):
        assert getattr(stepped, name) == getattr(at_once, name), name
    assert stepped.repaired == at_once.repaired and stepped.keys == at_once.keys


def grouped(
    working: Working, policy: Policy, budget: Budget, memo: Tail | None = None
) -> Reduction:
    """`reduce` without its shortcut for short plain histories (`under_threshold`): the tail is
    always grouped, so the result carries it for the next turn."""
    return reduce(working, policy, budget, count, memo=memo, shortcuts=False)


def test_unknown_strategy_is_rejected() -> None:
    try:
        reduce(Working((), (user(),)), Policy(strategy="magic"), Budget(1000), count)
    except ValueError as exc:
        assert "magic" in str(exc)
    else:
        raise AssertionError("expected ValueError")


def fewest_to_drop(sizes: list[int], active: int, keep: int) -> int:
    """The eviction rule walked unit by unit: drop the oldest until the rest fits `keep`."""
    total = sum(sizes)
    for d in range(active + 1):
        if total <= keep:
            return d
        if d < len(sizes):
            total -= sizes[d]
    return active


@given(
    st.lists(st.integers(0, 50), max_size=30), st.lists(st.integers(1, 4), max_size=30), st.data()
)
def test_the_tails_running_sums_choose_the_same_eviction(
    sizes: list[int], lengths: list[int], data: st.DataObject
) -> None:
    from proxy.reduction.tail import grouped_tail

    n = min(len(sizes), len(lengths))
    sizes, lengths = sizes[:n], lengths[:n]
    tail = grouped_tail([user(f"{i}") for i in range(n)], count, repair=False)
    tail = dataclasses.replace(
        tail,
        sizes=tuple(sizes),
        token_sums=tuple(itertools.accumulate(sizes, initial=0)),
        message_sums=tuple(itertools.accumulate(lengths, initial=0)),
    )
    active = data.draw(st.integers(0, n), label="active")
    keep = data.draw(st.integers(0, 400), label="keep")
    assert tail.keep_tokens_drop(active, keep) == fewest_to_drop(sizes, active, keep)
    assert tail.keep_messages_drop(active, keep % 40) == fewest_to_drop(lengths, active, keep % 40)


@FAST
@given(conversations(), st.lists(st.integers(0, 60), min_size=1, max_size=6), st.data())
def test_running_summary_keys_equal_keys_hashed_afresh(
    conv: tuple[list[Message], list[Message]], drops: list[int], data: st.DataObject
) -> None:
    from proxy.reduction.layout import summary_key
    from proxy.reduction.tail import grouped_tail

    _, body = conv
    split = data.draw(st.integers(0, len(body)), label="split")
    earlier = grouped_tail(body[:split], count, repair=True)
    previous = tuple(data.draw(st.lists(st.sampled_from(["s1", "s2"]), max_size=2)))
    for d in drops:
        d = min(d, len(earlier.units))
        assert earlier.evicted_key(previous, d) == summary_key(
            previous, earlier.evicted_messages(d)
        )
    tail = grouped_tail(body, count, repair=True, memo=earlier)
    for d in drops:
        d = min(d, len(tail.units))
        evicted = tuple(m for u in tail.units[:d] for m in u.messages)
        assert tail.evicted_messages(d) == evicted
        assert tail.evicted_key(previous, d) == summary_key(previous, evicted)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(conversations(), broken()), budgets, st.data())
def test_a_history_under_every_threshold_is_reduced_as_grouping_it_would(
    conv: tuple[list[Message], list[Message]], budget: Budget, data: st.DataObject
) -> None:
    """`under_threshold` skips grouping only where grouping would forward the history as it came."""
    leading, body = conv
    if data.draw(st.booleans(), label="plain"):  # most histories have no tool round
        body = [m for m in body if "tool_calls" not in m and role(m) != "tool"]
    policy = Policy(
        strategy="summarize",
        single_summary=data.draw(st.booleans(), label="single"),
        summarize_by=data.draw(st.sampled_from(["tokens", "messages", "both"]), label="by"),
        prepare_ratio=data.draw(st.sampled_from([0.0, 0.5, 0.8, 1.0]), label="prepare"),
    )
    start = data.draw(st.integers(0, len(body)), label="tail_start")
    blocks = data.draw(st.sampled_from([(), (SummaryBlock("the talk so far", start),)]))
    working = Working(tuple(leading), tuple(body[start:]), ReductionState(start, blocks))
    quick = under_threshold(working, policy, budget, count)
    try:
        full = grouped(working, policy, budget)
    except ContextTooLarge:
        assert quick is None
        return
    event("skipped grouping" if quick is not None else "grouped")
    if quick is not None:
        assert quick == full
        assert reduce(working, policy, budget, count) == full


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), budgets, st.data())
def test_a_prepare_ratio_changes_what_is_prepared_and_nothing_else(
    conv: tuple[list[Message], list[Message]], budget: Budget, data: st.DataObject
) -> None:
    """The proxy turns preparation off for a stretch that has one (`prepare_ratio=0`)."""
    leading, body = conv
    start = data.draw(st.integers(0, len(body)), label="tail_start")
    blocks = data.draw(st.sampled_from([(), (SummaryBlock("the talk so far", start),)]))
    working = Working(tuple(leading), tuple(body[start:]), ReductionState(start, blocks))
    ratio = data.draw(st.sampled_from([0.5, 0.8, 1.0]), label="prepare")
    by = data.draw(st.sampled_from(["tokens", "messages", "both"]), label="by")
    results = []
    for prepare_ratio in (ratio, 0.0):
        policy = Policy(strategy="summarize", summarize_by=by, prepare_ratio=prepare_ratio)
        try:
            results.append(reduce(working, policy, budget, count))
        except ContextTooLarge:
            results.append(None)
    preparing, off = results
    assert (preparing is None) == (off is None)
    if preparing is None or off is None:
        return
    event("prepared" if preparing.prepare else "nothing to prepare")
    assert off.prepare == ()
    for field in ("messages", "state", "kinds", "summary_requests", "dropped", "tokens_out"):
        assert getattr(off, field) == getattr(preparing, field)


def test_a_short_plain_history_is_forwarded_without_grouping() -> None:
    leading = (system("be brief"),)
    tail = (user("hi"), assistant("hello"), user("how are you?"))
    for blocks in ((), (SummaryBlock("earlier", 2),)):
        working = Working(leading, tail, ReductionState(2 if blocks else 0, blocks))
        quick = under_threshold(working, Policy(), Budget(context_tokens=128_000), count)
        assert quick is not None and quick == grouped(working, Policy(), Budget(128_000))
        assert quick.kinds == (("reused",) if blocks else ("none",))
    # A tool round in the tail, or a history past the mark, takes the grouped path.
    with_tool = Working(leading, (user("q"), assistant(None, tool_calls=[call("c1")])))
    assert under_threshold(with_tool, Policy(), Budget(context_tokens=128_000), count) is None
    crowded = Working(leading, tail)
    for prepare_ratio in (0.8, 0.0):  # 0: nothing is prepared, the limit alone decides
        policy = Policy(prepare_ratio=prepare_ratio)
        assert under_threshold(crowded, policy, Budget(context_tokens=30), count) is None
    # Under the limit but past the preparation mark: the grouped path asks for a
    # summary to be prepared in the background, so the shortcut must not answer.
    talk = tuple(
        m
        for i in range(4)
        for m in (user(f"question {i} " + "word " * 20), assistant(f"answer {i} " + "word " * 20))
    )[:-1]
    near = Working(leading, talk)
    budget = Budget(context_tokens=319)
    assert sum(map(count, leading + talk)) <= budget.limit
    assert grouped(near, Policy(), budget).prepare
    assert under_threshold(near, Policy(), budget, count) is None
    # Far under the tokens but past `target + threshold` messages, counted by messages.
    by_count, few = (
        Policy(summarize_by="messages"),
        Budget(128_000, target_messages=3, threshold_messages=1),
    )
    assert grouped(near, by_count, few).summary_requests
    assert under_threshold(near, by_count, few, count) is None
