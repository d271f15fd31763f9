"""What a recall hit reacts to: the message before it comes with it, when the hit speaks
of the question's words otherwise than in the first person, and only where it fits.

The search reads the message (test drives a real FTS5 index through `search_messages`,
as a store's archive is searched); `recall.fresh` decides whether the hit reacts;
`quoting.fitted` gives it room only where the hits lose none.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy import english, quoting, recall
from proxy.messages import Message
from proxy.store.base import SearchHit
from proxy.store.search import search_messages


def hit(seq: int, text: str, role: str = "user", prompt: tuple[SearchHit, ...] = ()) -> SearchHit:
    return SearchHit(seq, seq, role, text, 1.0, prompt=prompt)


NEWS = hit(4, "Huge moment: a cafe on Main Street agreed to show my lighthouses.", "assistant")


def test_a_sentence_in_the_first_person_speaks_of_the_speaker() -> None:
    assert english.first_person("I picked up watercolors.")
    assert english.first_person("Our dog is fine, thanks for asking")
    assert english.first_person("We're back!")
    assert not english.first_person("Your art on a wall! Congrats!")
    assert not english.first_person("Did you go alone?")
    # Words that hold the letters are not the pronoun.
    assert not english.first_person("Ireland is lovely in May")


def test_a_hit_reacting_to_news_carries_the_news() -> None:
    question = "Would Owen enjoy a visit to an art museum?"
    reaction = hit(5, "Your art on a wall! That's amazing, congrats!", prompt=(NEWS,))
    (chosen,) = recall.fresh([reaction], question, [], k=3)
    assert chosen.prompt == (NEWS,)
    assert quoting.quoted([chosen]) == 2
    # The block quotes what it reacted to first, as it was said.
    assert quoting.quote([chosen], 500) == "\n".join(
        [
            quoting.HEADER,
            f"[turn 4, assistant] {NEWS.text}",
            f"[turn 5, user] {reaction.text}",
        ]
    )


def test_a_hit_telling_its_own_news_carries_nothing_before_it() -> None:
    question = "Would Owen enjoy a visit to an art museum?"
    told = hit(5, "I finally hung my art in the hallway.", prompt=(NEWS,))
    assert recall.fresh([told], question, [], k=3)[0].prompt == ()
    # Only the sentences on the question's words count: news said in the first person
    # after a reaction on other words is still news.
    mixed = hit(5, "Cute photo! I sold my art at the fair.", prompt=(NEWS,))
    assert recall.fresh([mixed], question, [], k=3)[0].prompt == ()


def test_what_a_hit_reacts_to_is_left_out_when_forwarded_or_quoted() -> None:
    question = "Would Owen enjoy a visit to an art museum?"
    reaction = hit(5, "Your art on a wall!", prompt=(NEWS,))
    assert recall.fresh([reaction], question, [NEWS.text], k=3)[0].prompt == ()
    again = hit(9, "Your art is everywhere now!", prompt=(NEWS,))
    first, second = recall.fresh([reaction, again], question, [], k=3)
    assert first.prompt == (NEWS,) and second.prompt == ()
    # The news as a hit of its own after the reaction that carried it: not twice.
    assert recall.fresh([reaction, NEWS], question, [], k=3) == [reaction]


def said(texts: list[str]) -> list[Message]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]


def test_the_search_reads_the_message_before_a_hit_when_the_other_side_said_it() -> None:
    messages = said(
        [
            "How was the weekend?",
            "A cafe on Main Street agreed to show my lighthouses.",
            "Your art on a wall! Congrats!",
            "Thanks! Any plans tonight?",
            "More art, probably.",
        ]
    )
    ((first, second),) = search_messages(messages, [(["art"], True)], 5)
    by_seq = {h.seq: h for h in (first, second)}
    assert [p.text for p in by_seq[2].prompt] == [messages[1]["content"]]
    assert [p.role for p in by_seq[2].prompt] == ["assistant"]
    assert [p.text for p in by_seq[4].prompt] == [messages[3]["content"]]


def test_nothing_comes_before_a_first_message_or_after_the_hits_own_side() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "Art class tonight."},
        {"role": "user", "content": "And more art tomorrow."},
    ]
    (hits,) = search_messages(messages, [(["art"], True)], 5)
    assert {h.seq for h in hits} == {0, 1} and all(h.prompt == () for h in hits)


def count(content: str) -> int:
    return len(content) // 4


PROMPTS = st.lists(
    st.tuples(st.integers(0, 900), st.integers(0, 900), st.booleans()), min_size=1, max_size=6
)


@given(PROMPTS, st.integers(60, 700))
def test_what_hits_react_to_never_costs_a_hit_or_its_room(
    sizes: list[tuple[int, int, bool]], budget: int
) -> None:
    found = [
        hit(
            10 * i + 1,
            "art " + "x " * own,
            prompt=(hit(10 * i, "news " + "y " * before, "assistant"),) if reacts else (),
        )
        for i, (own, before, reacts) in enumerate(sizes)
    ]
    bare = [SearchHit(h.seq, h.turn, h.role, h.text, h.score) for h in found]
    content, quoted = quoting.fitted(found, "art?", budget, count)
    alone, alone_quoted = quoting.fitted(bare, "art?", budget, count)
    assert count(content) <= budget or not quoted
    # With what they react to or without, the hits are quoted as they would be alone.
    prompts = {f"[turn {p.turn}, {p.role}]" for h in found for p in h.prompt}
    kept = [line for line in content.splitlines() if line.split("] ")[0] + "]" not in prompts]
    assert kept == alone.splitlines()
    assert quoted >= alone_quoted


def test_a_long_prompt_is_read_whole_and_known_as_forwarded() -> None:
    # The message a reaction follows, longer than 16 passages (~6,400 characters).
    long = " ".join(
        f"Sentence {i} tells of the lighthouse paintings at length here." for i in range(150)
    )
    messages = [
        {"role": "user", "content": "How was the weekend?"},
        {"role": "assistant", "content": long},
        {"role": "user", "content": "Your art on a wall! Congrats!"},
    ]
    (hits,) = search_messages(messages, [(["art"], True)], 5)
    (reaction,) = [h for h in hits if h.seq == 2]
    assert [p.text for p in reaction.prompt] == [long]
    question = "Would Owen enjoy a visit to an art museum?"
    forwarded, _ = recall.as_searched([long])
    (chosen,) = recall.fresh([reaction], question, [long], k=3, forwarded=forwarded)
    assert chosen.prompt == ()


def test_a_long_message_is_not_quoted_both_as_a_prompt_and_as_its_passage() -> None:
    filler = " ".join(f"Line {i} about the weather and the bus ride home today." for i in range(20))
    news = f"{filler} A cafe on Main Street agreed to hang my art on its walls. {filler}"
    messages = [
        {"role": "user", "content": "How was the weekend?"},
        {"role": "assistant", "content": news},
        {"role": "user", "content": "Your art on a wall! Congrats!"},
        {"role": "assistant", "content": "Thanks!"},
    ]
    question = "Would Owen enjoy a visit to an art museum?"
    (hits,) = search_messages(messages, [(["art"], True)], 10)
    chosen = recall.fresh(hits, question, [], k=5)
    block = quoting.quote(chosen, 400, question)
    assert block.count("[turn 1, assistant]") == 1, block
