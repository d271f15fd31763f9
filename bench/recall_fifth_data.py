"""The fifth set's words: its people, its facts (`recall_fifth_facts.json`) and its small
talk (`recall_fifth_talk.json`).

A thread is a fact one friend (the teller, `T`) tells the other (`O`), in one
part or in several parts sessions apart (a plan, then what became of it).
Each part is a little exchange whose lines alternate teller and other, teller
first; a line starting with `*` holds the answer. Slots: `{S}`/`{O}` the
teller's and the other's names; `{sib}`, `{sibrel}`, `{they}`, `{them}`,
`{their}`, `{cw}`, `{partner}`, `{pet}`, `{petkind}` the teller's sibling,
coworker, partner and pet; `{rel}` a relative day ("last night"); `{date}` the
day of the sitting, as its header writes it. A value slot `{x}` takes one of
its options, `a|b|c` giving `{x}`, `{x2}`, `{x3}`. Unanswerable questions come
with the words an answer would need, which nothing says.

A small-talk episode's lines alternate between whoever starts it (`X`) and the
other (`Y`), with `{x}`/`{y}`, `{xpet}`, `{xsib}`, `{xcw}`, `{xpartner}` (and
the same for `y`), `{food}`, `{show}`, `{day}`, `{place}`. None of the small
talk states a fact any question asks about.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Thread:
    kind: str  # single, multi, temporal, inference, adversarial, update
    question: str
    answer: tuple[str, ...]
    parts: tuple[tuple[str, ...], ...]
    values: dict[str, tuple[str, ...]]


def _load(name: str) -> dict[str, Any]:
    with open(HERE / name, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


_FACTS = _load("recall_fifth_facts.json")
_TALK = _load("recall_fifth_talk.json")

THREADS = tuple(
    Thread(
        t["kind"],
        t["question"],
        tuple(t["answer"]),
        tuple(tuple(part) for part in t["parts"]),
        {key: tuple(options) for key, options in t["values"].items()},
    )
    for t in _FACTS["threads"]
)
RELATIVE: tuple[str, ...] = tuple(_FACTS["relative"])
UNANSWERABLE: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (text, tuple(words)) for text, words in _FACTS["unanswerable"]
)


def talk(key: str) -> tuple[str, ...]:
    """One list of the small talk (`openers`, `closers`, `doings`, ...)."""
    return tuple(_TALK[key])


EPISODES: tuple[tuple[str, ...], ...] = tuple(tuple(e) for e in _TALK["episodes"])
FOODS, SHOWS, DAYS, PLACES = talk("foods"), talk("shows"), talk("days"), talk("places")
OPENERS, REPLIES, PROMPTS = talk("openers"), talk("replies"), talk("prompts")
CLOSERS, SHORT, FEELINGS = talk("closers"), talk("short"), talk("feelings")
# The parts of a made-up sentence about one's day: a doing, when, what came with it, a verdict.
RAMBLE, DOINGS, WHENS = talk("ramble"), talk("doings"), talk("whens")
VERDICTS, OTHERS_DID, AFTERS = talk("verdicts"), talk("others_did"), talk("afters")

NAMES = (
    "Evan",
    "Priya",
    "Marta",
    "Jonah",
    "Keisha",
    "Tomás",
    "Aoife",
    "Ravi",
    "Hannah",
    "Dami",
    "Lucy",
    "Mateo",
    "Yusuf",
    "Greta",
    "Callum",
    "Zara",
    "Niamh",
    "Kofi",
)
SIBLINGS = (
    "Dana|sister",
    "Imogen|sister",
    "Bea|sister",
    "Kit|brother",
    "Leo|brother",
    "Rory|brother",
    "Saffy|sister",
    "Max|brother",
    "Ottilie|sister",
    "Jas|brother",
)
COWORKERS = ("Gareth", "Funmi", "Declan", "Mei", "Phil", "Beatriz", "Sanjay", "Colette")
PARTNERS = ("Sam", "Alex", "Jordan", "Robin", "Charlie", "Frankie", "Ash", "Jules")
PETS = (
    "Bruno|dog",
    "Poppy|dog",
    "Mabel|cat",
    "Ziggy|cat",
    "Hazel|dog",
    "Luna|cat",
    "Pip|dog",
    "Tilly|cat",
)
