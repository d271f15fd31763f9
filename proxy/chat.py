"""`POST /v1/chat/completions`: recognise, reconcile, reduce, forward, relay, commit.

The turn is committed only after the upstream's answer completed: for a
stream, inside the relaying generator after the last byte, so a client that
disconnects (which cancels the generator and closes the upstream response)
leaves nothing half-written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hmac
import logging
import operator
import time
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from typing import Any

import httpx
import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from . import conversation as conv
from . import recall
from .context import AppContext
from .embeddings import Embedder, EmbeddingsUnavailable, embed_pending
from .errors import ProxyError
from .intake import as_messages, check_content_type, parse_chat, read_body, reserved_output
from .known import Bounds, Known, fingerprints, list_start, locate, remember, reparse, resent
from .messages import (
    Message,
    chain_hashes,
    digest,
    is_leading,
    last_user_index,
    role,
    text_of,
)
from .outcome import MAX_REBASES, Outcome, rebase, turn_commit
from .reduction import reduce
from .reduction.tail import Tail
from .reduction.types import (
    KINDS,
    STRATEGIES,
    ContextTooLarge,
    Reduction,
    ReductionState,
    SummaryRequest,
)
from .sse import StreamAssembler, message_from_completion
from .store import Conflict, ConvKey, StoreError
from .summarizer import SummarizerUnavailable
from .tokens import RequestCounts
from .upstream import (
    bearer_token,
    forward_headers,
    response_headers,
    transport_error,
)

# Embeddings recall: an archived message must be this much more similar to the
# question (cosine) than everything forwarded, or the context already covers it.
SIMILARITY_MARGIN = 0.05

log = logging.getLogger("context_proxy.chat")
access = logging.getLogger("context_proxy.access")


async def chat_completions(request: Request) -> Response:
    ctx: AppContext = request.state.ctx
    started = time.perf_counter()
    given = header_map(request)
    check_content_type(given.get("content-type"))
    body = await read_body(request, ctx.settings.server.max_body_bytes)
    resend = Resend(ctx, given, body)
    payload = parse_chat(body, resend, resend.reparse())
    authorize(ctx, given)
    if ctx.recorder is not None:
        await ctx.recorder.record(payload)
    mode = given.get("x-context-mode", "full").strip().lower()
    if mode not in ("full", "append"):
        raise ProxyError(400, "X-Context-Mode must be 'full' or 'append'.", param="X-Context-Mode")
    strategy = given.get("x-context-strategy", "").strip().lower()
    strategy = strategy or ctx.settings.reduction.strategy
    if strategy not in STRATEGIES:
        raise ProxyError(
            400,
            f"X-Context-Strategy must be one of {', '.join(STRATEGIES)}.",
            param="X-Context-Strategy",
        )
    if ctx.settings.reduction.trigger_ratio == 0:
        strategy = "none"  # ensemble: a threshold of 0 disables compaction
    messages = as_messages(payload)
    key = resend.conversation(messages)
    headers = forward_headers(request.headers.items(), ctx.settings.upstream)
    streaming = bool(payload.get("stream"))
    lock = ctx.locks.get(key) if mode == "append" else None
    if lock is not None:
        await lock.acquire()
    try:
        outcome = await prepare(
            ctx, key, payload, messages, mode, strategy, headers, resend.of(key)
        )
        content = forward_body(body, payload, outcome.reduction.messages)
        response = await send(ctx, content, headers, events=streaming)
        ctx.metrics.child(ctx.metrics.upstream_latency, "/v1/chat/completions").observe(
            time.perf_counter() - started
        )
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    release = lock.release if lock is not None else _noop
    access_log(outcome, mode, strategy, response.status_code, started)
    if streaming and response.status_code == 200:
        return StreamingResponse(
            relay(ctx, response, outcome, release),
            status_code=200,
            headers={**response_headers(response.headers), **outcome.headers()},
        )
    try:
        content = await response.aread()
        if response.status_code == 200:
            answer = message_from_completion(_json(content))
            if answer is not None:
                await commit(ctx, outcome, answer)
    finally:
        await response.aclose()
        release()
    extra = (
        outcome.headers()
        if response.status_code == 200
        else {"x-conversation-id": key.conversation}
    )
    return Response(
        content,
        status_code=response.status_code,
        headers={**response_headers(response.headers), **extra},
    )


def access_log(outcome: Outcome, mode: str, strategy: str, status: int, started: float) -> None:
    """One line per request: ids, reduction and sizes, never content or keys."""
    if not access.isEnabledFor(logging.INFO):
        return
    access.info(
        "chat conversation=%s mode=%s strategy=%s reduction=%s tokens_in=%d tokens_out=%d "
        "upstream_status=%d ms=%.1f",
        outcome.key.conversation,
        mode,
        strategy,
        ",".join(outcome.reduction.kinds),
        outcome.tokens_in,
        outcome.reduction.tokens_out,
        status,
        (time.perf_counter() - started) * 1000,
        extra={
            "conversation": outcome.key.conversation,
            "mode": mode,
            "strategy": strategy,
            "reduction": list(outcome.reduction.kinds),
            "tokens_in": outcome.tokens_in,
            "tokens_out": outcome.reduction.tokens_out,
            "upstream_status": status,
        },
    )


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
    api_key = bearer_token(headers)
    keys = ctx.settings.auth.client_keys
    if keys and not any(hmac.compare_digest(api_key.encode(), k.encode()) for k in keys):
        raise ProxyError(401, "Incorrect API key provided for this proxy.", code="invalid_api_key")


async def prepare(
    ctx: AppContext,
    key: ConvKey,
    payload: dict[str, Any],
    messages: list[Message],
    mode: str,
    strategy: str,
    headers: dict[str, str],
    resend: Resend | None = None,
) -> Outcome:
    stateless = False
    version: int | None = None
    digests: list[bytes] | None = None
    counts: list[int] | None = None
    model = str(payload["model"])
    known, seen = (resend.known, resend.count) if resend is not None else (None, 0)
    if mode == "append":
        try:
            stored = await ctx.store.latest(key)
        except StoreError:
            ctx.metrics.store_errors.labels("latest").inc()
            raise ProxyError(
                503,
                "The conversation store is unreachable; append mode cannot supply the history.",
                type="server_error",
                code="store_unavailable",
            ) from None
        if stored is None:
            raise ProxyError(
                404,
                f"Unknown conversation '{key.conversation}'. Start it with "
                "a full-history request (without X-Context-Mode: append).",
                param="X-Conversation-Id",
                code="conversation_not_found",
            )
        turn = conv.reconcile_append(messages, stored.working, stored.state, stored.position + 1)
        version = stored.turns
    else:
        digests = [*(known.digests[:seen] if known else ()), *map(digest, messages[seen:])]
        parent = known.hashes[seen - 1] if known and seen else ""
        hashes = [
            *(known.hashes[:seen] if known else ()),
            *chain_hashes(messages[seen:], parent, digests=digests[seen:]),
        ]
        if known is not None and known.model == model:
            fresh = zip(messages[seen:], digests[seen:], strict=True)
            counts = [
                *known.counts[:seen],
                *(ctx.counter.count_message(model, m, d) for m, d in fresh),
            ]
        try:
            snapshot = await ctx.store.find_snapshot(key, hashes)
        except StoreError:
            ctx.metrics.store_errors.labels("find_snapshot").inc()
            log.warning("store unreachable; reducing %s without stored state", key.conversation)
            snapshot, stateless = None, True
        turn = conv.reconcile_full(
            messages,
            hashes,
            snapshot.position if snapshot else None,
            snapshot.state if snapshot else None,
        )
    count = RequestCounts(ctx.counter, model, turn.history, digests, counts, seen)
    tokens_in = count.total
    made = spent = 0
    memo: Tail | None = None
    if strategy == "none":
        reduction = _unreduced(turn, tokens_in)
    else:
        memo = _memo(known, model, turn) if seen else None
        reduction, made, spent = await _reduce(
            ctx, key, turn, payload, strategy, headers, count, memo
        )
    if resend is not None and digests is not None:
        known = _known(resend, messages, digests, hashes, model, count, turn, reduction, memo)
        ctx.remember(key, known, resend.fingerprints(known))
    recalled: int | None = None
    if ctx.settings.recall.enabled:
        reduction, recalled = await _recall(ctx, key, reduction, payload, headers)
    if stateless:
        reduction = _with_kind(reduction, "stateless")
    ctx.metrics.turn(reduction.kinds, tokens_in, reduction.tokens_out)
    return Outcome(
        key, turn, reduction, tokens_in, made, spent, stateless, version, model, headers, recalled
    )


async def _reduce(
    ctx: AppContext,
    key: ConvKey,
    turn: conv.Turn,
    payload: dict[str, Any],
    strategy: str,
    headers: dict[str, str],
    count: RequestCounts,
    memo: Tail | None = None,
) -> tuple[Reduction, int, int]:
    """Reduce; when the core asks for summaries, produce them and reduce again.

    A failing summariser costs this turn its summary, never the request: the
    window result the core prepared alongside its requests is forwarded.
    """
    model = str(payload["model"])
    policy = ctx.policy(
        strategy, preparing=ctx.prepared_for.get(key) != _stretch(turn.working.state)
    )
    budget = ctx.budget(model, reserved_output(payload))
    try:
        prepared = ctx.prepared.get(key) or {}
        reduction = reduce(turn.working, policy, budget, count, prepared, memo=memo)
    except ContextTooLarge as exc:
        raise ProxyError(400, str(exc), param="messages", code="context_length_exceeded") from None
    made = spent = 0
    if reduction.summary_requests:
        ctx.metrics.summary_waits.inc()
        try:
            texts: dict[str, str] = {}
            results = await asyncio.gather(
                *(
                    ctx.summarizer.summarize(r, model=model, headers=headers)
                    for r in reduction.summary_requests
                )
            )
            for req, result in zip(reduction.summary_requests, results, strict=True):
                texts[req.key] = result.text
                spent += result.tokens
            made = len(results)
            ctx.metrics.summaries_made.inc(made)
            summaries = {**prepared, **texts}
            reduction = reduce(turn.working, policy, budget, count, summaries, memo=reduction.tail)
        except SummarizerUnavailable as exc:
            ctx.metrics.summarizer_failures.inc()
            log.warning("summarizer failed (%s); forwarding a window reduction", exc)
            reduction = _with_kind(reduction, "fallback")
    return reduction, made, spent


async def _recall(
    ctx: AppContext,
    key: ConvKey,
    reduction: Reduction,
    payload: dict[str, Any],
    headers: dict[str, str],
) -> tuple[Reduction, int]:
    """Quote archived messages relevant to the question, within the recall and history budgets.

    The question is searched once, on the request that ends with it; the
    requests that follow within the same turn (tool results) repeat that
    block verbatim, so the turn's requests share their prefix. Recall is an
    extra: a store or embeddings failure costs this turn its recall, never
    the request.
    """
    at = last_user_index(reduction.messages)
    if at < 0:
        return reduction, 0
    model = str(payload["model"])
    room = ctx.budget(model, reserved_output(payload)).limit - reduction.tokens_out
    asked = digest(reduction.messages[at])
    cached = ctx.recalled.get(key)
    if at < len(reduction.messages) - 1 and cached is not None and cached[0] == asked:
        content, found = cached[1], cached[2]
    else:
        content, found = await _search(ctx, key, reduction, at, model, headers, room)
        ctx.recalled[key] = (asked, content, found)
    if not found:
        return reduction, 0
    extra = ctx.counter.count_message(model, {"role": "system", "content": content})
    if extra > room:  # tool results since the turn's first request filled the budget
        return reduction, 0
    ctx.metrics.recall_hits.inc(found)
    messages = tuple(recall.inject(reduction.messages, content))
    return dataclasses.replace(
        reduction, messages=messages, tokens_out=reduction.tokens_out + extra
    ), found


async def _search(
    ctx: AppContext,
    key: ConvKey,
    reduction: Reduction,
    at: int,
    model: str,
    headers: dict[str, str],
    room: int,
) -> tuple[str, int]:
    """The recall block for the question at `at` and how many messages it quotes ("", 0: none).

    The block holds as many of the best hits as fit both `recall.max_tokens`
    and the `room` the history budget leaves.
    """
    if room <= 0:
        return "", 0
    settings = ctx.settings.recall
    question = text_of(reduction.messages[at])
    # Forwarded messages may rank first; ask for enough to skip them all.
    limit = min(settings.k + len(reduction.messages), 1000)
    try:
        if ctx.embedder is not None:
            (vector,) = await ctx.embedder.embed([question], headers)
            hits = await ctx.store.nearest(
                key,
                ctx.embedder.model,
                vector,
                limit=limit,
                min_similarity=settings.min_similarity,
            )
        else:
            hits = await ctx.store.search(key, recall.words(question), limit=limit)
    except EmbeddingsUnavailable as exc:
        ctx.metrics.embeddings.labels("failed").inc()
        log.info("no recall for %s: embedding the question failed (%s)", key.conversation, exc)
        return "", 0
    except StoreError:
        ctx.metrics.store_errors.labels("search").inc()
        return "", 0
    context = [
        text_of(m).strip()
        for i, m in enumerate(reduction.messages)
        if i != at and role(m) in ("user", "assistant", "tool")
    ]
    margin = SIMILARITY_MARGIN if ctx.embedder is not None else 0.0
    found = recall.fresh(hits, question, context, settings.k, margin)
    while found:
        content = recall.quote(found, max_chars=max(200, settings.max_tokens * 4 // len(found)))
        tokens = ctx.counter.count_message(model, {"role": "system", "content": content})
        if tokens <= min(settings.max_tokens, room):
            return content, len(found)
        found = found[:-1]
    return "", 0


class Resend:
    """Finds, before or while the body is checked, what of a full-history request came last turn.

    `reparse` is tried first: a body that resends the remembered messages is
    parsed from its new bytes only. Otherwise `parse_chat` parses it all and
    calls this with the parsed messages. Either way the prefix it reports is
    not checked again (it was, when first seen), and `prepare` reuses what
    was computed for it. It looks only; any doubt (append mode, a header
    that `identify` will refuse, messages too malformed to derive an id
    from) means "nothing known", and the request is handled in full.
    """

    def __init__(self, ctx: AppContext, headers: Mapping[str, str], body: bytes) -> None:
        self.ctx = ctx
        self.body = body
        self.tenant = conv.tenant_of(bearer_token(headers))
        self.header = headers.get("x-conversation-id")
        self.full = headers.get("x-context-mode", "full").strip().lower() == "full"
        self.key: ConvKey | None = None
        self.known: Known | None = None
        self.bounds: Bounds | None = None
        self.count = 0
        self.list_start = -1
        self.reparsed = False
        # This body's fingerprints, once looked up (a request without an id).
        self.looked_up: list[tuple[str, int, bytes]] = []

    def conversation(self, messages: list[Message]) -> ConvKey:
        """The request's conversation (a 400 for a bad header): the one found already, if any."""
        return self.key if self.key is not None else self._key(messages)

    def _key(self, messages: list[Message]) -> ConvKey:
        ident = conv.identify(self.tenant, self.header, messages)
        return ConvKey(ident.tenant, ident.conversation)

    def _identify(self, messages: list[Message]) -> ConvKey | None:
        for message in messages:
            if not isinstance(message, dict):
                return None
            if not is_leading(message):
                break
        try:
            return self._key(messages)
        except ProxyError:
            return None

    def reparse(self) -> dict[str, Any] | None:
        """The request parsed from its new bytes only, if it resends a remembered history."""
        if not self.full:
            return None
        if self.header:
            keys: Sequence[Hashable] = [ConvKey(self.tenant, self.header)]
        else:
            self.looked_up = fingerprints(self.tenant, self.body)
            found = (self.ctx.openings.get(f) for f in self.looked_up)
            keys = list(dict.fromkeys(k for k in found if k is not None))
        for key in keys:
            known = self.ctx.known.get(key)
            payload = reparse(self.body, known)
            if known is None or payload is None:
                continue
            if self._identify(payload["messages"]) != key:
                return None
            self.key, self.known, self.count = key, known, len(known.messages)
            self.bounds = locate(self.body, payload, known)
            self.list_start = known.list_start
            self.reparsed = True
            return payload
        return None

    def __call__(self, payload: dict[str, Any]) -> int:
        if self.reparsed:
            return self.count
        if not self.full:
            return 0
        messages: list[Message] = payload["messages"]
        self.key = self._identify(messages)
        if self.key is None:
            return 0
        self.known = self.ctx.known.get(self.key)
        self.bounds = locate(self.body, payload, self.known)
        self.list_start = list_start(self.body, payload)
        self.count = resent(self.known, messages, self.body, self.bounds)
        return self.count

    def of(self, key: ConvKey) -> Resend | None:
        return self if self.key == key else None

    def fingerprints(self, known: Known) -> list[tuple[str, int, bytes]]:
        """How the next request finds `known` without a conversation id (none with one).

        Only the longest the resent part covers: a conversation whose start it
        shares has every shorter one in common too, so those would not tell
        them apart. Taken from the lookup's, which covered this whole body.
        """
        if self.header:
            return []
        found = self.looked_up or fingerprints(self.tenant, self.body)
        return [f for f in found if f[1] <= known.prefix_len][:1]


def _memo(known: Known | None, model: str, turn: conv.Turn) -> Tail | None:
    """Last turn's grouped tail, if this turn's tail starts where that one did."""
    if known is None or known.model != model or known.tail is None:
        return None
    same = known.leading == len(turn.working.leading)
    return known.tail if same and known.tail_start == turn.working.state.tail_start else None


def _known(
    resend: Resend,
    messages: list[Message],
    digests: list[bytes],
    hashes: list[str],
    model: str,
    count: RequestCounts,
    turn: conv.Turn,
    reduction: Reduction,
    memo: Tail | None = None,
) -> Known:
    """This request, remembered for the next one; its tail as the next turn will start it.

    A turn the core answered at a glance grouped nothing (its result has no
    tail), so the tail it was given as a memo is handed on: a prefix of the
    next turns' tails still, it spares the turn that crosses the trigger a
    regroup of the whole tail (a stale one only costs that regroup).
    """
    tail = reduction.tail if reduction.tail is not None else memo
    moved = reduction.state.tail_start - turn.working.state.tail_start
    prefix_len, prefix_digest, suffix_len, suffix_digest = remember(resend.body, resend.bounds)
    return Known(
        messages=tuple(messages),
        prefix_len=prefix_len,
        prefix_digest=prefix_digest,
        suffix_len=suffix_len,
        suffix_digest=suffix_digest,
        digests=tuple(digests),
        hashes=tuple(hashes),
        model=model,
        counts=count.counts,
        leading=len(turn.working.leading),
        tail_start=reduction.state.tail_start,
        tail=tail.since(moved) if tail is not None and moved >= 0 else None,
        list_start=resend.list_start,
    )


def _unreduced(turn: conv.Turn, tokens: int) -> Reduction:
    return Reduction(
        messages=turn.history, state=turn.working.state, kinds=("none",), tokens_out=tokens
    )


def _with_kind(reduction: Reduction, kind: str) -> Reduction:
    kinds = set(reduction.kinds) | {kind}
    return dataclasses.replace(
        reduction, kinds=tuple(k for k in KINDS if k in kinds), summary_requests=()
    )


def forward_body(body: bytes, payload: dict[str, Any], messages: Sequence[Message]) -> bytes:
    """The upstream's request: the client's own bytes when the reduction kept every message.

    Re-serialising a 400 KB history costs about as much as parsing it, and
    the client's bytes are the most faithful copy of what it meant to send.
    The check is by identity: the reduction passes kept messages through as
    the same objects, so this is a pointer comparison per message.
    """
    sent = payload["messages"]
    if len(messages) == len(sent) and all(map(operator.is_, messages, sent)):
        return body
    return orjson.dumps({**payload, "messages": list(messages)})


async def send(
    ctx: AppContext, content: bytes, headers: dict[str, str], *, events: bool = False
) -> httpx.Response:
    # The proxy reads the answer to keep it, so it asks for an uncompressed one.
    request = ctx.client.post_request(
        ctx.chat_url,
        content,
        {**headers, "content-type": "application/json", "accept-encoding": "identity"},
        events=events,
    )
    try:
        return await ctx.client.send(request, stream=True)
    except httpx.HTTPError as exc:
        raise transport_error(exc) from None


async def relay(
    ctx: AppContext, response: httpx.Response, outcome: Outcome, release: Callable[[], None]
) -> AsyncIterator[bytes]:
    """Yield the upstream's bytes as they come; commit the turn when the answer completed.

    The commit happens before the chunk carrying `[DONE]` is passed on: SDKs
    return to the app at `[DONE]`, and the app's next turn must find this one
    stored.
    """
    assembler = StreamAssembler()
    ctx.metrics.active_streams.inc()
    committed = False
    try:
        async for chunk in response.aiter_raw():
            assembler.feed(chunk)
            if assembler.done and not committed and assembler.complete:
                committed = True
                await commit(ctx, outcome, assembler.message())
            yield chunk
        assembler.close()
        if assembler.complete and not committed:
            await commit(ctx, outcome, assembler.message())
    except httpx.HTTPError as exc:
        # Headers are gone already; end the stream with an OpenAI-style error event.
        err = transport_error(exc)
        yield b"data: " + err.body() + b"\n\n"
    finally:
        ctx.metrics.active_streams.dec()
        await response.aclose()
        release()


async def commit(ctx: AppContext, outcome: Outcome, answer: Message) -> None:
    """Store the completed turn; in append mode, rebase onto turns other replicas committed."""
    for _ in range(MAX_REBASES):
        try:
            turn = turn_commit(outcome, answer, time.time())
            # A full-history turn need not be written before the answer goes
            # out: the store answers this process's next lookup from memory.
            # An append-mode turn may conflict, so it is awaited.
            written = await ctx.store.commit(turn, wait=turn.expected_turns is not None)
            if written is not None:
                written.add_done_callback(functools.partial(_written, ctx, outcome))
            prepare_next(ctx, outcome)
            embed_next(ctx, outcome)
            return
        except Conflict:
            try:
                latest = await ctx.store.latest(outcome.key)
            except StoreError:
                break
            if latest is None:
                break
            outcome = rebase(outcome, latest)
        except StoreError as exc:
            ctx.metrics.store_errors.labels("commit").inc()
            log.error("could not store turn of %s: %s", outcome.key.conversation, exc)
            return
    ctx.metrics.store_errors.labels("commit").inc()
    log.error("could not store turn of %s: too many concurrent turns", outcome.key.conversation)


def _written(ctx: AppContext, outcome: Outcome, done: asyncio.Future[Any]) -> None:
    """A turn written after its answer went out: a failure can only be counted and logged."""
    error = None if done.cancelled() else done.exception()
    if done.cancelled() or error is not None:
        ctx.metrics.store_errors.labels("commit").inc()
        log.error("could not store turn of %s: %s", outcome.key.conversation, error or "cancelled")


def prepare_next(ctx: AppContext, outcome: Outcome) -> None:
    """Summarise what the next reduction will evict, now that the client has its answer."""
    if not outcome.reduction.prepare:
        return
    # One preparation per stretch between reductions: the span grows every turn,
    # and the first one prepared is enough to spare the crossing turn its wait.
    stretch = _stretch(outcome.reduction.state)
    if ctx.prepared_for.get(outcome.key) == stretch:
        return
    if ctx.background.spawn(outcome.key, _prepare(ctx, outcome, outcome.reduction.prepare[0])):
        ctx.prepared_for[outcome.key] = stretch


def _stretch(state: ReductionState) -> tuple[int, int]:
    """Which stretch between reductions a state belongs to: its tail's start and summaries."""
    return (state.tail_start, len(state.summaries))


def embed_next(ctx: AppContext, outcome: Outcome) -> None:
    """Embed what this turn archived, after the response, for the next turns' recall."""
    if ctx.embedder is not None:
        ctx.background.spawn(("embed", outcome.key), _embed(ctx, ctx.embedder, outcome))


async def _embed(ctx: AppContext, embedder: Embedder, outcome: Outcome) -> None:
    try:
        done, failed = await embed_pending(
            embedder, ctx.store, outcome.key, outcome.upstream_headers
        )
    except StoreError as exc:
        ctx.metrics.store_errors.labels("embeddings").inc()
        log.info("could not store embeddings of %s: %s", outcome.key.conversation, exc)
        return
    ctx.metrics.embeddings.labels("ok").inc(done)
    ctx.metrics.embeddings.labels("failed").inc(failed)


async def _prepare(ctx: AppContext, outcome: Outcome, request: SummaryRequest) -> None:
    try:
        result = await ctx.summarizer.summarize(
            request, model=outcome.model, headers=dict(outcome.upstream_headers)
        )
    except SummarizerUnavailable as exc:
        ctx.metrics.summarizer_failures.inc()
        log.info("background summary of %s failed (%s)", outcome.key.conversation, exc)
        return
    # Earlier entries describe spans a finished reduction already replaced.
    ctx.prepared[outcome.key] = {request.key: result.text}
    ctx.metrics.summaries_prepared.inc()


def _json(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return None


def _noop() -> None:
    return None
