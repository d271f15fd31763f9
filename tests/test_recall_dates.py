"""A recalled message is quoted with the date of its sitting, where the conversation wrote one."""

from __future__ import annotations

import dataclasses
import datetime as dt
import sqlite3
import time
from pathlib import Path
from typing import Any

import anthropic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy import quoting
from proxy.mock import MockUpstream
from proxy.store import search
from proxy.store.base import SearchHit
from proxy.store.dates import dated, header

from .factories import assistant, call, tool, user
from .servers import run_server, serve_proxy

HEADERS = [
    ("(8 May 2023) Hey Mel!", "8 May 2023"),
    ("Hi there, long time! [May 8, 2023]", "May 8, 2023"),
    ("(1:56 pm on 8 May, 2023) Hey Caroline!", "8 May, 2023"),
    ("Monday, 8 May 2023. Morning!", "8 May 2023"),
    ("[Session 3 - 8 May 2023]\nCaroline: hi", "8 May 2023"),
    ("Session 3, 8 May 2023: hi", "8 May 2023"),
    ("2023-05-08\nWhat's new?", "2023-05-08"),
    ("[Tuesday, 12 Sept 2023, 10:00] ok", "12 Sept 2023"),
    ("=== 4 March 2022 ===\nhello\n[5 March 2022]", "5 March 2022"),
    ("Thurs, 4 May 2023: hi", "4 May 2023"),
    ("(8 May 2023) the log:\n```\n[2021-03-04 10:00:01] ERROR\n```", "8 May 2023"),
    ("Caroline: (8 May 2023) hey", "8 May 2023"),
    ("(8 May 2023) Hey! My flight is booked (June 3, 2024).", "8 May 2023"),
    ("\u2014 06/10/2022 \u2014\nhey, you up?", "06/10/2022"),
    ("[6/10/2022] morning!", "6/10/2022"),
    ("Tue 18.06.2024\nso tired today", "18.06.2024"),
    ("2022/10/06\nhi", "2022/10/06"),
]
NOT_HEADERS = [
    "My flight is on June 3, 2024, finally.",
    "On 8 May 2023 I flew to Lisbon.",
    "I may 3 2023 it",
    "(see May) and 2023",
    "We met in May 2023.",
    "",
    "Sunshine 8 May 2023 was the best day.",
    "The log:\n```\n[2021-03-04 10:00:01] ERROR boom\n2021-03-04 retry\n```\nwhy?",
    "[2021-03-04 10:00:01] ERROR boom",
    "- 3 May 2021 moved to Berlin",
    "8 May 2023 was the best day.",
    "See [release 2022-02-02](https://example.com/r) for the notes.",
    "[release 2022-02-02](https://example.com/r)",
    "My flight is booked (June 3, 2024).",
    "My flight is booked (June 3, 2024)",
    "My flight is on 06/10/2022, finally.",
    "booked for 18.06.2024 and I can't wait",
    "06/10.2022",
    "v1.2.2023",
    # Numbers in a pasted table, a CSV, a list or a range are its rows', not the chat's.
    "Can you sum these?\n06/10/2022,42.50,Groceries\n07/10/2022,12.00,Bus",
    "| Date | Amount |\n|---|---|\n| 06/10/2022 | 42.50 |\n| 07/10/2022 | 12.00 |",
    "Payment due dates:\n- 01/15/2024\n- 02/15/2024",
    "18.06.2024 - 20.06.2024 is the trip",
]


@pytest.mark.parametrize(("text", "written"), HEADERS)
def test_a_header_is_a_dated_line_or_bracket_and_reads_as_written(text: str, written: str) -> None:
    assert header(text) == written


@pytest.mark.parametrize("text", NOT_HEADERS)
def test_a_date_inside_a_sentence_is_news_not_a_header(text: str) -> None:
    assert header(text) == ""


def test_a_clock_before_a_long_run_of_spaces_is_read_in_linear_time() -> None:
    """A line opening with a clock and then padding (a pasted table) is read once: the
    regex tried every split of the spaces, for minutes on a long run."""
    text = "12:30" + " " * 100_000 + "x\n" + "(8 May 2023) hi"
    started = time.perf_counter()
    assert header(text) == "8 May 2023"
    assert time.perf_counter() - started < 10


STYLES = (
    "({d} {m} {y}) ",
    "[{m} {d}, {y}] ",
    "({t} on {d} {m}, {y}) ",
    "{wd}, {d} {m} {y}. ",
    "- {dd}/{mm}/{y} -\n",
)
WRITTEN = ("{d} {m} {y}", "{m} {d}, {y}", "{d} {m}, {y}", "{d} {m} {y}", "{dd}/{mm}/{y}")
CHAT_LINES = st.sampled_from(
    [
        "Hey! How was the weekend?",
        "We may go hiking in May.",
        "I adopted a kitten 2023 style.",
        "Sounds lovely, tell me more.",
        "The 20 bus was late again.",
        "My flight is on June 3, 2024.",
    ]
)


@st.composite
def dated_chat(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Messages, some opening a sitting with a dated header in one of five styles, and
    the date each header writes ("" for a message that opens none)."""
    messages: list[str] = []
    written: list[str] = []
    day = draw(st.dates(dt.date(1990, 1, 1), dt.date(2060, 1, 1)))
    for _ in range(draw(st.integers(1, 25))):
        text = draw(CHAT_LINES)
        if draw(st.booleans()):
            style = draw(st.integers(0, len(STYLES) - 1))
            fields = {
                "dd": f"{day.day:02}",
                "mm": f"{day.month:02}",
                "d": day.day,
                "m": day.strftime("%B"),
                "y": day.year,
                "t": "1:56 pm",
                "wd": day.strftime("%A"),
            }
            messages.append(STYLES[style].format(**fields) + text)
            written.append(WRITTEN[style].format(**fields))
            day += dt.timedelta(days=draw(st.integers(1, 40)))
        else:
            messages.append(text)
            written.append("")
    return messages, written


@given(dated_chat())
def test_a_header_written_in_any_style_is_read_as_written(
    chat: tuple[list[str], list[str]],
) -> None:
    for text, written in zip(*chat, strict=True):
        assert header(text) == written


@given(dated_chat(), st.data())
def test_each_hit_is_dated_by_the_last_header_at_or_before_it_on_its_branch(
    chat: tuple[list[str], list[str]], data: st.DataObject
) -> None:
    """The index lookup (newest rows first, stopping early) equals reading every message."""
    messages, _ = chat
    branch = data.draw(st.sets(st.integers(0, len(messages) - 1)) | st.none())
    within = None if branch is None else {f"h{i}" for i in branch}
    db = sqlite3.connect(":memory:", isolation_level=None)
    search.create(db)
    search.add(db, 1, [(i, f"h{i}", user(m)) for i, m in enumerate(messages)])
    seqs = data.draw(st.lists(st.integers(0, len(messages) - 1), max_size=5))
    reply = SearchHit(0, 0, "assistant", "ok", 0)
    hits = [
        SearchHit(s, s, "user", messages[s], 1.0, replies=(dataclasses.replace(reply, seq=s + 1),))
        for s in seqs
    ]

    def plain(seq: int) -> str:
        found = [
            header(messages[i])
            for i in range(min(seq, len(messages) - 1) + 1)
            if within is None or f"h{i}" in within
        ]
        return next((w for w in reversed(found) if w), "")

    got = dated(db, 1, hits, within)
    assert [h.dated for h in got] == [plain(s) for s in seqs]
    assert [r.dated for h in got for r in h.replies] == [plain(s + 1) for s in seqs]
    assert [dataclass_fields(h) for h in got] == [dataclass_fields(h) for h in hits]


def test_a_tools_output_dates_no_sitting_and_a_message_is_dated_by_its_last_header() -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    search.create(db)
    said = [
        user("(8 May 2023) Hi! [9 May 2023]"),
        assistant(None, tool_calls=[call("c1", "logs")]),
        tool("c1", "2024-01-02 10:00:00 ERROR disk full\n2024-01-03 11:00:00 ok"),
        user("The disk is fine now."),
    ]
    search.add(db, 1, [(i, f"h{i}", m) for i, m in enumerate(said)])
    hits = [SearchHit(3, 2, "user", "The disk is fine now.", 1.0)]
    assert [h.dated for h in dated(db, 1, hits)] == ["9 May 2023"]


def dataclass_fields(hit: SearchHit) -> tuple[Any, ...]:
    """What dating leaves as it was."""
    return (hit.seq, hit.turn, hit.role, hit.text, hit.score, len(hit.replies))


def test_the_block_writes_a_hits_date_once_and_not_where_the_quote_holds_it() -> None:
    hits = [
        SearchHit(
            3, 2, "user", "I adopted a kitten.", 1.0,
            replies=(SearchHit(4, 2, "assistant", "Cute!", 0, dated="8 May 2023"),),
            dated="8 May 2023",
        ),
        SearchHit(9, 5, "user", "(9 June 2023) Vet day!", 0.5, dated="9 June 2023"),
        SearchHit(12, 7, "user", "Undated chat.", 0.2),
    ]  # fmt: skip
    assert quoting.quote(hits, 400).split("\n")[1:] == [
        "[turn 2, user, 8 May 2023] I adopted a kitten.",
        "[turn 2, assistant] Cute!",
        "[turn 5, user] (9 June 2023) Vet day!",
        "[turn 7, user] Undated chat.",
    ]


WALK = "a walk with coffee stops and a long talk about the weather around district"
KITTEN = "I adopted a grey kitten from the shelter yesterday, her name is Pixel."


@pytest.mark.integration
def test_a_recalled_statement_comes_with_the_date_of_its_sitting(tmp_path: Path) -> None:
    """The official Anthropic client, the real proxy on loopback: asked "when", the model
    reads the statement with its sitting's date, which was a different message."""
    upstream = MockUpstream(context_limits={"claude-tiny": 3000})
    with (
        run_server(upstream.app) as upstream_url,
        serve_proxy(
            upstream_url + "/v1",
            tmp_path / "p.db",
            windows={"claude-tiny": 3000},
            anthropic_url=upstream_url,
            recall_enabled="true",
        ) as url,
    ):
        api = anthropic.Anthropic(
            base_url=url,
            api_key="sk-ant-dates",
            max_retries=0,
            default_headers={"X-Conversation-Id": "dated"},
        )
        history: list[Any] = []
        day = dt.date(2023, 5, 8)
        for sitting in range(80):
            opening = f"({day.day} {day:%B} {day.year}) Hi again! Sitting {sitting}."
            said = KITTEN if sitting == 1 else f"Day {sitting}: {WALK} {sitting}."
            history += [
                {"role": "user", "content": opening},
                {"role": "assistant", "content": "Hello! How have you been?"},
                {"role": "user", "content": said},
                {"role": "assistant", "content": "Lovely."},
            ]
            day += dt.timedelta(days=7)
        history.append({"role": "user", "content": "When did I adopt the kitten?"})
        raw = api.messages.with_raw_response.create(
            model="claude-tiny", max_tokens=256, system="Be a pen pal.", messages=history
        )
    assert raw.headers["x-context-recall"] != "0"
    forwarded = upstream.records("/v1/messages")[-1].body["messages"]
    assert "15 May 2023" not in str(forwarded[:-1]), "not reduced"
    # The block opens the question, a text block of its own.
    block, question = forwarded[-1]["content"]
    assert question == {"type": "text", "text": "When did I adopt the kitten?"}
    lines = block["text"].split("\n")
    assert lines[0] == quoting.HEADER
    assert f"[turn 4, user, 15 May 2023] {KITTEN}" in lines
