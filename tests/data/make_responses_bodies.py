"""Writes responses-sdk-bodies.jsonl: bodies the official `openai` SDK sends to `/v1/responses`.

Run from the repository root: `python tests/data/make_responses_bodies.py`. The SDK
talks to the tests' fake upstream on 127.0.0.1, which records the bodies as they arrived.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import openai

sys.path.insert(0, ".")

from proxy.mock import MockUpstream
from tests.servers import run_server

TOOLS: Any = [
    {
        "type": "function",
        "name": "lookup",
        "description": "Look up a city.",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
        },
    }
]
SCHEMA: Any = {
    "format": {
        "type": "json_schema",
        "name": "plan",
        "schema": {"type": "object", "properties": {"plan": {"type": "string"}}},
    }
}


def main() -> None:
    upstream = MockUpstream()
    with run_server(upstream.app) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk-x", max_retries=0)
        items: list[Any] = [
            {"role": "developer", "content": "Answer briefly."},
            {"role": "user", "content": "Plan a day in Lyon, and call tool lookup first."},
        ]
        first = client.responses.create(
            model="gpt-4.1-mini",
            input=items,
            tools=TOOLS,
            store=False,
            include=["reasoning.encrypted_content"],
            max_output_tokens=300,
        )
        items += [o.model_dump(exclude_none=True) for o in first.output]
        call = next(o for o in first.output if o.type == "function_call")
        items.append(
            {"type": "function_call_output", "call_id": call.call_id, "output": "Old town."}
        )
        with client.responses.stream(
            model="gpt-4.1-mini", input=items, tools=TOOLS, store=False, instructions="Be concise."
        ) as stream:
            final = stream.get_final_response()
        items += [o.model_dump(exclude_none=True) for o in final.output]
        items.append({"role": "user", "content": [{"type": "input_text", "text": "Evening?"}]})
        client.responses.create(
            model="gpt-4.1-mini", input=items, tools=TOOLS, store=False, text=SCHEMA
        )
        client.responses.create(model="gpt-4.1-mini", input="Just a string input.")
    lines = [r.raw.decode() + "\n" for r in upstream.records("/v1/responses")]
    Path("tests/data/responses-sdk-bodies.jsonl").write_text("".join(lines))


if __name__ == "__main__":
    main()
