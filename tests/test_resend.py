"""A resent history is reused, never trusted: the proxy remembers each conversation's last
request (`known.py`) and the SQLite store writes only new working rows, and neither may
change what is forwarded, answered or stored."""

from __future__ import annotations

import itertools
import json
import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import respx
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import load_settings
from proxy.conversation import tenant_of
from proxy.fastpath.known import Known, list_start, locate, remember, reparse, resent
from proxy.store import ConvKey, MemoryStore, SqliteStore, Store

from .factories import assistant, call, system, tool, user

UPSTREAM = "http://upstream.test/v1"
KEY = {"Authorization": "Bearer sk-resend"}
CONV = ConvKey(tenant_of("sk-resend"), "resend")


def answers() -> Iterator[dict[str, Any]]:
    """Numbered answers; every third one calls a tool, so chains span turns."""
    for n in itertools.count():
        message: dict[str, Any] = {"role": "assistant", "content": f"answer {n} " + "w " * 40}
        if n % 3 == 2:
            message = {"role": "assistant", "content": None, "tool_calls": [call(f"t{n}")]}
        yield {
            "id": f"c{n}",
            "object": "chat.completion",
            "created": 1,
            "model": "tiny",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }


def script(post: Any) -> None:
    """Turns an app plays in full-history mode: growth, tool results, a regeneration, an edit."""
    history: list[dict[str, Any]] = [system("be brief"), user("start " + "x " * 30)]
    for turn in range(14):
        answer = post(history)
        if answer.get("tool_calls"):
            history += [answer, tool(answer["tool_calls"][0]["id"], "result " + "r " * 20)]
        else:
            history += [answer, user(f"question {turn} " + "q " * 30)]
        if turn == 6:  # regenerate: drop the last question and ask another
            history[-1] = user("asked differently " + "d " * 30)
        if turn == 9:  # edit an early message: a new branch
            history[1] = user("start over " + "s " * 30)
        if turn == 11:  # same value, other JSON type: must be forwarded as sent
            history[-1] = {**history[-1], "weight": 1}
        if turn == 12:  # the message sent with 1 last turn, resent with true
            history[-3] = {**history[-3], "weight": True}


def play(
    store: Store, *, fast_path: bool, conversation_id: str | None = "resend"
) -> tuple[list[bytes], list[dict[str, str]], list[Any]]:
    """Run the script, with the resend fast path on or off (`server.fast_path`).

    Without a `conversation_id` the proxy derives one, and the edit of the
    first question starts another conversation.
    """
    identified = {"X-Conversation-Id": conversation_id} if conversation_id else {}
    router = respx.MockRouter(assert_all_called=False, base_url=UPSTREAM)
    upstream = answers()
    router.post("/chat/completions").mock(
        side_effect=lambda request: httpx.Response(200, json=next(upstream))
    )
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": UPSTREAM,
            "CONTEXT_PROXY_MODELS_TINY": "700",
            "CONTEXT_PROXY_SERVER_FAST_PATH": str(fast_path).lower(),
        }
    )
    app = create_app(settings, transport=httpx.MockTransport(router.handler), store=store)
    headers: list[dict[str, str]] = []
    conversations: list[str] = []
    with TestClient(app) as client:

        def post(history: list[dict[str, Any]]) -> dict[str, Any]:
            r = client.post(
                "/v1/chat/completions",
                json={"model": "tiny", "messages": history},
                headers={**KEY, **identified},
            )
            assert r.status_code == 200, r.text
            headers.append({k: v for k, v in r.headers.items() if k.startswith("x-context")})
            conversations.append(r.headers["x-conversation-id"])
            message: dict[str, Any] = r.json()["choices"][0]["message"]
            return message

        script(post)
        last = ConvKey(CONV.tenant, conversations[-1])
        latest = client.portal.call(store.latest, last)  # type: ignore[union-attr]
    sent = [c.request.content for c in router.calls]
    assert latest is not None
    return sent, headers, latest.working


@pytest.mark.parametrize("conversation_id", ["resend", None])
def test_the_fast_path_changes_nothing_forwarded_or_stored(
    tmp_path: Path, reparsed: list[bool], conversation_id: str | None
) -> None:
    remembered = play(
        SqliteStore(str(tmp_path / "a.db")), fast_path=True, conversation_id=conversation_id
    )
    # Every turn resends the last request's bytes, and is parsed from its new
    # bytes only, but the first and those after an edit of a message sent before;
    # without an id, also the second: the first body is too short to fingerprint.
    full = {0, 10, 13} if conversation_id else {0, 1, 10, 13}
    assert reparsed == [i not in full for i in range(14)]
    reparsed.clear()
    plain = play(
        SqliteStore(str(tmp_path / "b.db")), fast_path=False, conversation_id=conversation_id
    )
    assert not any(reparsed)
    in_memory = play(MemoryStore(), fast_path=True, conversation_id=conversation_id)

    assert remembered[0] == plain[0] == in_memory[0]
    assert remembered[1] == plain[1] == in_memory[1]
    assert remembered[2] == plain[2] == in_memory[2]
    reductions = {h["x-context-reduction"] for h in remembered[1]}
    assert {"summarized", "reused"} <= {k for r in reductions for k in r.split(",")}


def test_a_resent_message_is_forwarded_as_the_client_sent_it(tmp_path: Path) -> None:
    sent, _, working = play(MemoryStore(), fast_path=True)
    # The app's own turns, not the summaries prepared in the background meanwhile.
    turns = [body for body in sent if b"context-proxy summarizer" not in body]
    before = [m["weight"] for m in json.loads(turns[-2])["messages"] if "weight" in m]
    after = [m["weight"] for m in json.loads(turns[-1])["messages"] if "weight" in m]
    assert before == [1] and before[0] is not True
    assert after == [True] and after[0] is True
    assert [m.get("weight") for m in working if "weight" in m] == [True]


def test_deleting_a_conversation_forgets_its_last_request() -> None:
    router = respx.MockRouter(assert_all_called=False, base_url=UPSTREAM)
    router.post("/chat/completions").respond(200, json=next(answers()))
    settings = load_settings(
        env={"CONTEXT_PROXY_UPSTREAM_BASE_URL": UPSTREAM, "CONTEXT_PROXY_AUTH_ADMIN_TOKEN": "adm"}
    )
    app = create_app(settings, transport=httpx.MockTransport(router.handler), store=MemoryStore())
    with TestClient(app) as client:
        client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [user("secret")]},
            headers={**KEY, "X-Conversation-Id": "resend"},
        )
        sessions = client.app_state["ctx"].sessions
        assert sessions.known(CONV) is not None
        r = client.delete(
            "/admin/conversations/resend",
            params={"tenant": CONV.tenant},
            headers={"Authorization": "Bearer adm"},
        )
        assert r.status_code == 200
        assert sessions.known(CONV) is None and not sessions.holds(CONV)


def request(messages: list[dict[str, Any]], *, spaced: bool = False, **extra: Any) -> bytes:
    """A body as a client sends it: compact (orjson, httpx) or spaced (json.dumps, the SDK)."""
    payload = {"model": "m", "messages": messages, **extra}
    return json.dumps(payload).encode() if spaced else orjson.dumps(payload)


def check(body: bytes, known: Known | None = None) -> tuple[list[dict[str, Any]], int]:
    """What the proxy does with a body: parse, locate the messages, recognise the resent ones."""
    payload = orjson.loads(body)
    messages = payload["messages"]
    return messages, resent(known, messages, body, locate(body, payload, known))


def remembered(body: bytes, messages: list[dict[str, Any]] | None = None) -> Known:
    """The proxy's memory of a request; `messages` are the objects it keeps (parsed if None)."""
    payload = orjson.loads(body)
    kept = messages if messages is not None else payload["messages"]
    n = len(kept)
    prefix, digest, suffix, suffix_digest = remember(body, locate(body, payload))
    return Known(
        tuple(kept),
        prefix,
        digest,
        (b"",) * n,
        ("",) * n,
        "m",
        (0,) * n,
        suffix_len=suffix,
        suffix_digest=suffix_digest,
        list_start=list_start(body, payload),
    )


def test_a_resent_prefix_is_recognised_and_its_objects_reused() -> None:
    old = [system("s"), user("q"), assistant("a")]
    known = remembered(request(old), old)
    new, count = check(request([*old, user("next")]))
    assert count == 0  # nothing remembered yet
    new, count = check(request([*old, user("next")]), known)
    assert count == 3
    assert all(a is b for a, b in zip(new, old, strict=False)) and new[3] == user("next")


@pytest.mark.parametrize("spaced", [False, True])
def test_the_sdks_body_with_tools_after_the_messages_is_recognised(spaced: bool) -> None:
    """The openai SDK sends `tools` (and the rest but `model` and `stream`) after `messages`."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"required": ["a]"]}}}]
    old = [system("s"), user("look ] here"), assistant("a [x]")]
    first = request(old, spaced=spaced, tools=tools, stream=True)
    known = remembered(first, old)
    later = request([*old, user("next ]")], spaced=spaced, tools=tools, stream=True)
    new, count = check(later, known)
    assert count == 3 and all(a is b for a, b in zip(new, old, strict=False))
    # The same request again (a retry) is all resent.
    assert check(first, known)[1] == 3


def test_an_edit_or_regeneration_reuses_only_the_common_part() -> None:
    known = remembered(request([system("s"), user("q"), assistant("a"), user("q2")]))
    assert check(request([system("s"), user("q"), assistant("a"), user("other")]), known)[1] == 3
    assert check(request([system("s"), user("changed"), assistant("a")]), known)[1] == 1


def test_a_second_messages_key_is_never_taken_for_a_resent_history() -> None:
    old = [system("s"), user("q")]
    known = remembered(request(old))
    # The prefix up to `q` is the same bytes, but the list that counts is the last one.
    others = [user("x"), user("y"), user("z")]
    body = request(old)[:-1] + b',"messages":' + orjson.dumps(others) + b"}"
    messages, count = check(body, known)
    assert messages == others and count == 0


@given(
    messages=st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=30)}
        ),
        min_size=1,
        max_size=6,
    ),
    before=st.dictionaries(st.sampled_from(["model", "user", "n"]), st.text(max_size=8)),
    after=st.dictionaries(
        st.sampled_from(["stop", "tools", "stream", "seed"]),
        st.recursive(
            st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=4), inner, max_size=3)
            ),
            max_leaves=8,
        ),
    ),
    spaced=st.booleans(),
)
def test_the_message_list_is_located_in_any_body(
    messages: list[dict[str, Any]], before: dict[str, Any], after: dict[str, Any], spaced: bool
) -> None:
    payload = {**before, "messages": messages, **after}
    body = json.dumps(payload).encode() if spaced else orjson.dumps(payload)
    parsed = orjson.loads(body)
    bounds = locate(body, parsed)
    assert bounds is not None
    assert body[bounds.close] == ord("]") and body[bounds.end - 1] == ord("}")
    # Everything up to the list's `]`, closed, is the same request without the later keys.
    assert orjson.loads(body[: bounds.close + 1] + b"}") == {**before, "messages": messages}
    # And the body from there on is exactly those later keys.
    assert orjson.loads(b"{" + body[bounds.close + 1 :].strip().lstrip(b",")) == after


def test_equal_values_in_another_json_form_are_not_taken_for_the_same_message() -> None:
    known = remembered(request([user("q") | {"n": 1}, assistant("a")]))
    for variant in ({"n": True}, {"n": 1.0}):
        new, count = check(request([user("q") | variant, assistant("a"), user("next")]), known)
        assert count == 0 and new[0]["n"] == variant["n"]
        assert type(new[0]["n"]) is type(variant["n"])
    reordered = [{"content": "q", "role": "user", "n": 1}, assistant("a")]
    assert check(request(reordered), known)[1] == 0


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
MESSAGES = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant"]),
            "content": st.text(alphabet=st.characters(codec="utf-8"), max_size=30),
        }
    ),
    min_size=1,
    max_size=6,
)


@given(
    old=MESSAGES,
    new=MESSAGES,
    before=st.dictionaries(st.sampled_from(["model", "metadata", "n", "messagesx"]), JSON_VALUES),
    after=st.dictionaries(st.sampled_from(["stop", "tools", "stream", "seed"]), JSON_VALUES),
    later=st.dictionaries(st.sampled_from(["stop", "tools", "stream", "seed"]), JSON_VALUES),
    spaced=st.booleans(),
)
def test_a_resent_body_is_parsed_from_its_new_bytes_as_from_all_of_them(
    old: list[dict[str, Any]],
    new: list[dict[str, Any]],
    before: dict[str, Any],
    after: dict[str, Any],
    later: dict[str, Any],
    spaced: bool,
) -> None:
    def body(messages: list[dict[str, Any]], rest: dict[str, Any]) -> bytes:
        payload = {**before, "messages": messages, **rest}
        return json.dumps(payload).encode() if spaced else orjson.dumps(payload)

    first = body(old, after)
    known = remembered(first, orjson.loads(first)["messages"])
    assert known.list_start > 0
    for resent_body in (body([*old, *new], after), body(old, later), body([*old, *new], later)):
        payload = reparse(resent_body, known)
        assert payload == orjson.loads(resent_body)
        assert all(map(operator.is_, payload["messages"], known.messages))
    # Not a resend: other first messages, or fewer of them.
    assert reparse(body(new, after), known) in (None, orjson.loads(body(new, after)))
    if len(old) > 1:
        assert reparse(body(old[:-1], after), known) is None


@given(data=st.data(), old=MESSAGES, new=MESSAGES)
def test_any_other_body_is_parsed_in_full_or_as_a_full_parse_would(
    data: st.DataObject, old: list[dict[str, Any]], new: list[dict[str, Any]]
) -> None:
    """Bytes cut, changed or added anywhere: reparse agrees with orjson or declines."""
    first = request(old)
    known = remembered(first, orjson.loads(first)["messages"])
    body = bytearray(request([*old, *new]))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(body)))
        edit = data.draw(st.sampled_from(["cut", "change", "insert"]))
        junk = data.draw(st.sampled_from([b"]", b"}", b",", b'"', b"0", b'"messages":[]', b"\\"]))
        if edit == "cut":
            del body[at : at + len(junk)]
        elif edit == "change":
            body[at : at + len(junk)] = junk
        else:
            body[at:at] = junk
    try:
        expected = orjson.loads(bytes(body))
    except orjson.JSONDecodeError:
        expected = None
    got = reparse(bytes(body), known)
    assert got is None or got == expected


def test_the_message_list_is_found_after_keys_that_mention_it() -> None:
    old = [system("s"), user("q")]
    tricky = {
        "metadata": {"messages": [1, 2], "note": 'a "messages": [ b'},
        "user": '\\"messages"',
    }

    def body(messages: list[dict[str, Any]], spaced: bool) -> bytes:
        payload = {**tricky, "model": "m", "messages": messages}
        return json.dumps(payload).encode() if spaced else orjson.dumps(payload)

    for spaced in (False, True):
        first = body(old, spaced)
        payload = orjson.loads(first)
        at = list_start(first, payload)
        assert first[at - 1 : at] == b"[" and first[at:].startswith(b'{"role"')
        known = remembered(first, payload["messages"])
        later = body([*old, user("next")], spaced)
        assert reparse(later, known) == orjson.loads(later)
    # After the list, such bytes are not worth telling apart: the body is parsed in full.
    later = request([*old, user("next")], **tricky)
    assert reparse(later, remembered(request(old, **tricky))) is None


def test_a_second_messages_key_after_the_resent_ones_means_a_full_parse() -> None:
    old = [system("s"), user("q")]
    known = remembered(request(old))
    others = [user("x")]
    body = request(old)[:-1] + b',"messages":' + orjson.dumps(others) + b"}"
    assert orjson.loads(body)["messages"] == others
    assert reparse(body, known) is None


def test_conversations_without_ids_sharing_a_long_prompt_are_told_apart(
    reparsed: list[bool],
) -> None:
    """Filed under their first bytes, they collide while those are the shared prompt (and are
    parsed in full), and are found again once their histories reach past it."""
    router = respx.MockRouter(assert_all_called=False, base_url=UPSTREAM)
    upstream = answers()
    router.post("/chat/completions").mock(
        side_effect=lambda request: httpx.Response(200, json=next(upstream))
    )
    store = MemoryStore()
    settings = load_settings(env={"CONTEXT_PROXY_UPSTREAM_BASE_URL": UPSTREAM})
    app = create_app(settings, transport=httpx.MockTransport(router.handler), store=store)
    prompt = system("policy " * 800)  # 5.6 KB: past the 4 KB fingerprint
    histories = {name: [prompt, user(f"I am {name}")] for name in ("ann", "bob")}
    ids: dict[str, str] = {}
    with TestClient(app) as client:
        for turn in range(12):
            for name, history in histories.items():
                r = client.post(
                    "/v1/chat/completions",
                    json={"model": "gpt-4o", "messages": history},
                    headers=KEY,
                )
                assert r.status_code == 200, r.text
                ids[name] = r.headers["x-conversation-id"]
                history += [r.json()["choices"][0]["message"], user(f"{name} {turn} " * 400)]
        stored = {
            name: client.portal.call(store.latest, ConvKey(CONV.tenant, ids[name]))
            for name in histories
        }
    assert ids["ann"] != ids["bob"]
    for name, history in histories.items():
        latest = stored[name]
        assert latest is not None and latest.working == history[:-1]
    # The first turns (under 16 KB) collide on the shared prompt; the later ones are found.
    assert not any(reparsed[:4]) and all(reparsed[-6:])
