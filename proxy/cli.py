"""The `context-proxy` command (`python -m proxy` is the same)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .config import Settings, load_settings
from .errors import ConfigError


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
    sub.add_parser("config-doc", help="print the configuration reference (Markdown)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "config-doc":
        from .configdoc import reference

        print(reference())
        return 0
    try:
        settings = load_settings(
            args.config or _default_config(),
            overrides={
                "server": {"host": args.host, "port": args.port, "log_level": args.log_level},
                "upstream": {"base_url": args.upstream},
                "store": {"backend": args.store},
                "reduction": {"strategy": args.strategy},
            },
        )
    except ConfigError as exc:
        print(f"context-proxy: configuration error: {exc}", file=sys.stderr)
        return 2
    return serve(settings)


def _default_config() -> str | None:
    """`CONTEXT_PROXY_CONFIG`, else ./context-proxy.toml when present."""
    path = os.environ.get("CONTEXT_PROXY_CONFIG")
    if path:
        return path
    return "context-proxy.toml" if Path("context-proxy.toml").is_file() else None


def serve(settings: Settings) -> int:
    import uvicorn

    from .app import create_app

    level = settings.server.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.server.log_level.lower(),
        access_log=False,
        proxy_headers=False,
        server_header=False,
    )
    return 0
