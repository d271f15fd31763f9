"""When a quoted message was said: the date its conversation last wrote as a header.

Apps that keep long chats (and replays of them) mark where each sitting starts
with its date: "(8 May 2023) Hey Mel!", "[1:56 pm on 8 May, 2023]", "Monday, 8
May 2023." A message recalled from long ago is quoted without that header, which
is a different message, so a model asked "when did she go?" reads the statement
and cannot say. Each hit is given the date of the latest header at or before it,
as written (`SearchHit.dated`).

A header is a date with its year (English month names, ISO, or numbers such as
"06/10/2022") in a user's or assistant's message: in a bracket that opens a line
(past a speaker's label), a square one that closes it, or opening a line (after a
weekday, a clock time, "Session 3") with no word, table cell or range's end after
it. A date in a sentence ("my flight is on June 3, 2024", "booked (June 3, 2024)"),
a list's line ("- 3 May 2021 moved", or one of dated lines), a link's text, a log
line's stamp or fenced code is news, not when the chat took place, and a tool's
output is not the chat's. A header dates what follows it until the next one,
so a chat dated once is dated by that once for good.

Headers are noted as the search index takes the messages in (`proxy.store.search`
calls `add`), in a table beside it: a lookup is one indexed read a quoted message.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections.abc import Iterable, Sequence, Set

from proxy.store.base import SearchHit

_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
    "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec"
)
_DAY = r"[0-3]?\d(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d\d"
# Month names either side of the day, ISO, and the numbers of a chat export or a phone's
# date ("06/10/2022", "6.10.2022", "2022/10/06"), whichever order its day and month take:
# a header is quoted as written, so the model reads it as the chat's own readers did.
_DATE = (
    rf"(?:{_DAY}\s+(?:{_MONTHS})\.?,?\s+{_YEAR}"
    rf"|(?:{_MONTHS})\.?\s+{_DAY},?\s+{_YEAR}"
    rf"|{_YEAR}-[01]\d-[0-3]\d"
    rf"|[0-3]?\d/[0-3]?\d/{_YEAR}|[0-3]?\d\.[0-3]?\d\.{_YEAR}"
    rf"|{_YEAR}/[01]?\d/[0-3]?\d)"
)
# A weekday's name or its abbreviation, not any word it opens ("Sunshine", "Monitor").
_WEEKDAY = (
    r"(?:Mon(?:day)?|Tue(?:s(?:day)?)?|Wed(?:nesday)?|Thu(?:rs?(?:day)?)?|Fri(?:day)?"
    r"|Sat(?:urday)?|Sun(?:day)?)\b\.?,?"
)
# The space before "pm" is inside its optional group: a run of spaces after a clock is
# then read one way only, not split between this and the space after it, in every way.
_CLOCK = r"\d{1,2}[:.]\d\d(?:\s*[ap]\.?m\.?)?(?:\s+on)?,?"
# What may stand before the date in a header: a weekday, a clock time, a sitting's number.
_LEAD = rf"(?:Session\s+\d+\W{{0,3}}\s*)?(?:{_WEEKDAY}\s+)?(?:{_CLOCK}\s+)?"
# A speaker's label before a line's header ("Caroline: (8 May 2023) Hi!").
_LABEL = r"(?:\w[\w .'-]{0,30}?:\s+)?"


def _bracket(group: str, opening: str = r"[(\[]", closing: str = r"[)\]]") -> str:
    # Not a log line's stamp (seconds in it) nor a link's text ("[release 2022-02-02](url)").
    return (
        rf"{opening}(?![^()\[\]\n]{{0,60}}?\d:\d\d:\d\d)[^()\[\]\n]{{0,40}}?"
        rf"\b(?P<{group}>{_DATE})\b[^()\[\]\n]{{0,20}}{closing}(?!\()"
    )


# After a date opening a line, a table's or a CSV's next cell (a clock may follow a
# comma: a chat export's "06/10/2022, 21:15 - Ann: hi"), or a range's other end.
_CELL = r"[^\S\n]*[,;|][^\S\n]*(?!\d{1,2}:\d\d)[^\s]"
_RANGE = r"[^\S\n]*[-\u2013\u2014][^\S\n]*\d"
# A line opening with a date beside another: a list's or a table's rows, not a sitting's.
_DATED_LINE = re.compile(rf"[^\w\n]*{_DATE}\b", re.IGNORECASE)
# A bracket opening a line (past a speaker's label), a square one closing it (a
# sentence ends in an aside, "booked (June 3, 2024)"), or a date opening a line that no
# word follows: a sitting's header, not a date inside a sentence.
_SQUARE = _bracket("closes", opening=r"\[", closing=r"\]")
HEADER = re.compile(
    rf"^[^\w\n]*{_LABEL}{_bracket('opens')}"
    rf"|{_SQUARE}[^\S\n]*$"
    rf"|^[^\w\n]*{_LEAD}(?P<leads>{_DATE})\b(?![^\S\n]*\w|{_CELL}|{_RANGE})",
    re.IGNORECASE | re.MULTILINE,
)
# Fenced code (a pasted log, a script) writes its own dates, not the chat's.
_CODE = re.compile(r"^[ \t]*```.*?(?:^[ \t]*```|\Z)", re.MULTILINE | re.DOTALL)
# A conversation's headers, found as its messages are indexed: few rows (one a
# sitting), read by seq. The search index is a cache of the archive, and so is this.
CREATE = """
    CREATE TABLE IF NOT EXISTS search_dates (
        conversation_id INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        hash TEXT NOT NULL,
        written TEXT NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    ) WITHOUT ROWID
"""


def header(text: str) -> str:
    """The last date `text` writes as a header, as written; "" when it writes none."""
    found = ""
    text = _CODE.sub("", text)
    for match in HEADER.finditer(text):
        if match.group("leads") and _in_a_list(text, match.start()):
            continue
        found = match.group("opens") or match.group("closes") or match.group("leads")
    return " ".join(found.split())


def _in_a_list(text: str, at: int) -> bool:
    """Whether the line at `at` has a neighbour that opens with a date too."""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    before = text[text.rfind("\n", 0, max(start - 1, 0)) + 1 : max(start - 1, 0)] if start else ""
    after = "" if end < 0 else text[end + 1 :].split("\n", 1)[0]
    return any(_DATED_LINE.match(line) for line in (before, after) if line)


def add(db: sqlite3.Connection, conv: int, said: Iterable[tuple[int, str, str]]) -> None:
    """Note the headers among `(seq, chain hash, text)` of a user's or assistant's messages."""
    found = [(conv, seq, hash_, written) for seq, hash_, text in said if (written := header(text))]
    db.executemany(
        "INSERT OR REPLACE INTO search_dates (conversation_id, seq, hash, written)"
        " VALUES (?, ?, ?, ?)",
        found,
    )


def forget(db: sqlite3.Connection, conv: int) -> None:
    """Drop the conversation's headers (with its index rows: `search.forget`)."""
    db.execute("DELETE FROM search_dates WHERE conversation_id = ?", (conv,))


def dated(
    db: sqlite3.Connection, conv: int, hits: Sequence[SearchHit], within: Set[str] | None = None
) -> list[SearchHit]:
    """`hits` (and the replies they carry), each with the date its conversation (of the
    branch whose chain hashes are `within`, if given) last wrote as a header at or
    before it."""
    seqs = {said.seq for hit in hits for said in (hit, *hit.replies)}
    when = {seq: _header_before(db, conv, seq, within) for seq in seqs}

    def of(said: SearchHit) -> SearchHit:
        return dataclasses.replace(said, dated=when[said.seq]) if when[said.seq] else said

    return [dataclasses.replace(of(hit), replies=tuple(map(of, hit.replies))) for hit in hits]


def _header_before(db: sqlite3.Connection, conv: int, seq: int, within: Set[str] | None) -> str:
    rows: Iterable[tuple[str, str]] = db.execute(
        "SELECT hash, written FROM search_dates WHERE conversation_id = ? AND seq <= ?"
        " ORDER BY seq DESC",
        (conv, seq),
    )
    return next((written for hash_, written in rows if within is None or hash_ in within), "")
