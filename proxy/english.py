"""English words for recall: the words its query skips, the verb forms and kin's names it
joins, their stems, and whether a turn asks something.

Recall searches an English conversation for the words of an English question.
A question says "What did she see?" where the statement said "we saw a bear":
stemming (FTS5's porter tokenizer) joins "painted" and "paint", never "saw" and
"see", so the irregular verbs' forms are listed here, each group searched as
one word. Lists, not a lemmatizer: the irregular verbs are a closed set, and
the lemmatizing libraries bring dictionaries or numpy to a proxy that needs a
hundred words of them.

Stems come from SQLite FTS5's porter tokenizer, the one the search index
uses, so the words recall compares (what a hit matched, which sentence to
quote) meet exactly where the search matched them: "promoted" and
"promotion" both stem to "promot".
"""

from __future__ import annotations

import functools
import itertools
import re
import sqlite3
import threading
from collections.abc import Iterable

# Function words (pronouns, auxiliaries, determiners, prepositions): they say nothing
# about what a question is about. Words under three letters never count.
# fmt: off
STOPWORDS = frozenset((
    "the", "and", "for", "are", "but", "not", "you", "your", "yours", "with", "this", "that",
    "these", "those", "what", "was", "were", "has", "have", "had", "having", "can", "could",
    "would", "should", "will", "shall", "might", "must", "about", "from", "into", "onto",
    "they", "them", "their", "theirs", "there", "then", "than", "when", "where", "which", "who",
    "whom", "whose", "why", "how", "all", "any", "its", "our", "ours", "out", "also", "just",
    "like", "some", "did", "does", "doing", "done", "been", "being", "tell", "please", "she",
    "her", "hers", "herself", "his", "him", "himself", "myself", "yourself", "ourselves",
    "themselves", "itself", "each", "both", "few", "more", "most", "other", "others", "such",
    "only", "own", "same", "too", "very", "really", "again", "here", "over", "under", "above",
    "below", "after", "before", "during", "since", "until", "while", "through", "between",
    "against", "without", "within", "along", "around", "across", "behind", "beyond", "upon",
    "off", "down", "via", "per", "yes", "yeah", "okay", "don", "didn", "doesn", "isn", "wasn",
    "aren", "weren", "hasn", "haven", "hadn", "couldn", "wouldn", "shouldn", "going",
))
# fmt: on

# The words of a speaker's manner ("Sorry, so when ...?", "..., right?"): searched like
# any word (a statement may say "my right knee"), but a question asks nothing with them.
# fmt: off
MANNER = frozenset((
    "sorry", "right", "sure", "actually", "anyway", "maybe", "perhaps", "wonder", "wondering",
    "curious", "quick", "quickly", "exactly", "honestly", "basically", "though", "well", "hey",
    "double", "check", "confirm", "know", "whether", "btw", "lol", "tho",
))
# fmt: on

# Words that frame a question rather than say what it is about ("What is the name of
# her dog?", "What kind of car ...", "Does he still ..."): the statement that answers
# rarely has them, and when the conversation uses them seldom they outweigh the subject.
# fmt: off
FRAMING = frozenset((
    "name", "kind", "type", "sort", "recent", "recently", "lately", "many", "much", "often",
    "usually", "ever", "still", "get", "got", "thing", "things", "remind", "remember",
    "mention", "mentioned",
))
# fmt: on

# A sentence, or a line: what recall quotes and judges a message by.
SENTENCE = re.compile(r"[^\n.!?]*(?:[.!?]+|\n|$)")

# About the length of a chat turn of a few sentences: a longer message (a run of lines,
# a whole exchange pasted as one message, a tool's output) is searched by passages
# of about this many characters, so that a fact said in one line of it is found and
# weighed as a turn saying it would be.
PASSAGE = 400


def passages(text: str) -> list[str]:
    """`text` cut between sentences (or lines) into runs of about `PASSAGE` characters.

    The runs are exact slices: joined, they are `text`. A sentence longer than
    `PASSAGE` is a run of its own, uncut.
    """
    if len(text) <= PASSAGE:
        return [text]
    cuts = [0]
    end = 0
    for m in SENTENCE.finditer(text):
        if not m.group():  # the empty match at the end: nothing to cut before
            continue
        if m.end() - cuts[-1] > PASSAGE and end > cuts[-1]:
            cuts.append(end)
        end = m.end()
    return [text[a:b] for a, b in itertools.pairwise([*cuts, len(text)])]


# Whether a turn asks something, when its writer leaves out the "?" ("what did I say
# about the garden", "remind me where we parked", "I forgot what we decided"): one of
# a sentence's first clauses opens (past interjections, and a capitalised name after
# a greeting) with a question word not followed by a subject or an article ("When I
# went ..." and "What a day" tell), an auxiliary not followed by a word that leaves
# out its subject ("Did you ...", "Is Melanie ...", not "Had a great time"), or a
# request of something ("Tell me about the garden", not "Tell me more"); or the
# sentence holds a word of recalling anywhere. Reading a statement as asking only
# keeps the question's floor for it.
# fmt: off
_QUESTION_WORDS = frozenset((
    "what", "when", "where", "who", "whom", "whose", "which", "why", "how", "whats", "wheres",
    "whos", "hows",
))
_TELLING = frozenset(("i", "we", "you", "u", "he", "she", "they", "a", "an"))
_AUXILIARIES = frozenset((
    "do", "does", "did", "is", "are", "am", "was", "were", "can", "could", "would", "will",
    "should", "shall", "have", "has", "had", "didn", "isn", "wasn", "don", "doesn", "aren",
    "weren", "couldn", "wouldn", "shouldn", "won", "hasn", "haven", "hadn",
))
# After an auxiliary, the words of a statement that leaves out its subject ("Had a
# great time", "Did some gardening", "Was great seeing you", "Will and I went").
_ELLIPTICAL = frozenset((
    "a", "an", "some", "been", "be", "not", "and", "great", "fun", "good", "nice", "lovely",
    "so", "such", "just", "no", "never", "to", "too", "also", "really", "quite", "lots",
))
_REQUESTS = frozenset((
    "tell", "repeat", "find", "look", "search", "list", "show", "summarize", "summarise",
))
_RECALLING = frozenset((
    "remind", "reminded", "recall", "recalled", "remember", "remembered", "forgot", "forget",
    "forgotten", "wonder", "wondering", "mention", "mentioned",
))
_INTERJECTIONS = frozenset((
    "please", "so", "and", "but", "ok", "okay", "oh", "ooh", "ah", "uh", "um", "hmm", "wow",
    "well", "yeah", "yes", "no", "lol", "haha", "right", "cool", "alright", "now", "then",
    "also", "just", "actually", "sorry", "quick", "question", "btw", "wait", "hey", "hi",
    "hello", "dear", "thanks", "thank",
))
_GREETINGS = frozenset(("hey", "hi", "hello", "dear", "thanks", "thank"))
# With the interjections, what a message that only acknowledges says ("Ok.", "Got it,
# thanks!", "Sure, go on."): nothing a question could be answered by.
_ACKNOWLEDGING = frozenset((
    "got", "it", "sure", "noted", "understood", "great", "good", "nice", "fine", "see", "gotcha",
    "mhm", "mm", "kk", "go", "on", "continue", "perfect", "awesome", "thx", "ty", "np", "sounds",
    "makes", "sense", "i", "you", "a", "will", "do", "true", "indeed", "agreed", "exactly",
    "interesting", "hmm", "mmm", "lovely",
))
# fmt: on
_LETTERS = re.compile(r"[^\W\d_]+")
_CLAUSES = re.compile(r"[,;:]")
# "What'd I say": the question word's "did", which the subject after it would hide.
_DID = re.compile(r"(?i)\b(what|where|when|who|why|how)['\u2019]d\b")
_OPENERS = _QUESTION_WORDS | _AUXILIARIES | _REQUESTS | _RECALLING
# How much of a long turn (a pasted document, a tool's output) is read for its asking:
# its opening and its end, where the request around such a text is.
ASKS_READ = 4000
# An acknowledgement is a few words: a longer message of them ("Ok ok, yes, fine, sure, I
# see, go on ...") is rare enough to read as saying something.
ACKNOWLEDGED = 8


# The words a speaker tells their own news with.
_FIRST_PERSON = frozenset(("i", "me", "my", "mine", "we", "us", "our", "ours"))


def first_person(sentence: str) -> bool:
    """Whether `sentence` speaks in the first person ("I", "my", "we", ...)."""
    return any(w.lower() in _FIRST_PERSON for w in _LETTERS.findall(sentence))


def asks(text: str) -> bool:
    """Whether a turn asks something: it has a "?" (`SENTENCE` ends a sentence at one),
    or a sentence of it reads as a question or a request to recall without it."""
    if "?" in text:
        return True
    if len(text) > 2 * ASKS_READ:
        text = f"{text[:ASKS_READ]}\n{text[-ASKS_READ:]}"
    return any(_asks(sentence.group()) for sentence in SENTENCE.finditer(text))


def asking(text: str) -> tuple[str, str]:
    """What a turn asks and what it says: its sentences that read as asking (as `asks`
    reads them), and the others, each joined by spaces.

    A long turn (a pasted document) is read for its asking at its opening and its end;
    its middle is what it says.
    """
    if len(text) > 2 * ASKS_READ:
        # Cut between words: a word cut in two would be two words no message says.
        start = text.rfind(" ", 0, ASKS_READ) + 1 or ASKS_READ
        end = text.find(" ", len(text) - ASKS_READ) + 1 or len(text) - ASKS_READ
        head, tail = asking(text[:start]), asking(text[end:])
        middle = text[start:end]
        return f"{head[0]} {tail[0]}".strip(), f"{head[1]} {middle} {tail[1]}".strip()
    asked: list[str] = []
    said: list[str] = []
    for sentence in SENTENCE.finditer(text):
        part = sentence.group().strip()
        if part:
            (asked if _asks(part) else said).append(part)
    return " ".join(asked), " ".join(said)


def _asks(sentence: str) -> bool:
    if "?" in sentence:
        return True
    said = _DID.sub(r"\1 did", sentence)
    if any(w in _RECALLING for w in _LETTERS.findall(said.lower())):
        return True
    return any(_opens_asking(clause) for clause in _CLAUSES.split(said)[:3])


def acknowledges(text: str) -> bool:
    """Whether a message says nothing but an acknowledgement ("ok", "Got it, thanks!"),
    or nothing at all."""
    words = _LETTERS.findall(text.lower())
    return len(words) <= ACKNOWLEDGED and all(
        w in _INTERJECTIONS or w in _ACKNOWLEDGING for w in words
    )


def _opens_asking(clause: str) -> bool:
    # Single letters are what contractions leave ("didn't", "what's"), but "I", "a", "u".
    words = [w for w in _LETTERS.findall(clause) if len(w) > 1 or w.lower() in "iau"]
    greeted = False
    for at, word in enumerate(words):
        lower = word.lower()
        if lower in _INTERJECTIONS:
            greeted = greeted or lower in _GREETINGS
            continue
        # "Hey Evan what ...": the name is no opening ("Hey Tell me ..." is one).
        if greeted and word[:1].isupper() and lower not in _OPENERS:
            greeted = False
            continue
        after = words[at + 1].lower() if at + 1 < len(words) else ""
        if lower in _QUESTION_WORDS:
            return after not in _TELLING
        if lower in _AUXILIARIES:
            return bool(after) and after not in _ELLIPTICAL
        if lower in _REQUESTS:  # of something: "Tell me more" asks for nothing said
            return any(len(w) > 2 and w.lower() not in STOPWORDS for w in words[at + 1 :])
        return lower in _RECALLING
    return False


# Irregular verbs, base form first. A question asks with the base form ("did she
# buy"); a statement tells with the past ("I bought"). Verbs whose forms are all
# alike (put, cut, read), and those the lists above skip, are not here.
# fmt: off
_IRREGULAR = (
    "go went gone", "see saw seen", "buy bought", "make made", "take took taken",
    "give gave given", "find found", "bring brought", "think thought", "teach taught",
    "catch caught", "sell sold", "win won", "lose lost", "meet met", "leave left",
    "feel felt", "keep kept", "sleep slept", "spend spent", "send sent", "build built",
    "eat ate eaten", "drink drank drunk", "write wrote written", "ride rode ridden",
    "run ran", "begin began begun", "sing sang sung", "swim swam swum", "fly flew flown",
    "draw drew drawn", "grow grew grown", "know knew known", "throw threw thrown",
    "wear wore worn", "choose chose chosen", "speak spoke spoken", "break broke broken",
    "steal stole stolen", "wake woke woken", "drive drove driven", "fall fell fallen",
    "forget forgot forgotten", "hold held", "stand stood", "understand understood",
    "hear heard", "pay paid", "say said", "lead led", "sit sat", "hang hung", "shoot shot",
    "dig dug", "hide hid hidden", "shake shook shaken", "freeze froze frozen",
    "feed fed", "mean meant", "become became", "come came", "blow blew blown",
    "lend lent", "fight fought", "seek sought", "sink sank sunk", "spin spun", "tear tore torn",
    "lay laid", "slide slid", "sting stung",
    "stick stuck", "strike struck", "swing swung", "forgive forgave forgiven",
)
# fmt: on
# Words for one person or thing that stemming does not join: a question asks about
# "Melanie's children" or "her father", its answer said "my kids" or "my dad". Kin
# by their everyday names (each listed in the plural too: a word is looked up as
# written), and the plurals Porter leaves apart ("children", "teeth"). Not those whose
# stem everyday words share: "people" ("personally" stems to "person"), "men" ("oh
# man"), "kids" ("just kidding").
# fmt: off
_SAME = (
    "father fathers dad dads daddy", "mother mothers mom moms mum mums mommy mummy",
    "grandmother grandmothers grandma grandmas granny", "grandfather grandfathers grandpa "
    "grandpas granddad", "child children", "woman women", "wife wives",
    "tooth teeth", "mouse mice",
)
# fmt: on
FORMS: dict[str, tuple[str, ...]] = {
    form: tuple(group.split()) for group in (*_IRREGULAR, *_SAME) for form in group.split()
}


def forms(word: str) -> tuple[str, ...]:
    """`word` and its other forms (of its verb, or its other names), first form first;
    `(word,)` when it has none."""
    return FORMS.get(word, (word,))


# Whom a speaker calls by their relation ("my sister") and, now and then, by name ("my
# sister Rosa"), after which the name alone ("Rosa's new place"); a question asks by
# the relation ("Where did Caroline's sister move?").
# fmt: off
RELATIONS = frozenset((
    "son", "daughter", "kid", "child", "boy", "girl", "baby", "brother", "sister", "wife",
    "husband", "partner", "boyfriend", "girlfriend", "fiance", "fiancee", "mom", "mum",
    "mother", "dad", "father", "grandma", "grandmother", "grandpa", "grandfather", "aunt",
    "daddy", "mommy", "mummy", "granny", "granddad",
    "uncle", "cousin", "nephew", "niece", "friend", "roommate", "neighbor", "neighbour",
    "boss", "coworker", "colleague", "manager", "mentor", "teacher", "coach", "dog", "cat",
    "puppy", "kitten", "pet", "horse", "bird",
))
# fmt: on
# Capitalised words that follow a relation without naming it ("my mom Friday").
# fmt: off
CALENDAR = frozenset((
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
    "january", "february", "march", "april", "may", "june", "july", "august",
    "september", "october", "november", "december", "today", "tomorrow", "tonight",
))
# fmt: on


_NO_NAMES = STOPWORDS | RELATIONS | CALENDAR


@functools.cache
def _naming(relation: str) -> re.Pattern[str]:
    return re.compile(
        rf"\b(?i:my|our|your)\s+(?:(?i:[a-z]+)\s+)?(?i:{re.escape(relation)})s?,?\s+([A-Z][a-z]+)\b"
    )


def named(relation: str, text: str) -> set[str]:
    """The names `text` gives the speaker's `relation`, lower-cased: "my sister Rosa",
    "our little dog, Biscuit", "your brother Sam" (a word of the relation's kind
    between: "little", "older", "new")."""
    return {
        name
        for m in _naming(relation).finditer(text)
        if (name := m.group(1).lower()) not in _NO_NAMES
    }


# Stems made so far; cleared when full (a conversation's vocabulary is a few thousand words).
STEMS_KEPT = 100_000
# Longer "words" (encoded data, minified code in tool results) are their own stem: no
# English word is this long, and kept they would fill the cache with megabytes.
LONGEST_WORD = 64
_stems: dict[str, str] = {}
_lock = threading.Lock()


@functools.cache
def _tokenizer() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    db.execute("CREATE VIRTUAL TABLE words USING fts5(word, tokenize = 'porter unicode61')")
    db.execute("CREATE VIRTUAL TABLE tokens USING fts5vocab(words, 'instance')")
    return db


def porter(words: Iterable[str]) -> list[str]:
    """Each of `words`' stem, as the search index's porter tokenizer makes it."""
    words = list(words)
    with _lock:
        new = [w for w in dict.fromkeys(words) if w not in _stems and len(w) <= LONGEST_WORD]
        if new:
            db = _tokenizer()
            db.executemany("INSERT INTO words (rowid, word) VALUES (?, ?)", enumerate(new, 1))
            made = dict(db.execute("SELECT doc, term FROM tokens WHERE offset = 0"))
            db.execute("DELETE FROM words")
            if len(_stems) + len(new) > STEMS_KEPT:
                _stems.clear()
            _stems.update((w, str(made.get(i, w))) for i, w in enumerate(new, 1))
        return [_stems.get(w, w) for w in words]
