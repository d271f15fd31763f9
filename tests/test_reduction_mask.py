"""The `mask` strategy: old tool results cleared to placeholders, chains valid, prefixes stable.

Pure tests of the core: a turn's working history in, a reduction out, with a
counter of the test's own (4 characters a token) so the numbers are easy to
follow.
"""

from __future__ import annotations

import re
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.messages import Message, role, text_of
from proxy.reduction import Budget, Policy, Reduction, ReductionState, Working, reduce
from proxy.reduction.mask import mask_working, placeholder_text
from proxy.reduction.types import MaskPolicy
from tests.factories import assistant, call, system, tool, user

PLACEHOLDER = re.compile(
    r"^\[Tool result cleared to save context: (\w+) \(call (\w+)\), (\d+) tokens\. "
    r"The full text is kept in the context-proxy archive\.\]$"
)


def count(message: Message) -> int:
    return 3 + len(text_of(message)) // 4 + 1


def mask(**rules: object) -> Policy:
    then = str(rules.pop("then", "tokens"))
    return Policy(strategy="mask", mask=MaskPolicy(then=then, **rules))  # type: ignore[arg-type]


def agent(
    turns: int,
    *,
    result_chars: int = 400,
    tools: tuple[str, ...] = ("read",),
    start: int = 0,
) -> list[Message]:
    """An agent's history: each turn a question, one tool round with a large result, an answer."""
    out: list[Message] = []
    for i in range(start, start + turns):
        name = tools[i % len(tools)]
        out += [
            user(f"step {i}"),
            assistant(None, tool_calls=[call(f"c{i}", name)]),
            tool(f"c{i}", f"{name} output {i} " + "x" * result_chars),
            assistant(f"done {i}"),
        ]
    return out


def results(messages: tuple[Message, ...] | list[Message]) -> dict[str, str]:
    return {m["tool_call_id"]: text_of(m) for m in messages if role(m) == "tool"}


def cleared(messages: tuple[Message, ...] | list[Message]) -> set[str]:
    return {i for i, text in results(messages).items() if PLACEHOLDER.match(text)}


BUDGET = Budget(context_tokens=2000)  # limit 1,400 tokens; a fifth of the window is 400


def test_old_results_become_placeholders_naming_tool_call_and_tokens() -> None:
    history = agent(12)  # about 1,450 tokens: past the limit
    red = reduce(Working((system(),), tuple(history)), mask(), BUDGET, count)
    assert red.kinds == ("masked",)
    assert cleared(red.messages) == {f"c{i}" for i in range(9)}  # the newest 3 kept whole
    for message in red.messages:
        found = PLACEHOLDER.match(text_of(message)) if role(message) == "tool" else None
        if found:
            original = next(m for m in history if m.get("tool_call_id") == found.group(2))
            assert found.group(1) == "read" and int(found.group(3)) == count(original)
            assert set(message) == set(original)  # the same result, only its text changed
    assert [role(m) for m in red.messages] == ["system", *(role(m) for m in history)]
    assert red.tokens_out <= BUDGET.limit + 3


def test_nothing_is_cleared_under_the_trigger() -> None:
    history = agent(8)
    red = reduce(Working((system(),), tuple(history)), mask(), BUDGET, count)
    assert red.kinds == ("none",) and list(red.messages[1:]) == history


def test_excluded_tools_and_the_active_round_stay_whole() -> None:
    history = agent(14, tools=("read", "plan"))
    history += [user("last"), assistant(None, tool_calls=[call("live", "read")])]
    history.append(tool("live", "y" * 400))
    policy = mask(exclude_tools=("plan",), keep_tool_uses=0)
    red = reduce(Working((system(),), tuple(history)), policy, BUDGET, count)
    gone = cleared(red.messages)
    assert gone == {f"c{i}" for i in range(0, 14, 2)}  # every "read" result but the live one
    assert results(red.messages)["live"] == "y" * 400


def test_a_clearing_that_frees_too_little_does_not_happen() -> None:
    history = agent(60, result_chars=40)  # results too small to be worth a cache write
    red = reduce(Working((system(),), tuple(history)), mask(clear_at_least=400), BUDGET, count)
    assert not cleared(red.messages) and "masked" not in red.kinds
    assert "windowed" in red.kinds  # the second strategy did the work


def test_clearings_stand_until_the_trigger_is_crossed_again() -> None:
    history = agent(12)
    working = Working((system(),), tuple(history))
    first = reduce(working, mask(), BUDGET, count)
    assert first.kinds == ("masked",)
    previous = first
    for i in range(3):  # short turns: the history grows at its end only
        history += [user(f"more {i}"), assistant(f"fine {i}")]
        red = reduce(Working((system(),), tuple(history), previous.state), mask(), BUDGET, count)
        assert red.kinds == ("reused",)
        assert red.messages[: len(previous.messages)] == previous.messages
        previous = red
    history += agent(6, start=12)  # enough new tool output to cross the trigger again
    red = reduce(Working((system(),), tuple(history), previous.state), mask(), BUDGET, count)
    assert "masked" in red.kinds and len(cleared(red.messages)) > len(cleared(previous.messages))


def test_masking_that_is_not_enough_falls_through_to_summarize() -> None:
    history = agent(40)
    working = Working((system(),), tuple(history))
    policy = mask(then="summarize")
    first = reduce(working, policy, BUDGET, count)
    assert first.summary_requests, "the masked history still does not fit"
    asked = first.summary_requests[0]
    assert any(PLACEHOLDER.match(text_of(m)) for m in asked.messages)  # cheaper to summarise
    texts = {r.key: "what happened" for r in first.summary_requests}
    done = reduce(working, policy, BUDGET, count, texts)
    assert set(done.kinds) >= {"masked", "summarized"}
    assert done.tokens_out <= BUDGET.limit + 3


def test_a_named_chain_overrides_the_configured_second_strategy() -> None:
    history = agent(40)
    working = Working((system(),), tuple(history))
    policy = replace(mask(then="summarize"), strategy="mask+tokens")
    red = reduce(working, policy, BUDGET, count)
    assert not red.summary_requests and set(red.kinds) == {"masked", "windowed"}


def test_placeholder_text_is_stable() -> None:
    assert PLACEHOLDER.match(placeholder_text("read", "c1", 120))
    assert placeholder_text("read", "c1", 120) == placeholder_text("read", "c1", 120)


@st.composite
def agents(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = []
    for i in range(draw(st.integers(1, 16))):
        out.append(user(f"q{i} " + "w" * draw(st.integers(0, 80))))
        for r in range(draw(st.integers(0, 2))):
            ids = [f"c{i}x{r}x{k}" for k in range(draw(st.integers(1, 3)))]
            names = [draw(st.sampled_from(["read", "grep", "plan"])) for _ in ids]
            out.append(
                assistant(None, tool_calls=[call(c, n) for c, n in zip(ids, names, strict=True)])
            )
            out += [tool(c, "r" * draw(st.integers(0, 600))) for c in ids]
        if draw(st.booleans()):
            out.append(assistant(f"a{i} " + "z" * draw(st.integers(0, 80))))
    return out


rules = st.builds(
    MaskPolicy,
    keep_tool_uses=st.integers(0, 4),
    clear_at_least=st.sampled_from([0, 1, 200, 1000]),
    exclude_tools=st.sampled_from([(), ("plan",), ("read", "grep")]),
    then=st.sampled_from(["none", "tokens", "summarize", "filter"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agents(), rules, st.integers(300, 4000), st.lists(st.integers(0, 3), max_size=6))
def test_masking_keeps_chains_and_rules_and_extends_the_prefix_between_clearings(
    history: list[Message], rules: MaskPolicy, window: int, growth: list[int]
) -> None:
    budget = Budget(context_tokens=window)
    policy = Policy(strategy="mask", mask=rules)
    names = {c["id"]: c["function"]["name"] for m in history for c in m.get("tool_calls", [])}
    state, previous, last = ReductionState(), None, None
    tail = list(history)
    for turn, extra in enumerate([0, *growth]):
        tail += agents_tail(turn, extra)
        working = Working((system(),), tuple(tail), state)
        masked = mask_working(working, policy, budget, count)
        names |= {c["id"]: c["function"]["name"] for m in tail for c in m.get("tool_calls", [])}
        sent, out = results(working.tail), results(masked.working.tail)
        assert sent.keys() == out.keys()  # every result is still there, answering its call
        changed = {i for i in sent if sent[i] != out[i]}
        assert all(PLACEHOLDER.match(out[i]) for i in changed)
        assert all(names[i] not in rules.exclude_tools for i in changed)
        order = [m["tool_call_id"] for m in tail if role(m) == "tool"]
        clearable = [i for i in order if names.get(i) not in rules.exclude_tools]
        if rules.keep_tool_uses:
            assert not changed & set(clearable[-rules.keep_tool_uses :])
        if masked.fired:
            new = changed - (previous or set())
            freed = sum(count({"content": sent[i]}) - count({"content": out[i]}) for i in new)
            assert freed >= rules.minimum(budget)
        red = reduce(working, policy, budget, count)
        texts = {r.key: "S" for r in red.summary_requests}
        red = reduce(working, policy, budget, count, texts) if texts else red
        assert_valid(red)
        cut = {"masked", "summarized", "windowed", "filtered", "truncated"} & set(red.kinds)
        if last is not None and not cut and red.dropped == 0 and "truncated" not in last.kinds:
            assert red.messages[: len(last.messages)] == last.messages
        previous, last = changed, red
        tail = tail[red.dropped :]
        state = red.state


def agents_tail(turn: int, tools: int) -> list[Message]:
    out = [user(f"turn {turn}")]
    if tools:
        calls = [call(f"t{turn}x{k}", "read") for k in range(tools)]
        out += [assistant(None, tool_calls=calls), *(tool(c["id"], "q" * 300) for c in calls)]
    return out


def assert_valid(red: Reduction) -> None:
    """Every result follows its call, and every call has all its results."""
    pending: list[str] = []
    for message in red.messages:
        if role(message) == "tool":
            assert message["tool_call_id"] in pending
            pending.remove(message["tool_call_id"])
        else:
            assert not pending, f"results missing for {pending}"
            pending = [c["id"] for c in message.get("tool_calls", [])]
