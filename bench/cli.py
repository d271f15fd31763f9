"""`python -m bench [--quick] [--out FILE.json]`: start everything, measure, print, stop.

One run starts, on 127.0.0.1 and each in its own process: the mock
upstream, the three pass-through floors, LiteLLM's proxy where it is
installed (`--litellm`, see bench/litellm.py), and the proxy twice (SQLite
store and memory store, strategy summarize; `none` runs ask for it per
request with `X-Context-Strategy`). Every process is stopped on the way
out, also after an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import orjson

from . import litellm
from .bodies import STEADY_MODEL, STEADY_WINDOW
from .floors import KINDS
from .matrix import LITELLM, VARIANTS, Plan, run_matrix
from .memory import MemoryCost, memory_cost
from .procs import Fleet, Server, fleet, free_port
from .report import REF_FLOOR, render
from .stall import BIG_MODEL, BIG_WINDOW, stall
from .turns import TurnCost, turn_costs
from .waits import ANSWER_DELAY_S, SUMMARY_DELAY_S, summary_waits

QUICK = Plan(
    reps=1,
    duration_s=0.6,
    max_requests=3000,
    turn_convs={10: 48, 100: 24, 1000: 6},
    turns=4,
    mem_convs=60,
    mem_turns=8,
    wait_convs=8,
    wait_turns=40,
)
FULL = Plan(
    reps=5,
    duration_s=1.2,
    max_requests=10000,
    turn_convs={10: 96, 100: 48, 1000: 12},
    turns=5,
    mem_convs=200,
    mem_turns=10,
    wait_convs=16,
    wait_turns=48,
)


def proxy_config(workdir: Path, name: str, port: int, upstream: str, store: str) -> Path:
    """The proxy's TOML: quiet logs, the mock upstream, and a tiny window for `bench-small`."""
    path = workdir / f"{name}.toml"
    path.write_text(
        f"""[server]
port = {port}
log_level = "warning"

[upstream]
base_url = "{upstream}/v1"
transport = "reqwest"

[anthropic]
base_url = "{upstream}"

[store]
backend = "{store}"
path = "{workdir / (name + ".db")}"

[reduction]
strategy = "summarize"

[models]
"{STEADY_MODEL}" = {STEADY_WINDOW}
"{BIG_MODEL}" = {BIG_WINDOW}
"""
    )
    return path


def start_all(
    f: Fleet, workdir: Path, proxy_src: Path | None, litellm_exe: Path | None
) -> dict[str, Server]:
    servers: dict[str, Server] = {}
    port = free_port()
    mock = f.start("mock", ["-m", "proxy.mock", "--canned", "--port", str(port)], port=port)
    servers["direct"] = mock
    if litellm_exe is not None:
        servers[LITELLM] = litellm.start(f, litellm_exe, free_port(), mock.url)
    for kind in KINDS:
        port = free_port()
        args = [
            "-m",
            "bench.floors",
            "--kind",
            kind,
            "--port",
            str(port),
            "--upstream",
            mock.url + "/v1",
        ]
        servers[kind] = f.start(f"floor-{kind}", args, port=port)
    proxies = [("proxy", "sqlite", {}), ("proxy-memory", "memory", {})]
    proxies += [(name, "sqlite", env) for name, env in VARIANTS.items()]
    for name, store, settings in proxies:
        port = free_port()
        config = proxy_config(workdir, name, port, mock.url, store)
        env = {"PYTHONPATH": str(proxy_src.resolve())} if proxy_src else {}
        args = ["-m", "proxy", "serve", "--config", str(config)]
        try:
            servers[name] = f.start(name, args, port=port, env={**env, **settings}, cwd=proxy_src)
        except RuntimeError as exc:
            if not settings:
                raise
            _say(f"{name} left out: this proxy cannot run it ({str(exc).splitlines()[0]})")
    # The summary-wait scenario: an upstream with a model's latency, a proxy of its own.
    port = free_port()
    delays = ["--answer-delay", str(ANSWER_DELAY_S), "--summary-delay", str(SUMMARY_DELAY_S)]
    slow = f.start(
        "mock-slow", ["-m", "proxy.mock", "--canned", "--port", str(port), *delays], port=port
    )
    port = free_port()
    config = proxy_config(workdir, "proxy-waits", port, slow.url, "sqlite")
    env = {"PYTHONPATH": str(proxy_src.resolve())} if proxy_src else None
    args = ["-m", "proxy", "serve", "--config", str(config)]
    servers["proxy-waits"] = f.start("proxy-waits", args, port=port, env=env, cwd=proxy_src)
    return servers


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def measure(
    servers: dict[str, Server], plan: Plan, workdir: Path, verbose: bool
) -> tuple[str, dict[str, object]]:
    memory: list[MemoryCost] = []
    # Stores are measured first, on processes that hold little else yet.
    for name, store in (("proxy-memory", "memory"), ("proxy", "sqlite")):
        db = workdir / f"{name}.db" if store == "sqlite" else None
        memory.append(await memory_cost(store, servers[name], db, plan, tag=name))
        _say(f"memory per conversation, {store}: done")
    progress = _say if verbose else (lambda _text: None)
    t0 = time.monotonic()
    results = await run_matrix(servers, plan, progress)
    _say(f"matrix: done in {time.monotonic() - t0:.0f} s")
    turn_reps: list[list[TurnCost]] = []
    for rep in range(plan.reps):
        turn_reps.append(await turn_costs(servers["proxy"], servers[REF_FLOOR], plan, rep))
    _say("per-turn cost: done")
    waits = await summary_waits(servers["proxy-waits"], plan)
    _say("summary waits: done")
    stalled = await stall(servers["proxy"], plan.reps)
    _say("stall under a maximal request: done")
    return render(results, turn_reps, memory, waits, stalled)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one short repetition (~1-2 min)")
    parser.add_argument("--out", type=Path, help="save the raw figures as JSON")
    parser.add_argument("--verbose", "-v", action="store_true", help="print each run as it ends")
    parser.add_argument(
        "--proxy-src",
        type=Path,
        help="run the proxy package found in this directory (e.g. an export of another commit)",
    )
    parser.add_argument("--keep-logs", type=Path, help="copy the servers' logs to this directory")
    parser.add_argument(
        "--litellm",
        type=Path,
        help="the `litellm` executable of a LiteLLM proxy install, measured as a baseline "
        "(default: `litellm` on PATH, if any; see bench/litellm.py)",
    )
    args = parser.parse_args(argv)
    litellm_exe = litellm.find(args.litellm)
    plan = QUICK if args.quick else FULL
    started = time.monotonic()
    try:
        import uvloop
    except ImportError:  # the bench still runs, with a slower client
        uvloop = None
    with tempfile.TemporaryDirectory(prefix="context-proxy-bench-") as tmp:
        workdir = Path(tmp)
        try:
            with fleet(workdir) as f:
                _say(f"starting servers in {workdir} ...")
                if litellm_exe is not None:
                    _say(f"measuring LiteLLM's proxy too: {litellm_exe}")
                servers = start_all(f, workdir, args.proxy_src, litellm_exe)
                coro = measure(servers, plan, workdir, args.verbose)
                text, data = uvloop.run(coro) if uvloop else asyncio.run(coro)
        except KeyboardInterrupt:
            _say("interrupted; all servers stopped")
            return 130
        finally:
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for log in workdir.glob("*.log"):
                    (args.keep_logs / log.name).write_bytes(log.read_bytes())
    print(text)
    kind = "quick" if args.quick else "full"
    print(f"\n(total bench time {time.monotonic() - started:.0f} s, plan: {kind})")
    if args.out:
        data["plan"] = vars(plan) | {"turn_convs": dict(plan.turn_convs)}
        args.out.write_bytes(
            orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        )
    return 0
