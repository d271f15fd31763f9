"""The `context-proxy` command (`python -m proxy` is the same)."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import importlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import load_settings
from .errors import ConfigError
from .settings import Settings

# Commands that need the `tools` extra, and the packages it brings.
TOOLS = ("demo", "simulate", "inspect")
TOOL_PACKAGES = ("openai", "rich", "plotext", "pygal")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="context-proxy",
        description="OpenAI-compatible proxy that keeps long conversations in the context window.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--config", help="TOML settings file (see config.example.toml)")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default 8787)")
    serve.add_argument("--upstream", help="upstream base URL, e.g. https://api.openai.com/v1")
    serve.add_argument("--store", choices=["memory", "sqlite", "redis"], help="store backend")
    serve.add_argument("--strategy", help="reduction strategy")
    serve.add_argument("--log-level", help="debug | info | warning | error")
    serve.add_argument("--log-format", choices=["text", "json"], help="log line format")
    serve.add_argument(
        "--workers", type=int, help="processes serving the same port and store (default 1)"
    )
    sub.add_parser("config-doc", help="print the configuration reference (Markdown)")
    _add_tool_commands(sub)
    return parser


def _add_tool_commands(sub: Any) -> None:
    """`demo`, `simulate` and `inspect`: the newcomer tools (the `tools` extra)."""
    demo = sub.add_parser("demo", help="run an offline demonstration (mock upstream, real proxy)")
    demo.add_argument("--turns", type=int, default=200, help="conversation turns (default 200)")
    demo.add_argument(
        "--chart", default="context-proxy-demo.svg", help="where to save the SVG chart"
    )
    demo.add_argument(
        "--window", type=int, default=8000, help="the demo model's context window (default 8000)"
    )
    sim = sub.add_parser("simulate", help="replay a recorded conversation offline")
    sim.add_argument("file", help="JSONL: one request body per line, or one message per line")
    sim.add_argument("--compare", default="", help="strategies side by side, e.g. summarize,none")
    sim.add_argument("--strategy", default="summarize", help="strategy when not comparing")
    sim.add_argument("--summarizer-url", help="a real summariser (OpenAI-compatible base URL)")
    sim.add_argument("--summarizer-model", help="model for --summarizer-url")
    sim.add_argument("--model", help="model to replay with (default: the recorded one)")
    sim.add_argument("--window", type=int, help="context window of the model, in tokens")
    sim.add_argument("--config", help="TOML settings whose [reduction] choices the replay takes")
    sim.add_argument("--chart", help="also save the chart as this SVG file")
    sim.add_argument("--per-turn", action="store_true", help="print every request's numbers")
    sim.add_argument("--tokenizer", choices=["estimate", "tiktoken"], default="estimate")
    for flag in ("input", "cached", "output"):
        sim.add_argument(f"--price-{flag}", type=float, help=f"USD per million {flag} tokens")
    ins = sub.add_parser("inspect", help="show a stored conversation")
    ins.add_argument("id", help="conversation id (X-Conversation-Id)")
    who = ins.add_mutually_exclusive_group()
    who.add_argument("--tenant", help="tenant: SHA-256 hex of the client's API key")
    who.add_argument("--key", help="the client's API key (hashed locally, never sent)")
    ins.add_argument("--db", help="SQLite store file (default: ./context-proxy.db)")
    ins.add_argument("--url", help="proxy base URL, to read through the admin API")
    ins.add_argument(
        "--admin-token", help="admin token for --url (or CONTEXT_PROXY_AUTH_ADMIN_TOKEN)"
    )
    ins.add_argument("--limit", type=int, default=1000, help="archive messages to show at most")
    ins.add_argument("--json", action="store_true", help="print the raw JSON instead")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "config-doc":
        from .configdoc import reference

        print(reference())
        return 0
    if args.command in TOOLS:
        try:
            tool = importlib.import_module(f"proxy.{args.command}")
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] not in TOOL_PACKAGES:
                raise
            print(
                f"context-proxy {args.command} needs the tools extra ({exc.name} is missing): "
                "pip install 'context-proxy[tools]'",
                file=sys.stderr,
            )
            return 2
        code: int = tool.main(args)
        return code
    source = ServeSource(
        args.config or _default_config(),
        {
            "server": {
                "host": args.host,
                "port": args.port,
                "log_level": args.log_level,
                "log_format": getattr(args, "log_format", None),
                "workers": args.workers,
            },
            "upstream": {"base_url": args.upstream},
            "store": {"backend": args.store},
            "reduction": {"strategy": args.strategy},
        },
    )
    try:
        settings = source.load()
    except ConfigError as exc:
        print(f"context-proxy: configuration error: {exc}", file=sys.stderr)
        return 2
    return serve(settings, source)


@dataclass(frozen=True)
class ServeSource:
    """Where `serve` takes its settings from: a file and the flags (the environment is read too).

    Worker processes load their settings from the same source, handed to
    them in the environment, so each reads exactly what the parent did.
    """

    config: str | None
    overrides: dict[str, dict[str, Any]]

    def load(self) -> Settings:
        return load_settings(self.config, overrides=self.overrides)

    def dumps(self) -> str:
        return json.dumps({"config": self.config, "overrides": self.overrides})

    @classmethod
    def loads(cls, text: str) -> ServeSource:
        data = json.loads(text)
        return cls(data["config"], data["overrides"])


# Not under CONTEXT_PROXY_: that prefix names configuration keys.
WORKER_SOURCE = "_CONTEXT_PROXY_SERVE_SOURCE"


def _default_config() -> str | None:
    """`CONTEXT_PROXY_CONFIG`, else ./context-proxy.toml when present."""
    path = os.environ.get("CONTEXT_PROXY_CONFIG")
    if path:
        return path
    return "context-proxy.toml" if Path("context-proxy.toml").is_file() else None


# Young-generation threshold of the garbage collector in the server (Python's is 700).
GC_YOUNG = 10_000


def tune_gc() -> None:
    """Collect cycles less often, and never walk what the server holds from start-up.

    Parsing a request creates a tracked object per message, so with Python's
    default thresholds (700, 10, 10) a turn of a long conversation sets off
    young collections, and every so often a full one walks every remembered
    history. The parsed objects are freed by reference counting, which also
    takes them off the count, so with these thresholds mostly real cycles
    start a collection. The cost is garbage cycles kept longer, so each
    stored conversation holds a little more memory; a higher young threshold
    would hold more still. The server owns its process, so this lives here,
    not in the app.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, 20, 100)


def serve(settings: Settings, source: ServeSource | None = None) -> int:
    """Run the server: in this process, or in `server.workers` processes sharing its port."""
    import uvicorn

    from .logs import configure as configure_logs

    configure_logs(settings.server.log_level, settings.server.log_format)
    # A fatal signal (SIGBUS from a memory-mapped SQLite file that can no
    # longer be written, say) then leaves a traceback on stderr, not silence.
    faulthandler.enable()
    problem = store_problem(settings)
    if problem is not None:
        print(f"context-proxy: the store cannot be used: {problem}", file=sys.stderr)
        return 2
    options: dict[str, Any] = {
        "host": settings.server.host,
        "port": settings.server.port,
        "log_level": settings.server.log_level.lower(),
        "access_log": False,
        "log_config": None,
        "proxy_headers": False,
        "server_header": False,
        # A relayed answer carries the upstream's Date; the app dates its own.
        "date_header": False,
        "timeout_keep_alive": settings.server.keepalive_timeout_s,
        # Unbounded, a stream the upstream keeps open would keep a stopped server running.
        "timeout_graceful_shutdown": settings.server.shutdown_timeout_s,
        "limit_concurrency": settings.server.limit_concurrency or None,
    }
    workers = settings.server.workers
    if workers > 1:
        os.environ[WORKER_SOURCE] = (source or ServeSource(None, {})).dumps()
        with shared_metrics():
            uvicorn.run("proxy.cli:worker_app", factory=True, workers=workers, **options)
        return 0
    uvicorn.run(_app(settings), **options)
    return 0


@contextlib.contextmanager
def shared_metrics() -> Iterator[None]:
    """A fresh directory where the workers about to start share their metrics.

    Files left by an earlier run would add its counts to this one's, so an
    operator's own `PROMETHEUS_MULTIPROC_DIR` is used as given (clearing it is
    theirs to do), and otherwise one is made for this run and removed after it.
    """
    from .metrics import SHARED_DIR

    if os.environ.get(SHARED_DIR):
        yield
        return
    path = tempfile.mkdtemp(prefix="context-proxy-metrics-")
    os.environ[SHARED_DIR] = path
    try:
        yield
    finally:
        del os.environ[SHARED_DIR]
        shutil.rmtree(path, ignore_errors=True)


def store_problem(settings: Settings) -> str | None:
    """Why the configured store cannot be used, found before serving (None: it can).

    Opening it runs what the server's start would (SQLite's file and schema,
    Redis' URL and package; Redis connects only later), so a bad path or URL
    is one clear line and exit 2 instead of a failed start-up.
    """
    import asyncio

    from .store import StoreError, open_store
    from .store.sqlite import unwritable

    s = settings.store
    if s.backend == "redis":
        try:
            store = open_store("redis", url=s.url, ttl_s=s.ttl_s)
        except ConfigError as exc:
            return str(exc)
        asyncio.run(store.close())
        return None
    if s.backend != "sqlite":
        return None
    problem = unwritable(settings.store.path)
    if problem is not None:
        return problem
    try:
        store = open_store("sqlite", path=settings.store.path, ttl_s=settings.store.ttl_s)
    except StoreError as exc:
        return str(exc)
    problem = store.problem()
    asyncio.run(store.close())
    return problem


def worker_app() -> Any:
    """The app of one worker process (`serve` with more than one worker)."""
    from .logs import configure as configure_logs

    settings = ServeSource.loads(os.environ[WORKER_SOURCE]).load()
    configure_logs(settings.server.log_level, settings.server.log_format)
    faulthandler.enable()
    return _app(settings)


def _app(settings: Settings) -> Any:
    from .app import create_app

    app = create_app(settings)
    tune_gc()
    return app
