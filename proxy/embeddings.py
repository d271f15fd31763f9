"""Embeddings for recall, from the upstream's own `/v1/embeddings`, with the client's key.

The proxy holds no key of its own: vectors are paid by the tenant whose
messages they describe. Archived messages are embedded in the background
after the turn that stored them (`embed_pending`), so only the question's
vector is computed while a client waits. A message whose embedding failed
stays pending and is retried after the next turn.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from cachetools import LRUCache

from .conversation import tenant_of
from .store.base import ConvKey, Store
from .store.vectors import unit_vector
from .upstream import post_json

log = logging.getLogger("context_proxy.embeddings")

# text-embedding-3 models take 8,191 tokens an input; 4 characters a token keeps under it.
MAX_CHARS = 24_000
BATCH = 64
# Batches one background job embeds at most; the next turn's job continues.
MAX_BATCHES = 8
RECENT = 1024


class EmbeddingsUnavailable(Exception):
    """The embeddings endpoint failed or answered something unusable."""


class Embedder:
    def __init__(
        self, client: httpx.AsyncClient, *, base_url: str, model: str, timeout_s: float
    ) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self._recent: LRUCache[tuple[str, str], bytes] = LRUCache(maxsize=RECENT)

    async def embed(self, texts: Sequence[str], headers: Mapping[str, str]) -> list[bytes]:
        """Unit-length float32 vectors for `texts`, in order.

        Recent vectors are remembered per API key, so the question embedded
        for recall is not paid for again when its turn is archived.
        """
        payer = tenant_of(headers.get("authorization", ""))
        keys = [(payer, t[:MAX_CHARS] or " ") for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._recent))
        if missing:
            for k, vector in zip(
                missing, await self._call([t for _, t in missing], headers), strict=True
            ):
                self._recent[k] = vector
        try:
            return [self._recent[k] for k in keys]
        except KeyError:  # evicted between the call and here: more inputs than the cache holds
            return await self._call([t for _, t in keys], headers)

    async def _call(self, texts: list[str], headers: Mapping[str, str]) -> list[bytes]:
        body = {"model": self.model, "input": texts}
        url = f"{self.base_url}/embeddings"
        answer = await post_json(
            self.client, url, body, headers, self.timeout_s, EmbeddingsUnavailable
        )
        try:
            data: list[dict[str, Any]] = answer["data"]
            ordered = sorted(data, key=lambda d: int(d["index"]))
            vectors = [unit_vector([float(x) for x in d["embedding"]]) for d in ordered]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise EmbeddingsUnavailable("malformed embeddings answer") from exc
        if len(vectors) != len(texts) or any(not v for v in vectors):
            raise EmbeddingsUnavailable("embeddings answer does not match the input")
        return vectors


async def embed_pending(
    embedder: Embedder, store: Store, key: ConvKey, headers: Mapping[str, str]
) -> tuple[int, int]:
    """Embed the conversation's archived messages that have no vector yet: (embedded, failed)."""
    done = 0
    for _ in range(MAX_BATCHES):
        pending = await store.unembedded(key, embedder.model, limit=BATCH)
        if not pending:
            break
        try:
            vectors = await embedder.embed([text for _, text in pending], headers)
        except EmbeddingsUnavailable as exc:
            log.info("embedding %d messages of %s failed (%s)", len(pending), key.conversation, exc)
            return done, len(pending)
        await store.put_vectors(
            key, embedder.model, list(zip((s for s, _ in pending), vectors, strict=False))
        )
        done += len(pending)
        if len(pending) < BATCH:
            break
    return done, 0
