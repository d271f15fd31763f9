"""What `simulate` prints: strategies side by side, an estimated bill, per-request rows, a chart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .charts import save_svg, terminal_chart
from .simulate import Run

# Example list prices in USD per million tokens: (input, cached input, output).
# They change; pass --price-input/--price-cached/--price-output for your own.
EXAMPLE_PRICES: dict[str, tuple[float, float, float]] = {
    "gpt-4o-mini": (0.15, 0.075, 0.60),
    "gpt-4o": (2.50, 1.25, 10.00),
    "gpt-4.1-nano": (0.10, 0.025, 0.40),
    "gpt-4.1-mini": (0.40, 0.10, 1.60),
    "gpt-4.1": (2.00, 0.50, 8.00),
}
FALLBACK_PRICES = "gpt-4o"
TRIGGER_RATIO = 0.7  # the default [reduction].trigger_ratio simulate runs with


def _hint(longest: int) -> int:
    """A window a little over half the longest history, rounded to a thousand."""
    return max(1000, round(longest * 0.6 / 1000) * 1000)


@dataclass(frozen=True)
class Prices:
    """USD per million tokens; `label` says where they came from."""

    input: float
    cached: float
    output: float
    label: str

    @classmethod
    def for_model(
        cls,
        model: str,
        input: float | None = None,
        cached: float | None = None,
        output: float | None = None,
    ) -> Prices:
        name = model.lower().rsplit("/", 1)[-1]
        match = max((p for p in EXAMPLE_PRICES if name.startswith(p)), key=len, default="")
        base = EXAMPLE_PRICES[match or FALLBACK_PRICES]
        label = f"example prices of {match or FALLBACK_PRICES}"
        if input is not None or cached is not None or output is not None:
            label = "your prices"
        return cls(
            input if input is not None else base[0],
            cached if cached is not None else base[1],
            output if output is not None else base[2],
            label,
        )

    def cost(self, prompt: int, cached: int, completion: int) -> float:
        return (
            (prompt - cached) * self.input + cached * self.cached + completion * self.output
        ) / 1e6


def run_cost(run: Run, prices: Prices) -> float:
    """Chat calls plus summariser calls, each with its prefix-cache discount."""
    ok = [r for r in run.requests if r.status == 200]
    chat = prices.cost(
        sum(r.prompt for r in ok), sum(r.cached for r in ok), sum(r.completion for r in ok)
    )
    return chat + prices.cost(run.summary_prompt, run.summary_cached, run.summary_completion)


def compare_table(runs: Sequence[Run], prices: Prices) -> Table:
    baseline = next((r for r in runs if r.strategy == "none"), None)
    base_tokens = sum(r.tokens_out for r in baseline.requests) if baseline else 0
    table = Table(
        title=f"Strategies side by side ({runs[0].model}, {runs[0].window:,}-token window)",
        caption="forwarded: prompt tokens sent upstream in total; peak: the largest prompt; "
        "summaries: summariser calls; cached: share of prompt tokens an OpenAI-style prefix "
        f"cache would serve; cost: {prices.label}, USD per 1M tokens: input ${prices.input}, "
        f"cached input ${prices.cached}, output ${prices.output}; "
        "output is the mock's answers plus summaries",
    )
    for name in ("strategy", "forwarded", "vs none", "peak", "summaries", "cached", "cost", "err"):
        table.add_column(name, justify="left" if name == "strategy" else "right", no_wrap=True)
    for run in runs:
        ok = [r for r in run.requests if r.status == 200]
        forwarded = sum(r.tokens_out for r in ok)
        prompt = sum(r.prompt for r in ok) + run.summary_prompt
        cached = sum(r.cached for r in ok) + run.summary_cached
        errors = len(run.requests) - len(ok)
        versus = f"{forwarded / base_tokens - 1:+.0%}" if base_tokens else "-"
        table.add_row(
            run.strategy,
            f"{forwarded:,}",
            versus,
            f"{max((r.tokens_out for r in ok), default=0):,}",
            str(run.summary_calls),
            f"{cached / max(1, prompt):.0%}",
            f"${run_cost(run, prices):.4f}",
            Text(str(errors), style="red bold" if errors else "green"),
        )
    return table


def per_turn_table(run: Run) -> Table:
    table = Table(title=f"Per request: {run.strategy}")
    for name in ("#", "turn", "msgs", "sent", "fwd", "reduction", "summ", "cached"):
        table.add_column(name, justify="left" if name == "reduction" else "right")
    for i, r in enumerate(run.requests, 1):
        kinds = ",".join(r.kinds) if r.status == 200 else f"HTTP {r.status}: {r.error[:60]}"
        table.add_row(
            str(i),
            str(r.turn),
            str(r.messages),
            f"{r.tokens_in:,}",
            f"{r.tokens_out:,}",
            kinds,
            f"+{r.summaries}" if r.summaries else "",
            f"{r.cached:,}",
        )
    return table


def print_report(
    console: Console,
    runs: Sequence[Run],
    prices: Prices,
    *,
    per_turn: bool = False,
    chart: str | None = None,
) -> None:
    if per_turn:
        for run in runs:
            console.print(per_turn_table(run))
    console.print(compare_table(runs, prices))
    for run in runs:
        for r in run.requests:
            if r.status != 200:
                console.print(
                    f"[red]{run.strategy}: request {run.requests.index(r) + 1} failed "
                    f"with HTTP {r.status}:[/] {r.error}",
                    markup=True,
                    highlight=False,
                )
                break
    longest = max((r.tokens_in for run in runs for r in run.requests), default=0)
    if longest < TRIGGER_RATIO * runs[0].window:
        console.print(
            f"[yellow]Note:[/] the longest history ({longest:,} tokens) stays under 70% of the "
            f"{runs[0].window:,}-token window, where summarize and tokens start to act. "
            f"To see them work, replay with a smaller window, e.g. --window {_hint(longest)}."
        )
    x = list(range(1, len(runs[0].requests) + 1))
    series = {run.strategy: [float(r.tokens_out) for r in run.requests] for run in runs}
    width = max(60, min(console.width, 120))
    text = terminal_chart(
        "Forwarded prompt tokens per request",
        x,
        series,
        width=width,
        color=console.is_terminal,
        x_label="request",
    )
    console.print(Text.from_ansi(text))
    if chart:
        path = save_svg(
            chart,
            "context-proxy simulate: forwarded tokens per request",
            x,
            series,
            x_title="request",
        )
        console.print(f"Chart saved to [bold]{Path(path).resolve()}[/]")
