"""Recall: a fact summarised away comes back when the question returns to it; nothing else does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from proxy import recall
from proxy.app import create_app
from proxy.config import load_settings
from proxy.store import MemoryStore
from proxy.tokens import TokenCounter

from .factories import assistant, call, system, tool, user
from .fake_upstream import FakeUpstream, create_fake_upstream

PASSPORT = "My passport number is X1234567 and it expires in March 2031."


def test_a_related_question_ranks_the_fact_first() -> None:
    pool = recall.candidates_from(
        [user("I like trains."), user(PASSPORT), assistant("Noted, trains it is.")], set()
    )
    found = recall.rank("When does my passport expire?", pool, k=3)
    assert [c.text for c in found] == [PASSPORT]
    assert found[0].turn == 2 and found[0].role == "user"


def test_an_unrelated_question_recalls_nothing() -> None:
    pool = recall.candidates_from([user(PASSPORT), assistant("Noted.")], set())
    assert recall.rank("What is a good pasta recipe for dinner?", pool, k=3) == []
    assert recall.rank("", pool, k=3) == []


def test_forwarded_and_repeated_texts_are_not_candidates() -> None:
    archive = [user(PASSPORT), assistant("ok"), user(PASSPORT), tool("c1", "museum opens at 9")]
    pool = recall.candidates_from(archive, {"ok"})
    assert [(c.role, c.text) for c in pool] == [
        ("user", PASSPORT),
        ("tool result", "museum opens at 9"),
    ]


def test_the_block_goes_right_before_the_last_user_message_and_quotes_tool_results() -> None:
    chain = [assistant(None, tool_calls=[call("c9")]), tool("c9", "done")]
    messages = [system(), user("q1"), *chain, assistant("a"), user("museum hours?")]
    content = recall.quote([recall.Candidate(3, "tool result", "museum opens at 9")], 500)
    out = recall.inject(messages, content)
    assert out[:-2] == messages[:-1] and out[-1] == messages[-1]
    assert out[-2] == {"role": "system", "content": content}
    assert content.startswith(recall.HEADER) and "[turn 3, tool result] museum opens" in content


@pytest.fixture
def app() -> Iterator[tuple[TestClient, FakeUpstream]]:
    upstream = create_fake_upstream()
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1",
            "CONTEXT_PROXY_RECALL_ENABLED": "true",
        },
        overrides={"models": {"windows": {"tiny": 3000}}},
    )
    proxy = create_app(
        settings, transport=httpx.ASGITransport(upstream.app), store=MemoryStore(ttl_s=3600)
    )
    with TestClient(proxy) as client:
        yield client, upstream


def test_a_fact_from_turn_5_comes_back_at_the_end_of_a_long_conversation(
    app: tuple[TestClient, FakeUpstream],
) -> None:
    client, upstream = app
    history: list[Any] = [system("You are a travel agent.")]

    def ask(text: str) -> httpx.Response:
        history.append(user(text))
        r = client.post(
            "/v1/chat/completions",
            json={"model": "tiny", "messages": history},
            headers={"Authorization": "Bearer sk-r", "X-Conversation-Id": "trip"},
        )
        assert r.status_code == 200, r.text
        history.append(assistant(r.json()["choices"][0]["message"]["content"]))
        return r

    for i in range(60):
        ask(PASSPORT if i == 4 else f"Day {i}: plan a walk around district {i} with coffee stops.")
    forwarded = upstream.chat_requests()[-1]["messages"]
    assert all(PASSPORT not in str(m.get("content")) for m in forwarded), "not reduced yet"

    r = ask("Remind me when my passport expires?")
    assert int(r.headers["x-context-recall"]) >= 1
    block = upstream.chat_requests()[-1]["messages"][-2]
    assert block["role"] == "system" and block["content"].startswith(recall.HEADER)
    assert f"[turn 5, user] {PASSPORT}" in block["content"]

    tokens = TokenCounter().count_messages("tiny", upstream.chat_requests()[-1]["messages"])
    assert tokens - 3 <= 0.7 * 3000

    r = ask("Which pasta recipe goes with a red wine sauce?")
    assert r.headers["x-context-recall"] == "0"
    assert upstream.chat_requests()[-1]["messages"][-2]["role"] == "assistant"


def test_embeddings_recall_is_refused_until_it_exists() -> None:
    from proxy.errors import ConfigError

    with pytest.raises(ConfigError, match=r"recall\.method"):
        load_settings(
            env={"CONTEXT_PROXY_RECALL_ENABLED": "1", "CONTEXT_PROXY_RECALL_METHOD": "embeddings"}
        )
