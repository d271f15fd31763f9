"""What every wire does with a request body the same way: check its JSON, model, counts and
flags, and write it back with the reduced history in place.

Each error is a 400 (or 413) naming the field, in the shape `ProxyError` gives it.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
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
