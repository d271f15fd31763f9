"""One session of a `bench.recall_other` chat: the two friends greet each other, tell their
news, react, ask follow-ups, share photos and make small talk, then say goodbye.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .recall_other_data import (
    ACK,
    ADOPTS,
    AFTER,
    ASIDE_LEADS,
    ASIDES,
    ASK_BACK,
    BY_KEY,
    CHIT,
    CHIT_TAILS,
    CLOSE,
    CLOSE_BACK,
    COMMENT,
    COMMON,
    FOLLOW_ANY,
    GENERIC_ELICIT,
    GREET_ANSWER,
    GREET_BACK,
    GREETINGS,
    LEAD,
    MOVES,
    PHOTO_COMMENT,
    REACT,
    RELATE,
    TOPICS,
    VISITS,
    Context,
)


@dataclass
class Person:
    name: str
    she: bool
    topics: list[str]
    kid: str = ""
    kidrel: str = ""
    pet: str = ""
    species: str = ""
    sib: str = ""
    sibrel: str = ""

    @property
    def pp(self) -> str:
        return "her" if self.she else "his"

    @property
    def ps(self) -> str:
        return "she" if self.she else "he"


@dataclass
class Event:
    who: int
    key: str  # a Kind's key, or "adopt", "move", "visit"
    x: str
    c: Context
    when: str
    session: int
    index: int = -1


@dataclass
class Turn:
    """What the last message asks of the next speaker."""

    kind: str  # greet, greetq, event, follow, detail, chitq, chitback, elicit, plain
    event: Event | None = None
    chit: int = -1
    round: int = 0
    topic: str = ""


class Picker:
    """Chooses among wordings, avoiding those this conversation has used already."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def fresh(self, options: Sequence[str]) -> bool:
        return any(o not in self.used for o in options)

    def one(self, options: Sequence[str]) -> str:
        fresh = [o for o in options if o not in self.used]
        choice = self.rng.choice(fresh or list(options))
        if choice:
            self.used.add(choice)
        return choice


def fill(text: str, **values: str) -> str:
    out = text.format(**values)
    out = re.sub(r"\s+([,.!?:])", r"\1", re.sub(r" {2,}", " ", out)).strip()
    return out[:1].upper() + out[1:]


def slots(person: Person, other: Person, ev: Event | None = None) -> dict[str, str]:
    kid_she = person.kidrel == "daughter"
    sib_she = person.sibrel == "sister"
    pet_he = person.pet in ("Ziggy", "Waffles", "Biscuit")
    values = {
        "o": other.name,
        "n": person.name,
        "pp": person.pp,
        "ps": person.ps,
        "k": person.kid,
        "K": person.kid,
        "kr": person.kidrel,
        "Kp": "She" if kid_she else "He",
        "kpp": "her" if kid_she else "his",
        "p": person.pet,
        "P": person.pet,
        "sp": person.species,
        "pit": "him" if pet_he else "her",
        "pip": "he" if pet_he else "she",
        "s": person.sib,
        "S": person.sib,
        "sr": person.sibrel,
        "so": "her" if sib_she else "him",
        "Sp": "She" if sib_she else "He",
        "x": "",
        "c": "",
        "C": "",
        "ca": "",
        "w": "",
        "W": "",
    }
    if ev is not None:
        values["x"] = ev.x
        values["c"] = ev.c[0].format(pp="my", ps="I")
        values["C"] = values["c"][:1].upper() + values["c"][1:]
        values["ca"] = ev.c[1].format(pp=person.pp, ps=person.ps, n=person.name)
        values["w"] = ev.when
        values["W"] = ev.when[:1].upper() + ev.when[1:]
    return values


def after_lead(lead: str, text: str) -> str:
    """`text` put after a lead-in that ends mid-sentence, its first word lowered if common."""
    first = text.split(" ", 1)[0].strip(",.!?:").lower()
    if lead.endswith((",", " and", " but")) and first in COMMON:
        text = text[:1].lower() + text[1:]
    return f"{lead} {text}" if lead else text


def aside(pick: Picker) -> str:
    """A remark about one's week, not about anything the questions ask."""
    lead = pick.rng.choice(ASIDE_LEADS)
    return after_lead(lead, pick.one(ASIDES))


def statement(pick: Picker, ev: Event, person: Person, other: Person) -> str:
    values = slots(person, other, ev)
    if ev.key == "adopt":
        template = pick.one(ADOPTS)
    elif ev.key == "move":
        template = pick.one(MOVES)
    elif ev.key == "visit":
        template = pick.one(VISITS)
    else:
        template = pick.one(BY_KEY[ev.key].says)
    text = fill(template, **values)
    after = pick.one(AFTER[mood_of(ev)])
    return f"{text} {after}" if after else text


def topic_of(ev: Event) -> str:
    if ev.key == "adopt":
        return "pet"
    if ev.key in ("move", "visit"):
        return "sib"
    return BY_KEY[ev.key].topic


def mood_of(ev: Event) -> str:
    if ev.key in ("adopt", "move", "visit"):
        return "up"
    return BY_KEY[ev.key].mood


def session_turns(
    pick: Picker,
    header: str,
    people: list[Person],
    events: list[Event],
    target: int,
    known: set[tuple[int, str]],
) -> list[tuple[str, Event | None]]:
    """One session's messages, alternating from person A, each with the event it states.

    `known`: the (person, topic) pairs the friends can bring up unprompted (a pet
    once its adoption was told).
    """
    rng = pick.rng
    pending = list(events)
    out: list[tuple[str, Event | None]] = [
        (header + " " + fill(pick.one(GREETINGS), o=people[1].name), None)
    ]
    prev = Turn("greet")
    closing = False
    chits: set[int] = set()
    while True:
        speaker = len(out) % 2
        me, you = people[speaker], people[1 - speaker]
        if closing:
            out.append((fill(pick.one(CLOSE_BACK), o=you.name), None))
            return out
        mine = [e for e in pending if e.who == speaker]
        yours = [e for e in pending if e.who != speaker]
        parts: list[str] = []
        said: Event | None = None
        nxt: Turn | None = None  # None: the speaker goes on to something new
        ev = prev.event
        if prev.kind == "greet":
            parts.append(fill(pick.one(GREET_BACK), o=you.name))
            nxt = Turn("greetq")
        elif prev.kind == "greetq":
            parts.append(pick.one(GREET_ANSWER))
            if rng.random() < 0.6:
                parts.append(aside(pick))
        elif prev.kind == "event" and ev is not None:
            values = slots(you, me, ev)
            values["o"] = you.name
            parts.append(fill(pick.one(REACT[mood_of(ev)]), **values))
            if rng.random() < 0.35:
                parts.append(pick.one(RELATE))
            follows = TOPICS[topic_of(ev)]["follow"] + FOLLOW_ANY
            parts.append(fill(pick.one(follows), **values))
            nxt = Turn("follow", ev, round=1)
        elif prev.kind == "follow" and ev is not None:
            values = slots(me, you, ev)
            bank = TOPICS[topic_of(ev)]
            parts.append(fill(pick.one(bank["detail"]), **values))
            if rng.random() < 0.65:
                parts.append(fill(pick.one(bank["detail"]), **values))
            if rng.random() < 0.35:
                parts.append(f"[shares a photo of {pick.one(bank['photo'])}]")
            nxt = Turn("detail", ev, round=prev.round)
        elif prev.kind == "detail" and ev is not None:
            photo = "[shares a photo" in out[-1][0]
            parts.append(pick.one(PHOTO_COMMENT if photo else COMMENT))
            if rng.random() < 0.3:
                parts.append(pick.one(RELATE))
            if prev.round < 2 and rng.random() < 0.35:
                values = slots(you, me, ev)
                follows = TOPICS[topic_of(ev)]["follow"] + FOLLOW_ANY
                parts.append(fill(pick.one(follows), **values))
                nxt = Turn("follow", ev, round=prev.round + 1)
        elif prev.kind in ("chitq", "chitback"):
            answers = [a for a in CHIT[prev.chit][1] if a not in out[-1][0]]
            parts.append(pick.one(answers))
            if rng.random() < 0.5:
                parts.append(pick.one(CHIT_TAILS[prev.chit]))
            if rng.random() < 0.6:
                parts.append(aside(pick))
            if prev.kind == "chitq" and rng.random() < 0.45:
                parts.append(pick.one(ASK_BACK))
                nxt = Turn("chitback", chit=prev.chit)
        elif prev.kind == "elicit" and ev is not None and ev in mine:
            pending.remove(ev)
            said = ev
            parts.append(statement(pick, ev, me, you))
            nxt = Turn("event", ev)
        elif prev.kind == "elicit" and prev.topic:
            parts.append(fill(pick.one(TOPICS[prev.topic]["mention"]), **slots(me, you)))
            nxt = Turn("mention")
        elif prev.kind == "mention":
            parts.append(pick.one(COMMENT + ACK))
            if rng.random() < 0.5:
                parts.append(aside(pick))
        else:
            parts.append(pick.one(ACK))
        if nxt is None:
            # Something new: an event of one's own, asking after the other's, small talk.
            mentionable = [
                t for t in me.topics if (speaker, t) in known and pick.fresh(TOPICS[t]["mention"])
            ]
            askable = [
                t
                for t in you.topics
                if (1 - speaker, t) in known and pick.fresh(TOPICS[t]["mention"])
            ]
            roll, other = rng.random(), rng.random()
            if mine and roll < 0.7:
                said = mine[0]
                pending.remove(said)
                lead = pick.one(LEAD)
                parts.append(after_lead(lead, statement(pick, said, me, you)))
                nxt = Turn("event", said)
            elif yours and roll < 0.9:
                want = yours[0]
                if want.key in ("adopt", "move"):
                    asking = pick.one(GENERIC_ELICIT)
                else:
                    asking = fill(pick.one(TOPICS[topic_of(want)]["elicit"]), **slots(you, me))
                parts.append(asking)
                nxt = Turn("elicit", want)
            elif not pending and len(out) >= target and speaker == 0:
                parts.append(pick.one(CLOSE))
                closing = True
                nxt = Turn("close")
            elif mentionable and other < 0.25:
                topic = rng.choice(mentionable)
                parts.append(fill(pick.one(TOPICS[topic]["mention"]), **slots(me, you)))
                nxt = Turn("mention")
            elif askable and other < 0.4:
                topic = rng.choice(askable)
                parts.append(fill(pick.one(TOPICS[topic]["elicit"]), **slots(you, me)))
                nxt = Turn("elicit", topic=topic)
            else:
                free = [i for i in range(len(CHIT)) if i not in chits and pick.fresh(CHIT[i][1])]
                free = (
                    free
                    or [i for i in range(len(CHIT)) if i not in chits]
                    or list(range(len(CHIT)))
                )
                chit = rng.choice(free)
                chits.add(chit)
                parts.append(pick.one(CHIT[chit][0]))
                nxt = Turn("chitq", chit=chit)
        if said is not None and said.key == "adopt":
            known.add((speaker, "pet"))
        out.append((" ".join(p for p in parts if p), said))
        prev = nxt
