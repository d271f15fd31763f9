"""Run real ASGI apps on 127.0.0.1 for integration tests (modelled on uvicorn's tests/utils.py)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (prefer `run_server(port=None)`, which has no race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def run_server(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    startup_timeout_s: float = 10.0,
    shutdown_timeout_s: float = 10.0,
    **options: Any,
) -> Iterator[str]:
    """Serve `app` with uvicorn in a background thread; yield its base URL ("http://HOST:PORT").

    The listening socket is bound here and handed to uvicorn, so `port=None` picks a free
    port without a bind race and the URL is known before the server starts. `options`
    go to `uvicorn.Config` (`ssl_certfile=...` serves HTTPS; the URL then says https).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port or 0))
    except OSError:
        sock.close()
        raise
    bound_port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        host=host,
        port=bound_port,
        log_level="warning",
        lifespan="on",
        ws="none",  # no websockets import: keeps deprecation warnings out of filterwarnings=error
        timeout_graceful_shutdown=2,
        **options,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run,
        kwargs={"sockets": [sock]},
        name=f"uvicorn-{bound_port}",
        daemon=True,
    )
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(f"uvicorn on port {bound_port} exited during startup")
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn on port {bound_port} did not start in time")
            time.sleep(0.005)
        url_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        scheme = "https" if options.get("ssl_certfile") else "http"
        yield f"{scheme}://{url_host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(shutdown_timeout_s)
        if thread.is_alive():
            server.force_exit = True
            thread.join(shutdown_timeout_s)
        sock.close()
        if thread.is_alive():
            raise RuntimeError(f"uvicorn on port {bound_port} did not stop")


def proxy_process(port: int, *, capture: bool = False, **env: str) -> subprocess.Popen[bytes]:
    """`python -m proxy serve` on `port` as users start it, with `env` on top of ours.

    Returns once it answers /healthz. `capture` pipes its stderr for the test
    to read (with `communicate`, or a chatty process blocks on a full pipe).
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve"],
        env={**os.environ, "CONTEXT_PROXY_SERVER_PORT": str(port), **env},
        stderr=subprocess.PIPE if capture else None,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.1)
        if process.poll() is not None:
            break
    process.kill()
    _, err = process.communicate(timeout=10)
    said = (err or b"").decode(errors="replace")[-2000:]
    raise RuntimeError(f"proxy did not start {said}")


def serve_proxy(
    upstream_url: str,
    db: Path,
    *,
    windows: dict[str, int] | None = None,
    anthropic_url: str | None = None,
    **env: str,
) -> contextlib.AbstractContextManager[str]:
    """The real app with a SQLite store at `db`, served by `run_server`; yields its base URL.

    `upstream_url` is `upstream.base_url` (with its `/v1`); `env` are settings as
    their environment variables name them without the prefix (`reduction_strategy="tokens"`).
    """
    from proxy.app import create_app
    from proxy.config import load_settings

    variables = {
        "CONTEXT_PROXY_UPSTREAM_BASE_URL": upstream_url,
        "CONTEXT_PROXY_STORE_PATH": str(db),
        **{f"CONTEXT_PROXY_{k.upper()}": v for k, v in env.items()},
    }
    if anthropic_url is not None:
        variables["CONTEXT_PROXY_ANTHROPIC_BASE_URL"] = anthropic_url
    overrides = {"models": {"windows": windows}} if windows else {}
    return run_server(create_app(load_settings(env=variables, overrides=overrides)))
