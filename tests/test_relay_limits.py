"""What the proxy relays but only observes: malformed streams, huge answers, refused keys.

The relay never dies on what the upstream sends. An answer the proxy cannot
assemble, or one too large to hold, reaches the client whole and is not
stored; the next full-history request archives it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import tenant_of
from proxy.dialects.chat_answer import StreamAssembler
from proxy.sse import SSEDecoder
from proxy.store import ConvKey

from .factories import user
from .test_app import Harness, chunk, completion, make, sse

KEY = ConvKey(tenant_of("sk-client-one"), "c")
CONV = {"X-Conversation-Id": "c"}


@pytest.fixture
def h() -> Iterator[Harness]:
    yield from make({"CONTEXT_PROXY_UPSTREAM_MAX_ANSWER_BYTES": "4096"})


def stored(h: Harness) -> bool:
    return asyncio.run(h.store.latest(KEY)) is not None


@pytest.mark.parametrize(
    "indices",
    [[[0]], [0, "1"], [True], [-1], [10**9]],
    ids=["a list", "int and string", "a bool", "negative", "huge"],
)
def test_a_malformed_tool_call_delta_is_relayed_whole_and_not_stored(
    h: Harness, indices: list[object]
) -> None:
    deltas = [
        chunk({"role": "assistant", "content": None}),
        *(
            chunk({"tool_calls": [{"index": i, "id": f"call_{n}", "function": {"name": "f"}}]})
            for n, i in enumerate(indices)
        ),
        chunk({}, finish="tool_calls"),
    ]
    body = sse(*deltas)
    h.router.post("/chat/completions").respond(
        200, content=body, headers={"content-type": "text/event-stream"}
    )
    r = h.chat([user("hi")], headers=CONV, stream=True)
    assert r.status_code == 200
    assert r.content == body, "every byte the upstream sent reaches the client"
    assert not stored(h)
    # The client's next request carries the answer it got; that turn is stored.
    h.router.post("/chat/completions").respond(200, json=completion())
    again = [user("hi"), {"role": "assistant", "content": "x"}, user("more")]
    assert h.chat(again, headers=CONV).status_code == 200
    assert stored(h)


def test_a_whole_answer_past_the_limit_is_relayed_but_not_stored(h: Harness) -> None:
    big = completion("y" * 10_000)
    h.router.post("/chat/completions").respond(200, json=big)
    r = h.chat([user("hi")], headers=CONV)
    assert r.status_code == 200
    assert r.json() == big
    assert r.headers["x-context-not-stored"] == "too-large"
    assert not stored(h)
    h.router.post("/chat/completions").respond(200, json=completion("short"))
    r = h.chat([user("hi again")], headers={"X-Conversation-Id": "c2"})
    assert "x-context-not-stored" not in r.headers


def test_a_streamed_answer_past_the_limit_is_relayed_but_not_stored(h: Harness) -> None:
    body = sse(*(chunk({"content": "z" * 500}) for _ in range(20)), chunk({}, finish="stop"))
    h.router.post("/chat/completions").respond(
        200, content=body, headers={"content-type": "text/event-stream"}
    )
    r = h.chat([user("hi")], headers=CONV, stream=True)
    assert r.status_code == 200 and r.content == body
    assert not stored(h)


def test_an_upstream_refusing_the_operator_key_is_not_shown_to_clients() -> None:
    for h in make(
        {
            "CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-operator-0123456789",
            "CONTEXT_PROXY_AUTH_CLIENT_KEYS": "sk-client-one",
        }
    ):
        refusal = {"error": {"message": "Incorrect API key provided: sk-oper*****6789."}}
        h.router.post("/chat/completions").respond(401, json=refusal)
        h.router.get("/models").respond(403, json=refusal)
        r = h.chat([user("hi")])
        assert r.status_code == 401
        assert "sk-oper" not in r.text and "6789" not in r.text
        assert r.json()["error"]["code"] == "upstream_refused_proxy_key"
        r = h.client.get("/v1/models", headers={"Authorization": "Bearer sk-client-one"})
        assert r.status_code == 403 and "6789" not in r.text


def test_without_an_operator_key_the_upstream_refusal_reaches_the_client(h: Harness) -> None:
    refusal = {"error": {"message": "Incorrect API key provided: sk-clie*****-one."}}
    h.router.post("/chat/completions").respond(401, json=refusal)
    r = h.chat([user("hi")])
    assert r.status_code == 401 and r.json() == refusal


def test_server_header_of_the_upstream_is_not_relayed(h: Harness) -> None:
    h.router.post("/chat/completions").respond(
        200, json=completion(), headers={"server": "internal-gateway/1.2"}
    )
    r = h.chat([user("hi")])
    assert "internal-gateway" not in r.headers.get("server", "")


# The SSE decoder ---------------------------------------------------------------


def events_of(stream: bytes) -> list[bytes]:
    decoder = SSEDecoder()
    return [*decoder.feed(stream), *decoder.flush()]


@given(
    st.lists(st.binary(max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b)),
    st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_the_decoder_gives_the_same_events_however_the_bytes_are_cut(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(b"data: " + p + b"\n\n" for p in payloads)
    whole = events_of(stream)
    assert whole == payloads
    decoder = SSEDecoder()
    got: list[bytes] = []
    start = 0
    for cut in sorted(c % (len(stream) + 1) for c in cuts):
        got += decoder.feed(stream[start:cut])
        start = cut
    got += decoder.feed(stream[start:])
    got += decoder.flush()
    assert got == whole


def test_a_line_past_the_limit_is_dropped_and_reported() -> None:
    decoder = SSEDecoder(max_line=100)
    for _ in range(50):
        assert decoder.feed(b"x" * 10) == []
    assert decoder.overflowed
    assembler = StreamAssembler(limit=100)
    for _ in range(50):
        assembler.feed(b"data: " + b"x" * 10)
    assembler.feed(b"\n\ndata: [DONE]\n\n")
    assert assembler.too_large and not assembler.complete


def test_the_assembler_merges_what_is_well_formed() -> None:
    assembler = StreamAssembler(limit=1000)
    parts = [
        chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g"}}]}),
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":1}'}}]}),
        chunk({}, finish="tool_calls"),
    ]
    assembler.feed(sse(*parts))
    assert assembler.complete and assembler.broken is None
    calls = assembler.message()["tool_calls"]
    assert [c["id"] for c in calls] == ["a", "b"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"x": 1}
