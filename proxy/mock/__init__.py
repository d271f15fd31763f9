"""The mock upstream: one deterministic stand-in for OpenAI and Anthropic, no key, no network.

The tests, `demo`, `simulate` and the bench all talk to it. `MockUpstream`
(`server.py`) validates each request the way the provider does (so a
reduction that split a tool chain shows up as a 400, not as a pretty
number), answers it in a chosen voice (`voice.py`), records it, and
bills it with the prompt-cache hit the provider would have given.
`canned.py` is its fast path for load tests: fixed answers, no checks.

    python -m proxy.mock --port 9000            # validating, on 127.0.0.1
    python -m proxy.mock --port 9000 --canned   # fixed answers, for load tests
"""

from __future__ import annotations

from .server import Call, MockUpstream, Recorded
from .voice import ECHO, PROSE, Voice

__all__ = ["ECHO", "PROSE", "Call", "MockUpstream", "Recorded", "Voice"]
