"""The relevance floor: which of a question's words count, and which archived messages pass.

Pure, over postings (the indexed messages each word occurs in) and message
texts; `proxy.store.search` runs the queries and ranks what passes by BM25.
What a message asks (its sentences ending in "?") is here too: the search
looks up the replies of hits that ask, and recall keeps those that ask about
the question.

BM25 scores are relative, so "the best match" of an unrelated question is
still a match. The floor asks more of a hit than a score:

- The question's words the conversation never used count at half the weight
  of a word said once: a question may bring a new word along with an old
  subject, but one that shares a single word with the conversation is likely
  about something never said. A name the question writes (capitalised) and
  the conversation never did weighs nothing: the sides call that person
  otherwise ("Mel" for "Melanie"), or it is a stranger.
- The names the two sides call each other by do not count. A question about a
  participant names them in the third person ("What does Evan drive?"), while
  they state facts in the first person ("I got a Prius"); the name is in the
  greetings instead ("Hey Evan!"), which it would rank first.
- Of the rest, the specific words (in at most 2 messages or 5 % of the
  conversation, and not bare numbers) decide: a hit must contain one of them,
  and its matched words must carry at least half of the question's IDF
  weight, unless the word is in at most 2 messages: a word said once or twice
  and asked about is what the question is about, however many words it
  frames it with that the conversation never used ("What shade is the bedroom
  at Dev's place now?" for "we painted the bedroom navy"). A question asking
  beyond its subject (with a word the conversation never used) may instead
  have two of its words meet in a hit, when they meet as seldom: a running
  interest's word and a verb, each said every session, said together once. A
  question that shares only the conversation's everyday words finds nothing,
  nor does one that shares only a number ("day 50" against "budget 50 euros").
- A question that names whom or what it asks about (a word it writes
  capitalised inside a sentence, not to address the other side: "What did
  Melanie's son start at the Y?") needs only a specific word, not the share.
  Such a question is asked from outside what was said (in the third person,
  by someone reading the conversation back), in words of its own, and the
  statement said it in the first person and its own words ("Owen had his
  first gymnastics class, at the YMCA downtown"): how many words they share
  says little, and BM25 orders what passes. A question to the other side
  ("How was the hike?") names no one, and keeps the share.
- What a turn says rather than asks (a statement, or the sentences of a turn
  that read as neither a question nor a request to recall:
  `proxy.english.asking`) is searched as a question is, but only the words in
  at most 2 messages are specific, and they need their share. Chat
  turns share everyday words with much of what was said before ("the garden
  near my aunt's house"); a recall block for each of them costs tokens and
  the provider's prompt cache every turn, for quotes the turn did not ask
  for. A statement that names something said once ("our beagle chewed my
  shoes again") still brings it back.
- The words of the hits recall chose (pseudo-relevance feedback,
  `proxy.feedback`) lead only where one of them is said in at most 2 other
  messages: there it names what the hit does.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence, Set

from ..english import SENTENCE
from .base import SearchHit

MATCHED_SHARE, UNSEEN_SHARE = 0.5, 0.5
RARE_DOCS, RARE_SHARE = 2, 0.05
# A word is a name the sides call each other by when at least this share of the
# messages it occurs in (of the first `ADDRESS_SAMPLE`) use it so, and at least
# `ADDRESSED_MIN` of them, or every one of at least `ADDRESSED_ALL` (a name said
# only to greet, but seldom: then it is rare, and would carry the floor's weight).
ADDRESSED_SHARE, ADDRESSED_MIN, ADDRESSED_ALL, ADDRESS_SAMPLE = 0.5, 3, 2, 40
_GREETING = r"(?i:hi|hey|hello|hiya|thanks|thank you|bye|dear|congrats|congratulations|morning)"


def addressing(word: str) -> re.Pattern[str]:
    """`word`, capitalised, used to address someone.

    After a greeting ("Hey Evan!", "Thanks, Evan."), closing a sentence after a
    comma ("Talk soon, Evan."), or opening a line with "!" or "," ("Evan! Long
    time."). Names are written capitalised: a chat in lower case has none found.
    """
    name = re.escape(word[:1].upper() + word[1:])
    return re.compile(
        rf"\b{_GREETING},?\s+{name}\b(?=\s*(?:[,!.?]|$))"
        rf"|,\s+{name}\s*[!.?]"
        rf"|^\s*{name}\s*[!,]",
        re.MULTILINE,
    )


def addressed(word: str, texts: Iterable[str]) -> bool:
    """Whether the messages containing `word` mostly use it to address someone."""
    pattern = addressing(word)
    sample = list(texts)[:ADDRESS_SAMPLE]
    used = sum(1 for text in sample if pattern.search(text))
    if used == len(sample):
        return used >= ADDRESSED_ALL
    return used >= max(ADDRESSED_MIN, ADDRESSED_SHARE * len(sample))


def unaddressed(hits: Sequence[SearchHit], names: Iterable[str]) -> list[SearchHit]:
    """The `hits` that address none of `names` ("Talk soon, Evan!"), in their order."""
    spoken_to = [addressing(name) for name in names]
    return [h for h in hits if not any(p.search(h.text) for p in spoken_to)]


def questions(text: str) -> list[str]:
    """The sentences of `text` that ask something (end in "?"), as written."""
    found = (m.group().strip() for m in SENTENCE.finditer(text))
    return [s for s in found if s.endswith("?")]


def idf(total: int, docs: int) -> float:
    return math.log(1 + (total - docs + 0.5) / (docs + 0.5))


def passing(
    postings: Mapping[str, Set[int]], total: int, *, asks: bool = True, about: bool = False
) -> list[int]:
    """The messages (by id) that pass the floor, for the question's counted words' postings.

    `asks` is false for a turn that asks nothing: then only words in at most
    `RARE_DOCS` messages are specific. `about`: the question names someone or
    something, and any message with a specific word passes.
    """
    seen = {w: p for w, p in postings.items() if p}
    weights = {w: idf(total, len(p)) for w, p in seen.items()}
    rare = max(RARE_DOCS, RARE_SHARE * total) if asks else RARE_DOCS
    # Bare numbers (days, amounts, counts) recur by coincidence: never specific alone.
    specific = {w for w, p in seen.items() if len(p) <= rare and not w.isdigit()}
    # A question with a word the conversation never used asks beyond its subject:
    # two of its words said together as seldom as a specific word name one moment
    # of an everyday subject ("what animal did you see while hiking").
    new = sum(1 for w, p in postings.items() if not p and not w[:1].isupper())
    together = _met(seen, rare) if asks and new else set()
    if not specific and not together:
        return []
    # Everyday words the question shares need not be in a hit: a statement rarely
    # repeats the question's framing ("How old is ...") around its specific word.
    # New words weigh less than a word said once: "passport renewal" still finds "passport".
    # A name the conversation never wrote is someone the sides call otherwise ("Mel"
    # for "Melanie") or a stranger: no message holds it either way, so it weighs nothing.
    unseen = new * UNSEEN_SHARE * idf(total, 1)
    weight = sum(weights.values()) + unseen
    carried: defaultdict[int, float] = defaultdict(float)
    for w, ids in seen.items():
        for i in ids:
            carried[i] += weights[w]
    has_specific = set().union(*(seen[w] for w in specific)) | together
    passed = {i for i in has_specific if carried[i] >= MATCHED_SHARE * weight}
    # A word said in one or two messages and asked about names what the question is
    # about, however the question words the rest ("Which shade is the bedroom now?"
    # for "we painted the bedroom navy"): its messages need no share of the weight.
    if asks:
        passed.update(*(seen[w] for w in specific if len(seen[w]) <= RARE_DOCS))
    # A question that names whom or what it asks about is asked from outside what was
    # said, in its own words; see the module's docstring.
    if asks and about:
        passed |= has_specific
    return sorted(passed)


def bridged(postings: Mapping[str, Set[int]], hits: Set[int]) -> list[int]:
    """The messages (by id), other than the `hits` (recall's chosen ones), that hold a word
    of the hits that `leads` somewhere: what the feedback words lead to."""
    return sorted(set().union(*(p - hits for w, p in postings.items() if leads(w, p, hits))))


def leads(word: str, messages: Set[int], hits: Set[int]) -> bool:
    """Whether `word`, in the `messages` (by id), is one of the `hits` said in at most
    `RARE_DOCS` other messages.

    Such a word names the same thing there (a dog's name, a car's make), as a
    question's own specific word does; an everyday word the hits hold too leads
    anywhere, and bare numbers recur by coincidence.
    """
    others = len(messages - hits)
    return bool(messages & hits) and 0 < others <= RARE_DOCS and not word.isdigit()


def _met(seen: Mapping[str, Set[int]], rare: float) -> set[int]:
    """The messages where two of the words (not bare numbers) meet, in at most `rare`."""
    words = [w for w in seen if not w.isdigit()]
    found: set[int] = set()
    for i, first in enumerate(words):
        for second in words[i + 1 :]:
            both = seen[first] & seen[second]
            if len(both) <= rare:
                found |= both
    return found
