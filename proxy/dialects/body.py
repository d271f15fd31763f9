"""What every wire does with a request body the same way: check its JSON, model, history,
counts and flags, read the fields it names, and write it back with the reduced history in
place.

Each error is a 400 (or 413) naming the field, in the shape `ProxyError` gives it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ..errors import ProxyError


def json_object(body: bytes, parsed: Any, what: str) -> dict[str, Any]:
    """The body as a JSON object with a `model` (`parsed`: the body already parsed, if it was)."""
    if parsed is not None:
        payload = parsed
    elif not body.strip():
        raise ProxyError(400, f"The request body is empty; expected a JSON {what}.")
    else:
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ProxyError(
                400, f"The request body is not valid JSON: {exc.msg}.", code="invalid_json"
            ) from None
    if not isinstance(payload, dict):
        raise ProxyError(400, "The request body must be a JSON object.")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise ProxyError(400, "'model' is required and must be a string.", param="model")
    return payload


def history(
    payload: dict[str, Any],
    field: str,
    limit: int | None,
    known: Callable[[dict[str, Any]], int] | None,
    check: Callable[[Any, int], None],
    noun: str = "messages",
) -> list[Any]:
    """The payload's non-empty history array, at most `limit` long, each item from the
    `known(payload)`-th on (the ones no earlier turn checked) passed to `check(item, index)`."""
    items = payload.get(field)
    if not isinstance(items, list) or not items:
        raise ProxyError(400, f"'{field}' is required and must be a non-empty array.", param=field)
    at_most(items, limit, field, noun)
    for i in range(known(payload) if known is not None else 0, len(items)):
        check(items[i], i)
    return items


def at_most(items: list[Any], limit: int | None, field: str, noun: str) -> None:
    if limit is not None and len(items) > limit:
        raise ProxyError(
            413,
            f"The request has {len(items)} {noun}; the proxy accepts at most "
            f"{limit} (server.max_messages).",
            param=field,
            code="too_many_messages",
        )


def flags(payload: dict[str, Any], counts: tuple[str, ...]) -> None:
    """`counts` are non-negative integers when present, `stream` a boolean."""
    for key in counts:
        value = payload.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise ProxyError(400, f"'{key}' must be a non-negative integer.", param=key)
    if "stream" in payload and not isinstance(payload["stream"], bool | None):
        raise ProxyError(400, "'stream' must be a boolean.", param="stream")


def render(body: bytes, payload: dict[str, Any], field: str, items: Sequence[Any]) -> bytes:
    """The upstream's request: the client's own bytes when the reduction kept every item.

    Re-serialising a long history costs about as much as parsing it, and
    the client's bytes are the most faithful copy of what it meant to send.
    The check is by identity: the reduction passes kept items through as
    the same objects, so this is a pointer comparison per item.
    """
    sent = payload[field]
    if len(items) == len(sent) and all(map(operator.is_, items, sent)):
        return body
    try:
        return orjson.dumps({**payload, field: list(items)})
    except orjson.JSONEncodeError as exc:  # a field nested past what JSON writers accept
        raise ProxyError(400, f"The request cannot be re-encoded as JSON: {exc}.") from None


class JsonWire:
    """A wire's reading of its payload by the fields it names (see `dialects.Wire`)."""

    history_field: str
    # The payload's keys for the answer's token limit, the first one present counting.
    limit_fields: tuple[str, ...]
    # The payload's parts besides the history that fill the context.
    definition_fields: tuple[str, ...]

    def history(self, payload: dict[str, Any]) -> list[Any]:
        items: list[Any] = payload[self.history_field]
        return items

    def opening(self, payload: dict[str, Any]) -> list[Any]:
        """The items a conversation's derived id is made from (its instructions and first
        message are among them)."""
        return self.history(payload)

    def prefill(self, items: Sequence[Any], appended: bool = False) -> Any | None:
        return None

    def reserved_output(self, payload: dict[str, Any]) -> int:
        for key in self.limit_fields:
            value = payload.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return 0

    def definitions(self, payload: dict[str, Any]) -> list[Any]:
        return [payload[k] for k in self.definition_fields if payload.get(k)]

    def streams(self, payload: dict[str, Any]) -> bool:
        return bool(payload.get("stream"))

    def render(self, body: bytes, payload: dict[str, Any], items: Sequence[Any]) -> bytes:
        return render(body, payload, self.history_field, self.forwarded(items))

    def forwarded(self, items: Sequence[Any]) -> Sequence[Any]:
        """The reduced history as the wire sends it (the same, unless the wire has rules)."""
        return items
