"""`context-proxy demo`: the whole proxy, offline, in well under a minute.

It starts the built-in mock upstream and the real proxy (the same
`create_app` that `serve` runs) with uvicorn on free loopback ports, then
plays a long scripted conversation with tool rounds through the official
`openai` client, exactly as an application would, and reports what the
proxy forwarded each turn. The demo model gets a small context window so
that reductions happen within a few dozen turns instead of thousands.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from .config import load_settings
from .demo_report import TurnRow, print_turn_report
from .demo_script import SYSTEM_PROMPT, TOOLS, run_tool, user_turn
from .mock import PROSE, MockUpstream
from .tokens import offline_counter

MODEL = "demo-model"
WINDOW = 8000


@contextlib.contextmanager
def serve_in_thread(app: Any, name: str) -> Iterator[str]:
    """Run `app` with uvicorn on a free 127.0.0.1 port in a daemon thread; yield its URL.

    The socket is bound here, so the port is known before uvicorn starts and
    no other process can take it in between. Leaving the block stops the server.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        ws="none",
        access_log=False,
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"{name}-{port}", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {name} server did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5)
        sock.close()


@dataclass
class Exchange:
    """One request of the demo: what the proxy said in its headers, what the mock saw."""

    tokens_in: int
    tokens_out: int
    kinds: tuple[str, ...]
    summaries: int
    cached: int
    prompt: int
    extends: bool


def run_demo(turns: int, chart: Path, console: Console, *, window: int = WINDOW) -> int:
    import openai

    from .app import create_app

    mock = MockUpstream(voice=PROSE, counter=offline_counter())
    started = time.perf_counter()
    rows: list[TurnRow] = []
    with serve_in_thread(mock.app, "mock-upstream") as upstream_url:
        settings = load_settings(
            None,
            env={},
            overrides={
                "upstream": {"base_url": upstream_url + "/v1"},
                "store": {"backend": "memory"},
                "reduction": {"strategy": "summarize"},
                "models": {"windows": {MODEL: window}},
            },
        )
        app = create_app(settings, counter=offline_counter())
        with serve_in_thread(app, "context-proxy") as proxy_url:
            console.print(
                f"[bold]context-proxy demo[/]: mock upstream at {upstream_url}, "
                f"proxy at {proxy_url}, model [cyan]{MODEL}[/] with a {window}-token window, "
                "strategy [cyan]summarize[/]"
            )
            client = openai.OpenAI(
                base_url=proxy_url + "/v1", api_key="demo-key", max_retries=0, timeout=30
            )
            history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
            columns = (
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
            )
            with Progress(*columns, console=console, transient=True) as progress:
                task = progress.add_task("conversation", total=turns, status="")
                try:
                    for n in range(1, turns + 1):
                        row = _play_turn(client, mock, history, n)
                        rows.append(row)
                        status = (
                            f"history {row.tokens_in:>6} → forwarded {row.tokens_out:>5} tokens"
                        )
                        progress.update(task, advance=1, status=status)
                finally:
                    client.close()
    elapsed = time.perf_counter() - started
    print_turn_report(console, rows, chart=chart, window=window, elapsed_s=elapsed)
    return 0


def _play_turn(client: Any, mock: MockUpstream, history: list[dict[str, Any]], n: int) -> TurnRow:
    """One user turn: a question, and when it asks for a tool, the tool round that follows."""
    text = user_turn(n)
    history.append({"role": "user", "content": text})
    exchanges = []
    stream = n % 3 == 0
    for _ in range(4):  # a tool call, its result, the answer; never loop forever
        answer, exchange = _ask(client, mock, history, stream)
        exchanges.append(exchange)
        history.append(answer)
        calls = answer.get("tool_calls") or []
        if not calls:
            break
        for call in calls:
            fn = call["function"]
            result = run_tool(fn["name"], json.loads(fn["arguments"] or "{}"), n)
            history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    kinds: list[str] = []
    for e in exchanges:
        kinds += [k for k in e.kinds if k not in kinds]
    return TurnRow(
        turn=n,
        messages=len(history),
        requests=len(exchanges),
        tokens_in=exchanges[-1].tokens_in,
        tokens_out=exchanges[-1].tokens_out,
        total_in=sum(e.tokens_in for e in exchanges),
        total_out=sum(e.tokens_out for e in exchanges),
        kinds=tuple(kinds),
        summaries=sum(e.summaries for e in exchanges),
        cache_hit=all(e.extends for e in exchanges),
        cached=sum(e.cached for e in exchanges),
        prompt=sum(e.prompt for e in exchanges),
    )


def _ask(
    client: Any, mock: MockUpstream, history: list[dict[str, Any]], stream: bool
) -> tuple[dict[str, Any], Exchange]:
    before = len(mock.calls)
    # The client type-checks `messages` recursively in Python on every call, a cost
    # that grows with the history until it outweighs the rest of the demo. The
    # history rides in `extra_body`, which the client merges into the JSON untouched.
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "messages": [],
        "tools": TOOLS,
        "extra_body": {"messages": history},
    }
    if stream:
        kwargs.update(stream=True, stream_options={"include_usage": True})
    raw = client.chat.completions.with_raw_response.create(**kwargs)
    answer = _assemble(raw.parse()) if stream else _message(raw.parse().choices[0].message)
    calls = mock.calls[before:]
    chat = [c for c in calls if not c.summary][-1]
    h = raw.headers
    kinds = tuple(k for k in h.get("x-context-reduction", "").split(",") if k)
    exchange = Exchange(
        tokens_in=int(h.get("x-context-tokens-in", 0)),
        tokens_out=int(h.get("x-context-tokens-out", 0)),
        kinds=kinds,
        summaries=sum(1 for c in calls if c.summary),
        cached=chat.cached_tokens,
        prompt=chat.prompt_tokens,
        extends=chat.extends_previous,
    )
    return answer, exchange


def _message(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in message.tool_calls
        ]
    return out


def _assemble(stream: Any) -> dict[str, Any]:
    """The assistant message from streamed deltas (content and tool-call fragments)."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
            for tc in delta.tool_calls or []:
                call = calls.setdefault(
                    tc.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = tc.id or call["id"]
                if tc.function is not None:
                    call["function"]["name"] += tc.function.name or ""
                    call["function"]["arguments"] += tc.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def main(args: Any) -> int:
    """Entry point of `context-proxy demo` (arguments parsed by `proxy.cli`)."""
    console = Console()
    if args.turns < 1 or args.window < 1000:
        console.print("context-proxy demo: --turns >= 1 and --window >= 1000 please", style="red")
        return 2
    chart = Path(args.chart)
    if chart.suffix.lower() != ".svg":
        console.print("context-proxy demo: --chart must end in .svg", style="red")
        return 2
    return run_demo(args.turns, chart, console, window=args.window)
