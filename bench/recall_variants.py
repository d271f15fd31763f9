"""The development set's conversations as other replays and other people would have them.

Each variant is `bench.recall_set`'s conversation of a seed, changed in one way
the held-out benchmark's replay or its people might differ from it:

- the speaker named in each message ("Evan: ...");
- nicknames for the names the questions use ("Hey Ev!");
- interests brought up twice a session by each side, so that their words are in
  about a twelfth of the messages, too common to single out a fact;
- small talk that rarely repeats a sentence but shares its everyday words with
  much of the conversation;
- both people's turns sent as user messages, each acknowledged by the assistant;
- each session sent as one message of its lines.
"""

from __future__ import annotations

from collections.abc import Callable

from .recall_set import PAIRS, Conversation, Question, chatter, conversation


def labelled(convo: Conversation, seed: int) -> Conversation:
    """`convo` (of `seed`) as a replay that names the speaker in each message ("Evan: ...")."""
    a, b = PAIRS[seed % len(PAIRS)]
    messages = [
        {**m, "content": f"{a if m['role'] == 'user' else b}: {m['content']}"}
        for m in convo.messages
    ]
    return Conversation(messages, convo.questions)


def nicknamed(convo: Conversation, seed: int) -> Conversation:
    """`convo` (of `seed`) with the two calling each other by nicknames ("Hey Ev!"), while
    the questions use their names."""
    messages = [dict(m) for m in convo.messages]
    for name in PAIRS[seed % len(PAIRS)]:
        for m in messages:
            m["content"] = m["content"].replace(name, name[:3] if len(name) > 3 else name[:2])
    return Conversation(messages, convo.questions)


def one_role(convo: Conversation, seed: int) -> Conversation:
    """`convo` (of `seed`) as a replay that sends each turn of both people as a user
    message naming its speaker, the assistant acknowledging each with "ok"."""
    messages: list[dict[str, str]] = []
    for m in labelled(convo, seed).messages:
        messages += [
            {"role": "user", "content": m["content"]},
            {"role": "assistant", "content": "ok"},
        ]
    # Message i is now at 2 i.
    questions = [Question(q.text, [2 * i for i in q.evidence], q.answer) for q in convo.questions]
    return Conversation(messages, questions)


def one_message_a_session(convo: Conversation, seed: int, turns: int = 24) -> Conversation:
    """`convo` (of `seed`, in sessions of `turns` messages) as a replay that sends each
    session as one user message of its lines ("Evan: ..."), acknowledged with "ok"."""
    lines = labelled(convo, seed).messages
    messages: list[dict[str, str]] = []
    at: dict[int, int] = {}
    for start in range(0, len(lines), turns):
        at.update((i, len(messages)) for i in range(start, min(start + turns, len(lines))))
        session = "\n".join(m["content"] for m in lines[start : start + turns])
        messages += [{"role": "user", "content": session}, {"role": "assistant", "content": "ok"}]
    questions = [Question(q.text, [at[i] for i in q.evidence], q.answer) for q in convo.questions]
    return Conversation(messages, questions)


# The variants by name, each of a seed (as `dev_set` numbers the conversations).
VARIANTS: dict[str, Callable[[int], Conversation]] = {
    "speakers named": lambda seed: labelled(conversation(seed), seed),
    "nicknames": lambda seed: nicknamed(conversation(seed), seed),
    "talkative": lambda seed: conversation(seed, interest=2),
    "varied small talk": lambda seed: conversation(seed, small_talk=chatter(seed)),
    "one role": lambda seed: one_role(conversation(seed), seed),
    "a message a session": lambda seed: one_message_a_session(conversation(seed), seed),
}
