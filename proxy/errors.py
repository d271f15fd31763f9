"""The proxy's few exception types.

Operator mistakes (`ConfigError`) are kept apart from failures at run time
(`ProxyError`, `UpstreamError`), as pydantic-ai separates `UserError` from
run errors: the first stops start-up with the key at fault, the others
become HTTP errors in the client's dialect (OpenAI's shape, or Anthropic's
on its routes), and never a 500.
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
        anthropic_message: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        # Anthropic's errors carry no code: where clients read the kind of error off its
        # message, the message says it in Anthropic's words.
        self.anthropic_message = anthropic_message
        self.headers: dict[str, str] = {}  # sent with the error (the conversation's id, say)

    def body(self, anthropic: bool = False) -> bytes:
        if anthropic:
            return anthropic_error_body(self.status, self.anthropic_message or self.message)
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


# Anthropic's error type for each status; another 4xx is invalid_request_error, a 5xx api_error.
ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error_body(status: int, message: str) -> bytes:
    """Anthropic's error shape: `{"type": "error", "error": {"type": ..., "message": ...}}`."""
    kind = ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})
