"""The commit stage: a completed turn is stored, and what it leaves for later is started.

What a turn writes is decided by `proxy.outcome` (pure); this stage writes
it, rebases an append-mode turn that lost a race to another replica, and
then starts the turn's background work. An append-mode turn the store
refuses is kept in its session and written before the conversation's next
turn: its client sends only what is new, so the turn exists nowhere else.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence, Set
from typing import TYPE_CHECKING, Any

import orjson

from ..blocks import continued
from ..messages import Message, digest
from ..outcome import MAX_REBASES, Outcome, rebase, turn_commit
from ..store import ArchiveEntry, Conflict, StoreError
from .background import embed_next, prepare_next
from .sessions import Unwritten

if TYPE_CHECKING:
    from ..context import AppContext

log = logging.getLogger("context_proxy.chat")


async def commit(
    ctx: AppContext,
    outcome: Outcome,
    answer: Sequence[Message],
    answer_id: str | None = None,
    *,
    kept: bool = False,
) -> bool:
    """Store the completed turn; in append mode, rebase onto turns other replicas committed.

    `answer_id` names the answer where a client may chain a request to it.
    True: nothing is left to write (a full-history turn's write may still be
    queued); False: the store refused it, and an append-mode turn is kept in
    its session to write before the conversation's next turn. A `kept` turn
    is not rebased: a turn stored since (by another process) came after it,
    and it would follow that turn out of order.
    """
    if ctx.sessions.forgotten_since(outcome.key, outcome.began):
        log.info("turn of %s not stored: deleted while it ran", outcome.key.conversation)
        return True
    written = await _commit(ctx, outcome, answer, answer_id, kept)
    if not written and outcome.version is not None:
        retry = functools.partial(_write_kept, ctx, outcome, answer, answer_id)
        ctx.sessions.unwritten(outcome.key, Unwritten(retry, _size(outcome, answer)))
        log.warning("turn of %s kept to write before its next turn", outcome.key.conversation)
    return written


async def _write_kept(
    ctx: AppContext, outcome: Outcome, answer: Sequence[Message], answer_id: str | None
) -> bool:
    """A kept turn's write. Its conversation, deleted meanwhile by another process and
    maybe started again there, holding as many turns, takes it no more: the turn count
    the write checks cannot tell, its creation can. A write whose answer was lost (Redis
    timed out after running it) may have stored it: written again, it would come twice."""
    try:
        latest = await ctx.store.latest(outcome.key)
    except StoreError:  # the write tells: it fails as well, or checks the turn count
        return await commit(ctx, outcome, answer, answer_id, kept=True)
    if latest is None or latest.created_at != outcome.created:
        log.error("turn of %s not stored: deleted while it was kept", outcome.key.conversation)
        return True
    version = outcome.version or 0
    if latest.turns == version + 1 and latest.head == outcome.turn.head:
        log.info("turn of %s kept unwritten was stored already", outcome.key.conversation)
        return True
    return await commit(ctx, outcome, answer, answer_id, kept=True)


async def _commit(
    ctx: AppContext,
    outcome: Outcome,
    answer: Sequence[Message],
    answer_id: str | None,
    kept: bool,
) -> bool:
    if outcome.prefill is not None:  # the client keeps its prefill and the answer as one
        answer = continued(outcome.prefill, answer)
    digests = [digest(m) for m in answer]  # once, whatever the rebases
    # Started before the turn is written, so its state tells the process serving the
    # next turn that a preparation is under way (`SnapshotState.prepared_for`).
    if outcome.branch is not None:
        prepare_next(ctx, outcome, outcome.branch)
    for _ in range(MAX_REBASES):
        try:
            turn = turn_commit(outcome, answer, time.time(), digests)
            # An append-mode turn may conflict, so it is awaited here; a full-history
            # turn is queued, and awaited below (with workers), once this process knows it.
            written = await ctx.store.commit(turn, wait=turn.expected_turns is not None)
            if written is not None:
                written.add_done_callback(functools.partial(_written, ctx, outcome))
            if outcome.turn.hashes:  # a full-history turn: the next may resend a window
                ctx.sessions.stored(outcome.key, digests[-1])
            _continue_branch(ctx, outcome, turn.snapshot.head)
            embed_next(ctx, outcome)
            if answer_id is not None and ctx.settings.responses.manage_server_state:
                planned, added = _branch(outcome, turn.archive)
                answer_hash = turn.archive[-1].hash
                ctx.sessions.answered(outcome.key, answer_id, answer_hash, planned, added)
            if written is not None and ctx.settings.server.workers > 1:
                # The answer's end waits for the write: a client that has it may send
                # its next turn to another worker on the store, which knows only what
                # is written. A process alone answers its next lookup from memory, and
                # its answers do not wait. `wait` neither raises the write's error
                # (`_written` reports it) nor cancels the write when the client leaves.
                await asyncio.wait((written,))
            return True
        except Conflict:
            if kept:
                log.error("turn of %s not stored: turns came after it", outcome.key.conversation)
                return True
            try:
                latest = await ctx.store.latest(outcome.key)
            except StoreError:
                break
            if latest is None or latest.created_at != outcome.created:
                # Deleted meanwhile (by another process): applied to what is stored now,
                # the turn would bring a deleted conversation's messages into a new one.
                log.info("turn of %s not stored: deleted while it ran", outcome.key.conversation)
                return True
            outcome = rebase(outcome, latest)
        except StoreError as exc:
            ctx.metrics.store_errors.labels("commit").inc()
            log.error("could not store turn of %s: %s", outcome.key.conversation, exc)
            return False
    ctx.metrics.store_errors.labels("commit").inc()
    log.error("could not store turn of %s: too many concurrent turns", outcome.key.conversation)
    return False


def _size(outcome: Outcome, answer: Sequence[Message]) -> int:
    """Roughly the bytes a kept turn holds: its history and its answer."""
    return len(orjson.dumps([*outcome.turn.history, *answer]))


async def write_kept(ctx: AppContext) -> None:
    """As the process stops: try once more to write each append-mode turn kept unwritten
    (the store may have room again); one line says how many are lost."""
    kept = ctx.sessions.take_every_unwritten()
    lost = sum([not await turn.write() for turn in kept])
    if lost:
        log.error("%d append-mode turn(s) not stored: the store refused them to the end", lost)


def _branch(outcome: Outcome, archived: Sequence[ArchiveEntry]) -> tuple[Set[str], list[str]]:
    """The chain hashes of the branch the turn's answer ends, when the turn tracks it: its
    branch as planned, and what it archived; none when it was applied after another turn
    (a rebase in append mode), whose branch may be another chat's."""
    turn, planned = outcome.turn, outcome.lineage
    if planned is None or (not turn.hashes and turn.parent not in planned):
        return frozenset(), []
    return planned, [entry.hash for entry in archived]


def _continue_branch(ctx: AppContext, outcome: Outcome, head: str) -> None:
    """The branch's next turn extends the snapshot `head`: its preparations move there."""
    if outcome.branch is not None:
        ctx.sessions.advance(outcome.key, outcome.branch, head)


def _written(ctx: AppContext, outcome: Outcome, done: asyncio.Future[Any]) -> None:
    """A full-history turn's write: a failure is counted and logged, and the answer goes
    out all the same (the client resends the history, and the next turn archives it)."""
    error = None if done.cancelled() else done.exception()
    if done.cancelled() or error is not None:
        ctx.metrics.store_errors.labels("commit").inc()
        log.error("could not store turn of %s: %s", outcome.key.conversation, error or "cancelled")
