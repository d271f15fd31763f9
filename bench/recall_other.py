"""`python -m bench.recall_other OUT.jsonl [--count 6] [--seed 0]`: an independent recall test set.

Writes long, dated chats between two friends (the user is one, the assistant
the other), shaped like the public long-term conversational memory benchmarks:
some 20-30 sessions of 15-30 turns each, each session opened by a date header,
the friends telling each other about their lives in passing (jobs, hobbies,
children, pets, trips), reacting, asking follow-ups and sharing photos, the
same topics coming back across sessions with new details. Questions asked at
the end are in the third person with names, in five categories: single-hop (one
fact, paraphrased), multi-hop (facts from two or more sessions), temporal
("When did ...?" about something said to have happened "yesterday" in a dated
session), one moment of a recurring topic, and adversarial (never said, or said
by the other friend; no evidence).

The file is what `bench.recall_eval.load` reads: one conversation a line,
{"messages": [...], "questions": [{"text", "evidence", "answer"}]}, evidence the
indexes of the messages that hold the answer, answer the words that must be in
what was forwarded for the answer to be there (each occurs, as a word, in the
evidence messages and in no other message).

It was written apart from the proxy's recall rules, without reading them, so
that its wording does not follow what recall happens to match: a check that
recall generalises beyond the development set (`bench.recall_set`).
Deterministic for a given seed; standard library only. The word lists and
templates are in recall_other.json (`bench.recall_other_data`), one session's
talk in `bench.recall_other_talk`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .recall_other_data import (
    ACTIVITIES,
    BREEDS,
    BY_KEY,
    CITIES,
    EXTRA,
    HEADERS,
    HOBBIES,
    KIDS,
    KINDS,
    NAMES_HE,
    NAMES_SHE,
    PETS,
    SIBS,
    WHEN,
    Context,
)
from .recall_other_talk import Event, Person, Picker, fill, session_turns, slots


@dataclass
class Question:
    category: str
    text: str
    evidence: list[int]
    answer: list[str]


@dataclass
class Chat:
    messages: list[dict[str, str]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def make_people(rng: random.Random) -> list[Person]:
    shes = rng.sample(NAMES_SHE, 2)
    hes = rng.sample(NAMES_HE, 2)
    pool = [(shes[0], True), (shes[1], True), (hes[0], False), (hes[1], False)]
    a, b = rng.sample(pool, 2)
    hobbies = rng.sample(HOBBIES, 6)
    extras = rng.sample(EXTRA, 4)
    kids = {rel: rng.sample(names, 2) for rel, names in KIDS.items()}
    sibs = {rel: rng.sample(names, 2) for rel, names in SIBS.items()}
    pets = rng.sample(PETS, 2)
    people: list[Person] = []
    for i, (name, she) in enumerate((a, b)):
        topics = [*hobbies[3 * i : 3 * i + 3], "work", *extras[2 * i : 2 * i + 2]]
        person = Person(name, she, topics)
        families = rng.sample(("kid", "pet", "sib"), 2)
        if "kid" in families:
            person.kidrel = rng.choice(("daughter", "son"))
            person.kid = kids[person.kidrel][i]
            person.topics.append("kid")
        if "pet" in families:
            person.species = rng.choice(("dog", "cat"))
            person.pet = pets[i]
            person.topics.append("pet")
        if "sib" in families:
            person.sibrel = rng.choice(("sister", "brother"))
            person.sib = sibs[person.sibrel][i]
            person.topics.append("sib")
        people.append(person)
    return people


def plan(rng: random.Random, people: list[Person], sessions: int) -> list[list[Event]]:
    """The events of each session, each with a detail no other event in the chat shares."""
    used: set[str] = set()
    contexts: dict[tuple[int, str], list[Context]] = {}
    by_session: list[list[Event]] = [[] for _ in range(sessions)]

    def pick(values: Sequence[str]) -> str:
        value = rng.choice([v for v in values if v not in used])
        used.add(value)
        return value

    for who, person in enumerate(people):
        kinds = [k for k in KINDS if k.topic in person.topics]
        # Recurring topics: some kinds come back two or three times, others once.
        todo: list[str] = []
        for k in kinds:
            todo += [k.key] * rng.choice((1, 1, 2, 3))
        rng.shuffle(todo)
        early = rng.randrange(0, 3)
        if person.pet:
            adopt = Event(who, "adopt", pick(BREEDS[person.species]), ("", ""), "", early)
            adopt.when = rng.choice(WHEN)
            by_session[early].append(adopt)
        if person.sib:
            move = rng.randrange(1, sessions // 3)
            visit = rng.randrange(sessions // 2, sessions - 4)
            by_session[move].append(Event(who, "move", pick(CITIES), ("", ""), "", move))
            by_session[visit].append(
                Event(who, "visit", pick(ACTIVITIES), ("", ""), rng.choice(WHEN), visit)
            )
        for key in todo:
            kind = BY_KEY[key]
            free = contexts.setdefault((who, key), list(kind.cs))
            if not free or all(v in used for v in kind.xs):
                continue
            c = free.pop(rng.randrange(len(free)))
            s = rng.randrange(early + 1 if kind.needs == "pet" else 0, sessions)
            by_session[s].append(Event(who, key, pick(kind.xs), c, rng.choice(WHEN), s))
    for events in by_session:
        rng.shuffle(events)
    return by_session


def header_of(rng: random.Random, style: str, day: dt.date) -> str:
    hour = rng.randrange(1, 13)
    minute = rng.randrange(0, 60)
    t = f"{hour}:{minute:02d} {rng.choice(('am', 'pm'))}"
    return style.format(d=day.day, m=day.strftime("%B"), y=day.year, t=t, wd=day.strftime("%A"))


def words_in(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z']+", text)}


def questions(
    rng: random.Random, people: list[Person], events: list[Event], sessions: int, late: int
) -> list[Question]:
    """About a dozen questions on the events told before the last `late` sessions."""
    out: list[Question] = []
    early = [e for e in events if e.session < sessions - late]
    counts = Counter((e.who, e.key) for e in events)
    taken: set[int] = set()

    def free(pool: list[Event]) -> list[Event]:
        return [e for e in pool if id(e) not in taken]

    def ask(person: Person, template: str, ev: Event | None = None) -> str:
        return fill(template, **slots(person, people[1 - people.index(person)], ev))

    plain = [e for e in early if e.key in BY_KEY]
    # Multi-hop: a sibling's move and the later visit; every time a recurring kind came up.
    for who, person in enumerate(people):
        move = [e for e in events if e.who == who and e.key == "move"]
        visit = [e for e in early if e.who == who and e.key == "visit"]
        if move and visit:
            text = (
                f"Which city did {person.name}'s {person.sibrel} move to, and what did they do "
                f"together when {person.name} went to visit?"
            )
            out.append(
                Question(
                    "multi-hop", text, [move[0].index, visit[0].index], [move[0].x, visit[0].x]
                )
            )
            taken.update({id(move[0]), id(visit[0])})
    recurring = [
        (who, key)
        for (who, key), n in sorted(counts.items())
        if key in BY_KEY
        and n >= 2
        and all(e.session < sessions - late for e in events if (e.who, e.key) == (who, key))
    ]
    rng.shuffle(recurring)
    for who, key in recurring[: max(1, 3 - len(out))]:
        group = [e for e in events if (e.who, e.key) == (who, key)]
        text = ask(people[who], BY_KEY[key].lists)
        out.append(
            Question("multi-hop", text, sorted(e.index for e in group), [e.x for e in group])
        )
        taken.update(id(e) for e in group)
    # One moment of a recurring topic, told apart by its circumstances.
    moments = free([e for e in plain if counts[(e.who, e.key)] >= 2])
    rng.shuffle(moments)
    for ev in moments[:3]:
        text = ask(people[ev.who], rng.choice(BY_KEY[ev.key].asks), ev)
        out.append(Question("recurring", text, [ev.index], [ev.x]))
        taken.add(id(ev))
    # Single-hop: a kind told once, asked in other words.
    singles = free([e for e in plain if counts[(e.who, e.key)] == 1])
    rng.shuffle(singles)
    for ev in singles[:3]:
        text = ask(people[ev.who], rng.choice(BY_KEY[ev.key].asks), ev)
        out.append(Question("single-hop", text, [ev.index], [ev.x]))
        taken.add(id(ev))
    # Temporal: when something said to have happened "yesterday" (and so on) happened.
    timed = free(plain)
    rng.shuffle(timed)
    for ev in timed[:3]:
        out.append(
            Question("temporal", ask(people[ev.who], BY_KEY[ev.key].when, ev), [ev.index], [ev.x])
        )
        taken.add(id(ev))
    # Adversarial: the other friend's fact asked of this one, or a kind neither mentioned.
    swapped = [
        e
        for e in plain
        if counts[(e.who, e.key)] == 1
        and counts[(1 - e.who, e.key)] == 0
        and (not BY_KEY[e.key].needs or getattr(people[1 - e.who], BY_KEY[e.key].needs))
    ]
    rng.shuffle(swapped)
    for ev in swapped[:1]:
        out.append(
            Question(
                "adversarial", ask(people[1 - ev.who], rng.choice(BY_KEY[ev.key].asks), ev), [], []
            )
        )
    told = {e.key for e in events}
    never = [k for k in KINDS if k.key not in told and not k.needs]
    rng.shuffle(never)
    for kind in never[: 3 - min(1, len(swapped))]:
        ev = Event(0, kind.key, rng.choice(kind.xs), rng.choice(kind.cs), "", 0)
        out.append(
            Question("adversarial", ask(rng.choice(people), rng.choice(kind.asks), ev), [], [])
        )
    return out


def conversation(rng: random.Random) -> Chat:
    pick = Picker(rng)
    people = make_people(rng)
    sessions = rng.randrange(24, 31)
    plan_ = plan(rng, people, sessions)
    style = rng.choice(HEADERS)
    day = dt.date(2022, 1, 1) + dt.timedelta(days=rng.randrange(0, 540))
    chat = Chat()
    events: list[Event] = []
    known = {(who, t) for who, p in enumerate(people) for t in p.topics if t != "pet"}
    for s in range(sessions):
        day += dt.timedelta(days=rng.randrange(2, 21))
        header = header_of(rng, style, day)
        target = rng.randrange(12, 25)
        for text, ev in session_turns(pick, header, people, plan_[s], target, known):
            if ev is not None:
                ev.index = len(chat.messages)
                events.append(ev)
            role = "user" if len(chat.messages) % 2 == 0 else "assistant"
            chat.messages.append({"role": role, "content": text})
    # Keep the questions whose answer words are in their evidence and in no other message.
    words = [words_in(m["content"]) for m in chat.messages]
    lowered = [m["content"].lower() for m in chat.messages]
    for q in questions(rng, people, events, sessions, late=4):
        ok = all(
            any(a.lower() in words[i] for i in q.evidence)
            and not any(a.lower() in lowered[i] for i in range(len(lowered)) if i not in q.evidence)
            for a in q.answer
        )
        if ok:
            chat.questions.append(q)
    return chat


def chats(count: int = 6, seed: int = 0) -> list[Chat]:
    """`count` conversations, the same for the same `seed`."""
    rng = random.Random(seed)
    return [conversation(rng) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_other", description=__doc__)
    parser.add_argument("out", help="where to write the conversations, one JSON a line")
    parser.add_argument("--count", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tally: Counter[str] = Counter()
    with open(args.out, "w", encoding="utf-8") as fh:
        for chat in chats(args.count, args.seed):
            tally.update(q.category for q in chat.questions)
            row: dict[str, Any] = {
                "messages": chat.messages,
                "questions": [
                    {"text": q.text, "evidence": q.evidence, "answer": q.answer}
                    for q in chat.questions
                ],
            }
            fh.write(json.dumps(row) + "\n")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
    print(f"{args.count} conversations; questions: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
