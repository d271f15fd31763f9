"""Mid-conversation system messages (`{"role": "system"}` in `messages`): read, reduced
and forwarded with the placement the client made, and validated by the fake as
Anthropic does (right after a user message)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.dialects import Item
from proxy.dialects.anthropic_request import OMITTED, alternate, parse
from proxy.errors import ProxyError
from proxy.mock import MockUpstream
from proxy.mock import anthropic as mock_anthropic
from proxy.reduction import STRATEGIES

from .servers import run_server
from .test_anthropic import HEADERS, SLOW, accepted, histories, text, user
from .test_anthropic_e2e import MAX_TOKENS, MODEL, WINDOW, App, start_proxy

RULE = {"role": "system", "content": "From now on answer in French."}
BLOCKS = {"role": "system", "content": [text("Prefer trains to planes.")]}


def answer(value: str) -> Item:
    return {"role": "assistant", "content": [text(value)]}


def body(messages: list[Item]) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 64, "messages": messages}


@pytest.mark.parametrize("message", [RULE, BLOCKS])
def test_a_system_message_after_a_user_message_is_read(message: Item) -> None:
    payload = parse(orjson.dumps(body([user(text("hi")), message])))
    assert payload["messages"][1] == message


def test_a_system_message_without_content_is_refused_in_the_proxys_words() -> None:
    with pytest.raises(ProxyError) as refused:
        parse(orjson.dumps(body([user(text("hi")), {"role": "system"}])))
    assert refused.value.status == 400
    assert refused.value.message == "messages.1.content: a string or an array of blocks."


@pytest.mark.parametrize(
    "messages",
    [
        [user(text("q")), RULE],
        [user(text("q")), BLOCKS, answer("a"), user(text("q2"))],
        [user(text("q")), answer("a"), user(text("q2")), RULE, answer("b")],
    ],
)
def test_the_fake_takes_a_system_message_right_after_a_user_message(
    messages: list[Item],
) -> None:
    assert mock_anthropic.validate(body(messages), HEADERS, {}) == messages


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        ([RULE, user(text("q"))], "first message"),
        ([user(text("q")), answer("a"), RULE], "right after a user message"),
        ([user(text("q")), RULE, RULE], "right after a user message"),
        ([user(text("q")), RULE, user(text("q2"))], "alternate"),
        (
            [user(text("q")), {"role": "system", "content": [{"type": "image", "source": {}}]}],
            "text",
        ),
    ],
)
def test_the_fake_refuses_other_placements_and_contents(messages: list[Item], said: str) -> None:
    with pytest.raises(mock_anthropic.Invalid, match=said):
        mock_anthropic.validate(body(messages), HEADERS, {})


def test_alternate_never_merges_across_a_system_message() -> None:
    items = [user(text("q")), user(text("r")), RULE, answer("a"), answer("b"), user(text("s"))]
    out = alternate(items)
    assert [m["role"] for m in out] == ["user", "system", "assistant", "user"]
    assert out[1] is RULE
    mock_anthropic.validate(body(list(out)), HEADERS, {})


@pytest.mark.parametrize(
    "kept",
    [
        [RULE, answer("a"), user(text("q2"))],  # a window that starts at the system message
        [answer("a0"), user(text("q")), RULE, answer("a")],
    ],
)
def test_a_system_message_a_window_leaves_first_gets_a_user_message_before_it(
    kept: list[Item],
) -> None:
    out = alternate(kept)
    assert out[0]["role"] == "user"
    at = next(i for i, m in enumerate(out) if m is RULE)
    assert out[at - 1]["role"] == "user"
    assert [m for m in out if m["role"] == "system"] == [RULE]
    mock_anthropic.validate(body(list(out)), HEADERS, {})
    if kept[0] is RULE:
        assert out[0] is OMITTED


def test_a_placement_the_client_made_goes_as_it_is() -> None:
    """After an assistant message or after another system message: nothing documented says
    what Anthropic answers, so the proxy adds nothing and Anthropic answers it (the fake,
    reading only the documented rule, refuses both)."""
    for items in (
        [user(text("q")), answer("a"), RULE],
        [user(text("q")), RULE, BLOCKS, answer("a")],
    ):
        assert alternate(items) is items
        with pytest.raises(mock_anthropic.Invalid):
            mock_anthropic.validate(body(items), HEADERS, {})


@st.composite
def with_system_messages(draw: st.DrawFn) -> list[Item]:
    """A generated history with system messages placed as Anthropic takes them: right
    after some user messages (questions or tool results) and, perhaps, last."""
    items = draw(histories())
    out: list[Item] = []
    for n, item in enumerate(items):
        out.append(item)
        nxt = items[n + 1]["role"] if n + 1 < len(items) else None
        if item["role"] == "user" and nxt != "user" and draw(st.integers(0, 3)) == 0:
            content = f"rule {n} " + "w" * draw(st.integers(0, 200))
            out.append({"role": "system", "content": content if n % 2 else [text(content)]})
    return out


@SLOW
@given(
    with_system_messages(),
    st.sampled_from([s for s in STRATEGIES if s != "none"] + ["mask+tokens"]),
    st.integers(300, 4000),
)
def test_every_strategy_keeps_system_messages_where_anthropic_takes_them(
    items: list[Item], strategy: str, window: int
) -> None:
    mock_anthropic.validate(body(items), HEADERS, {})  # the generated placement is valid
    original = copy.deepcopy(items)
    sent = accepted(items, strategy, window)  # validated by the fake
    if sent is None:
        return
    # Only the client's system messages go, each unchanged, in the client's order.
    ours = [m for m in sent["messages"] if m["role"] == "system"]
    theirs = [m for m in original if m["role"] == "system"]
    assert all(m in theirs for m in ours)
    assert [theirs.index(m) for m in ours] == sorted(theirs.index(m) for m in ours)


@pytest.mark.integration
def test_a_long_conversation_with_a_system_message_is_summarised_across_it(
    tmp_path: Path,
) -> None:
    """Through the real server with the `anthropic` SDK, streams included: a system message
    sent early is summarised away with its turn or kept right after its user message."""
    upstream = MockUpstream(context_limits={MODEL: WINDOW})
    with (
        run_server(upstream.app) as upstream_url,
        start_proxy(upstream_url, tmp_path / "p.db") as url,
    ):
        app = App(url)
        for i in range(40):
            app.send(f"Turn {i}: tell me about day {i}. " + "Museums and rivers. " * 6, i % 3 == 1)
            if i in (2, 25):
                # The app's new instruction, right after the user's message it follows.
                app.messages.insert(-1, {"role": "system", "content": f"Rule {i}: be brief."})
        app.api.close()
    forwarded = upstream.messages_requests()
    assert len(forwarded) == 40  # each one validated by the fake, placement included
    sent = [m for m in forwarded[-1]["messages"] if m["role"] == "system"]
    assert sent == [{"role": "system", "content": "Rule 25: be brief."}]
    assert any(r.is_summary for r in upstream.requests), "past the window it is summarised"
    kinds = [h.get("x-context-reduction", "") for h in app.headers]
    assert any("summar" in k for k in kinds)


@pytest.mark.integration
def test_append_mode_takes_a_system_message_sent_as_new(tmp_path: Path) -> None:
    upstream = MockUpstream(context_limits={MODEL: WINDOW})
    with (
        run_server(upstream.app) as upstream_url,
        start_proxy(upstream_url, tmp_path / "p.db") as url,
    ):
        api = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        with api:
            first = api.messages.with_raw_response.create(
                model=MODEL, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": "Hi."}]
            )
            key = first.headers["x-conversation-id"]
            headers = {"X-Conversation-Id": key, "X-Context-Mode": "append"}
            new: Any = [
                {"role": "user", "content": "Plan day two."},
                {"role": "system", "content": "Answer in one line."},
            ]
            with api.messages.stream(
                model=MODEL, max_tokens=MAX_TOKENS, messages=new, extra_headers=headers
            ) as events:
                assert events.get_final_message().content
            last = api.messages.create(
                model=MODEL,
                max_tokens=MAX_TOKENS,
                messages=[{"role": "user", "content": "And day three?"}],
                extra_headers=headers,
            )
            assert last.content
    forwarded = upstream.messages_requests()
    roles = [[m["role"] for m in body["messages"]] for body in forwarded]
    assert roles[1] == ["user", "assistant", "user", "system"]
    assert roles[2] == ["user", "assistant", "user", "system", "assistant", "user"]
    assert forwarded[2]["messages"][3] == new[1]
