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
facts are said in the middle of a long message (a run of lines); half answer
the other person's question ("Are you still driving that old car?"). As in real
chats, the two greet each other by name, so the names the questions use are
everywhere but in the statements.

This set is for developing recall, not for judging it: a held-out benchmark of
real conversations decides whether a method generalises.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
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

# (first-person statement, third-person question, the words an answer needs, and what the
# other person asks when the statement comes as a reply)
FACTS = [
    (
        "I just adopted a beagle, we named him Biscuit.",
        "What pet did {name} get recently?",
        ("beagle",),
        "You mentioned wanting a dog, any news on that?",
    ),
    (
        "I finally traded in my old car for a silver Prius last weekend.",
        "What does {name} drive these days?",
        ("Prius",),
        "Are you still driving that old car?",
    ),
    (
        "My sister Lily moved to Denver for her nursing job.",
        "Where did {name}'s sister move to?",
        ("Denver",),
        "How is your sister doing with the job hunt?",
    ),
    (
        "I signed up for pottery classes on Thursday evenings.",
        "What hobby did {name} pick up recently?",
        ("pottery",),
        "Have you found something to do on weekday evenings?",
    ),
    (
        "I started learning the cello, my teacher is strict but kind.",
        "What instrument is {name} learning?",
        ("cello",),
        "Are you still thinking about picking up an instrument?",
    ),
    (
        "We booked our honeymoon in Lisbon for the second week of June.",
        "Where is {name} going after the wedding?",
        ("Lisbon",),
        "Have you two decided where to go after the wedding?",
    ),
    (
        "I got promoted to lead the data team at the clinic.",
        "What was {name}'s recent promotion?",
        ("data team",),
        "Any news from work?",
    ),
    (
        "I am allergic to peanuts, so I always check the labels.",
        "What is {name} allergic to?",
        ("peanuts",),
        "Should I bring the satay for the potluck?",
    ),
    (
        "My grandmother turned ninety and we threw her a garden party.",
        "How old is {name}'s grandmother?",
        ("ninety",),
        "How was your grandmother's birthday?",
    ),
    (
        "I ran my first marathon in Chicago in four hours and ten minutes.",
        "Where did {name} run the marathon?",
        ("Chicago",),
        "How did the race go?",
    ),
    (
        "I switched to a vegetarian diet after watching a documentary.",
        "Does {name} still eat meat?",
        ("vegetarian",),
        "Want to grab burgers on Friday?",
    ),
    (
        "Our daughter Ava started kindergarten this week, she loved it.",
        "What is the name of {name}'s daughter?",
        ("Ava",),
        "How is your daughter settling in at school?",
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

# Everyday chat of a wide vocabulary, for the variant whose small talk rarely repeats
# itself: frames filled from word lists, so that everyday words (places, relatives,
# pastimes) recur by chance across the conversation, as in real chats, instead of a
# few sentences recurring whole.
CHATTER_FRAMES = [
    "I went to the {place} with my {person} {when}.",
    "My {person} tried {pastime} {when} and loved it.",
    "The {event} at the {place} was {adj}.",
    "We might go {pastime} {when} if the weather holds.",
    "Have you ever tried {pastime}?",
    "My {person} finally fixed the {thing}, it took ages.",
    "The {event} {when} was {adj}, I almost left early.",
    "I keep meaning to clean the {thing} but never do.",
    "My {person} wants to get a new {thing}.",
    "There was a {event} at the {place} {when}, very {adj}.",
    "I read an article about {pastime}, it sounded {adj}.",
    "Our {thing} has been acting up {when}.",
    "My {person} is obsessed with {pastime} these days.",
    "The {place} near my {person}'s house is always {adj}.",
]
CHATTER_WORDS = {
    "place": "park library gym office beach market cafe museum lake mall station garden bakery"
    " cinema school stadium zoo harbour river hotel airport farm trail pool bookshop",
    "person": "brother cousin neighbour boss coworker aunt uncle mum dad friend roommate"
    " teacher sister nephew niece landlord dentist",
    "pastime": "cooking cycling swimming baking yoga gardening fishing camping knitting running"
    " dancing skating climbing chess photography reading sketching kayaking bowling surfing"
    " tennis singing drawing sewing",
    "event": "coffee cake movie concert lecture sale show game soup festival exhibit parade"
    " meeting class party workshop dinner trip race quiz",
    "adj": "great awful crowded quiet lovely boring fun strange cold expensive cheap noisy"
    " relaxing long short",
    "when": "yesterday|last week|on Sunday|this morning|recently|last month|last weekend"
    "|tonight|on Friday|a few days ago|this week|lately",
    "thing": "car dog cat bike phone laptop kitchen garden job house flat team boat guitar"
    " camera jacket",
}


def chatter(seed: int, count: int = 4000) -> list[str]:
    """`count` distinct everyday sentences from `CHATTER_FRAMES`, deterministic for `seed`."""
    rng = random.Random(seed)
    words = {
        slot: listed.split("|") if "|" in listed else listed.split()
        for slot, listed in CHATTER_WORDS.items()
    }
    said: set[str] = set()
    while len(said) < count:
        frame = rng.choice(CHATTER_FRAMES)
        said.add(frame.format(**{slot: rng.choice(pool) for slot, pool in words.items()}))
    return sorted(said)


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

# Each person's running interest, mentioned in about half the sessions, as real
# chats return to a hobby or a job: its words are everywhere, also in the last
# sessions the window keeps. One fact is about one moment of it, and its question
# may share nothing with the statement but the interest's own word.
THEMES = [
    (
        [
            "Went hiking with the club on Saturday, my legs are still sore.",
            "The hiking trail by the reservoir was muddy but worth it.",
            "I bought new hiking boots, breaking them in slowly.",
            "Our hiking group is planning a longer route next month.",
            "Hiking in the fog this morning felt like a dream.",
            "I keep a notebook of every hike I do.",
        ],
        (
            "On our last hike we saw a black bear near the trail, scary but amazing.",
            "What animal did {name} see while hiking?",
            ("bear",),
            "Seen anything wild on your hikes?",
        ),
    ),
    (
        [
            "I spent the afternoon painting again, it calms me down.",
            "My painting class was packed tonight.",
            "I bought new brushes for my painting.",
            "Still working on that painting of the harbour.",
            "Painting by the window in this light is lovely.",
            "I hung one of my paintings in the hallway.",
        ],
        (
            "For my mum's birthday I painted a sunrise over the lake.",
            "What did {name} paint for their mum's birthday?",
            ("sunrise",),
            "What are you painting these days?",
        ),
    ),
    (
        [
            "Volunteered at the animal shelter this morning, so many puppies.",
            "The shelter is short of volunteers again.",
            "I did the late shift at the shelter, walking the dogs.",
            "We had an adoption day at the shelter, six dogs found homes.",
            "I love my Saturdays at the shelter.",
            "The shelter got a donation of blankets this week.",
        ],
        (
            "At the shelter they made me coordinator of the weekend volunteers.",
            "What role does {name} have at the shelter?",
            ("coordinator",),
            "How are things at the shelter?",
        ),
    ),
    (
        [
            "Band practice ran late tonight.",
            "Our band is learning a new song, the bridge is tricky.",
            "The drummer in my band moved away, we need a new one.",
            "We recorded a rough demo with the band.",
            "Band rehearsal got cancelled because of the storm.",
            "Our band finally has a name we all like.",
        ],
        (
            "Our band played its first gig at the Blue Note, about forty people came.",
            "Where did {name}'s band play its first gig?",
            ("Blue Note",),
            "When is your band playing live?",
        ),
    ),
]

GREETINGS = [
    "Hey {name}!",
    "Hi {name}, good to hear from you.",
    "Hello {name}! How have you been?",
    "{name}! It has been a while.",
]

VOCATIVES = ["Talk soon, {name}.", "Thanks, {name}!", "You are the best, {name}."]

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


def conversation(
    seed: int,
    sessions: int = 25,
    turns: int = 24,
    interest: float = 0.5,
    small_talk: Sequence[str] = SMALL_TALK,
) -> Conversation:
    """Two people over `sessions` dated sessions of `turns` messages each, each bringing
    up their running interest about `interest` times a session, and otherwise making
    `small_talk`."""
    rng = random.Random(seed)
    a, b = PAIRS[seed % len(PAIRS)]
    facts = rng.sample(FACTS, k=min(len(FACTS), 10))
    # Where each fact is said: (session, turn), spread over the whole conversation.
    slots = sorted(rng.sample(range(1, sessions * turns), k=len(facts)))
    planned = dict(zip(slots, facts, strict=True))
    # Half the facts answer the other person's question, as in real chats.
    asked = {n - 1: planned[n][3] for n in slots if rng.random() < 0.5 and n - 1 not in planned}
    # Each said once, as people mention a friend's news once.
    distractors = rng.sample(DISTRACTORS, k=len(DISTRACTORS))
    # A running interest each, mentioned in about half the sessions.
    themed = random.Random(seed + 1000)
    interests = [THEMES[seed % len(THEMES)], THEMES[(seed + 1) % len(THEMES)]]
    mentions: dict[int, str] = {}
    whole, part = divmod(interest, 1)
    for s in range(sessions):
        for side, (pool, _) in enumerate(interests):
            for _ in range(int(whole) + (themed.random() < part)):
                mentions[s * turns + themed.randrange(side, turns, 2)] = themed.choice(pool)
    for side, (_, fact) in enumerate(interests):
        free = [
            n
            for n in range(turns + side, sessions * turns * 7 // 10, 2)
            if not {n - 1, n, n + 1} & (planned.keys() | asked.keys())
        ]
        n = themed.choice(free)
        planned[n] = fact
        if themed.random() < 0.5:
            asked[n - 1] = fact[3]
    messages: list[dict[str, str]] = []
    questions: list[Question] = []
    for s in range(sessions):
        for t in range(turns):
            n = s * turns + t
            speaker, other = (a, b) if t % 2 == 0 else (b, a)
            role = "user" if t % 2 == 0 else "assistant"
            parts = []
            if t == 0:
                parts.append(f"(Session {s + 1}, day {3 * s + 1} of the year.)")
            if t < 2:  # people greet each other by name
                parts.append(rng.choice(GREETINGS).format(name=other))
            if n in planned:
                statement, question, answer, _ = planned[n]
                # A third of the facts come inside a long run of lines, as chat apps send them.
                before = 14 if rng.random() < 1 / 3 else 1
                parts.extend(rng.choice(small_talk) for _ in range(before))
                parts.append(statement)
                parts.extend(rng.choice(small_talk) for _ in range(before - 1))
                questions.append(Question(question.format(name=speaker), [n], answer))
            elif n in asked:
                parts.append(asked[n])
            elif distractors and rng.random() < 0.05:
                parts.append(distractors.pop())
            else:
                parts.append(rng.choice(REPLIES) if rng.random() < 0.4 else "")
                parts.append(rng.choice(small_talk))
            if rng.random() < 0.9:  # a second sentence of small talk
                parts.append(rng.choice(small_talk))
            if n in mentions:
                parts.append(mentions[n])
            if rng.random() < 0.08:
                parts.append(rng.choice(VOCATIVES).format(name=other))
            messages.append({"role": role, "content": " ".join(p for p in parts if p)})
    for template in rng.sample(UNANSWERABLE, k=2):
        questions.append(Question(template.format(name=rng.choice((a, b))), []))
    return Conversation(messages, questions)


def dev_set(count: int = 6, seed: int = 0) -> list[Conversation]:
    return [conversation(seed + i) for i in range(count)]
