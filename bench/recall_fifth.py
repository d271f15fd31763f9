"""The fifth recall set, written blind to the recall rules: two friends texting over months.

`python -m bench.recall_fifth OUT.jsonl [--seed N] [--count N]` writes one
conversation a line, as `Conversation.as_json` does. Each conversation is two
people (the first sends the `user` messages, the second the `assistant` ones)
chatting over 20 to 24 dated sessions: small talk, photos described in
brackets, plans that move, facts about themselves and their siblings, partners,
coworkers and pets, some told over two or three turns, some changed later.
Each person has a voice (lowercase or not, emoji, typos). Questions are asked
in the third person: single-hop, multi-hop (two turns), temporal (the answer
is the sitting's date as its header writes it, with the relative word the
statement used), inference, adversarial (a false premise), updated facts (the
latest holds), and two nothing answers (their `answer` holds the words an
answer would need, said nowhere). `check` proves every annotation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from . import recall_fifth_data as data
from .recall_fifth_data import Thread
from .recall_set import Conversation, Question

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")  # fmt: skip
# How each header style writes a date; the second is its own message, the others open one.
DATE_STYLES = ("{wd} {d} {month} {y}", "— {dd}/{mm}/{y} —", "[{month} {d}, {y}, {hm}]")
DATED = re.compile(r"^(\w{3} \d{1,2} \w+ \d{4}|— \d\d/\d\d/\d{4} —|\[\w+ \d{1,2}, \d{4},)")
PER_KIND = {"temporal": 3, "multi": 3, "update": 2, "inference": 3, "adversarial": 2, "single": 2}


@dataclass
class Person:
    name: str
    sib: str
    sister: bool
    cw: str
    partner: str
    pet: str
    petkind: str
    lower: bool  # writes in lowercase, no capitals
    emoji: tuple[str, ...]
    typos: float  # the share of lines with a slip of the thumb

    def slots(self, prefix: str) -> dict[str, str]:
        return {
            f"{prefix}pet": self.pet,
            f"{prefix}sib": self.sib,
            f"{prefix}cw": self.cw,
            f"{prefix}partner": self.partner,
        }


@dataclass
class Told:
    """A thread as one conversation tells it: teller, values, sessions, and evidence once said."""

    thread: Thread
    teller: int  # 0 speaks as user, 1 as assistant
    slots: dict[str, str]
    sessions: list[int]
    evidence: list[int]
    dated: int = -1  # the message holding the date of the first evidence's sitting


def fifth_chats(count: int = 6, seed: int = 0) -> list[Conversation]:
    """`count` conversations, the same ones for the same seed."""
    return [_chat(number, seed) for number in range(count)]


def _cast(rng: random.Random) -> tuple[Person, Person]:
    names = rng.sample(data.NAMES, 2)
    sibs, cws, partners, pets = (
        rng.sample(pool, 2) for pool in (data.SIBLINGS, data.COWORKERS, data.PARTNERS, data.PETS)
    )
    emoji = (("😂", "🥲", "💀"), ("😊", "x", "💛", "!!"))
    people = []
    for i in range(2):
        pet, kind = pets[i].split("|")
        sib, relation = sibs[i].split("|")
        people.append(
            Person(
                names[i],
                sib,
                relation == "sister",
                cws[i],
                partners[i],
                pet,
                kind,
                lower=(i == 0) == (rng.random() < 0.7),  # the first one, more often
                emoji=emoji[rng.randrange(2)],
                typos=rng.choice((0.0, 0.05, 0.12)),
            )
        )
    return people[0], people[1]


def _pick(rng: random.Random) -> list[Thread]:
    chosen: list[Thread] = []
    for kind, n in PER_KIND.items():
        chosen += rng.sample([t for t in data.THREADS if t.kind == kind], n)
    return chosen


def _slots(thread: Thread, teller: Person, other: Person, rng: random.Random) -> dict[str, str]:
    they, them, their = ("she", "her", "her") if teller.sister else ("he", "him", "his")
    slots = {
        "S": teller.name,
        "O": other.name,
        "sib": teller.sib,
        "cw": teller.cw,
        "sibrel": "sister" if teller.sister else "brother",
        "they": they,
        "them": them,
        "their": their,
        "partner": teller.partner,
        "pet": teller.pet,
        "petkind": teller.petkind,
        "rel": rng.choice(data.RELATIVE),
    }
    for key, options in thread.values.items():
        for i, value in enumerate(rng.choice(options).split("|")):
            slots[key + (str(i + 1) if i else "")] = value
    return slots


def _fill(text: str, slots: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: slots.get(m.group(1), m.group(0)), text)


def _date(style: int, day: dt.datetime) -> str:
    return DATE_STYLES[style].format(
        wd=day.strftime("%a"),
        d=day.day,
        month=MONTHS[day.month - 1],
        y=day.year,
        dd=f"{day.day:02}",
        mm=f"{day.month:02}",
        hm=day.strftime("%I:%M %p").lstrip("0"),
    )


def _answer_date(style: int, day: dt.datetime) -> str:
    """The words of a header that name the day, as the header writes them."""
    if style == 1:
        return f"{day.day:02}/{day.month:02}/{day.year}"
    if style == 2:
        return f"{MONTHS[day.month - 1]} {day.day}, {day.year}"
    # The weekday too: "5 May 2022" is part of "15 May 2022", and the eval matches text.
    return f"{day.strftime('%a')} {day.day} {MONTHS[day.month - 1]} {day.year}"


class Writer:
    """Lays the lines down in turn, user and assistant alternating, in each person's voice."""

    def __init__(self, people: tuple[Person, Person], rng: random.Random) -> None:
        self.people, self.rng = people, rng
        self.messages: list[dict[str, str]] = []

    @property
    def next(self) -> int:
        return len(self.messages) % 2

    def say(self, text: str, plain: bool = False, slips: bool = True) -> int:
        """Says `text` as whoever's turn it is; `plain` as written, without `slips` no typo."""
        person = self.people[self.next]
        if not plain:
            text = self._voice(text, person, slips)
        self.messages.append({"role": ("user", "assistant")[self.next], "content": text})
        return len(self.messages) - 1

    def more(self, text: str, person: Person, first: bool) -> str:
        """`text` with a sentence or three about one's day: before a topic, or after it."""
        more = " ".join(self.sentence(person) for _ in range(self.rng.choice((1, 2, 2, 3))))
        return f"{more} Anyway. {text}" if first else f"{_stop(text)} {more}"

    def sentence(self, person: Person) -> str:
        rng = self.rng
        if rng.random() < 0.15:
            who = rng.choice(
                (
                    person.partner,
                    person.sib,
                    person.cw,
                    f"my {('brother', 'sister')[person.sister]}",
                )
            )
            return f"{who[0].upper()}{who[1:]} {rng.choice(data.OTHERS_DID)}."
        if rng.random() < 0.2:
            return rng.choice(data.RAMBLE)
        doing, when, verdict = (
            rng.choice(data.DOINGS),
            rng.choice(data.WHENS),
            rng.choice(data.VERDICTS),
        )
        verdict = f"{verdict[0].upper()}{verdict[1:]}." if rng.random() < 0.6 else ""
        early = rng.random() < 0.5  # "At lunch I ..." or "I ... at lunch"
        doing = f"{when[0].upper()}{when[1:]} {doing}" if early else f"{doing} {when}"
        if rng.random() < 0.6:
            doing += " " + rng.choice(data.AFTERS)
        return f"{doing}. {verdict}".strip()

    def _voice(self, text: str, person: Person, slips: bool) -> str:
        rng = self.rng
        if slips and rng.random() < person.typos:
            words = text.split(" ")
            long = [i for i, w in enumerate(words) if len(w) > 4 and w.isalpha()]
            if long:
                i = rng.choice(long)
                w = words[i]
                j = rng.randrange(1, len(w) - 2)
                words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
                text = " ".join(words)
        if person.lower:
            text = text.lower()
        elif text[:1].isalpha():
            text = text[0].upper() + text[1:]
        if rng.random() < 0.12 and not text.endswith(tuple(person.emoji)):
            text += " " + rng.choice(person.emoji)
        return text


def _chat(number: int, seed: int) -> Conversation:
    rng = random.Random(f"fifth/{seed}/{number}")
    people = _cast(rng)
    style = (number + seed) % len(DATE_STYLES)
    sittings = rng.randint(20, 24)
    day = dt.datetime(rng.choice((2022, 2023, 2024)), rng.randint(1, 12), rng.randint(1, 28))
    days = []
    for _ in range(sittings):
        days.append(day.replace(hour=rng.randint(7, 22), minute=rng.randrange(60)))
        day += dt.timedelta(days=rng.choice((1, 2, 3, 4, 6, 9, 13, 20)))
    told = []
    for thread in _pick(rng):
        teller = rng.randrange(2)
        slots = _slots(thread, people[teller], people[1 - teller], rng)
        at = sorted(rng.sample(range(sittings - 3), len(thread.parts)))
        told.append(Told(thread, teller, slots, at, []))
    writer = Writer(people, rng)
    episodes: list[tuple[str, ...]] = []
    for sitting in range(sittings):
        _sitting(writer, sitting, style, days[sitting], told, episodes)
    questions = [_question(t, writer.messages) for t in told]
    for text, words in rng.sample(data.UNANSWERABLE, 2):
        who = people[rng.randrange(2)]
        slots = {"S": who.name, "sibrel": "sister" if who.sister else "brother"}
        questions.append(Question(_fill(text, slots), [], words))
    rng.shuffle(questions)
    return Conversation(writer.messages, questions)


def _sitting(
    writer: Writer,
    sitting: int,
    style: int,
    day: dt.datetime,
    told: list[Told],
    episodes: list[tuple[str, ...]],
) -> None:
    rng = writer.rng
    stamp = _date(style, day)
    if style == 1:
        dated = writer.say(stamp, plain=True)
        writer.say(rng.choice(data.OPENERS))
    else:
        opener = rng.choice(data.OPENERS)
        dated = writer.say(opener)
        writer.messages[dated]["content"] = (
            f"{stamp}\n{writer.messages[dated]['content']}"
            if style == 0
            else f"{stamp} {writer.messages[dated]['content']}"
        )
    writer.say(rng.choice(data.REPLIES))
    items: list[tuple[Told, int] | None] = [
        (t, t.sessions.index(sitting)) for t in told if sitting in t.sessions
    ]
    items += [None] * rng.randint(4, 7)
    rng.shuffle(items)
    for item in items:
        if item is None:
            _small_talk(writer, episodes)
            continue
        thread, part = item
        if writer.next != thread.teller:
            writer.say(rng.choice(data.PROMPTS))
        for line in thread.thread.parts[part]:
            if line.startswith("*"):
                at = writer.say(_fill(line[1:], thread.slots), slips=False)
                thread.evidence.append(at)
                thread.dated = thread.dated if thread.dated >= 0 else dated
                thread.slots["date"] = _answer_date(style, day)
            elif rng.random() < 0.25:
                person = writer.people[writer.next]
                writer.say(writer.more(_fill(line, thread.slots), person, first=False))
            else:
                writer.say(_fill(line, thread.slots))
        if rng.random() < 0.4:
            writer.say(rng.choice(data.SHORT))
    for closer in rng.sample(data.CLOSERS, 2 - writer.next):
        writer.say(closer)


def _stop(text: str) -> str:
    """`text` ended as a sentence, so another can follow it."""
    return text if not text[-1:].isalnum() else f"{text}."


def _small_talk(writer: Writer, episodes: list[tuple[str, ...]]) -> None:
    rng = writer.rng
    x, y = writer.people[writer.next], writer.people[1 - writer.next]
    if rng.random() < 0.65:  # a catch-up: a paragraph about one's days, and one back
        told = " ".join(writer.sentence(x) for _ in range(rng.randint(3, 8)))
        writer.say(f"{told} {rng.choice(data.FEELINGS)}")
        back = " ".join(writer.sentence(y) for _ in range(rng.randint(1, 6)))
        writer.say(f"{_stop(rng.choice(data.SHORT))} {back}".strip())
        if rng.random() < 0.5:
            writer.say(rng.choice(data.SHORT))
        return
    if not episodes:
        episodes.extend(rng.sample(data.EPISODES, len(data.EPISODES)))
    slots = {
        "x": x.name,
        "y": y.name,
        **x.slots("x"),
        **y.slots("y"),
        "food": rng.choice(data.FOODS),
        "show": rng.choice(data.SHOWS),
        "day": rng.choice(data.DAYS),
        "place": rng.choice(data.PLACES),
    }
    lines = [_fill(line, slots) for line in episodes.pop()]
    for i, line in enumerate(lines):
        person = writer.people[writer.next]
        if (i == 0 and rng.random() < 0.8) or (i == len(lines) - 1 and rng.random() < 0.6):
            line = writer.more(line, person, first=i == 0)
        writer.say(line)


def _question(told: Told, messages: list[dict[str, str]]) -> Question:
    held = " ".join(messages[i]["content"] for i in told.evidence)
    if told.thread.kind == "temporal":
        held += " " + messages[told.dated]["content"]
    answer = tuple(_as_written(_fill(word, told.slots), held) for word in told.thread.answer)
    return Question(_fill(told.thread.question, told.slots), sorted(told.evidence), answer)


def _as_written(word: str, text: str) -> str:
    """The answer word in the casing the evidence gives it (a voice may have lowered it)."""
    found = re.search(re.escape(word), text, re.IGNORECASE)
    return found.group() if found else word


def _dated(messages: Sequence[dict[str, str]], at: int) -> str:
    """The dated message of the sitting that holds message `at`."""
    for i in range(at, -1, -1):
        if DATED.match(messages[i]["content"]):
            return messages[i]["content"]
    return ""


def check(conversations: Sequence[Conversation]) -> list[str]:
    """Every annotation that does not hold, as a sentence (none: the set is sound)."""
    problems = []
    for n, convo in enumerate(conversations):
        said = convo.messages
        roles = [m["role"] for m in said]
        if roles != ["user", "assistant"] * (len(said) // 2):
            problems.append(f"{n}: roles do not alternate user, assistant")
        everything = " ".join(m["content"] for m in said)
        for q in convo.questions:
            where = f"{n}: {q.text!r}"
            if not q.evidence:
                for word in q.answer:
                    if re.search(rf"\b{re.escape(word)}\b", everything, re.IGNORECASE):
                        problems.append(f"{where}: nothing should answer it, yet {word!r} is said")
                continue
            if any(not 0 <= i < len(said) for i in q.evidence):
                problems.append(f"{where}: evidence {q.evidence} out of range")
                continue
            held = " ".join(said[i]["content"] for i in q.evidence)
            sitting = _dated(said, q.evidence[0])
            for word in q.answer:
                if word not in held and not (word in sitting and DATED.match(sitting)):
                    problems.append(f"{where}: answer word {word!r} not in its evidence")
            if not q.answer:
                problems.append(f"{where}: no answer words")
            # Outside the exchange that tells it (a reply may echo it), nothing holds the answer.
            elsewhere = [
                i
                for i, m in enumerate(said)
                if min(abs(i - e) for e in q.evidence) > 3
                and all(word in m["content"] for word in q.answer)
            ]
            if elsewhere:
                problems.append(f"{where}: message {elsewhere[0]} holds its answer too")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_fifth", description=__doc__)
    parser.add_argument("out", help="where to write the conversations, one JSON a line")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=6)
    args = parser.parse_args(argv)
    conversations = fifth_chats(args.count, args.seed)
    problems = check(conversations)
    if problems:
        raise SystemExit("\n".join(problems))
    with open(args.out, "w", encoding="utf-8") as out:
        for convo in conversations:
            out.write(json.dumps(convo.as_json(), ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
