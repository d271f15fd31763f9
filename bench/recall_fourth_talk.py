"""The scripts and small talk of the fourth recall set.

`Life` is one conversation's script (two people, their facts, the questions
about them), read from `recall_fourth_lives.json`: a retiree and a PhD student,
a night nurse and a food-truck owner, a teacher who just became a father and a
retired librarian, a baker and a long-haul driver, a student and a bus driver
near retirement, a paralegal at law school and a retired fire captain. The
pools below are what the two say the rest of the time, warm and generic,
composed a sentence or two at a time so that no two chats repeat the same turns
in the same order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A fact: a key, who says it (0 or 1), the session, and its lines. The lines alternate
# speakers from the one who says it, so a fact can be asked about and then told.
Fact = tuple[str, int, int, tuple[str, ...]]


@dataclass(frozen=True)
class Ask:
    """A question. `evidence` names fact lines: "key" (its first line), "key:2" (its third),
    and a trailing "@" adds the first message of that line's session (its date).
    `answer` may hold "{day}" and "{year}", the date of that session. `absent` lists
    words a never-said question's topic would need, which the whole chat must not hold."""

    kind: str  # single, multi, temporal, open, adversarial
    text: str
    evidence: tuple[str, ...]
    answer: tuple[str, ...]
    absent: tuple[str, ...] = ()


@dataclass(frozen=True)
class Life:
    names: tuple[str, str]
    chatter: tuple[tuple[str, ...], tuple[str, ...]]  # each one's everyday lines
    facts: tuple[Fact, ...]
    asks: tuple[Ask, ...]
    sessions: int = 22


OPENERS = (
    "That's awesome!",
    "Oh wow.",
    "Ha, I love that.",
    "Aw, that's so sweet.",
    "No way!",
    "Good for you.",
    "That sounds like a lot.",
    "Hang in there.",
    "I hear you.",
    "Honestly, same.",
    "Oh, that made me smile.",
    "You deserve that.",
    "Ugh, I'm sorry.",
    "That's such a good feeling.",
    "I'm so glad to hear it.",
    "Okay, that's hilarious.",
    "Wow, look at you go!",
    "That's really something.",
    "I can picture it perfectly.",
    "You always find the bright side.",
    "Thanks for telling me.",
    "Fair enough!",
    "That's wonderful news.",
    "Oof, been there.",
    "Sounds like a good day, all told.",
    "That's amazing, truly.",
    "Well, that's one way to spend a Tuesday.",
    "Go easy on yourself.",
)

BODIES = (
    "It rained all morning here so I stayed in with a pot of tea.",
    "I finally cleaned out the fridge, which was overdue by about a month.",
    "We had leftovers three nights in a row and nobody complained.",
    "The neighbours are repainting their fence a very bold yellow.",
    "I fell asleep on the couch before nine, which tells you everything.",
    "The grocery store moved every aisle around and I got lost twice.",
    "I've been trying to drink more water, with mixed results.",
    "There was a gorgeous sunset on the way home, all orange and pink.",
    "I started a new mystery novel and I already suspect the gardener.",
    "My phone decided to update itself right when I needed it.",
    "We ordered takeout and it was honestly the best decision of the week.",
    "It's been windy enough to knock the recycling bin over twice.",
    "I spent an hour looking for my keys and they were in my coat.",
    "The farmers' market had the first strawberries of the season.",
    "I'm trying to get to bed earlier but the evenings are too nice.",
    "Somebody left a box of free books on the corner and I took four.",
    "The power went out for an hour and it was weirdly peaceful.",
    "I made soup from whatever was left in the vegetable drawer.",
    "Traffic was terrible, so I listened to a whole podcast episode.",
    "We watched an old movie last night and it held up surprisingly well.",
    "I've been writing little to-do lists and actually crossing things off.",
    "The mornings are getting colder, I had to dig out a sweater.",
    "I tried a new coffee place and it was just okay.",
    "The laundry pile has become a piece of furniture at this point.",
    "I went for a short walk after dinner and it cleared my head.",
    "There's a street fair this weekend if the weather holds.",
    "I reorganised the kitchen cupboards for no reason at all.",
    "A friend sent me a recipe for lentil stew that I need to try.",
    "The days feel short lately, it's dark by the time I'm done.",
    "I finished a jigsaw puzzle and immediately regretted not gluing it.",
    "My back is a little stiff from sitting too long today.",
    "I've been saying I'll start journaling for about a year now.",
    "The library had a used book sale and I showed great restraint.",
    "It snowed a little overnight, just enough to look pretty.",
    "I baked banana bread because the bananas gave me no choice.",
    "We had a long lazy brunch and didn't do much else.",
    "I've been humming the same song for three days straight.",
    "The mail carrier and I are on a first-name basis now.",
    "I cleaned the windows and suddenly the whole place looks brighter.",
    "A thunderstorm rolled through and rattled everything.",
    "I made a big pot of chili to last the week.",
    "I spent the afternoon sorting through old photos.",
    "Someone on my street set up a little free pantry box.",
    "I'm still getting used to the time change.",
    "We played cards until way too late last night.",
    "The tomatoes on the windowsill are finally turning red.",
)

ASKS = (
    "How's your week been?",
    "What are you up to this weekend?",
    "Did you get any rest at all?",
    "How are you holding up?",
    "Anything fun planned?",
    "What's new on your end?",
    "How did it go?",
    "Tell me everything!",
    "Are you taking care of yourself?",
    "What's the best thing that happened this week?",
    "How's the weather over there?",
    "Did you end up doing anything special?",
    "What are you reading these days?",
    "Have you eaten yet today?",
    "How's everyone at home?",
)

PHOTOS = (
    "[shares a photo of a foggy harbor at dawn]",
    "[shares a photo of a steaming mug on a windowsill]",
    "[shares a photo of a sunset over a parking lot]",
    "[shares a photo of a plate of pancakes]",
    "[shares a photo of autumn leaves on a sidewalk]",
    "[shares a photo of a rainbow over some rooftops]",
    "[shares a photo of a messy kitchen counter]",
    "[shares a photo of a bookshelf]",
    "[shares a photo of a snowy street]",
    "[shares a photo of a field of sunflowers]",
    "[shares a photo of a bowl of ramen]",
    "[shares a photo of a stack of pumpkins at a market]",
)

GREETINGS = (
    "Hey {name}! It's been a minute.",
    "Hi {name}, how are you?",
    "Morning {name}!",
    "{name}! Got a second to catch up?",
    "Hey {name}, long time no chat.",
    "Hi {name}! I was just thinking about you.",
    "Evening, {name}.",
    "Hey hey, {name}!",
    "{name}, hi! How's life?",
)

REPLIES = (
    "Hi {name}! Good to hear from you.",
    "Hey! I was hoping you'd message.",
    "{name}! Perfect timing, I just sat down.",
    "Oh hi! I'm doing alright, mostly.",
    "Hey you. It's been a week, hasn't it?",
    "Hi! I was about to text you, actually.",
    "{name}, hello! Yes, let's catch up.",
    "Hey! Still alive over here, barely.",
)

# Small talk composed from parts: when, what, and how it went.
WHEN = (
    "This morning",
    "Last night",
    "Yesterday",
    "Over the weekend",
    "After work",
    "On my lunch break",
    "Earlier today",
    "Sunday afternoon",
    "Before breakfast",
    "Around midnight",
    "The other day",
    "Right before you messaged",
)
DID = (
    "I reorganised the hall closet",
    "I tried a new bread recipe",
    "I walked to the corner store",
    "I watched two episodes of a baking show",
    "I called an old friend",
    "I repotted the fern",
    "I fixed the wobbly chair",
    "I cleaned out my inbox",
    "I sat on the porch with a cold drink",
    "I did a crossword",
    "I made pancakes from scratch",
    "I wrote a few postcards",
    "I took a long bath",
    "I tidied the junk drawer",
    "I listened to an old album start to finish",
    "I ironed a week of shirts",
    "I sorted the recycling",
    "I baked cookies for the people upstairs",
    "I tried meditating for ten minutes",
    "I re-watched a movie I loved as a teenager",
    "I made a playlist for rainy days",
    "I went through a box of old letters",
    "I hung a picture that's been leaning on the wall for months",
    "I tried a yoga video",
)
HOW = (
    "and it felt great.",
    "which was long overdue.",
    "and now I need a nap.",
    "and honestly it made my day.",
    "though it took twice as long as planned.",
    "and I'm weirdly proud of it.",
    "which nobody asked me to do.",
    "and I regret nothing.",
    "and then forgot why I started.",
    "and it was exactly what I needed.",
    "and it went better than expected.",
    "but I got distracted halfway.",
)

GOODBYES = (
    "I should head off, talk soon!",
    "Okay, I need to go start dinner. Take care!",
    "Talk to you later, okay?",
    "Gotta run, but this was lovely.",
    "Night! Let's catch up again soon.",
    "I'll let you go. Take care of yourself.",
    "Alright, off I go. Bye for now!",
    "Same time next week?",
)

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def _life(data: dict[str, Any]) -> Life:
    facts = tuple(
        (f["key"], int(f["speaker"]), int(f["session"]), tuple(f["lines"])) for f in data["facts"]
    )
    asks = tuple(
        Ask(
            a["kind"],
            a["text"],
            tuple(a["evidence"]),
            tuple(a["answer"]),
            tuple(a.get("absent", ())),
        )
        for a in data["asks"]
    )
    first, second = (tuple(lines) for lines in data["chatter"])
    names = (str(data["names"][0]), str(data["names"][1]))
    return Life(names, (first, second), facts, asks, int(data.get("sessions", 22)))


def load_lives(path: Path | None = None) -> tuple[Life, ...]:
    """The lives the set is written from (by default the JSON beside this module)."""
    path = path or Path(__file__).with_name("recall_fourth_lives.json")
    with path.open(encoding="utf-8") as fh:
        return tuple(_life(data) for data in json.load(fh))
