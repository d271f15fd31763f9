"""Context windows of common models, overridable per model in `[models]`.

Model names are matched by the longest known prefix, so dated snapshots
("gpt-4o-2024-08-06") and provider prefixes ("openai/gpt-4o") resolve to
their family without listing every release.
"""

from __future__ import annotations

from collections.abc import Mapping

BUILTIN_WINDOWS: Mapping[str, int] = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1-mini": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    # Claude: 200k tokens (Sonnet's 1M needs a beta header; set it in [models] if used).
    "claude": 200_000,
    "claude-opus-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-haiku-4": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-3-5-haiku": 200_000,
    "claude-3-5-sonnet": 200_000,
    "gemini-1.5": 1_000_000,
    "gemini-2": 1_000_000,
    "llama-3": 128_000,
    "mistral": 32_768,
}


def context_window(model: str, overrides: Mapping[str, int], default: int) -> int:
    """The context window for `model`: an exact override, else the longest matching prefix."""
    if model in overrides:
        return overrides[model]
    name = model.lower()
    short = name.rsplit("/", 1)[-1]
    best = ""
    for table in (overrides, BUILTIN_WINDOWS):
        for prefix in table:
            p = prefix.lower()
            if (name.startswith(p) or short.startswith(p)) and len(p) > len(best):
                best = prefix
        if best:
            return table[best]
    return default
