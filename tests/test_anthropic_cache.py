"""Prompt-cache breakpoints and the forms an SDK resends: a message's identity and what goes up.

A client moves its `cache_control` breakpoint to its newest message every
turn and resends answers as its SDK parsed them; neither is an edit. What
goes upstream keeps the client's current breakpoints, never more than four.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import derive_id, reconcile_append
from proxy.dialects import Item
from proxy.dialects.anthropic import ANTHROPIC_WIRE
from proxy.dialects.anthropic_cache import within_limit
from proxy.messages import as_meant, chain_hashes, digest
from proxy.mock import anthropic as mock_anthropic
from proxy.reduction.layout import summary_key
from proxy.turn.count import count_body
from proxy.turn.state import SnapshotState

from .test_anthropic import SLOW, histories, result, text, tool_use, user

EPHEMERAL = {"type": "ephemeral"}


def blocks_of(items: list[Item]) -> list[dict[str, Any]]:
    return [b for m in items if isinstance(m["content"], list) for b in m["content"]]


@SLOW
@given(histories(), st.data())
def test_moved_breakpoints_null_fields_and_string_forms_are_the_same_messages(
    items: list[Item], data: st.DataObject
) -> None:
    resent = copy.deepcopy(items)
    for block in blocks_of(resent):
        block.pop("cache_control", None)
        if block["type"] == "text" and data.draw(st.booleans()):
            block["citations"] = None  # as `model_dump()` writes it
    for block in data.draw(st.lists(st.sampled_from(blocks_of(resent)), max_size=3)):
        block["cache_control"] = EPHEMERAL  # wherever the client marks this turn
    for message in resent:
        content = message["content"]
        one = len(content) == 1 and content[0]["type"] == "text"
        if one and "cache_control" not in content[0] and data.draw(st.booleans()):
            message["content"] = content[0]["text"]  # as `content[0].text` resends it
    assert chain_hashes(resent) == chain_hashes(items)
    assert derive_id("t", resent) == derive_id("t", items)
    span = data.draw(st.integers(0, len(items)))
    assert summary_key(["s"], resent[:span]) == summary_key(["s"], items[:span])


def test_what_a_message_says_still_tells_it_apart() -> None:
    assert digest(user(text("a"))) == digest({"role": "user", "content": "a"})
    assert digest(user(text("a"))) != digest(user(text("b")))
    assert digest(user(text("a"), text("b"))) != digest({"role": "user", "content": "ab"})
    cited = {**text("a"), "citations": [{"type": "char_location", "cited_text": "x"}]}
    assert digest(user(cited)) != digest(user(text("a")))
    # A null inside a tool's input is data, not an absent field.
    call = {**tool_use("c"), "input": {"q": None}}
    assert as_meant({"role": "assistant", "content": [call]})["content"] == [call]
    # A marked tool result is the same result, its blocks' marks included.
    nested = result("c", "")
    nested["content"] = [{**text("r"), "cache_control": EPHEMERAL}]
    assert digest(user({**nested, "cache_control": EPHEMERAL})) == digest(user(result("c", "r")))


def test_append_mode_takes_the_stored_marks_off_when_the_client_marks_its_new_message() -> None:
    stored = [user(text("q0", True)), {"role": "assistant", "content": [text("a0")]}]
    prior = SnapshotState().to_json()
    moved = reconcile_append([user(text("q1", True))], stored, prior, 2)
    assert sum(mock_anthropic.breakpoints(m) for m in moved.history) == 1
    assert moved.history[-1] == user(text("q1", True))
    assert moved.working.tail[0] == user(text("q0"))  # and the next turn stores it so
    assert stored[0] == user(text("q0", True)), "the stored message is not changed in place"
    # Unmarked new messages leave the client's earlier mark where it put it.
    kept = reconcile_append([user(text("q1"))], stored, prior, 2)
    assert kept.history[0] is stored[0]


def test_the_oldest_breakpoints_the_request_did_not_place_give_way_past_four() -> None:
    system = [text("be brief", True)]
    stale = [m for i in range(4) for m in (user(text(f"q{i}", True)), answer(i))]
    new = user(text("q4", True))
    payload = {"system": system, "messages": [new]}
    kept = within_limit(payload, [*stale, new])
    marked = [i for i, m in enumerate(kept) if mock_anthropic.breakpoints(m)]
    assert marked == [4, 6, 8] and kept[-1] is new
    assert mock_anthropic.breakpoints({"system": system, "messages": kept}) == 4
    assert stale[0] == user(text("q0", True)), "the stored message is not changed in place"
    # Within four, or the client's own history as sent: nothing changes.
    fewer = stale[4:]
    assert within_limit(payload, fewer) is fewer
    own = [user(text(f"q{i}", True)) for i in range(5)]
    assert within_limit({"messages": own}, own) is own


def answer(i: int) -> Item:
    return {"role": "assistant", "content": [text(f"a{i}")]}


def test_the_count_request_keeps_within_four_breakpoints_as_the_forwarded_one_does() -> None:
    system = [text("be brief", True)]
    stale = [m for i in range(4) for m in (user(text(f"q{i}", True)), answer(i))]
    new = user(text("q4", True))
    payload = {"model": "claude-x", "system": system, "messages": [new], "max_tokens": 9}
    body = count_body(ANTHROPIC_WIRE, payload, [*stale, new])
    assert mock_anthropic.breakpoints(body) == 4
    assert "max_tokens" not in body and body["system"] == system
