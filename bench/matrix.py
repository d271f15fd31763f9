"""The comparison matrix: every target on the same bodies, in the same run.

Targets are interleaved within each repetition (all targets for one
scenario, then the next scenario), so a noisy stretch of the machine hits
all of them alike and the ratios stay meaningful; the report takes medians
over repetitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from . import bodies
from .bodies import Template
from .load import RunResult, load
from .procs import Server

FLOORS = ("httpx", "httpx-aiohttp", "aiohttp")
BASELINES = ("direct", *FLOORS)
LITELLM = "litellm"  # measured only where installed (see bench/litellm.py), small bodies only
# The proxy's settings that a choice rests on, measured against the bench's proxy
# (SQLite, one worker, the reqwest transport): what `--workers 2` gives on this
# machine, and what pyreqwest earns over aiohttp (a plain install's) for whole answers.
VARIANTS = {
    "proxy-2w": {"CONTEXT_PROXY_SERVER_WORKERS": "2"},
    "proxy-aiohttp": {"CONTEXT_PROXY_UPSTREAM_TRANSPORT": "aiohttp"},
}


@dataclass(frozen=True)
class Cell:
    """One measured combination; `strategy` is empty for targets that are not the proxy."""

    target: str
    body: str
    concurrency: int
    stream: bool
    strategy: str = ""

    @property
    def key(self) -> str:
        mode = "stream" if self.stream else "json"
        strategy = f"/{self.strategy}" if self.strategy else ""
        return f"{self.target}{strategy} {self.body} c={self.concurrency} {mode}"


@dataclass(frozen=True)
class Plan:
    """How long to measure; `--quick` and the full run differ only here."""

    reps: int
    duration_s: float
    max_requests: int
    turn_convs: Mapping[int, int]
    turns: int
    mem_convs: int
    mem_turns: int
    wait_convs: int = 8
    wait_turns: int = 40


TEMPLATES: dict[str, Callable[[bool], Template]] = {
    "small": bodies.small,
    "large": bodies.large,
    "steady": bodies.steady,
    "small-responses": lambda stream: bodies.responses(bodies.small(stream)),
    "steady-responses": lambda stream: bodies.responses(bodies.steady(stream)),
    "small-messages": lambda stream: bodies.messages(bodies.small(stream)),
    "steady-messages": lambda stream: bodies.messages(bodies.steady(stream)),
}
# The Responses and Messages routes against the chat route: the same conversations, whole
# answers, c=32.
RESPONSES_BODIES = ("small-responses", "steady-responses", "small-messages", "steady-messages")


def cells(litellm: bool = False, variants: Iterable[str] = ()) -> Iterator[list[Cell]]:
    """Scenario by scenario, the cells to run back to back.

    LiteLLM serves about a tenth of the proxy's requests a second; the
    small bodies, where the targets compare with it, are enough.
    """
    for body in ("small", "large", "steady"):
        for stream in (False, True):
            for c in (1, 32):
                group = [Cell(t, body, c, stream) for t in BASELINES]
                if litellm and body == "small":
                    group.append(Cell(LITELLM, body, c, stream))
                strategies = ("summarize",) if body == "steady" else ("none", "summarize")
                group += [Cell("proxy", body, c, stream, s) for s in strategies]
                if c == 32 and not stream and body != "large":
                    group += [Cell("proxy-memory", body, c, stream, s) for s in strategies]
                    group += [Cell(v, body, c, stream, strategies[0]) for v in variants]
                yield group
    for body in RESPONSES_BODIES:
        yield [Cell("httpx-aiohttp", body, 32, False), Cell("proxy", body, 32, False, "summarize")]


async def run_matrix(
    servers: Mapping[str, Server],
    plan: Plan,
    progress: Callable[[str], None],
) -> dict[str, list[RunResult]]:
    templates = {(n, s): f(s) for n, f in TEMPLATES.items() for s in (False, True)}
    results: dict[str, list[RunResult]] = {}
    for rep in range(plan.reps):
        variants = [v for v in VARIANTS if v in servers]
        for group in cells(litellm=LITELLM in servers, variants=variants):
            for cell in group:
                server = servers[cell.target]
                template = templates[(cell.body, cell.stream)]
                prefix = f"{cell.key} r{rep}".replace(" ", "-").replace("/", "-")
                result = await load(
                    server.url,
                    template,
                    cell.concurrency,
                    max_requests=plan.max_requests,
                    duration_s=plan.duration_s,
                    conversation=lambda w, t, prefix=prefix: f"{prefix}-w{w}-t{t}",
                    server=None if cell.target == "direct" else server,
                    strategy=cell.strategy or None,
                )
                results.setdefault(cell.key, []).append(result)
                progress(
                    f"rep {rep + 1}/{plan.reps} {cell.key}: {result.rps:.0f} req/s, "
                    f"p50 {result.pct(50):.1f} ms, errors {result.errors}"
                )
    return results
