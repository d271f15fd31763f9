"""The load stage: what the store holds of a conversation, reconciled with the request.

In append mode the stored working history is the history, and the request
carries only the new messages. In full-history mode the request's chain
hashes find the longest stored snapshot it extends (a store that cannot be
reached, or is failing to keep what it is given, makes the turn stateless,
never a failed request). An append-mode turn first writes the conversation's
turn the store refused last time (see `turn.commit`). Either way the result
is a `Loaded` turn with every message's token count at hand.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import conversation as conv
from ..dialects import Wire
from ..dialects.chat_completions import CHAT_WIRE
from ..errors import ProxyError
from ..messages import Message, chain_hashes, digest, split_leading
from ..store import Conversation, ConvKey, StoreError
from ..tokens import RequestCounts
from .fairness import GROUP_STEP, let_others_run
from .sessions import Unwritten
from .state import SnapshotState

if TYPE_CHECKING:
    from ..context import AppContext
    from ..fastpath import Resend

log = logging.getLogger("context_proxy.chat")


@dataclass(frozen=True, slots=True)
class Loaded:
    """A reconciled turn, its token counts, and how it was loaded.

    `digests` and `hashes` are every message's (full-history mode only);
    `version` is the stored turn count an append-mode turn builds on;
    `extends` is the head of the stored snapshot the turn continues ("": none).
    `key` is the conversation's; `created` is when the stored conversation an
    append-mode turn builds on was created (one deleted and started again is another).
    """

    turn: conv.Turn
    count: RequestCounts
    stateless: bool
    version: int | None
    digests: list[bytes] | None
    hashes: list[str] | None
    extends: str
    key: ConvKey
    created: float | None = None


async def load(
    ctx: AppContext,
    key: ConvKey,
    messages: list[Message],
    model: str,
    mode: str,
    resend: Resend | None,
    wire: Wire = CHAT_WIRE,
    chained: Conversation | None = None,
) -> Loaded:
    """The turn reconciled with the store; `chained`: the stored turn whose answer a
    request continues by `previous_response_id` (an append-mode turn built on it)."""
    if mode == "append":
        return await _append(ctx, key, messages, model, wire, chained)
    return await _full(ctx, key, messages, model, resend)


async def _append(
    ctx: AppContext,
    key: ConvKey,
    messages: list[Message],
    model: str,
    wire: Wire,
    chained: Conversation | None,
) -> Loaded:
    # An append turn the store cannot write would be lost, and one it cannot
    # read would look like an unknown conversation: both are the store's 503.
    unavailable = ProxyError(
        503,
        "The conversation store is unavailable; append mode cannot supply the history.",
        type="server_error",
        code="store_unavailable",
    )
    # The conversation's last turn, answered while the store refused it, goes first:
    # this turn builds on it. Its write is also what tells that the store heals.
    kept = ctx.sessions.take_unwritten(key) if chained is None else None
    if kept is not None and not await _written(kept):
        log.warning("append turn of %s refused: its last turn is still unwritten", key.conversation)
        raise unavailable
    # A chained turn's `continued` asked already, and passes the request through.
    problem = ctx.store.problem() if chained is None else None
    if problem is not None:
        log.warning("append turn of %s refused: %s", key.conversation, problem)
        raise unavailable
    try:
        stored = chained or await ctx.store.latest(key)
    except StoreError:
        ctx.metrics.store_errors.labels("latest").inc()
        raise unavailable from None
    if stored is None:
        raise ProxyError(
            404,
            f"Unknown conversation '{key.conversation}'. Start it with "
            "a full-history request (without X-Context-Mode: append).",
            param="X-Conversation-Id",
            code="conversation_not_found",
        )
    _same_format(key, stored.state, wire.upstream_path)
    turn = conv.reconcile_append(
        messages, stored.working, stored.state, stored.position + 1, wire.items
    )
    await ctx.counter.prime(model, turn.history)
    count = RequestCounts(ctx.counter, model, turn.history, None, None, 0)
    # A chained turn is stored as a branch of its own, with no turn count to check: applied
    # after a turn committed meanwhile (another chat's, when both opened alike under a
    # derived id) it would carry that chat's messages into its own.
    version = None if chained is not None else stored.turns
    return Loaded(turn, count, False, version, None, None, stored.head, key, stored.created_at)


async def _written(kept: Unwritten) -> bool:
    """Write a kept turn to its end, even if this request is cut meanwhile (a failed write
    keeps it again): the conversation's lock, held until then, keeps its next turn from
    loading a history without it."""
    write = asyncio.ensure_future(kept.write())
    try:
        return await asyncio.shield(write)
    except asyncio.CancelledError:
        await write
        raise


def _same_format(key: ConvKey, state: Any, route: str) -> None:
    """Refuse to continue on `route` a conversation stored in another route's format.

    Its stored items would go upstream as they are: a chat `system` message in
    Anthropic's `messages`, Anthropic's blocks to OpenAI, while the request's
    own instructions are not in the history at all. Nothing stored changes.
    """
    started = state.get("route", "") if isinstance(state, dict) else ""
    if started and started != route:
        raise ProxyError(
            400,
            f"Conversation '{key.conversation}' holds a {started} history: append mode "
            f"continues it on {started} only. Use another X-Conversation-Id on {route}.",
            param="X-Conversation-Id",
            code="conversation_format_mismatch",
        )


async def _full(
    ctx: AppContext, key: ConvKey, messages: list[Message], model: str, resend: Resend | None
) -> Loaded:
    # The client resent its history: an append-mode turn kept unwritten is in it, if the
    # client has it, and would be applied after it a second time.
    if ctx.sessions.take_unwritten(key) is not None:
        log.warning("turn of %s kept unwritten: superseded by a full history", key.conversation)
    # The resent prefix's digests, hashes and counts were computed last turn.
    known, seen = (resend.known, resend.count) if resend is not None else (None, 0)
    digests = [*(known.digests[:seen] if known else ()), *map(digest, messages[seen:])]
    parent = known.hashes[seen - 1] if known and seen else ""
    hashes = [
        *(known.hashes[:seen] if known else ()),
        *chain_hashes(messages[seen:], parent, digests=digests[seen:]),
    ]
    await ctx.counter.prime(model, messages[seen:], digests[seen:])
    counts: list[int] | None = None
    if known is not None and known.model == model:
        fresh = zip(messages[seen:], digests[seen:], strict=True)
        counts = [
            *known.counts[:seen],
            *(ctx.counter.count_message(model, m, d) for m, d in fresh),
        ]
    unreachable = False
    try:
        snapshot = await ctx.store.find_snapshot(key, hashes)
    except StoreError:
        ctx.metrics.store_errors.labels("find_snapshot").inc()
        log.warning("store unreachable; reducing %s without stored state", key.conversation)
        snapshot, unreachable = None, True
    # What the store still gives is used; the turn says it will not be kept.
    stateless = unreachable or ctx.store.failing()
    archived = None
    if snapshot is None and not unreachable:
        archived = await _trimmed(ctx, key, messages, digests)
    if len(messages) - seen > GROUP_STEP:  # reconciling and counting it hold the loop next
        await let_others_run()
    turn = conv.reconcile_full(
        messages,
        hashes,
        snapshot.position if snapshot else None,
        snapshot.state if snapshot else None,
        archived,
    )
    count = RequestCounts(ctx.counter, model, turn.history, digests, counts, seen)
    extends = snapshot.head if snapshot is not None else ""
    return Loaded(turn, count, stateless, None, digests, hashes, extends, key)


async def _trimmed(
    ctx: AppContext, key: ConvKey, messages: list[Message], digests: list[bytes]
) -> conv.Archived | None:
    """How much of a request that extends no snapshot the store holds already.

    A client that trims its own history resends its instructions and a
    window of the stored conversation ending with the answer stored last,
    then what is new: when the store's instructions and the archived chain
    up to that answer are those messages, only what follows them is new.
    The store is asked only when the request holds the answer this process
    stored last.
    """
    answer = ctx.sessions.last_answer(key)
    if answer is None or answer not in digests:
        return None
    operation = "latest"
    try:
        stored = await ctx.store.latest(key)
        state = SnapshotState.from_json(stored.state) if stored is not None else None
        if stored is None or state is None or not state.answer_hash or not stored.working:
            return None
        leading = len(split_leading(messages)[0])
        instructions = [digest(m) for m in stored.working[: state.leading]]
        end = conv.window_end(digests, leading, digest(stored.working[-1]))
        if leading != state.leading or digests[:leading] != instructions or not end:
            return None  # other instructions are new: they are archived with the rest
        operation = "chain"
        chain = await ctx.store.chain(key, state.answer_hash, limit=end - leading)
    except StoreError:  # the window is archived anew: more rows, nothing lost
        ctx.metrics.store_errors.labels(operation).inc()
        return None
    if [digest(m) for m in chain] != digests[leading:end]:
        return None  # a window the client changed, or one this store never held
    return conv.Archived(end, state.answer_hash, state.stats)
