"""Request bodies a client compressed (Content-Encoding), over real sockets.

The proxy reads the history to reduce it, so it undoes gzip and deflate
(within `server.max_body_bytes`, counted decompressed) and forwards a body
of its own, never labelled with the client's encoding. Other encodings get
a 415 that names the header, not a 400 about malformed JSON.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.mock import MockUpstream

from .servers import run_server, serve_proxy

pytestmark = pytest.mark.integration
LIMIT = 200_000
HEADERS = {
    "Authorization": "Bearer sk-encoding",
    "Content-Type": "application/json",
    "X-Conversation-Id": "squeezed",
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[MockUpstream, str]]:
    upstream = MockUpstream()
    with (
        run_server(upstream.app) as upstream_url,
        serve_proxy(
            upstream_url + "/v1", tmp_path / "store.db", server_max_body_bytes=str(LIMIT)
        ) as url,
    ):
        yield upstream, url


def body(text: str) -> bytes:
    message = {"role": "user", "content": text}
    return json.dumps({"model": "gpt-4o", "messages": [message]}).encode()


def raw_deflate(data: bytes) -> bytes:
    squeezer = zlib.compressobj(wbits=-15)
    return squeezer.compress(data) + squeezer.flush()


@pytest.mark.parametrize(
    ("encoding", "squeeze"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", raw_deflate),
        ("gzip, gzip", lambda data: gzip.compress(gzip.compress(data))),
        ("identity", lambda data: data),
    ],
    ids=["gzip", "x-gzip", "deflate", "raw deflate", "gzip twice", "identity"],
)
def test_a_compressed_body_is_read_reduced_and_forwarded_decoded(
    served: tuple[MockUpstream, str], encoding: str, squeeze: object
) -> None:
    upstream, url = served
    assert callable(squeeze)
    sent = squeeze(body("a compressed hello"))
    headers = {**HEADERS, "Content-Encoding": encoding}
    reply = httpx.post(f"{url}/v1/chat/completions", content=sent, headers=headers)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-context-reduction"] == "none"
    forwarded = upstream.chat_records()[-1]
    assert "content-encoding" not in forwarded.headers
    assert forwarded.body["messages"] == [{"role": "user", "content": "a compressed hello"}]


def test_a_body_past_the_limit_once_decompressed_is_a_413_without_inflating_it_all(
    served: tuple[MockUpstream, str],
) -> None:
    upstream, url = served
    bomb = gzip.compress(body("z" * 50 * LIMIT))  # 10 MB of JSON in a few kB
    assert len(bomb) < LIMIT
    headers = {**HEADERS, "Content-Encoding": "gzip"}
    reply = httpx.post(f"{url}/v1/chat/completions", content=bomb, headers=headers)
    assert reply.status_code == 413
    assert reply.json()["error"]["code"] == "request_too_large"
    assert not upstream.chat_records()


@pytest.mark.parametrize(
    ("encoding", "sent", "status", "says"),
    [
        ("br", b"\x0b\x02\x80{}\x03", 415, "Content-Encoding 'br' is not supported"),
        ("zstd", b"(\xb5/\xfd", 415, "Content-Encoding 'zstd' is not supported"),
        ("gzip", body("not compressed at all"), 400, "not valid gzip data"),
        ("gzip", gzip.compress(body("cut"))[:-12], 400, "not valid gzip data"),
        ("deflate", b"", 400, "not valid deflate data"),
    ],
    ids=["brotli", "zstd", "plain labelled gzip", "gzip cut short", "empty deflate"],
)
def test_an_encoding_the_proxy_cannot_undo_is_refused_by_name(
    served: tuple[MockUpstream, str], encoding: str, sent: bytes, status: int, says: str
) -> None:
    upstream, url = served
    headers = {**HEADERS, "Content-Encoding": encoding}
    reply = httpx.post(f"{url}/v1/chat/completions", content=sent, headers=headers)
    assert reply.status_code == status
    assert says in reply.json()["error"]["message"]
    assert not upstream.chat_records()
