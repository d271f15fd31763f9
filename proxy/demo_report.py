"""The demo's end report: a condensed per-turn table, totals, and the tokens-per-turn chart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .charts import save_svg, terminal_chart

TRIGGER_RATIO = 0.7  # the default [reduction].trigger_ratio the demo runs with


@dataclass(frozen=True)
class TurnRow:
    """One user turn; a tool round makes it several requests (`requests`)."""

    turn: int
    messages: int
    requests: int
    tokens_in: int  # history the app sent on the turn's last request (X-Context-Tokens-In)
    tokens_out: int  # what the proxy forwarded on it (X-Context-Tokens-Out)
    total_in: int  # summed over the turn's requests
    total_out: int
    kinds: tuple[str, ...]
    summaries: int  # summariser calls the turn caused
    cache_hit: bool  # every forwarded prompt extended the previous one
    cached: int  # prompt tokens the upstream served from its prefix cache
    prompt: int  # prompt tokens the upstream counted


def shown(rows: Sequence[TurnRow], every: int = 10) -> list[TurnRow]:
    """The rows worth reading: the first, every `every`th, the last, and each new summary."""
    last = rows[-1].turn if rows else 0
    return [
        r
        for r in rows
        if r.turn in (1, last) or r.turn % every == 0 or r.summaries or "fallback" in r.kinds
    ]


def turn_table(rows: Sequence[TurnRow]) -> Table:
    table = Table(
        title="Per turn (every 10th turn, and every turn that made a summary)",
        caption="reqs: requests (2 with a tool round); sent: history tokens the app sent "
        "(X-Context-Tokens-In); fwd: tokens the proxy forwarded (X-Context-Tokens-Out); "
        "sum: summaries made; cache: did the forwarded prompt extend the previous one, and "
        "tokens the upstream served from its prefix cache",
    )
    for name in ("turn", "reqs", "sent", "fwd", "saved"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("reduction", no_wrap=True, min_width=10)
    table.add_column("sum", justify="right")
    table.add_column("cache", justify="right", no_wrap=True)
    for r in shown(rows):
        saved = 1 - r.tokens_out / r.tokens_in if r.tokens_in else 0.0
        kinds = ",".join(r.kinds) or "-"
        style = (
            "bold yellow" if "summarized" in r.kinds else ("green" if "reused" in r.kinds else "")
        )
        cache = f"{'hit' if r.cache_hit else 'miss'} {r.cached:>6,}"
        table.add_row(
            str(r.turn),
            str(r.requests),
            f"{r.tokens_in:,}",
            f"{r.tokens_out:,}",
            f"{saved:.0%}",
            Text(kinds, style=style),
            f"+{r.summaries}" if r.summaries else "",
            Text(cache, style="green" if r.cache_hit else "red"),
        )
    return table


def totals_table(rows: Sequence[TurnRow], window: int, elapsed_s: float) -> Table:
    sent = sum(r.total_in for r in rows)
    forwarded = sum(r.total_out for r in rows)
    requests = sum(r.requests for r in rows)
    made = sum(r.summaries for r in rows)
    reused = sum(1 for r in rows if "reused" in r.kinds)
    hits = sum(1 for r in rows if r.cache_hit)
    cached, prompt = sum(r.cached for r in rows), sum(r.prompt for r in rows)
    peak = max((r.tokens_out for r in rows), default=0)
    longest = max((r.tokens_in for r in rows), default=0)
    table = Table(title="Totals", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("turns / requests", f"{len(rows)} / {requests} in {elapsed_s:.1f} s")
    table.add_row("tokens the app sent", f"{sent:,}")
    table.add_row(
        "tokens forwarded upstream", f"{forwarded:,} ({1 - forwarded / max(1, sent):.0%} less)"
    )
    table.add_row("longest history / peak forwarded", f"{longest:,} / {peak:,} (window {window:,})")
    table.add_row("summaries made / turns reusing one", f"{made} / {reused}")
    table.add_row("turns whose prompts extended the last", f"{hits} of {len(rows)}")
    table.add_row("prompt tokens served from prefix cache", f"{cached / max(1, prompt):.0%}")
    return table


def print_turn_report(
    console: Console,
    rows: Sequence[TurnRow],
    *,
    chart: Path,
    window: int,
    elapsed_s: float,
) -> Path:
    console.print(turn_table(rows))
    console.print(totals_table(rows, window, elapsed_s))
    x = [r.turn for r in rows]
    series = {
        "full history (app sent)": [float(r.tokens_in) for r in rows],
        "forwarded by the proxy": [float(r.tokens_out) for r in rows],
        "reduction threshold (70% of window)": [TRIGGER_RATIO * window] * len(rows),
    }
    width = max(60, min(console.width, 120))
    console.print(
        Text.from_ansi(
            terminal_chart(
                "Tokens per turn",
                x,
                series,
                width=width,
                color=console.is_terminal,
            )
        )
    )
    path = save_svg(chart, "context-proxy demo: tokens per turn", x, series)
    console.print(f"Chart saved to [bold]{path.resolve()}[/] (open it in a browser)")
    return path
