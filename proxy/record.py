"""Opt-in recording of chat request bodies, the input format of `context-proxy simulate`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson


class Recorder:
    """Appends one request body per line, off the event loop, in arrival order."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._lock = asyncio.Lock()

    async def record(self, payload: dict[str, Any]) -> None:
        line = orjson.dumps(payload) + b"\n"
        async with self._lock:
            await asyncio.to_thread(self._append, line)

    def _append(self, line: bytes) -> None:
        with self.path.open("ab") as fh:
            fh.write(line)
