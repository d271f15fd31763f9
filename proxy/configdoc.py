"""The configuration reference, generated from the settings definition so it cannot drift."""

from __future__ import annotations

import dataclasses
import typing

from .config import ENV_PREFIX, SECTIONS


def reference() -> str:
    lines = ["| key | default | environment variable | meaning |", "|---|---|---|---|"]
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                default = repr(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                default = repr(f.default_factory())
            else:
                default = ""
            env = f"{ENV_PREFIX}{section.upper()}_{f.name.upper()}"
            doc = f.metadata.get("doc", "")
            hint = typing.get_type_hints(cls)[f.name]
            lines.append(
                f"| `{section}.{f.name}` ({_type(hint)}) | `{default}` | `{env}` | {doc} |"
            )
    return "\n".join(lines)


def _type(hint: object) -> str:
    return getattr(hint, "__name__", str(hint)).replace("typing.", "")
