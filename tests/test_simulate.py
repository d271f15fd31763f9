"""`context-proxy simulate` and the built-in mock upstream it replays against."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main
from proxy.simulate import load_transcript, replay, requests_from_messages, route_of
from proxy.simulate_report import Prices
from tests.factories import assistant, system, tool_round, user

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MESSAGES = EXAMPLES / "sample-transcript.jsonl"
REQUESTS = EXAMPLES / "sample-requests.jsonl"
ALL = ("summarize", "tokens", "messages", "tiered", "filter", "none")


def test_messages_become_the_requests_an_app_would_have_sent() -> None:
    msgs = [system("s"), user("a"), *tool_round("c"), assistant("b")]
    msgs.append(user("open question"))
    requests = requests_from_messages(msgs)
    assert [len(r) for r in requests] == [2, 4, 6]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "container_upload", "file_id": "file_1"},
    ],
)
def test_a_messages_body_without_system_or_tool_use_replays_on_its_route(
    block: dict[str, Any],
) -> None:
    """Such a body was replayed as a chat completions request."""
    body = {
        "model": "claude-x",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": [block]}],
    }
    assert route_of(body) == "/v1/messages"
    chat = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert route_of(chat) == "/v1/chat/completions"


def test_both_input_formats_load_as_request_bodies() -> None:
    from_messages = load_transcript(MESSAGES)
    from_requests = load_transcript(REQUESTS, model="gpt-4o")
    assert len(from_messages) > 40  # 40 turns, plus the tool rounds
    assert all(b["model"] == "gpt-4o-mini" for b in from_messages)
    assert all(b["model"] == "gpt-4o" for b in from_requests)
    # The request file is the first part of the same conversation, recorded per request.
    for recorded, derived in zip(from_requests, from_messages, strict=False):
        assert recorded["messages"] == derived["messages"]


def test_an_unreadable_transcript_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"role": "user", "content": "x"}) + "\n" + json.dumps({"a": 1}))
    assert main(["simulate", str(bad)]) == 2
    assert "bad.jsonl" in capsys.readouterr().out


def test_an_invalid_config_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[reduction\n")
    assert main(["simulate", str(REQUESTS), "--config", str(bad)]) == 2
    assert "bad.toml: invalid TOML" in " ".join(capsys.readouterr().out.split())


def test_example_prices_apply_the_cached_input_discount() -> None:
    prices = Prices.for_model("gpt-4o-2024-08-06")
    assert prices.cost(1_000_000, 1_000_000, 0) == pytest.approx(1.25)
    assert prices.cost(1_000_000, 0, 1_000_000) == pytest.approx(12.50)
    assert Prices.for_model("gpt-4o", input=1.0).label == "your prices"


def test_every_strategy_but_none_forwards_less_of_the_sample() -> None:
    bodies = load_transcript(MESSAGES)
    runs = {s: replay(bodies, s, window=4000) for s in ALL}

    totals = {s: sum(r.tokens_out for r in run.requests) for s, run in runs.items()}
    for run in runs.values():
        assert all(r.status == 200 for r in run.requests), run.strategy
    for strategy in ("summarize", "tokens", "messages", "tiered", "filter"):
        assert totals[strategy] < totals["none"], strategy
    assert runs["summarize"].summary_calls >= 1
    assert runs["none"].summary_calls == runs["tokens"].summary_calls == 0
    summarized = [r for r in runs["summarize"].requests if "summarized" in r.kinds]
    # Each reduction uses one summary; the summary prepared in the background for the
    # next reduction may still be unused when the transcript ends.
    assert len(summarized) <= runs["summarize"].summary_calls <= len(summarized) + 1
    assert max(r.tokens_out for r in runs["summarize"].requests) <= 0.7 * 4000


def test_mask_replaces_summaries_on_an_agents_traffic_and_takes_a_config(tmp_path: Path) -> None:
    """The agent transcript (mostly tool output): clearing results spares summariser calls."""
    bodies = load_transcript(EXAMPLES / "agent-transcript.jsonl")
    runs = {s: replay(bodies, s, window=16000) for s in ("summarize", "mask", "mask+tokens")}
    for run in runs.values():
        assert all(r.status == 200 for r in run.requests), run.strategy
        assert max(r.tokens_out for r in run.requests) <= 0.7 * 16000
    assert runs["summarize"].summary_calls >= 2
    assert runs["mask"].summary_calls < runs["summarize"].summary_calls
    assert runs["mask+tokens"].summary_calls == 0
    assert any("masked" in r.kinds for r in runs["mask"].requests)
    # A clearing must free more than these results hold: the config's minimum is honoured.
    config = tmp_path / "c.toml"
    config.write_text("[reduction.mask]\nclear_at_least = 100000\n")
    held = replay(bodies, "mask+tokens", window=16000, config=str(config))
    assert not any("masked" in r.kinds for r in held.requests)
    assert any("windowed" in r.kinds for r in held.requests)


def test_replay_is_deterministic() -> None:
    bodies = load_transcript(REQUESTS)
    first, second = (
        replay(bodies, "summarize", window=2000),
        replay(bodies, "summarize", window=2000),
    )
    assert first.requests == second.requests


def test_cached_prefix_grows_while_the_prompt_only_extends() -> None:
    run = replay(load_transcript(REQUESTS), "none")
    cached = [r.cached for r in run.requests]
    assert cached == sorted(cached) and cached[-1] > 0


@pytest.mark.integration
def test_simulate_compare_prints_a_table_and_saves_a_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chart = tmp_path / "sim.svg"
    code = main(
        [
            "simulate",
            str(MESSAGES),
            "--compare",
            ",".join(ALL),
            "--window",
            "4000",
            "--chart",
            str(chart),
            "--per-turn",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    for strategy in ALL:
        assert strategy in out
    assert "Per request: summarize" in out
    assert "example prices of gpt-4o-mini" in out
    assert ET.parse(chart).getroot().tag.endswith("svg")


def test_simulate_suggests_a_window_when_nothing_gets_near_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", str(REQUESTS), "--compare", "summarize"]) == 0
    assert "--window" in capsys.readouterr().out


def test_simulate_compares_mask_chains_and_refuses_an_unknown_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    agent = str(EXAMPLES / "agent-transcript.jsonl")
    assert main(["simulate", agent, "--compare", "mask,mask+tokens", "--window", "16000"]) == 0
    out = capsys.readouterr().out
    assert "mask+tokens" in out and "mask" in out
    assert main(["simulate", agent, "--compare", "mask+mask"]) == 2
    assert "unknown strategy ['mask+mask']" in capsys.readouterr().out


def as_responses_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chat history as the Responses API's input items."""
    items: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m["tool_call_id"],
                    "output": m["content"],
                }
            )
        elif m.get("tool_calls"):
            for c in m["tool_calls"]:
                fn = c["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": c["id"],
                        "name": fn["name"],
                        "arguments": fn["arguments"],
                    }
                )
        else:
            items.append({"role": m["role"], "content": m["content"] or ""})
    return items


def test_simulate_replays_responses_bodies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = load_transcript(MESSAGES)
    lines = [
        json.dumps({"model": "gpt-4o-mini", "input": as_responses_items(b["messages"])})
        for b in chat
    ]
    path = tmp_path / "responses.jsonl"
    path.write_text("\n".join(lines) + "\n")
    bodies = load_transcript(path)
    runs = {s: replay(bodies, s, window=4000) for s in ("none", "summarize")}
    for run in runs.values():
        assert all(r.status == 200 for r in run.requests), [r.error for r in run.requests]
    totals = {s: sum(r.tokens_out for r in run.requests) for s, run in runs.items()}
    assert totals["summarize"] < totals["none"] and runs["summarize"].summary_calls >= 1
    assert main(["simulate", str(path), "--compare", "none,summarize", "--window", "4000"]) == 0
    assert "summarize" in capsys.readouterr().out


def as_anthropic_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """A chat history as a Messages request's system and messages (results in user messages)."""
    system_text = " ".join(m["content"] for m in messages if m["role"] == "system")
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "system":
            continue
        if m["role"] == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m["tool_call_id"],
                "content": m["content"],
            }
            if out and out[-1]["role"] == "user" and out[-1]["content"][0]["type"] == "tool_result":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
            continue
        blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": m["content"]}] if m["content"] else []
        )
        for c in m.get("tool_calls") or []:
            fn = c["function"]
            use = {"type": "tool_use", "id": c["id"], "name": fn["name"]}
            blocks.append({**use, "input": json.loads(fn["arguments"] or "{}")})
        if out and out[-1]["role"] == m["role"]:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": m["role"], "content": blocks})
    return system_text, out


def test_simulate_replays_messages_bodies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = []
    for b in load_transcript(MESSAGES):
        system_text, messages = as_anthropic_messages(b["messages"])
        body = {"model": "claude-x", "max_tokens": 200, "system": system_text, "messages": messages}
        lines.append(json.dumps(body))
    path = tmp_path / "messages.jsonl"
    path.write_text("\n".join(lines) + "\n")
    bodies = load_transcript(path)
    runs = {s: replay(bodies, s, window=4000) for s in ("none", "summarize", "mask")}
    for run in runs.values():
        assert all(r.status == 200 for r in run.requests), [r.error for r in run.requests]
    totals = {s: sum(r.tokens_out for r in run.requests) for s, run in runs.items()}
    assert totals["summarize"] < totals["none"] and runs["summarize"].summary_calls >= 1
    assert main(["simulate", str(path), "--compare", "none,summarize", "--window", "4000"]) == 0
    assert "summarize" in capsys.readouterr().out
