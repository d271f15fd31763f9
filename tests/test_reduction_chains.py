"""Tool-chain units, repair, and the `[...N...]` truncation."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.dialects.anthropic import ANTHROPIC
from proxy.dialects.chat_completions import CHAT
from proxy.dialects.responses import RESPONSES
from proxy.messages import Message, text_of
from proxy.reduction import repair, truncate_text
from proxy.reduction.chains import active_index, flatten, group, segment_starts
from proxy.reduction.repair import PLACEHOLDER, REPAIR_PASSES
from proxy.reduction.truncate import MIN_CHARS, marker, shrink, truncate_to_fit
from tests.factories import assistant, call, tool, tool_round, user


def count(message: Message) -> int:
    return 3 + len(text_of(message)) // 4 + 1


def size(message: Message) -> int:
    """Tokens of any dialect's item: its JSON's length, as a counter reads the whole item."""
    return 3 + len(orjson.dumps(message)) // 4


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
    assert shrink(user("tiny"), 1, count, CHAT) is None
    blocks = {"role": "user", "content": [{"type": "text", "text": "x"}]}
    assert shrink(blocks, 1, count, CHAT) is None


def test_shrink_keeps_the_token_to_character_ratio() -> None:
    message = tool("id", "z" * 2400)
    smaller = shrink(message, 100, count, CHAT)
    assert smaller is not None and smaller["tool_call_id"] == "id"
    assert count(smaller) <= 100 and count(smaller) > 80
    assert message["content"] == "z" * 2400


def test_largest_messages_are_truncated_first() -> None:
    messages = [user("a" * 400), tool("x", "b" * 4000), user("c" * 40)]
    out, left = truncate_to_fit(messages, [0, 1, 2], 500, count, CHAT)
    assert left <= 0
    assert out[0] is messages[0] and out[2] is messages[2]
    assert "[..." in out[1]["content"]
    same, left = truncate_to_fit(messages, [2], 500, count, CHAT)
    assert same is messages and left == 500


def test_shrink_cuts_the_texts_of_content_parts_and_leaves_the_rest() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}}
    message = {"role": "user", "content": [{"type": "text", "text": "p" * 4000}, image]}
    smaller = shrink(message, 200, size, CHAT)
    assert smaller is not None and size(smaller) <= 200
    assert smaller["content"][1] == image and "[..." in smaller["content"][0]["text"]


def test_an_anthropic_tool_result_is_cut_inside_its_block_and_thinking_never() -> None:
    block = {"type": "tool_result", "tool_use_id": "t1", "is_error": False, "content": "r" * 8000}
    listed = {**block, "content": [{"type": "text", "text": "r" * 8000}]}
    for result in (block, listed):
        message = {"role": "user", "content": [result, {"type": "text", "text": "and?"}]}
        smaller = shrink(message, 300, size, ANTHROPIC)
        assert smaller is not None and size(smaller) <= 300
        cut = smaller["content"][0]
        assert {k: v for k, v in cut.items() if k != "content"} == {
            k: v for k, v in result.items() if k != "content"
        }
        assert "[..." in str(cut["content"]) and smaller["content"][1]["text"] == "and?"
    thought = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    answer = {"role": "assistant", "content": [thought, {"type": "text", "text": "a" * 8000}]}
    assert shrink(answer, 300, size, ANTHROPIC) is None


def test_a_responses_output_is_cut_and_calls_and_reasoning_never() -> None:
    output = {"type": "function_call_output", "call_id": "c1", "output": "o" * 8000}
    smaller = shrink(output, 300, size, RESPONSES)
    assert smaller is not None and smaller["call_id"] == "c1" and "[..." in smaller["output"]
    message = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "m" * 8000}],
    }
    assert "[..." in str(shrink(message, 300, size, RESPONSES))
    image = {"type": "input_image", "image_url": "data:image/png;base64," + "A" * 3000}
    parts = [{"type": "input_text", "text": "q"}, image, {"type": "input_text", "text": "t" * 4000}]
    cut = shrink({"role": "user", "content": parts}, 1200, size, RESPONSES)
    assert cut is not None and cut["content"][:2] == parts[:2], "the image is never cut"
    assert "[..." in cut["content"][2]["text"]
    assert shrink({"role": "user", "content": [image]}, 10, size, RESPONSES) is None
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{" + "x" * 8000}
    reasoning = {
        "type": "reasoning",
        "id": "rs",
        "summary": [{"type": "summary_text", "text": "s" * 8000}],
    }
    assert shrink(call, 300, size, RESPONSES) is None
    assert shrink(reasoning, 300, size, RESPONSES) is None


def test_a_part_whose_type_is_not_a_string_is_left_as_it_is() -> None:
    odd = {"type": ["text"], "text": "x" * 4000}
    for dialect in (CHAT, RESPONSES, ANTHROPIC):
        message = {"role": "user", "content": [odd, text_part("text", 4000)]}
        smaller = shrink(message, 1500, size, dialect)
        assert smaller is None or smaller["content"][0] == odd


@given(st.integers(0, 6000), st.integers(0, 6000), st.integers(20, 3000))
def test_shrink_fits_and_changes_only_texts_in_every_dialect(a: int, b: int, target: int) -> None:
    """Whatever the texts' sizes: the result is None or fits (down to the shortest worth a
    marker), and each text is the original's start and end around a marker."""
    cases = [
        (
            CHAT,
            {
                "role": "tool",
                "tool_call_id": "t",
                "content": [text_part("text", a), text_part("text", b)],
            },
        ),
        (
            ANTHROPIC,
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": "r" * a},
                    text_part("text", b),
                ],
            },
        ),
        (
            RESPONSES,
            {
                "type": "message",
                "role": "user",
                "content": [text_part("input_text", a), text_part("input_text", b)],
            },
        ),
    ]
    for dialect, message in cases:
        smaller = shrink(message, target, size, dialect)
        if smaller is None:
            continue
        assert size(smaller) < size(message)
        floor = size(dialect.shortened(message, lambda t: t[:MIN_CHARS]))
        assert size(smaller) <= max(target, floor)
        for cut, whole in zip(texts_of(smaller), texts_of(message), strict=True):
            head, _, rest = cut.partition("[...")
            assert cut == whole or (
                whole.startswith(head) and whole.endswith(rest.partition("...]")[2])
            )


def text_part(kind: str, n: int) -> dict[str, str]:
    return {"type": kind, "text": "w" * n}


def texts_of(message: Message) -> list[str]:
    found: list[str] = []
    content = message.get("content")
    for block in content if isinstance(content, list) else []:
        inner = block.get("content")
        found += [inner] if isinstance(inner, str) else []
        found += [block["text"]] if "text" in block else []
    return found
