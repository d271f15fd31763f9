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
Deterministic for a given seed; standard library only.
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


KINDS: tuple[Kind, ...] = (
    Kind(
        "paint",
        "painting",
        ("lighthouse", "heron", "windmill", "glacier", "vineyard", "cathedral", "tugboat"),
        (
            "{W} I finally finished a painting of a {x} {c}. Took me three evenings, but "
            "I love how the light came out.",
            "So I've been at the easel again! {W} I wrapped up a {x} in watercolor {c}.",
            "Guess what I painted {w}? A {x}! It's {c}, so no pressure, haha.",
            "I did a big acrylic piece {w}: a {x} at dusk, {c}. My hands were covered in "
            "paint for hours afterwards.",
        ),
        (
            "What did {n} paint {ca}?",
            "What was the subject of the canvas {n} made {ca}?",
            "What scene is shown in the picture {n} created {ca}?",
        ),
        "When did {n} paint the {x}?",
        "What subjects has {n} painted?",
        (
            ("for my mom's birthday", "as a birthday present for {pp} mother"),
            ("for the library's art show", "for an exhibition at the library"),
            ("for my neighbor who's moving away", "as a farewell gift for a neighbor"),
            ("to hang in the hospital lobby", "for a hospital's entrance hall"),
        ),
    ),
    Kind(
        "race",
        "running",
        ("Riverside", "Harborview", "Lakeshore", "Maplewood", "Briarcliff", "Stonebridge"),
        (
            "{W} I ran the {x} 10K {c}! My legs are still complaining.",
            "Big news from my running life: I did the {x} half marathon {w}, {c}.",
            "The {x} race was {w}. I did it {c} and somehow didn't walk once.",
        ),
        (
            "Which race did {n} take part in {ca}?",
            "What was the name of the running event {n} completed {ca}?",
        ),
        "When did {n} run the {x} race?",
        "Which races has {n} run?",
        (
            ("in the pouring rain", "in bad weather"),
            ("with my running club", "alongside {pp} running group"),
            ("and beat my personal best", "while setting a new personal record"),
            ("pushing a jogging stroller", "while pushing a stroller"),
        ),
    ),
    Kind(
        "pot",
        "pottery",
        ("teapot", "platter", "lantern", "pitcher", "goblet", "birdbath"),
        (
            "{W} I pulled a {x} out of the kiln, {c}. It's a little wonky but I adore it.",
            "My pottery class was great {w}: I threw a {x} {c}.",
            "Clay update: I made a {x} {c} {w}, and the glaze came out this deep blue.",
        ),
        ("What did {n} make out of clay {ca}?", "What ceramic piece did {n} create {ca}?"),
        "When did {n} make the {x} in pottery?",
        "What pottery pieces has {n} made?",
        (
            ("for a friend's housewarming", "as a housewarming gift"),
            ("on the wheel at the studio", "during a session at the ceramics studio"),
            ("for the holiday market", "to sell at a seasonal market"),
        ),
    ),
    Kind(
        "instrument",
        "music",
        ("ukulele", "cello", "banjo", "saxophone", "mandolin", "harmonica", "accordion"),
        (
            "{W} I had my first lesson on the {x}, {c}. My fingers hurt so much!",
            "Okay, don't laugh, but I bought a {x} {w}. I'm learning it {c}.",
            "I've started playing the {x}. First class was {w}, {c}.",
        ),
        (
            "Which instrument did {n} start learning {ca}?",
            "What instrument has {n} taken up {ca}?",
        ),
        "When did {n} start learning the {x}?",
        "Which instruments has {n} been learning?",
        (
            ("because my grandpa used to play one", "in memory of {pp} grandfather"),
            ("with a teacher from the community college", "with a community college instructor"),
            ("to play at my cousin's wedding", "so {ps} could perform at a family wedding"),
        ),
    ),
    Kind(
        "harvest",
        "garden",
        ("zucchini", "rhubarb", "eggplant", "artichokes", "radishes", "pumpkins", "kale"),
        (
            "{W} I harvested my first batch of {x} {c}! Way more than I can eat.",
            "My garden is going wild. {W} I picked a whole basket of {x} {c}.",
            "Finally some success: {w} I picked the first {x} I planted {c}.",
        ),
        ("What vegetable did {n} grow {ca}?", "What crop did {n} pick {ca}?"),
        "When did {n} harvest the {x}?",
        "What has {n} harvested from gardening?",
        (
            ("in the raised beds out back", "in {pp} raised beds"),
            ("at the community garden plot", "at a shared community plot"),
            ("on my tiny balcony", "on {pp} balcony"),
        ),
    ),
    Kind(
        "bake",
        "baking",
        ("cheesecake", "baklava", "focaccia", "tiramisu", "croissants", "pavlova", "strudel"),
        (
            "{W} I baked {x} from scratch {c}. It disappeared in about ten minutes.",
            "Kitchen experiment {w}: {x}, {c}. Total mess, but it tasted amazing.",
            "{W} I spent the whole afternoon making {x} {c}, and honestly I'm proud of it.",
        ),
        ("What did {n} bake {ca}?", "What treat did {n} make in the kitchen {ca}?"),
        "When did {n} bake the {x}?",
        "What has {n} baked?",
        (
            ("for my coworker's farewell party", "for a colleague's going-away party"),
            ("for the school bake sale", "for a bake sale at school"),
            ("for our anniversary dinner", "for an anniversary meal"),
            ("for the neighborhood potluck", "to bring to a potluck"),
        ),
    ),
    Kind(
        "book",
        "books",
        ("Middlemarch", "Rebecca", "Beloved", "Dune", "Persuasion", "Frankenstein", "Siddhartha"),
        (
            "{W} I finished {x}, which I read {c}. The ending wrecked me.",
            "I've been reading {x} {c}. Started it {w} and I can't put it down.",
            "Just closed the last page of {x} {w}. I picked it up {c}.",
        ),
        ("Which novel did {n} read {ca}?", "What book has {n} been into {ca}?"),
        "When was {n} reading {x}?",
        "Which books has {n} read?",
        (
            ("for my book club", "for {pp} reading group"),
            ("on the train to work", "during {pp} commute"),
            ("because my therapist recommended it", "on a therapist's recommendation"),
        ),
    ),
    Kind(
        "camp",
        "camping",
        ("Yosemite", "Acadia", "Shenandoah", "Zion", "Sequoia", "Yellowstone"),
        (
            "We went camping at {x} {c}, got back {w}. The stars were unreal.",
            "{W} we drove up to {x} {c}, pitched a tent and hiked until our feet gave out.",
            "Just got home from a trip to {x} {c}. We got back {w} and I've done nothing "
            "but sleep since.",
        ),
        ("Which national park did {n} visit {ca}?", "Where did {n} sleep outdoors {ca}?"),
        "When did {n} go camping at {x}?",
        "Which parks has {n} camped in?",
        (
            ("with my college roommates", "with old friends from college"),
            ("for my birthday", "to celebrate {pp} birthday"),
            ("with my cousins", "with relatives"),
        ),
    ),
    Kind(
        "trip",
        "travel",
        ("Lisbon", "Kyoto", "Reykjavik", "Marrakesh", "Dublin", "Prague", "Seville"),
        (
            "{W} I got back from {x}! I went {c} and ate my weight in pastries.",
            "I flew to {x} {w} {c}. The old town was gorgeous.",
            "So I was in {x} {c}. Landed {w}, and I'm still jet-lagged.",
        ),
        ("Which city did {n} fly to {ca}?", "Where abroad did {n} go {ca}?"),
        "When did {n} travel to {x}?",
        "Which cities has {n} visited abroad?",
        (
            ("for a friend's wedding", "for a wedding"),
            ("for a work conference", "on a business trip"),
            ("to celebrate my anniversary", "for an anniversary"),
            ("on a last-minute solo trip", "alone, on a spontaneous getaway"),
        ),
    ),
    Kind(
        "project",
        "work",
        ("Falcon", "Juniper", "Beacon", "Orchid", "Nimbus", "Tundra"),
        (
            "Work news: {w} they asked me to lead the {x} project {c}. Terrifying and exciting.",
            "{W} I found out I'm leading the {x} project, {c}. I think I'm ready?",
            "I'm now in charge of something called Project {x}, {c}. Found out {w}.",
        ),
        (
            "What is the name of the project {n} is in charge of {ca}?",
            "Which initiative was {n} asked to head {ca}?",
        ),
        "When did {n} take on the {x} project?",
        "Which projects has {n} led at work?",
        (
            ("after my manager went on leave", "while {pp} manager was on leave"),
            ("for our biggest client", "for {pp} team's largest client"),
            ("even though I'm the newest on the team", "despite being the newest team member"),
        ),
    ),
    Kind(
        "talk",
        "work",
        ("accessibility", "composting", "telehealth", "microplastics", "robotics", "literacy"),
        (
            "{W} I gave a talk about {x} {c}. My voice shook for the first minute.",
            "I spoke on a panel about {x} {w}, {c}. People actually asked questions!",
            "Survived my first presentation! It was on {x}, {c}, {w}.",
        ),
        (
            "What topic did {n} speak about {ca}?",
            "What was the subject of {n}'s presentation {ca}?",
        ),
        "When did {n} give the talk on {x}?",
        "What topics has {n} presented on?",
        (
            ("in front of about two hundred people", "to an audience of around 200"),
            ("at the regional meeting in the convention center", "at a regional convention"),
            ("with my mentor in the front row", "while {pp} mentor watched"),
        ),
    ),
    Kind(
        "award",
        "kid",
        ("trophy", "ribbon", "medal", "plaque", "voucher"),
        (
            "{K} won a {x} at the {c} {w}! I cried a little, not gonna lie.",
            "Proud parent moment: {w}, {k} brought home a {x} from the {c}.",
            "The {c} was {w}, and {k} got a {x}. {Kp} practiced for weeks.",
        ),
        (
            "What did {n}'s {kr} win at the {ca}?",
            "What prize did {n}'s {kr} receive at the {ca}?",
        ),
        "When did {n}'s {kr} win the {x}?",
        "What awards has {n}'s {kr} won?",
        (
            ("science fair", "science fair"),
            ("spelling bee", "spelling contest"),
            ("swim meet", "swimming competition"),
            ("chess tournament", "chess tournament"),
            ("art contest", "art competition"),
        ),
        needs="kid",
    ),
    Kind(
        "activity",
        "kid",
        ("ballet", "karate", "gymnastics", "hockey", "archery", "lacrosse"),
        (
            "{K} started {x} {w}, {c}. {Kp} came home grinning.",
            "So {k} has taken up {x}. First session was {w}, {c}.",
            "{W} {k} had {kpp} first {x} class, {c}.",
        ),
        (
            "What activity did {n}'s {kr} begin {ca}?",
            "Which sport or class did {n}'s {kr} sign up for {ca}?",
        ),
        "When did {n}'s {kr} start {x}?",
        "What activities has {n}'s {kr} taken up?",
        (
            ("after begging me for months", "after months of asking"),
            ("with a friend from school", "together with a classmate"),
            ("at the YMCA downtown", "at a downtown Y"),
        ),
        needs="kid",
    ),
    Kind(
        "chew",
        "pet",
        ("sandal", "headphones", "passport", "cushion", "remote", "wallet"),
        (
            "{W} {p} chewed up my {x} {c}. I can't even be mad, look at that face.",
            "Guess who destroyed my {x} {w}? {P}, of course. {C}, too.",
            "{P} got hold of my {x} {w} {c}. There's nothing left of it.",
        ),
        ("What did {n}'s {sp} destroy {ca}?", "What item did {n}'s {sp} ruin {ca}?"),
        "When did {n}'s {sp} chew up the {x}?",
        "What things has {n}'s {sp} destroyed?",
        (
            ("while I was at work", "while {ps} was out at work"),
            ("the night before my trip", "right before {pp} trip"),
            ("during my video call", "in the middle of a video call"),
        ),
        needs="pet",
        mood="mixed",
    ),
    Kind(
        "vet",
        "pet",
        ("allergies", "arthritis", "worms", "cataracts", "gingivitis"),
        (
            "Took {p} to the vet {w} {c}. Turns out the poor thing has {x}.",
            "We had a vet visit for {p} {w}, {c}. Diagnosis: {x}. Ugh.",
            "So the vet says {p} has {x}. We went in {w}, {c}.",
        ),
        (
            "What health problem did the vet find in {n}'s {sp} {ca}?",
            "What was {n}'s {sp} diagnosed with {ca}?",
        ),
        "When did {n} take {pp} {sp} to the vet about the {x}?",
        "What health issues has {n}'s {sp} had?",
        (
            ("after the limping started", "after some limping"),
            ("because of the nonstop scratching", "due to constant scratching"),
            ("for a routine checkup", "during a regular checkup"),
        ),
        needs="pet",
        mood="down",
    ),
    Kind(
        "workout",
        "fitness",
        ("salsa", "kickboxing", "pilates", "fencing", "spinning", "zumba", "capoeira"),
        (
            "{W} I went to my first {x} class {c}. I could barely walk after.",
            "New thing: {x}! I tried it {w} {c} and I'm hooked.",
            "I signed up for {x} {c}, and the first session was {w}. So sore.",
        ),
        (
            "What kind of exercise class did {n} try {ca}?",
            "Which workout did {n} attend {ca}?",
        ),
        "When did {n} go to the {x} class?",
        "Which fitness classes has {n} tried?",
        (
            ("with my coworker", "with someone from work"),
            ("at the gym near my office", "at a gym close to {pp} workplace"),
            ("because my doctor told me to move more", "on {pp} doctor's advice"),
        ),
    ),
    Kind(
        "concert",
        "concert",
        ("Hozier", "Coldplay", "Lizzo", "Adele", "Radiohead", "Metallica"),
        (
            "{W} I saw {x} live {c}! I lost my voice from singing along.",
            "Best night ever {w}: {x}, {c}. I'm still on a high.",
            "I went to the {x} show {w} {c}. Worth every penny.",
        ),
        ("Which musician's concert did {n} go to {ca}?", "Who did {n} see perform {ca}?"),
        "When did {n} see {x} in concert?",
        "Which artists has {n} seen live?",
        (
            ("from the nosebleed seats", "from the cheapest seats"),
            ("with tickets I won on the radio", "using tickets won in a radio contest"),
            ("as a birthday treat to myself", "as a birthday treat"),
        ),
    ),
    Kind(
        "car",
        "car",
        ("Subaru", "Volvo", "Prius", "Jeep", "Mazda", "Corolla"),
        (
            "{W} I finally bought a car: a used {x}, {c}.",
            "Say hello to my new-to-me {x}! Picked it up {w}, {c}.",
        ),
        ("What vehicle did {n} purchase {ca}?", "What kind of car did {n} get {ca}?"),
        "When did {n} buy the {x}?",
        "Which cars has {n} owned?",
        (
            ("from my uncle", "from a relative"),
            ("with only forty thousand miles on it", "with low mileage"),
            ("after my old one died on the highway", "after {pp} old car broke down"),
        ),
        mood="mixed",
    ),
    Kind(
        "repaint",
        "home",
        ("teal", "mustard", "lavender", "coral", "navy", "charcoal"),
        (
            "{W} we painted {c} {x}. It feels like a new house.",
            "Home project done: we went with {x} for {c}! Finished it {w}.",
            "{W} I spent hours rolling {x} onto {c}. My shoulders hate me.",
        ),
        ("What color did {n} choose for {ca}?", "Which shade is {ca} at {n}'s place now?"),
        "When did {n} paint {ca} {x}?",
        "What colors has {n} used around the house?",
        (
            ("the living room", "the living room"),
            ("the bedroom", "the bedroom"),
            ("the kitchen cabinets", "the kitchen cabinets"),
            ("the front door", "the front door"),
        ),
    ),
)

BY_KEY = {kind.key: kind for kind in KINDS}

# The chain facts: a sibling moves away early; later the friend visits and does something.
CITIES = ("Denver", "Austin", "Seattle", "Nashville", "Phoenix", "Pittsburgh")
ACTIVITIES = ("kayaking", "snorkeling", "paragliding", "snowboarding", "ziplining", "rafting")
MOVES = (
    "Family news: my {sr} {s} just told me {sp} is moving to {x} for a new job. I'm happy "
    "for {so} but it's so far.",
    "{S}, my {sr}, is packing up and heading to {x}. The movers come next month. I'm going "
    "to miss having {so} twenty minutes away.",
    "So my little {sr} {s} got the job! {Sp} is relocating to {x} in the spring.",
)
VISITS = (
    "{W} I flew out to visit {s}, and we went {x} together. Best weekend in ages.",
    "I spent the weekend at {s}'s new place, got back {w}. We went {x} on Saturday and I "
    "screamed the whole time.",
    "Finally made it out to see my {sr} {w}! {S} talked me into {x}, which was terrifying "
    "and wonderful.",
)
ADOPTS = (
    "Big news: we adopted a {x} from the shelter {w}! We named {pit} {p}.",
    "Meet {p}, our new {x}! We brought {pit} home {w} and {pip} already owns the couch.",
)
BREEDS = {
    "dog": ("beagle", "dachshund", "corgi", "greyhound", "labrador", "schnauzer"),
    "cat": ("tabby", "siamese", "ragdoll", "bengal", "sphynx", "persian"),
}

WHEN = (
    "yesterday",
    "last weekend",
    "this morning",
    "on Saturday",
    "a couple of days ago",
    "last night",
    "earlier this week",
    "on Sunday",
)

TOPICS: dict[str, dict[str, tuple[str, ...]]] = {
    "painting": {
        "elicit": (
            "Have you been painting lately?",
            "How's the art going? Anything new on the easel?",
            "Are you still doing your art in the evenings?",
        ),
        "follow": (
            "How long did it take you?",
            "Did you use a photo for reference or just imagination?",
            "Are you going to frame it?",
            "What made you pick that subject?",
            "Oils or acrylics? I never know the difference.",
        ),
        "detail": (
            "Honestly the hardest part was the sky. I redid it twice.",
            "I mixed all the colors myself this time, lots of blues and a touch of gold.",
            "I'm thinking of getting it framed this week. It deserves a proper frame.",
            "It's not perfect, but art is my therapy these days. It helps me process stuff.",
            "I worked from a photo I took ages ago and then kind of ignored it halfway through.",
            "About six hours spread over a few nights, mostly with a podcast on.",
        ),
        "mention": (
            "I've been painting most evenings, just little studies, nothing worth showing yet.",
            "I bought new brushes for my painting this week, which I absolutely did not need.",
            "My painting corner has taken over half the living room. Nobody's complaining yet.",
            "I signed up for a weekend painting workshop next month. Nervous already.",
        ),
        "photo": (
            "a canvas drying on the kitchen table",
            "a paint-splattered palette next to a cup of tea",
            "a half-finished canvas propped against a window",
            "a row of brushes soaking in jars",
        ),
    },
    "running": {
        "elicit": ("Still running every morning?", "How's the training going?"),
        "follow": (
            "What was your time?",
            "How did your knees hold up?",
            "Was the course hilly?",
            "Did anyone come to cheer you on?",
        ),
        "detail": (
            "I finished a few minutes faster than I expected, which felt incredible.",
            "The last two miles were brutal, but the crowd kept me going.",
            "My knees are fine, my ego is sore. An old man with a cane nearly passed me.",
            "Running has become my thinking time. I sort out my whole week on those roads.",
            "There was one hill near the end that I'm convinced was added out of spite.",
            "A stranger handed me orange slices at mile eight and I nearly proposed.",
        ),
        "mention": (
            "I did a slow five miles this morning. Running in the cold is a special misery.",
            "My running shoes finally fell apart, so I'm breaking in a new pair. Blisters galore.",
            "I've been running with a podcast lately and I keep missing my turns.",
            "Training has been rough this week, my calves are like concrete.",
        ),
        "photo": (
            "a medal hanging on a hook by the door",
            "muddy running shoes on the porch",
            "a sweaty selfie at a finish line",
        ),
    },
    "pottery": {
        "elicit": ("How are the pottery classes?", "Made anything at the studio lately?"),
        "follow": (
            "Are you going to keep it or give it away?",
            "Is it hard to center the clay?",
            "What glaze did you use?",
            "How long does it take to fire?",
        ),
        "detail": (
            "Centering is still the hardest part. Half my attempts collapse.",
            "There's something so calming about getting your hands muddy after a long day.",
            "The instructor said my walls are finally even, which made my whole week.",
            "It has to dry for a week before it even goes in the kiln. Patience is not my thing.",
            "I used a speckled glaze that looks like a robin's egg. Total accident.",
        ),
        "mention": (
            "I spent three hours at the pottery studio and made nothing but lumpy bowls.",
            "Pottery class is my favorite part of the week right now, honestly.",
            "I have clay under my fingernails permanently at this point.",
        ),
        "photo": ("a shelf of glazed bowls", "muddy hands on a spinning wheel"),
    },
    "music": {
        "elicit": ("Are you still practicing music?", "How's the music coming along?"),
        "follow": (
            "Can you play a whole song yet?",
            "What made you choose that one?",
            "Do your neighbors complain?",
            "Is it hard to learn as an adult?",
        ),
        "detail": (
            "I can almost play a whole song now. Almost.",
            "I practice twenty minutes every night. The neighbors have been very gracious.",
            "My teacher is patient, thank goodness. I'm terrible at reading notes.",
            "It's humbling to be bad at something again, but in a good way.",
            "I always wanted to learn as a kid and never did. So this is for little me.",
        ),
        "mention": (
            "Music practice has been slipping this week. Too tired in the evenings.",
            "I've been learning scales and I'm pretty sure my brain is melting.",
            "I played in front of my teacher's other students and didn't die.",
        ),
        "photo": ("sheet music on a stand", "a music case leaning against a bookshelf"),
    },
    "garden": {
        "elicit": ("How's the garden doing?", "Anything growing in the garden?"),
        "follow": (
            "What are you going to do with all of it?",
            "Do you have problems with bugs?",
            "Did you start them from seed?",
        ),
        "detail": (
            "I'm giving half of it to the neighbors. There's no way I can eat it all.",
            "The slugs got some of it, but I fought back with coffee grounds.",
            "I started everything from seed on the windowsill back in March.",
            "Gardening has taught me patience. And humility. Mostly humility.",
            "I'm trying a new soup recipe with it tonight, fingers crossed.",
        ),
        "mention": (
            "I spent the whole afternoon weeding. My back is not happy with me.",
            "The garden is mostly weeds right now, but I'm choosing optimism.",
            "Something keeps digging up my garden at night. I suspect the squirrels.",
        ),
        "photo": ("a basket of vegetables on the porch", "muddy gardening gloves on a fence"),
    },
    "baking": {
        "elicit": ("Baked anything good lately?", "Are you still on your baking kick?"),
        "follow": (
            "Can you send me the recipe?",
            "How long did it take?",
            "Was it your first time making that?",
        ),
        "detail": (
            "It took most of the afternoon, but the kitchen smelled heavenly.",
            "It's my grandmother's recipe, with a little twist of my own.",
            "Sure, I'll write the recipe down for you. The secret is real butter.",
            "First time, yes! I watched about nine videos beforehand.",
            "I burned the first batch, so what people ate was attempt number two.",
        ),
        "mention": (
            "My oven runs hot and I've finally accepted it. Baking is war now.",
            "I've been baking bread every Sunday. The starter has a name now.",
            "I need to stop baking so much, my coworkers are getting suspicious.",
        ),
        "photo": ("a dessert on a cake stand", "a flour-covered counter and a rolling pin"),
    },
    "books": {
        "elicit": ("Reading anything good?", "What's on your nightstand these days?"),
        "follow": (
            "Would you recommend it?",
            "What did you think of the ending?",
            "Is it a long one?",
        ),
        "detail": (
            "Absolutely, I'd recommend it. I underlined half the pages.",
            "It's long, but it reads fast once you get into it.",
            "The ending made me sit in silence for a good ten minutes.",
            "Reading before bed instead of scrolling has honestly changed my sleep.",
        ),
        "mention": (
            "My to-read pile is taller than my cat at this point.",
            "I've been reading on my lunch breaks. Best part of the workday.",
            "I joined a library app and I'm dangerously close to my borrowing limit.",
        ),
        "photo": ("a stack of library books", "a paperback next to a mug of cocoa"),
    },
    "camping": {
        "elicit": ("Been outdoors much lately?", "Any camping this season?"),
        "follow": (
            "Did you see any wildlife?",
            "How was the weather?",
            "Was it crowded?",
        ),
        "detail": (
            "We saw a family of deer right by the tent in the morning!",
            "It was cold at night, but the campfire and marshmallows made up for it.",
            "Being out in nature like that resets my brain. No phone signal at all.",
            "Pretty quiet, actually. We had a whole meadow to ourselves one evening.",
        ),
        "mention": (
            "I bought a new sleeping bag. I'm already planning the next camping trip.",
            "I miss being outdoors. The office feels like a cage this week.",
            "We're talking about a camping weekend in the fall, if everyone's free.",
        ),
        "photo": ("a tent at the edge of a forest", "a campfire under a starry sky"),
    },
    "travel": {
        "elicit": ("Any trips coming up?", "Have you been traveling at all?"),
        "follow": (
            "What was the food like?",
            "Did you go alone?",
            "What was the highlight?",
        ),
        "detail": (
            "The highlight was wandering around with no plan and getting happily lost.",
            "The food was unbelievable. I still dream about a little bakery near the hotel.",
            "Travel always makes me feel like a slightly braver version of myself.",
            "I walked about fifteen miles a day. My feet filed a formal complaint.",
        ),
        "mention": (
            "I've been browsing flights at midnight again. It's a problem.",
            "I finally unpacked my suitcase from the last trip. Only took three weeks.",
        ),
        "photo": ("a narrow street with colorful houses", "a view from a plane window"),
    },
    "work": {
        "elicit": ("How's work these days?", "Anything new at the office?"),
        "follow": (
            "How did your boss react?",
            "Are you nervous?",
            "Is that a big step for you?",
            "Did you prepare a lot?",
        ),
        "detail": (
            "My boss seemed pleased, which is rare, so I'll take it.",
            "I'm nervous, but in a good way. It feels like people finally trust me.",
            "It means longer hours for a while, but it's the kind of work I wanted.",
            "I rehearsed in front of the bathroom mirror for three nights straight.",
            "A year ago I wouldn't have had the confidence. Therapy helped, honestly.",
        ),
        "mention": (
            "Work has been a blur of meetings. I had six back-to-back on Thursday.",
            "We got a new manager at work and nobody knows what to make of her yet.",
            "I stayed late at work twice this week. Trying not to make it a habit.",
            "My team at work is finally gelling. It's nice to actually like my coworkers.",
        ),
        "photo": ("a cluttered desk with two monitors", "a name badge on a lanyard"),
    },
    "kid": {
        "elicit": ("How's {k} doing?", "What's {k} up to these days?"),
        "follow": (
            "How old is {k} now?",
            "Did {k} enjoy it?",
            "Is {k} proud of it?",
            "How did {k} react?",
        ),
        "detail": (
            "{K} wouldn't stop talking about it at dinner. I love that kid.",
            "Honestly, watching {k} grow up is the best part of my life.",
            "{K} was nervous at first, but by the end there was no stopping that kid.",
            "{K} is nine now, going on forty. The questions I get asked at bedtime!",
            "We celebrated with pancakes for dinner, which is our family tradition.",
        ),
        "mention": (
            "{K} has decided to become a vegetarian. We'll see how long that lasts.",
            "Parent-teacher conferences this week. {K}'s teacher says {k} talks a lot. Shocking.",
            "{K} lost a tooth at school and was very businesslike about it.",
            "{K} asked me why the sky is blue and I had to look it up. Humbling.",
        ),
        "photo": ("a kid grinning in the backyard", "a kid holding up a homemade sign"),
    },
    "pet": {
        "elicit": ("How's {p}?", "How's your furry menace doing?"),
        "follow": (
            "Is {p} okay now?",
            "How did you react?",
            "Is {p} always that much trouble?",
        ),
        "detail": (
            "{P} is fine, curled up on my feet right now like nothing happened.",
            "I was annoyed for a minute, then {p} gave me the saddest eyes.",
            "Pets are so much work but I wouldn't trade {p} for anything.",
            "{P} has been extra clingy since, which I secretly love.",
        ),
        "mention": (
            "{P} has discovered the sunny spot by the window and refuses to leave it.",
            "{P} woke me up at five again. Every single day.",
            "I swear {p} understands the word 'walk' even when I spell it out.",
        ),
        "photo": ("a pet napping in a sunbeam", "a pet curled up on a blanket"),
    },
    "sib": {
        "elicit": ("How's your family?", "Heard from your family lately?"),
        "follow": (
            "How are you feeling about it?",
            "Will you go see them?",
            "What did your parents say?",
        ),
        "detail": (
            "I'm happy for {s}, but I'll miss our Sunday dinners.",
            "We video call a lot, but it's not the same as being in the same room.",
            "My parents are pretending to be fine. They're not fine.",
            "It made me realize how much I rely on {s} for everything.",
        ),
        "mention": (
            "{S} and I talked on the phone for two hours last night. Didn't even notice the time.",
            "{S} sent me a care package out of nowhere. Best sibling award.",
        ),
        "photo": ("two siblings hugging at an airport", "a family dinner table"),
    },
    "fitness": {
        "elicit": ("Still going to the gym?", "How's the exercise plan going?"),
        "follow": (
            "Was it hard?",
            "Will you go back?",
            "How do you feel today?",
        ),
        "detail": (
            "It was much harder than it looked. The instructor was barely sweating.",
            "I'm definitely going back next week, once I can move my arms again.",
            "I feel stronger already, even if that's mostly in my head.",
        ),
        "mention": (
            "I've been trying to move more. Even just walking after dinner helps my head.",
            "Gym was packed this week. New year's resolutions, apparently.",
        ),
        "photo": ("a water bottle and a gym towel", "a group class mid-workout"),
    },
    "concert": {
        "elicit": ("Been to any shows lately?", "Seen any live music lately?"),
        "follow": (
            "Did they play your favorite song?",
            "How was the crowd?",
            "Where were your seats?",
        ),
        "detail": (
            "They played my favorite song as the encore. I cried, obviously.",
            "The crowd was amazing, everyone singing every word.",
            "Live music hits different. I'd forgotten how much I missed it.",
        ),
        "mention": ("I've had the same album on repeat all week. Send help.",),
        "photo": ("a stage lit up in purple", "a crowd with phones in the air"),
    },
    "car": {
        "elicit": ("How's the car situation?",),
        "follow": ("Is it a good drive?", "What color is it?", "Was it expensive?"),
        "detail": (
            "It drives like a dream, and it has heated seats, which feels like luxury.",
            "It wasn't cheap, but I'd been saving for a while.",
            "Silver, the most boring color. I love it anyway.",
        ),
        "mention": ("Took the car in for an oil change. The waiting room coffee was awful.",),
        "photo": ("a car in a driveway with a bow on it", "car keys on a table"),
    },
    "home": {
        "elicit": ("Any home projects going on?",),
        "follow": ("Did you do it yourself?", "How many coats did it take?"),
        "detail": (
            "We did it all ourselves. Two coats and a lot of podcasts.",
            "It took a whole weekend, but it changes the whole feel of the place.",
        ),
        "mention": ("The house is a mess of half-finished projects right now.",),
        "photo": ("a freshly painted wall and a roller tray", "tape lines around a window"),
    },
}
GREETINGS = (
    "Hey {o}! How's it going?",
    "Hi {o}, it's been a while! What's new with you?",
    "Morning! Got a minute to catch up?",
    "Hey you! Hope your week has been kind to you.",
    "{o}! I feel like we haven't talked in ages. How are you?",
    "Hi! Finally a quiet evening. How have you been?",
    "Hello, stranger! What have you been up to?",
    "Hey {o}, sorry I went quiet for a bit. Life got busy. How are things?",
    "Hiya! I just sat down with a coffee and thought of you. How's everything?",
    "Good evening! Are you surviving the week?",
    "Hey! I've been meaning to message you all week. What's new?",
)
GREET_BACK = (
    "Hey {o}! Pretty good, busy as always. You?",
    "Hi! I'm doing alright, thanks for asking. How about you?",
    "Oh, hi! Great timing, I was just making tea. I'm good, you?",
    "Hey! It's been a week, let me tell you. But I'm okay. How are you?",
    "Hi {o}! Tired but happy. What's up with you?",
    "Hey! So good to hear from you. Things are fine here, how about you?",
    "Surviving, barely, haha. How are you doing?",
    "Hi there! Doing well, just got home. What's new on your end?",
    "Oh hey, I was literally about to text you! All good here. And you?",
)
GREET_ANSWER = (
    "I'm good! Lots going on.",
    "Can't complain. Well, I can, but I won't.",
    "Honestly, pretty great.",
    "Hanging in there.",
    "A bit frazzled, but fine.",
    "Better now that I'm talking to you.",
    "Busy, but the good kind of busy.",
    "Tired, but in a satisfied sort of way.",
    "Not bad at all, actually.",
)
REACT = {
    "up": (
        "That's amazing!",
        "No way, congrats!",
        "Wow, you must be thrilled!",
        "That's so cool, {o}!",
        "Oh, I love that for you.",
        "Yay! That's wonderful news.",
        "Look at you go!",
        "Stop, that's incredible!",
        "Okay, that is seriously impressive.",
        "I'm so happy for you!",
    ),
    "down": (
        "Oh no, that's rough.",
        "I'm so sorry, that sounds stressful.",
        "Ugh, poor thing.",
        "Oh dear. That's a lot to deal with.",
        "That's awful, I'm sorry.",
    ),
    "mixed": (
        "Ha! Oh no.",
        "Well, that's one way to spend a week.",
        "Oh wow, okay.",
        "I don't know whether to laugh or sympathize.",
        "Classic, honestly.",
    ),
}
FOLLOW_ANY = (
    "How did that feel?",
    "Was it what you expected?",
    "What made you decide to do it?",
    "Tell me everything!",
    "How are you feeling about it now?",
)
RELATE = (
    "That reminds me, I've always wanted to try something like that.",
    "I remember you talking about this a while ago!",
    "You've been working toward that for so long.",
    "I need to take a page out of your book.",
    "Honestly, you inspire me.",
    "I wish I had half your energy.",
    "You make it sound so easy.",
)
AFTER = {
    "up": (
        "I'm still smiling about it.",
        "Honestly, it made my whole month.",
        "I didn't think I had it in me.",
        "Small wins, right?",
        "I wanted you to be the first to know.",
        "",
        "",
        "",
    ),
    "down": ("It's been a rough few days.", "I'm trying not to panic.", "", ""),
    "mixed": ("Never a dull moment around here.", "Life, huh?", "", ""),
}
COMMENT = (
    "Love that.",
    "You should be proud of yourself.",
    "I can totally picture it.",
    "Sounds like it was worth it.",
    "That's so you, honestly.",
    "Aw, that made me smile.",
    "I'm glad it worked out.",
    "You always find a way to make things fun.",
    "Good for you, seriously.",
    "Ha, I believe it.",
    "That sounds really lovely.",
    "I'm taking notes.",
)
PHOTO_COMMENT = (
    "Oh my gosh, that picture!",
    "Wow, thanks for sharing that.",
    "That's beautiful.",
    "Ha, great shot.",
    "That photo is gorgeous!",
    "Okay, I'm setting that as my wallpaper.",
)
LEAD = (
    "Anyway, I have news too!",
    "Oh, speaking of which,",
    "So, something happened this week.",
    "Okay, my turn for an update.",
    "Random, but",
    "Oh! I almost forgot to tell you.",
    "By the way,",
    "Okay so,",
    "Update from my end:",
    "",
    "",
    "",
)
# A second thought after a small-talk answer, by the CHIT entry it follows.
CHIT_TAILS: tuple[tuple[str, ...], ...] = (
    (
        "Typical for this time of year.",
        "I keep checking the forecast like it owes me money.",
        "The neighbors' kids were out in it anyway.",
        "Perfect excuse to stay in with a blanket.",
        "My tomatoes on the windowsill are very confused.",
        "I've given up on planning anything outdoors.",
    ),
    (
        "You'd like it, I think.",
        "I'll send you the name.",
        "I keep telling myself one more episode.",
        "Don't judge my taste.",
        "It's the only thing I look forward to after work.",
    ),
    (
        "Wish me luck.",
        "I'm weirdly excited about it.",
        "Honestly, that's my idea of a perfect weekend.",
        "We'll see if I actually do it.",
        "Adulthood is glamorous.",
    ),
    (
        "I really need to learn a few more recipes.",
        "No regrets.",
        "My cooking skills peak at about three dishes.",
        "I'll do better tomorrow. Maybe.",
        "Sometimes simple is best.",
    ),
    (
        "Sleep is such a mystery.",
        "I'm trying to be strict about bedtime.",
        "Coffee is holding me together.",
        "Everyone keeps recommending magnesium.",
    ),
    (
        "Counting down to the weekend.",
        "It is what it is.",
        "At least the people are nice.",
        "I've been bringing snacks to keep morale up.",
    ),
    (
        "I'll send you the link.",
        "It makes the dishes go faster.",
        "My taste is all over the place.",
        "It's on every time I cook.",
    ),
    (
        "We should all get together soon.",
        "It made me a bit nostalgic.",
        "Time really flies.",
        "Everyone's growing up, it's wild.",
    ),
    (
        "Thanks for asking, really.",
        "Talking helps, honestly.",
        "I'm getting there.",
        "One step at a time.",
    ),
    (
        "I love a good wander.",
        "I need to get out more, honestly.",
        "There's always something new around here.",
    ),
    (
        "Never a dull moment.",
        "Apartment life, right?",
        "I should bake them something.",
    ),
    (
        "They send their love, by the way.",
        "I should visit more often.",
        "Parents are funny.",
    ),
)
ASIDES = (
    "I've been trying to drink more water, with mixed results.",
    "My houseplants are multiplying. I think they're plotting something.",
    "The coffee machine at work broke and morale is at an all-time low.",
    "I cleaned out my junk drawer and found chargers for three phones I no longer own.",
    "I keep meaning to call my grandma more often. Adding it to the list.",
    "Someone in my building plays the piano at night and it's weirdly soothing.",
    "I've started walking without headphones. It's surprisingly nice to just think.",
    "My phone says my screen time went up forty percent, which feels personal.",
    "I bought a fancy notebook and now I'm too scared to write in it.",
    "I'm learning to say no to things. It feels rude but freeing.",
    "I tried meditating this week and mostly thought about sandwiches.",
    "Honestly, I'm just trying to take things one day at a time lately.",
    "The days are flying by. How is it already this late in the year?",
    "I've been making an effort to get outside every day, even just for ten minutes.",
    "I reorganized my closet and now I can't find anything.",
    "My back has been acting up, so I'm finally doing those stretches.",
    "I had the strangest dream about being late for an exam I didn't study for.",
    "I've been writing little gratitude lists before bed. Cheesy, but it helps.",
    "Our internet went down for a whole day and I didn't know what to do with myself.",
    "I caught up with an old coworker for coffee. Felt like no time had passed.",
    "I've been cooking more at home to save money, and it's kind of fun.",
    "A stranger complimented my jacket today and I've been riding that high since.",
    "I'm trying to read the news less. It's not great for my mood.",
    "I signed up for a first-aid course through work. Feels like a useful grown-up thing.",
    "I finally fixed the wobbly table, using a folded-up coaster. Engineering.",
    "The sunsets have been unreal lately. I keep stopping to stare.",
    "I've been thinking a lot about what I want the next few years to look like.",
    "Friday can't come soon enough this week.",
    "I finally booked that dentist appointment I've been avoiding for a year.",
    "My neighbor's kid sold me lemonade today and drove a hard bargain.",
    "I've been getting up a bit earlier and actually enjoying the quiet mornings.",
    "I accidentally dyed all my white socks pink. Very festive.",
    "I went to bed at nine one night this week and felt like a new person.",
    "I'm on a mission to finish every half-used candle in the apartment.",
    "The grocery store moved everything around and I wandered like a lost tourist.",
    "I started keeping a little list of nice things people say to me.",
    "I helped an old lady carry her shopping and she told me her whole life story.",
    "I've been trying to spend less time on my phone before bed. Day three and going okay.",
    "My landlord finally fixed the heater, so I can feel my toes again.",
    "I found a twenty-dollar bill in an old coat pocket. Best day of the month.",
    "I got lost on the way to a friend's place even with the map open.",
    "There's a cat in my street that follows me home every evening. We're friends now.",
    "I tried a new coffee shop and the barista drew a lopsided heart in my latte.",
    "I'm trying to be better at replying to messages. Starting with you!",
    "My to-do list has become more of a wish list at this point.",
    "I spent an embarrassing amount of time choosing a new shower curtain.",
    "I watched the rain from the window for an hour and called it self-care.",
    "I've been doing a puzzle with a thousand pieces. Nine hundred of them are sky.",
    "I had a long talk with my dad on the phone. He's getting sentimental in his old age.",
    "I cleaned the fridge and discovered things I'd rather not describe.",
    "My car made a new noise this week, and I'm choosing to ignore it.",
    "I've started saying hi to the mail carrier. We're basically best friends now.",
    "I donated a whole bag of clothes. Felt lighter immediately.",
    "I'm trying to get better at asking for help, which is harder than it sounds.",
    "I stayed up way too late watching videos of people restoring old furniture.",
    "I've been thinking about taking a proper vacation, somewhere with no emails.",
    "My sleep schedule is a mess again, but I'm working on it.",
    "A friend sent me a voice note that was eleven minutes long. I loved every second.",
    "I tried to fix a leaky tap myself. The plumber is coming on Monday.",
    "I've been making a real effort to cook vegetables that aren't potatoes.",
    "I rearranged the living room furniture at midnight. No regrets.",
    "My inbox hit a thousand unread emails and I've decided that's fine.",
    "I've been wearing the same comfy sweater for three days straight.",
    "A little bird has been visiting my windowsill every morning. I've named it Gerald.",
    "I went to a trivia night and we came dead last. Still fun.",
    "I've been trying to journal, but mostly I write down what I ate.",
    "I've realized I need more plants and fewer screens in my life.",
    "I burned toast twice this week. Two separate mornings. Skills.",
)
ASIDE_LEADS = ("", "Honestly,", "Also,", "Oh, and", "Unrelated, but", "In other news,")
ASK_BACK = ("What about you?", "And you?", "How about you?", "You?", "How's yours?")
ACK = (
    "Ha, fair enough.",
    "Same here, honestly.",
    "That sounds nice.",
    "Oh, I hear you.",
    "Totally.",
    "Makes sense.",
    "Ha! Relatable.",
    "Honestly, same.",
    "Oh, that's lovely.",
    "I can imagine.",
    "Oof, yeah.",
    "Ha, that's the dream.",
)
CLOSE = (
    "I should get going, dinner won't cook itself. Talk soon!",
    "Gotta run, let's catch up again soon!",
    "Okay, I need to sleep. This was nice.",
    "I have to head out, but thanks for chatting!",
    "Time for me to go. Take care of yourself!",
    "Oh, look at the time. I'd better go. Chat later?",
    "My battery's about to die, so I'll say bye for now!",
    "I've got an early start tomorrow, so I'll leave it there. Love catching up with you.",
)
CLOSE_BACK = (
    "Bye! Take care.",
    "Talk soon, {o}!",
    "Night! Sleep well.",
    "Always a pleasure. Bye for now!",
    "Catch you later!",
    "Of course! Speak soon.",
    "Bye, {o}! Let's not leave it so long next time.",
)
# Small talk: a question and how it may be answered, some answers put together from parts.
CHIT: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (
        (
            "How's the weather over there?",
            "Is it still freezing where you are?",
            "Did that storm reach you guys?",
            "Are you getting any sun this week?",
        ),
        (
            "Gray and drizzly all week. I'm so ready for some sunshine.",
            "Hot! Way too hot. I've been living in front of a fan.",
            "Gorgeous, actually. I ate lunch outside every day.",
            "Windy. My umbrella died a heroic death on Tuesday.",
            "The storm knocked out our power for a few hours. We played cards by candlelight.",
            "Foggy mornings, bright afternoons. Weird, but I like it.",
            "It snowed a little, then immediately turned to slush.",
            "Humid. My hair has given up entirely.",
        ),
    ),
    (
        (
            "Watching anything good lately?",
            "Any shows you'd recommend?",
            "Seen any good movies recently?",
        ),
        tuple(
            f"I started {'an' if g[0] in 'aeiou' else 'a'} {g} about {s}. {c}"
            for g, s, c in zip(
                (
                    "cooking competition",
                    "true crime documentary",
                    "British detective series",
                    "slow nature documentary",
                    "reality show",
                    "period drama",
                    "animated series",
                    "sci-fi miniseries",
                ),
                (
                    "a small fishing town",
                    "octopuses",
                    "a family of eccentric inventors",
                    "a hotel in the Alps",
                    "competitive dog groomers",
                    "a missing heiress",
                    "a group of retirees solving crimes",
                    "a retired ferry captain",
                ),
                (
                    "It's trashy and I love it.",
                    "Three episodes in and hooked.",
                    "Perfect for falling asleep to.",
                    "My friend won't stop texting me about it.",
                    "I didn't expect to cry, but here we are.",
                    "The costumes alone are worth it.",
                    "It's a bit silly, but it's comforting.",
                    "I've been rationing it, one episode a night.",
                ),
                strict=True,
            )
        ),
    ),
    (
        (
            "Any plans for the weekend?",
            "What are you up to this weekend?",
            "Doing anything fun this weekend?",
        ),
        (
            "Absolutely none, and I intend to protect that.",
            "Cleaning the apartment, sadly. It's gotten out of hand.",
            "Brunch with some friends, then probably a nap.",
            "Might visit my parents. My mom keeps asking.",
            "Helping a friend move. I've been promised pizza.",
            "A day trip to the coast if the weather holds.",
            "Repotting every plant I own. It's overdue.",
            "My cousin's baby shower. I have no idea what to bring.",
            "Fixing the squeaky door that's been haunting me for a month.",
        ),
    ),
    (
        (
            "What did you have for dinner?",
            "Cooked anything nice lately?",
            "Tried any new restaurants?",
        ),
        (
            "Leftover pasta, standing over the sink. Very glamorous.",
            "Tacos! It's always tacos on Tuesdays in this house.",
            "I tried a new curry recipe. Too spicy, still ate it all.",
            "Cereal. Don't judge me.",
            "We found a tiny dumpling place around the corner. I've been three times.",
            "Soup, because it's that kind of week.",
            "A very ambitious stir-fry that set off the smoke alarm.",
            "Takeout noodles and a movie. Perfect evening.",
        ),
    ),
    (
        ("Are you sleeping any better?", "Are you getting enough rest?"),
        (
            "A little. I've stopped looking at my phone in bed, which helps.",
            "Not really. My brain likes to replay every awkward moment at 2 a.m.",
            "Yes! I got blackout curtains and it's life-changing.",
            "I nap on Sundays now. It's my new personality.",
        ),
    ),
    (
        ("How's the commute treating you?", "Busy week otherwise?"),
        (
            "The bus was late every single day this week.",
            "I've started cycling part of the way. My legs are confused.",
            "Honestly fine. Podcasts make it bearable.",
            "Meetings, meetings and more meetings. I forgot what daylight looks like.",
            "Quiet, which is suspicious. I'm waiting for the other shoe to drop.",
        ),
    ),
    (
        ("Listening to anything good?", "Got any podcast recommendations?"),
        (
            "A podcast about unsolved mysteries. I can't stop.",
            "Old jazz records my dad gave me. Very cozy.",
            "Same playlist on repeat for a month now, as usual.",
            "A history podcast about shipwrecks. Grim but fascinating.",
            "Mostly rain sounds, to be honest. I'm very boring.",
        ),
    ),
    (
        (
            "Have you talked to our old friends from school lately?",
            "Any news from the old gang?",
        ),
        (
            "A few of them! There's talk of a reunion dinner.",
            "Not really. Everyone's so busy these days.",
            "I bumped into one at the grocery store. Still exactly the same.",
            "Jess got engaged! She sent the most dramatic ring photo.",
            "Theo finally quit that awful job. We're all relieved.",
            "Hannah had twins, did you hear? Twins!",
        ),
    ),
    (
        ("How are you feeling these days, honestly?", "How's your headspace lately?"),
        (
            "Better than last month. Slowly finding my footing.",
            "Up and down. Some days are easier than others.",
            "Pretty good! I've been trying to be kinder to myself.",
            "Calmer. I've started journaling, of all things.",
            "A bit overwhelmed, but I'm working on saying no to things.",
        ),
    ),
    (
        ("Did you end up going to that farmers market?", "Been anywhere nice around town?"),
        (
            "I did! I came home with way too much honey.",
            "No, it rained. Next week, hopefully.",
            "Yes, and I talked to a man about mushrooms for twenty minutes.",
            "There's a new bookshop downtown. I lost two hours in there.",
        ),
    ),
    (
        ("How are the neighbors?", "Is your upstairs neighbor still noisy?"),
        (
            "The upstairs guy is learning drums. Pray for me.",
            "Lovely, actually. They left cookies on my doorstep.",
            "Someone keeps stealing our recycling bin. It's a whole saga.",
            "New people moved in next door. They have three dogs, so it's lively.",
        ),
    ),
    (
        ("How are your parents doing?", "How's your mom?"),
        (
            "Good! Dad has discovered audiobooks and won't shut up about them.",
            "Mom had a cold, but she's on the mend.",
            "They're thinking about retiring somewhere warm. Still just talk.",
            "They finally learned to video call. Mostly I see their foreheads.",
        ),
    ),
)
GENERIC_ELICIT = (
    "Anything new with you?",
    "What's new in your world?",
    "Any news on your end?",
    "So what's been going on with you?",
)
HEADERS = ("[{d} {m} {y}]", "[{t} on {d} {m}, {y}]", "[{wd}, {d} {m} {y}]")

NAMES_SHE = ("Caroline", "Melanie", "Maria", "Priya", "Jolene", "Audrey", "Gina", "Deborah")
NAMES_HE = ("John", "Tom", "Nate", "Evan", "Calvin", "Andrew", "Dev", "Marcus")
KIDS = {"daughter": ("Emma", "Lily", "Zoe", "Ava"), "son": ("Leo", "Max", "Owen", "Finn")}
PETS = ("Biscuit", "Pepper", "Mochi", "Waffles", "Ziggy", "Noodle")
SIBS = {"sister": ("Dana", "Rosa", "Tess", "Nina"), "brother": ("Luke", "Omar", "Ben", "Raf")}
HOBBIES = ("painting", "running", "pottery", "music", "garden", "baking", "books", "camping")
EXTRA = ("travel", "fitness", "concert", "car", "home")


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
class Question:
    category: str
    text: str
    evidence: list[int]
    answer: list[str]


@dataclass
class Turn:
    """What the last message asks of the next speaker."""

    kind: str  # greet, greetq, event, follow, detail, chitq, chitback, elicit, plain
    event: Event | None = None
    chit: int = -1
    round: int = 0
    topic: str = ""


@dataclass
class Chat:
    messages: list[dict[str, str]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


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


NAMES = {
    *NAMES_SHE,
    *NAMES_HE,
    *PETS,
    *(n for names in KIDS.values() for n in names),
    *(n for names in SIBS.values() for n in names),
}


# Words that may start a sentence put after a lead-in ("By the way,") in lower case.
COMMON = frozenset(
    {
        "my",
        "the",
        "a",
        "an",
        "someone",
        "there's",
        "there",
        "our",
        "honestly",
        "just",
        "so",
        "guess",
        "big",
        "kitchen",
        "work",
        "clay",
        "okay",
        "finally",
        "new",
        "best",
        "say",
        "home",
        "took",
        "meet",
        "family",
        "proud",
        "survived",
        "we",
        "yesterday",
        "last",
        "this",
        "on",
        "earlier",
        "pets",
        "it",
        "it's",
        "some",
        "that",
        "his",
        "her",
        "little",
        "sometimes",
        "everyone",
    }
)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_other", description=__doc__)
    parser.add_argument("out", help="where to write the conversations, one JSON a line")
    parser.add_argument("--count", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    tally: Counter[str] = Counter()
    with open(args.out, "w", encoding="utf-8") as fh:
        for _ in range(args.count):
            chat = conversation(rng)
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
