"""Tests of the mock upstream itself, so the proxy's tests, demo and bench can trust it."""

from __future__ import annotations

import base64
import json
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.testclient import TestClient

from proxy.mock import ECHO, MockUpstream
from proxy.mock.chat import (
    BadRequest,
    answer_for,
    estimate_tokens,
    is_summary_request,
    validate_tool_chains,
)
from proxy.mock.embeddings import EMBEDDING_DIMS
from tests.factories import assistant, call, local_shell_call, system, tool, user
from tests.servers import free_port, run_server

CHAT = "/v1/chat/completions"
AUTH = {"authorization": "Bearer sk-test"}


@pytest.fixture
def fake() -> MockUpstream:
    return MockUpstream()


@pytest.fixture
def client(fake: MockUpstream) -> Iterator[TestClient]:
    with TestClient(fake.app) as test_client:
        yield test_client


def chat(client: TestClient, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    return client.post(
        CHAT, json={"model": "gpt-4o-mini", "messages": messages, **extra}, headers=AUTH
    )


def sse_chunks(text: str) -> list[Any]:
    """Parse an SSE body into its data payloads ("[DONE]" kept as a string)."""
    assert text.endswith("data: [DONE]\n\n")
    events = [e for e in text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    return [e[6:] if e[6:] == "[DONE]" else json.loads(e[6:]) for e in events]


def tool_call(call_id: str, name: str = "lookup") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def calls(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [tool_call(i) for i in ids]}


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "42"}


USER = {"role": "user", "content": "hello"}


# -- non-streaming answers --------------------------------------------------------------------


def test_echo_completion_has_openai_shape(client: TestClient, fake: MockUpstream) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    response = chat(client, messages)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "gpt-4o-mini"
    assert body["choices"][0]["message"]["content"] == "Echo: Hi there"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == estimate_tokens(messages)
    total = body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    assert body["usage"]["total_tokens"] == total
    assert chat(client, messages).json() == body  # deterministic


def test_records_method_path_query_headers_and_body(client: TestClient, fake: MockUpstream) -> None:
    client.post(
        CHAT + "?x=1", json={"model": "m", "messages": [USER]}, headers={**AUTH, "X-Foo": "y"}
    )
    [record] = fake.requests
    assert (record.method, record.path, record.query) == ("POST", CHAT, "x=1")
    assert record.headers["authorization"] == "Bearer sk-test"
    assert record.headers["x-foo"] == "y"
    assert record.body == {"model": "m", "messages": [USER]}
    assert fake.chat_requests() == [record.body] == [fake.last_chat()]


def test_tool_call_then_tool_result(client: TestClient) -> None:
    ask = {"role": "user", "content": "please call tool get_weather for Paris"}
    message = chat(client, [ask]).json()["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    [call] = message["message"]["tool_calls"]
    assert call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"q": ask["content"]}
    follow_up = [
        ask,
        message["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
    ]
    answer = chat(client, follow_up).json()["choices"][0]["message"]
    assert answer["content"] == "Tool said: sunny"


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"messages": [USER]}, None),
        ({"model": "m"}, "missing_required_parameter"),
        ({"model": "m", "messages": []}, "empty_array"),
        ({"model": "m", "messages": "hi"}, "invalid_type"),
        ({"model": "m", "messages": [{"content": "x"}]}, "missing_required_parameter"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "invalid_value"),
        ({"model": "m", "messages": [{"role": "user"}]}, "missing_required_parameter"),
        ({"model": "m", "messages": [USER, {"role": "assistant", "content": None}]}, None),
        (
            {"model": "m", "messages": [USER], "stream_options": {"include_usage": True}},
            "invalid_value",
        ),
        (["not", "an", "object"], "invalid_type"),
        ({"model": "m", "messages": [USER], "stream": True, "stream_options": "x"}, "invalid_type"),
        ({"model": "m", "messages": [USER], "max_tokens": "many"}, "invalid_type"),
    ],
)
def test_rejects_malformed_bodies(client: TestClient, body: Any, code: str | None) -> None:
    response = client.post(CHAT, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("invalid_request_error", code)


def test_rejects_non_json(client: TestClient) -> None:
    response = client.post(CHAT, content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        (
            [USER, calls("call_a", "call_b"), result("call_a")],
            "did not have response messages: call_b",
        ),
        ([USER, calls("call_a"), USER, result("call_a")], "did not have response messages: call_a"),
        ([USER, result("call_a")], "must be a response to a preceeding message"),
        ([USER, calls("call_a"), result("call_a"), result("call_a")], "must be a response"),
        ([USER, calls("call_a"), result("call_b")], "must be a response"),
        ([USER, calls("call_a"), result("call_a"), USER, result("call_a")], "must be a response"),
        ([USER, calls("call_a")], "did not have response messages: call_a"),
    ],
)
def test_rejects_broken_tool_chains(client: TestClient, messages: list[Any], fragment: str) -> None:
    response = chat(client, messages)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]


def test_accepts_whole_tool_chains_in_any_result_order(client: TestClient) -> None:
    messages = [USER, calls("c1", "c2"), result("c2"), result("c1"), calls("c3"), result("c3")]
    assert chat(client, messages).status_code == 200


def test_context_limit(fake: MockUpstream, client: TestClient) -> None:
    messages = [{"role": "user", "content": "x" * 400}]
    fake.context_limits["gpt-4o-mini"] = estimate_tokens(messages)
    assert chat(client, messages).status_code == 200
    response = chat(client, messages, max_tokens=1)  # the completion is reserved too
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert chat(client, [*messages, USER]).json()["error"]["code"] == "context_length_exceeded"


# -- error switches ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "status"), [("error-429", 429), ("error-500", 500), ("error-401", 401)]
)
def test_error_models(client: TestClient, model: str, status: int) -> None:
    response = client.post(CHAT, json={"model": model, "messages": [USER]})
    assert response.status_code == status
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    if status == 429:
        assert response.headers["retry-after"] == "7"
        assert response.json()["error"]["code"] == "rate_limit_exceeded"


def test_fail_next_is_a_queue_for_chat_requests_only(
    fake: MockUpstream, client: TestClient
) -> None:
    fake.fail_next(503, {"error": {"message": "busy"}}, {"retry-after": "1"})
    fake.fail_next(429)
    summary = [{"role": "system", "content": "You are the Context-Proxy Summarizer."}, USER]
    assert chat(client, summary).status_code == 200  # summariser calls do not consume failures
    first = chat(client, [USER])
    assert (first.status_code, first.json(), first.headers["retry-after"]) == (
        503,
        {"error": {"message": "busy"}},
        "1",
    )
    assert chat(client, [USER]).status_code == 429
    assert chat(client, [USER]).status_code == 200


def test_summarizer_requests(client: TestClient, fake: MockUpstream) -> None:
    summary = [
        {"role": "system", "content": "You are the context-proxy summarizer. Summarise."},
        {"role": "user", "content": "user: I like tea\nassistant: noted"},
    ]
    answer = chat(client, summary).json()["choices"][0]["message"]["content"]
    assert answer == "SUMMARY[33 characters; last: user: I like tea\nassistant: noted]"
    chat(client, [USER])
    assert fake.summary_requests() == [fake.requests[0].body]
    assert fake.chat_requests() == [fake.requests[1].body]
    fake.summary_text = lambda body: f"custom {len(body['messages'])}"
    assert chat(client, summary).json()["choices"][0]["message"]["content"] == "custom 2"
    fake.summarizer_down = True
    assert chat(client, summary).status_code == 500
    assert chat(client, [USER]).status_code == 200
    fake.reset()
    assert (fake.requests, fake.summarizer_down) == ([], False)


def test_slow(fake: MockUpstream, client: TestClient) -> None:
    fake.slow_s = 0.2
    started = time.monotonic()
    assert chat(client, [USER]).status_code == 200
    assert time.monotonic() - started >= 0.2


# -- streaming --------------------------------------------------------------------------------


def test_stream_content(client: TestClient) -> None:
    messages = [{"role": "user", "content": "one two three four"}]
    response = chat(client, messages, stream=True, stream_options={"include_usage": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    *chunks, usage_chunk, done = sse_chunks(response.text)
    assert done == "[DONE]"
    assert all(c["object"] == "chat.completion.chunk" for c in [*chunks, usage_chunk])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert len(chunks) >= 6  # role, 5 words, finish
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "Echo: one two three four"
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert all(c["usage"] is None for c in chunks)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["prompt_tokens"] == estimate_tokens(messages)


def test_stream_without_usage_has_no_usage_chunk(client: TestClient) -> None:
    *chunks, done = sse_chunks(chat(client, [USER], stream=True).text)
    assert done == "[DONE]"
    assert all("usage" not in c and len(c["choices"]) == 1 for c in chunks)


def test_stream_tool_call(client: TestClient) -> None:
    ask = {"role": "user", "content": "call tool lookup the weather in Paris"}
    *chunks, _ = sse_chunks(chat(client, [ask], stream=True).text)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    head = deltas[0]["tool_calls"][0]
    assert head["function"] == {"name": "lookup", "arguments": ""}
    fragments = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[1:-1]]
    assert len(fragments) > 3
    assert all(set(d["tool_calls"][0]) == {"index", "function"} for d in deltas[1:-1])
    assert json.loads("".join(fragments)) == {"q": ask["content"]}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    unstreamed = chat(client, [ask]).json()["choices"][0]["message"]["tool_calls"][0]
    assert head["id"] == unstreamed["id"]


# -- other endpoints --------------------------------------------------------------------------


def test_models_embeddings_and_unknown_paths(client: TestClient, fake: MockUpstream) -> None:
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert {"id": "gpt-4o-mini", "object": "model", "created": 0, "owned_by": "mock"} in models[
        "data"
    ]
    assert client.get("/v1/models/gpt-4o-mini").json()["id"] == "gpt-4o-mini"
    assert client.get("/v1/models/nope").json()["error"]["code"] == "model_not_found"
    single = client.post("/v1/embeddings", json={"model": "e", "input": "a"}).json()
    batch = client.post("/v1/embeddings", json={"model": "e", "input": ["a", "b"]}).json()
    assert single["data"][0]["embedding"] == batch["data"][0]["embedding"]
    assert len(batch["data"][1]["embedding"]) == EMBEDDING_DIMS
    assert batch["data"][0]["embedding"] != batch["data"][1]["embedding"]
    assert batch["usage"]["total_tokens"] >= 2
    encoded = client.post(
        "/v1/embeddings", json={"model": "e", "input": "a", "encoding_format": "base64"}
    )
    vector = struct.unpack(
        f"<{EMBEDDING_DIMS}f", base64.b64decode(encoded.json()["data"][0]["embedding"])
    )
    assert vector == pytest.approx(single["data"][0]["embedding"], abs=1e-6)
    response = client.delete("/v1/files/abc?purpose=x")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Invalid URL (DELETE /v1/files/abc)"
    assert [r.path for r in fake.requests][-1] == "/v1/files/abc"
    assert fake.chat_requests() == []


# -- through a real server and the official client --------------------------------------------


@pytest.fixture
def served() -> Iterator[tuple[MockUpstream, openai.OpenAI]]:
    fake = MockUpstream(chunk_delay_s=0.05)
    with (
        run_server(fake.app) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as oai,
    ):
        yield fake, oai


@pytest.mark.integration
def test_openai_client_round_trip_and_what_it_sends_back(
    served: tuple[MockUpstream, openai.OpenAI],
) -> None:
    fake, oai = served
    messages: list[Any] = [{"role": "user", "content": "please call tool get_weather in Paris"}]
    first = oai.chat.completions.create(model="gpt-4o-mini", messages=messages)
    [call] = first.choices[0].message.tool_calls or []
    messages += [
        first.choices[0].message,
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = oai.chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert second.choices[0].message.content == "Tool said: sunny"
    messages += [second.choices[0].message, {"role": "user", "content": "thanks"}]
    third = oai.chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert third.choices[0].message.content == "Echo: thanks"
    assert fake.requests[0].headers["authorization"] == "Bearer sk-test"
    # The client re-sends a response message as model_dump(exclude_unset=True): the fields the
    # response had (refusal null, annotations []), in the model's field order, never audio or
    # function_call, and no "tool_calls" key when the response had none.
    sent = json.loads(fake.chat_records()[-1].raw)["messages"]
    assert json.dumps(sent[1]) == json.dumps(
        {
            "content": None,
            "refusal": None,
            "role": "assistant",
            "annotations": [],
            "tool_calls": [
                {
                    "id": call.id,
                    "function": {"arguments": call.function.arguments, "name": "get_weather"},
                    "type": "function",
                }
            ],
        }
    )
    assert json.dumps(sent[3]) == json.dumps(
        {"content": "Tool said: sunny", "refusal": None, "role": "assistant", "annotations": []}
    )


@pytest.mark.integration
def test_openai_client_streams_incrementally(served: tuple[MockUpstream, openai.OpenAI]) -> None:
    _, oai = served
    stream = oai.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "a b c d e f"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    arrivals, text, usage = [], "", None
    for chunk in stream:
        arrivals.append(time.monotonic())
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert text == "Echo: a b c d e f"
    assert usage is not None and usage.total_tokens > 0
    assert arrivals[-1] - arrivals[0] >= 0.3  # 8 events, 50 ms apart: not delivered in one go


@pytest.mark.integration
def test_openai_client_reassembles_a_streamed_tool_call(
    served: tuple[MockUpstream, openai.OpenAI],
) -> None:
    _, oai = served
    messages: Any = [{"role": "user", "content": "call tool lookup the capital of France"}]
    tools: Any = [
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    ]
    with oai.chat.completions.stream(model="gpt-4o-mini", messages=messages, tools=tools) as stream:
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls or []
    assert final.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"q": messages[0]["content"]}


@pytest.mark.integration
def test_openai_client_sees_errors(served: tuple[MockUpstream, openai.OpenAI]) -> None:
    _, oai = served
    with pytest.raises(openai.RateLimitError) as rate_limited:
        oai.chat.completions.create(model="error-429", messages=[USER])  # type: ignore[list-item]
    assert rate_limited.value.response.headers["retry-after"] == "7"
    broken: Any = [USER, calls("call_x")]
    with pytest.raises(openai.BadRequestError, match="call_x"):
        oai.chat.completions.create(model="gpt-4o-mini", messages=broken)
    embedding = oai.embeddings.create(model="text-embedding-3-small", input="hello")
    assert len(embedding.data[0].embedding) == EMBEDDING_DIMS


@pytest.mark.integration
def test_run_server_is_reusable_and_leaks_no_threads() -> None:
    before = threading.active_count()
    port = free_port()
    for _ in range(3):
        fake = MockUpstream()
        with run_server(fake.app, port=port) as url:
            assert url == f"http://127.0.0.1:{port}"
            assert httpx.get(f"{url}/v1/models").status_code == 200
    with run_server(MockUpstream().app) as url:
        assert httpx.get(f"{url}/v1/models/gpt-4o").json()["id"] == "gpt-4o"
    assert threading.active_count() == before


def test_mock_rejects_broken_tool_chains_like_openai() -> None:
    validate_tool_chains([user("q"), assistant(None, tool_calls=[call("c1")]), tool("c1")])
    with pytest.raises(BadRequest, match="preceeding"):
        validate_tool_chains([user("q"), tool("c1")])
    with pytest.raises(BadRequest, match="c1"):
        validate_tool_chains([user("q"), assistant(None, tool_calls=[call("c1")]), user("again")])


def test_mock_answers_tool_requests_with_a_tool_call_and_summaries_by_marker() -> None:
    content, tool_call = answer_for([user("please call tool lookup now")], ECHO)
    assert content is None and tool_call is not None
    assert tool_call["function"]["name"] == "lookup"
    assert answer_for([user("hello")], ECHO)[0] is not None
    assert is_summary_request(
        {"messages": [system("You are the context-proxy summarizer."), user("x")]}
    )
    assert not is_summary_request({"messages": [system("You are helpful."), user("x")]})


def test_mock_gives_no_cache_below_openais_minimum_prompt() -> None:
    import asyncio

    import httpx

    async def ask(mock: MockUpstream, messages: list[dict[str, object]]) -> int:
        transport = httpx.ASGITransport(app=mock.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as client:
            r = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
        return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

    mock = MockUpstream()
    short, long = [user("hi")], [user("word " * 2000)]
    assert asyncio.run(ask(mock, short)) == 0
    assert asyncio.run(ask(mock, [*short, assistant("x"), user("again")])) == 0
    assert asyncio.run(ask(mock, long)) == 0
    assert asyncio.run(ask(mock, [*long, assistant("x"), user("again")])) >= 1024
    assert mock.calls[-1].extends_previous


ANTHROPIC_HEADERS = {"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}


def messages_call(client: TestClient, messages: list[Any]) -> httpx.Response:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages}
    return client.post("/v1/messages", json=body, headers=ANTHROPIC_HEADERS)


def test_messages_rejects_what_anthropic_rejects(client: TestClient) -> None:
    ask = {"role": "user", "content": "call tool search please"}
    first = messages_call(client, [ask])
    assert first.status_code == 200
    thinking, use = first.json()["content"]
    assert thinking["signature"].startswith("sig_") and use["type"] == "tool_use"
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": "42"}
    answered = [ask, {"role": "assistant", "content": [thinking, use]}]
    ok = messages_call(client, [*answered, {"role": "user", "content": [result]}])
    assert ok.json()["content"][0]["text"] == "Tool said: 42"
    edited = {**thinking, "thinking": thinking["thinking"] + " (edited)"}
    broken = {
        "no result": [*answered, {"role": "user", "content": "next"}],
        "edited thinking": [
            ask,
            {"role": "assistant", "content": [edited, use]},
            {"role": "user", "content": [result]},
        ],
        "same role twice": [ask, ask],
        "assistant first": [{"role": "assistant", "content": "hi"}],
        "a block that is not an object": [{"role": "user", "content": ["hi"]}],
        "a message that is not an object": ["hi"],
        "no content": [{"role": "user"}],
    }
    for name, messages in broken.items():
        refused = messages_call(client, messages)
        assert refused.status_code == 400, name
        assert refused.json()["type"] == "error", name
    wrong_system = {"model": "m", "max_tokens": 8, "messages": [ask], "system": [5]}
    refused = client.post("/v1/messages", json=wrong_system, headers=ANTHROPIC_HEADERS)
    assert refused.status_code == 400 and refused.json()["type"] == "error"
    # A signature from a recorded transcript (Anthropic's, not this mock's) cannot be checked.
    foreign = {**thinking, "signature": "EqQBCkgIARABGAIiQL..."}
    replayed = [ask, {"role": "assistant", "content": [foreign, use]}]
    assert messages_call(client, [*replayed, {"role": "user", "content": [result]}]).is_success


def test_responses_rejects_an_output_without_its_call(client: TestClient) -> None:
    body: dict[str, Any] = {"model": "gpt-4o", "input": "call tool lookup"}
    first = client.post("/v1/responses", json=body, headers=AUTH).json()
    reasoning, function_call = first["output"]
    output = {"type": "function_call_output", "call_id": function_call["call_id"], "output": "7"}
    whole = {"model": "gpt-4o", "input": [reasoning, function_call, output]}
    answer = client.post("/v1/responses", json=whole, headers=AUTH).json()
    assert answer["output"][0]["content"][0]["text"] == "Tool said: 7"
    orphan = {"model": "gpt-4o", "input": [output]}
    refused = client.post("/v1/responses", json=orphan, headers=AUTH)
    assert refused.status_code == 400
    assert "No tool call found" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    "extra",
    [
        {"instructions": 5},
        {"previous_response_id": ["resp_1"]},
        {"max_output_tokens": "many"},
        {"max_output_tokens": "many", "stream": True},
    ],
)
def test_responses_rejects_a_field_of_the_wrong_type(extra: dict[str, Any]) -> None:
    fake = MockUpstream(context_limits={"gpt-4o": 128_000})
    with TestClient(fake.app) as client:
        refused = client.post("/v1/responses", json={"model": "gpt-4o", "input": "hi", **extra})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert (error["param"], error["code"]) == (next(iter(extra)), "invalid_type")


def test_prose_voice_and_bills_with_the_proxys_count() -> None:
    from proxy.mock import PROSE
    from proxy.tokens import offline_counter

    counter = offline_counter()
    mock = MockUpstream(voice=PROSE, counter=counter)
    messages = [{"role": "user", "content": "How do I roll out the migration?"}]
    with TestClient(mock.app) as client:
        body = chat(client, messages).json()
    assert body["choices"][0]["message"]["content"].startswith("About \u201cHow do I roll")
    assert body["usage"]["prompt_tokens"] == counter.count_messages("gpt-4o-mini", messages)
    assert [c.prompt_tokens for c in mock.calls] == [body["usage"]["prompt_tokens"]]


def test_canned_answers_are_what_the_proxy_reads() -> None:
    """The bench's fast path answers in each route's shape, summaries included."""
    from proxy.dialects.anthropic_answer import message_from_body
    from proxy.mock import canned

    app = canned.app()
    with TestClient(app) as client:
        whole = client.post(CHAT, content=b'{"messages":[]}').json()
        assert whole["choices"][0]["message"]["content"] == canned.ANSWER
        summary = client.post(CHAT, content=b'{"m":"context-proxy summarizer"}').json()
        assert summary["choices"][0]["message"]["content"] == canned.SUMMARY
        streamed = client.post(CHAT, content=b'{"stream":true}')
        assert streamed.headers["content-type"] == "text/event-stream"
        assert streamed.text.endswith("data: [DONE]\n\n")
        texts = [
            json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
            for line in streamed.text.split("\n\n")
            if line.startswith("data: {")
        ]
        assert "".join(texts) == canned.ANSWER
        read = message_from_body(client.post("/v1/messages", content=b"{}").json())
        assert read is not None and read["content"][0]["text"] == canned.ANSWER
        response = client.post("/v1/responses", content=b"{}").json()
        assert response["output"][0]["content"][0]["text"] == canned.ANSWER


@pytest.mark.integration
@pytest.mark.parametrize("mode", [[], ["--canned"]])
def test_the_mock_runs_on_its_own_as_the_bench_starts_it(mode: list[str]) -> None:
    import subprocess
    import sys

    from proxy.mock import canned

    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "proxy.mock", "--port", str(port), *mode])
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/v1/models", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.1)
        body = {"model": "gpt-4o", "messages": [USER]}
        answer = httpx.post(url + CHAT, json=body, headers=AUTH).json()
        said = answer["choices"][0]["message"]["content"]
        assert said == (canned.ANSWER if mode else "Echo: hello")
    finally:
        process.terminate()
        process.wait(timeout=10)


def responses_call(client: TestClient, items: Any, **extra: Any) -> httpx.Response:
    return client.post("/v1/responses", json={"model": "gpt-4o", "input": items, **extra})


def test_responses_outputs_may_answer_the_calls_of_the_previous_response(
    client: TestClient,
) -> None:
    """As OpenAI: a request continuing a response by its id answers that response's calls
    with outputs alone, and one that leaves them unanswered is refused."""
    first = responses_call(client, "call tool lookup").json()
    call_id = first["output"][1]["call_id"]
    output = {"type": "function_call_output", "call_id": call_id, "output": "7"}
    answer = responses_call(client, [output], previous_response_id=first["id"])
    assert answer.status_code == 200
    assert answer.json()["output"][0]["content"][0]["text"] == "Tool said: 7"
    ignored = responses_call(client, "and now?", previous_response_id=first["id"])
    assert ignored.status_code == 400
    assert (
        ignored.json()["error"]["message"] == f"No tool output found for function call {call_id}."
    )
    later = responses_call(client, "and now?", previous_response_id=answer.json()["id"])
    assert later.status_code == 200, "answered once, the chain goes on"


def test_responses_a_local_shell_call_is_answered_by_call_id(client: TestClient) -> None:
    """Its own output names it by `call_id` (as the Agents SDK sends it), and Codex answers
    it with a function call's output; unanswered, or an output for no call, is refused."""
    shell = local_shell_call("call_sh")
    ask = {"role": "user", "content": "list the files"}
    for kind in ("local_shell_call_output", "function_call_output"):
        output = {"type": kind, "call_id": "call_sh", "output": "a.txt"}
        assert responses_call(client, [ask, shell, output]).status_code == 200, kind
    unanswered = responses_call(client, [ask, shell])
    assert unanswered.json()["error"]["message"] == (
        "No tool output found for local shell call call_sh."
    )
    stray = {"type": "local_shell_call_output", "call_id": "call_other", "output": ""}
    assert responses_call(client, [ask, shell, stray]).status_code == 400


def test_responses_a_program_holds_its_calls_and_outputs(client: TestClient) -> None:
    """Programmatic tool calling: a program's output and the calls it makes (their
    `caller`) follow the program they name, and nothing follows its completed output."""
    program = {"type": "program", "id": "pg_1", "call_id": "prog_1", "code": "f()"}
    program["fingerprint"] = "fp"
    owner = {"type": "program", "caller_id": "prog_1"}
    made = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "lookup",
        "arguments": "{}",
        "caller": owner,
    }
    result = {"type": "function_call_output", "call_id": "call_1", "output": "7", "caller": owner}
    done = {"type": "program_output", "id": "po_1", "call_id": "prog_1", "result": "7"}
    done["status"] = "completed"
    ask = {"role": "user", "content": "sum it"}
    assert responses_call(client, [ask, program, made, result, done]).status_code == 200
    assert responses_call(client, [ask, program, made, result]).status_code == 200, "running"
    broken = {
        "output without its program": [ask, done],
        "a call of no program": [ask, made, result],
        "a call after the program completed": [ask, program, done, made, result],
        "an output without a status": [ask, program, {**done, "status": None}],
    }
    for name, items in broken.items():
        refused = responses_call(client, items)
        assert refused.status_code == 400, name


def tool_search(call_id: str | None, tools: list[str] | None = None) -> list[dict[str, Any]]:
    """A tool search and its output (omitted when `tools` is None): executed by the client
    when it has a `call_id`, by OpenAI (hosted, `call_id` null) when not."""
    execution = "server" if call_id is None else "client"
    found = [{"type": "tool_search_call", "id": f"ts_{call_id}", "call_id": call_id}]
    found[0] |= {"execution": execution, "arguments": {"paths": ["crm"]}, "status": "completed"}
    if tools is not None:
        loaded = [{"type": "function", "name": n, "defer_loading": True} for n in tools]
        output = {"type": "tool_search_output", "id": f"tso_{call_id}", "call_id": call_id}
        found.append(output | {"execution": execution, "tools": loaded, "status": "completed"})
    return found


def test_responses_a_tool_search_is_answered_by_its_output(client: TestClient) -> None:
    """Tool search: a client-executed search (`call_id`) is answered by the
    `tool_search_output` naming it; a hosted one (no `call_id`) by the output after it.
    An output without its search, or a search left unanswered, is refused."""
    ask = {"role": "user", "content": "find the crm tools"}
    for call_id in ("tsc_1", None):
        assert responses_call(client, [ask, *tool_search(call_id, ["get_customer"])]).is_success
    search, output = tool_search("tsc_1", ["get_customer"])
    hosted, loaded = tool_search(None, ["get_customer"])
    broken = {
        "an output without its search": [ask, output],
        "a hosted output without its search": [ask, loaded],
        "an output for another search": [ask, search, {**output, "call_id": "tsc_2"}],
        "a search never answered": [ask, search],
        "a hosted search without its output": [ask, hosted],
        "an output before its search": [ask, output, search],
        "a search without arguments": [ask, {k: v for k, v in search.items() if k != "arguments"}],
        "an output without tools": [ask, search, {**output, "tools": None}],
    }
    for name, items in broken.items():
        refused = responses_call(client, items)
        assert refused.status_code == 400, name


def test_responses_a_search_asked_for_is_a_client_search_answered_next_request(
    client: TestClient,
) -> None:
    """ "search tools for X" gets a client-executed tool search, whose output a request
    continuing that response may send alone."""
    first = responses_call(client, "search tools for crm").json()
    search = first["output"][-1]
    assert search["type"] == "tool_search_call" and search["execution"] == "client"
    output = tool_search(search["call_id"], ["get_customer"])[1]
    answer = responses_call(client, [output], previous_response_id=first["id"])
    assert answer.status_code == 200
    assert responses_call(client, "and?", previous_response_id=first["id"]).status_code == 400
