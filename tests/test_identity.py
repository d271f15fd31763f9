"""A message's identity (`messages.as_meant`): every JSON a client may send has one.

The identity is computed for every message of every request, before any dialect
validates it; a client's malformed block must reach the upstream's own 400, not
make the proxy fail.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import ProxyError
from proxy.messages import digest

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@pytest.mark.parametrize("kind", [["text"], {"a": 1}])
def test_a_text_block_whose_type_is_not_a_string_is_hashed_not_raised(kind: Any) -> None:
    # An unhashable `type` was looked up among the text types: a 500 for any client.
    digest({"role": "user", "content": [{"type": kind, "text": "hi"}]})
    nested = [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": kind, "text": "x"}]}]
    digest({"role": "user", "content": nested})


BLOCKS = st.fixed_dictionaries(
    {"type": JSON, "text": JSON},
    optional={"annotations": JSON, "logprobs": JSON, "cache_control": JSON, "content": JSON},
)


@given(st.sampled_from(["user", "assistant", "tool"]), st.lists(BLOCKS | JSON, max_size=3), JSON)
def test_any_json_message_has_an_identity(role: str, blocks: list[Any], kind: Any) -> None:
    message = {"role": role, "type": kind, "content": blocks}
    with contextlib.suppress(ProxyError):  # a message nested too deep: the client's 400
        digest(message)
