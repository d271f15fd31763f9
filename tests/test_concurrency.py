"""Concurrency, replicas and crashes, with real servers, a real redis-server and kill -9."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.app import create_app
from proxy.config import load_settings
from proxy.conversation import tenant_of
from proxy.mock import MockUpstream
from proxy.store import ConvKey, open_store

from .servers import free_port, proxy_process, run_server

pytestmark = pytest.mark.integration
ADMIN = "admin-token-for-tests"


@pytest.fixture
def fake() -> Iterator[tuple[MockUpstream, str]]:
    upstream = MockUpstream()
    with run_server(upstream.app) as url:
        yield upstream, url + "/v1"


@contextmanager
def proxy(upstream_url: str, **env: str) -> Iterator[str]:
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": upstream_url,
            "CONTEXT_PROXY_AUTH_ADMIN_TOKEN": ADMIN,
            **{f"CONTEXT_PROXY_{k.upper()}": v for k, v in env.items()},
        }
    )
    with run_server(create_app(settings)) as url:
        yield url


def test_simultaneous_append_turns_are_all_kept(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    _, upstream_url = fake

    async def run(url: str) -> dict[str, Any]:
        api = openai.AsyncOpenAI(
            base_url=url + "/v1",
            api_key="sk-c",
            max_retries=0,
            default_headers={"X-Conversation-Id": "busy"},
        )
        await api.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "opening"}]
        )
        append = api.with_options(
            default_headers={"X-Conversation-Id": "busy", "X-Context-Mode": "append"}
        )
        await asyncio.gather(
            *(
                append.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": f"parallel {i}"}]
                )
                for i in range(30)
            )
        )
        await api.close()
        async with httpx.AsyncClient() as http:
            r = await http.get(
                f"{url}/admin/conversations/busy",
                params={"tenant": tenant_of("sk-c")},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            return dict(r.json())

    with proxy(upstream_url, store_path=str(tmp_path / "p.db")) as url:
        conversation = asyncio.run(run(url))
    texts = [m.get("content") for m in conversation["archive"] if m["role"] == "user"]
    assert sorted(texts) == sorted(["opening", *[f"parallel {i}" for i in range(30)]])
    assert len(conversation["archive"]) == 62  # 31 questions and 31 answers
    assert len(conversation["working"]) == 62


def test_two_replicas_on_one_redis_alternate_turns(
    fake: tuple[MockUpstream, str], redis_url: str
) -> None:
    upstream, upstream_url = fake
    env = {"store_backend": "redis", "store_url": redis_url}
    with proxy(upstream_url, **env) as a, proxy(upstream_url, **env) as b:
        replicas = [
            openai.OpenAI(
                base_url=u + "/v1",
                api_key="sk-r",
                max_retries=0,
                default_headers={"X-Conversation-Id": "shared", "X-Context-Mode": "append"},
            )
            for u in (a, b)
        ]
        openai.OpenAI(
            base_url=a + "/v1",
            api_key="sk-r",
            max_retries=0,
            default_headers={"X-Conversation-Id": "shared"},
        ).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "turn 0"}])
        for i in range(1, 40):
            replicas[i % 2].chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": f"turn {i}"}]
            )
            sent = upstream.last_chat()["messages"]
            assert [m["content"] for m in sent if m["role"] == "user"] == [
                f"turn {j}" for j in range(i + 1)
            ]
            assert len(sent) == 2 * i + 1


@pytest.mark.parametrize("known", [False, True], ids=["new", "known"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_append_turn_on_another_worker_right_after_the_answer_continues_it(
    fake: tuple[MockUpstream, str], tmp_path: Path, stream: bool, known: bool
) -> None:
    """Two processes on one SQLite file (`--workers 2`): a client that has its answer
    from one sends an append-mode turn that lands on the other, which must find the turn:
    not 404 for a new conversation, not the turn before it for a known one.

    The file's write lock is held meanwhile by another connection (another worker's
    group of turns, a checkpoint starting the WAL over), as it may be at any moment:
    the turn's write waits for it, and the answer's end must wait for the write.
    """
    upstream, upstream_url = fake
    db = tmp_path / "shared.db"
    with (
        proxy(upstream_url, store_path=str(db), server_workers="2") as a,
        proxy(upstream_url, store_path=str(db), server_workers="2") as b,
    ):
        opener, other = (
            openai.OpenAI(
                base_url=u + "/v1",
                api_key="sk-pair",
                max_retries=0,
                default_headers={"X-Conversation-Id": "handed-over"},
            )
            for u in (a, b)
        )
        history: list[Any] = []
        if known:  # a turn the other process knows already
            history.append({"role": "user", "content": "earlier"})
            reply = opener.chat.completions.create(model="gpt-4o", messages=history)
            history.append({"role": "assistant", "content": reply.choices[0].message.content})
        history.append({"role": "user", "content": "opening"})
        locker = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        locker.execute("BEGIN IMMEDIATE")  # the write lock, taken by someone else
        freed = threading.Timer(1.0, locker.execute, ("COMMIT",))
        freed.start()
        try:
            if stream:
                chunks = opener.chat.completions.create(
                    model="gpt-4o", messages=history, stream=True
                )
                answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                reply = opener.chat.completions.create(model="gpt-4o", messages=history)
                answer = reply.choices[0].message.content or ""
            appended = other.with_options(
                default_headers={"X-Conversation-Id": "handed-over", "X-Context-Mode": "append"}
            ).chat.completions.with_raw_response.create(
                model="gpt-4o", messages=[{"role": "user", "content": "next"}]
            )
        except openai.NotFoundError as exc:
            pytest.fail(f"the append turn did not find the turn answered before it: {exc}")
        finally:
            freed.join()
            locker.close()
            opener.close()
            other.close()
    assert appended.http_response.status_code == 200
    assert upstream.last_chat()["messages"] == [
        *history,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "next"},
    ]


def test_a_process_alone_answers_before_its_turn_is_written(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """One process on its file answers its own next lookup from memory: its answers do
    not wait for their writes, which another connection's write lock holds up."""
    _, upstream_url = fake
    db = tmp_path / "alone.db"
    with proxy(upstream_url, store_path=str(db)) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk-alone", max_retries=0)
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "a"}])
        reader = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        (before,) = reader.execute("SELECT COUNT(*) FROM snapshots").fetchone()
        locker = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        locker.execute("BEGIN IMMEDIATE")  # the write lock, taken by someone else
        try:
            messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
            client.chat.completions.create(
                model="gpt-4o", messages=[*messages, {"role": "user", "content": "c"}]
            )
        finally:
            locker.execute("COMMIT")  # only now can the turn be written
            locker.close()
        # Had the answer waited, the write would have given up (busy timeout) while the
        # lock was held, and never be made: it is made once the lock is free.
        deadline = time.monotonic() + 10
        while reader.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0] == before:
            assert time.monotonic() < deadline, "the turn was never written"
            time.sleep(0.02)
        reader.close()
        client.close()


def _start_subprocess_proxy(upstream_url: str, db: Path, port: int) -> subprocess.Popen[bytes]:
    return proxy_process(
        port,
        CONTEXT_PROXY_UPSTREAM_BASE_URL=upstream_url,
        CONTEXT_PROXY_STORE_PATH=str(db),
        CONTEXT_PROXY_SERVER_LOG_LEVEL="warning",
    )


def test_kill_9_during_load_loses_no_completed_turn(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    upstream, upstream_url = fake
    upstream.slow_s = 0.02
    db, port = tmp_path / "crash.db", free_port()
    process = _start_subprocess_proxy(upstream_url, db, port)
    completed: list[tuple[str, str]] = []
    lock = threading.Lock()
    stop = threading.Event()
    histories: dict[int, list[Any]] = {}

    def converse(n: int) -> None:
        api = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-k", max_retries=0, timeout=10
        )
        history: list[Any] = [{"role": "user", "content": f"conversation {n} turn 0"}]
        histories[n] = history
        for turn in range(1000):
            if stop.is_set():
                return
            try:
                reply = api.chat.completions.create(
                    model="gpt-4o", messages=history, extra_headers={"X-Conversation-Id": f"c{n}"}
                )
            except openai.APIError:
                return
            with lock:
                completed.append((f"c{n}", history[-1]["content"]))
            history += [
                {"role": "assistant", "content": reply.choices[0].message.content},
                {"role": "user", "content": f"conversation {n} turn {turn + 1}"},
            ]
            with lock:
                histories[n] = list(history)

    threads = [threading.Thread(target=converse, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(completed) < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    stop.set()
    for t in threads:
        t.join(timeout=15)
    assert len(completed) >= 100

    async def archived() -> set[tuple[str, str]]:
        store = open_store("sqlite", path=str(db))
        found: set[tuple[str, str]] = set()
        for n in range(20):
            for a in await store.archive(ConvKey(tenant_of("sk-k"), f"c{n}"), limit=10_000):
                if a.message["role"] == "user":
                    found.add((f"c{n}", a.message["content"]))
        await store.close()
        return found

    # A turn is written after its answer went out, so the kill may take the
    # write of each conversation's newest answered turn, and of nothing older.
    newest = {}
    for conversation, content in completed:
        newest[conversation] = content
    unwritten = set(completed) - asyncio.run(archived())
    assert unwritten <= set(newest.items()), f"older turns lost: {unwritten - set(newest.items())}"

    restarted = _start_subprocess_proxy(upstream_url, db, port)
    try:
        # It serves at once, and each client's next turn, which resends its
        # history, archives what the kill took.
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-k", timeout=10)
        for n, history in histories.items():
            api.chat.completions.create(
                model="gpt-4o", messages=history, extra_headers={"X-Conversation-Id": f"c{n}"}
            )
    finally:
        restarted.terminate()
        restarted.wait(timeout=10)

    missing = set(completed) - asyncio.run(archived())
    assert not missing, f"{len(missing)} completed turns lost"


def test_simultaneous_append_turns_on_two_replicas_lose_nothing(
    fake: tuple[MockUpstream, str], redis_url: str
) -> None:
    _, upstream_url = fake
    env = {"store_backend": "redis", "store_url": redis_url}

    async def run(a: str, b: str) -> dict[str, Any]:
        opener = openai.AsyncOpenAI(
            base_url=a + "/v1",
            api_key="sk-two",
            max_retries=0,
            default_headers={"X-Conversation-Id": "raced"},
        )
        await opener.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "opening"}]
        )
        replicas = [
            opener.with_options(
                base_url=u + "/v1",
                default_headers={"X-Conversation-Id": "raced", "X-Context-Mode": "append"},
            )
            for u in (a, b)
        ]
        await asyncio.gather(
            *(
                replicas[i % 2].chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": f"racing {i}"}]
                )
                for i in range(20)
            )
        )
        await opener.close()
        async with httpx.AsyncClient() as http:
            r = await http.get(
                f"{a}/admin/conversations/raced",
                params={"tenant": tenant_of("sk-two")},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            return dict(r.json())

    with proxy(upstream_url, **env) as a, proxy(upstream_url, **env) as b:
        conversation = asyncio.run(run(a, b))
    asked = [m["content"] for m in conversation["working"] if m["role"] == "user"]
    assert sorted(asked) == sorted(["opening", *[f"racing {i}" for i in range(20)]])
    roles = [m["role"] for m in conversation["working"]]
    assert roles == ["user", "assistant"] * 21


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_two_workers_serve_one_port_and_store_and_conversations_continue_across_them(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """`serve --workers 2`: a turn may land on either process, and sees every earlier turn."""
    upstream, upstream_url = fake
    port = free_port()
    process = proxy_process(
        port,
        CONTEXT_PROXY_UPSTREAM_BASE_URL=upstream_url,
        CONTEXT_PROXY_STORE_PATH=str(tmp_path / "workers.db"),
        CONTEXT_PROXY_SERVER_WORKERS="2",
        CONTEXT_PROXY_SERVER_LOG_LEVEL="warning",
    )
    try:
        # uvicorn's supervisor starts the workers as its children.
        deadline = time.monotonic() + 20
        while len(_children(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_children(process.pid)) >= 2
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-w", max_retries=0)
        api.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "turn 0"}],
            extra_headers={"X-Conversation-Id": "shared"},
        )
        for i in range(1, 30):
            # A new connection each turn, so turns spread over both workers.
            with openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-w", max_retries=0
            ) as fresh:
                reply = fresh.chat.completions.create(
                    model="gpt-4o",
                    messages=[{"role": "user", "content": f"turn {i}"}],
                    extra_headers={"X-Conversation-Id": "shared", "X-Context-Mode": "append"},
                )
            assert reply.choices[0].message.content
            sent = upstream.last_chat()["messages"]
            assert [m["content"] for m in sent if m["role"] == "user"] == [
                f"turn {j}" for j in range(i + 1)
            ]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def test_metrics_of_two_workers_count_every_request_whichever_worker_answers_the_scrape(
    fake: tuple[MockUpstream, str], tmp_path: Path
) -> None:
    """A scrape lands on one worker; it must show both workers' counts, not its own share."""
    port = free_port()
    process = proxy_process(
        port,
        CONTEXT_PROXY_UPSTREAM_BASE_URL=fake[1],
        CONTEXT_PROXY_STORE_PATH=str(tmp_path / "workers.db"),
        CONTEXT_PROXY_SERVER_WORKERS="2",
        CONTEXT_PROXY_SERVER_LOG_LEVEL="warning",
        TMPDIR=str(tmp_path),  # where serve makes the directory the workers share
    )
    try:
        deadline = time.monotonic() + 20
        while len(_children(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_children(process.pid)) >= 2
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
        for i in range(40):
            # A new connection each request, so requests spread over both workers.
            with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
                reply = client.post(
                    "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": "Bearer sk-m", "X-Conversation-Id": f"m{i}"},
                )
                assert reply.status_code == 200
        scraped = []
        for _ in range(10):
            with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
                text = client.get("/metrics").text
            line = next(
                x
                for x in text.splitlines()
                if x.startswith("context_proxy_requests_total{")
                and 'route="/v1/chat/completions"' in x
                and 'status="200"' in x
            )
            scraped.append(float(line.rsplit(" ", 1)[1]))
        assert scraped == [40.0] * 10
        assert "context_proxy_active_streams 0.0" in text
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    assert not list(tmp_path.glob("context-proxy-metrics-*"))  # removed with the run


def test_sigterm_stops_a_server_whose_upstream_holds_a_stream_open(
    fake: tuple[MockUpstream, str],
) -> None:
    upstream, upstream_url = fake
    upstream.chunk_delay_s = 3600  # the answer's chunks come an hour apart
    port = free_port()
    server = proxy_process(
        port,
        CONTEXT_PROXY_UPSTREAM_BASE_URL=upstream_url,
        CONTEXT_PROXY_STORE_BACKEND="memory",
        CONTEXT_PROXY_SERVER_SHUTDOWN_TIMEOUT_S="1",
    )
    api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-t", max_retries=0)
    waiting: list[BaseException] = []

    def wait_for_an_answer() -> None:
        try:
            api.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "?"}])
        except openai.APIError as exc:
            waiting.append(exc)

    try:
        stream = api.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hold on"}], stream=True
        )
        first = next(iter(stream))  # the stream is open, the rest an hour away
        upstream.slow_s = 3600  # and the next answer does not even start
        asked = threading.Thread(target=wait_for_an_answer)
        asked.start()
        while len(upstream.chat_requests()) < 2:
            time.sleep(0.01)
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=120)
        asked.join(timeout=60)
        with pytest.raises(openai.APIError):
            list(stream)  # the stream was cut, not ended
    finally:
        server.kill()
    assert first.choices[0].delta.role == "assistant"
    assert code == -signal.SIGTERM  # uvicorn ends by raising the signal it was stopped by
    # The request that had no answer yet is told to retry, in OpenAI's shape, not given a 500.
    (cut,) = waiting
    assert isinstance(cut, openai.APIStatusError) and cut.status_code == 503
    assert cut.body["type"] == "server_error"  # type: ignore[index]
    assert cut.response.headers["x-conversation-id"]  # derived: the client named none


@pytest.mark.parametrize("route", ["chat", "messages"])
def test_a_request_cut_at_shutdown_gets_a_503_with_its_conversation_and_access_line(
    fake: tuple[MockUpstream, str], route: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the graceful timeout the server cuts a request still waiting for the upstream:
    its client gets a 503 to retry, in the route's shape, with `X-Conversation-Id` and
    the access line other proxy errors have."""
    upstream, upstream_url = fake
    gate = upstream.hold_next()
    got: list[BaseException] = []

    def ask(url: str) -> None:
        said = [{"role": "user", "content": "held"}]
        named = {"X-Conversation-Id": "cut-short"}
        try:
            if route == "chat":
                with openai.OpenAI(base_url=url + "/v1", api_key="sk-cut", max_retries=0) as api:
                    api.chat.completions.create(model="gpt-4o", messages=said, extra_headers=named)
            else:
                with anthropic.Anthropic(base_url=url, api_key="sk-cut", max_retries=0) as ant:
                    ant.messages.create(
                        model="claude-tiny", max_tokens=100, messages=said, extra_headers=named
                    )
        except (openai.APIError, anthropic.APIError) as exc:
            got.append(exc)

    try:
        with caplog.at_level(logging.INFO, logger="context_proxy.access"):
            with proxy(upstream_url, anthropic_base_url=upstream_url.removesuffix("/v1")) as url:
                asked = threading.Thread(target=ask, args=(url,))
                asked.start()
                deadline = time.monotonic() + 10
                while not upstream.records() and time.monotonic() < deadline:
                    time.sleep(0.01)
            # leaving the block stops the server (should_exit); it cuts the request after 2 s
            asked.join(timeout=30)
    finally:
        gate.set()
    (cut,) = got
    assert isinstance(cut, (openai.APIStatusError, anthropic.APIStatusError))
    assert cut.status_code == 503
    assert cut.response.headers["x-conversation-id"] == "cut-short"
    if route == "chat":
        assert cut.body["type"] == "server_error"  # type: ignore[index]
    else:
        assert cut.body["error"]["type"] == "api_error"  # type: ignore[index]
    lines = [r for r in caplog.records if r.name == "context_proxy.access"]
    assert [(r.__dict__["conversation"], r.__dict__["upstream_status"]) for r in lines] == [
        ("cut-short", 503)
    ]


def test_a_request_whose_client_left_is_not_answered_as_cut_at_shutdown(
    fake: tuple[MockUpstream, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A client that disconnected is no shutdown: when the server then cuts its request,
    nothing is answered or logged as cut (nobody is there to retry)."""
    upstream, upstream_url = fake
    gate = upstream.hold_next()
    body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "gone"}]}'
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
        b"Authorization: Bearer sk-gone\r\nX-Conversation-Id: left\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    try:
        with caplog.at_level(logging.INFO), proxy(upstream_url) as url:
            host, port = httpx.URL(url).host, httpx.URL(url).port
            with socket.create_connection((host, port or 80), timeout=10) as client:
                client.sendall(request)
                # The request is at the upstream, held: the client hangs up only then.
                deadline = time.monotonic() + 10
                while not upstream.chat_records() and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert upstream.chat_records(), "the request never reached the upstream"
    finally:
        gate.set()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("context_proxy")]
    assert not [m for m in said if "stopping" in m], said
    assert not [r for r in caplog.records if r.name == "context_proxy.access"]
    assert any("its client left" in m for m in said), said
