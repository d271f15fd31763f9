"""Work a turn leaves for after its answer went out: summary preparation and embeddings.

Both are extras: a failure is counted and logged, and costs a later turn at
most a wait (a summary made when needed) or a recall (a message without a
vector). Tasks are tracked, one per kind and conversation branch, bounded in
all, and cancelled at shutdown or when their conversation is forgotten.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Hashable
from typing import TYPE_CHECKING, Any

from ..embeddings import Embedder, embed_pending
from ..reduction.types import SummaryRequest
from ..store import ConvKey, StoreError
from ..summarizer import SummarizerUnavailable
from ..upstream import openai_side
from .sessions import Branch

if TYPE_CHECKING:
    from ..context import AppContext
    from ..outcome import Outcome

log = logging.getLogger("context_proxy.background")


class Background:
    """Tasks started after a response: at most one per key, at most `limit` in all."""

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._tasks: dict[tuple[ConvKey, Hashable], asyncio.Task[None]] = {}

    def spawn(self, key: tuple[ConvKey, Hashable], work: Coroutine[Any, Any, None]) -> bool:
        if key in self._tasks or len(self._tasks) >= self.limit:
            work.close()
            return False
        task = asyncio.create_task(work)
        self._tasks[key] = task
        task.add_done_callback(lambda done: self._forget(key, done))
        return True

    def _forget(self, key: tuple[ConvKey, Hashable], task: asyncio.Task[None]) -> None:
        # A task cancelled with its conversation ends after another may take its key.
        if self._tasks.get(key) is task:
            del self._tasks[key]

    def __len__(self) -> int:
        return len(self._tasks)

    def holds(self, conversation: ConvKey) -> bool:
        return any(key[0] == conversation for key in self._tasks)

    def cancel(self, conversation: ConvKey) -> None:
        """Stop the conversation's tasks: it is being forgotten."""
        for key, task in list(self._tasks.items()):
            if key[0] == conversation:
                task.cancel()
                del self._tasks[key]

    async def settled(self) -> None:
        """Return once every task has finished, those the finishing ones started too
        (a replay that must not depend on the machine's speed waits so)."""
        while self._tasks:
            # `wait`, not `gather`: a caller giving up waiting cancels none of the tasks.
            await asyncio.wait(list(self._tasks.values()))

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def prepare_next(ctx: AppContext, outcome: Outcome, branch: Branch) -> None:
    """Summarise what the branch's next reduction will evict, now that the client has its answer.

    One preparation per stretch between reductions: the span grows every
    turn, and the first one prepared spares the crossing turn its wait.
    """
    if not outcome.reduction.prepare:
        return
    now = outcome.reduction.state.stretch
    if branch.stretch == now:
        return
    job = _prepare(ctx, outcome, branch, outcome.reduction.prepare[0])
    if ctx.background.spawn((outcome.key, ("prepare", id(branch))), job):
        branch.stretch = now


async def _prepare(
    ctx: AppContext, outcome: Outcome, branch: Branch, request: SummaryRequest
) -> None:
    try:
        result = await ctx.summarizer.summarize(
            request, model=outcome.model, headers=dict(outcome.upstream_headers)
        )
    except SummarizerUnavailable as exc:
        ctx.metrics.summarizer_failures.inc()
        log.info("background summary of %s failed (%s)", outcome.key.conversation, exc)
        return
    # Earlier texts describe spans a finished reduction already replaced.
    ctx.sessions.prepared(
        outcome.key, branch, {request.key: result.text}, {request.key: result.tokens}
    )
    ctx.metrics.summaries_prepared.inc()
    # Kept for the crossing turn, which another process may serve.
    try:
        await ctx.store.keep_summary(outcome.key, request.key, result.text)
    except StoreError as exc:
        ctx.metrics.store_errors.labels("summary").inc()
        log.info("could not keep the summary of %s: %s", outcome.key.conversation, exc)


def embed_next(ctx: AppContext, outcome: Outcome) -> None:
    """Embed what this turn archived, after the response, for the next turns' recall."""
    if ctx.embedder is not None:
        ctx.background.spawn((outcome.key, "embed"), _embed(ctx, ctx.embedder, outcome))


async def _embed(ctx: AppContext, embedder: Embedder, outcome: Outcome) -> None:
    try:
        headers = openai_side(
            dict(outcome.upstream_headers), outcome.provider, ctx.settings.upstream.api_key
        )
        done, failed = await embed_pending(embedder, ctx.store, outcome.key, headers)
    except StoreError as exc:
        ctx.metrics.store_errors.labels("embeddings").inc()
        log.info("could not store embeddings of %s: %s", outcome.key.conversation, exc)
        return
    ctx.metrics.embeddings.labels("ok").inc(done)
    ctx.metrics.embeddings.labels("failed").inc(failed)
