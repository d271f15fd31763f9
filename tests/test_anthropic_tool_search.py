"""Anthropic's tool search on `/v1/messages`: tools deferred (`defer_loading: true`) are loaded
by the `tool_reference`s a search returns, and stay loaded while a reference is in the
history. A reduction that drops a search carries its references, so the tools the kept
turns call are still loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.blocks import references
from proxy.dialects import Item
from proxy.dialects.anthropic import ANTHROPIC
from proxy.mock import ECHO
from proxy.mock import anthropic as mock_anthropic
from proxy.reduction import STRATEGIES

from .test_anthropic import HEADERS, ROOMY, SLOW, reduced, result, sent, text, tool_use, user
from .test_anthropic_server_tools import proxied

DEFERRED = ("get_weather", "get_time", "get_news")
TOOLS: list[dict[str, Any]] = [
    {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
    {"name": "find_tools", "input_schema": {"type": "object"}},  # a search the app runs
    *(
        {"name": n, "input_schema": {"type": "object"}, "defer_loading": True, "description": n}
        for n in DEFERRED
    ),
]


def searched(n: int, *names: str) -> list[dict[str, Any]]:
    """A regex tool search Anthropic ran (its use and its result) that loaded `names`."""
    refs = [{"type": "tool_reference", "tool_name": name} for name in names]
    found = {"type": "tool_search_tool_search_result", "tool_references": refs}
    use = {"type": "server_tool_use", "id": f"srvtoolu_{n}", "name": "tool_search_tool_regex"}
    return [
        use | {"input": {"query": "|".join(names)}},
        {"type": "tool_search_tool_result", "tool_use_id": f"srvtoolu_{n}", "content": found},
    ]


def loaded_by_app(n: int, *names: str) -> list[Item]:
    """A search the app ran (its own tool), whose result holds the references."""
    refs = [{"type": "tool_reference", "tool_name": name} for name in names]
    found = {"type": "tool_result", "tool_use_id": f"toolu_find{n}", "content": refs}
    return [
        {"role": "assistant", "content": [tool_use(f"toolu_find{n}", "find_tools")]},
        user(found),
    ]


def body_of(messages: list[Item]) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 64, "tools": TOOLS, "messages": messages}


def test_the_fake_refuses_what_tool_search_does_not_load() -> None:
    """A reference must name a deferred tool of `tools` (Anthropic's documented rule); a call
    of a deferred tool must come after a reference loading it (the mock's reading)."""
    ask = user(text("weather?"))
    call = {
        "role": "assistant",
        "content": [*searched(1, "get_weather"), tool_use("t1", "get_weather")],
    }
    answer = user(result("t1", "sunny"))
    mock_anthropic.validate(body_of([ask, call, answer]), HEADERS, {})  # as Anthropic's example
    mock_anthropic.validate(body_of([ask, *loaded_by_app(2, "get_time")]), HEADERS, {})
    unloaded = {"role": "assistant", "content": [tool_use("t1", "get_weather")]}
    broken = {
        "a call of a tool no search loaded": [ask, unloaded, answer],
        "a reference to a tool not deferred": [ask, *loaded_by_app(2, "find_tools")],
        "a reference to no tool": [ask, {"role": "assistant", "content": searched(3, "nope")}],
    }
    for name, messages in broken.items():
        with pytest.raises(mock_anthropic.Invalid):
            mock_anthropic.validate(body_of(messages), HEADERS, {})
            pytest.fail(name)


@st.composite
def histories(draw: st.DrawFn) -> list[Item]:
    """Turns that search for deferred tools (Anthropic's search, or the app's), call the tools
    loaded so far, or just answer; the last turn may be calling a loaded tool."""
    items: list[Item] = []
    loaded: list[str] = []
    for n in range(draw(st.integers(1, 9))):
        items.append(user(text(f"q{n} " + "x" * draw(st.integers(0, 300)))))
        kind = draw(st.sampled_from(["search", "app", "call", "plain"]))
        pad = text("z" * draw(st.integers(0, 300)))
        if kind == "search" or (kind == "call" and not loaded):
            name = draw(st.sampled_from(DEFERRED))
            loaded.append(name)
            blocks = [pad, *searched(n, name)]
            if draw(st.booleans()):  # called in the same answer, as in Anthropic's example
                items += [{"role": "assistant", "content": [*blocks, tool_use(f"t{n}", name)]}]
                items.append(user(result(f"t{n}", "r" * draw(st.integers(0, 200)))))
                items.append({"role": "assistant", "content": [text(f"a{n}")]})
            else:
                items.append({"role": "assistant", "content": [*blocks, text(f"found {n}")]})
        elif kind == "app":
            name = draw(st.sampled_from(DEFERRED))
            loaded.append(name)
            items += [*loaded_by_app(n, name), {"role": "assistant", "content": [pad]}]
        elif kind == "call":
            name = draw(st.sampled_from(loaded))
            items.append({"role": "assistant", "content": [pad, tool_use(f"t{n}", name)]})
            items.append(user(result(f"t{n}", "r" * draw(st.integers(0, 200)))))
            items.append({"role": "assistant", "content": [text(f"a{n}")]})
        else:
            items.append({"role": "assistant", "content": [pad]})
    items.append(user(text("the new question")))
    if loaded and draw(st.booleans()):  # the agent calls a loaded tool in the active turn
        items.append({"role": "assistant", "content": [tool_use("t_last", loaded[0])]})
        items.append(user(result("t_last", "r" * draw(st.integers(0, 400)))))
    return items


def forwarded(items: list[Item], strategy: str, window: int) -> dict[str, Any] | None:
    """What goes upstream for `items` reduced by `strategy`, which Anthropic (the mock)
    accepts; every block of it but texts (`tiered` and truncation cut them) is one the
    client sent. None when it cannot fit."""
    mock_anthropic.validate(body_of(items), HEADERS, {})  # the history is valid
    reduction = reduced(items, strategy, window)
    if reduction is None:
        return None
    body = sent(body_of(items), list(reduction.messages))
    mock_anthropic.validate(body, HEADERS, {})
    client_blocks = [b for m in items for b in m["content"]]
    for message in body["messages"]:
        if message["role"] == "assistant":
            assert all(b in client_blocks or b["type"] == "text" for b in message["content"])
    return body


@SLOW
@given(
    histories(),
    st.sampled_from([*STRATEGIES, "mask+tokens"]),
    st.integers(300, 4000),
)
def test_every_strategy_keeps_the_tools_the_kept_turns_call_loaded(
    items: list[Item], strategy: str, window: int
) -> None:
    body = forwarded(items, strategy, window)
    # Refused only for its size: in a window large enough the same history goes.
    assert body is not None or forwarded(items, strategy, ROOMY) is not None


@pytest.mark.integration
@pytest.mark.parametrize("strategy", ["summarize", "mask", "tiered"])
def test_an_agent_calling_a_tool_it_searched_for_long_ago_is_reduced_and_accepted(
    tmp_path: Path, strategy: str
) -> None:
    """Through the real server with the `anthropic` client, streamed and not: the model
    loads get_weather with Anthropic's tool search once, then calls it every turn. Reduced,
    the search goes on after the summary, so each call still finds its tool loaded."""
    with proxied(tmp_path, reduction_strategy=strategy) as (upstream, api):
        history: list[Any] = []
        kinds = set()

        def ask(content: Any, stream: bool) -> Any:
            history.append({"role": "user", "content": content})
            kwargs: Any = {"model": "claude-tiny", "max_tokens": 128, "tools": TOOLS}
            if stream:
                with api.messages.stream(**kwargs, messages=history) as events:
                    answer = events.get_final_message()
            else:
                raw = api.messages.with_raw_response.create(**kwargs, messages=history)
                kinds.add(raw.headers["x-context-reduction"])
                answer = raw.parse()
            history.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in answer.content],
                }
            )
            return answer

        first = ask("Please search tools weather.", stream=False)
        assert [b.type for b in first.content][:2] == ["server_tool_use", "tool_search_tool_result"]
        for n in range(24):
            call = ask(f"Turn {n}: call tool get_weather for city {n}. " * 3, stream=n % 2 == 0)
            used = next(b for b in call.content if b.type == "tool_use")
            assert used.name == "get_weather"
            report = f"City {n}: sunny, {n % 9 + 12} degrees, light wind from the west. " * 4
            ask([{"type": "tool_result", "tool_use_id": used.id, "content": report}], n % 3 == 0)
    assert kinds - {"none", "reused"}, kinds
    assert not [c.error for c in upstream.calls if c.error]
    last = upstream.messages_requests()[-1]["messages"]
    assert "Please search tools weather." not in str(last), "the search's turn went reduced"
    assert first.content[1].model_dump(exclude_none=True) in last[1]["content"]


def test_a_dropped_search_is_carried_once_as_its_use_and_result() -> None:
    """What carries a dropped span's tool loads: the searches' uses and results alone (the
    text and thinking around them stay dropped), only those loading a tool not carried yet,
    closed by a user message; and `mask` never clears a result that holds references."""
    ask = user(text("weather?"))
    answer = {"role": "assistant", "content": [text("Searching."), *searched(1, "get_weather")]}
    again = {"role": "assistant", "content": [text("Again."), *searched(2, "get_weather")]}
    app = loaded_by_app(3, "get_time")
    carried = ANTHROPIC.loaders([ask, answer, again, *app], [])
    assert carried == [
        {"role": "assistant", "content": [*searched(1, "get_weather"), app[0]["content"][0]]},
        {"role": "user", "content": app[1]["content"]},
    ]
    assert ANTHROPIC.loaders([again, *app], carried) == []
    only = ANTHROPIC.loaders([answer], [])
    assert only[1] == {
        "role": "user",
        "content": [text("[Tools loaded earlier in this conversation.]")],
    }
    assert ANTHROPIC.cleared(app[1], "toolu_find3", "[cleared]") == app[1]


def test_tiered_carries_the_searches_of_a_middle_it_compresses() -> None:
    """`tiered` compresses the middle of an older topic into a note in its place: a search
    in that middle goes on after the note, so the topic's later calls of its tool, kept
    after it, still find it loaded (the mock refuses a call with no reference before it)."""
    items: list[Item] = [user(text("weather please"))]
    for n in range(5):
        loads = searched(1, "get_weather") if n == 0 else []
        items.append({"role": "assistant", "content": [*loads, tool_use(f"t{n}", "get_weather")]})
        items.append(user(result(f"t{n}", "r" * (1600 if n < 3 else 10))))
    items += [{"role": "assistant", "content": [text("done")]}, user(text("and now?"))]
    body = forwarded(items, "tiered", 1000)
    assert body is not None
    assert "[summary of" in str(body["messages"]), "the middle went compressed"


def carried_names(carried: list[Item]) -> list[str]:
    """The tool each carried reference names, as many times as it is named."""
    return [name for m in carried for b in m["content"] for name in references(b)]


def test_overlapping_searches_are_carried_with_each_tool_referenced_once() -> None:
    """Searches that find some tools again (Anthropic's and the app's): each carried result
    holds only the references no carried one holds yet, in its order, so a definition is
    expanded once; a search finding nothing new is not carried, and one carried before
    keeps a later cut from carrying its tools again."""
    first = {"role": "assistant", "content": searched(1, "get_weather", "get_time")}
    second = {"role": "assistant", "content": searched(2, "get_time", "get_news", "get_time")}
    app = loaded_by_app(3, "get_news", "get_weather")
    span = [user(text("look")), first, second, *app]
    carried = ANTHROPIC.loaders(span, [])
    assert carried_names(carried) == ["get_weather", "get_time", "get_news"]
    assert carried[0]["content"][:2] == searched(1, "get_weather", "get_time")
    assert carried[0]["content"][3] == searched(2, "get_news")[1]
    assert len(carried[0]["content"]) == 4, "the app's search loaded nothing new"
    later = {"role": "assistant", "content": searched(4, "get_news", "get_weather", "get_time")}
    assert ANTHROPIC.loaders([later], carried) == []
    mock_anthropic.validate(body_of([user(text("look")), *carried[:1]]), HEADERS, {})


def test_the_fake_takes_a_reference_to_a_tool_an_mcp_toolset_defers() -> None:
    """Anthropic: a `tool_reference` may name a tool of an `mcp_toolset` whose
    `default_config` (or its own entry in `configs`) defers it; the server's tool names are
    not in the request, so any name goes where the toolset defers by default. A toolset
    that defers only some tools still makes a reference to another one refused."""
    ask = user(text("issues?"))
    found = [ask, {"role": "assistant", "content": searched(1, "search_issues")}]
    server = {"type": "mcp_toolset", "mcp_server_name": "github"}
    by_default = {**server, "default_config": {"defer_loading": True}}
    by_name = {**server, "configs": {"search_issues": {"defer_loading": True}}}
    for toolset in (by_default, by_name):
        mock_anthropic.validate(body_of(found) | {"tools": [*TOOLS, toolset]}, HEADERS, {})
    other = [ask, {"role": "assistant", "content": searched(2, "list_repos")}]
    for tools in ([*TOOLS, by_name], [*TOOLS, server]):
        with pytest.raises(mock_anthropic.Invalid, match="list_repos"):
            mock_anthropic.validate(body_of(other) | {"tools": tools}, HEADERS, {})


def test_a_toolset_deferring_any_name_still_refuses_a_listed_tool_and_names_none() -> None:
    """An `mcp_toolset` deferring its tools by default lets a reference name any tool the
    request does not list, not one it lists without deferring (`find_tools`); the mock's
    model never answers a search with the star standing for those names."""
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "github",
        "default_config": {"defer_loading": True},
    }
    found = [user(text("tools?")), {"role": "assistant", "content": searched(1, "find_tools")}]
    with pytest.raises(mock_anthropic.Invalid, match="find_tools"):
        mock_anthropic.validate(body_of(found) | {"tools": [*TOOLS, toolset]}, HEADERS, {})
    answer, _ = mock_anthropic.content_for([user(text("search tools"))], "d", ECHO, [toolset])
    assert answer[1]["content"]["tool_references"] == []
