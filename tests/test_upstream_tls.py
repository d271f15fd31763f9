"""An HTTPS upstream, and the proxy process's own exit, as users run them.

Each transport of ours is started the way users start the proxy (`python -m
proxy serve`), against the fake upstream served over TLS with a certificate
from a throwaway CA (trustme). The CA is trusted only through SSL_CERT_FILE,
as an operator adds a private CA, so the same upstream is also seen refused.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import trustme

from proxy.mock import MockUpstream

from .servers import free_port, proxy_process, run_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The fake upstream over HTTPS, and the file of the CA that signed its certificate."""
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(folder / "server.pem")
    )
    with run_server(MockUpstream().app, ssl_certfile=str(folder / "server.pem")) as url:
        yield url + "/v1", folder / "ca.pem"


def _ask(port: int, stream: bool) -> str:
    """One answer, whole or streamed (the default transport sends streams through aiohttp)."""
    api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-t", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "hello over tls"}]
    if not stream:
        answer = api.chat.completions.create(model="gpt-4o", messages=messages)
        return answer.choices[0].message.content or ""
    chunks = api.chat.completions.create(model="gpt-4o", messages=messages, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("kind", ["reqwest", "aiohttp"])
def test_an_https_upstream_is_checked_against_the_trust_store(
    tls: tuple[str, Path], tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream, ca = tls
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    for trusted in (True, False):
        env = {
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": upstream,
            "CONTEXT_PROXY_UPSTREAM_TRANSPORT": kind,
            "CONTEXT_PROXY_STORE_BACKEND": "memory",
            "CONTEXT_PROXY_SERVER_LOG_LEVEL": "warning",
        }
        if trusted:
            env["SSL_CERT_FILE"] = str(ca)
        else:
            monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        port = free_port()
        process = proxy_process(port, capture=True, **env)
        try:
            for stream in (False, True):
                if trusted:
                    assert _ask(port, stream)
                else:
                    with pytest.raises(openai.APIStatusError) as refused:
                        _ask(port, stream)
                    assert refused.value.status_code == 502
                    assert "could not be reached" in refused.value.message
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=20)
        # uvicorn re-raises the signal it shut down on; nothing may crash on the way out.
        assert process.returncode == -signal.SIGTERM, err.decode(errors="replace")[-2000:]
        assert b"Fatal Python error" not in err and b"Traceback" not in err


def test_the_process_exits_cleanly_with_a_stream_still_open(tls: tuple[str, Path]) -> None:
    """A streamed answer still being read when the proxy stops, with pyreqwest's thread alive.

    The JSON turn before it started pyreqwest's Tokio thread (streams take aiohttp),
    so the interpreter finalises with both pools open.
    """
    upstream, ca = tls
    port = free_port()
    process = proxy_process(
        port,
        capture=True,
        SSL_CERT_FILE=str(ca),
        CONTEXT_PROXY_UPSTREAM_BASE_URL=upstream,
        CONTEXT_PROXY_STORE_BACKEND="memory",
        CONTEXT_PROXY_SERVER_LOG_LEVEL="warning",
    )
    try:
        assert _ask(port, stream=False)
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-t", max_retries=0)
        stream = api.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "go"}], stream=True
        )
        assert next(iter(stream)).choices is not None
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    assert process.returncode == -signal.SIGTERM, err.decode(errors="replace")[-2000:]
    assert b"Fatal Python error" not in err
