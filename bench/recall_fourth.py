"""`python -m bench.recall_fourth OUT.jsonl [--seed N] [--count N]`: a fourth recall set.

Written without reading how recall ranks, to see whether its rules generalise.
Six scripted lives (`recall_fourth_lives.json`), each two people of different ages
and walks of life chatting over twenty-odd dated sessions: warm small talk
(`recall_fourth_talk`) with their facts said in passing, often indirectly,
some later corrected (the latest is the answer), numbers in words. Questions
are single-hop, multi-hop, temporal (the session's date, or relative to it),
open-domain inference, and adversarial (never said: no evidence; or said by
the other person: the turn that shows it). The seed moves the dates, the
length of each session, where each fact falls in it and all the small talk;
`check` proves each question's annotation against the conversation it makes.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from datetime import date, timedelta

from .recall_fourth_talk import (
    ASKS,
    BODIES,
    DID,
    GOODBYES,
    GREETINGS,
    HOW,
    MONTHS,
    OPENERS,
    PHOTOS,
    REPLIES,
    WHEN,
    Ask,
    Life,
    load_lives,
)
from .recall_set import Conversation, Question

LIVES = load_lives()
KINDS = ("single", "multi", "temporal", "open", "adversarial")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


# The shapes of a line of small talk: opener, body, ask, photo, (the speaker's) me, day.
SHAPES = ("obd", "ma", "pb", "odb", "bd", "da", "omd", "pda", "mba")


class Deck:
    """Draws lines in a shuffled order, all of them before any comes again."""

    def __init__(self, lines: Sequence[str], rng: random.Random) -> None:
        self.lines, self.rng, self.left = list(lines), rng, list[str]()

    def draw(self) -> str:
        if not self.left:
            self.left = self.lines[:]
            self.rng.shuffle(self.left)
        return self.left.pop()


def _stamp(day: date, rng: random.Random) -> tuple[str, str]:
    """The session's date as chats write it: (prefix, separator before the text)."""
    month = MONTHS[day.month - 1]
    hour, minute = rng.randint(1, 12), rng.randrange(60)
    half = rng.choice(("am", "pm"))
    forms = (
        (f"({day.day} {month} {day.year})", " "),
        (f"[{hour}:{minute:02d} {half} on {day.day} {month}, {day.year}]", "\n"),
        (f"{month} {day.day}, {day.year}", "\n"),
        (f"{WEEKDAYS[day.weekday()]}, {day.day} {month} {day.year}", "\n"),
        (f"({month} {day.day}, {day.year})", " "),
    )
    return rng.choice(forms)


class Talker:
    """Writes the small talk of one life's two people."""

    def __init__(self, life: Life, rng: random.Random) -> None:
        self.life, self.rng = life, rng
        self.openers, self.bodies = Deck(OPENERS, rng), Deck(BODIES, rng)
        self.asks, self.photos = Deck(ASKS, rng), Deck(PHOTOS, rng)
        self.own = (Deck(life.chatter[0], rng), Deck(life.chatter[1], rng))

    def greet(self, speaker: int) -> str:
        other = self.life.names[1 - speaker]
        line = self.rng.choice(GREETINGS).format(name=other)
        return f"{line} {self.own[speaker].draw()}"

    def reply_greeting(self, speaker: int) -> str:
        line = self.rng.choice(REPLIES).format(name=self.life.names[1 - speaker])
        return f"{line} {self.own[speaker].draw()} {self.asks.draw()}"

    def day(self) -> str:
        """A sentence of small talk made of parts, so that it seldom repeats."""
        rng = self.rng
        return f"{rng.choice(WHEN)} {rng.choice(DID)}, {rng.choice(HOW)}"

    def react(self, speaker: int) -> str:
        if self.rng.random() < 0.5:
            return f"{self.openers.draw()} {self.asks.draw()}"
        return f"{self.openers.draw()} {self.own[speaker].draw()}"

    def chat(self, speaker: int) -> str:
        own = self.own[speaker]
        parts = {
            "o": self.openers.draw,
            "b": self.bodies.draw,
            "a": self.asks.draw,
            "p": self.photos.draw,
            "m": own.draw,
            "d": self.day,
        }
        shape = SHAPES[self.rng.randrange(len(SHAPES))]
        return " ".join(parts[part]() for part in shape)


def _placed(life: Life, rng: random.Random, sizes: list[int]) -> dict[int, dict[int, str]]:
    """Where each fact's lines fall: session -> offset in it -> key ("key:line")."""
    starts = [sum(sizes[:s]) for s in range(len(sizes))]
    out: dict[int, dict[int, str]] = {s: {} for s in range(len(sizes))}
    for key, speaker, session, lines in life.facts:
        taken = out[session]
        spots = [
            j
            for j in range(sizes[session] - len(lines))  # never the goodbye
            if (starts[session] + j) % 2 == speaker
            and all(o not in taken for o in range(j - 1, j + len(lines) + 1))
        ]
        if not spots:
            raise ValueError(f"no room for {key!r} in session {session}")
        j = rng.choice(spots)
        for n in range(len(lines)):
            taken[j + n] = f"{key}:{n}"
    return out


def build(life: Life, seed: int) -> tuple[Conversation, list[str]]:
    """One conversation for `life` and the kind of each of its questions."""
    rng = random.Random(f"fourth:{seed}:{life.names[0]}")
    talk = Talker(life, rng)
    sizes = [rng.randint(20, 30) for _ in range(life.sessions)]
    sizes[-1] += sum(sizes) % 2  # the conversation ends on the assistant's turn
    where = _placed(life, rng, sizes)
    text = {key: lines for key, _, _, lines in life.facts}
    day = date(2022, 1, 10) + timedelta(days=rng.randrange(500))
    messages: list[dict[str, str]] = []
    index: dict[str, int] = {}  # "key:line" -> message index
    first: dict[str, int] = {}  # "key:line" -> index of its session's first message
    dates: dict[str, date] = {}
    for session, size in enumerate(sizes):
        day += timedelta(days=rng.randint(4, 26) if session else 0)
        begin = len(messages)
        stamp, gap = _stamp(day, rng)
        after_fact = False
        for j in range(size):
            speaker = (begin + j) % 2
            key = where[session].get(j)
            if key is not None:
                name, line = key.split(":")
                content = text[name][int(line)]
                index[key], first[key], dates[key] = begin + j, begin, day
            elif j == 0:
                content = talk.greet(speaker)
            elif j == 1:
                content = talk.reply_greeting(speaker)
            elif j == size - 1:
                content = rng.choice(GOODBYES)
            elif after_fact:
                content = talk.react(speaker)
            else:
                content = talk.chat(speaker)
            after_fact = key is not None and key.endswith(":0")
            if j == 0:
                content = f"{stamp}{gap}{content}"
            messages.append({"role": ("user", "assistant")[speaker], "content": content})
    questions = [_question(ask, index, first, dates) for ask in life.asks]
    return Conversation(messages, questions), [ask.kind for ask in life.asks]


def _question(
    ask: Ask, index: dict[str, int], first: dict[str, int], dates: dict[str, date]
) -> Question:
    evidence: set[int] = set()
    when: date | None = None
    for name in ask.evidence:
        dated = name.endswith("@")
        key = name.rstrip("@")
        key = key if ":" in key else f"{key}:0"
        evidence.add(index[key])
        if dated:
            evidence.add(first[key])
            when = dates[key]
    answer = [word.format(day=when.day, year=when.year) if when else word for word in ask.answer]
    return Question(ask.text, sorted(evidence), tuple(answer))


def _has(word: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def check(convo: Conversation, kinds: Sequence[str], life: Life) -> None:
    """Raise ValueError unless the conversation and its annotations hold together."""
    wrong = problems(convo, kinds, life)
    if wrong:
        raise ValueError("; ".join(wrong))


def problems(convo: Conversation, kinds: Sequence[str], life: Life) -> list[str]:
    """What does not hold together in the conversation and its annotations."""
    out: list[str] = []
    said = convo.messages
    if (
        not said
        or len(said) % 2
        or any(
            m["role"] != ("user", "assistant")[i % 2] or not m["content"].strip()
            for i, m in enumerate(said)
        )
    ):
        return ["messages must alternate user/assistant, from the user, none empty"]
    everything = "\n".join(m["content"] for m in said)
    for _, _, _, lines in life.facts:
        for line in lines:
            if everything.count(line) != 1:
                out.append(f"a fact's line is not said exactly once: {line[:40]!r}")
    for question, kind, ask in zip(convo.questions, kinds, life.asks, strict=True):
        where = f"{question.text!r}: "
        if kind not in KINDS:
            out.append(where + f"unknown kind {kind}")
        if not question.evidence:
            if kind != "adversarial" or question.answer or not ask.absent:
                out.append(where + "only an adversarial question may have no evidence")
            for word in ask.absent:
                if _has(word, everything.lower()):
                    out.append(where + f"never said, yet {word!r} is in the chat")
            continue
        if sorted(set(question.evidence)) != question.evidence or not all(
            0 <= i < len(said) for i in question.evidence
        ):
            out.append(where + "evidence must be sorted, unique message indexes")
            continue
        texts = [said[i]["content"] for i in question.evidence]
        for word in question.answer:
            if word != word.lower() or not any(_has(word, t) for t in texts):
                out.append(where + f"answer word {word!r} is in no evidence message")
        for i, t in zip(question.evidence, texts, strict=True):
            if not any(_has(word, t) for word in question.answer):
                out.append(where + f"evidence message {i} holds no answer word")
    return out


def chats(count: int = 6, seed: int = 0) -> list[tuple[Conversation, list[str]]]:
    """`count` checked conversations (the lives in turn) with their questions' kinds."""
    out = []
    for number in range(count):
        life = LIVES[number % len(LIVES)]
        convo, kinds = build(life, seed + number // len(LIVES))
        check(convo, kinds, life)
        out.append((convo, kinds))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_fourth", description=__doc__)
    parser.add_argument("out", help="where to write the conversations, one JSON a line")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=6)
    args = parser.parse_args(argv)
    made = chats(args.count, args.seed)
    with open(args.out, "w", encoding="utf-8") as fh:
        for convo, _ in made:
            fh.write(json.dumps(convo.as_json()) + "\n")
    kinds = Counter(kind for _, ks in made for kind in ks)
    words = sum(len(m["content"].split()) for convo, _ in made for m in convo.messages)
    messages = sum(len(convo.messages) for convo, _ in made)
    print(
        f"{len(made)} conversations, {messages} messages, {words} words, "
        f"{sum(kinds.values())} questions: " + ", ".join(f"{kind} {kinds[kind]}" for kind in KINDS)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
