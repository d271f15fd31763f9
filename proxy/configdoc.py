"""The configuration reference, generated from the settings definition so it cannot drift."""

from __future__ import annotations

import dataclasses
import typing

from .settings import ENV_PREFIX, SECTIONS


def reference() -> str:
    lines = ["| key | default | environment variable | meaning |", "|---|---|---|---|"]
    for section, cls in SECTIONS.items():
        lines.extend(_rows(section, cls))
    return "\n".join(lines)


def _rows(section: str, cls: type[object]) -> list[str]:
    rows: list[str] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):  # a table of its own, [reduction.mask]
            rows.extend(_rows(f"{section}.{f.name}", hint))  # type: ignore[arg-type]
            continue
        if f.default is not dataclasses.MISSING:
            default = repr(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = repr(f.default_factory())
        else:
            default = ""
        env = f"{ENV_PREFIX}{section.upper().replace('.', '_')}_{f.name.upper()}"
        doc = f.metadata.get("doc", "")
        rows.append(f"| `{section}.{f.name}` ({_type(hint)}) | `{default}` | `{env}` | {doc} |")
    return rows


def _type(hint: object) -> str:
    return getattr(hint, "__name__", str(hint)).replace("typing.", "")
