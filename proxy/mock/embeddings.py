"""The mock's `/v1/embeddings` and `/v1/models`: vectors that behave like a model's, offline.

A vector is a hashed bag of a text's words, of unit length: texts that
share rare words are close, as with a real embedding model, though words
of like meaning are not. The vectors come as floats or, as the openai
client asks by default, base64.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
from typing import Any

from starlette.responses import JSONResponse, Response

from .chat import error_response

MODELS = ("gpt-4o-mini", "gpt-4o", "gpt-4.1-mini", "text-embedding-3-small")
EMBEDDING_DIMS = 64
_WORD = re.compile(r"[a-z0-9]{3,}")
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "are",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "how",
        "you",
        "your",
    ]
)


def embedding_of(text: str) -> list[float]:
    """Hashed bag of words, unit length: texts sharing rare words are similar, as with a model."""
    words = [w for w in _WORD.findall(text.lower()) if w not in _STOP] or [text]
    vector = [0.0] * EMBEDDING_DIMS
    for word in words:
        h = hashlib.sha256(word.encode()).digest()
        vector[h[0] % EMBEDDING_DIMS] += 1.0 if h[1] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [round(x / norm, 6) for x in vector]


def embeddings(body: Any) -> Response:
    if not isinstance(body, dict) or "input" not in body or not body.get("model"):
        return error_response(400, "Missing required parameter: 'input' or 'model'.")
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    texts = [x if isinstance(x, str) else json.dumps(x) for x in inputs]
    data = []
    for i, text in enumerate(texts):
        vector: Any = embedding_of(text)
        if body.get("encoding_format") == "base64":
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": vector})
    tokens = sum(max(1, len(t) // 4) for t in texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return JSONResponse({"object": "list", "data": data, "model": body["model"], "usage": usage})


def model_card(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 0, "owned_by": "mock"}


def models(path: str) -> Response:
    """`GET /v1/models` or `/v1/models/NAME`."""
    if path == "/v1/models":
        return JSONResponse({"object": "list", "data": [model_card(m) for m in MODELS]})
    model = path.removeprefix("/v1/models/")
    if model in MODELS:
        return JSONResponse(model_card(model))
    return error_response(404, f"The model '{model}' does not exist", code="model_not_found")
