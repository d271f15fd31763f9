"""A real embedding model's vectors for the recall eval's mock upstream (`--embeddings-model`).

The eval's upstream answers `/v1/embeddings` with the mock's hashed words
unless given a sentence-transformers model directory: then with that model's
vectors, computed on the CPU, batched, and remembered by text for the run
(the same messages are embedded for every row). sentence-transformers (and
torch) are no dependency of the project: imported only here, when asked for.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BATCH = 64


class ModelMissing(RuntimeError):
    """sentence-transformers is not installed, or the directory holds no model."""


class ModelVectors:
    """`vectors(texts)`: a sentence-transformers model's unit vectors, remembered by text."""

    def __init__(self, directory: str) -> None:
        path = Path(directory)
        if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
            raise ModelMissing(f"{directory} holds no sentence-transformers model")
        # Offline: the model is the directory given, never one fetched by name.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ModelMissing(
                "--embeddings-model needs sentence-transformers (and torch) in the venv that "
                "runs the eval; see docs/recall.md, 'A real embedding model'"
            ) from exc
        # One thread: the same sums in the same order, so the same vectors every run.
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.name = _named(path)
        self._model: Any = SentenceTransformer(str(path), device="cpu")
        self._known: dict[str, list[float]] = {}

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._known))
        for start in range(0, len(missing), BATCH):
            batch = missing[start : start + BATCH]
            encoded = self._model.encode(
                batch, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True
            )
            for text, vector in zip(batch, encoded, strict=True):
                self._known[text] = [float(x) for x in vector]
        return [self._known[t] for t in texts]


def _named(path: Path) -> str:
    """The model's name for the rows: its card's title, else its directory's."""
    card = path / "README.md"
    if card.is_file():
        for line in card.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    return path.resolve().name
