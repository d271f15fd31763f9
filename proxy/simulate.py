"""`context-proxy simulate FILE.jsonl`: replay a recorded conversation through the real pipeline.

Nothing leaves the process: each strategy gets a fresh proxy (`create_app`
with a memory store) whose upstream is the built-in mock, reached through
`httpx.ASGITransport`, and is driven with Starlette's `TestClient`, which
runs the lifespan that `ASGITransport` alone would skip. Summaries come from
the mock's deterministic stand-in unless `--summarizer-url` names a real
one; only those calls then leave the machine.

Two input formats are accepted, told apart by the first line:

- one chat-completions request body per line (`{"model": ..., "messages": [...]}`),
  each replayed as it was sent;
- one message per line (`{"role": ..., "content": ...}`): every assistant
  message marks the point where the application sent the history before it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from .config import load_settings
from .errors import ConfigError
from .messages import Message, role
from .mock import PROSE, MockUpstream
from .reduction.types import STRATEGIES, is_strategy
from .tokens import TokenCounter, offline_counter

MOCK_HOST = "mock-upstream.invalid"
DEFAULT_MODEL = "gpt-4o-mini"


class TranscriptError(ValueError):
    """The file is not a transcript simulate can read; the message says where and why."""


@dataclass(frozen=True)
class Replayed:
    """One replayed request."""

    turn: int
    messages: int
    status: int
    tokens_in: int
    tokens_out: int
    kinds: tuple[str, ...]
    summaries: int
    prompt: int
    cached: int
    completion: int
    error: str = ""


@dataclass
class Run:
    """One strategy's replay."""

    strategy: str
    model: str
    window: int
    requests: list[Replayed] = field(default_factory=list)
    summary_calls: int = 0
    summary_prompt: int = 0
    summary_cached: int = 0
    summary_completion: int = 0
    seconds: float = 0.0


def load_transcript(path: str | Path, model: str | None = None) -> list[dict[str, Any]]:
    """Request bodies to replay, in order, from either input format."""
    items: list[Any] = []
    with Path(path).open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except ValueError as exc:
                raise TranscriptError(f"{path}:{number}: not JSON ({exc})") from None
            if not isinstance(items[-1], dict):
                raise TranscriptError(f"{path}:{number}: expected a JSON object")
    if not items:
        raise TranscriptError(f"{path}: no lines to replay")
    if all(isinstance(i.get("messages"), list) or "input" in i for i in items):
        bodies = [dict(i) for i in items]  # chat or Responses request bodies
    elif all(isinstance(i.get("role"), str) for i in items):
        bodies = [{"messages": m} for m in requests_from_messages(items)]
    else:
        raise TranscriptError(
            f"{path}: each line must be a request body (with 'messages' or 'input') or, "
            "throughout, a message (with 'role')"
        )
    for body in bodies:
        body["model"] = model or body.get("model") or DEFAULT_MODEL
        # Replays read whole answers; streaming would only add framing to parse.
        body.pop("stream", None)
        body.pop("stream_options", None)
    return bodies


def requests_from_messages(messages: Sequence[Message]) -> list[list[Message]]:
    """The histories an application sent: everything before each assistant message,
    and the whole transcript when it ends with a question still open."""
    requests = [list(messages[:i]) for i, m in enumerate(messages) if role(m) == "assistant" and i]
    if messages and role(messages[-1]) != "assistant":
        requests.append(list(messages))
    return requests


class _Routing(httpx.AsyncBaseTransport):
    """The mock for the upstream's host; the real network only for a `--summarizer-url`."""

    def __init__(self, mock: MockUpstream, run: Run) -> None:
        self.mock = httpx.ASGITransport(app=mock.app)
        self.network: httpx.AsyncHTTPTransport | None = None
        self.run = run

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == MOCK_HOST:
            return await self.mock.handle_async_request(request)
        self.network = self.network or httpx.AsyncHTTPTransport()
        response = await self.network.handle_async_request(request)
        content = await response.aread()
        self.run.summary_calls += 1
        try:
            usage = json.loads(content).get("usage") or {}
            self.run.summary_prompt += int(usage.get("prompt_tokens", 0))
            self.run.summary_completion += int(usage.get("completion_tokens", 0))
        except (ValueError, AttributeError, TypeError):
            pass
        return httpx.Response(
            response.status_code, headers=response.headers, content=content, request=request
        )

    async def aclose(self) -> None:
        await self.mock.aclose()
        if self.network is not None:
            await self.network.aclose()


def replay(
    bodies: Sequence[dict[str, Any]],
    strategy: str,
    *,
    window: int | None = None,
    summarizer_url: str | None = None,
    summarizer_model: str | None = None,
    counter: TokenCounter | None = None,
    config: str | None = None,
) -> Run:
    """Send every body through a fresh proxy using `strategy`; return what happened.

    `config` is a settings file whose reduction choices (`[reduction.mask]`,
    the ratios) the replay takes; its upstream and store are the replay's own.
    """
    from starlette.testclient import TestClient

    from .app import create_app
    from .models import context_window
    from .store import MemoryStore

    counter = counter or offline_counter()
    model = str(bodies[0]["model"])
    windows = {str(b["model"]): window for b in bodies} if window else {}
    settings = load_settings(
        None,
        env={},
        overrides={
            "upstream": {"base_url": f"http://{MOCK_HOST}/v1", "timeout_s": 120},
            "anthropic": {"base_url": f"http://{MOCK_HOST}"},
            "store": {"backend": "memory"},
            "reduction": {
                "strategy": strategy,
                "summarizer_base_url": summarizer_url,
                "summarizer_model": summarizer_model,
            },
            "models": {"windows": windows},
        },
    )
    if config is not None:  # the file's reduction choices; never its upstream, keys or store
        own = settings.reduction
        settings = replace(
            settings,
            reduction=replace(
                load_settings(config, env={}).reduction,
                strategy=own.strategy,
                summarizer_base_url=own.summarizer_base_url,
                summarizer_model=own.summarizer_model,
            ),
        )
    m = settings.models
    run = Run(strategy, model, context_window(model, m.windows, m.default_context_tokens))
    mock = MockUpstream(voice=PROSE, counter=counter)
    app = create_app(settings, transport=_Routing(mock, run), store=MemoryStore(), counter=counter)
    key = os.environ.get("OPENAI_API_KEY", "simulate") if summarizer_url else "simulate"
    started = time.perf_counter()
    with TestClient(app, base_url="http://context-proxy.test") as client:
        for body in bodies:
            before = len(mock.calls)
            route = route_of(body)
            headers = {"authorization": f"Bearer {key}"}
            if route == "/v1/messages":  # as Anthropic's clients send it
                headers["anthropic-version"] = settings.anthropic.version
            response = client.post(route, json=body, headers=headers)
            run.requests.append(_replayed(body, response, mock, before))
    run.seconds = time.perf_counter() - started
    for call in mock.summary_calls:
        run.summary_calls += 1
        run.summary_prompt += call.prompt_tokens
        run.summary_cached += call.cached_tokens
        run.summary_completion += call.completion_tokens
    return run


# Content blocks only Anthropic's Messages API has (and its server tools' `*_tool_result`).
ANTHROPIC_BLOCKS = frozenset(
    {
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "image",
        "document",
        "server_tool_use",
        "mcp_tool_use",
        "container_upload",
    }
)


def route_of(body: dict[str, Any]) -> str:
    """Which route a recorded body was sent to: Responses bodies have `input`; Messages
    bodies a top-level `system` or Anthropic's content blocks; the rest are chat."""
    if "input" in body:
        return "/v1/responses"
    messages = body.get("messages")
    blocks = (
        b.get("type")
        for m in (messages if isinstance(messages, list) else ())
        if isinstance(m, dict) and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict)
    )
    if "system" in body or any(
        kind in ANTHROPIC_BLOCKS or str(kind).endswith("_tool_result") for kind in blocks
    ):
        return "/v1/messages"
    return "/v1/chat/completions"


def _replayed(body: dict[str, Any], response: Any, mock: MockUpstream, before: int) -> Replayed:
    calls = mock.calls[before:]
    chat = [c for c in calls if not c.summary]
    h = response.headers
    error = ""
    if response.status_code != 200:
        try:
            error = str(response.json()["error"]["message"])
        except (ValueError, KeyError, TypeError):
            error = response.text[:200]
    history = body.get("messages", body.get("input"))
    history = history if isinstance(history, list) else [{"role": "user"}]
    return Replayed(
        turn=sum(1 for m in history if isinstance(m, dict) and role(m) == "user"),
        messages=len(history),
        status=response.status_code,
        tokens_in=int(h.get("x-context-tokens-in", 0)),
        tokens_out=int(h.get("x-context-tokens-out", 0)),
        kinds=tuple(k for k in h.get("x-context-reduction", "").split(",") if k),
        summaries=sum(1 for c in calls if c.summary),
        prompt=chat[-1].prompt_tokens if chat else 0,
        cached=chat[-1].cached_tokens if chat else 0,
        completion=chat[-1].completion_tokens if chat else 0,
        error=error,
    )


def parse_strategies(text: str) -> list[str]:
    names = [s.strip().lower() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if not is_strategy(s)]
    if unknown or not names:
        raise ConfigError(
            f"--compare: unknown strategy {unknown}; choose from {STRATEGIES} or mask+<strategy>"
        )
    return list(dict.fromkeys(names))


def main(args: Any) -> int:
    """Entry point of `context-proxy simulate` (arguments parsed by `proxy.cli`)."""
    from rich.console import Console

    from .simulate_report import Prices, print_report

    console = Console()
    try:
        strategies = parse_strategies(args.compare or args.strategy)
        bodies = load_transcript(args.file, args.model)
        prices = Prices.for_model(
            str(bodies[0]["model"]), args.price_input, args.price_cached, args.price_output
        )
        if args.window is not None and args.window < 1:
            raise ConfigError("--window must be a positive number of tokens")
        if args.chart and not str(args.chart).lower().endswith(".svg"):
            raise ConfigError("--chart must end in .svg")
        if args.config is not None:  # read by each replay: a bad file is one line, here
            load_settings(args.config, env={})
    except (OSError, TranscriptError, ConfigError) as exc:
        console.print(f"context-proxy simulate: {exc}", style="red", markup=False)
        return 2
    counter = TokenCounter() if args.tokenizer == "tiktoken" else offline_counter()
    runs = []
    with console.status("replaying") as status:
        for strategy in strategies:
            status.update(f"replaying {len(bodies)} requests with strategy {strategy}")
            runs.append(
                replay(
                    bodies,
                    strategy,
                    window=args.window,
                    summarizer_url=args.summarizer_url,
                    summarizer_model=args.summarizer_model,
                    counter=counter,
                    config=args.config,
                )
            )
    # Failed requests are findings of the replay (shown in the report), not a failed command.
    print_report(console, runs, prices, per_turn=args.per_turn, chart=args.chart)
    return 0
