"""Writes `agent-transcript.jsonl`: a coding agent's session, most of whose tokens are tool output.

The shape of the traffic `mask` is for: each task reads files, searches and
runs tests, and the answers are short. Deterministic, so the file can be
regenerated and compared: `python examples/agent_transcript.py`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

MODULES = ["billing", "invoices", "accounts", "ledger", "reports", "exports", "auth", "audit"]
TASKS = [
    "Add a currency column to {m} and keep old rows in EUR.",
    "Why does the {m} test fail on leap days?",
    "Make {m} totals round half-even like the bank does.",
    "Rename the {m} status 'void' to 'cancelled' everywhere.",
    "Log every {m} change to the audit table.",
]


def source(rng: random.Random, module: str, lines: int) -> str:
    out = [f"# {module}/service.py", "from decimal import Decimal", ""]
    for n in range(lines):
        name = f"{rng.choice(['load', 'save', 'check', 'total', 'apply'])}_{module}_{n}"
        out.append(
            f"def {name}(row, rate=Decimal('{rng.randint(1, 99)}.{rng.randint(0, 99):02}')):"
        )
        out.append(f"    return row.amount * rate  # {module} rule {n}")
    return "\n".join(out)


def log(rng: random.Random, module: str, lines: int) -> str:
    out = [f"============ test session starts ({module}) ============"]
    for n in range(lines):
        verdict = "PASSED" if rng.random() > 0.1 else "FAILED"
        out.append(f"tests/test_{module}.py::test_case_{n} {verdict} [{100 * n // lines}%]")
    return "\n".join(out)


def main() -> None:
    rng = random.Random(7)
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools; answer briefly."}
    ]
    call = 0
    for task in range(24):
        module = MODULES[task % len(MODULES)]
        messages.append({"role": "user", "content": TASKS[task % len(TASKS)].format(m=module)})
        for tool in ("read_file", "grep", "run_tests"):
            call += 1
            call_id = f"call_{call:04d}"
            arguments = json.dumps({"path": f"{module}/service.py"})
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": tool, "arguments": arguments},
                        }
                    ],
                }
            )
            if tool == "read_file":
                text = source(rng, module, rng.randint(20, 45))
            elif tool == "grep":
                text = "\n".join(
                    f"{module}/service.py:{rng.randint(1, 400)}: {module}_{n}" for n in range(12)
                )
            else:
                text = log(rng, module, rng.randint(25, 50))
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        messages.append(
            {"role": "assistant", "content": f"Done: {module} changed and its tests pass."}
        )
    path = Path(__file__).with_name("agent-transcript.jsonl")
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))


if __name__ == "__main__":
    main()
