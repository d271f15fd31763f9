"""Request bodies the load generator sends, and the answer the mock gives.

Bodies are serialised once per template and the per-request counter is
spliced into the bytes, so the client spends its (shared) CPU on sending,
not on JSON. The assistant's turns are the canned mock's answer: a client
that resends the history must resend exactly the assistant message the
proxy stored, or the proxy would see an edit instead of a continuation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.mock.canned import ANSWER

ANSWER_MESSAGE: dict[str, Any] = {"role": "assistant", "content": ANSWER}

MODEL = "gpt-4.1"  # a 1M-token window: nothing is reduced for strategy comparisons
STEADY_MODEL = "bench-small"  # given a 1,000-token window in the proxy's config
STEADY_WINDOW = 1000

_WORDS = [
    "context",
    "window",
    "proxy",
    "request",
    "latency",
    "token",
    "summary",
    "stream",
    "upstream",
    "buffer",
    "history",
    "message",
    "tool",
    "call",
    "result",
    "archive",
    "store",
    "sqlite",
    "memory",
    "budget",
    "cache",
    "prefix",
    "reduce",
    "answer",
    "assistant",
    "user",
    "system",
    "model",
    "throughput",
    "percentile",
    "connection",
    "pool",
    "transport",
    "socket",
    "header",
    "payload",
    "parse",
    "serialise",
    "hash",
]


def prose(rng: random.Random, chars: int) -> str:
    """Word salad of roughly `chars` characters, about 4-5 characters per token."""
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def history(n: int, chars: int, seed: int = 0) -> list[dict[str, Any]]:
    """A system message then alternating user/assistant turns, `n` messages in all."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful bot."}]
    for i in range(1, n):
        role = "user" if i % 2 else "assistant"
        messages.append({"role": role, "content": prose(rng, chars)})
    return messages


@dataclass(frozen=True)
class Template:
    """Conversations of `turns` requests, as an app that resends its history plays them.

    A conversation opens with `base` (ending with a user message); each later
    request resends everything, the mock's answer and a new numbered question,
    so the proxy finds the turn it stored (and its summary) and only two
    messages are new. Bytes are spliced, never re-serialised, to keep the
    client cheap.
    """

    name: str
    prefix: bytes  # '{"model":...,"messages":[...base' without the closing bracket
    suffix: bytes  # '],"stream":...}'
    messages: int
    turns: int
    path: str = "/v1/chat/completions"
    answer: bytes = b""  # the stored answer as the app resends it, between commas

    def opening(self) -> bytes:
        return self.prefix + self.suffix

    def step(self, n: int) -> bytes:
        """What turn n adds: the stored answer and a new question."""
        answer = self.answer or ANSWER_JSON
        return answer + b'{"role":"user","content":"Question ' + str(n).encode() + b'?"}'

    def body(self, grown: bytes) -> bytes:
        return self.prefix + grown + self.suffix


ANSWER_JSON = b"," + orjson.dumps(ANSWER_MESSAGE) + b","


def template(
    name: str, base: list[dict[str, Any]], *, stream: bool, turns: int, model: str = MODEL
) -> Template:
    full = orjson.dumps({"model": model, "messages": base, "stream": stream})
    cut = full.rindex(b'],"stream":')
    return Template(name, full[:cut], full[cut:], len(base), turns)


# The mock's Responses answer as an app resends it: its output message item.
RESPONSES_ANSWER = (
    b","
    + orjson.dumps(
        {
            "type": "message",
            "id": "msg_bench",
            "role": "assistant",
            "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
        }
    )
    + b","
)


def responses(chat: Template) -> Template:
    """`chat`'s conversations on `/v1/responses`: the same items as `input`, whole answers."""
    prefix = chat.prefix.replace(b'"messages":[', b'"input":[', 1)
    return Template(
        f"{chat.name}-responses",
        prefix,
        chat.suffix,
        chat.messages,
        chat.turns,
        path="/v1/responses",
        answer=RESPONSES_ANSWER,
    )


# The mock's Messages answer as an app resends it: an assistant message of one text block.
MESSAGES_ANSWER = (
    b"," + orjson.dumps({"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}) + b","
)
CHAT_SYSTEM = b'"messages":[{"role":"system","content":"You are a helpful bot."},'


def messages(chat: Template) -> Template:
    """`chat`'s conversations on Anthropic's `/v1/messages`: the system message as `system`,
    `max_tokens` given, whole answers."""
    anthropic = b'"max_tokens":256,"system":"You are a helpful bot.","messages":['
    return Template(
        f"{chat.name}-messages",
        chat.prefix.replace(CHAT_SYSTEM, anthropic, 1),
        chat.suffix,
        chat.messages - 1,
        chat.turns,
        path="/v1/messages",
        answer=MESSAGES_ANSWER,
    )


def small(stream: bool) -> Template:
    """2 to 8 messages (system, user, then answers and questions): 0.2-0.7 KB."""
    return template("small", history(2, 60), stream=stream, turns=4)


def large(stream: bool) -> Template:
    """198 to 212 messages, about 400 KB and 100k tokens: a long agent session resent in full."""
    return template("large", history(198, 2000, seed=1), stream=stream, turns=8)


def steady(stream: bool) -> Template:
    """A conversation past `bench-small`'s 1,000-token window: summarised once, then reused.

    The opening request needs a summary; later turns add about 30 tokens
    each, so the stored summary is reused for about 15 turns before the
    trigger is crossed again: the steady state of a long conversation.
    """
    return template("steady", history(22, 250, seed=2), stream=stream, turns=48, model=STEADY_MODEL)


def growing(n: int, turns: int, seed: int) -> list[bytes]:
    """Bodies of one conversation in full-history mode: `n - 2` messages, then +2 a turn.

    The first body (n - 2 messages, ending with a user message) is the warm-up;
    each later one resends everything, the stored answer and one new question,
    so the measured turns have n, n + 2, ... messages.
    """
    base = history(n - 2, 300, seed=seed)
    if base[-1]["role"] != "user":
        base.append({"role": "user", "content": "Please go on."})
    bodies = [orjson.dumps({"model": MODEL, "messages": base})]
    convo = list(base)
    for t in range(turns):
        convo = [*convo, ANSWER_MESSAGE, {"role": "user", "content": f"Turn {t}: go on."}]
        bodies.append(orjson.dumps({"model": MODEL, "messages": convo}))
    return bodies


def long_conversation(turns: int, seed: int) -> list[bytes]:
    """A conversation for `bench-small` that starts short and crosses its window again and again.

    Each turn adds the stored answer and a short question (about 35 tokens
    in all), so the summariser is needed every dozen turns or so, and the
    proxy has a few turns between its soft mark and the trigger to prepare
    the summary in the background.
    """
    rng = random.Random(seed)
    convo: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful bot."},
        {"role": "user", "content": prose(rng, 200)},
    ]
    bodies = [orjson.dumps({"model": STEADY_MODEL, "messages": convo})]
    for t in range(1, turns):
        convo = [*convo, ANSWER_MESSAGE, {"role": "user", "content": f"{t}: " + prose(rng, 40)}]
        bodies.append(orjson.dumps({"model": STEADY_MODEL, "messages": convo}))
    return bodies
