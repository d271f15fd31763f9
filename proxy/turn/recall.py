"""The recall stage: archived messages relevant to the question, quoted into the reduced turn.

What counts as relevant and how it is quoted is `proxy.recall` (pure);
this stage asks the store (or the embeddings endpoint and the store), keeps
within the recall and history budgets, and remembers the block for the
turn's next requests. Recall is an extra: a store or embeddings failure
costs the turn its recall, never the request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import english, feedback, fusion, quoting, recall
from ..conversation import Turn
from ..dialects import Dialect
from ..embeddings import EmbeddingsUnavailable
from ..messages import Message, digest, role, text_of
from ..reduction.types import Reduction
from ..store import ConvKey, StoreError
from ..store.base import SearchHit
from ..store.search import SEARCHED, search_messages
from ..upstream import openai_side
from .sessions import Recalled

if TYPE_CHECKING:
    from ..context import AppContext

# Embeddings recall: an archived message must be this much more similar to the
# question (cosine) than everything forwarded, or the context already covers it
# (hybrid recall too, before the ranks are fused).
SIMILARITY_MARGIN = 0.05

# Claude's tokenizer (or any without its encoding files) can make up to a fifth more
# tokens of a text than the estimate the counts here are.
ESTIMATE_ERROR = 1.2

# A question asking beyond its subject has its best hits (not forwarded) ordered by
# detail: ample for `k`, and each costs stemming its text.
DETAILED = 50

log = logging.getLogger("context_proxy.chat")


@dataclass(frozen=True, slots=True)
class Lineage:
    """The chain a turn of a derived conversation resends (`hashes`, ending with `tip`):
    its recall reads that branch alone, never a chat that only opened alike."""

    hashes: Set[str]
    tip: str


def branch_of(ctx: AppContext, key: ConvKey, turn: Turn) -> Lineage | None:
    """The branch a derived conversation's turn is archived under; None when not at hand.

    A full-history turn resends it (unless the archive chains it from further back).
    A turn continued by `previous_response_id` sends only its new items: its branch
    is the one kept with the answer it continues (`Sessions.answered`), not copied
    (its new items are archived on no other branch: their chain hashes hold it).
    """
    if turn.hashes:
        return Lineage(frozenset(turn.hashes), turn.hashes[-1]) if turn.rooted else None
    kept = ctx.sessions.lineage(key, turn.parent)
    if turn.parent not in kept:
        return None
    return Lineage(kept, turn.tip)


@dataclass(frozen=True, slots=True)
class Unarchived:
    """A full-history turn as the store holds it: `history[archived:]` is what the turn
    archives as new (the store may hold some of it already, the previous answer as the
    proxy stored it). `continues` when the turn extends a stored snapshot: its history
    then holds what the store archived of its chain.
    """

    history: Sequence[Message]
    archived: int
    continues: bool


async def recall_into(
    ctx: AppContext,
    key: ConvKey,
    reduction: Reduction,
    model: str,
    reserved: int,
    headers: dict[str, str],
    dialect: Dialect,
    unarchived: Unarchived | None = None,
    lineage: Lineage | None = None,
) -> tuple[Reduction, int]:
    """`reduction` with a recall block before its last user message, and how many hits it quotes.

    The question is searched once, on the request that ends with it; the
    requests that follow within the same turn (tool results) repeat that
    block verbatim, so the turn's requests share their prefix. A turn whose
    history the store lacks part of (`unarchived`: the proxy meets a
    conversation with its history, or lost its store) has that history
    searched too, as the archive will be once the turn is stored. With a
    `lineage` (the chain hashes of the turn's history), only that branch of
    the archive is searched.
    """
    at = recall.question_index(reduction.messages, dialect)
    if at < 0:
        return reduction, 0
    provider = "anthropic" if dialect.name == "anthropic" else "openai"
    room = _room(ctx, model, reserved, provider) - reduction.tokens_out
    asked = digest(reduction.messages[at])
    cached = ctx.sessions.recall(key)
    if (
        at < len(reduction.messages) - 1
        and cached is not None
        and cached.question == asked
        and (lineage is None or cached.tip in lineage.hashes)
    ):
        content, found = cached.block, cached.hits
    else:
        # The question's embedding is asked of the OpenAI upstream, with its credentials.
        side = openai_side(headers, provider, ctx.settings.upstream.api_key)
        within = lineage.hashes if lineage is not None else None
        content, found = await _search(
            ctx, key, reduction, at, model, side, room, unarchived, dialect, within
        )
        tip = lineage.tip if lineage is not None else ""
        ctx.sessions.recalled(key, Recalled(asked, content, found, tip))
    if not found:
        return reduction, 0
    extra = ctx.counter.count_message(model, dialect.summary(content))
    if extra > room:  # tool results since the turn's first request filled the budget
        return reduction, 0
    ctx.metrics.recall_hits.inc(found)
    messages = tuple(recall.inject(reduction.messages, content, dialect))
    return dataclasses.replace(
        reduction, messages=messages, tokens_out=reduction.tokens_out + extra
    ), found


def _room(ctx: AppContext, model: str, reserved: int, provider: str) -> int:
    """How many tokens the forwarded request may hold with its recall block.

    The block takes half the window's headroom above the trigger, which the
    history never fills, so recall has its room wherever the reduction stands
    in its cycle (just below the trigger, the turn before it summarises, too);
    the other half stays the answer's, for requests that reserve none. When
    counts are estimated it stops short of what the upstream accepts by the
    estimate's error. Never less than the trigger leaves.
    """
    budget = ctx.budget(model, reserved)
    room = (budget.limit + budget.hard_limit) // 2
    if ctx.estimates(provider):
        room = min(room, int(budget.hard_limit / ESTIMATE_ERROR))
    return max(budget.limit, room)


async def _search(
    ctx: AppContext,
    key: ConvKey,
    reduction: Reduction,
    at: int,
    model: str,
    headers: dict[str, str],
    room: int,
    unarchived: Unarchived | None,
    dialect: Dialect,
    within: Set[str] | None,
) -> tuple[str, int]:
    """The recall block for the question at `at` and how many messages it quotes ("", 0: none).

    The block holds as many of the best hits as fit both `recall.max_tokens`
    and the `room` the history budget leaves.
    """
    if room <= 0:
        return "", 0
    settings = ctx.settings.recall
    question = text_of(reduction.messages[at])
    context = [
        text_of(m).strip()
        for i, m in enumerate(reduction.messages)
        if i != at and role(m) in SEARCHED
    ]
    forwarded, rows = recall.as_searched(context)
    # Embeddings search the store alone: the history has no vectors yet.
    own = _own(unarchived, forwarded, dialect) if settings.method != "embeddings" else None
    # Forwarded messages (each of their passages) may rank first; ask for enough to skip them.
    limit = min(settings.k + rows, 1000)
    try:
        hits, unjudged, meant, searched_own = await _ranked(
            ctx, key, question, headers, limit, context, forwarded, own, within
        )
    except StoreError:
        ctx.metrics.store_errors.labels("search").inc()
        return "", 0
    if unjudged:  # the question asks beyond its subject
        hits = await _detailed(hits, question, forwarded)
    found = recall.fresh(
        hits, question, context, settings.k, unjudged=unjudged, forwarded=forwarded, meant=meant
    )
    if settings.feedback and found and len(found) < settings.k and english.asking(question)[0]:
        history = own[0] if own is not None and searched_own else None
        searched = Searched.fed(question, found, limit, forwarded, within)
        more = await _fed(ctx, key, searched, history)
        found = feedback.extended(found, more, question, context, settings.k, forwarded)
    budget = min(settings.max_tokens, room)

    def count(content: str) -> int:
        return ctx.counter.count_message(model, {"role": "system", "content": content})

    return quoting.fitted(found, question, budget, count)


async def _ranked(
    ctx: AppContext,
    key: ConvKey,
    question: str,
    headers: dict[str, str],
    limit: int,
    context: Sequence[str],
    forwarded: frozenset[str],
    own: tuple[Sequence[Message], bool] | None,
    within: Set[str] | None,
) -> tuple[list[SearchHit], frozenset[int], frozenset[int], bool]:
    """The archive's messages for `question`, best first, by the configured method; the
    lexical hits (by seq) that `recall.fresh` does not judge against `context`:
    all of them when the question asks beyond its words (`recall.asks_beyond`); the
    hits found by meaning alone (`recall.fresh`'s `meant`); and whether the hits come
    from the turn's `own` history (see `_lexical`).
    Embeddings judge a question by its meaning, not its words, and only a turn that
    asks: a statement gets its lexical hits alone.

    Embeddings hits are kept only by the similarity margin above every forwarded
    message. Hybrid recall fuses them with the BM25 hits above every forwarded
    message (or unjudged): what each search alone would keep. When its question
    cannot be embedded, its lexical hits stand alone. Hits from the turn's
    `own` history (see `_lexical`) stand alone too: its messages have no
    embeddings until they are archived.
    """
    method, embedder = ctx.settings.recall.method, ctx.embedder
    lexical: list[SearchHit] = []
    unjudged: frozenset[int] = frozenset()
    searched_own = False
    if method != "embeddings":
        searched = Searched.of(question, limit, forwarded, within)
        lexical, searched_own = await _lexical(ctx, key, searched, own)
        if lexical and recall.asks_beyond(question, lexical, context):
            unjudged = frozenset(h.seq for h in lexical)
    if method == "lexical" or embedder is None or searched_own:
        return lexical, unjudged, frozenset(), searched_own
    if not english.asking(question)[0]:
        # A turn that asks nothing is close in meaning to the chat before it, as chat is:
        # its similarity tells nothing, only the words it alone names (lexical) do.
        return lexical, unjudged, frozenset(), False
    try:
        (vector,) = await embedder.embed([question], headers)
    except EmbeddingsUnavailable as exc:
        ctx.metrics.embeddings.labels("failed").inc()
        log.info("recall for %s: embedding the question failed (%s)", key.conversation, exc)
        return lexical, unjudged, frozenset(), False
    semantic = await ctx.store.nearest(
        key,
        embedder.model,
        vector,
        limit=limit,
        min_similarity=ctx.settings.recall.min_similarity,
        within=within,
        names=recall.named(question),
    )
    semantic = recall.outranking(semantic, forwarded, margin=SIMILARITY_MARGIN)
    meant = frozenset(h.seq for h in semantic)
    if method != "hybrid":
        return semantic, frozenset(), meant, False
    fused = fusion.fuse(recall.outranking(lexical, forwarded, unjudged=unjudged), semantic)
    return fused, unjudged, meant - {h.seq for h in lexical}, False


async def _detailed(
    hits: Sequence[SearchHit], question: str, forwarded: frozenset[str]
) -> list[SearchHit]:
    """`hits` less the forwarded ones, the best of the rest ordered by the detail they
    hold (`recall.detailed`). In hybrid these are the fused ranking's: the most detailed
    takes the subject's best place there, where ordered before the fusion it may lose it
    to the other ranking's hits."""
    # What the model reads already goes: `fresh` would drop it anyway.
    unseen = [h for h in hits if h.text not in forwarded]
    # Stemming long hits (tool results) takes a while: off the loop.
    try:
        best = await asyncio.to_thread(recall.detailed, unseen[:DETAILED], question)
    except Exception as exc:  # the order is an extra: failing, BM25's stands
        log.warning("recall: ordering hits by detail failed (%s)", exc)
        return unseen
    return best + unseen[DETAILED:]


def _own(
    turn: Unarchived | None, forwarded: frozenset[str], dialect: Dialect
) -> tuple[Sequence[Message], bool] | None:
    """The turn's history before its question, when the store lacks some of it that the
    reduction does not forward (with whether the turn continues a stored snapshot); else
    None: the store holds all that recall could add.
    """
    if turn is None:
        return None
    at = recall.question_index(turn.history, dialect)
    if at <= turn.archived:
        return None
    lacking = (text_of(m).strip() for m in turn.history[turn.archived : at] if role(m) in SEARCHED)
    if all(not text or text in forwarded for text in lacking):
        return None
    return turn.history[:at], turn.continues


Terms = Sequence[str | tuple[str, ...]]


@dataclass(frozen=True)
class Searched:
    """What a lexical search asks: the `queries` (a turn's terms, and whether they ask
    something), how many hits, the texts the model reads already (no replies looked up),
    and the branch of the archive searched (`within`, chain hashes; None: all of it).

    Its hits are those of each query in turn, the first query's first."""

    queries: Sequence[tuple[Terms, bool]]
    limit: int
    forwarded: frozenset[str]
    within: Set[str] | None = None
    feedback: frozenset[int] | None = None

    @classmethod
    def of(
        cls, turn: str, limit: int, forwarded: frozenset[str], within: Set[str] | None
    ) -> Searched:
        """A turn's search: what it asks as a question, what it says as a statement.

        A chat turn often tells something and then asks the other side ("I started
        a detective series. What about you?"). Searched whole at a question's floor,
        the words of what it tells brought back whatever else said them, a block on
        a turn that asked for none; searched as a statement, they still bring back
        what only they name.
        """
        asked, said = english.asking(turn)
        queries = [(recall.terms(asked), True), (recall.terms(said), False)]
        return cls([(terms, asks) for terms, asks in queries if terms], limit, forwarded, within)

    @classmethod
    def fed(
        cls,
        question: str,
        found: Sequence[SearchHit],
        limit: int,
        forwarded: frozenset[str],
        within: Set[str] | None,
    ) -> Searched:
        """The pseudo-relevance feedback search of the hits recall chose (`proxy.feedback`)."""
        terms = feedback.words(question, found)
        return cls([(terms, False)], limit, forwarded, within, feedback.seqs(found))

    async def in_store(self, ctx: AppContext, key: ConvKey) -> list[SearchHit]:
        found = [
            await ctx.store.search(
                key,
                terms,
                limit=self.limit,
                asks=asks,
                forwarded=self.forwarded,
                within=self.within,
                feedback=self.feedback,
            )
            for terms, asks in self.queries
        ]
        return self._merged(found)

    def in_history(self, history: Sequence[Message]) -> list[SearchHit]:
        found = search_messages(
            history, self.queries, self.limit, forwarded=self.forwarded, feedback=self.feedback
        )
        return self._merged(found)

    def _merged(self, found: Sequence[Sequence[SearchHit]]) -> list[SearchHit]:
        hits: dict[tuple[int, str], SearchHit] = {}
        for each in found:
            for hit in each:
                hits.setdefault((hit.seq, hit.text), hit)
        return list(hits.values())[: self.limit]


async def _fed(
    ctx: AppContext, key: ConvKey, searched: Searched, history: Sequence[Message] | None
) -> list[SearchHit]:
    """The hits of the feedback search, where the chosen hits were found (the turn's own
    `history`, or the store): their seqs number those messages. Failing, it adds nothing."""
    try:
        if history is not None:
            return await asyncio.to_thread(searched.in_history, history)
        return await searched.in_store(ctx, key)
    except StoreError:
        ctx.metrics.store_errors.labels("search").inc()
        return []


async def _lexical(
    ctx: AppContext,
    key: ConvKey,
    searched: Searched,
    own: tuple[Sequence[Message], bool] | None,
) -> tuple[list[SearchHit], bool]:
    """The BM25 hits of the `searched`, and whether they come from the turn's `own`
    history (then the store's embeddings, numbered otherwise, cannot be fused with them).

    That history is searched in place of the store when the turn continues a
    stored snapshot (it holds what the store archived of its chain; the store
    is asked only if it finds nothing), and otherwise when the store finds
    nothing: a client that trims its own history resends only part of what
    the store holds, a store that never saw the conversation holds nothing,
    one that cannot be reached answers nothing.
    """
    if own is None:
        return await searched.in_store(ctx, key), False
    history, continues = own
    if not continues:
        try:
            hits = await searched.in_store(ctx, key)
        except StoreError:
            ctx.metrics.store_errors.labels("search").inc()
            hits = []
        if hits:
            return hits, False
    try:
        hits = await asyncio.to_thread(searched.in_history, history)
    except Exception as exc:  # recall is an extra: a failing index costs it, not the request
        log.warning("recall for %s: indexing its history failed (%s)", key.conversation, exc)
        hits = []
    if hits or not continues:
        return hits, bool(hits)
    return await searched.in_store(ctx, key), False
