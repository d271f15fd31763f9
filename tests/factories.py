"""Tiny builders so tests read like the conversations they describe."""

from __future__ import annotations

from typing import Any

from proxy.messages import Message

STORE_TTL = 3600  # seconds the stores the tests open keep an idle conversation


class Clock:
    """A store's clock that moves only when a test says."""

    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def system(content: str = "You are a helpful assistant.") -> Message:
    return {"role": "system", "content": content}


def developer(content: str = "Answer tersely.") -> Message:
    return {"role": "developer", "content": content}


def user(content: str = "Hello") -> Message:
    return {"role": "user", "content": content}


def assistant(
    content: str | None = "Hi!", *, tool_calls: list[dict[str, Any]] | None = None
) -> Message:
    message: Message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def call(call_id: str, name: str = "lookup", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(call_id: str, content: str = "42") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def tool_round(prefix: str, n_calls: int = 1, result: str = "ok") -> list[Message]:
    """An assistant message calling `n_calls` tools followed by exactly their results."""
    calls = [call(f"{prefix}_{i}") for i in range(n_calls)]
    return [assistant(None, tool_calls=calls), *[tool(c["id"], result) for c in calls]]


def chat(n_turns: int, *, words: int = 5) -> list[Message]:
    """Alternating user/assistant turns with distinct, numbered content."""
    out: list[Message] = []
    for i in range(n_turns):
        out.append(user(f"question {i} " + "word " * words))
        out.append(assistant(f"answer {i} " + "word " * words))
    return out


def local_shell_call(call_id: str, command: str = "ls") -> Message:
    """A Responses `local_shell_call` as the model makes it."""
    return {
        "type": "local_shell_call",
        "id": f"lsh_{call_id}",
        "call_id": call_id,
        "status": "completed",
        "action": {"type": "exec", "command": [command], "env": {}},
    }
