"""Tool-chain units, repair, and the `[...N...]` truncation."""

from __future__ import annotations

import orjson

from proxy.messages import Message, text_of
from proxy.reduction import repair, truncate_text
from proxy.reduction.chains import active_index, flatten, group, segment_starts
from proxy.reduction.repair import PLACEHOLDER, REPAIR_PASSES
from proxy.reduction.truncate import marker, shrink, truncate_to_fit
from tests.factories import assistant, call, tool, tool_round, user


def count(message: Message) -> int:
    return 3 + len(text_of(message)) // 4 + 1


def test_tool_chain_is_one_unit_whatever_the_result_order() -> None:
    chain = [assistant(None, tool_calls=[call("a"), call("b")]), tool("b"), tool("a")]
    units = group([user(), *chain, assistant("done")])
    assert [u.size for u in units] == [1, 3, 1]
    assert units[1].has_tool_calls and not units[1].repaired
    assert flatten(units) == [user(), *chain, assistant("done")]


def test_active_part_starts_at_the_last_user_message() -> None:
    units = group([user("q1"), assistant(), user("q2"), *tool_round("t")])
    assert active_index(units) == 2
    assert segment_starts(units) == [0, 2]
    assert active_index(group([assistant(), assistant()])) == 1
    assert active_index(()) == 0


def test_repair_returns_its_input_when_nothing_is_broken() -> None:
    messages = [user(), *tool_round("t", 2), assistant()]
    assert repair(messages) is messages


def test_repair_drops_orphaned_tool_results() -> None:
    messages = [user(), tool("ghost"), assistant(), *tool_round("t"), tool("t_0", "again")]
    assert repair(messages) == [user(), assistant(), *tool_round("t")]


def test_repair_closes_calls_whose_results_never_came() -> None:
    messages = [user(), assistant(None, tool_calls=[call("a"), call("b")]), tool("a")]
    repaired = repair(tuple(messages))
    assert repaired[-1] == {"role": "tool", "tool_call_id": "b", "content": PLACEHOLDER}
    assert repaired[:3] == messages


def test_a_result_separated_from_its_call_is_an_orphan() -> None:
    messages = [assistant(None, tool_calls=[call("a")]), user(), tool("a")]
    units = group(messages, REPAIR_PASSES)
    assert [u.size for u in units] == [1, 1, 1]
    assert flatten(units) == [
        messages[0],
        tool("a", PLACEHOLDER) | {"content": PLACEHOLDER},
        user(),
    ]


def test_truncation_keeps_start_and_end_around_the_marker() -> None:
    text = "This is a very long message " * 10
    cut = truncate_text(text, 60)
    assert len(cut) == 60
    removed = len(text) - (60 - len(marker(len(text) - 60 + 9)))
    assert marker(removed) in cut
    head, tail = cut.split(marker(removed))
    assert text.startswith(head) and text.endswith(tail)
    assert abs(len(head) - len(tail)) <= 1


def test_truncation_marker_width_is_solved_exactly() -> None:
    for length in range(0, 200, 7):
        text = "y" * 1000
        cut = truncate_text(text, length)
        n = int(cut[cut.index("[...") + 4 : cut.index("...]")])
        assert n == 1000 - (len(cut) - len(marker(n)))
        assert len(cut) == max(length, len(marker(n)))


def test_short_text_is_never_truncated() -> None:
    assert truncate_text("short", 10) == "short"
    assert shrink(user("tiny"), 1, count) is None
    assert shrink({"role": "user", "content": [{"type": "text", "text": "x"}]}, 1, count) is None


def test_shrink_keeps_the_token_to_character_ratio() -> None:
    message = tool("id", "z" * 2400)
    smaller = shrink(message, 100, count)
    assert smaller is not None and smaller["tool_call_id"] == "id"
    assert count(smaller) <= 100 and count(smaller) > 80
    assert message["content"] == "z" * 2400


def test_largest_messages_are_truncated_first() -> None:
    messages = [user("a" * 400), tool("x", "b" * 4000), user("c" * 40)]
    out, left = truncate_to_fit(messages, [0, 1, 2], 500, count)
    assert left <= 0
    assert out[0] is messages[0] and out[2] is messages[2]
    assert "[..." in out[1]["content"]
    same, left = truncate_to_fit(messages, [2], 500, count)
    assert same is messages and left == 500


def test_a_responses_output_and_the_longest_text_part_are_cut() -> None:
    # A Responses tool output holds its text in `output`; the SDKs often send a list of parts.
    def by_size(message: Message) -> int:
        return len(orjson.dumps(message)) // 4

    output = {"type": "function_call_output", "call_id": "c", "output": "o" * 4000}
    smaller = shrink(output, 100, by_size)
    assert smaller is not None and smaller["call_id"] == "c" and "[..." in smaller["output"]
    assert by_size(smaller) <= 100
    image = {"type": "input_image", "image_url": "data:image/png;base64," + "A" * 3000}
    parts = [{"type": "input_text", "text": "q"}, image, {"type": "input_text", "text": "t" * 4000}]
    message = {"role": "user", "content": parts}
    cut = shrink(message, 200, by_size)
    assert cut is not None and cut["content"][:2] == parts[:2]  # the image is never cut
    assert "[..." in cut["content"][2]["text"] and len(cut["content"][2]["text"]) < 1000
    assert message["content"][2]["text"] == "t" * 4000
    assert shrink({"role": "user", "content": [image]}, 10, by_size) is None
    # Anthropic's assistant messages go back as sent, so its `text` parts are not cut.
    assert (
        shrink(
            {"role": "assistant", "content": [{"type": "text", "text": "t" * 4000}]}, 10, by_size
        )
        is None
    )
