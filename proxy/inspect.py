"""`context-proxy inspect ID`: a stored conversation, readable in a terminal.

It reads either through a running proxy's admin API (`--url`, with the
admin token), which works whatever the store backend, or straight from a
local SQLite store file (`--db`), which needs no running proxy. Both give
the same JSON shape as `GET /admin/conversations/{id}`, so one renderer
serves both.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .conversation import tenant_of
from .dialects.anthropic import ANTHROPIC
from .dialects.responses import RESPONSES
from .messages import role, text_of, tool_calls
from .turn.state import SnapshotState

PREVIEW_CHARS = 160


class InspectError(Exception):
    """Why the conversation could not be read; printed as is."""


def fetch_admin(url: str, conversation: str, tenant: str, token: str, limit: int) -> dict[str, Any]:
    import httpx

    try:
        response = httpx.get(
            f"{url.rstrip('/')}/admin/conversations/{conversation}",
            params={"tenant": tenant, "limit": limit},
            headers={"authorization": f"Bearer {token}"},
            timeout=30,
        )
    except httpx.HTTPError as exc:
        raise InspectError(f"cannot reach {url}: {exc}") from None
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:200]
        # Conversations are kept per tenant (the hash of the key): a wrong or missing
        # key reads as no such conversation.
        hint = (
            " (is the tenant right? pass --key or --tenant)" if response.status_code == 404 else ""
        )
        raise InspectError(f"{url} answered {response.status_code}: {message}{hint}")
    data: dict[str, Any] = response.json()
    return data


def read_sqlite(path: str, conversation: str, tenant: str, limit: int) -> dict[str, Any]:
    from .store import ConvKey, StoreError, open_store

    if not Path(path).is_file():  # opening would create an empty database
        raise InspectError(f"no store file at {path} (pass --db PATH or --url)")

    async def read() -> dict[str, Any]:
        # Read-only: looking must never migrate, expire or delete anything.
        try:
            store = open_store("sqlite", path=path, read_only=True)
        except StoreError as exc:
            raise InspectError(str(exc)) from None
        try:
            key = ConvKey(tenant, conversation)
            latest = await store.latest(key)
            if latest is None:
                raise InspectError(
                    f"no conversation {conversation!r} for tenant {tenant[:12]}... in {path} "
                    "(is the tenant right? pass --key or --tenant)"
                )
            archive = await store.archive(key, limit=limit)
        except StoreError as exc:
            raise InspectError(f"cannot read {path}: {exc}") from None
        finally:
            await store.close()
        return {
            "id": conversation,
            "tenant": tenant,
            "turns": latest.turns,
            "state": latest.state,
            "working": latest.working,
            "archive": [a.message for a in archive],
        }

    return asyncio.run(read())


def preview(message: dict[str, Any]) -> str:
    # A Responses item (a call, its output, reasoning) or an Anthropic message of tool
    # blocks has its text where chat has none.
    text = text_of(message) or RESPONSES.text(message) or ANTHROPIC.text(message)
    text = text.replace("\n", " ")
    calls = [f"{c.get('function', {}).get('name', '?')}(...)" for c in tool_calls(message)]
    if calls:
        text = (text + " " if text else "") + "calls " + ", ".join(calls)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "\u2026"


def messages_table(title: str, messages: list[dict[str, Any]]) -> Table:
    table = Table(title=title, expand=True, show_lines=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("content", overflow="fold")
    colours = {"system": "magenta", "user": "cyan", "assistant": "green", "tool": "yellow"}
    for i, m in enumerate(messages, 1):
        who = role(m) or str(m.get("type", ""))
        # Text, not a string: rich reads a string's brackets as markup ("[/b]" raises).
        table.add_row(str(i), Text(who, style=colours.get(who, "")), Text(preview(m)))
    return table


def render(console: Console, data: dict[str, Any], limit: int | None = None) -> None:
    """The conversation; `limit` is how many archived messages were asked for at most."""
    state = SnapshotState.from_json(data.get("state")) or SnapshotState()
    stats, reduction = state.stats, state.reduction
    head = Table.grid(padding=(0, 2))
    head.add_row("conversation", Text(str(data.get("id"))))
    head.add_row("tenant", str(data.get("tenant")))
    head.add_row("turns", str(data.get("turns")))
    # A full page may hide more: a long conversation is what the proxy is for.
    archived = len(data.get("archive") or [])
    cut = limit is not None and archived >= limit
    shown = f"{archived} archived"
    if cut:
        shown = f"at least {shown} (the first {archived} shown: --limit)"
    head.add_row("messages", f"{shown}, {len(data.get('working') or [])} working")
    saved = 1 - stats.tokens_out / max(1, stats.tokens_in)
    head.add_row(
        "tokens",
        f"{stats.tokens_in:,} sent by the app, {stats.tokens_out:,} "
        f"forwarded ({saved:.0%} saved), {stats.summarizer_tokens:,} for summaries",
    )
    head.add_row(
        "summaries",
        f"{stats.summaries_made} made, reused on {stats.summaries_reused} turns",
    )
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(stats.reductions.items()))
    head.add_row("reductions", kinds or "-")
    # Messages are counted after the leading instructions, as the reduction counts them.
    head.add_row("verbatim from", f"message {reduction.tail_start} after the instructions")
    console.print(Panel(head, title="context-proxy conversation", expand=False))
    if reduction.summaries:
        parts = [
            Panel(Text(block.text), title=f"summary {i} (of the first {block.covers} messages)")
            for i, block in enumerate(reduction.summaries, 1)
        ]
        console.print(Group(*parts))
    else:
        console.print(Text("No summary yet.", style="dim"))
    console.print(messages_table("Working history (what append mode continues)", data["working"]))
    seen = f"the first {archived} messages seen" if cut else "every message seen"
    console.print(messages_table(f"Archive ({seen}, first arrival order)", data["archive"]))


def main(args: Any) -> int:
    """Entry point of `context-proxy inspect` (arguments parsed by `proxy.cli`)."""
    console = Console()
    tenant = args.tenant or tenant_of(args.key or "")
    try:
        if args.url:
            token = args.admin_token or os.environ.get("CONTEXT_PROXY_AUTH_ADMIN_TOKEN", "")
            if not token:
                raise InspectError("--url needs --admin-token (or CONTEXT_PROXY_AUTH_ADMIN_TOKEN)")
            data = fetch_admin(args.url, args.id, tenant, token, args.limit)
        else:
            data = read_sqlite(args.db or "context-proxy.db", args.id, tenant, args.limit)
    except InspectError as exc:
        console.print(f"context-proxy inspect: {exc}", style="red", markup=False)
        return 1
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    render(console, data, args.limit)
    return 0
