"""Test-wide setup: offline tiktoken encodings, when the shared cache folder is beside the repo,
and hypothesis' profiles: the same examples on every run (a failure in CI reproduces
anywhere), or new ones with `HYPOTHESIS_PROFILE=explore`, the way to look for new bugs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import settings

from proxy.store import Store, open_store
from tests.factories import STORE_TTL, Clock

# No deadline: a property's examples are not timed (a loaded CI machine made a
# 200 ms deadline fail examples that pass alone); speed lives in bench/.
settings.register_profile("repeatable", derandomize=True, print_blob=True, deadline=None)
settings.register_profile("explore", derandomize=False, print_blob=True, deadline=None)
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


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "sqlite", "redis"])
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: Clock
) -> Callable[..., Store]:
    """Opens a store of the parametrised backend; sqlite stores share one file, redis one db."""
    url = "redis://127.0.0.1:1/0"
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()

    def make(**options: Any) -> Store:
        options = {"ttl_s": STORE_TTL, "now": clock, **options}
        return open_store(request.param, path=str(tmp_path / "store.db"), url=url, **options)

    return make
