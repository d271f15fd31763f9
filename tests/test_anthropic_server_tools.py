"""Server tools and programmatic tool calling on `/v1/messages`, as the core groups and
reduces them: a server tool's use and its result (web search, code execution, MCP), a
tool called from code and the code's use, are never separated."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.dialects import Item
from proxy.dialects.anthropic import ANTHROPIC
from proxy.mock import MockUpstream
from proxy.mock import anthropic as mock_anthropic
from proxy.reduction import STRATEGIES
from proxy.reduction.chains import group
from proxy.reduction.tail import grouped_tail

from .servers import run_server, serve_proxy
from .test_anthropic import HEADERS, ROOMY, SLOW, accepted, text, user
from .test_media_tokens import b64, pdf


def server_use(use_id: str, name: str, **given: Any) -> dict[str, Any]:
    return {"type": "server_tool_use", "id": use_id, "name": name, "input": given}


def called(call_id: str, code: str) -> dict[str, Any]:
    """A tool call made from the code of server tool use `code` (programmatic calling)."""
    caller = {"type": "code_execution_20250825", "tool_id": code}
    return {
        "type": "tool_use",
        "id": call_id,
        "name": "lookup",
        "input": {"q": call_id},
        "caller": caller,
    }


def answered(call_id: str, body: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": body}


def web_search(n: int, size: int) -> Item:
    found = [
        {
            "type": "web_search_result",
            "url": f"https://e.com/{n}",
            "title": "t" * size,
            "encrypted_content": "E" * size,
        }
    ]
    return {
        "role": "assistant",
        "content": [
            text("Searching."),
            server_use(f"srvtoolu_w{n}", "web_search", query=f"q{n}"),
            {"type": "web_search_tool_result", "tool_use_id": f"srvtoolu_w{n}", "content": found},
            text(f"Found {n}."),
        ],
    }


def mcp(n: int, size: int) -> Item:
    return {
        "role": "assistant",
        "content": [
            {
                "type": "mcp_tool_use",
                "id": f"mcptoolu_{n}",
                "name": "get",
                "server_name": "docs",
                "input": {},
            },
            {
                "type": "mcp_tool_result",
                "tool_use_id": f"mcptoolu_{n}",
                "is_error": False,
                "content": [text("m" * size)],
            },
            text(f"MCP said {n}."),
        ],
    }


def programmatic(n: int, rounds: int, size: int) -> list[Item]:
    """Code that calls the client's tool `rounds` times, then its result and an answer."""
    code = f"srvtoolu_c{n}"
    items: list[Item] = []
    for r in range(rounds):
        head = (
            [text("Running code."), server_use(code, "code_execution", code="...")]
            if r == 0
            else []
        )
        items.append({"role": "assistant", "content": [*head, called(f"toolu_{n}_{r}", code)]})
        items.append(user(answered(f"toolu_{n}_{r}", "r" * size)))
    output = {
        "type": "code_execution_result",
        "stdout": "o" * size,
        "stderr": "",
        "return_code": 0,
        "content": [],
    }
    final = {"type": "code_execution_tool_result", "tool_use_id": code, "content": output}
    items.append({"role": "assistant", "content": [final, text(f"The code found {n}.")]})
    return items


@st.composite
def histories(draw: st.DrawFn) -> list[Item]:
    """Turns whose answers use server tools, MCP tools or code calling the client's tools."""
    items: list[Item] = []
    for n in range(draw(st.integers(1, 7))):
        upload = (
            [{"type": "container_upload", "file_id": f"file_{n}"}] if draw(st.booleans()) else []
        )
        items.append(user(text(f"q{n} " + "x" * draw(st.integers(0, 300))), *upload))
        size = draw(st.integers(0, 400))
        kind = draw(st.sampled_from(["web", "mcp", "code", "plain"]))
        if kind == "web":
            items.append(web_search(n, size))
        elif kind == "mcp":
            items.append(mcp(n, size))
        elif kind == "code":
            items.extend(programmatic(n, draw(st.integers(1, 3)), size))
        else:
            items.append({"role": "assistant", "content": [text(f"a{n} " + "z" * size)]})
    items.append(user(text("the new question")))
    if draw(st.booleans()):  # the agent is in the middle of code calling its tools
        items.extend(programmatic(99, draw(st.integers(1, 3)), draw(st.integers(0, 400)))[:-1])
    return items


@SLOW
@given(histories())
def test_the_fake_accepts_them_and_a_unit_holds_the_code_and_what_it_called(
    items: list[Item],
) -> None:
    mock_anthropic.validate({"model": "c", "max_tokens": 9, "messages": items}, HEADERS, {})
    units = group(items, (), ANTHROPIC)
    assert [m for u in units for m in u.messages] == items
    for unit in units[:-1]:  # a unit whose first message starts code holds the code's result
        first = unit.messages[0]["content"]
        if any(b.get("name") == "code_execution" for b in first if isinstance(b, dict)):
            last = unit.messages[-1]["content"]
            assert last[0]["type"] == "code_execution_tool_result"


@SLOW
@given(histories(), st.lists(st.integers(0, 40), max_size=4))
def test_a_tail_extended_turn_by_turn_is_the_tail_grouped_at_once(
    items: list[Item], splits: list[int]
) -> None:
    """Code going on with the client's tools joins the unit it began in the tail kept from
    the last turn, as it does when the whole history is grouped."""
    extended = None
    for split in [*sorted(splits), None]:
        extended = grouped_tail(items[:split], lambda m: 1, True, extended, ANTHROPIC)
    at_once = grouped_tail(items, lambda m: 1, True, None, ANTHROPIC)
    assert extended is not None and extended.units == at_once.units


@SLOW
@given(
    histories(),
    st.sampled_from([s for s in STRATEGIES if s != "none"] + ["mask+tokens"]),
    st.integers(300, 4000),
)
def test_every_strategy_keeps_server_tools_with_their_results(
    items: list[Item], strategy: str, window: int
) -> None:
    body = accepted(items, strategy, window)
    # Refused only for its size: in a window large enough the same history goes.
    assert body is not None or accepted(items, strategy, ROOMY) is not None


def test_the_fake_refuses_server_tool_blocks_out_of_place() -> None:
    question = user(text("q"))
    ran = programmatic(0, 1, 5)
    broken = {
        "a result without its use": [question, {**ran[-1]}],
        "a call from code that is not there": [
            question,
            {**ran[0], "content": ran[0]["content"][2:]},
        ],
        "text beside the results of calls from code": [
            question,
            ran[0],
            user(*ran[1]["content"], text("and?")),
        ],
        "a server result in a user message": [
            question,
            web_search(0, 1),
            user(ran[-1]["content"][0]),
        ],
    }
    for name, messages in broken.items():
        with pytest.raises(mock_anthropic.Invalid):
            mock_anthropic.validate(
                {"model": "c", "max_tokens": 9, "messages": messages}, HEADERS, {}
            )
            pytest.fail(name)


@contextlib.contextmanager
def proxied(tmp_path: Path, **env: str) -> Iterator[tuple[MockUpstream, anthropic.Anthropic]]:
    """The mock upstream with a small window, the real server, and the `anthropic` client."""
    upstream = MockUpstream(context_limits={"claude-tiny": 3000})
    windows = {"claude-tiny": 3000}
    with (
        run_server(upstream.app) as upstream_url,
        serve_proxy(
            upstream_url + "/v1",
            tmp_path / "p.db",
            windows=windows,
            anthropic_url=upstream_url,
            **env,
        ) as url,
        anthropic.Anthropic(base_url=url, api_key="sk-ant-code", max_retries=0) as api,
    ):
        yield upstream, api


@pytest.mark.integration
def test_an_agent_whose_code_calls_its_tools_is_reduced_and_anthropic_accepts_it(
    tmp_path: Path,
) -> None:
    """Through the real server with the `anthropic` client: answers that ran code calling
    the app's tools (as Anthropic sends them) stay whole through windows and summaries."""
    with proxied(tmp_path, reduction_strategy="messages") as (upstream, api):
        history: list[Any] = []
        kinds = set()
        for n in range(24):
            history.append({"role": "user", "content": f"Question {n}: " + "how many? " * 20})
            raw = api.messages.with_raw_response.create(
                model="claude-tiny", max_tokens=128, messages=history
            )
            kinds.add(raw.headers["x-context-reduction"])
            history.pop()
            # The app keeps Anthropic's answers: code that called its tool in two rounds.
            history += [user(text(f"Question {n}: " + "how many? " * 20)), *programmatic(n, 2, 120)]
    assert "windowed" in kinds
    assert len(upstream.messages_requests()) == 24  # each one accepted by the fake


def test_what_server_tools_said_is_read_for_summaries_and_search() -> None:
    """The code run, its output, a search's hits and an MCP tool's answer are words a
    summary and recall read; encrypted and base64 content is not."""
    code, _, _, _, final = programmatic(1, 2, 3)
    assert (
        ANTHROPIC.text(code)
        == 'Running code.\ncode_execution({"code":"..."})\nlookup({"q":"toolu_1_0"})'
    )
    assert ANTHROPIC.text(final) == "ooo\nThe code found 1."
    assert ANTHROPIC.text(web_search(2, 3)) == (
        'Searching.\nweb_search({"query":"q2"})\nhttps://e.com/2\nttt\nFound 2.'
    )
    assert ANTHROPIC.text(mcp(3, 3)) == "get({})\nmmm\nMCP said 3."
    page = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "Page."},
    }
    fetched = {"type": "web_fetch_result", "url": "https://e.com", "content": page}
    result = {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_f", "content": fetched}
    assert ANTHROPIC.text({"role": "assistant", "content": [result]}) == "https://e.com\nPage."


@pytest.mark.integration
def test_recall_finds_a_fact_the_code_printed(tmp_path: Path) -> None:
    fact = "The checksum of build 812 is 5f3ac9 and its artifact sits in bucket otter-7."
    with proxied(tmp_path, recall_enabled="true") as (upstream, api):
        output = {
            "type": "code_execution_result",
            "stdout": fact,
            "stderr": "",
            "return_code": 0,
            "content": [],
        }
        ran = [
            server_use("srvtoolu_1", "code_execution", code="print(checksum())"),
            {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_1", "content": output},
            text("Done."),
        ]
        history: list[Any] = [user(text("Check build 812.")), {"role": "assistant", "content": ran}]
        for i in range(60):
            history.append(user(text(f"Turn {i}: tell me about day {i} of the trip.")))
            answer = api.messages.create(
                model="claude-tiny",
                max_tokens=128,
                messages=history,
                extra_headers={"X-Conversation-Id": "build"},
            )
            history.append({"role": "assistant", "content": answer.content[0].text})
        history.append(user(text("Which bucket holds the artifact of build 812?")))
        api.messages.create(
            model="claude-tiny",
            max_tokens=128,
            messages=history,
            extra_headers={"X-Conversation-Id": "build"},
        )
    asked = upstream.messages_requests()[-1]["messages"]
    assert fact not in str(asked[:-1]), "the code's answer was reduced away before the question"
    assert fact in asked[-1]["content"][0]["text"]


@pytest.mark.integration
def test_a_pdf_the_model_fetched_goes_on_as_the_pages_it_is(tmp_path: Path) -> None:
    """Counted by its base64's size (500,066 tokens), a 3-page PDF web fetch read was reduced
    away from a 200k window on the next turn; it counts as its pages and stays."""
    source = {"type": "base64", "media_type": "application/pdf", "data": b64(pdf(3, 1_500_000))}
    fetched = {
        "type": "web_fetch_result",
        "url": "https://example.com/lease.pdf",
        "content": {"type": "document", "source": source},
    }
    read = [
        server_use("srvtoolu_f", "web_fetch", url="https://example.com/lease.pdf"),
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_f", "content": fetched},
        text("The lease runs to 2031."),
    ]
    history = [
        user(text("Read my lease.")),
        {"role": "assistant", "content": read},
        user(text("When can I leave?")),
    ]
    with proxied(tmp_path) as (upstream, api):
        raw = api.messages.with_raw_response.create(
            model="claude-opus-4-7", max_tokens=1024, messages=history
        )
    assert raw.headers["x-context-reduction"] == "none"
    assert upstream.messages_requests()[-1]["messages"] == history


@pytest.mark.integration
@pytest.mark.parametrize("strategy", ["summarize", "mask+tokens"])
def test_code_that_calls_the_apps_tool_streams_is_stored_and_goes_on(
    tmp_path: Path, strategy: str
) -> None:
    """An app on programmatic tool calling, streamed and not, with the answers as Anthropic
    sends them: stored with their `caller`, resent, reduced, and accepted every turn."""
    with proxied(tmp_path, reduction_strategy=strategy) as (upstream, api):
        history: list[Any] = []
        kinds = []
        for n in range(40):
            ask = f"Turn {n}: " + (
                "run code calling lookup" if n % 3 == 0 else "how is day {n}? " * 8
            )
            history.append({"role": "user", "content": ask})
            while True:
                kwargs: Any = {"model": "claude-tiny", "max_tokens": 128, "messages": history}
                headers = {"X-Conversation-Id": f"code-{strategy}"}
                if n % 2:
                    with api.messages.stream(**kwargs, extra_headers=headers) as events:
                        message = events.get_final_message()
                        kinds.append(events.response.headers["x-context-reduction"])
                else:
                    raw = api.messages.with_raw_response.create(**kwargs, extra_headers=headers)
                    message = raw.parse()
                    kinds.append(raw.headers["x-context-reduction"])
                content = [b.model_dump(exclude_none=True) for b in message.content]
                history.append({"role": "assistant", "content": content})
                calls = [b for b in content if b["type"] == "tool_use"]
                if not calls:
                    break
                assert calls[0]["caller"]["tool_id"] == content[0]["id"]
                out = f"City {n}: " + "a long report of museums and parks. " * 12
                history.append(user(answered(calls[0]["id"], out)))
    assert any(k != "none" for k in kinds), "reduced"
    results = [b for m in history if m["role"] == "assistant" for b in m["content"]]
    finished = [b for b in results if b["type"] == "code_execution_tool_result"]
    assert len(finished) == 14  # every code run ended with its result
    assert len(upstream.messages_requests()) == 40 + 14  # each accepted by the fake
