"""Test-wide setup: offline tiktoken encodings, when the shared cache folder is beside the repo,
and hypothesis' profiles: the same examples on every run (a failure in CI reproduces
anywhere), or new ones with `HYPOTHESIS_PROFILE=explore`, the way to look for new bugs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

_SHARED = Path(__file__).resolve().parents[2] / "shared" / "tiktoken"
if "TIKTOKEN_CACHE_DIR" not in os.environ and _SHARED.is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(_SHARED)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A throwaway redis-server on a free port, or a skip where none is installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server must be installed in CI (.ci/run installs it)")
        pytest.skip("redis-server is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def reparsed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per request, in order: whether it was parsed from its new bytes only (`known.reparse`)."""
    from proxy.fastpath import Resend

    seen: list[bool] = []
    real = Resend.reparse

    def spy(self: Resend) -> dict[str, Any] | None:
        payload = real(self)
        seen.append(payload is not None)
        return payload

    monkeypatch.setattr(Resend, "reparse", spy)
    return seen
