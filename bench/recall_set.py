"""A development set for recall: long two-person chats with facts said in passing, and
questions asked much later, with the turns that hold each answer annotated.

Deterministic for a seed. Two named people talk over dated sessions; most of
what they say is small talk (work, weather, food, weekend plans) and facts
about other people (distractors). Now and then one of them states a fact about
themselves in the first person ("I just adopted a beagle, we named him
Biscuit"). The questions come in the third person ("What pet did Evan get
recently?"): about half share a word with the statement ("Where did Evan's
sister move to?"), the rest only its meaning. Some ask about things never said
(their evidence is empty: nothing should be recalled for them). A third of the
facts are said in the middle of a long message (a run of lines).

This set is for developing recall, not for judging it: a held-out benchmark of
real conversations decides whether a method generalises.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

PAIRS = [
    ("Evan", "Maya"),
    ("Lena", "Omar"),
    ("Jonas", "Priya"),
    ("Carla", "Tom"),
    ("Ruth", "Idris"),
    ("Nina", "Felix"),
]

# (first-person statement, third-person question, the words an answer needs)
FACTS = [
    (
        "I just adopted a beagle, we named him Biscuit.",
        "What pet did {name} get recently?",
        ("beagle",),
    ),
    (
        "I finally traded in my old car for a silver Prius last weekend.",
        "What does {name} drive these days?",
        ("Prius",),
    ),
    (
        "My sister Lily moved to Denver for her nursing job.",
        "Where did {name}'s sister move to?",
        ("Denver",),
    ),
    (
        "I signed up for pottery classes on Thursday evenings.",
        "What hobby did {name} pick up recently?",
        ("pottery",),
    ),
    (
        "I started learning the cello, my teacher is strict but kind.",
        "What instrument is {name} learning?",
        ("cello",),
    ),
    (
        "We booked our honeymoon in Lisbon for the second week of June.",
        "Where is {name} going after the wedding?",
        ("Lisbon",),
    ),
    (
        "I got promoted to lead the data team at the clinic.",
        "What was {name}'s recent promotion?",
        ("data team",),
    ),
    (
        "I am allergic to peanuts, so I always check the labels.",
        "What is {name} allergic to?",
        ("peanuts",),
    ),
    (
        "My grandmother turned ninety and we threw her a garden party.",
        "How old is {name}'s grandmother?",
        ("ninety",),
    ),
    (
        "I ran my first marathon in Chicago in four hours and ten minutes.",
        "Where did {name} run the marathon?",
        ("Chicago",),
    ),
    (
        "I switched to a vegetarian diet after watching a documentary.",
        "Does {name} still eat meat?",
        ("vegetarian",),
    ),
    (
        "Our daughter Ava started kindergarten this week, she loved it.",
        "What is the name of {name}'s daughter?",
        ("Ava",),
    ),
]

# Things never said: recall should bring nothing back for them.
UNANSWERABLE = [
    "What is {name}'s favourite opera?",
    "Which football club does {name} support?",
    "What was {name}'s first job as a teenager?",
    "How many cousins does {name} have?",
]

SMALL_TALK = [
    "The weather has been grey all week, I miss the sun.",
    "Work was busy today, lots of meetings that could have been emails.",
    "I tried a new ramen place downtown, the broth was amazing.",
    "Are you doing anything fun this weekend?",
    "I watched a documentary about octopuses last night.",
    "My neighbour is renovating again, the drilling starts at eight.",
    "I need to call the plumber about the kitchen sink.",
    "Did you see the game on Sunday? What a finish.",
    "I have been reading a mystery novel set in Edinburgh.",
    "The train was late again this morning.",
    "We should plan a picnic when it gets warmer.",
    "I finally cleaned out the garage, found my old bike.",
    "My colleague Sam brought homemade cookies to the office.",
    "The farmers market had great strawberries this week.",
    "I am thinking about repainting the living room green.",
    "Traffic on the bridge was terrible tonight.",
    "I started a puzzle with two thousand pieces, it is a lot.",
    "My phone screen cracked when I dropped it on the stairs.",
]

# Facts about other people, close in wording to the real ones: distractors.
DISTRACTORS = [
    "My coworker just adopted a cat called Pepper.",
    "Sam drives an old red pickup truck, it is always breaking down.",
    "My cousin moved to Seattle last year.",
    "A friend of mine takes salsa classes on Mondays.",
    "My neighbour's son plays the trumpet very loudly.",
    "Our friends went to Rome for their anniversary.",
    "My brother is allergic to cats.",
    "My aunt ran a half marathon in Boston.",
]

REPLIES = [
    "That sounds great!",
    "Oh wow, tell me more.",
    "Ha, I know the feeling.",
    "Nice, good for you.",
    "Really? I did not know that.",
    "That is so exciting.",
]


@dataclass
class Question:
    text: str
    evidence: list[int]  # indexes of the messages that hold the answer (empty: unanswerable)
    answer: tuple[str, ...] = ()


@dataclass
class Conversation:
    messages: list[dict[str, str]]
    questions: list[Question] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "questions": [
                {"text": q.text, "evidence": q.evidence, "answer": list(q.answer)}
                for q in self.questions
            ],
        }


def conversation(seed: int, sessions: int = 25, turns: int = 24) -> Conversation:
    """Two people over `sessions` dated sessions of `turns` messages each."""
    rng = random.Random(seed)
    a, b = PAIRS[seed % len(PAIRS)]
    facts = rng.sample(FACTS, k=min(len(FACTS), 10))
    # Where each fact is said: (session, turn), spread over the whole conversation.
    slots = sorted(rng.sample(range(sessions * turns), k=len(facts)))
    planned = dict(zip(slots, facts, strict=True))
    messages: list[dict[str, str]] = []
    questions: list[Question] = []
    for s in range(sessions):
        for t in range(turns):
            n = s * turns + t
            speaker = a if t % 2 == 0 else b
            role = "user" if t % 2 == 0 else "assistant"
            parts = []
            if t == 0:
                parts.append(f"(Session {s + 1}, day {3 * s + 1} of the year.)")
            if n in planned:
                statement, question, answer = planned[n]
                # A third of the facts come inside a long run of lines, as chat apps send them.
                before = 14 if rng.random() < 1 / 3 else 1
                parts.extend(rng.choice(SMALL_TALK) for _ in range(before))
                parts.append(statement)
                parts.extend(rng.choice(SMALL_TALK) for _ in range(before - 1))
                questions.append(Question(question.format(name=speaker), [n], answer))
            elif rng.random() < 0.12:
                parts.append(rng.choice(DISTRACTORS))
            else:
                parts.append(rng.choice(REPLIES) if rng.random() < 0.4 else "")
                parts.append(rng.choice(SMALL_TALK))
            if rng.random() < 0.5:  # a second sentence of small talk
                parts.append(rng.choice(SMALL_TALK))
            messages.append({"role": role, "content": " ".join(p for p in parts if p)})
    for template in rng.sample(UNANSWERABLE, k=2):
        questions.append(Question(template.format(name=rng.choice((a, b))), []))
    return Conversation(messages, questions)


def dev_set(count: int = 6, seed: int = 0) -> list[Conversation]:
    return [conversation(seed + i) for i in range(count)]
