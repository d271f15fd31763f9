"""The word lists and templates of `bench.recall_other`, read from `recall_other.json`.

The JSON sits beside this module; each table is checked and turned into tuples (and the
kinds of life event into `Kind`s) at import. Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

Context = tuple[str, str]  # (as said in the first person, as asked in the third)


@dataclass(frozen=True)
class Kind:
    """One kind of life event: how a friend says it and how it is asked about."""

    key: str
    topic: str
    xs: tuple[str, ...]  # the telling detail; one word, the answer
    says: tuple[str, ...]
    asks: tuple[str, ...]
    when: str  # a temporal question
    lists: str  # a multi-hop question over every time it happened
    cs: tuple[Context, ...]
    needs: str = ""  # "kid", "pet" or "sib": the person must have one
    mood: str = "up"


def _bad(what: str, value: object) -> TypeError:
    return TypeError(f"bench/recall_other.json: expected {what}, got {value!r:.80}")


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise _bad("a string", value)
    return value


def _strs(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _bad("a list of strings", value)
    return tuple(_str(v) for v in value)


def _object(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad("an object", value)
    return {_str(k): v for k, v in value.items()}


def _lists(value: object) -> dict[str, tuple[str, ...]]:
    return {k: _strs(v) for k, v in _object(value).items()}


def _context(value: object) -> Context:
    said, asked = _strs(value)
    return said, asked


def _kind(value: object) -> Kind:
    row = _object(value)
    unknown = set(row) - {f.name for f in fields(Kind)}
    if unknown:
        raise _bad("the fields of a Kind", sorted(unknown))
    return Kind(
        key=_str(row["key"]),
        topic=_str(row["topic"]),
        xs=_strs(row["xs"]),
        says=_strs(row["says"]),
        asks=_strs(row["asks"]),
        when=_str(row["when"]),
        lists=_str(row["lists"]),
        cs=tuple(_context(c) for c in row["cs"]),
        needs=_str(row.get("needs", "")),
        mood=_str(row.get("mood", "up")),
    )


_DATA = _object(json.loads(Path(__file__).with_name("recall_other.json").read_text("utf-8")))

KINDS = tuple(_kind(row) for row in _DATA["kinds"])
BY_KEY = {kind.key: kind for kind in KINDS}

# The chain facts: a sibling moves away early; later the friend visits and does something.
CITIES = _strs(_DATA["cities"])
ACTIVITIES = _strs(_DATA["activities"])
MOVES = _strs(_DATA["moves"])
VISITS = _strs(_DATA["visits"])
ADOPTS = _strs(_DATA["adopts"])
BREEDS = _lists(_DATA["breeds"])
WHEN = _strs(_DATA["when"])

# By topic: "elicit" (asking after it), "follow" (a follow-up question), "detail" (an
# answer to one), "mention" (said of it unprompted, no fact) and "photo" (what is shown).
TOPICS = {topic: _lists(bank) for topic, bank in _object(_DATA["topics"]).items()}
GREETINGS = _strs(_DATA["greetings"])
GREET_BACK = _strs(_DATA["greet_back"])
GREET_ANSWER = _strs(_DATA["greet_answer"])
REACT = _lists(_DATA["react"])  # by mood
FOLLOW_ANY = _strs(_DATA["follow_any"])
RELATE = _strs(_DATA["relate"])
AFTER = _lists(_DATA["after"])  # by mood
COMMENT = _strs(_DATA["comment"])
PHOTO_COMMENT = _strs(_DATA["photo_comment"])
LEAD = _strs(_DATA["lead"])
# A second thought after a small-talk answer, by the CHIT entry it follows.
CHIT_TAILS = tuple(_strs(tails) for tails in _DATA["chit_tails"])
ASIDES = _strs(_DATA["asides"])
ASIDE_LEADS = _strs(_DATA["aside_leads"])
ASK_BACK = _strs(_DATA["ask_back"])
ACK = _strs(_DATA["ack"])
CLOSE = _strs(_DATA["close"])
CLOSE_BACK = _strs(_DATA["close_back"])
# Small talk: the ways of asking a question and how it may be answered.
CHIT = tuple((_strs(chit["asks"]), _strs(chit["answers"])) for chit in map(_object, _DATA["chit"]))
GENERIC_ELICIT = _strs(_DATA["generic_elicit"])
HEADERS = _strs(_DATA["headers"])

NAMES_SHE = _strs(_DATA["names_she"])
NAMES_HE = _strs(_DATA["names_he"])
KIDS = _lists(_DATA["kids"])
PETS = _strs(_DATA["pets"])
SIBS = _lists(_DATA["sibs"])
HOBBIES = _strs(_DATA["hobbies"])
EXTRA = _strs(_DATA["extra"])

NAMES = {
    *NAMES_SHE,
    *NAMES_HE,
    *PETS,
    *(n for names in KIDS.values() for n in names),
    *(n for names in SIBS.values() for n in names),
}

# Words that may start a sentence put after a lead-in ("By the way,") in lower case.
COMMON = frozenset(_strs(_DATA["common"]))
