"""A message's identity (`messages.as_meant`): every JSON a client may send has one.

The identity is computed for every message of every request, before any dialect
validates it; a client's malformed block must reach the upstream's own 400, not
make the proxy fail.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import ProxyError
from proxy.messages import as_meant, digest

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
    odd = digest({"role": "user", "content": [{"type": kind, "text": "hi"}]})
    assert len(odd) == 16
    # Not a text block, so not read as its string: another message than "hi".
    assert odd != digest({"role": "user", "content": "hi"})
    nested = [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": kind, "text": "x"}]}]
    plain = [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]
    assert digest({"role": "user", "content": nested}) != digest({"role": "user", "content": plain})


BLOCKS = st.fixed_dictionaries(
    {"type": JSON, "text": JSON},
    optional={"annotations": JSON, "logprobs": JSON, "cache_control": JSON, "content": JSON},
)


@given(st.sampled_from(["user", "assistant", "tool"]), st.lists(BLOCKS | JSON, max_size=3), JSON)
def test_any_json_message_has_an_identity(role: str, blocks: list[Any], kind: Any) -> None:
    message = {"role": role, "type": kind, "content": blocks}
    sent = copy.deepcopy(message)
    try:
        identity = digest(message)
    except ProxyError:  # a message nested too deep: the client's 400, not the proxy's 500
        return
    assert len(identity) == 16
    # The identity reads the message; what goes upstream is the client's, untouched.
    assert message == sent
    # What says nothing is left out once: the identity of the identity is the same.
    assert digest(as_meant(message)) == identity
