"""Producing the summaries that the reduction core asks for.

The core only says which messages it wants summarised (`SummaryRequest`);
this module turns them into calls to the upstream (or a cheaper
`summarizer_model` / `summarizer_base_url`): chat completions, the
Responses API, or Anthropic's Messages API, by `summarizer_api` and, when
that is "auto", by the conversation's own wire. Each call carries only the
credentials of the provider it goes to. A span larger than the
summariser's own window is summarised in chunks that are then merged. A
summariser that keeps failing is skipped by a circuit breaker for a while,
so a dead summariser does not add its timeout to every turn: the caller
then forwards the window reduction the core prepared (`fallback`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import httpx

from .messages import Message, role
from .reduction.types import SummaryRequest
from .upstream import ANTHROPIC_SIDE_CALL_HEADERS, openai_side, post_json

SUMMARY_PROMPT = (
    "You are the context-proxy summarizer. You compress the earlier part of a conversation "
    "between a user and an AI assistant so the assistant can continue it without the "
    "original messages. Write a dense, factual summary in the conversation's language. "
    "Keep: decisions made and their reasons; facts, names, dates, numbers, identifiers, "
    "file paths, URLs and code; the user's goals, preferences and constraints; open tasks "
    "and questions; "
    "tool calls that matter and what their results showed. Drop pleasantries and repetition. "
    "Do not address the user; do not invent anything. Plain text or short bullet points."
)


# Anthropic requires an answer limit; a summary is dense, and the limit is reserved
# from the summarising model's window.
SUMMARY_MAX_TOKENS = 1024


class SummarizerUnavailable(Exception):
    """The summariser failed, timed out, or its circuit breaker is open."""


class CircuitBreaker:
    """Opens after `threshold` consecutive failures and stays open for `cooldown_s`."""

    def __init__(
        self,
        threshold: int = 3,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None

    @property
    def open(self) -> bool:
        if self._opened_at is None:
            return False
        if self._clock() - self._opened_at >= self.cooldown_s:
            self._opened_at = None  # half-open: let one call try
            self._failures = self.threshold - 1
            return False
        return True

    def success(self) -> None:
        self._failures = 0
        self._opened_at = None

    def failure(self) -> None:
        self._failures += 1
        if self._failures >= self.threshold:
            self._opened_at = self._clock()


def transcript(request: SummaryRequest, limit_chars: int | None = None) -> str:
    """The span as readable text: roles, tool calls and tool results quoted, not raw JSON."""
    lines: list[str] = []
    for text in request.previous:
        lines.append(f"[summary of the conversation before this point]\n{text}")
    for message in request.messages:
        who = role(message) or str(message.get("type", "unknown"))
        answered = request.dialect.answers(message)
        if who in ("tool", "user") and answered:
            # Anthropic's results ride in a user message: a tool's output, not the user's words.
            who = f"tool result ({', '.join(answered)})"
        body = request.dialect.text(message)
        if limit_chars is not None and len(body) > limit_chars:
            body = body[: limit_chars // 2] + " [...] " + body[-limit_chars // 2 :]
        lines.append(f"{who}: {body}")
    return "\n\n".join(lines)


class AnthropicRoute(NamedTuple):
    """Where and how summaries go through Anthropic's `/v1/messages`."""

    url: str  # the full URL of /v1/messages
    model: str  # "" : the conversation's own model
    api_key: str  # the operator's key; "": an Anthropic client's own x-api-key
    version: str  # anthropic-version when the client sent none


@dataclass(frozen=True)
class SummaryResult:
    text: str
    tokens: int


class Summarizer:
    """Calls a chat-completions endpoint to summarise spans, chunking what does not fit.

    `window_of` gives the window of the model a call goes to; without it every
    model has `window_tokens`.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        base_url: str,
        model: str,
        timeout_s: float,
        window_tokens: int,
        window_of: Callable[[str], int] | None = None,
        breaker: CircuitBreaker | None = None,
        api: str = "auto",
        openai_key: str = "",
        anthropic: AnthropicRoute | None = None,
    ) -> None:
        self.client = client
        self.api = api
        self.openai_key = openai_key
        self.anthropic = anthropic
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        # The window of the model that writes the summary: without a summarizer_model
        # that is the conversation's own, which may be far smaller than the default's.
        self.window_of = window_of or (lambda _model: window_tokens)
        self.breaker = breaker or CircuitBreaker()

    async def summarize(
        self, request: SummaryRequest, *, model: str, headers: dict[str, str]
    ) -> SummaryResult:
        if self.breaker.open:
            raise SummarizerUnavailable("summarizer circuit breaker is open")
        api = self._api(request)
        if api == "anthropic" and self.anthropic is not None:
            model = self.anthropic.model or model
        else:
            model = self.model or model
        try:
            result = await self._summarize(
                request, api, model, self._headers(api, request, headers)
            )
        except SummarizerUnavailable:
            self.breaker.failure()
            raise
        self.breaker.success()
        return result

    def _api(self, request: SummaryRequest) -> str:
        if self.api != "auto":
            return self.api
        return "anthropic" if request.dialect.name == "anthropic" else "chat"

    def _headers(self, api: str, request: SummaryRequest, given: dict[str, str]) -> dict[str, str]:
        """The credentials for the provider the call goes to, never another provider's."""
        from_anthropic = request.dialect.name == "anthropic"
        if api == "anthropic":
            route = self.anthropic
            operator = route.api_key if route is not None else ""
            # Only an Anthropic client's own headers are Anthropic credentials, and an
            # operator key replaces them.
            own = from_anthropic and not operator
            names = ANTHROPIC_SIDE_CALL_HEADERS if own else ("anthropic-version",)
            found = {k: given[k] for k in names if k in given}
            if operator:
                found["x-api-key"] = operator
            if route is not None:
                found.setdefault("anthropic-version", route.version)
            return found
        # An Anthropic client's headers hold an Anthropic key: none of it goes to OpenAI.
        return openai_side(given, "anthropic" if from_anthropic else "openai", self.openai_key)

    def max_chars(self, model: str) -> int:
        """The longest transcript one call to `model` takes.

        4 characters a token is conservative for prose; half the window is kept
        for the prompt, so the answer and the instructions always fit.
        """
        return max(4_000, self.window_of(model) * 2)

    async def _summarize(
        self, request: SummaryRequest, api: str, model: str, headers: dict[str, str]
    ) -> SummaryResult:
        max_chars = self.max_chars(model)
        text = transcript(request, limit_chars=max_chars // 2)
        if len(text) <= max_chars:
            return await self._call(text, api, model, headers)
        parts: list[str] = []
        tokens = 0
        for chunk in _chunks(request, max_chars):
            partial = await self._call(chunk, api, model, headers)
            parts.append(partial.text)
            tokens += partial.tokens
        merged = SummaryRequest(request.key, (), tuple(parts), request.dialect)
        final = await self._call(transcript(merged)[:max_chars], api, model, headers)
        return SummaryResult(final.text, tokens + final.tokens)

    async def _call(
        self, text: str, api: str, model: str, headers: dict[str, str]
    ) -> SummaryResult:
        ask = "Summarise this conversation:\n\n" + text
        if api == "anthropic":
            if self.anthropic is None:
                raise SummarizerUnavailable("no Anthropic upstream configured")
            return await self._call_anthropic(ask, model, headers, self.anthropic)
        if api == "responses":  # for upstreams that serve only the Responses API
            url = f"{self.base_url}/responses"
            body: dict[str, Any] = {
                "model": model,
                "instructions": SUMMARY_PROMPT,
                "input": ask,
                "store": False,
            }
        else:
            url = f"{self.base_url}/chat/completions"
            body = {
                "model": model,
                "messages": [
                    {"role": "system", "content": SUMMARY_PROMPT},
                    {"role": "user", "content": ask},
                ],
                "temperature": 0,
            }
        data = await post_json(
            self.client, url, body, headers, self.timeout_s, SummarizerUnavailable
        )
        try:
            summary = _output_text(data) if api == "responses" else _message_text(data)
            usage = data.get("usage") or {}
            tokens = int(usage.get("total_tokens", 0))
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise SummarizerUnavailable("malformed summarizer answer") from exc
        if not isinstance(summary, str) or not summary.strip():
            raise SummarizerUnavailable("empty summary")
        return SummaryResult(summary.strip(), tokens)

    async def _call_anthropic(
        self, ask: str, model: str, headers: dict[str, str], route: AnthropicRoute
    ) -> SummaryResult:
        body = {
            "model": model,
            "max_tokens": SUMMARY_MAX_TOKENS,
            "system": SUMMARY_PROMPT,
            "messages": [{"role": "user", "content": ask}],
            "temperature": 0,
        }
        data = await post_json(
            self.client,
            route.url,
            body,
            headers,
            self.timeout_s,
            SummarizerUnavailable,
            allowed=ANTHROPIC_SIDE_CALL_HEADERS,
        )
        try:
            summary = "".join(b["text"] for b in data["content"] if b.get("type") == "text")
            usage = data.get("usage") or {}
            tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise SummarizerUnavailable("malformed summarizer answer") from exc
        if not summary.strip():
            raise SummarizerUnavailable("empty summary")
        return SummaryResult(summary.strip(), tokens)


def _chunks(request: SummaryRequest, max_chars: int) -> list[str]:
    """Split a span into transcripts of at most `max_chars`, at message boundaries."""
    chunks: list[str] = []
    current: list[Message] = []
    size = 0
    previous: Sequence[str] = request.previous
    for message in request.messages:
        length = len(request.dialect.text(message)) + 32
        if current and size + length > max_chars:
            chunks.append(
                transcript(
                    SummaryRequest("", tuple(current), tuple(previous), request.dialect),
                    limit_chars=max_chars // 2,
                )
            )
            previous, current, size = (), [], 0
        current.append(message)
        size += min(length, max_chars // 2)
    if current or previous:
        chunks.append(
            transcript(
                SummaryRequest("", tuple(current), tuple(previous), request.dialect),
                limit_chars=max_chars // 2,
            )
        )
    return chunks


def _message_text(data: Any) -> Any:
    return data["choices"][0]["message"]["content"]


def _output_text(data: Any) -> str:
    """The text of a Responses answer's message items."""
    return "".join(
        part["text"]
        for item in data["output"]
        if item.get("type") == "message"
        for part in item["content"]
        if part.get("type") == "output_text"
    )
