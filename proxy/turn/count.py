"""The count stage (Anthropic, opt-in): the upstream's exact count of a turn near its trigger.

Claude's tokenizer is not available offline, so the reduction works on an
estimate. With `[anthropic] count_tokens = true`, a turn whose estimate
comes within `NEAR` of the trigger asks Anthropic's
`/v1/messages/count_tokens` how many tokens the reduced request holds; what
the estimate missed is then reserved, and the turn reduced again if it no
longer fits. A count that fails costs nothing but the time it took: the
estimate stands, as without the option.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..dialects import Item, Wire, anthropic_cache
from ..reduction.types import Reduction
from ..upstream import ANTHROPIC_SIDE_CALL_HEADERS, SideCallFailed, post_json

if TYPE_CHECKING:
    from ..context import AppContext

log = logging.getLogger("context_proxy.chat")

# Share of the trigger's budget from which a turn's estimate is checked: Claude's
# tokenizer makes up to about a fifth more tokens of a text than the estimate's.
NEAR = 0.8
# What of a Messages request counts toward its input tokens (count_tokens takes only these).
COUNTED = ("model", "system", "tools", "tool_choice", "thinking", "mcp_servers")
COUNT_PATH = "/v1/messages/count_tokens"


async def undercount(
    ctx: AppContext,
    wire: Wire,
    payload: dict[str, Any],
    reduction: Reduction,
    defined: int,
    limit: int,
    headers: dict[str, str],
) -> int:
    """Tokens the estimate of the reduced request misses by the upstream's count (0: none, or
    the turn is not near its trigger, or the count failed)."""
    if reduction.tokens_out < NEAR * limit:
        return 0
    body = count_body(wire, payload, reduction.messages)
    url = str(ctx.url_for(COUNT_PATH, wire.provider))
    timeout = ctx.settings.reduction.summarizer_timeout_s
    try:
        data = await post_json(
            ctx.client, url, body, headers, timeout, allowed=ANTHROPIC_SIDE_CALL_HEADERS
        )
        exact = int(data["input_tokens"])
    except (SideCallFailed, KeyError, TypeError, ValueError) as exc:
        log.info("count_tokens failed (%s); the estimate stands", exc)
        return 0
    return max(0, exact - (reduction.tokens_out + defined))


def count_body(wire: Wire, payload: dict[str, Any], items: Sequence[Item]) -> dict[str, Any]:
    """The count request for the reduced `items`: what the turn forwards, breakpoints
    kept within Anthropic's four as the forwarded request's are."""
    history = list(anthropic_cache.within_limit(payload, wire.forwarded(items)))
    return {k: payload[k] for k in COUNTED if k in payload} | {"messages": history}
