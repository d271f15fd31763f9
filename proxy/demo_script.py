"""The demo's scripted conversation: an engineer and an assistant migrate a service.

Deterministic on purpose, so every run (and every machine) prints the same
report. Every fourth turn asks the assistant to use a tool; the mock
upstream answers "call tool NAME" with a tool call, and `run_tool` plays the
application's side of it, returning a result as bulky as real tool output
tends to be, which is what fills a context window fastest.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

SYSTEM_PROMPT = (
    "You are a senior engineer helping the user migrate the shop's orders service from "
    "MySQL 5.7 to PostgreSQL 16 with no downtime. Be concrete, cite table and file names, "
    "and use the tools to check facts instead of guessing."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
    for name, description in (
        ("query_db", "Run a read-only SQL query against the replica."),
        ("read_file", "Read a file from the orders service repository."),
        ("search_docs", "Search the internal runbooks and design docs."),
        ("run_tests", "Run a test suite and report the results."),
    )
]

TOPICS = (
    "List the tables of the orders schema and their sizes",
    "Which columns use MySQL-specific types such as TINYINT(1) or ENUM",
    "How should we map the DATETIME columns, given that the app stores UTC",
    "Draft the pgloader configuration for the orders and order_items tables",
    "What indexes does the checkout path rely on",
    "How do we keep the two databases in sync during the cut-over window",
    "Estimate how long the initial copy takes for 180 GB at 60 MB/s",
    "Which queries use GROUP BY with non-aggregated columns",
    "How do we translate the ON DUPLICATE KEY UPDATE statements",
    "Plan the rollback if replication lag exceeds 30 seconds",
    "What changes in the ORM configuration of the orders service",
    "Check the foreign keys between orders, payments and shipments",
    "How do we handle the auto-increment sequences after the copy",
    "Write the smoke test that compares row counts and checksums",
    "Which dashboards and alerts need new queries",
    "Summarise the open risks for the go/no-go meeting",
)
TOOL_NAMES = ("query_db", "read_file", "search_docs", "run_tests")


def user_turn(n: int) -> str:
    """The user's message of turn `n` (1-based)."""
    topic = TOPICS[(n - 1) % len(TOPICS)]
    round_ = (n - 1) // len(TOPICS) + 1
    text = f"{topic}? (pass {round_}, ticket ORD-{1000 + n})"
    if n % 4 == 0:
        tool = TOOL_NAMES[(n // 4 - 1) % len(TOOL_NAMES)]
        text += f" Please call tool {tool} to check before answering."
    return text


def run_tool(name: str, arguments: dict[str, Any], n: int) -> str:
    """The application's side of a tool call: a deterministic, realistically bulky result."""
    seed = int(hashlib.sha256(f"{name}:{n}".encode()).hexdigest(), 16)
    if name == "query_db":
        rows = [
            {
                "table": t,
                "rows": (seed >> i) % 9_000_000 + 1000,
                "size_mb": (seed >> (i + 7)) % 9000,
            }
            for i, t in enumerate(("orders", "order_items", "payments", "shipments", "refunds"))
        ]
        return json.dumps({"query": arguments.get("query", ""), "rows": rows, "elapsed_ms": 41})
    if name == "read_file":
        lines = [
            f"{i:>3}  orders/repository.py: def find_{i}(session, order_id): ..." for i in range(12)
        ]
        return "\n".join(lines)
    if name == "search_docs":
        hits = [
            {
                "doc": f"runbooks/db-migration-{i}.md",
                "excerpt": "Cut over during the low-traffic "
                "window (02:00-04:00 UTC); freeze schema changes one week before.",
            }
            for i in range(4)
        ]
        return json.dumps({"hits": hits})
    passed = 180 + seed % 20
    return json.dumps(
        {
            "suite": "orders-integration",
            "passed": passed,
            "failed": seed % 3,
            "failures": ["test_refund_rounding"] if seed % 3 else [],
        }
    )
