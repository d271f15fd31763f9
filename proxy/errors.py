"""The proxy's few exception types.

Operator mistakes (`ConfigError`) are kept apart from failures at run time
(`ProxyError`, `UpstreamError`), as pydantic-ai separates `UserError` from
run errors: the first stops start-up with the key at fault, the others
become OpenAI-shaped HTTP errors and never a 500.
"""

from __future__ import annotations

from typing import Any

import orjson


class ConfigError(Exception):
    """A setting is missing, malformed or unsafe; raised at start-up, naming the key."""


class ProxyError(Exception):
    """An error the proxy itself answers, rendered in OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param

    def body(self) -> bytes:
        return error_body(self.message, type=self.type, code=self.code, param=self.param)


class UpstreamError(ProxyError):
    """The upstream could not be reached (502) or did not answer in time (504)."""


def error_body(
    message: str, *, type: str, code: str | None = None, param: str | None = None
) -> bytes:
    payload: dict[str, Any] = {
        "error": {"message": message, "type": type, "param": param, "code": code}
    }
    return orjson.dumps(payload)
