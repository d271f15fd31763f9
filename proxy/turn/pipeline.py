"""A conversation request, as named stages: identify, load, reduce, forward, relay, commit.

Each stage lives in a module of its own beside this one; this module only
reads the request's options and runs the stages in order. What belongs to
a wire format (reading the body, writing the reduced history back, reading
the answer) is the route's `Wire`'s (`dialects/`); the stages never look
inside a request themselves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hmac
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .. import stopping
from ..context import AppContext
from ..conversation import tenant_of
from ..dialects import Item, Wire
from ..dialects.anthropic import ANTHROPIC_WIRE
from ..dialects.chat_completions import CHAT_WIRE
from ..dialects.responses import RESPONSES_WIRE
from ..errors import ProxyError
from ..fastpath import Resend
from ..intake import check_content_type, decoded, read_body
from ..outcome import Outcome
from ..reduction.types import STRATEGIES, is_strategy
from ..store import Conversation, ConvKey, StoreError
from ..upstream import bearer_token, forward_headers, refused_operator_key, response_headers
from .count import undercount
from .fairness import LARGE_BODY, let_others_run
from .load import load
from .recall import Unarchived, branch_of, recall_into
from .reduce import reduce_turn, with_kind
from .relay import Oversized, read_whole, relay, send
from .state import SnapshotState

access = logging.getLogger("context_proxy.access")
# Set on an answer that was relayed but not stored (the turn is archived by the next one).
NOT_STORED = "x-context-not-stored"


async def chat_completions(request: Request) -> Response:
    """`POST /v1/chat/completions`."""
    return await conversation_turn(request, CHAT_WIRE)


async def responses(request: Request) -> Response:
    """`POST /v1/responses`."""
    return await conversation_turn(request, RESPONSES_WIRE)


async def messages(request: Request) -> Response:
    """`POST /v1/messages` (Anthropic)."""
    return await conversation_turn(request, ANTHROPIC_WIRE)


async def conversation_turn(request: Request, wire: Wire) -> Response:
    ctx: AppContext = request.state.ctx
    started = time.perf_counter()
    given = header_map(request)
    authorize(ctx, given)  # before the body is read: a wrong key costs nothing
    check_content_type(given.get("content-type"))
    server = ctx.settings.server
    body = await read_body(request, server.max_body_bytes, server.body_timeout_s)
    if given.get("content-encoding"):
        body = decoded(body, given["content-encoding"], server.max_body_bytes)
        if len(body) > LARGE_BODY:  # inflating it held the event loop, as a parse does
            await let_others_run()
    resend = Resend(
        ctx.sessions,
        given,
        body,
        enabled=server.fast_path,
        field=wire.history_field,
        opening=wire.opening,
    )
    payload = wire.parse(body, resend, resend.reparse(), server.max_messages)
    if len(body) > LARGE_BODY:  # its parse held the event loop: let the others in
        await let_others_run()
    if ctx.recorder is not None:
        await ctx.recorder.record(payload)
    mode, strategy = options(ctx, given)
    provider = ctx.providers[wire.provider]
    headers = forward_headers(request.headers.items(), provider)
    headers.pop("content-encoding", None)  # what goes upstream is the decoded body, or ours
    streaming = wire.streams(payload)
    named = bool(given.get("x-conversation-id"))  # by the client, not derived
    chained: Conversation | None = None
    began: float | None = None  # see `plan`
    if wire.server_state(payload) is not None:  # the provider holds the conversation
        # A chained turn reads the stored state it continues here, before it waits for
        # its conversation's lock: a deletion after this is one it must not undo.
        began = time.monotonic()
        chained = await continued(ctx, wire, payload, given)
        if chained is None:
            return await as_sent(ctx, wire, body, headers, streaming, request.url.query)
        given = {**given, "x-conversation-id": chained.key.conversation}
        resend, mode = Resend(ctx.sessions, given, body, enabled=False), "append"
    messages = wire.history(payload)
    prefill = wire.prefill(messages, appended=mode == "append")
    if prefill is not None:  # the answer's start: the turn is the history before it
        messages = messages[:-1]
        resend = Resend(ctx.sessions, given, body, enabled=False)
    key = resend.conversation(wire.opening(payload))  # identify
    stopping.leave_conversation(request, key.conversation)  # for a 503 made outside
    # Append-mode turns of one conversation apply in arrival order.
    lock = ctx.locks.get(key) if mode == "append" else None
    if lock is not None:
        await lock.acquire()
    outcome: Outcome | None = None
    try:
        asked = Asked(wire, payload, messages, mode, strategy, headers, named, prefill, chained)
        outcome = await plan(ctx, key, asked, resend.of(key), began)
        forwarded = outcome.reduction.messages
        content = wire.render(body, payload, [*forwarded, prefill] if prefill else forwarded)
        url = ctx.url_for(wire.upstream_path, wire.provider, request.url.query)
        response = await send(ctx, url, content, headers, events=streaming)
        ctx.metrics.child(ctx.metrics.upstream_latency, wire.upstream_path).observe(
            time.perf_counter() - started
        )
    except BaseException as exc:
        if lock is not None:
            lock.release()
        if isinstance(exc, ProxyError):  # the proxy's own answer: its line, and the id
            access_log(wire, key, outcome, mode, strategy, exc.status, started)
            exc.headers["x-conversation-id"] = key.conversation
        elif isinstance(exc, asyncio.CancelledError):  # cut: the line, if `stopping` answers
            line = functools.partial(
                access_log, wire, key, outcome, mode, strategy, started=started
            )
            stopping.leave_cut_line(request, line)
        raise
    release = lock.release if lock is not None else _noop
    access_log(wire, key, outcome, mode, strategy, response.status_code, started)
    limit = ctx.settings.upstream.max_answer_bytes
    if streaming and response.status_code == 200:  # relay, committing at the end
        return StreamingResponse(
            relay(
                ctx, response, outcome, wire.assembler(limit), release, wire.provider == "anthropic"
            ),
            status_code=200,
            headers={**response_headers(response.headers), **outcome.headers()},
        )
    try:
        answer = await read_whole(ctx, response, outcome, wire.answer)  # relay and commit
    except BaseException:
        await response.aclose()
        release()
        raise
    ok = response.status_code == 200
    extra = outcome.headers() if ok else {"x-conversation-id": key.conversation}
    if isinstance(answer, Oversized):
        return StreamingResponse(
            answer.chunks(release),
            status_code=response.status_code,
            headers={**response_headers(response.headers), **extra, NOT_STORED: "too-large"},
        )
    await response.aclose()
    release()
    return Response(
        refused_operator_key(provider, response.status_code) or answer,
        status_code=response.status_code,
        headers={**response_headers(response.headers), **extra},
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Asked:
    """What a conversation request asks, as read from it: the input of `plan`.

    `headers` go upstream. `named`: the client named the conversation (its id is
    not derived). `prefill`: the answer's start, forwarded after the reduced
    history and stored as the answer's. `chained`: the stored turn a request
    chained by `previous_response_id` continues.
    """

    wire: Wire
    payload: dict[str, Any]
    messages: list[Item]
    mode: str
    strategy: str
    headers: dict[str, str]
    named: bool = False
    prefill: Item | None = None
    chained: Conversation | None = None


async def plan(
    ctx: AppContext,
    key: ConvKey,
    asked: Asked,
    resend: Resend | None = None,
    began: float | None = None,
) -> Outcome:
    """Load, reconcile and reduce the turn: what goes upstream, and what to store after.

    `began`: when the turn started reading stored state (a deletion after it is one the
    turn must not undo); now when not given.
    """
    wire, payload, strategy, headers = asked.wire, asked.payload, asked.strategy, asked.headers
    messages, prefill, named = asked.messages, asked.prefill, asked.named
    began = time.monotonic() if began is None else began
    model = str(payload["model"])
    loaded = await load(ctx, key, messages, model, asked.mode, resend, wire, asked.chained)
    branch = ctx.sessions.branch(key, loaded.extends, loaded.turn.prior)
    memo = resend.memo(model, loaded.turn) if resend is not None and strategy != "none" else None
    # Tool definitions and schemas fill the window too: the history gets what they leave.
    defined = ctx.counter.count_definitions(model, wire.definitions(payload))
    if prefill is not None:  # forwarded whole, whatever the reduction keeps
        defined += ctx.counter.count_message(model, prefill)
    reserved = wire.reserved_output(payload) + defined
    reduction, made, spent = await reduce_turn(
        ctx, loaded, model, reserved, strategy, headers, branch, memo, wire
    )
    if wire.provider == "anthropic" and ctx.settings.anthropic.count_tokens and strategy != "none":
        limit = ctx.budget(model, reserved).limit
        sent = reduction
        if prefill is not None:  # forwarded after the history: counted with it
            sent = dataclasses.replace(reduction, messages=(*reduction.messages, prefill))
        missed = await undercount(ctx, wire, payload, sent, defined, limit, headers)
        if reduction.tokens_out + missed > limit:  # the estimate fell short: reduce again
            # A reserved token takes trigger_ratio of one from the history's budget,
            # which must lose all that was missed.
            reserved += math.ceil(missed / ctx.settings.reduction.trigger_ratio)
            reduction, more, tokens = await reduce_turn(
                ctx, loaded, model, reserved, strategy, headers, branch, None, wire
            )
            made, spent = made + more, spent + tokens
    if resend is not None and loaded.digests is not None and loaded.hashes is not None:
        resend.remember(
            key, messages, loaded.digests, loaded.hashes, loaded.count, loaded.turn, reduction, memo
        )
    recalled: int | None = 0 if ctx.settings.recall.enabled else None
    turn = loaded.turn
    # A derived id joins chats that only opened alike (another user's, maybe): such a
    # turn recalls from the branch its history is archived under (by chain hashes), and
    # nothing when that is not at hand. A conversation the client named is its own to
    # search whole.
    lineage = None if named or not ctx.settings.recall.enabled else branch_of(ctx, key, turn)
    tracked = lineage.hashes if lineage is not None else frozenset()
    if ctx.settings.recall.enabled and (named or lineage is not None):
        unarchived: Unarchived | None = None
        if asked.mode != "append":  # what the store lacks of the history the client sent
            archived = len(turn.history) - len(turn.new)
            unarchived = Unarchived(turn.history, archived, bool(loaded.extends))
        reduction, recalled = await recall_into(
            ctx, key, reduction, model, reserved, headers, wire.items, unarchived, lineage
        )
    if loaded.stateless:
        reduction = with_kind(reduction, "stateless")
    tokens_in = loaded.count.total + defined
    if defined:
        reduction = dataclasses.replace(reduction, tokens_out=reduction.tokens_out + defined)
    ctx.metrics.turn(reduction.kinds, tokens_in, reduction.tokens_out)
    return Outcome(
        key,
        loaded.turn,
        reduction,
        tokens_in,
        made,
        spent,
        loaded.stateless,
        loaded.version,
        model,
        headers,
        recalled,
        branch,
        estimated=ctx.estimates(wire.provider),
        provider=wire.provider,
        began=began,
        prefill=prefill,
        lineage=None if named or not ctx.settings.recall.enabled else tracked,
        route=wire.upstream_path,
        created=loaded.created,
    )


async def continued(
    ctx: AppContext, wire: Wire, payload: dict[str, Any], given: dict[str, str]
) -> Conversation | None:
    """The stored turn a request chained to the latest answer this process relayed for its
    conversation continues, as an append-mode turn (`[responses] manage_server_state`);
    None: the request goes as sent.

    The store must still end with that answer (not a later turn, from another
    process, say); the chain's id then leaves the payload: the request goes
    upstream stateless, its history supplied by that stored turn and reduced,
    whatever is committed while it waits for its conversation's lock.
    """
    previous = payload.get("previous_response_id")
    if not ctx.settings.responses.manage_server_state or wire.server_state(payload) != (
        "previous_response_id"
    ):
        return None
    found = ctx.sessions.chained(tenant_of(bearer_token(given)), str(previous))
    if found is None:
        return None
    key, answer_hash = found
    if ctx.store.problem() is not None:  # it could not keep the turn: OpenAI holds the chain
        return None
    try:
        latest = await ctx.store.latest(key)
    except StoreError:
        return None  # OpenAI still holds the chain
    state = SnapshotState.from_json(latest.state) if latest is not None else None
    if state is None or state.answer_hash != answer_hash:
        return None
    del payload["previous_response_id"]
    return latest


async def as_sent(
    ctx: AppContext,
    wire: Wire,
    body: bytes,
    headers: dict[str, str],
    streaming: bool,
    query: str,
) -> Response:
    """Forward the request unchanged and relay the answer; nothing is reduced or stored."""
    url = ctx.url_for(wire.upstream_path, wire.provider, query)
    response = await send(ctx, url, body, headers, events=streaming)
    refused = refused_operator_key(ctx.providers[wire.provider], response.status_code)
    if refused is not None:
        await response.aclose()
        return Response(refused, status_code=response.status_code, media_type="application/json")
    return StreamingResponse(
        response.aiter_raw(),
        status_code=response.status_code,
        headers={**response_headers(response.headers), "x-context-reduction": "passthrough"},
        background=BackgroundTask(response.aclose),
    )


def options(ctx: AppContext, headers: Mapping[str, str]) -> tuple[str, str]:
    """The request's mode (full or append) and strategy, from its headers and the settings."""
    mode = headers.get("x-context-mode", "full").strip().lower()
    if mode not in ("full", "append"):
        raise ProxyError(400, "X-Context-Mode must be 'full' or 'append'.", param="X-Context-Mode")
    strategy = headers.get("x-context-strategy", "").strip().lower()
    strategy = strategy or ctx.settings.reduction.strategy
    if not is_strategy(strategy):
        raise ProxyError(
            400,
            f"X-Context-Strategy must be one of {', '.join(STRATEGIES)}, or mask+<strategy>.",
            param="X-Context-Strategy",
        )
    if ctx.settings.reduction.trigger_ratio == 0:
        strategy = "none"  # a threshold of 0 disables compaction
    return mode, strategy


def header_map(request: Request) -> dict[str, str]:
    """The request's headers by name (ASGI's are lower-case), the first of each, decoded once.

    Starlette's `Headers.get` scans every header on each call, and a chat
    request reads seven of them.
    """
    found: dict[str, str] = {}
    for name, value in request.scope["headers"]:
        key = name.decode("latin-1")
        if key not in found:
            found[key] = value.decode("latin-1")
    return found


def authorize(ctx: AppContext, headers: Mapping[str, str]) -> None:
    """Refuse a wrong client key, and a missing one where keyless clients are not allowed.

    The tenant is the key's hash, so keyless clients would share one tenant.
    """
    api_key = bearer_token(headers)
    keys = ctx.settings.auth.client_keys
    if keys and not any(hmac.compare_digest(api_key.encode(), k.encode()) for k in keys):
        raise ProxyError(401, "Incorrect API key provided for this proxy.", code="invalid_api_key")
    if not api_key and ctx.require_key:
        raise ProxyError(
            401,
            "This proxy requires an API key (Authorization: Bearer ...): requests without "
            "one would share their conversations with every other keyless client.",
            code="missing_api_key",
        )


def access_log(
    wire: Wire,
    key: ConvKey,
    outcome: Outcome | None,
    mode: str,
    strategy: str,
    status: int,
    started: float,
) -> None:
    """One line per request: its route, ids, reduction and sizes, never content or keys.

    `status` is the upstream's, or the proxy's own when none answered (a 502 or 504)
    or the proxy refused the request (`outcome` None when it was never planned).
    """
    if not access.isEnabledFor(logging.INFO):
        return
    kinds = outcome.reduction.kinds if outcome is not None else ()
    tokens_in = outcome.tokens_in if outcome is not None else 0
    tokens_out = outcome.reduction.tokens_out if outcome is not None else 0
    access.info(
        "%s conversation=%s mode=%s strategy=%s reduction=%s tokens_in=%d tokens_out=%d "
        "upstream_status=%d ms=%.1f",
        wire.upstream_path,  # the proxy's route is the upstream's path
        key.conversation,
        mode,
        strategy,
        ",".join(kinds) or "-",
        tokens_in,
        tokens_out,
        status,
        (time.perf_counter() - started) * 1000,
        extra={
            "route": wire.upstream_path,
            "conversation": key.conversation,
            "mode": mode,
            "strategy": strategy,
            "reduction": list(kinds),
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "upstream_status": status,
        },
    )


def _noop() -> None:
    return None
