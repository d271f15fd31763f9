"""Pure units: tokens, SSE assembly, identity and reconciliation, configuration."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import tomllib
import typing
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy import conversation as conv
from proxy.config import load_settings
from proxy.dialects.chat_answer import StreamAssembler, message_from_completion
from proxy.errors import ConfigError
from proxy.messages import chain_hashes, message_hash
from proxy.models import context_window
from proxy.reduction.types import ReductionState, SummaryBlock
from proxy.settings import SECTIONS
from proxy.sse import SSEDecoder
from proxy.tokens import (
    ROLES_KEPT,
    TOKENS_PER_MESSAGE,
    RequestCounts,
    TokenCounter,
    encoding_name_for,
)
from proxy.turn.state import reduction_to_json

from .factories import assistant, call, system, tool, user

ROOT = Path(__file__).resolve().parents[1]


# tokens ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("llama3:8b", "o200k_base"),
    ],
)
def test_each_model_family_gets_its_encoding(model: str, encoding: str) -> None:
    assert encoding_name_for(model) == encoding


def test_counts_match_openais_accounting() -> None:
    counter = TokenCounter()
    # OpenAI reports 9 prompt tokens for one user message "hello world" on gpt-4o.
    assert counter.count_messages("gpt-4o", [user("hello world")]) == 9
    assert counter.exact


def test_tool_calls_images_and_unknown_parts_are_counted() -> None:
    counter = TokenCounter()
    plain = counter.count_message("gpt-4o", assistant(None))
    with_call = counter.count_message("gpt-4o", assistant(None, tool_calls=[call("c1")]))
    assert with_call > plain
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    low = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "x", "detail": "low"}}],
    }
    assert counter.count_message("gpt-4o", image) > counter.count_message("gpt-4o", low) > 85
    odd = {"role": "user", "content": [{"type": "hologram", "data": "z" * 400}]}
    assert counter.count_message("gpt-4o", odd) >= 100


def test_encrypted_reasoning_counts_as_the_text_it_holds() -> None:
    """A token a four characters of base64 (on the safe side of the five its text takes),
    not tokenised base64, which counts several times that."""
    counter = TokenCounter()
    blob = base64.b64encode(bytes(range(256)) * 12).decode()  # 4,096 characters
    reasoning = {"type": "reasoning", "summary": [], "encrypted_content": blob}
    counted = counter.count_message("gpt-4o", reasoning)
    assert 1020 <= counted <= 1060, counted
    assert counter.count_text("o200k_base", blob) > 2 * counted, "tokenised, it counts more"


def test_the_tools_a_responses_tool_search_loaded_count() -> None:
    """A tool search's output holds the loaded tools' definitions, which the model reads:
    they count (by their size), as do the search's arguments."""
    counter = TokenCounter()
    about = "Customer records: names, orders, invoices and open tickets. " * 10
    tools = [{"type": "function", "name": f"get_{i}", "description": about} for i in range(4)]
    output = {"type": "tool_search_output", "call_id": "tsc_1", "tools": tools}
    assert counter.count_message("gpt-4o", output) >= len(json.dumps(tools)) // 4
    search = {"type": "tool_search_call", "call_id": "tsc_1", "arguments": {"query": about}}
    assert counter.count_message("gpt-4o", search) >= len(about) // 4


def test_anthropic_thinking_counts_its_text_and_not_its_signature() -> None:
    counter = TokenCounter()
    thought = "Let me check the log before answering. " * 10
    bare = {"type": "thinking", "thinking": thought, "signature": ""}
    signed = {**bare, "signature": base64.b64encode(bytes(range(256)) * 2).decode()}
    counts = [
        counter.count_message("claude-x", {"role": "assistant", "content": [block]})
        for block in (bare, signed)
    ]
    assert counts[0] == counts[1] < 120
    redacted = {"type": "redacted_thinking", "data": "A" * 1000}
    assert counter.count_message("claude-x", {"role": "assistant", "content": [redacted]}) < 260


def test_counts_are_cached_per_message() -> None:
    calls: list[str] = []

    class Spy:
        def encode(self, text: str, *, disallowed_special: Any = ()) -> list[int]:
            calls.append(text)
            return [0] * len(text.split())

    counter = TokenCounter(loader=lambda name: Spy())
    history = [user(f"message {i}") for i in range(50)]
    counter.count_messages("gpt-4o", history)
    first = len(calls)
    assert calls.count("user") == 1  # a role's count never changes: asked of the encoding once
    counter.count_messages("gpt-4o", [*history, user("new one")])
    assert calls[first:] == ["new one"]  # only the new message's content


def test_roles_remembered_are_bounded_and_count_as_text() -> None:
    counter = TokenCounter()
    odd = [{"role": f"role number {i}", "content": ""} for i in range(ROLES_KEPT + 50)]
    for message in odd:
        expected = TOKENS_PER_MESSAGE + counter.count_text("o200k_base", str(message["role"]))
        assert counter.count_message("gpt-4o", message) == expected
    assert len(counter._roles) == ROLES_KEPT


@settings(deadline=None)  # the first example loads the encoding
@given(
    size=st.integers(min_value=0, max_value=120),
    fresh=st.integers(min_value=0, max_value=120),
    asked=st.lists(st.integers(min_value=0, max_value=130), max_size=60),
)
def test_request_counts_answer_every_message_as_the_counter_does(
    size: int, fresh: int, asked: list[int]
) -> None:
    """Identity lookups, digest lookups or the map built after some misses: the same counts."""
    counter = TokenCounter()
    history = [user(f"message {i} " + "word " * (i % 7)) for i in range(size)]
    known = [counter.count_message("gpt-4o", m) for m in history]
    counts = RequestCounts(counter, "gpt-4o", history, counts=known, fresh=min(fresh, size))
    for i in asked:
        # Past the history: a message the core made (a copy, a truncation).
        message = history[i] if i < size else user(f"made {i}")
        assert counts(message) == counter.count_message("gpt-4o", message)
    assert counts.total == 3 + sum(known)


@settings(deadline=None)
@given(
    size=st.integers(min_value=0, max_value=60),
    start=st.integers(min_value=0, max_value=70),
    stop=st.integers(min_value=0, max_value=70),
    copied=st.booleans(),
)
def test_request_counts_total_of_any_run_is_the_sum_of_its_counts(
    size: int, start: int, stop: int, copied: bool
) -> None:
    """A suffix of the request is summed at once; any other run (or copies) one by one."""
    counter = TokenCounter()
    history = [user(f"message {i} " + "word " * (i % 5)) for i in range(size)]
    counts = RequestCounts(counter, "gpt-4o", history)
    run = history[start:] if stop >= size else history[start:stop]
    if copied:  # equal messages that are other objects: not the request's own
        run = [dict(m) for m in run]
    expected = sum(counter.count_message("gpt-4o", m) for m in run)
    assert counts.total_of(tuple(run)) == expected
    assert counts.total_of(tuple(history[start:])) == sum(
        counter.count_message("gpt-4o", m) for m in history[start:]
    )


def test_offline_counting_falls_back_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    def offline(name: str) -> Any:
        raise OSError("no network")

    counter = TokenCounter(loader=offline)
    with caplog.at_level(logging.WARNING):
        a = counter.count_messages("gpt-4o", [user("x" * 400)])
        counter.count_messages("gpt-4", [user("y" * 40)])
    assert a == 3 + 3 + 1 + 100  # framing, priming, "user", 400 chars / 4
    assert len([r for r in caplog.records if "could not be loaded" in r.getMessage()]) == 1
    assert not counter.exact


def test_context_windows_come_from_the_table_and_overrides() -> None:
    assert context_window("gpt-4o-2024-08-06", {}, 1) == 128_000
    assert context_window("gpt-4", {}, 1) == 8_192
    assert context_window("gpt-4-turbo-preview", {}, 1) == 128_000
    assert context_window("my-local", {"my-local": 32_768}, 1) == 32_768
    assert context_window("unknown-model", {}, 4321) == 4321


# SSE --------------------------------------------------------------------------


def _stream() -> bytes:
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": "Héllo "}}]},
        {"choices": [{"index": 0, "delta": {"content": "wörld"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_a",
                                "type": "function",
                                "function": {"name": "get", "arguments": '{"a"'},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "call_b",
                                "type": "function",
                                "function": {"name": "put", "arguments": "{}"},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"total_tokens": 12}},
    ]
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


EXPECTED = {
    "role": "assistant",
    "content": "Héllo wörld",
    "tool_calls": [call("call_a", "get", '{"a": 1}'), call("call_b", "put", "{}")],
}


@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=30))
def test_stream_assembles_the_same_message_however_it_is_split(cuts: list[int]) -> None:
    data = _stream()
    points = sorted({c % (len(data) + 1) for c in cuts})
    assembler = StreamAssembler()
    start = 0
    for point in [*points, len(data)]:
        assembler.feed(data[start:point])
        start = point
    assembler.close()
    assert assembler.complete and assembler.message() == EXPECTED
    assert assembler.usage == {"total_tokens": 12}


def test_stream_without_an_ending_is_incomplete_and_errors_are_seen() -> None:
    partial = StreamAssembler()
    partial.feed(b'data: {"choices": [{"index": 0, "delta": {"content": "par"}}]}\n\n')
    partial.close()
    assert not partial.complete
    failed = StreamAssembler()
    failed.feed(b'data: {"error": {"message": "boom"}}\n\ndata: [DONE]\n\n')
    assert not failed.complete


def test_sse_decoder_handles_crlf_multiline_and_comments() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b": keep-alive\r\ndata: a\r\ndata: b\r\n\r\nevent: x\ndata: c")
    assert events == [b"a\nb"]
    assert decoder.flush() == [b"c"]


def test_completion_message_keeps_only_request_fields() -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "hi",
                    "refusal": None,
                    "annotations": [],
                    "audio": {"id": "aud_1", "data": "zzz", "transcript": "hi"},
                },
            }
        ]
    }
    assert message_from_completion(body) == {
        "role": "assistant",
        "content": "hi",
        "audio": {"id": "aud_1"},
    }
    assert message_from_completion({"choices": []}) is None
    assert message_from_completion("nope") is None


# identity and reconciliation ---------------------------------------------------


def test_derived_id_depends_on_tenant_and_opening_only() -> None:
    t1, t2 = conv.tenant_of("sk-1"), conv.tenant_of("sk-2")
    opening = [system(), user("plan a trip")]
    later = [*opening, assistant("sure"), user("to Rome")]
    assert conv.derive_id(t1, opening) == conv.derive_id(t1, later)
    assert conv.derive_id(t1, opening) != conv.derive_id(t2, opening)
    assert conv.derive_id(t1, opening) != conv.derive_id(t1, [system(), user("other")])
    assert len(t1) == 64 and "sk-1" not in t1


def test_header_ids_are_validated() -> None:
    assert conv.identify("t", "my-chat_1", [user()]).conversation == "my-chat_1"
    for bad in ("has space", "x" * 201, "tab\t"):
        with pytest.raises(Exception, match="X-Conversation-Id"):
            conv.identify("t", bad, [user()])


def test_chain_hashes_diverge_at_an_edit() -> None:
    a = chain_hashes([user("1"), assistant("2"), user("3")])
    b = chain_hashes([user("1"), assistant("edited"), user("3")])
    assert a[0] == b[0] and a[1] != b[1] and a[2] != b[2]
    assert message_hash({"b": 1, "a": 2}) == message_hash({"a": 2, "b": 1})


_TEXT = st.text(max_size=20)


@given(
    content=st.one_of(st.none(), _TEXT),
    nulls=st.sets(st.sampled_from(["refusal", "audio", "function_call", "tool_calls"])),
    annotated=st.booleans(),
    other=_TEXT,
)
def test_an_answer_resent_with_its_response_fields_hashes_as_stored(
    content: str | None, nulls: set[str], annotated: bool, other: str
) -> None:
    """A client resends an answer as its SDK parsed it: null fields and no annotations."""
    stored = {"role": "assistant", "content": content or "answer"}
    resent: dict[str, Any] = {**stored, **dict.fromkeys(nulls)}
    if annotated:
        resent["annotations"] = []
    assert message_hash(resent) == message_hash(stored)
    if other != stored["content"]:  # what an answer says still tells it apart
        assert message_hash({**resent, "content": other}) != message_hash(stored)
    # Only response-only fields: a null content or name is the client's to mean, and the
    # proxy stores a tool call's answer with `content: null`.
    assert message_hash({**stored, "name": None}) != message_hash(stored)
    calls = {"role": "assistant", "content": None, "tool_calls": [call("c1")]}
    as_parsed = {**calls, "refusal": None, "annotations": []}
    assert message_hash(as_parsed) == message_hash(calls)
    # Serialised with `exclude_none`, the call's message has no `content`: the same message.
    assert message_hash({"role": "assistant", "tool_calls": [call("c1")]}) == message_hash(calls)
    # Other roles keep every field: a null there is the client's to mean.
    asked = {"role": "user", "content": "q"}
    assert (message_hash({**asked, "name": None}) == message_hash(asked)) is False
    assert message_hash({**stored, "annotations": [{"type": "url_citation"}]}) != message_hash(
        stored
    )


def _prior(tail_start: int, covers: int, leading: int = 1) -> dict[str, Any]:
    state = ReductionState(tail_start, (SummaryBlock("S", covers),))
    return {"leading": leading, "reduction": reduction_to_json(state)}


def test_full_history_continues_the_matched_snapshot() -> None:
    history = [system(), *[user(f"m{i}") for i in range(10)]]
    hashes = chain_hashes(history)
    turn = conv.reconcile_full(history, hashes, 8, _prior(4, 4))
    assert turn.continued
    assert turn.working.state.tail_start == 4
    assert turn.working.tail == tuple(history[5:])
    assert turn.new == tuple(history[8:]) and turn.parent == hashes[7]


def test_a_snapshot_reaching_past_what_the_client_sends_is_not_used() -> None:
    history = [system(), *[user(f"m{i}") for i in range(10)]]
    turn = conv.reconcile_full(history, chain_hashes(history), 3, _prior(4, 4))
    assert not turn.continued and turn.working.state == ReductionState()
    other_leading = conv.reconcile_full(history, chain_hashes(history), 8, _prior(4, 4, 2))
    assert not other_leading.continued


def test_append_mode_extends_the_stored_working_history() -> None:
    stored = [system(), user("q1"), assistant("a1")]
    prior = {
        "leading": 1,
        "reduction": reduction_to_json(ReductionState(2, (SummaryBlock("earlier", 2),))),
        "answer_hash": "h",
    }
    turn = conv.reconcile_append([tool("c", "x"), user("q2")], stored, prior, 9)
    assert turn.working.leading == (system(),)
    assert turn.working.tail == (user("q1"), assistant("a1"), tool("c", "x"), user("q2"))
    assert turn.history[1] == {"role": "system", "content": "earlier"}
    assert turn.parent == "h" and turn.position == 11
    # Nothing new (the request was only the start of the answer): the answer follows the
    # stored one.
    prefilled = conv.reconcile_append([], stored, prior, 9)
    assert prefilled.head == prefilled.tip == "h" and prefilled.position == 9
    assert prefilled.working.tail == (user("q1"), assistant("a1")) and not prefilled.new


# configuration ----------------------------------------------------------------


def test_precedence_is_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[server]\nport = 1111\nhost = "0.0.0.0"\n[models]\n"local" = 4096\n')
    s = load_settings(path, env={"CONTEXT_PROXY_SERVER_PORT": "2222"})
    assert (s.server.port, s.server.host, s.models.windows["local"]) == (2222, "0.0.0.0", 4096)
    s = load_settings(
        path, env={"CONTEXT_PROXY_SERVER_PORT": "2222"}, overrides={"server": {"port": 3333}}
    )
    assert s.server.port == 3333


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"CONTEXT_PROXY_SERVER_PORT": "eighty"}, "server.port"),
        ({"CONTEXT_PROXY_REDUCTION_STRATEGY": "magic"}, "reduction.strategy"),
        ({"CONTEXT_PROXY_REDUCTION_TRIGGER_RATIO": "1.5"}, "reduction.trigger_ratio"),
        ({"CONTEXT_PROXY_STORE_BACKEND": "mongo"}, "store.backend"),
        ({"CONTEXT_PROXY_UPSTREAM_BASE_URL": "ftp://x"}, "upstream.base_url"),
        ({"CONTEXT_PROXY_REDUCTION_SINGLE_SUMMARY": "maybe"}, "reduction.single_summary"),
        ({"CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-owner"}, "auth.client_keys"),
    ],
)
def test_every_error_names_its_key(env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_settings(env=env)


def test_unknown_keys_and_bad_files_are_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nprot = 1\n")
    with pytest.raises(ConfigError, match=r"server\.prot"):
        load_settings(bad)
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_settings(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[server]\nmax_messages = 1.5\n", "server.max_messages"),
        ("[models]\nlocal = 4096.5\n", "models.local"),
        ("[store]\nttl_s = inf\n", "store.ttl_s"),
    ],
)
def test_a_fraction_for_an_integer_setting_is_refused_not_truncated(
    tmp_path: Path, toml: str, key: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ": expected an integer"):
        load_settings(path, env={})
    whole = tmp_path / "whole.toml"
    whole.write_text("[server]\nmax_messages = 2.0\n")
    assert load_settings(whole, env={}).server.max_messages == 2


@pytest.mark.parametrize(
    ("toml", "env", "flags", "named"),
    [
        ('[server]\nlog_level = "verbose"\n', {}, [], "server.log_level"),
        ("", {"CONTEXT_PROXY_SERVER_LOG_LEVEL": "verbose"}, [], "server.log_level"),
        ("", {}, ["--log-level", "verbose"], "server.log_level"),
        ('[store]\nbackend = "redis"\nurl = "localhost:6379"\n', {}, [], "store.url"),
        # The byte 0xFF (written through surrogateescape), which UTF-8 never has.
        ('[server]\nhost = "\udcff"\n', {}, [], "c.toml: not UTF-8"),
    ],
)
def test_a_bad_setting_stops_serve_with_one_line_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    toml: str,
    env: dict[str, str],
    flags: list[str],
    named: str,
) -> None:
    from proxy.cli import main

    path = tmp_path / "c.toml"
    path.write_bytes(toml.encode("utf-8", "surrogateescape"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", "--config", str(path), *flags]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], lines


def test_open_relay_is_refused_unless_explicitly_allowed() -> None:
    keyed = load_settings(
        env={"CONTEXT_PROXY_UPSTREAM_API_KEY": "sk", "CONTEXT_PROXY_AUTH_CLIENT_KEYS": "a,b"}
    )
    assert keyed.auth.client_keys == ("a", "b")
    anonymous = load_settings(
        env={"CONTEXT_PROXY_UPSTREAM_API_KEY": "sk", "CONTEXT_PROXY_AUTH_ALLOW_ANONYMOUS": "true"}
    )
    assert anonymous.auth.allow_anonymous


def test_example_config_documents_every_key_and_loads() -> None:
    example = ROOT / "config.example.toml"
    data = tomllib.loads(example.read_text())

    def check(table: dict[str, Any], section: str, cls: type[Any]) -> None:
        for name, hint in typing.get_type_hints(cls).items():
            assert name in table, f"{section}.{name} missing from config.example.toml"
            if dataclasses.is_dataclass(hint):  # a table of its own: [reduction.mask]
                check(table[name], f"{section}.{name}", hint)  # type: ignore[arg-type]

    for section, cls in SECTIONS.items():
        check(data[section], section, cls)
    assert load_settings(example).reduction.strategy == "summarize"


def test_a_nested_table_loads_from_the_file_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[reduction.mask]\nkeep_tool_uses = 5\nexclude_tools = ["read"]\n')
    env = {"CONTEXT_PROXY_REDUCTION_MASK_THEN": "tokens"}
    mask = load_settings(path, env=env).reduction.mask
    assert (mask.keep_tool_uses, mask.exclude_tools, mask.then) == (5, ("read",), "tokens")
    path.write_text("[reduction.mask]\nkeep = 5\n")
    with pytest.raises(ConfigError, match=r"unknown setting reduction\.mask\.keep"):
        load_settings(path, env={})
    with pytest.raises(ConfigError, match=r"reduction\.mask\.then"):
        load_settings(None, env={"CONTEXT_PROXY_REDUCTION_MASK_THEN": "mask"})


def test_json_logs_carry_the_access_fields() -> None:
    from proxy.logs import JSONFormatter

    record = logging.LogRecord(
        "context_proxy.access", logging.INFO, "x", 1, "chat %s", ("c1",), None
    )
    record.conversation = "c1"
    record.tokens_in = 42
    entry = orjson.loads(JSONFormatter().format(record))
    assert entry["message"] == "chat c1" and entry["level"] == "info"
    assert entry["conversation"] == "c1" and entry["tokens_in"] == 42


def test_configuration_reference_matches_the_settings() -> None:
    from proxy.configdoc import reference

    doc = (ROOT / "docs" / "configuration.md").read_text()
    start = doc.index("<!-- config-reference:start")
    body = doc[doc.index("\n", start) + 1 : doc.index("<!-- config-reference:end")]
    assert body.strip() == reference().strip(), (
        "run `context-proxy config-doc` into docs/configuration.md"
    )


def test_readme_is_short_and_its_test_command_is_the_one_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    ci_command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    blocks = readme.split("```sh\n")
    first, second = (block.split("\n```")[0].strip() for block in blocks[1:3])
    assert second == ci_command
    assert first.startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[tools]'")
    assert first.endswith(".venv/bin/context-proxy serve")


def test_serving_needs_none_of_the_tools_or_embeddings_packages() -> None:
    """`pip install context-proxy` carries what `serve` needs: a turn runs without the extras."""
    import subprocess
    import sys

    script = """
import sys
for name in ('openai', 'rich', 'plotext', 'pygal', 'numpy', 'pydantic'):
    sys.modules[name] = None  # as if only the runtime were installed
import httpx
from starlette.testclient import TestClient
from proxy.app import create_app
from proxy.config import load_settings
from proxy.mock import MockUpstream
from proxy.tokens import offline_counter
settings = load_settings(None, env={}, overrides={
    'upstream': {'base_url': 'http://mock.test/v1'}, 'store': {'backend': 'memory'}})
app = create_app(settings, transport=httpx.ASGITransport(app=MockUpstream().app),
                 counter=offline_counter())
with TestClient(app) as client:
    r = client.post('/v1/chat/completions', headers={'authorization': 'Bearer sk-x'},
                    json={'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}]})
    print(r.status_code, client.get('/healthz').status_code)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "200 200", done.stdout + done.stderr


def test_a_tool_without_its_extra_says_what_to_install() -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "sys.modules['rich'] = None  # as if the tools extra were not installed\n"
        "from proxy.cli import main\n"
        "sys.exit(main(['inspect', 'x', '--db', 'none.db']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "pip install 'context-proxy[tools]'" in done.stderr


def test_counting_many_messages_off_the_loop_gives_the_counts_of_the_plain_path() -> None:
    import asyncio

    from proxy.tokens import OFF_LOOP_MESSAGES, TokenCounter

    @given(
        st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=40)}
            ),
            min_size=OFF_LOOP_MESSAGES,
            max_size=OFF_LOOP_MESSAGES + 40,
        )
    )
    @settings(max_examples=20, deadline=None)
    def check(messages: list[dict[str, Any]]) -> None:
        plain = TokenCounter()
        primed = TokenCounter()
        asyncio.run(primed.prime("gpt-4o", messages))
        assert [primed.count_message("gpt-4o", m) for m in messages] == [
            plain.count_message("gpt-4o", m) for m in messages
        ]

    check()
