"""Recall's ranking pieces, pure: the relevance floor, names, fusion, replies and excerpts.

The store's search runs them over FTS5 (test_store.py); the app runs the whole
path (test_recall.py, and the development set in test_recall_eval.py).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from proxy import english, fusion, quoting, recall
from proxy.store import relevance
from proxy.store.base import SearchHit

WORDS = st.sampled_from(["passport", "museum", "walk", "coffee", "plan", "2031", "tuesday"])
POSTINGS = st.dictionaries(WORDS, st.frozensets(st.integers(0, 39), max_size=40), max_size=6)


def hit(seq: int, text: str = "", role: str = "user", score: float = 1.0) -> SearchHit:
    return SearchHit(seq=seq, turn=seq, role=role, text=text or f"message {seq}", score=score)


@given(POSTINGS, st.integers(40, 400), st.booleans())
def test_a_passing_message_holds_a_specific_word_and_half_the_weight(
    postings: dict[str, frozenset[int]], total: int, about: bool
) -> None:
    passed = relevance.passing(postings, total, about=about)
    rare = max(relevance.RARE_DOCS, relevance.RARE_SHARE * total)
    weights = {w: relevance.idf(total, len(p)) for w, p in postings.items() if p}
    new = relevance.UNSEEN_SHARE * relevance.idf(total, 1)
    weight = sum(weights.values()) + new * (len(postings) - len(weights))
    beyond = any(not p for w, p in postings.items())  # a word never said
    for i in passed:
        held = [w for w, p in postings.items() if i in p]
        met = [
            (a, b)
            for a, b in itertools.combinations(held, 2)
            if len(postings[a] & postings[b]) <= rare and not (a.isdigit() or b.isdigit())
        ]
        assert any(len(postings[w]) <= rare and not w.isdigit() for w in held) or (beyond and met)
        # Half the weight, or a word said in so few messages that it alone names the
        # subject, or a specific word when the question names whom it asks about.
        seldom = any(len(postings[w]) <= relevance.RARE_DOCS and not w.isdigit() for w in held)
        share = sum(weights[w] for w in held) >= relevance.MATCHED_SHARE * weight
        assert seldom or share or about
    assert len(set(passed)) == len(passed)


@given(POSTINGS, st.integers(40, 400))
@example(  # two words meeting once, beside a word never said
    {"passport": frozenset(), "museum": {0}, "walk": {0, 1, 2}, "coffee": {0, 1, 3}}, 40
)
def test_a_question_naming_whom_it_asks_about_passes_every_message_with_a_specific_word(
    postings: dict[str, frozenset[int]], total: int
) -> None:
    named = set(relevance.passing(postings, total, about=True))
    rare = max(relevance.RARE_DOCS, relevance.RARE_SHARE * total)
    specific = {i for w, p in postings.items() if len(p) <= rare and not w.isdigit() for i in p}
    # Where the question asks beyond its subject (a word never said), two of its words
    # said together as seldom are as specific as one word ("Two words that meet").
    if any(not p and not w[:1].isupper() for w, p in postings.items()):
        said = [w for w, p in postings.items() if p and not w.isdigit()]
        pairs = (postings[a] & postings[b] for a, b in itertools.combinations(said, 2))
        specific |= {i for both in pairs if len(both) <= rare for i in both}
    assert specific | set(relevance.passing(postings, total)) == named
    # A turn that asks nothing names no subject that way: its floor is unchanged.
    stated = relevance.passing(postings, total, asks=False)
    assert relevance.passing(postings, total, asks=False, about=True) == stated


@given(POSTINGS, st.integers(40, 400))
def test_a_message_with_every_word_passes_when_one_is_specific(
    postings: dict[str, frozenset[int]], total: int
) -> None:
    everywhere = 1000  # a message id no posting holds yet
    holding = {w: p | {everywhere} for w, p in postings.items()}
    rare = max(relevance.RARE_DOCS, relevance.RARE_SHARE * total)
    specific = [w for w, p in holding.items() if len(p) <= rare and not w.isdigit()]
    assert (everywhere in relevance.passing(holding, total)) == bool(specific)


@given(POSTINGS, st.integers(40, 400))
def test_a_turn_that_asks_nothing_passes_what_a_question_would_that_holds_a_rarer_word(
    postings: dict[str, frozenset[int]], total: int
) -> None:
    asked = set(relevance.passing(postings, total))
    stated = set(relevance.passing(postings, total, asks=False))
    rarer = {
        i
        for w, p in postings.items()
        if len(p) <= relevance.RARE_DOCS and not w.isdigit()
        for i in p
    }
    # A question passes every message of a word said in so few; a statement only those
    # of them that carry half the weight.
    weights = {w: relevance.idf(total, len(p)) for w, p in postings.items() if p}
    new = relevance.UNSEEN_SHARE * relevance.idf(total, 1)
    weight = sum(weights.values()) + new * sum(1 for w, p in postings.items() if not p)
    carrying = {
        i
        for i in rarer
        if sum(weights[w] for w, p in postings.items() if i in p)
        >= relevance.MATCHED_SHARE * weight
    }
    assert rarer <= asked
    assert stated == carrying


def test_a_statement_sharing_words_said_a_few_times_recalls_nothing() -> None:
    # In 4 of 200 messages: specific for a question (under 5 %), everyday chat for a
    # statement ("The garden near my aunt's house is lovely.").
    few = frozenset({3, 40, 77, 120})
    house = frozenset({3, *range(150, 180)})
    postings = {"garden": few, "aunt": frozenset({3, 9, 50, 140}), "house": house}
    assert relevance.passing(postings, 200) == [3]
    assert relevance.passing(postings, 200, asks=False) == []
    # Something said once ("Our beagle dug up the garden again.") comes back either way.
    beagle = {"beagle": frozenset({64}), "garden": few}
    assert relevance.passing(beagle, 200, asks=False) == relevance.passing(beagle, 200) == [64]


ASKING = [
    "Where did my aunt move? Tell me.",
    "You did what?!",
    # People leave the "?" out.
    "what did I say about the garden",
    "Please remind me where we parked.",
    "I went to the zoo. So, did you go",
    "Hey Evan, what did I say about the garden",
    "Hey Evan what did I say about the garden",
    "Oh wow, what did I say about it.",
    "Hmm, whats the name of that cafe",
    "I forgot what I said about the community garden.",
    "I can't remember what I said about the garden.",
    "Summarize what I said about the garden.",
    "Oh, tell me about the garden again.",
    "Didn't you say the garden opens at nine.",
    "Is the museum open on Mondays.",
    "Did Evan say where we parked",
    "Is Melanie coming to the garden party",
    "What'd I say about the garden",
    "Where'd we park the car",
    "could u find the garden message",
    "Hey Tell me about the garden",
    "I remembered something about the garden, when was it.",
    "The cafe we picked.\nWhere was it",
]
TELLING = [
    "The garden near my aunt's house is lovely. Oh wow, and yours.",
    "My sister tried dancing this week and loved it.",
    "When I went to the park it rained.",
    "What a day.",
    "Had a great time at the zoo!",
    "Was great seeing you.",
    "Did some gardening today.",
    "Will and I went hiking.",
    "Oh wow, tell me more.",
    "",
]


@pytest.mark.parametrize("text", ASKING)
def test_a_turn_asks_with_or_without_its_question_mark(text: str) -> None:
    assert english.asks(text)


@pytest.mark.parametrize("text", TELLING)
def test_a_turn_that_tells_asks_nothing(text: str) -> None:
    assert not english.asks(text)


@pytest.mark.parametrize(
    ("text", "acknowledges"),
    [
        ("ok", True),
        ("Ok.", True),
        ("Got it, thanks!", True),
        ("Sure, go on.", True),
        ("", True),
        ("Ok, a Prius.", False),
        ("No, I traded it in.", False),
        ("Yes.", True),
        ("Yes, in March.", False),
        ("ok " * 9, False),  # a run of them is no longer a nod
    ],
)
def test_a_message_acknowledges_when_it_says_nothing_else(text: str, acknowledges: bool) -> None:
    assert english.acknowledges(text) == acknowledges


# A sentence longer than a passage, its end unmarked: a run of its own.
UNFINISHED = "and then the road went on " * 20

SENTENCES = st.lists(
    st.sampled_from(
        ["The train was late.", "I bought a Prius!", "ok", "\n", " ", "What now?", UNFINISHED]
    ),
    max_size=80,
).map("".join)


@given(SENTENCES)
def test_passages_are_a_texts_sentences_cut_into_runs(text: str) -> None:
    parts = english.passages(text)
    assert "".join(parts) == text
    assert all(parts) or parts == [""]
    if len(text) <= english.PASSAGE:
        assert parts == [text]
    # Cut only between sentences, and only once a run has its length.
    for before, part in itertools.pairwise(parts):
        assert before[-1] in ".!?\n", (before, part)
        assert len(before) + len(part) > english.PASSAGE
    # Never longer than a run and the sentence that would overflow it.
    assert all(
        len(part) <= english.PASSAGE + len("I bought a Prius!") or UNFINISHED in part
        for part in parts
    )


def test_a_forwarded_long_message_is_known_by_its_passages() -> None:
    long = "\n".join(f"Line {i}: the train was late again." for i in range(40))
    seen, rows = recall.as_searched(["short one", long])
    assert {"short one", long} <= seen
    assert rows == 1 + len(english.passages(long)) > 2
    assert all(part.strip() in seen for part in english.passages(long))
    # A hit on a passage of a forwarded message is no recall.
    part = english.passages(long)[3].strip()
    assert recall.fresh([hit(7, part)], "Was the train late?", ["short one", long], k=3) == []


SAID = st.sampled_from(
    [
        "The garden is lovely.",
        "what did I say about the garden.",
        "Oh wow, and yours!",
        "Please remind me where we parked.",
        "Did you go?",
        "My sister loved it!",
        "Hey Evan!",
        "So, is it open.",
    ]
)


@given(st.lists(SAID, max_size=5), st.sampled_from([" ", "\n"]))
def test_a_turn_asks_when_one_of_its_sentences_does(sentences: list[str], gap: str) -> None:
    assert english.asks(gap.join(sentences)) == any(english.asks(s) for s in sentences)


@given(st.lists(SAID, max_size=5), st.sampled_from([" ", "\n"]))
def test_a_turn_is_what_it_asks_and_what_it_says(sentences: list[str], gap: str) -> None:
    text = gap.join(sentences)
    asked, said = english.asking(text)
    assert bool(asked) == english.asks(text)
    assert sorted(f"{asked} {said}".split()) == sorted(text.split())
    assert all(english.asks(s) for s in sentences if s and s in asked)


def test_a_long_turn_is_read_for_its_asking_at_its_opening_and_its_end() -> None:
    document = "The quarterly figures were flat. " * 2000
    assert english.asks(f"Summarize what I said about the garden.\n{document}")
    assert english.asks(f"{document}\nwhat did I say about the garden")
    assert not english.asks(document)
    asked, said = english.asking(f"Summarize what I said about the garden.\n{document}")
    assert asked == "Summarize what I said about the garden."
    assert set(said.split()) == {"The", "quarterly", "figures", "were", "flat."}


def test_two_everyday_words_said_together_once_answer_a_question_asking_beyond_them() -> None:
    """ "What animal did Evan see while hiking?": hiking and seeing are said every
    session (30 of 200 messages each, too common alone), together once; "animal" never."""
    hike, see = frozenset(range(30)), frozenset({29, *range(100, 129)})
    assert relevance.passing({"hike": hike, "see": see, "animal": frozenset()}, 200) == [29]
    # Without a word beyond the subject, or in a turn that asks nothing: no moment asked.
    assert relevance.passing({"hike": hike, "see": see}, 200) == []
    assert (
        relevance.passing({"hike": hike, "see": see, "animal": frozenset()}, 200, asks=False) == []
    )


def test_only_everyday_words_or_a_bare_number_pass_nothing() -> None:
    everyday = frozenset(range(30))
    assert relevance.passing({"walk": everyday, "coffee": everyday}, 100) == []
    assert relevance.passing({"2031": frozenset({3}), "walk": everyday}, 100) == []
    assert relevance.passing({"passport": frozenset({3}), "walk": everyday}, 100) == [3]


def test_new_words_count_at_half_the_weight_of_a_word_said_once() -> None:
    once, never = frozenset({3}), frozenset[int]()
    # In a statement, one old word said once holds up against two new ones, not three.
    two_new = {"passport": once, "lasagne": never, "renewal": never}
    assert relevance.passing(two_new, 100, asks=False) == [3]
    three_new = {**two_new, "visa": never}
    assert relevance.passing(three_new, 100, asks=False) == []
    # A word said twice carries less than one said once: one new word is its limit.
    twice = frozenset({3, 8})
    assert relevance.passing({"museum": twice, "opera": never}, 100, asks=False) == [3, 8]
    assert relevance.passing({"museum": twice, "opera": never, "ballet": never}, 100) == [3, 8]
    assert (
        relevance.passing({"museum": twice, "opera": never, "ballet": never}, 100, asks=False) == []
    )
    # A question asks about what it names: however it is worded around it.
    assert relevance.passing(three_new, 100) == [3]
    # A word in 3 of 100 messages is specific to a question, but needs its share.
    thrice = frozenset({3, 8, 11})
    assert relevance.passing({"museum": thrice, "opera": never}, 100) == [3, 8, 11]
    assert relevance.passing({"museum": thrice, "opera": never, "ballet": never}, 100) == []


@pytest.mark.parametrize(
    ("relation", "text", "names"),
    [
        ("sister", "Family news: my little sister Rosa is moving.", {"rosa"}),
        ("dog", "Our dog, Biscuit, dug up the garden. My Dog Max too.", {"biscuit", "max"}),
        ("brother", "Your brother Sam called.", {"sam"}),
        # A relation named by no one, or by a word that is no name.
        ("sister", "My sister is moving. My sister And I argued.", set()),
        ("sister", "Rosa is my sister.", set()),
        ("son", "My son's teacher Mr Brown", set()),
        ("mom", "Lunch with my mom Friday, and my dad Tomorrow.", set()),
    ],
)
def test_a_relation_is_named_right_after_it(relation: str, text: str, names: set[str]) -> None:
    assert english.named(relation, text) == names


def test_a_verb_is_searched_in_all_its_forms_and_short_ones_count() -> None:
    assert recall.terms("Where did Evan go, and what did he see?") == [
        ("Evan",),
        ("go", "went", "gone"),
        ("see", "saw", "seen"),
    ]
    assert recall.words("Is it ok to go?") == ["go"]  # two letters, but "went" is longer
    # The measure a "how" question asks for is framing: the answer gives a number.
    assert recall.words("How old is Carla's grandmother?") == ["carla", "grandmother"]
    assert recall.words("How long was the old bridge?") == ["old", "bridge"]


def test_a_name_is_a_word_written_capitalised_inside_a_sentence_and_never_lower() -> None:
    assert recall.terms("What did McDonald sell to Evan?") == [
        ("McDonald",),
        ("sell", "sold"),
        ("Evan",),
    ]
    assert recall.terms("Painting? Which painting did EVAN like?") == [("painting",), ("evan",)]
    assert recall.terms("Caroline went where? Ask Caroline.")[0] == ("Caroline",)
    assert recall.terms("Dogs and cats: which dogs?")[0] == ("dogs",)
    # A line, or what follows a colon, opens a sentence: a list's or a label's first word.
    assert recall.terms("Quick question:\nBudget for the trip?")[2] == ("budget",)
    assert recall.terms("Context: Budget for the trip?")[1] == ("budget",)
    # Whom a question speaks to is not what it is about.
    assert recall.terms("How was the hike, Evan?") == [("hike",)]
    assert recall.terms("Did Maya like the hike, Evan?") == [("Maya",), ("hike",)]
    assert recall.terms("Thanks, Evan. What did Evan buy?") == [
        ("thanks",),
        ("Evan",),
        ("buy", "bought"),
    ]


@given(st.sampled_from(sorted(english.FORMS)), st.sampled_from(sorted(english.FORMS)))
def test_the_forms_of_a_word_meet_each_other_and_no_other_word(one: str, other: str) -> None:
    group = english.forms(one)
    assert one in group and english.forms(group[0]) == group
    assert all(english.forms(form) == group for form in group)
    meet = recall.stems(f"did she {one} it") & recall.stems(f"we {other} it")
    assert bool(meet) == (other in group)


# Words whose stems keep their opening, and the edge cases of it: a "y" turned "i"
# ("cry", "ays"), stems shorter than three letters ("uses", "ties"), diacritics.
VOCABULARY = st.sampled_from(
    [
        "cry", "cried", "cries", "ays", "spy", "spies", "uses", "used", "ties", "tie",
        "happy", "happiness", "promotion", "promoted", "running", "ran", "run", "saw",
        "seeing", "see", "Café", "cafes", "Éclair", "eclairs", "naïve", "NAIVE", "Über",
        "uber", "passport", "expires", "expire", "x_y", "go", "went", "co-op", "2031",
        "Tiến", "tien", "Hà", "Nội", "Ǘber", "Ὀδυσσεύς", "eﬀort", "effort", "ǅemal",
        "\uff11\uff12\uff13",
    ]
)  # fmt: skip
TEXTS = st.lists(VOCABULARY, max_size=8).map(" ".join)


@given(st.lists(TEXTS, max_size=6), TEXTS)
def test_covering_stems_only_what_may_hold_a_wanted_stem_and_loses_nothing(
    context: list[str], question: str
) -> None:
    wanted = recall.stems(question)
    plain = [recall.stems(text) & wanted for text in context]
    assert recall.covering(context, wanted) == [held for held in plain if held]


# With the words a question may ask nothing with: capitalised, or of the speaker's manner.
ASKED = st.lists(
    st.one_of(VOCABULARY, st.sampled_from(["Role", "role", "sorry", "Right", "right", "know"])),
    max_size=8,
).map(" ".join)


@given(st.lists(TEXTS, max_size=4), st.lists(TEXTS, max_size=4), TEXTS, ASKED)
def test_asking_beyond_is_an_asked_word_no_text_holds_and_a_capitalised_one_is_none(
    context: list[str], found: list[str], said: str, asked: str
) -> None:
    question = f"{said}. {asked}?"
    hits = [hit(i, text) for i, text in enumerate(found)]
    # Stemming every text, as `covering` avoids to.
    said_so = (w for w in asked.split() if not w[:1].isupper() and w not in english.MANNER)
    words = recall.stems(" ".join(said_so))
    held = frozenset().union(*(recall.stems(text) for text in [*context, *found]))
    assert recall.asks_beyond(question, hits, context) == bool(words - held)
    # Whatever it asks, a text holding it all leaves nothing beyond.
    assert not recall.asks_beyond(question, hits, [*context, asked])
    assert not recall.asks_beyond(question, [*hits, hit(99, asked)], context)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyzYIéüÉ", min_size=3, max_size=12))
def test_a_word_is_scanned_as_holding_its_own_stem(word: str) -> None:
    stems = recall.stems(word)
    assume(stems)  # a stopword, or not a word recall searches
    assert recall.covering([word], stems) == [stems]


def test_a_name_the_conversation_never_wrote_weighs_nothing() -> None:
    once, never = frozenset({3}), frozenset[int]()
    # In a statement, "paint" said once holds against two new words, not three...
    new = {"paint": once, "sunset": never, "canvas": never}
    assert relevance.passing({**new, "easel": never}, 100, asks=False) == []
    # ...but a name it calls otherwise ("Mel" for "Melanie") is no new word.
    assert relevance.passing({**new, "Melanie": never}, 100, asks=False) == [3]
    assert recall.terms("Did Melanie paint at Lake Tahoe?")[0] == ("Melanie",)
    assert recall.terms("Melanie?") == [("melanie",)]  # a capital that opens a sentence


def test_a_name_is_one_the_sides_address_each_other_by() -> None:
    greetings = ["Hey Evan!", "Hi Evan, how was the trip?", "Talk soon, Evan.", "Evan! Long time."]
    assert relevance.addressed("evan", greetings)
    assert relevance.addressed("evan", [*greetings, "Evan said he would come."])
    # Said of someone, or in a list, a place or a name is an ordinary word.
    said_of = ["My cousin Maya moved to Lisbon.", "Maya loves it there.", "Hey Tom!"]
    assert not relevance.addressed("maya", said_of)
    places = ["We flew to Denver.", "Boston, Denver, and Austin.", "Denver is lovely, Denver."]
    assert not relevance.addressed("denver", places)
    # Twice is enough when it is every time; once, or twice among others, is not.
    assert relevance.addressed("evan", greetings[:2])
    assert not relevance.addressed("evan", greetings[:1])
    assert not relevance.addressed("evan", [*greetings[:2], "Evan said so.", "Ask Evan."])
    assert not relevance.addressed("evan", [])


@given(
    st.lists(st.integers(0, 30), unique=True, max_size=12),
    st.lists(st.integers(0, 30), unique=True, max_size=12),
)
def test_fusion_keeps_every_message_once_and_agrees_where_the_rankings_do(
    lexical: list[int], semantic: list[int]
) -> None:
    fused = fusion.fuse([hit(s) for s in lexical], [hit(s) for s in semantic])
    assert sorted(h.seq for h in fused) == sorted(set(lexical) | set(semantic))
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
    if lexical and semantic and lexical[0] == semantic[0]:
        assert fused[0].seq == lexical[0]
    # One ranking alone keeps its order.
    assert [h.seq for h in fusion.fuse([hit(s) for s in lexical])] == lexical


@given(
    st.lists(st.tuples(st.integers(0, 12), st.sampled_from("abc")), unique=True, max_size=12),
    st.lists(st.integers(0, 12), unique=True, max_size=12),
)
def test_fusion_keeps_each_passage_and_gives_a_message_found_by_both_to_its_best(
    lexical: list[tuple[int, str]], semantic: list[int]
) -> None:
    # BM25 finds passages (several of a message), embeddings whole messages.
    passages = [hit(seq, f"part {part}") for seq, part in lexical]
    fused = fusion.fuse(passages, [hit(seq, "whole") for seq in semantic])
    found = {seq for seq, _ in lexical}
    assert sorted((h.seq, h.text) for h in fused) == sorted(
        [(seq, f"part {part}") for seq, part in lexical]
        + [(seq, "whole") for seq in semantic if seq not in found]
    )
    score = {(h.seq, h.text): h.score for h in fused}
    for rank, seq in enumerate(semantic, start=1):
        if seq in found:
            best = next(i for i, (s, _) in enumerate(lexical, start=1) if s == seq)
            key = (seq, f"part {lexical[best - 1][1]}")
            assert score[key] == 1 / (fusion.RRF_K + best) + 1 / (fusion.RRF_K + rank)
    assert [(h.seq, h.text) for h in fusion.fuse(passages)] == [(h.seq, h.text) for h in passages]


def test_a_question_asks_beyond_in_a_word_neither_the_context_nor_a_hit_holds() -> None:
    shelter = hit(3, "At the shelter they made me coordinator.")
    window = ["Another Saturday at the shelter, six dogs walked."]
    assert recall.asks_beyond("What role does Evan have at the shelter?", [shelter], window)
    assert recall.asks_beyond("What role do I have at the shelter?", [], window)
    # Every asked word held somewhere (in any form), or only a name new: not beyond.
    assert not recall.asks_beyond("Who walked dogs at the shelter?", [shelter], window)
    assert not recall.asks_beyond("What did Evan coordinate at the shelter?", [shelter], window)
    assert not recall.asks_beyond("Was Evan at the shelter?", [shelter], window)
    assert not recall.asks_beyond("Maya, were you at the shelter?", [shelter], window)
    # A speaker's manner asks nothing.
    opens = ["The shelter opens at 9 on weekends."]
    assert not recall.asks_beyond("Sorry, so when does the shelter open?", [], opens)
    assert not recall.asks_beyond("OK so the shelter opens at 9, right?", [], opens)
    assert not recall.asks_beyond("Could you double-check the shelter opens at 9?", [], opens)
    # Only what the question asks (a sentence ending in "?") counts.
    assert not recall.asks_beyond("Opera tonight. Was I at the shelter?", [shelter], window)


def test_neither_rule_judges_the_hits_of_a_question_asking_beyond() -> None:
    question = "What role does Evan have at the shelter?"
    forwarded = "Another Saturday at the shelter, six dogs walked."
    fact = hit(3, "At the shelter they made me coordinator.")
    # Below a forwarded message: stopped, unless unjudged.
    ranked = [hit(8, forwarded, score=9.0), fact]
    assert recall.fresh(ranked, question, [forwarded], k=3) == []
    assert recall.fresh(ranked, question, [forwarded], k=3, unjudged={3}) == [fact]
    # Covered by one (the forwarded message not among the hits, sharing two of the
    # question's words): skipped, unless unjudged.
    covering = "Evan spent another Saturday at the shelter, six dogs walked."
    assert recall.fresh([fact], question, [covering], k=3) == []
    assert recall.fresh([fact], question, [covering], k=3, unjudged={3}) == [fact]
    # Only the unjudged hits: another is judged as before.
    other = hit(5, "The shelter got blankets.")
    assert recall.fresh([fact, other], question, [covering], k=3, unjudged={3}) == [fact]
    # Nor does the rule on sentences said already judge them: their sentences on the
    # question are the subject's routine ones, the answer another.
    walked = hit(4, "Another Saturday at the shelter. Walked six dogs.")
    made = hit(3, "Another Saturday at the shelter. They made me volunteer coordinator!")
    assert recall.fresh([walked, made], question, [], k=3, unjudged={3, 4}) == [walked, made]
    window = hit(8, "Another Saturday at the shelter.", score=0.5)
    ranked = [made, window]
    assert recall.fresh(ranked, question, [window.text], k=3, unjudged={3}) == [made]


# The shelter's four places go first to those saying, where they speak of it, a word no
# other hit does ("coordinator", "blankets"), in BM25's order; then the routine ones,
# whose sentences on the shelter say nothing the others do not (the small talk beside
# one counts for nothing). The role's hit matches other words: it stays.
SHELTER = (
    "What role does Evan have at the shelter?",
    [
        "Quiet Saturday at the shelter.",
        "My role at work changed.",
        "The train was late, octopuses on TV. Saturday at the shelter, quiet.",
        "Hey! At the shelter they made me coordinator.",
        "A quiet morning at the shelter, new blankets.",
    ],
    [4, 2, 5, 1, 3],
)
# "breed" is said nowhere: the name is the subject, and what is new about Luna orders
# her mentions.
LUNA = (
    "What breed is Luna?",
    ["Walked Luna.", "Luna walked, then Luna slept.", "Luna is a husky.", "Luna slept."],
    [3, 1, 2, 4],
)


@pytest.mark.parametrize(("question", "texts", "order"), [SHELTER, LUNA])
def test_hits_matching_the_same_words_are_reordered_by_the_detail_they_hold(
    question: str, texts: list[str], order: list[int]
) -> None:
    ranked = [hit(seq, text) for seq, text in enumerate(texts, start=1)]
    assert [h.seq for h in recall.detailed(ranked, question)] == order
    assert recall.detailed([], question) == []


def test_a_sentence_naming_the_person_asked_about_is_not_on_the_subject() -> None:
    # Each message labelled with its speaker, the name the question asks with is in all
    # of Omar's: his label's sentence of small talk ("octopuses", "garage") would count as
    # saying something new about the shelter, ahead of the coordinator.
    question = "What role does Omar have at the shelter?"
    ranked = [
        hit(1, "Omar: I watched a film about octopuses. The shelter is short of volunteers."),
        hit(2, "Omar: I cleaned out the garage. The shelter is short of volunteers."),
        hit(3, "Omar: Anything fun? At the shelter they made me coordinator."),
        hit(4, "Omar: Nice. The shelter is short of volunteers."),
    ]
    assert recall.detailed(ranked, question)[0].seq == 3
    # The same without labels: the name was never what ordered them.
    unlabelled = [hit(h.seq, h.text.removeprefix("Omar: ")) for h in ranked]
    assert recall.detailed(unlabelled, question)[0].seq == 3


TEXTS_SAID = st.lists(
    st.sampled_from(["shelter", "role", "saturday", "quiet", "coordinator", "dogs", "the", "Omar"]),
    max_size=5,
).map(" ".join)


@given(
    st.lists(TEXTS_SAID, max_size=12),
    st.sampled_from(["What role do I have at the shelter?", "What role does Omar have there?"]),
)
def test_detail_reorders_hits_only_among_the_places_of_those_matching_the_same_words(
    texts: list[str], question: str
) -> None:
    hits = [hit(i, text) for i, text in enumerate(texts)]  # one sentence each
    ordered = recall.detailed(hits, question)
    assert sorted(h.seq for h in ordered) == list(range(len(hits)))
    # The question's words, less the name it asks about (whose, not what), unless no hit
    # says any of the others.
    wanted = recall.stems(question) - {"omar"}
    if not any(recall.stems(h.text) & wanted for h in hits):
        wanted = recall.stems(question)
    # A hit's words that count: its sentence's, if it speaks of the question's words.
    said = {
        h.seq: recall.stems(h.text) if recall.stems(h.text) & wanted else frozenset() for h in hits
    }
    holding = {w: sum(w in words for words in said.values()) for w in wanted.union(*said.values())}
    for place, (before, after) in enumerate(zip(hits, ordered, strict=True)):
        assert said[after.seq] & wanted == said[before.seq] & wanted, place
    rarest = [min((holding[w] for w in said[h.seq]), default=len(hits)) for h in ordered]
    for a, b in itertools.combinations(range(len(ordered)), 2):
        if said[ordered[a].seq] & wanted == said[ordered[b].seq] & wanted:
            assert (rarest[a], ordered[a].seq) < (rarest[b], ordered[b].seq)


def test_a_ranking_keeps_what_outscores_everything_forwarded_by_its_margin() -> None:
    hits = [hit(1, "a", score=0.9), hit(2, "b", score=0.8), hit(3, "c", score=0.7)]
    assert recall.outranking(hits, {"x"}) == hits  # nothing forwarded ranks
    assert recall.outranking(hits, {"c"}) == hits[:2]
    assert recall.outranking(hits, {"c"}, margin=0.15) == hits[:1]
    assert recall.outranking(hits, {"b"}, margin=0.15) == []
    # Unjudged hits stay wherever they rank; what the model already sees never does.
    assert recall.outranking(hits, {"a"}, unjudged={3}) == hits[2:]
    assert recall.outranking(hits, {"a"}, unjudged={1}) == []


def test_fusion_keeps_the_lexical_hit_and_its_replies() -> None:
    answer = hit(4, "A silver Prius.", "assistant")
    asked = SearchHit(3, 3, "user", "Still driving that old car?", 9.0, (answer,))
    fused = fusion.fuse([asked], [hit(3, asked.text, score=0.8), hit(7)])
    assert fused[0].replies == (answer,) and fused[0].seq == 3


def test_a_reply_already_forwarded_or_quoted_is_left_out() -> None:
    answer = hit(4, "A silver Prius.", "assistant")
    asked = SearchHit(3, 3, "user", "Still driving that old car?", 9.0, (answer,))
    question = "What does Evan drive?"
    assert recall.fresh([asked], question, [], k=3)[0].replies == (answer,)
    assert recall.fresh([asked], question, [answer.text], k=3)[0].replies == ()
    # The answer as a hit of its own after the question that carried it: not twice.
    assert recall.fresh([asked, answer], question, [], k=3) == [asked]
    assert quoting.quoted([asked]) == 2


def test_only_a_hit_asking_about_the_question_brings_its_reply() -> None:
    answer = hit(4, "A silver Prius.", "assistant")
    question = "What does Evan drive?"
    in_passing = "Still driving the old car. Anything fun this weekend?"
    asked = SearchHit(3, 3, "user", in_passing, 9.0, (answer,))
    assert recall.fresh([asked], question, [], k=3)[0].replies == ()
    assert recall.asks_about("Are you still driving it?", recall.stems(question))
    assert not recall.asks_about(in_passing, recall.stems(question))


def test_the_block_quotes_each_hit_then_its_replies() -> None:
    answer = hit(4, "A silver Prius.", "assistant")
    asked = SearchHit(3, 3, "user", "Still driving that old car?", 9.0, (answer,))
    assert quoting.quote([asked, hit(9, "Car wash on Sunday.")], 500) == "\n".join(
        [
            quoting.HEADER,
            "[turn 3, user] Still driving that old car?",
            "[turn 4, assistant] A silver Prius.",
            "[turn 9, user] Car wash on Sunday.",
        ]
    )


def test_a_long_message_is_quoted_around_its_match_not_its_head() -> None:
    filler = [f"Line {i} about the weather and the train." for i in range(20)]
    text = " ".join([*filler[:10], "I am allergic to peanuts.", *filler[10:]])
    quoted = quoting.excerpt(text, 200, recall.stems("What is Evan allergic to?"))
    assert "I am allergic to peanuts." in quoted
    assert quoted.startswith("[...] ") and quoted.endswith(" [...]")
    assert len(quoted) <= 200 + len("[...]  [...]")
    # No word in common: the head; short texts whole.
    assert quoting.excerpt(text, 50, recall.stems("Which opera?")) == text[:50] + " [...]"
    assert quoting.excerpt("short", 50, frozenset()) == "short"


SENTENCES = st.sampled_from(
    ["Cats sleep.", "I like tea!", "Rain again?", "x", "- a list item", "tea " * 20, "y" * 60]
)


@given(st.lists(SENTENCES, max_size=30), st.sampled_from([" ", "\n", "\n\n"]))
def test_an_excerpt_is_a_marked_stretch_of_the_text_within_budget(
    sentences: list[str], joint: str
) -> None:
    text = joint.join(sentences)
    quoted = quoting.excerpt(text, 40, recall.stems("tea"))
    core = quoted.removeprefix("[...] ").removesuffix(" [...]")
    assert len(core) <= 40 and core in text
    if len(text) <= 40:
        assert quoted == text
    else:
        # Whatever is left out is marked, on its side.
        at = text.index(core)
        assert quoted.startswith("[...] ") == bool(text[:at].strip())
        assert quoted.endswith(" [...]") == bool(text[at + len(core) :].strip())
        if "tea" in text:
            assert "tea" in core


def test_embeddings_hits_spoken_to_whom_the_question_asks_about_are_left_out() -> None:
    question = "Which city did Melanie's sister move to?"
    hits = [
        hit(1, "That's so cool, Melanie! Will you go back?"),
        hit(2, "So my little sister Tess got the job! She is relocating to Phoenix."),
        hit(3, "Hey Melanie! How's it going?"),
        hit(4, "Melanie told me she moved the couch."),  # names her, speaks of her
        hit(5, "Talk soon, Audrey!"),  # someone the question does not name
    ]
    assert relevance.unaddressed(hits, recall.named(question)) == [hits[1], hits[3], hits[4]]
    # A question naming no one (its opening word is no name) keeps every hit.
    opening = recall.named("Melanie, which city did your sister move to?")
    assert relevance.unaddressed(hits, opening) == hits
    assert relevance.unaddressed(hits, recall.named("Where did the sister move?")) == hits


@given(
    st.lists(
        st.sampled_from(
            ["Talk soon, Evan!", "Hey Evan! Long time.", "Evan bought a boat.", "We went out."]
        ),
        max_size=8,
    ),
    st.sampled_from(["What did Evan buy?", "What did Maya buy?", "What did we buy?"]),
)
def test_unaddressed_keeps_the_order_and_leaves_out_only_what_addresses_a_name_asked_about(
    texts: list[str], question: str
) -> None:
    hits = [hit(i, text) for i, text in enumerate(texts)]
    kept = relevance.unaddressed(hits, recall.named(question))
    assert kept == [h for h in hits if h in kept]  # a subsequence, in order
    for h in hits:
        spoken_to = "Evan" in question and relevance.addressing("Evan").search(h.text)
        assert (h in kept) is not spoken_to
