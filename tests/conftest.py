"""Test-wide setup: offline tiktoken encodings, when the shared cache folder is beside the repo."""

from __future__ import annotations

import os
from pathlib import Path

_SHARED = Path(__file__).resolve().parents[2] / "shared" / "tiktoken"
if "TIKTOKEN_CACHE_DIR" not in os.environ and _SHARED.is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(_SHARED)
