"""The reduce stage: the pure core's reduction, with the summaries it asks for.

The core (`proxy.reduction`) never calls anyone: when it needs a summary
it says so, this stage asks the summariser and reduces again. A summary the
branch prepared in the background is handed in up front, so the turn that
crosses the trigger rarely waits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING

from ..dialects import Wire
from ..dialects.chat_completions import CHAT_WIRE
from ..errors import ProxyError
from ..reduction import reduce
from ..reduction.tail import Tail
from ..reduction.types import KINDS, ContextTooLarge, Reduction, is_masked
from ..store import StoreError
from ..summarizer import SummarizerUnavailable
from .fairness import GROUP_STEP, grouped_in_steps
from .load import Loaded
from .sessions import Branch

if TYPE_CHECKING:
    from ..context import AppContext

log = logging.getLogger("context_proxy.chat")


async def reduce_turn(
    ctx: AppContext,
    loaded: Loaded,
    model: str,
    reserved: int,
    strategy: str,
    headers: dict[str, str],
    branch: Branch,
    memo: Tail | None = None,
    wire: Wire = CHAT_WIRE,
) -> tuple[Reduction, int, int]:
    """The turn's reduction, and the summaries made for it and their tokens.

    A failing summariser costs this turn its summary, never the request: the
    window result the core prepared alongside its requests is forwarded.
    """
    turn, count = loaded.turn, loaded.count
    if strategy == "none":
        unreduced = Reduction(
            messages=turn.history,
            state=turn.working.state,
            kinds=("none",),
            tokens_out=count.total,
        )
        return unreduced, 0, 0
    # A stretch that has its preparation already needs no other, and without
    # one to compute the core answers a turn near the trigger at a glance.
    preparing = branch.stretch != turn.working.state.stretch
    policy = ctx.policy(strategy, preparing=preparing, dialect=wire.items)
    budget = ctx.budget(model, reserved)
    prepared = branch.texts

    def run(summaries: dict[str, str], memo: Tail | None) -> Reduction:
        try:
            return reduce(turn.working, policy, budget, count, summaries, memo=memo)
        except ContextTooLarge as exc:
            # Anthropic's own words for it, which clients match to compact or fall back
            # to a model with a larger window.
            too_long = f"prompt is too long: {exc.needed} tokens > {exc.available} maximum. {exc}"
            raise ProxyError(
                400,
                str(exc),
                param=wire.history_field,
                code="context_length_exceeded",
                anthropic_message=too_long,
            ) from None

    # mask groups its own cleared copy of the tail, which a memo of this one cannot serve.
    if memo is None and len(turn.working.tail) > GROUP_STEP and not is_masked(strategy):
        memo = await grouped_in_steps(turn.working.tail, count, policy)
    reduction = run(prepared, memo)
    if reduction.summary_requests and branch.stretch is not None:
        # A preparation was started for this branch, maybe by another process.
        kept = await _kept(ctx, loaded)
        if kept.keys() - prepared.keys():
            prepared = {**kept, **prepared}
            reduction = run(prepared, reduction.tail)
    if not reduction.summary_requests:
        return reduction, *_made_ahead(loaded, reduction, prepared, branch)
    ctx.metrics.summary_waits.inc()
    try:
        results = await asyncio.gather(
            *(
                ctx.summarizer.summarize(r, model=model, headers=headers)
                for r in reduction.summary_requests
            )
        )
    except SummarizerUnavailable as exc:
        ctx.metrics.summarizer_failures.inc()
        log.warning("summarizer failed (%s); forwarding a window reduction", exc)
        return with_kind(reduction, "fallback"), 0, 0
    texts = {
        req.key: res.text for req, res in zip(reduction.summary_requests, results, strict=True)
    }
    ctx.metrics.summaries_made.inc(len(results))
    summaries = {**prepared, **texts}
    again = run(summaries, reduction.tail)
    ahead, spent = _made_ahead(loaded, again, prepared, branch)
    return again, len(results) + ahead, sum(r.tokens for r in results) + spent


def _made_ahead(
    loaded: Loaded, reduction: Reduction, prepared: dict[str, str], branch: Branch
) -> tuple[int, int]:
    """The summaries made in the background that `reduction` is the first to use, and
    what the summariser spent on them (known for those this process made).

    They count in the conversation's analytics with the turn that uses them, as
    the ones a turn waits for do: a preparation that is never used counts nowhere.
    """
    if not prepared:
        return 0, 0
    before = set(loaded.turn.working.state.summaries)
    key_of = {text: key for key, text in prepared.items()}
    new = [block for block in reduction.state.summaries if block not in before]
    used = [key_of[block.text] for block in new if block.text in key_of]
    return len(used), sum(branch.tokens.get(key, 0) for key in used)


async def _kept(ctx: AppContext, loaded: Loaded) -> dict[str, str]:
    try:
        return await ctx.store.kept_summaries(loaded.key)
    except StoreError as exc:
        ctx.metrics.store_errors.labels("summary").inc()
        log.info("could not read the kept summaries of %s: %s", loaded.key.conversation, exc)
        return {}


def with_kind(reduction: Reduction, kind: str) -> Reduction:
    """`reduction`, also reported as `kind` (a fallback, a stateless turn)."""
    kinds = set(reduction.kinds) | {kind}
    return dataclasses.replace(
        reduction, kinds=tuple(k for k in KINDS if k in kinds), summary_requests=()
    )
