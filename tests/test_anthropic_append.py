"""Append mode on `/v1/messages`, through the real server with the official clients.

The mock upstream validates each request as Anthropic (or OpenAI) does, so a
stored history forwarded in the wrong format fails there as it would in production.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from proxy.mock import MockUpstream

from .servers import run_server, serve_proxy

pytestmark = pytest.mark.integration

MODEL = "claude-tiny"
KEY = "sk-ant-append"


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[MockUpstream, str]]:
    upstream = MockUpstream()
    with (
        run_server(upstream.app) as upstream_url,
        serve_proxy(upstream_url + "/v1", tmp_path / "p.db", anthropic_url=upstream_url) as url,
    ):
        yield upstream, url


def clients(url: str) -> tuple[openai.OpenAI, anthropic.Anthropic]:
    return (
        openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0),
        anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0),
    )


def ask(api: anthropic.Anthropic, messages: list[Any], **headers: str) -> Any:
    return api.messages.create(
        model=MODEL, max_tokens=64, system="Be terse.", messages=messages, extra_headers=headers
    )


def test_a_conversation_id_keeps_the_format_it_was_started_in(
    proxied: tuple[MockUpstream, str],
) -> None:
    """Appending on /v1/messages to a chat conversation forwarded its `system` message in
    Anthropic's `messages` (a 400 from Anthropic); the reverse sent Anthropic's blocks to
    OpenAI without the `system` the app set. Both are now refused, in the route's shape,
    naming the conflict, and each conversation goes on where it was started."""
    upstream, url = proxied
    chat, messages = clients(url)
    append = {"X-Context-Mode": "append"}
    pirate = [{"role": "system", "content": "Be a pirate."}, {"role": "user", "content": "hi"}]
    chat.chat.completions.create(
        model="gpt-4o-mini", messages=pirate, extra_headers={"X-Conversation-Id": "in-chat"}
    )
    ask(messages, [{"role": "user", "content": "hi"}], **{"X-Conversation-Id": "in-messages"})
    before = len(upstream.requests)
    with pytest.raises(anthropic.BadRequestError) as refused:
        ask(
            messages,
            [{"role": "user", "content": "again"}],
            **{"X-Conversation-Id": "in-chat"},
            **append,
        )
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert "/v1/chat/completions" in error["message"] and "'in-chat'" in error["message"]
    with pytest.raises(openai.BadRequestError) as reverse:
        chat.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "again"}],
            extra_headers={"X-Conversation-Id": "in-messages", **append},
        )
    assert reverse.value.code == "conversation_format_mismatch"
    assert "/v1/messages" in reverse.value.message
    assert len(upstream.requests) == before  # nothing went upstream
    # Nothing stored was touched: each continues on its own route.
    chat.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "again"}],
        extra_headers={"X-Conversation-Id": "in-chat", **append},
    )
    assert [m["content"] for m in upstream.chat_requests()[-1]["messages"]] == [
        "Be a pirate.",
        "hi",
        "Echo: hi",
        "again",
    ]
    ask(
        messages,
        [{"role": "user", "content": "again"}],
        **{"X-Conversation-Id": "in-messages"},
        **append,
    )
    sent = upstream.messages_requests()[-1]
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["system"] == "Be terse."


def archived(db: Path, conversation: str) -> list[Any]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT m.message FROM messages m JOIN conversations c ON c.id = m.conversation_id"
            " WHERE c.conversation = ? ORDER BY m.seq",
            (conversation,),
        ).fetchall()
    return [orjson.loads(row[0]) for row in rows]


@pytest.mark.parametrize("stream", [False, True])
def test_a_prefill_sent_alone_in_append_mode_starts_the_answer(
    tmp_path: Path, stream: bool
) -> None:
    """An append-mode request of nothing but a prefill ("Also") was stored as a message of
    its own, with the answer after it; it is now the start of the answer, stored as one
    message with it, as in full-history mode."""
    upstream, db = MockUpstream(), tmp_path / "p.db"
    hi = [{"role": "user", "content": "hi"}]
    prefill = {"role": "assistant", "content": "Also"}
    with (
        run_server(upstream.app) as upstream_url,
        serve_proxy(upstream_url + "/v1", db, anthropic_url=upstream_url) as url,
    ):
        _, api = clients(url)
        # In append mode: the prefill alone, then the next question.
        ask(api, hi, **{"X-Conversation-Id": "appended"})
        append = {"X-Conversation-Id": "appended", "X-Context-Mode": "append"}
        if stream:
            kwargs: Any = {"model": MODEL, "max_tokens": 64, "system": "Be terse."}
            with api.messages.stream(**kwargs, messages=[prefill], extra_headers=append) as s:
                answer = s.get_final_message().content[0].text
        else:
            answer = ask(api, [prefill], **append).content[0].text
        assert upstream.messages_requests()[-1]["messages"][-1]["content"][-1]["text"] == "Also"
        ask(api, [{"role": "user", "content": "next"}], **append)
        # The same conversation as an app that resends it whole keeps it.
        whole = {"X-Conversation-Id": "whole"}
        first = ask(api, hi, **whole).content[0].text
        history = [*hi, {"role": "assistant", "content": first}]
        said = "Also" + ask(api, [*history, prefill], **whole).content[0].text
        history += [{"role": "assistant", "content": said}, {"role": "user", "content": "next"}]
        ask(api, history, **whole)
    texts = [api_text(m) for m in archived(db, "appended")]
    assert texts == ["hi", "Echo: hi", "Also" + answer, "next", "Echo: next"]
    assert [api_text(m) for m in archived(db, "whole")] == texts
    requests = upstream.messages_requests()
    assert requests[-1]["messages"] == requests[-4]["messages"]  # the same history forwarded


def api_text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(b["text"] for b in content)
