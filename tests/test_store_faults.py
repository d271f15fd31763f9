"""A SQLite store that fails under the running proxy says so: /healthz 503, append turns 503.

The faults are real: the file deleted while the process runs, a full disk
(a small tmpfs, where this machine lets the tests mount one), a path that
cannot be opened at start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import load_settings
from proxy.conversation import tenant_of
from proxy.mock import MockUpstream
from proxy.store import MemoryStore, StoreError

CHAT = "/v1/chat/completions"
ADMIN = "admin-token-for-tests"
HEADERS = {"Authorization": "Bearer sk-faults", "X-Conversation-Id": "kept"}


@contextlib.contextmanager
def proxy(db: Path, **env: str) -> Iterator[TestClient]:
    upstream = MockUpstream()
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1",
            "CONTEXT_PROXY_STORE_PATH": str(db),
            **env,
        }
    )
    app = create_app(settings, transport=httpx.ASGITransport(upstream.app))
    with TestClient(app) as client:
        yield client


def turn(
    client: TestClient, text: str, *, append: bool = False, conversation: str = "kept"
) -> httpx.Response:
    headers = {**HEADERS, "X-Conversation-Id": conversation}
    headers |= {"X-Context-Mode": "append"} if append else {}
    body: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    return client.post(CHAT, json=body, headers=headers)


def test_a_store_file_deleted_under_the_proxy_is_reported_not_written_to(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    with proxy(db) as client:
        assert turn(client, "first").status_code == 200
        assert client.get("/healthz").status_code == 200
        for path in tmp_path.glob("store.db*"):
            path.unlink()

        health = client.get("/healthz")
        appended = turn(client, "second", append=True)

    assert health.status_code == 503
    assert "is gone" in health.json()["problem"]
    assert appended.status_code == 503
    assert appended.json()["error"]["code"] == "store_unavailable"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, mounted for the test (needs root and a kernel that lets it)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with filler.open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
            out.flush()
    return filler


TENANT = {"tenant": tenant_of("sk-faults")}
AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}


def settle(client: TestClient) -> None:
    """Return once the proxy's queued writes are done (written or failed): a full-history
    turn's write is queued as its answer goes out, and a read of the store waits for it."""
    read = client.get("/admin/conversations/kept", params=TENANT, headers=AS_ADMIN)
    assert read.status_code in (200, 404), read.text


def test_a_full_disk_turns_healthz_and_append_turns_to_503_until_it_has_room(
    small_disk: Path,
) -> None:
    with proxy(small_disk / "store.db", CONTEXT_PROXY_AUTH_ADMIN_TOKEN=ADMIN) as client:
        assert turn(client, "first").status_code == 200
        filler = fill(small_disk)
        # Full-history turns are answered (the app loses nothing it sent), and
        # the turn that could not be written makes the store report it.
        big = "word " * 20_000
        assert turn(client, big).status_code == 200
        settle(client)  # its write is queued as the answer goes out
        health = client.get("/healthz")
        appended = turn(client, "after", append=True)
        metrics = client.get("/metrics").text
        filler.unlink()
        assert turn(client, "room again").status_code == 200
        healed = client.get("/healthz")

    assert health.status_code == 503 and "writes fail" in health.json()["problem"]
    assert appended.status_code == 503
    assert appended.json()["error"]["code"] == "store_unavailable"
    assert 'context_proxy_store_errors_total{operation="commit"}' in metrics
    assert healed.status_code == 200


def test_a_store_that_cannot_be_opened_stops_the_start_with_one_line(tmp_path: Path) -> None:
    line = refused_start({"CONTEXT_PROXY_STORE_PATH": str(tmp_path / "no" / "such" / "x.db")})
    assert "the store cannot be used" in line


def test_a_redis_url_redis_cannot_read_stops_the_start_with_one_line() -> None:
    pytest.importorskip("redis")
    line = refused_start(
        {"CONTEXT_PROXY_STORE_BACKEND": "redis", "CONTEXT_PROXY_STORE_URL": "redis://h:port"}
    )
    assert "store.url" in line and "Port" in line


def refused_start(env: dict[str, str]) -> str:
    """Run `serve` expecting it to refuse to start: exit 2 and one line on stderr, returned."""
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "serve"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def immutable(path: Path) -> contextlib.AbstractContextManager[None]:
    """`chattr +i` on `path` for the block: unwritable even for root (skips where unsupported)."""

    @contextlib.contextmanager
    def block() -> Iterator[None]:
        made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
        if made.returncode != 0 or os.access(path, os.W_OK):
            pytest.skip(f"cannot make {path} immutable here: {made.stderr!r}")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=False)

    return block()


def test_an_unwritable_shared_memory_file_stops_the_start_with_one_line(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    shm = Path(str(db) + "-shm")
    shm.write_bytes(b"")
    with immutable(shm):
        line = refused_start({"CONTEXT_PROXY_STORE_PATH": str(db)})
    assert "p.db-shm is not writable" in line


def test_a_fatal_signal_leaves_a_traceback_on_stderr(tmp_path: Path) -> None:
    """SQLite's memory-mapped files can raise SIGBUS; the process must not die silently."""

    from .servers import free_port, proxy_process

    port = free_port()
    process = proxy_process(port, capture=True, CONTEXT_PROXY_STORE_PATH=str(tmp_path / "p.db"))
    process.send_signal(signal.SIGBUS)
    _, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGBUS
    assert b"Fatal Python error: Bus error" in err, err[-2000:]


@contextlib.contextmanager
def served(db: Path) -> Iterator[tuple[openai.OpenAI, str]]:
    """The real server on a SQLite file at `db`, before the mock upstream; an SDK client."""
    from .servers import run_server, serve_proxy

    with (
        run_server(MockUpstream().app) as upstream,
        serve_proxy(upstream + "/v1", db, auth_admin_token=ADMIN) as url,
    ):
        api = openai.OpenAI(base_url=url + "/v1", api_key="sk-faults", max_retries=0)
        yield api.with_options(default_headers={"X-Conversation-Id": "kept"}), url


def said(api: openai.OpenAI, history: list[dict[str, Any]], text: str) -> str:
    """One turn of `history` with `text` said: the turn's X-Context-Reduction."""
    history.append({"role": "user", "content": text})
    raw = api.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)  # type: ignore[arg-type]
    history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    return raw.headers["x-context-reduction"]


def archived(url: str) -> list[str]:
    found = httpx.get(
        f"{url}/admin/conversations/kept",
        params={"tenant": tenant_of("sk-faults")},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    return [m["content"] for m in found.json()["archive"] if m["role"] == "user"]


def test_turns_a_full_disk_cannot_keep_say_stateless_and_the_store_loses_nothing(
    small_disk: Path,
) -> None:
    history: list[dict[str, Any]] = []
    with served(small_disk / "store.db") as (api, url):
        kinds = [said(api, history, "first"), said(api, history, "second")]
        filler = fill(small_disk)
        kinds.append(said(api, history, "big " * 20_000))  # answered; its write fails
        kinds.append(said(api, history, "on a full disk"))
        filler.unlink()
        kinds.append(said(api, history, "room again"))  # its write succeeds
        kinds.append(said(api, history, "kept again"))
        kept = archived(url)

    assert kinds[:2] == ["none", "none"]
    assert "stateless" in kinds[3]  # after the failed write, until one succeeds
    assert kinds[5] == "none"
    assert kept[:2] == ["first", "second"] and kept[-2:] == ["room again", "kept again"]


def test_turns_after_the_store_file_is_deleted_say_stateless(tmp_path: Path) -> None:
    history: list[dict[str, Any]] = []
    with served(tmp_path / "store.db") as (api, _):
        assert said(api, history, "first") == "none"
        for path in tmp_path.glob("store.db*"):
            path.unlink()
        # The file is looked at off the turns, within a second of a write.
        deadline = time.monotonic() + 30
        kinds = [said(api, history, "after")]
        while "stateless" not in kinds[-1] and time.monotonic() < deadline:
            time.sleep(0.1)
            kinds.append(said(api, history, "after"))

    assert "stateless" in kinds[-1]
    assert not list(tmp_path.glob("store.db*"))  # nothing made a new, empty file there


@pytest.fixture
def stoppable_redis() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of the test's own, to SIGSTOP: its URL (a half-second socket timeout)."""
    import shutil
    import socket

    from .servers import free_port

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
                break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0?socket_timeout=0.5", server
    finally:
        server.send_signal(signal.SIGCONT)
        server.terminate()
        server.wait(timeout=10)


def redis_proxy(upstream: str, url: str, **env: str) -> contextlib.AbstractContextManager[str]:
    """The real server on Redis at `url`, before the mock upstream at `upstream`."""
    from .servers import run_server

    env = {"STORE_BACKEND": "redis", "STORE_URL": url, "AUTH_ADMIN_TOKEN": ADMIN, **env}
    variables = {f"CONTEXT_PROXY_{k}": v for k, v in env.items()}
    variables["CONTEXT_PROXY_UPSTREAM_BASE_URL"] = upstream + "/v1"
    return run_server(create_app(load_settings(env=variables)))


def test_a_hung_redis_costs_one_timeout_not_one_a_request(
    stoppable_redis: tuple[str, subprocess.Popen[bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    from .servers import run_server

    url, redis_server = stoppable_redis
    with (
        run_server(MockUpstream().app) as upstream,
        redis_proxy(upstream, url, STORE_BACKOFF_S="600") as proxy_url,
    ):
        api = openai.OpenAI(base_url=proxy_url + "/v1", api_key="sk-hang", max_retries=0)
        api = api.with_options(default_headers={"X-Conversation-Id": "hung"})
        history: list[dict[str, Any]] = []
        assert said(api, history, "before") == "none"
        redis_server.send_signal(signal.SIGSTOP)
        kinds = [said(api, history, f"hung {i}") for i in range(4)]
        health = httpx.get(proxy_url + "/healthz")
        redis_server.send_signal(signal.SIGCONT)

    waits = [r for r in caplog.records if "Timeout reading" in r.getMessage()]
    assert all("stateless" in kind for kind in kinds)
    assert len(waits) == 1, [r.getMessage() for r in waits]
    assert health.status_code == 503 and "skipped for" in health.json()["problem"]


def test_redis_is_tried_again_after_the_backoff(
    stoppable_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    import asyncio

    from proxy.store import ConvKey, StoreError
    from proxy.store.redis import RedisStore

    from .factories import Clock

    url, redis_server = stoppable_redis
    clock = Clock()  # the back-off's clock
    store = RedisStore(url, monotonic=clock, backoff_s=30)
    key = ConvKey("t", "c")

    async def tries() -> list[str]:
        said: list[str] = []
        for step in ("stop", "again", "cont", "later"):
            if step == "stop":
                redis_server.send_signal(signal.SIGSTOP)
            if step == "cont":
                redis_server.send_signal(signal.SIGCONT)
            if step == "later":
                clock.advance(31)
            try:
                await store.latest(key)
                said.append("answered")
            except StoreError as exc:
                said.append("skipped" if "skipped" in str(exc) else "waited")
        await store.close()
        return said

    assert asyncio.run(tries()) == ["waited", "skipped", "skipped", "answered"]


def test_a_failed_redis_commit_refuses_append_turns_only_for_the_backoff(
    stoppable_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """Append turns are refused while commits fail; only a commit clears the failure, so
    after `backoff_s` the store is tried again (else all-append traffic never would)."""
    import asyncio

    import redis

    from proxy.store import ConvKey, StoreError
    from proxy.store.redis import RedisStore

    from .factories import Clock, user
    from .test_store import turn as commit_of

    url, _ = stoppable_redis
    admin = redis.Redis.from_url(url)
    clock = Clock()  # the back-off's clock
    store = RedisStore(url, monotonic=clock, backoff_s=30)
    key = ConvKey("t", "full")

    async def tries() -> list[str | None]:
        seen: list[str | None] = []
        admin.config_set("maxmemory", 1)  # every write refused: out of memory
        with pytest.raises(StoreError):
            await store.commit(commit_of(key, [user("refused")]))
        seen.append(store.problem())
        admin.config_set("maxmemory", 0)
        clock.advance(10)
        seen.append(store.problem())
        clock.advance(21)
        seen.append(store.problem())
        await store.close()
        return seen

    try:
        during, still, after = asyncio.run(tries())
    finally:
        admin.config_set("maxmemory", 0)
        admin.close()
    assert during is not None and "writes fail" in during and during == still
    assert after is None


def test_a_step_of_the_wall_clock_neither_ends_nor_extends_the_redis_backoff(
    stoppable_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """The back-offs (after a timeout, after a failed commit) are durations: an NTP step
    of the wall clock (the store's `now`, which dates what it writes) moves neither."""
    import asyncio

    import redis

    from proxy.store import ConvKey, StoreError
    from proxy.store.redis import RedisStore

    from .factories import Clock, user
    from .test_store import turn as commit_of

    url, redis_server = stoppable_redis
    admin = redis.Redis.from_url(url)
    wall, steady = Clock(), Clock()  # stepped by hand; the back-off's clock moves by itself
    store = RedisStore(url, now=wall, monotonic=steady, backoff_s=1)
    key = ConvKey("t", "c")

    async def attempt() -> str:
        try:
            await store.latest(key)
            return "answered"
        except StoreError as exc:
            return "skipped" if "skipped" in str(exc) else "waited"

    async def tries() -> tuple[list[str], list[str | None]]:
        said = []
        redis_server.send_signal(signal.SIGSTOP)
        said.append(await attempt())  # the timeout: Redis is skipped for a second
        wall.advance(3600)  # the clock is stepped an hour ahead
        said.append(await attempt())
        redis_server.send_signal(signal.SIGCONT)
        wall.advance(-7200)  # and an hour back
        steady.advance(1.1)
        said.append(await attempt())
        problems: list[str | None] = []
        admin.config_set("maxmemory", 1)  # every write refused: out of memory
        with pytest.raises(StoreError):
            await store.commit(commit_of(key, [user("refused")]))
        admin.config_set("maxmemory", 0)
        wall.advance(3600)
        problems.append(store.problem())
        wall.advance(-7200)
        steady.advance(1.1)
        problems.append(store.problem())
        await store.close()
        return said, problems

    try:
        said, (ahead, later) = asyncio.run(tries())
    finally:
        redis_server.send_signal(signal.SIGCONT)
        admin.config_set("maxmemory", 0)
        admin.close()
    assert said == ["waited", "skipped", "answered"]
    assert ahead is not None and "writes fail" in ahead
    assert later is None


def test_turns_a_full_redis_cannot_keep_say_stateless_until_it_has_room(
    stoppable_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    import redis

    from .servers import run_server

    url, _ = stoppable_redis
    admin = redis.Redis.from_url(url)
    history: list[dict[str, Any]] = []
    with run_server(MockUpstream().app) as upstream, redis_proxy(upstream, url) as proxy_url:
        api = openai.OpenAI(base_url=proxy_url + "/v1", api_key="sk-faults", max_retries=0)
        api = api.with_options(default_headers={"X-Conversation-Id": "kept"})
        kinds = [said(api, history, "first")]
        admin.config_set("maxmemory", 1)  # every write refused: out of memory
        kinds.append(said(api, history, "answered, not kept"))
        kinds.append(said(api, history, "on a full Redis"))
        full = httpx.get(proxy_url + "/healthz")
        admin.config_set("maxmemory", 0)
        kinds.append(said(api, history, "room again"))
        kinds.append(said(api, history, "kept again"))
        kept = archived(proxy_url)
    admin.close()

    assert kinds[:2] == ["none", "none"]
    assert "stateless" in kinds[2]
    assert full.status_code == 503 and "writes fail" in full.json()["problem"]
    assert kinds[4] == "none"
    assert kept[0] == "first" and kept[-1] == "kept again"


def test_an_append_turn_a_full_disk_refused_is_written_once_it_has_room(small_disk: Path) -> None:
    with served(small_disk / "store.db") as (api, url):
        assert said(api, [], "first") == "none"  # a full-history turn starts the chat
        assert archived(url) == ["first"]  # written: a read waits for the queued writes
        appending = api.with_options(
            default_headers={"X-Conversation-Id": "kept", "X-Context-Mode": "append"}
        )
        filler = fill(small_disk)
        big = "big " * 20_000
        said(appending, [], big)  # answered; the file takes nothing
        with pytest.raises(openai.APIStatusError) as refused:
            said(appending, [], "while full")
        filler.unlink()
        # An app that only appends continues once the disk has room, and its history
        # holds the turn answered while it had none.
        said(appending, [], "room again")
        kept = archived(url)

    assert refused.value.status_code == 503
    assert kept == ["first", big, "room again"]


def test_append_turns_try_the_store_again_after_the_backoff_of_a_failed_write(
    small_disk: Path,
) -> None:
    db = small_disk / "store.db"
    env = {"CONTEXT_PROXY_STORE_BACKOFF_S": "1", "CONTEXT_PROXY_AUTH_ADMIN_TOKEN": ADMIN}
    with proxy(db, **env) as client:
        assert turn(client, "first", conversation="other").status_code == 200
        settle(client)  # "first" is written before the disk fills
        filler = fill(small_disk)
        assert turn(client, "word " * 20_000).status_code == 200  # its write fails
        settle(client)
        failed = client.get("/healthz")
        filler.unlink()
        time.sleep(1.5)  # past the back-off, which only a write could end before
        # The conversation whose turn failed never comes back: another one that
        # only appends is served again once the disk has room.
        appended = turn(client, "room again", append=True, conversation="other")
        healed = client.get("/healthz")

    assert failed.status_code == 503 and "writes fail" in failed.json()["problem"]
    assert appended.status_code == 200, appended.text
    assert healed.status_code == 200


@contextlib.contextmanager
def appending_on_redis(url: str) -> Iterator[tuple[openai.OpenAI, openai.OpenAI, str, Any]]:
    """The real server on Redis at `url`, its conversation "kept" started with "first": an
    SDK client for full-history turns, one for append-mode turns, the server's URL, and a
    Redis client to fill Redis with (emptied of its limit after)."""
    import redis

    from .servers import run_server

    admin = redis.Redis.from_url(url)
    try:
        with run_server(MockUpstream().app) as upstream, redis_proxy(upstream, url) as proxy_url:
            api = openai.OpenAI(base_url=proxy_url + "/v1", api_key="sk-faults", max_retries=0)
            full = api.with_options(default_headers={"X-Conversation-Id": "kept"})
            appending = api.with_options(
                default_headers={"X-Conversation-Id": "kept", "X-Context-Mode": "append"}
            )
            assert said(full, [], "first") == "none"
            yield full, appending, proxy_url, admin
    finally:
        admin.config_set("maxmemory", 0)
        admin.close()


def answered_on_a_full_redis(appending: openai.OpenAI, admin: Any, text: str) -> None:
    """An append turn answered while Redis refuses every write (out of memory): kept
    unwritten by the server; then Redis has room again."""
    admin.config_set("maxmemory", 1)
    said(appending, [], text)
    admin.config_set("maxmemory", 0)


def test_a_streamed_append_turn_a_full_redis_refused_is_written_once_it_has_room(
    stoppable_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    def streamed(api: openai.OpenAI, text: str) -> str:
        messages: Any = [{"role": "user", "content": text}]
        stream = api.chat.completions.create(model="gpt-4o", messages=messages, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    with appending_on_redis(stoppable_redis[0]) as (_, appending, proxy_url, admin):
        admin.config_set("maxmemory", 1)  # every write refused: out of memory
        answered = streamed(appending, "answered on a full Redis")
        with pytest.raises(openai.APIStatusError) as refused:
            streamed(appending, "refused on a full Redis")
        admin.config_set("maxmemory", 0)
        streamed(appending, "room again")
        kept = archived(proxy_url)

    assert answered
    assert refused.value.status_code == 503
    assert kept == ["first", "answered on a full Redis", "room again"]


def test_an_append_turn_kept_unwritten_is_written_as_the_server_stops_if_the_store_has_room(
    stoppable_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url = stoppable_redis[0]
    with appending_on_redis(url) as (_, appending, _, admin):
        answered_on_a_full_redis(appending, admin, "answered on a full Redis")
    # The app sent no other turn; the server stopped, and the next one finds the turn.
    with redis_proxy("http://127.0.0.1:9", url) as proxy_url:
        kept = archived(proxy_url)

    assert kept == ["first", "answered on a full Redis"]


def test_a_full_history_turn_supersedes_the_append_turn_kept_unwritten(
    stoppable_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    with appending_on_redis(stoppable_redis[0]) as (full, appending, proxy_url, admin):
        answered_on_a_full_redis(appending, admin, "on a full Redis")
        # The app resends its whole history, the kept turn in it, then appends again.
        history: list[dict[str, Any]] = [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "(its answer, as the app kept it)"},
            {"role": "user", "content": "on a full Redis"},
            {"role": "assistant", "content": "(its answer, as the app kept it)"},
        ]
        said(full, history, "resent whole")
        said(appending, [], "appended after")
        kept = archived(proxy_url)

    assert kept == ["first", "on a full Redis", "resent whole", "appended after"]


def test_a_kept_turn_is_not_written_after_turns_another_process_stored_since(
    stoppable_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    from .servers import run_server

    url = stoppable_redis[0]
    with appending_on_redis(url) as (_, appending, proxy_url, admin):
        answered_on_a_full_redis(appending, admin, "kept by the first process")
        with run_server(MockUpstream().app) as upstream, redis_proxy(upstream, url) as other:
            api = openai.OpenAI(base_url=other + "/v1", api_key="sk-faults", max_retries=0)
            said(api.with_options(default_headers=appending.default_headers), [], "second process")
        # This turn writes the kept one first, which finds a turn stored after it. It
        # is then refused as any turn is for store.backoff_s after a write failed.
        with pytest.raises(openai.APIStatusError) as refused:
            said(appending, [], "first process again")
        kept = archived(proxy_url)

    # The kept turn is lost (its client's app went on without it elsewhere), not
    # written after a turn that came after it.
    assert refused.value.status_code == 503
    assert kept == ["first", "second process"]


@contextlib.contextmanager
def kept_then_deleted_elsewhere(disk: Path) -> Iterator[tuple[TestClient, TestClient]]:
    """Two workers on one file: `one` keeps an append turn of "kept" a full disk refused,
    then `two` deletes the conversation once the disk has room. `one` has no back-off:
    only its kept turn refuses its turns."""
    db = disk / "store.db"
    with (
        proxy(db, CONTEXT_PROXY_AUTH_ADMIN_TOKEN=ADMIN, CONTEXT_PROXY_STORE_BACKOFF_S="0") as one,
        proxy(db, CONTEXT_PROXY_AUTH_ADMIN_TOKEN=ADMIN) as two,
    ):
        assert turn(one, "first").status_code == 200
        filler = fill(disk)
        assert turn(one, "while full", append=True).status_code == 200  # kept in `one`
        filler.unlink()
        gone = two.delete("/admin/conversations/kept", params=TENANT, headers=AS_ADMIN)
        assert gone.status_code == 200, gone.text
        yield one, two


def test_a_kept_turn_of_a_conversation_another_worker_deleted_is_not_written_into_its_restart(
    small_disk: Path,
) -> None:
    with kept_then_deleted_elsewhere(small_disk) as (one, two):
        assert turn(two, "a new start").status_code == 200  # its app starts it again
        after = turn(one, "after", append=True)
        found = two.get("/admin/conversations/kept", params=TENANT, headers=AS_ADMIN)

    assert after.status_code == 200, after.text
    said = [m["content"] for m in found.json()["archive"] if m["role"] == "user"]
    assert said == ["a new start", "after"]


def test_a_kept_turn_of_a_conversation_deleted_elsewhere_does_not_503_its_turns_forever(
    small_disk: Path,
) -> None:
    with kept_then_deleted_elsewhere(small_disk) as (one, _):
        tries = [turn(one, f"after {n}", append=True) for n in range(3)]

    # The conversation is unknown: its app is told to start it again (404), not to wait.
    assert [t.status_code for t in tries] == [404, 404, 404], [t.text for t in tries]


class ReplyLost(MemoryStore):
    """Writes an append turn, then reports it failed once: a Redis reply that timed out
    after Redis ran the write."""

    lose = False

    async def commit(self, turn: Any, *, wait: bool = True) -> None:
        await super().commit(turn, wait=wait)
        if self.lose and turn.expected_turns is not None:
            self.lose = False
            raise StoreError("Redis: Timeout reading from socket")


def test_a_kept_turn_the_store_took_already_is_not_written_twice() -> None:
    store = ReplyLost(ttl_s=0)
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://fake/v1",
            "CONTEXT_PROXY_STORE_BACKEND": "memory",
            "CONTEXT_PROXY_STORE_BACKOFF_S": "0",
            "CONTEXT_PROXY_AUTH_ADMIN_TOKEN": ADMIN,
        }
    )
    app = create_app(settings, transport=httpx.ASGITransport(MockUpstream().app), store=store)
    with TestClient(app) as client:
        assert turn(client, "first").status_code == 200
        store.lose = True
        assert turn(client, "reply lost", append=True).status_code == 200  # kept
        assert turn(client, "next", append=True).status_code == 200
        found = client.get("/admin/conversations/kept", params=TENANT, headers=AS_ADMIN)
    said = [m["content"] for m in found.json()["archive"] if m["role"] == "user"]
    assert said == ["first", "reply lost", "next"]
