"""A Responses app that keeps its history as chat messages, through the real server.

Such an app (one ported from chat completions, or a framework that keeps its own
message list) resends an answer as `{"role": "assistant", "content": text}` and a
call without the `id` and `status` the response gave it. Those are the answers the
proxy stored, and must read so: otherwise every turn looks like an edit of the one
before, archived again beside the stored answer (which recall then quotes twice).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.messages import digest
from proxy.mock import MockUpstream

from .servers import run_server, serve_proxy
from .test_responses_e2e import MODEL, TOOLS, WINDOW

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def proxied(db: Path) -> Iterator[tuple[MockUpstream, str]]:
    upstream = MockUpstream(context_limits={MODEL: WINDOW})
    with (
        run_server(upstream.app) as upstream_url,
        serve_proxy(upstream_url + "/v1", db, windows={MODEL: WINDOW}) as url,
    ):
        yield upstream, url + "/v1"


def as_chat(item: Any) -> list[dict[str, Any]]:
    """An output item as an app keeping chat messages writes it back (reasoning has no
    place among chat messages)."""
    if item.type == "reasoning":
        return []
    if item.type == "message":
        return [{"role": "assistant", "content": "".join(c.text for c in item.content)}]
    assert item.type == "function_call"
    return [
        {
            "type": "function_call",
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
        }
    ]


def test_answers_resent_as_chat_messages_are_archived_once_and_reduced_as_before(
    tmp_path: Path,
) -> None:
    history: list[dict[str, Any]] = []
    kinds: list[str] = []
    db = tmp_path / "p.db"
    with (
        proxied(db) as (upstream, url),
        openai.OpenAI(base_url=url, api_key="sk-app", max_retries=0) as api,
    ):
        for i in range(60):
            ask = f"Turn {i}: tell me about day {i} of the trip, budget {i * 10} euros."
            if i % 5 == 3:
                ask = f"Turn {i}: please call tool lookup for city {i}."
            history.append({"role": "user", "content": ask})
            while True:
                raw = api.responses.with_raw_response.create(
                    model=MODEL, input=history, tools=TOOLS, store=False
                )
                kinds.append(raw.headers["x-context-reduction"])
                response = raw.parse()
                history += [m for item in response.output for m in as_chat(item)]
                calls = [item for item in response.output if item.type == "function_call"]
                if not calls:
                    break
                for call in calls:
                    output = f"City {i} has {i % 7 + 2} museums and an old town."
                    history.append(
                        {"type": "function_call_output", "call_id": call.call_id, "output": output}
                    )
    with contextlib.closing(sqlite3.connect(db)) as con:  # the server stopped: all written
        (archived,) = con.execute("SELECT COUNT(*) FROM messages").fetchone()
    # Each message once, but for the turns that called a tool: the stored answer opened
    # with a reasoning item the app leaves out, so its call follows the question directly,
    # another message than the stored one (an edit, kept beside it: two rows a call).
    called = sum(1 for m in history if m.get("type") == "function_call")
    assert called == 12 and archived == len(history) + 2 * called, (archived, len(history))
    # A summary is made when the history crosses the trigger and reused until the next
    # crossing, not made again on every turn that looked like an edit.
    assert any("summarized" in k for k in kinds)
    assert len(upstream.summary_requests()) <= 0.15 * len(kinds), len(upstream.summary_requests())


TEXT = st.text(min_size=1, max_size=40)
IDS = st.from_regex(r"[a-z]{2,4}_[0-9a-f]{8}", fullmatch=True)


@given(TEXT, IDS, st.sampled_from(["completed", "incomplete", "in_progress"]))
def test_an_answer_item_and_the_chat_message_of_its_text_are_the_same_message(
    text: str, item_id: str, status: str
) -> None:
    block = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    item = {"id": item_id, "type": "message", "status": status, "role": "assistant"}
    assert digest({**item, "content": [block]}) == digest({"role": "assistant", "content": text})
    # A user's text as one input block is its string, as a chat text part is.
    user = [{"type": "input_text", "text": text}]
    assert digest({"role": "user", "content": user}) == digest({"role": "user", "content": text})
    # What does say something stays: a citation, or the answer's words.
    cited = {**block, "annotations": [{"type": "url_citation", "url": "https://example.com"}]}
    assert digest({**item, "content": [cited]}) != digest({"role": "assistant", "content": text})
    assert digest({**item, "content": [block]}) != digest({"role": "user", "content": text})
    changed = {**block, "text": text + "!"}
    assert digest({**item, "content": [changed]}) != digest({**item, "content": [block]})


@given(IDS, IDS, TEXT)
def test_a_call_is_the_same_call_without_its_item_id_and_status(
    item_id: str, call_id: str, arguments: str
) -> None:
    call = {"type": "function_call", "call_id": call_id, "name": "lookup", "arguments": arguments}
    answered = {**call, "id": item_id, "status": "completed"}
    assert digest(answered) == digest(call)
    # Its output too, as a conversation's listed items carry them.
    output = {"type": "function_call_output", "call_id": call_id, "output": arguments}
    assert digest({**output, "id": item_id, "status": "completed"}) == digest(output)
    assert digest({**call, "call_id": call_id + "x"}) != digest(call)
    # Other items keep every field: a reasoning item's id is what OpenAI looks it up by.
    reasoning = {"type": "reasoning", "id": item_id, "summary": []}
    assert digest(reasoning) != digest({"type": "reasoning", "summary": []})
