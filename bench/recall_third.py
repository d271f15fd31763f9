"""`python -m bench.recall_third OUT.jsonl [--seed N] [--count N]`: a third recall set,
written without reading how recall ranks, in the style of generated-persona chats.

Two people talk over 25 dated sessions (the date in each session's first
message, in one of several styles) of warm small talk, photos described in
text and news about other people. Each person lives six threads drawn from
`recall_third_topics.json` (a pet, a move, a new job, a relative's wedding, a
course...): two or three events each, said in the first person in different
sessions, each coming back with new details. The questions, asked in the third
person, are of the held-out benchmark's kinds: single-hop, multi-hop (events of
one thread from different sessions), temporal (the answer is the session's date
or relative to it), open-domain inference, and adversarial (a thread of the
other person's asked about this one, or a topic nobody brought up: evidence
empty). One JSON a line, as `Conversation.as_json` writes it, plus each
question's `kind`. Answer words keep the case they are written in (the
evaluator matches them as written). Every chat passes `self_check` before it
is written.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from .recall_third_check import KINDS, ROLES, AnnotationError, Chat, Question, said, self_check

__all__ = [
    "KINDS",
    "PEOPLE",
    "AnnotationError",
    "Chat",
    "Question",
    "chat",
    "chats",
    "main",
    "self_check",
]

_HERE = Path(__file__).parent
TOPICS: list[dict[str, Any]] = json.loads(
    (_HERE / "recall_third_topics.json").read_text(encoding="utf-8")
)
TALK: dict[str, list[str]] = json.loads(
    (_HERE / "recall_third_talk.json").read_text(encoding="utf-8")
)

SESSIONS = 25
THREADS_EACH = 6
# Questions per chat and kind; adversarial ones split into never said and said by the other.
QUOTA = {"single-hop": 4, "multi-hop": 3, "temporal": 3, "open-domain": 2}
NEVER_SAID, SAID_BY_OTHER = 2, 1

PEOPLE = (
    ("Evan", "he", "his"),
    ("Maria", "she", "her"),
    ("Jolene", "she", "her"),
    ("Deshawn", "he", "his"),
    ("Audrey", "she", "her"),
    ("Calvin", "he", "his"),
    ("Priyanka", "she", "her"),
    ("Tomás", "he", "his"),
    ("Gina", "she", "her"),
    ("Nate", "he", "his"),
    ("Hannah", "she", "her"),
    ("Kenji", "he", "his"),
    ("Rosalind", "she", "her"),
    ("Owen", "he", "his"),
)
# How people place an event in time, relative to the day they talk.
WHEN = (
    "yesterday",
    "last weekend",
    "last week",
    "a couple of days ago",
    "earlier today",
    "last Friday",
    "two weeks ago",
    "this morning",
)
MONTHS = (
    *("January", "February", "March", "April", "May", "June"),
    *("July", "August", "September", "October", "November", "December"),
)
RECENT = 40  # small-talk sentences not said again until this many others were
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass
class Thread:
    """One person's life thread: a topic, its details, and when each event is said."""

    topic: dict[str, Any]
    details: dict[str, str]
    owner: int
    sessions: list[int]
    said: dict[int, int] = field(default_factory=dict)  # event -> message index
    cue: dict[int, str] = field(default_factory=dict)  # event -> its time phrase


def _fields(people: tuple[tuple[str, str, str], ...], who: int) -> dict[str, str]:
    name, he, his = people[who]
    return {"P": name, "O": people[1 - who][0], "he": he, "his": his}


def _dated(greeting: str, day: date, style: int, rng: random.Random) -> tuple[str, str]:
    """The session's first message with its date, and the date as written there."""
    month = MONTHS[day.month - 1]
    if style == 0:
        written = f"{day.day} {month} {day.year}"
        return f"({written}) {greeting}", written
    if style == 1:
        written = f"{month} {day.day}, {day.year}"
        return f"{greeting} [{written}]", written
    if style == 2:
        written = f"{day.day} {month}, {day.year}"
        clock = f"{rng.randint(1, 12)}:{rng.randrange(60):02d} {rng.choice(('am', 'pm'))}"
        return f"({clock} on {written}) {greeting}", written
    written = f"{day.day} {month} {day.year}"
    return f"{WEEKDAYS[day.weekday()]}, {written}. {greeting}", written


def _filler(rng: random.Random, before: str, recent: deque[str]) -> str:
    """A small-talk message: reactions, updates, musings, questions, a photo, others' news,
    none of them said in the last few dozen sentences (people do not repeat themselves)."""

    def pick(pool: list[str]) -> str:
        fresh = [s for s in pool if s not in recent]
        chosen = rng.choice(fresh or pool)
        recent.append(chosen)
        return chosen

    if "[shares a photo" in before:
        return " ".join([pick(TALK["photo_reply"]), pick(TALK["update"] + TALK["ask"])])
    shapes = (
        ("react", "update", "ask"),
        ("react", "update", "muse"),
        ("update", "update", "ask"),
        ("react", "muse", "update", "ask"),
        ("react", "photo"),
        ("distract", "muse", "ask"),
        ("react", "update", "update"),
        ("update", "muse", "ask"),
        ("react", "distract", "update"),
        ("react", "update", "muse", "ask"),
        ("distract", "update", "ask"),
    )
    return " ".join(pick(TALK[part]) for part in rng.choice(shapes))


def _positions(
    rng: random.Random, length: int, events: list[tuple[Thread, int]]
) -> dict[int, tuple[Thread, int, bool]]:
    """Where each event of a session is said (its owner's turn), and whether it is asked
    about first; the turn after it is the other person's reply."""
    free = set(range(2, length - 2))
    placed: dict[int, tuple[Thread, int, bool]] = {}
    for thread, event in events:
        fits = sorted(p for p in free if p % 2 == thread.owner and p + 1 in free)
        if not fits:
            raise RuntimeError("a session too short for its events")
        at = rng.choice(fits)
        asks = bool(thread.topic["events"][event]["ask"]) and at - 1 in free
        asked = asks and rng.random() < 0.7
        free -= {at, at + 1, at - 1} if asked else {at, at + 1}
        placed[at] = (thread, event, asked)
    return placed


def _session(
    rng: random.Random,
    people: tuple[tuple[str, str, str], ...],
    events: list[tuple[Thread, int]],
    opening: str,
    start: int,
    recent: deque[str],
) -> list[str]:
    length = rng.choice((20, 22, 24, 26, 28))
    placed = _positions(rng, length, events)
    texts: list[str] = [""] * length
    texts[0] = opening
    texts[1] = " ".join(
        [rng.choice(TALK["greet_back"]).format(O=people[0][0]), rng.choice(TALK["update"])]
    )
    texts[-2], texts[-1] = rng.choice(TALK["close"]), rng.choice(TALK["close_reply"])
    for at, (thread, event, asked) in placed.items():
        spec = thread.topic["events"][event]
        cue = rng.choice(WHEN)
        slots = {**thread.details, **_fields(people, thread.owner), "when": cue}
        statement = rng.choice(spec["say"]).format_map(slots)
        if asked:
            texts[at - 1] = " ".join(
                [rng.choice(TALK["react"]), rng.choice(spec["ask"]).format_map(slots)]
            )
        elif rng.random() < 0.4:  # said in passing, after answering what came before
            statement = f"{rng.choice(TALK['react'])} {statement}"
        if rng.random() < 0.35:
            statement = f"{statement} {rng.choice(TALK['muse'])}"
        texts[at] = statement
        reply = rng.choice(spec["reply"]).format_map(slots)
        if rng.random() < 0.6:
            reply = f"{reply} {rng.choice(TALK[rng.choice(('ask', 'muse', 'update'))])}"
        texts[at + 1] = reply
        thread.said[event], thread.cue[event] = start + at, cue
    for i, text in enumerate(texts):
        if not text:
            texts[i] = _filler(rng, texts[i - 1], recent)
    return texts


def chat(seed: int) -> Chat:
    """One conversation of `SESSIONS` dated sessions, with its questions."""
    rng = random.Random(seed)
    people = tuple(rng.sample(PEOPLE, 2))
    topics = rng.sample(TOPICS, 2 * THREADS_EACH)
    threads = [
        Thread(
            topic,
            dict(rng.choice(topic["choices"])),
            n // THREADS_EACH,
            sorted(rng.sample(range(SESSIONS), len(topic["events"]))),
        )
        for n, topic in enumerate(topics)
    ]
    style = rng.randrange(4)
    day = date(2022 + rng.randrange(2), 1 + rng.randrange(12), 1 + rng.randrange(28))
    messages: list[dict[str, str]] = []
    firsts: list[int] = []
    dates: list[str] = []
    recent: deque[str] = deque(maxlen=RECENT)
    for s in range(SESSIONS):
        day += timedelta(days=rng.randint(4, 19)) if s else timedelta()
        greeting = rng.choice(TALK["greet"]).format(O=people[1][0])
        if rng.random() < 0.5:
            greeting = f"{greeting} {rng.choice(TALK['update'])}"
        opening, written = _dated(greeting, day, style, rng)
        events = [(t, e) for t in threads for e, at in enumerate(t.sessions) if at == s]
        rng.shuffle(events)
        firsts.append(len(messages))
        dates.append(written)
        for i, text in enumerate(_session(rng, people, events, opening, len(messages), recent)):
            messages.append({"role": ROLES[i % 2], "content": text})
    out = Chat(messages, {ROLES[0]: people[0][0], ROLES[1]: people[1][0]}, firsts, dates)
    unused = [t for t in TOPICS if t not in topics]
    out.questions = _questions(rng, _candidates(rng, out, people, threads, unused))
    return out


def _holds(q: Question, messages: list[dict[str, str]]) -> bool:
    """Whether the statement a candidate rests on says its answer (the variant said
    may leave a detail out)."""
    if not q.evidence:
        return not any(said(m["content"], w) for m in messages for w in q.forbid)
    texts = [messages[i]["content"] for i in q.evidence]
    return all(any(w in t for t in texts) for w in q.answer) and all(
        any(w in t for w in q.answer) for t in texts
    )


def _candidates(
    rng: random.Random,
    out: Chat,
    people: tuple[tuple[str, str, str], ...],
    threads: list[Thread],
    unused: list[dict[str, Any]],
) -> dict[str, list[Question]]:
    pool: dict[str, list[Question]] = {kind: [] for kind in (*KINDS, "never")}

    def add(kind: str, spec: dict[str, Any], thread: Thread, evidence: list[int], who: int) -> None:
        slots = {**thread.details, **_fields(people, who)}
        texts = [t for t in spec["q"] if who == thread.owner or "{P}" in t]
        answer = [a.format_map(slots) for a in spec.get("a", ())]
        if kind == "temporal":
            session = thread.sessions[spec["e"]]
            answer = [thread.cue[spec["e"]], out.dates[session]]
            evidence = sorted({out.firsts[session], *evidence})
        if texts:
            text = rng.choice(texts).format_map(slots)
            topic = thread.topic["id"]
            pool[kind].append(Question(text, sorted(evidence), answer, kind, ROLES[who], topic))

    for thread in threads:
        other = 1 - thread.owner
        for spec in thread.topic["single"]:
            add("single-hop", spec, thread, [thread.said[spec["e"]]], thread.owner)
            add("adversarial", spec, thread, [thread.said[spec["e"]]], other)
        for kind, key in (("multi-hop", "multi"), ("open-domain", "open")):
            for spec in thread.topic[key]:
                add(kind, spec, thread, [thread.said[e] for e in spec["e"]], thread.owner)
        for spec in thread.topic["temporal"]:
            add("temporal", spec, thread, [thread.said[spec["e"]]], thread.owner)
    for topic in unused:
        for who in (0, 1):
            text = rng.choice(topic["absent"]).format_map(_fields(people, who))
            forbid = tuple(topic["forbid"])
            pool["never"].append(
                Question(text, [], [], "adversarial", ROLES[who], topic["id"], forbid)
            )
    return {kind: [q for q in qs if _holds(q, out.messages)] for kind, qs in pool.items()}


def _questions(rng: random.Random, pool: dict[str, list[Question]]) -> list[Question]:
    """The chat's questions from its candidates: each kind's quota, spread over topics
    and both people."""
    quota = {**QUOTA, "adversarial": SAID_BY_OTHER, "never": NEVER_SAID}
    topics: Counter[str] = Counter()
    about: Counter[str] = Counter()
    chosen: list[Question] = []
    for kind, count in quota.items():
        left = list(pool[kind])
        rng.shuffle(left)
        for _ in range(min(count, len(left))):
            best = min(left, key=lambda q: (topics[q.topic], about[q.about]))
            left.remove(best)
            topics[best.topic] += 1
            about[best.about] += 1
            chosen.append(best)
    rng.shuffle(chosen)
    return chosen


def chats(count: int = 6, seed: int = 0) -> list[Chat]:
    """`count` chats from `seed`, each checked by `self_check`."""
    made = [chat(seed * 1000 + n) for n in range(count)]
    for one in made:
        self_check(one)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_third", description=__doc__)
    parser.add_argument("out", help="where to write the conversations, one JSON a line")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=6)
    args = parser.parse_args(argv)
    with open(args.out, "w", encoding="utf-8") as fh:
        for one in chats(args.count, args.seed):
            fh.write(json.dumps(one.as_json(), ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
