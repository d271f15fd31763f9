"""Loading the settings: TOML file, then `CONTEXT_PROXY_<SECTION>_<KEY>` environment
variables, then flags, each value coerced to its field's type and the whole checked.

What the settings are is `settings.py`. Every problem is reported at start-up as a
`ConfigError` naming its key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import transports
from .errors import ConfigError
from .reduction.types import MASK_THEN, STRATEGIES, is_strategy
from .settings import ENV_PREFIX, SECTIONS, Settings

# The levels both the logging module and uvicorn know by these names.
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# What redis-py's from_url takes.
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def load_settings(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Settings:
    """Merge file, environment and flag values (later wins) and validate them."""
    raw: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    if path is not None:
        raw_file = _read_toml(Path(path))
        for section, values in raw_file.items():
            if section not in SECTIONS:
                raise ConfigError(f"{path}: unknown section [{section}]")
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: [{section}] must be a table")
            raw[section].update(values)
    for section, key, value in _from_env(os.environ if env is None else env):
        raw[section][key] = value
    for section, values in (overrides or {}).items():
        raw[section].update({k: v for k, v in values.items() if v is not None})
    sections = {name: _build(name, SECTIONS[name], raw[name]) for name in SECTIONS}
    settings = Settings(**sections)
    _validate(settings)
    return settings


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:  # a folder, a file this user may not read
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}), as TOML must be") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def _from_env(env: Mapping[str, str]) -> list[tuple[str, str, str]]:
    found = []
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section, _, key = rest.partition("_")
        if section in SECTIONS and key:
            found.append((section, key, value))
    return found


def _build(section: str, cls: type[Any], values: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    nested = {n for n in names if dataclasses.is_dataclass(hints[n])}
    tables: dict[str, dict[str, Any]] = {n: {} for n in nested}
    flat: dict[str, Any] = {}
    for key, value in values.items():
        table = next((n for n in nested if key.startswith(n + "_")), None)
        if key in nested:
            if not isinstance(value, dict):
                raise ConfigError(f"{section}.{key} must be a table")
            tables[key].update(value)
        elif table is not None:  # from CONTEXT_PROXY_REDUCTION_MASK_KEEP_TOOL_USES
            tables[table][key[len(table) + 1 :]] = value
        else:
            flat[key] = value
    for name, table_values in tables.items():
        kwargs[name] = _build(f"{section}.{name}", hints[name], table_values)
    for key, value in flat.items():
        if key in names:
            kwargs[key] = _coerce(f"{section}.{key}", hints[key], value)
        elif section == "models":
            extra[key] = _coerce(f"models.{key}", int, value)
        else:
            raise ConfigError(f"unknown setting {section}.{key}")
    if section == "models":
        kwargs["windows"] = {**kwargs.get("windows", {}), **extra}
    return cls(**kwargs)


def _coerce(key: str, hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if hint is int:
            return _integer(value)
        if hint is float:
            if isinstance(value, bool):
                raise ValueError("expected a number")
            return float(value)
        if hint is str:
            if isinstance(value, bool):  # `require_client_key = true` in TOML
                return "true" if value else "false"
            if not isinstance(value, str | int | float):
                raise ValueError("expected a string")
            return str(value)
        if origin is tuple:
            items = [s for s in value.split(",") if s] if isinstance(value, str) else value
            if not isinstance(items, list | tuple):
                raise ValueError("expected a list")
            return tuple(str(i) for i in items)
        if origin in (Mapping, dict) or isinstance(hint, types.GenericAlias):
            if not isinstance(value, dict):
                raise ValueError("expected a table")
            return {str(k): _integer(v) for k, v in value.items()}
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}: {exc} (got {value!r})") from None
    raise ConfigError(f"{key}: unsupported type {hint}")


def _integer(value: Any) -> int:
    """An integer setting's value: a fraction is refused, never truncated (1.5 is not 1)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("expected an integer")


def _validate(s: Settings) -> None:
    def check(ok: bool, key: str, message: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {message}")

    check(0 < s.server.port < 65536, "server.port", "must be between 1 and 65535")
    check(s.server.log_format in ("text", "json"), "server.log_format", "must be text or json")
    check(
        s.server.log_level.lower() in LOG_LEVELS,
        "server.log_level",
        "must be " + ", ".join(LOG_LEVELS[:-1]) + " or " + LOG_LEVELS[-1],
    )
    check(s.server.max_body_bytes > 0, "server.max_body_bytes", "must be positive")
    check(s.server.max_messages > 0, "server.max_messages", "must be positive")
    check(s.server.body_timeout_s > 0, "server.body_timeout_s", "must be positive")
    check(s.server.keepalive_timeout_s > 0, "server.keepalive_timeout_s", "must be positive")
    check(s.server.limit_concurrency >= 0, "server.limit_concurrency", "must not be negative")
    check(s.server.shutdown_timeout_s >= 0, "server.shutdown_timeout_s", "must not be negative")
    check(s.upstream.max_answer_bytes > 0, "upstream.max_answer_bytes", "must be positive")
    check(
        s.auth.require_client_key in ("auto", "true", "false"),
        "auth.require_client_key",
        "must be auto, true or false",
    )
    check(
        s.upstream.base_url.startswith(("http://", "https://")),
        "upstream.base_url",
        "must be an http:// or https:// URL",
    )
    check(
        s.upstream.transport in transports.KINDS,
        "upstream.transport",
        "must be " + ", ".join(transports.KINDS[:-1]) + " or " + transports.KINDS[-1],
    )
    check(
        s.upstream.transport != "reqwest" or transports.has_reqwest(),
        "upstream.transport",
        "reqwest needs pyreqwest: pip install 'context-proxy[reqwest]'",
    )
    check(
        s.anthropic.base_url.startswith(("http://", "https://")),
        "anthropic.base_url",
        "must be an http:// or https:// URL",
    )
    check(s.upstream.timeout_s > 0, "upstream.timeout_s", "must be positive")
    check(s.upstream.keepalive_s >= 0, "upstream.keepalive_s", "must not be negative")
    check(
        s.store.backend in ("memory", "sqlite", "redis"),
        "store.backend",
        "must be memory, sqlite or redis",
    )
    check(s.store.ttl_s > 0, "store.ttl_s", "must be positive")
    check(s.store.backoff_s >= 0, "store.backoff_s", "must not be negative")
    check(
        s.store.backend != "redis" or s.store.url.startswith(REDIS_SCHEMES),
        "store.url",
        "must be a Redis URL: " + ", ".join(f"{scheme}..." for scheme in REDIS_SCHEMES),
    )
    r = s.reduction
    check(
        is_strategy(r.strategy),
        "reduction.strategy",
        f"must be one of {STRATEGIES} or mask+<one of {MASK_THEN}>",
    )
    check(
        r.summarizer_api in ("auto", "chat", "responses", "anthropic"),
        "reduction.summarizer_api",
        "must be auto, chat, responses or anthropic",
    )
    check(r.mask.then in MASK_THEN, "reduction.mask.then", f"must be one of {MASK_THEN}")
    check(r.mask.keep_tool_uses >= 0, "reduction.mask.keep_tool_uses", "must not be negative")
    check(r.mask.clear_at_least >= 0, "reduction.mask.clear_at_least", "must not be negative")
    check(0 <= r.trigger_ratio <= 1, "reduction.trigger_ratio", "must be within [0, 1]")
    check(0 < r.keep_recent_ratio < 1, "reduction.keep_recent_ratio", "must be within (0, 1)")
    check(0 <= r.prepare_ratio < 1, "reduction.prepare_ratio", "must be within [0, 1)")
    check(r.target_messages >= 1, "reduction.target_messages", "must be at least 1")
    check(r.threshold_messages >= 0, "reduction.threshold_messages", "must be >= 0")
    check(
        r.summarize_by in ("tokens", "messages", "both"),
        "reduction.summarize_by",
        "must be tokens, messages or both",
    )
    check(
        not r.summarizer_base_url or r.summarizer_base_url.startswith(("http://", "https://")),
        "reduction.summarizer_base_url",
        "must be an http:// or https:// URL",
    )
    check(
        s.recall.method in ("lexical", "embeddings", "hybrid"),
        "recall.method",
        "must be lexical, embeddings or hybrid",
    )
    check(
        not (s.recall.enabled and s.recall.method in ("embeddings", "hybrid"))
        or importlib.util.find_spec("numpy") is not None,
        "recall.method",
        f"{s.recall.method} needs numpy: pip install 'context-proxy[embeddings]'",
    )
    check(s.server.workers >= 1, "server.workers", "must be at least 1")
    check(
        s.server.workers == 1 or s.store.backend != "memory",
        "server.workers",
        "more than one needs a shared store (sqlite or redis), not memory",
    )
    check(s.recall.k > 0, "recall.k", "must be positive")
    check(s.recall.max_tokens > 0, "recall.max_tokens", "must be positive")
    check(-1.0 <= s.recall.min_similarity <= 1.0, "recall.min_similarity", "must be in [-1, 1]")
    check(bool(s.recall.embedding_model), "recall.embedding_model", "must not be empty")
    check(s.models.default_context_tokens > 0, "models.default_context_tokens", "must be positive")
    for model, window in s.models.windows.items():
        check(window > 0, f"models.{model}", "must be positive")
    for key, value in (
        ("upstream.api_key", s.upstream.api_key),
        ("anthropic.api_key", s.anthropic.api_key),
    ):
        check(
            not value or bool(s.auth.client_keys) or s.auth.allow_anonymous,
            "auth.client_keys",
            f"{key} is set, so clients must present one of auth.client_keys "
            "(or set auth.allow_anonymous = true); refusing to run as an open relay",
        )
