"""Server-sent events, read incrementally from the bytes the proxy relays untouched.

Each dialect's answer assembler (`dialects/`) reads the `data` payloads
this decoder yields.
"""

from __future__ import annotations

from typing import Any

import orjson


class SSEDecoder:
    """Incremental server-sent-events parser: bytes in, `data` payloads out.

    Events may be split across network chunks anywhere, including inside a
    multi-byte character, so decoding happens per complete line. Bytes
    without a line break wait in a list and are joined once, when the line
    ends, so a stream that sends no line break costs linear time. A line
    longer than `max_line` bytes is dropped and `overflowed` says so.
    """

    def __init__(self, max_line: int | None = None) -> None:
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._data: list[bytes] = []
        self._max_line = max_line
        self.overflowed = False

    def feed(self, chunk: bytes) -> list[bytes]:
        if b"\n" not in chunk:
            self._hold(chunk)
            return []
        if self._pending:
            chunk = b"".join(self._pending) + chunk
            self._pending = []
            self._pending_size = 0
        *lines, rest = chunk.split(b"\n")
        self._hold(rest)
        events: list[bytes] = []
        for raw in lines:
            line = raw.rstrip(b"\r")
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return events

    def _hold(self, piece: bytes) -> None:
        if not piece:
            return
        self._pending_size += len(piece)
        if self._max_line is not None and self._pending_size > self._max_line:
            self.overflowed = True
            self._pending = []
            self._pending_size = 0
            return
        self._pending.append(piece)

    def flush(self) -> list[bytes]:
        """Events left when the stream ended without a final blank line."""
        events = self.feed(b"\n\n") if self._pending else []
        if self._data:
            events.append(b"\n".join(self._data))
            self._data = []
        return events


class EventReader:
    """Feeds relayed bytes through an `SSEDecoder` to `event`, one `data` payload at a time.

    Past `limit` (a line, or what a subclass counts in `size`) it stops reading:
    the answer is relayed whole but is `too_large` to keep.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.decoder = SSEDecoder(max_line=limit)
        self.limit = limit
        self.size = 0

    @property
    def too_large(self) -> bool:
        return self.decoder.overflowed or (self.limit is not None and self.size > self.limit)

    def feed(self, chunk: bytes) -> None:
        if self.too_large:
            return
        for data in self.decoder.feed(chunk):
            self.event(data)

    def close(self) -> None:
        if self.too_large:
            return
        for data in self.decoder.flush():
            self.event(data)

    def event(self, data: bytes) -> None:
        raise NotImplementedError

    def json_event(self, data: bytes) -> dict[str, Any] | None:
        """`data` as a JSON object, counted in `size`; None if it is not one (never raises)."""
        self.size += len(data)
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        return event if isinstance(event, dict) else None
