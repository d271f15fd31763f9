"""Recall: archived messages a reduction took out come back when the question returns to them.

Pure query-building, selection and placement. The store ranks (FTS5 BM25 or
stored embeddings, with their relevance floors, in `proxy.store.search`);
the app decides the budget. Hits already forwarded this turn are dropped, and
the rest are quoted as text in one `system` message placed right before the
last user message: tool results become quotes, never raw `tool` messages, so
tool-chain integrity holds, and the previous turn's cached prefix survives.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence, Set

from .dialects import Dialect
from .english import (
    FORMS,
    FRAMING,
    MANNER,
    SENTENCE,
    STOPWORDS,
    first_person,
    forms,
    passages,
    porter,
)
from .messages import Message
from .store import relevance
from .store.base import SearchHit

WORD = re.compile(r"[^\W_]{3,}|\d{2,}", re.UNICODE)
# Also shorter: a verb of two letters has longer forms ("go", "went").
_ANY_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def words(text: str) -> list[str]:
    """The question's searchable words, lower-cased, without stopwords, each once.

    The word right after "how" is the measure the question asks for ("How old is
    ...", "how long", "how far"): it frames the question, and the answer gives a
    number instead. No stemming here: FTS5's porter tokenizer stems both sides.
    """
    found = [m.lower() for m in _ANY_WORD.findall(text)]
    measures = {w for how, w in itertools.pairwise(found) if how == "how"}
    return list(
        dict.fromkeys(
            w
            for w in found
            if (WORD.fullmatch(w) or w in FORMS)
            and w not in STOPWORDS
            and w not in FRAMING
            and w not in measures
        )
    )


def terms(text: str) -> list[tuple[str, ...]]:
    """The question's search terms: each word with the other forms of its verb.

    A name is passed capitalised, as the question writes it (FTS5 ignores case;
    the floor weighs names differently). A name the text addresses ("How was the
    hike, Evan?") is whom it speaks to, not what it is about: left out, unless the
    text also names it otherwise.
    """
    named = _names(text)
    # Spoken to only: a name the question also writes otherwise ("Thanks, Evan. What did
    # Evan buy?") is what it asks about.
    spoken_to = {
        w
        for w, name in named.items()
        if len(relevance.addressing(name).findall(text))
        >= len(re.findall(rf"\b{re.escape(name)}\b", text))
    }
    return [
        forms(w) if w in FORMS else (named.get(w, w),) for w in words(text) if w not in spoken_to
    ]


def _names(text: str) -> dict[str, str]:
    """The words `text` writes as names, by their lower case: capitalised inside a
    sentence, and nowhere in lower case (capitals throughout are no sign). A line or
    what follows a colon opens a sentence too ("Quick question:\nBudget for the trip?")."""
    names: dict[str, str] = {}
    common: set[str] = set()
    end = -1  # before the first word: a sentence opens
    for m in _ANY_WORD.finditer(text):
        opens = end < 0 or any(c in ".!?:\n" for c in text[end : m.start()])
        word, end = m.group(), m.end()
        if word.islower():
            common.add(word)
        elif word[:1].isupper() and not word.isupper() and not opens:
            names.setdefault(word.lower(), word)
    return {w: name for w, name in names.items() if w not in common}


def stems(text: str) -> frozenset[str]:
    """The stems of `text`'s words and of their verbs' other forms ("saw" meets "see")."""
    return frozenset(porter(form for w in words(text) for form in forms(w)))


def as_searched(texts: Iterable[str]) -> tuple[frozenset[str], int]:
    """`texts` as a search returns them: whole, and a long one also by its passages
    (`english.passages`), so that a hit on a passage of a forwarded message is known
    as forwarded; and how many index rows they make (repeats counted)."""
    out: set[str] = set()
    rows = 0
    for text in texts:
        out.add(text)
        parts = passages(text)
        rows += len(parts)
        if len(parts) > 1:
            out.update(part.strip() for part in parts)
    return frozenset(out), rows


def fresh(
    hits: Sequence[SearchHit],
    question: str,
    context: Sequence[str],
    k: int,
    *,
    unjudged: Set[int] = frozenset(),
    forwarded: Set[str] | None = None,
    meant: Set[int] = frozenset(),
    quoted: Sequence[SearchHit] = (),
) -> list[SearchHit]:
    """The first `k` hits that tell the model something `context` does not already.

    `hits` come best first; `context` holds the texts of the conversation
    messages forwarded this turn, the question excluded. Recall exists to
    bring back what the context lacks, so:

    - hits that do not outscore every message the model already sees add
      nothing: the context answers to the question about as well (the search
      ranks forwarded messages too, when the archive has them; embeddings hits
      come cut by their margin already, see `outranking`);
    - a judged hit whose matched question words all appear in one forwarded message
      is covered by it (a recurring question would otherwise recall its own
      earlier instances every time), when that message shares two of the
      question's words or all of them (`_covered`), or any one for a hit
      found by meaning alone (`meant`, by seq: an embeddings hit, which no
      word of the question ranked above the forwarded messages);
    - neither rule judges the hits (by seq) `unjudged`: those the words of a
      question asking beyond them found (`asks_beyond`), whose shared words
      name only its subject, so that a forwarded message sharing them says
      nothing of whether the answer is forwarded;
    - the question itself, and repeats of an earlier hit, are skipped, as is a judged
      hit whose sentences on the question's words the forwarded hits or those chosen
      hold already (`_on`);
    - a hit keeps the replies it carries only when it asks about the question,
      and only those neither forwarded nor quoted already;
    - a hit keeps the message it followed (its `prompt`, the other side's) only
      when it reacts (`reacts`), and only when neither forwarded nor quoted already.

    `forwarded` is `as_searched(context)`'s texts, when the caller has them;
    `quoted`, hits chosen before (by another search) whose sentences count as said.
    """
    wanted = stems(question)
    groups = word_groups(question)
    if forwarded is None:
        forwarded, _ = as_searched(context)
    # The scan over the context only serves the hits the rules judge.
    judged = any(h.seq not in unjudged for h in hits)
    covered = covering(context, wanted) if judged else []
    seen = {question.strip()}
    # Messages quoted whole as what a hit reacts to: a passage of one is quoted already.
    prompted: set[int] = set()
    # The sentences on the question's words that the model reads: in the forwarded hits,
    # then in those chosen.
    reads = [*(h.text for h in hits if h.text in forwarded), *(h.text for h in quoted)]
    told = set().union(*(_on(text, wanted) for text in reads))
    chosen: list[SearchHit] = []
    for hit in outranking(hits, forwarded, unjudged=unjudged):
        if hit.text in seen or hit.seq in prompted:
            continue
        seen.add(hit.text)
        # A question asking beyond its subject matches the subject's routine sentences:
        # its answer is in another sentence, so neither rule judges its (unjudged) hits.
        judged = hit.seq not in unjudged
        says = _on(hit.text, wanted)
        if judged and says and says <= told:
            continue
        matched = stems(hit.text) & wanted
        if judged and _covered(matched, groups, covered, hit.seq in meant):
            continue
        if hit.replies:
            hit = dataclasses.replace(hit, replies=_answers(hit, wanted, forwarded, seen))
        if hit.prompt:
            taken = {c.seq for c in chosen}  # a passage of it is quoted: not again whole
            prompt = tuple(
                p for p in _prompting(hit, wanted, forwarded, seen) if p.seq not in taken
            )
            prompted.update(p.seq for p in prompt)
            hit = dataclasses.replace(hit, prompt=prompt)
        chosen.append(hit)
        told |= says
        if len(chosen) == k:
            break
    return chosen


def _on(text: str, wanted: frozenset[str]) -> frozenset[str]:
    """`text`'s sentences that hold one of the `wanted` stems, folded to compare: a hit
    whose sentences on the question a chosen hit said already ("Retirement is hard
    work.", a speaker's refrain) tells the model nothing more, whatever else it says."""
    found = (m.group() for m in SENTENCE.finditer(text))
    return frozenset(" ".join(s.lower().split()) for s in found if stems(s) & wanted)


def word_groups(question: str) -> list[frozenset[str]]:
    """The stems of each of `question`'s words, a word's other forms with it ("choose",
    "chose", "chosen"): what counts as one word of the question."""
    return [frozenset(porter(forms(w))) for w in words(question)]


def _covered(
    matched: frozenset[str],
    groups: Sequence[frozenset[str]],
    covered: Sequence[frozenset[str]],
    meant: bool = False,
) -> bool:
    """Whether a hit that `matched` these of the question's stems is covered: one
    forwarded message holds them all (`covered` holds each one's), and says as much of
    the question as a message can be judged on: two of its words (`groups`), or all.

    A forwarded message sharing one word of a question asking with several
    covers nothing: "Mei signed us up for a fun run" says little of whether the
    model reads what "Signed up for bouldering on thursday evenings" says, for
    "What class did Tomás sign up for?". The search ranked the hit above every
    forwarded message it found already (`outranking`). A hit found by meaning
    alone (`meant`) shares words with the question by chance, and no word ranked
    it: a forwarded message holding the one it shares covers it.
    """
    if not matched:
        return False
    for held in covered:
        if matched <= held:
            said = sum(1 for group in groups if group & held)
            if meant or said > 1 or said == len(groups):
                return True
    return False


def asks_beyond(question: str, hits: Sequence[SearchHit], context: Sequence[str]) -> bool:
    """Whether `question` asks something in a word that neither the `hits` found
    on its words nor the `context` holds.

    Then the words it shares with them name only its subject ("What role does
    Evan have at the shelter?": the shelter, not the role), and a forwarded
    message on that subject is no sign that the answer is forwarded. Only what
    it asks counts (its sentences ending in "?": without one, a message asks
    nothing beyond), and neither a capitalised word (a name the conversation
    may write otherwise, "Mel" for "Melanie"; an acronym; a sentence's opening
    word) nor one of the speaker's manner ("sorry", "right?"). An earlier copy
    of the question holds its words: asked again, it is judged as before.
    """
    asked_words = _ANY_WORD.findall(" ".join(relevance.questions(question)))
    asked = stems(" ".join(w for w in asked_words if not w[:1].isupper() and w not in MANNER))
    # Hits first: found on the question's words, they clear most of them; the long
    # context is scanned only for what is left.
    for texts in ([h.text for h in hits], context):
        if asked:
            asked -= frozenset().union(*covering(texts, asked))
    return bool(asked)


def detailed(hits: Sequence[SearchHit], question: str) -> list[SearchHit]:
    """`hits` (best first), those matching the same words of `question` reordered among
    their places by detail: first those whose sentences on the question's words hold a
    word the fewest other hits' do.

    When a question asks beyond its subject, its hits match only the subject's
    words, and BM25 orders the messages that match the same words mostly by
    their length (shorter first): a routine mention ("Another Saturday at the
    shelter.") before the one that says something new about it, which is
    what a question about something no message names needs. Only the
    sentences on the subject count: a message also says other things (small
    talk around a mention has rare words too). Hits matching other words keep
    their places. A name in the question says whose subject it is, not what
    it is: a sentence naming the person ("Omar: ...", "Hey Omar!") is not on
    the subject, unless no hit says anything else of the question's words
    (then the name is the subject: "What breed is Luna?").
    """
    asked = stems(question)
    wanted = asked - frozenset(porter(_names(question)))
    said = [_about(h.text, wanted) for h in hits]
    if not any(said):  # the name is the subject ("What breed is Luna?")
        wanted = asked
        said = [_about(h.text, wanted) for h in hits]
    holding = Counter(word for words in said for word in words)
    rarest = [min((holding[w] for w in words), default=len(hits)) for words in said]
    places: defaultdict[frozenset[str], list[int]] = defaultdict(list)
    for i, words in enumerate(said):
        places[words & wanted].append(i)
    ordered = list(hits)
    for same in places.values():
        for place, i in zip(same, sorted(same, key=rarest.__getitem__), strict=True):
            ordered[place] = hits[i]
    return ordered


def _about(text: str, wanted: frozenset[str]) -> frozenset[str]:
    """The stems of `text`'s sentences that hold one of the `wanted` stems."""
    held = (stems(m.group()) for m in SENTENCE.finditer(text))
    return frozenset().union(*(words for words in held if words & wanted))


def outranking(
    hits: Sequence[SearchHit],
    forwarded: Set[str],
    *,
    margin: float = 0.0,
    unjudged: Set[int] = frozenset(),
) -> list[SearchHit]:
    """The `hits` (best first) that outscore by `margin` every one of them the model
    already sees (whose texts are `forwarded`), and those `unjudged` (by seq) wherever
    they rank; forwarded ones left out."""
    best = max((h.score for h in hits if h.text in forwarded), default=None)
    return [
        h
        for h in hits
        if h.text not in forwarded
        and (best is None or h.score >= best + margin or h.seq in unjudged)
    ]


def named(question: str) -> list[str]:
    """The names `question` writes (`_names`), as written."""
    return list(_names(question).values())


def covering(context: Sequence[str], wanted: frozenset[str]) -> list[frozenset[str]]:
    """The `wanted` stems each text of `context` holds, for the texts that hold any.

    Only texts with a word that opens like a wanted stem (or is a form of a
    wanted verb) are stemmed: Porter rewrites endings, so a word's stem keeps
    its first three letters (but for a "y" turned "i"), and a context of
    thousands of messages costs one scan each, not a stem for each of their words.
    """
    if not wanted:
        return []
    openings = {
        "".join("[iy]" if c == "i" else re.escape(c) for c in _folded(s)[:3]) for s in wanted
    }
    verbs = _verb_forms()
    openings.update(rf"{form}(?![^\W_])" for s in wanted for form in verbs.get(s, ()))
    opens = re.compile(rf"(?<![^\W_])(?:{'|'.join(sorted(openings))})", re.IGNORECASE)
    held = (stems(text) & wanted for text in context if opens.search(_folded(text)))
    return [h for h in held if h]


@functools.cache
def _verb_forms() -> dict[str, frozenset[str]]:
    """Each irregular verb's forms, by the stem of each of them."""
    by_stem: defaultdict[str, set[str]] = defaultdict(set)
    for group in set(FORMS.values()):
        for stemmed in porter(group):
            by_stem[stemmed].update(group)
    return {s: frozenset(group) for s, group in by_stem.items()}


def _folded(text: str) -> str:
    """`text` without diacritics ("Éclair": "Eclair"): the index's tokenizer drops some,
    and what it leaves on a stem goes here too."""
    if text.isascii():
        return text
    split = unicodedata.normalize("NFKD", text)
    return "".join(c for c in split if not unicodedata.combining(c))


def _answers(
    hit: SearchHit, wanted: frozenset[str], forwarded: Set[str], seen: set[str]
) -> tuple[SearchHit, ...]:
    """The replies a chosen hit quotes: when it asks about the question, those not yet seen."""
    if not asks_about(hit.text, wanted):
        return ()
    replies = tuple(r for r in hit.replies if r.text not in forwarded and r.text not in seen)
    seen.update(r.text for r in replies)
    return replies


def _prompting(
    hit: SearchHit, wanted: frozenset[str], forwarded: Set[str], seen: set[str]
) -> tuple[SearchHit, ...]:
    """The message a chosen hit reacts to, when it reacts and that message is not yet seen."""
    if not reacts(hit.text, wanted):
        return ()
    prompt = tuple(p for p in hit.prompt if p.text not in forwarded and p.text not in seen)
    seen.update(p.text for p in prompt)
    return prompt


def reacts(text: str, wanted: frozenset[str]) -> bool:
    """Whether `text` speaks of the `wanted` stems otherwise than in the first person.

    In a chat, news is told in the first person ("A cafe agreed to show my
    lighthouses"), and the other side answers it in the second or third ("Your art
    on a wall! Congrats!", "Sounds like Ava is a brave kid", "Did you go alone?"),
    often in the words someone reading the chat back asks with: such a hit is a
    reaction, and what it reacts to is the message before it. A sentence on those
    words in the first person tells the speaker's own news, which needs nothing before it.
    """
    on = [m.group() for m in SENTENCE.finditer(text) if stems(m.group()) & wanted]
    return any(not first_person(sentence) for sentence in on)


def asks_about(text: str, wanted: frozenset[str]) -> bool:
    """Whether `text` asks (a sentence ending in "?") about one of the `wanted` stems.

    Only then is what answered it worth quoting: a long message with an unrelated
    question in passing ("Anything fun this weekend?") carries no answer we need.
    """
    return any(stems(asked) & wanted for asked in relevance.questions(text))


def question_index(messages: Sequence[Message], dialect: Dialect) -> int:
    """Index of the last message that opens a user's turn (not a tool result), or -1."""
    for i in range(len(messages) - 1, -1, -1):
        if dialect.opens_turn(messages[i]):
            return i
    return -1


def inject(messages: Sequence[Message], content: str, dialect: Dialect) -> list[Message]:
    """The forwarded messages with the recall block right before the last user message.

    The block is an instruction where the wire has them in its history (a
    system or developer message); on Anthropic's, a user message that the
    wire merges into the question's.
    """
    at = question_index(messages, dialect)
    block = dialect.summary(content)
    if at < 0:
        return [*messages, block]
    return [*messages[:at], block, *messages[at:]]
