"""Embedding vectors beside the search index: stored per indexed message and model, as
unit-length float32, so similarity is one numpy matrix-vector product.

Which messages still lack a vector, storing them, and the messages nearest a question's
vector. numpy (the `embeddings` extra) is imported only where vectors are used.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Sequence, Set

import orjson

from proxy.store import dates, relevance
from proxy.store.base import SearchHit
from proxy.store.replies import whole
from proxy.store.search import called, conv_tag


def unit_vector(values: Sequence[float]) -> bytes:
    """float32 bytes scaled to length 1, so cosine similarity is one dot product."""
    import numpy as np  # the `embeddings` extra; only embeddings recall gets here

    v = np.asarray(values, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return (v / norm if norm > 0 else v).astype(np.float32).tobytes()


def unembedded(db: sqlite3.Connection, conv: int, model: str, limit: int) -> list[tuple[int, str]]:
    """Indexed messages with no vector for `model` yet, oldest first: `(seq, text)`."""
    have = {
        int(r[0])
        for r in db.execute(
            "SELECT seq FROM message_vectors WHERE conversation_id = ? AND model = ?", (conv, model)
        )
    }
    rows = db.execute(
        "SELECT seq, body FROM message_search WHERE message_search MATCH ? ORDER BY seq, rowid",
        (conv_tag(conv),),
    )
    texts = whole((int(seq), str(body)) for seq, body in rows if int(seq) not in have)
    return list(itertools.islice(texts, max(0, limit)))


def put_vectors(
    db: sqlite3.Connection, conv: int, model: str, vectors: Sequence[tuple[int, bytes]]
) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO message_vectors (conversation_id, model, seq, vector)"
        " VALUES (?, ?, ?, ?)",
        [(conv, model, seq, vector) for seq, vector in vectors],
    )


def nearest(
    db: sqlite3.Connection,
    conv: int,
    model: str,
    vector: bytes,
    limit: int,
    min_similarity: float,
    within: Set[str] | None = None,
    names: Sequence[str] = (),
) -> list[SearchHit]:
    """The `limit` messages most similar to `vector` (cosine), at or above `min_similarity`,
    of those `within` a branch (chain hashes) if given, less those that address one of
    the `names` (a question's) the conversation's sides call each other by.

    For an embedding model a name weighs much in a short text, so what is said to
    someone ("Talk soon, Evan!") ranks close to a question about them, while what a
    chat says of a person they say themselves, to the other. Whether a name is one the
    sides call each other by is decided on the conversation, as the lexical search
    decides it (`relevance.addressed`): "moved to Portland, Oregon." addresses nobody.
    """
    import numpy as np  # the `embeddings` extra; only embeddings recall gets here

    query = np.frombuffer(vector, dtype=np.float32)
    # Another branch's messages are left out before ranking, or they could fill the `limit`.
    mine = None if within is None else _seqs_within(db, conv, within)
    rows = [
        (int(seq), blob)
        for seq, blob in db.execute(
            "SELECT seq, vector FROM message_vectors WHERE conversation_id = ? AND model = ?",
            (conv, model),
        )
        if len(blob) == len(vector) and (mine is None or seq in mine)
    ]
    if not rows or limit <= 0 or not query.size:
        return []
    matrix = np.frombuffer(b"".join(blob for _, blob in rows), dtype=np.float32)
    similarity = matrix.reshape(len(rows), query.size) @ query
    best = [int(i) for i in np.argsort(-similarity, kind="stable")[:limit]]
    chosen = {rows[i][0]: float(similarity[i]) for i in best if similarity[i] >= min_similarity}
    if not chosen:
        return []
    found = db.execute(
        "SELECT seq, turn, role, body FROM message_search WHERE message_search MATCH ?"
        " AND seq IN (SELECT value FROM json_each(?)) ORDER BY seq, rowid",
        (conv_tag(conv), orjson.dumps(list(chosen)).decode()),
    ).fetchall()
    said = {int(s): (int(t), str(r)) for s, t, r, _ in found}
    texts = whole((int(s), str(b)) for s, _, _, b in found)
    hits = [SearchHit(seq, *said[seq], text, chosen[seq]) for seq, text in texts]
    hits = relevance.unaddressed(hits, [n for n in names if called(db, conv, n, within)])
    return dates.dated(db, conv, sorted(hits, key=lambda h: (-h.score, -h.seq)), within)


def _seqs_within(db: sqlite3.Connection, conv: int, within: Set[str]) -> set[int]:
    """The indexed messages (by seq) of the branch whose chain hashes are `within`."""
    rows = db.execute(
        "SELECT seq, hash FROM message_search WHERE message_search MATCH ?", (conv_tag(conv),)
    )
    return {int(seq) for seq, h in rows if h in within}
