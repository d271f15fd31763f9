"""`python -m bench.cpu_ab A_DIR B_DIR`: the proxy's CPU per request, two checkouts interleaved.

The full bench's ratios move by up to 30 % between runs on a noisy machine,
too much to see a 10 % change. This measures only the proxy's own CPU time
(per-thread schedstat, see `procs.Server.cpu`) for the same requests from
one client, starting each checkout's proxy in turn (A, B, B, A, ...) so that
drift of the machine falls on both alike. Each round warms the proxy, then
reads its CPU over the measured requests. Prints the medians per workload.

Make the checkouts with `git worktree add /tmp/base <commit>`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson

from .bodies import ANSWER_MESSAGE, history
from .procs import Fleet, fleet, free_port

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{n}",
            "description": "Look something up and return what was found, in a few lines.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    for n in range(8)
]


def small_turns(convs: int, tools: bool) -> list[tuple[str, bytes]]:
    """Conversations of 4 full-history turns, 2 to 8 short messages each."""
    out = []
    for c in range(convs):
        convo = history(2, 60, seed=c)
        for t in range(4):
            body: dict[str, object] = {"model": "gpt-4.1", "messages": convo}
            if tools:
                body["tools"] = TOOLS
            out.append((f"small-{c}", orjson.dumps(body)))
            convo = [*convo, ANSWER_MESSAGE, {"role": "user", "content": f"Turn {t}?"}]
    return out


def long_turns(convs: int) -> list[tuple[str, bytes]]:
    """Conversations of 8 turns over a 200-message, 400 KB history (strategy summarize)."""
    out = []
    for c in range(convs):
        convo = history(198, 2000, seed=c)
        for t in range(8):
            out.append((f"long-{c}", orjson.dumps({"model": "gpt-4.1", "messages": convo})))
            convo = [*convo, ANSWER_MESSAGE, {"role": "user", "content": f"Turn {t}?"}]
    return out


WORKLOADS: dict[str, Callable[[], list[tuple[str, bytes]]]] = {
    "small full-history turns": lambda: small_turns(500, tools=False),
    "small turns with 8 tool definitions": lambda: small_turns(500, tools=True),
    "200-message history, summarize": lambda: long_turns(100),
}


def one_round(
    f: Fleet, src: Path, mock: str, workdir: Path, requests: list[tuple[str, bytes]]
) -> float:
    """CPU milliseconds per measured request of one fresh proxy from `src`."""
    port = free_port()
    config = workdir / f"ab-{port}.toml"
    config.write_text(
        f'[server]\nport = {port}\nlog_level = "warning"\n[upstream]\nbase_url = "{mock}/v1"\n'
        f'[store]\nbackend = "sqlite"\npath = "{workdir / f"ab-{port}.db"}"\n'
    )
    env = {"PYTHONPATH": str(src.resolve())}
    proxy = f.start(
        f"ab-{port}", ["-m", "proxy", "serve", "--config", str(config)], port=port, env=env, cwd=src
    )
    warm, start = len(requests) // 5, 0.0
    with httpx.Client(base_url=proxy.url, timeout=60) as client:
        for i, (conv, body) in enumerate(requests):
            if i == warm:
                start = proxy.cpu()
            headers = {"authorization": "Bearer sk-ab", "x-conversation-id": conv}
            r = client.post("/v1/chat/completions", content=body, headers=headers)
            r.raise_for_status()
    spent = proxy.cpu() - start
    f.servers.remove(proxy)
    proxy.popen.terminate()
    proxy.popen.wait()
    return 1000 * spent / (len(requests) - warm)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_ab")
    parser.add_argument("a", type=Path, help="checkout A (the base)")
    parser.add_argument("b", type=Path, help="checkout B (the change)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per checkout (default 4)")
    args = parser.parse_args()
    order = [args.a, args.b, args.b, args.a] * ((args.rounds + 1) // 2)
    with tempfile.TemporaryDirectory() as tmp, fleet(Path(tmp)) as f:
        port = free_port()
        mock = f.start("mock", ["-m", "proxy.mock", "--canned", "--port", str(port)], port=port)
        for name, make in WORKLOADS.items():
            requests = make()
            found: dict[Path, list[float]] = {args.a: [], args.b: []}
            for src in order[: 2 * args.rounds]:
                found[src].append(one_round(f, src, mock.url, Path(tmp), requests))
            a, b = (statistics.median(found[s]) for s in (args.a, args.b))
            spread = ", ".join(f"{v:.2f}" for v in found[args.b])
            print(
                f"{name}: A {a:.2f} ms, B {b:.2f} ms ({b / a:.2f}x; B's rounds {spread})",
                flush=True,
            )


if __name__ == "__main__":
    main()
