"""What the proxy keeps per conversation, and the protocol every backend implements.

A conversation owns three things: the archive (every message ever seen,
hash-chained as in simonw/llm so a resent history adds only its new rows and
an edit forks a sibling branch), one snapshot per completed turn (keyed by
the chain hash of the last message that turn forwarded, so the longest
stored prefix of an incoming history says which summary still applies), and
the latest working history that append mode continues from.

A turn is written by one `commit`, atomically: a reader never sees the
archive of a turn without its snapshot, nor a conversation row pointing at a
snapshot that is not there. That is the one guarantee a backend must give;
Redis can give it with MULTI/EXEC as SQLite does with a transaction.
"""

from __future__ import annotations

from asyncio import Future
from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import orjson

from proxy.messages import Message

DEFAULT_MAX_SNAPSHOTS = 64
DEFAULT_TTL_S = 30 * 24 * 3600
# Summaries kept per conversation by `Store.keep_summary`: one stretch's preparation
# needs one; a few cover branches and a preparation that outlives its stretch.
SUMMARIES_KEPT = 4


class StoreError(Exception):
    """The store failed at run time (unreachable, closed, corrupt); never an operator mistake."""


class Conflict(StoreError):
    """Another writer committed a turn of this conversation first (optimistic versioning)."""


class ConvKey(NamedTuple):
    """A conversation's identity; `tenant` is the SHA-256 hex of the client's API key.

    Every backend scopes every read and write by both fields, so two tenants
    using the same conversation id never meet. A tuple, because it keys
    every per-conversation cache and is hashed a few dozen times a turn: a
    frozen dataclass hashes and compares in Python, a tuple in C.
    """

    tenant: str
    conversation: str


@dataclass(frozen=True, slots=True)
class ArchiveEntry:
    """One message to archive; `parent` is the previous chain hash, "" for the first."""

    hash: str
    parent: str
    message: Message


@dataclass(frozen=True, slots=True)
class ArchivedMessage:
    """An archived message; `seq` orders messages by first arrival."""

    hash: str
    parent: str
    message: Message
    seq: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The reduction state after a turn, valid for any history that starts with `head`.

    `position` counts the messages up to and including `head`; `state` is
    whatever JSON-able bookkeeping the reduction needs to resume (summary,
    covered range, markers).
    """

    head: str
    position: int
    state: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True)
class Conversation:
    """The latest turn of a conversation: what append mode continues from."""

    key: ConvKey
    head: str
    position: int
    state: dict[str, Any]
    working: list[Message]
    turns: int
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """A row of the admin listing; `messages` is the archive size."""

    key: ConvKey
    turns: int
    position: int
    messages: int
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class SearchHit:
    """An archived message that matched a search, or the passage of a long one that did
    (`text` is then that passage); `turn` counts user messages up to it.

    A hit that asks something (a sentence ending in "?") carries the messages
    that followed it, up to the next of its own role, as its `replies`: in a
    dialogue the answer rarely repeats the question's words. (More than one when
    the proxy stored an answer the client then resent differently: both follow.)

    A hit also carries the message it followed, when the other side said it, as
    its `prompt`: what a reaction ("Your art on a wall! Congrats!") responds to.

    `dated` is the date the conversation last wrote as a header at or before the
    message, as written (`proxy.store.dates`); "" when it wrote none.
    """

    seq: int
    turn: int
    role: str
    text: str
    score: float
    replies: tuple[SearchHit, ...] = ()
    dated: str = ""
    prompt: tuple[SearchHit, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkingLayout:
    """Where the messages of `TurnCommit.working` sit in the conversation.

    `working[:leading]` are at positions 0, 1, ... and the rest at `start`,
    `start + 1`, ...; `hashes[i]` is the chain hash of `working[i]`. Messages
    before position `fresh` were in the part of the request the proxy had
    stored before, so a store that keeps the working history as rows writes
    only those from `fresh` on (after checking that its row at `fresh - 1`
    carries the same chain hash, i.e. the same history up to there).
    """

    leading: int
    start: int
    fresh: int
    hashes: tuple[str, ...]

    def position(self, index: int) -> int:
        return index if index < self.leading else self.start + index - self.leading


@dataclass(frozen=True, slots=True)
class TurnCommit:
    """Everything one completed turn writes, applied all or nothing by `Store.commit`."""

    key: ConvKey
    archive: list[ArchiveEntry]
    snapshot: Snapshot
    working: list[Message]
    # When set, the commit applies only if the conversation has exactly this many
    # turns (an absent or expired one has 0); otherwise `Conflict` and nothing written.
    expected_turns: int | None = None
    # Lets a store rewrite only the changed part of `working`; None: rewrite it all.
    layout: WorkingLayout | None = None


class Store(Protocol):
    """Persistence for conversations. All methods are safe to call concurrently."""

    async def commit(self, turn: TurnCommit, *, wait: bool = True) -> Future[Any] | None:
        """Archive new messages, record the snapshot and move the conversation's head, atomically.

        Archive entries already stored (same chain hash) are ignored. Only the
        newest `max_snapshots` snapshots of the conversation are kept.
        With `wait=False` a backend may return before the turn is written,
        with a future that completes when it is (or fails with `StoreError`);
        this process's `find_snapshot` sees the turn at once, and its other
        reads after it is written. Returns None once the turn is written.
        """
        ...

    async def find_snapshot(self, key: ConvKey, heads: Sequence[str]) -> Snapshot | None:
        """The stored snapshot whose head appears latest in `heads` (the longest known prefix)."""
        ...

    async def latest(self, key: ConvKey) -> Conversation | None: ...

    async def archive(
        self, key: ConvKey, *, limit: int = 1000, offset: int = 0
    ) -> list[ArchivedMessage]:
        """Archived messages in the order they were first stored, all branches included."""
        ...

    async def chain(self, key: ConvKey, last: str, *, limit: int) -> list[Message]:
        """The archived message with chain hash `last` and those it follows, oldest first:
        at most `limit` of them, fewer where the chain starts (none if it is not archived)."""
        ...

    async def search(
        self,
        key: ConvKey,
        words: Sequence[str | tuple[str, ...]],
        *,
        limit: int,
        asks: bool = True,
        forwarded: Set[str] = frozenset(),
        within: Set[str] | None = None,
        feedback: Set[int] | None = None,
    ) -> list[SearchHit]:
        """Archived user, assistant and tool messages matching `words`, best first (a long
        one by its passages, each a hit of its own).

        A word may come with its other forms (`("see", "saw", "seen")`): any of
        them matches, and they count as one word. A word given capitalised is a
        name (matching ignores case): one the conversation never wrote does not
        weigh against the hits. `asks` is false for the words of a turn that
        asks nothing, which the floor holds to rarer words. A hit that asks
        carries what answered it (`SearchHit.replies`), unless its text is
        among the `forwarded` ones, which the model reads already. `within`, the
        chain hashes of one branch, keeps hits and replies to that branch: two
        chats that open alike are branches of one conversation, and one never
        reads the other's messages. With `feedback` (the seqs of hits recall
        chose), `words` are those hits' words, and a message passes when it holds
        one of them said seldom (`relevance.bridged`).

        Only hits above the relevance floor of `proxy.store.search` count; the
        index catches up with the archive first, so the newest turn is searchable.
        """
        ...

    async def unembedded(self, key: ConvKey, model: str, *, limit: int) -> list[tuple[int, str]]:
        """Searchable messages with no stored `model` vector yet, oldest first: (seq, text)."""
        ...

    async def put_vectors(
        self, key: ConvKey, model: str, vectors: Sequence[tuple[int, bytes]]
    ) -> None:
        """Store unit-length float32 vectors for the messages `unembedded` named by seq."""
        ...

    async def nearest(
        self,
        key: ConvKey,
        model: str,
        vector: bytes,
        *,
        limit: int,
        min_similarity: float,
        within: Set[str] | None = None,
        names: Sequence[str] = (),
    ) -> list[SearchHit]:
        """Messages whose stored vectors are most similar to `vector` (cosine), best first;
        only those `within` a branch (chain hashes), if given, as for `search`; none that
        addresses one of `names` the conversation's sides call each other by."""
        ...

    async def keep_summary(self, key: ConvKey, request: str, text: str) -> None:
        """Keep a summary made ahead of the reduction that needs it, under its request's key,
        for whichever process serves that turn; the newest `SUMMARIES_KEPT` are kept, with
        the conversation (nothing is kept for a conversation the store does not hold)."""
        ...

    async def kept_summaries(self, key: ConvKey) -> dict[str, str]:
        """The summaries `keep_summary` kept for the conversation, by request key."""
        ...

    async def delete(self, key: ConvKey) -> bool:
        """Forget the conversation entirely; False when there was nothing to forget."""
        ...

    async def list_conversations(
        self, tenant: str | None, *, limit: int = 50, offset: int = 0
    ) -> list[ConversationSummary]:
        """Conversations, most recently updated first; `tenant=None` lists every tenant's."""
        ...

    async def ping(self) -> None:
        """Return when the store answers and can take turns; raise `StoreError` otherwise."""
        ...

    def problem(self) -> str | None:
        """Why turns cannot be written now (files gone, writes failing), at a glance; None: fine."""
        ...

    def failing(self) -> bool:
        """Whether the turns written now may not be kept, as last seen: the last write
        failed, or the file was found gone since. A flag, read by every turn; `problem`
        looks at the store itself."""
        ...

    async def close(self) -> None: ...


def standing(failed: tuple[str, float] | None, now: float, backoff_s: float) -> str | None:
    """A failed write's error while it stands: for `backoff_s` after it (`now` and its
    time on one monotonic clock). Then a turn may try: append turns are refused while it
    stands, and only a write tells that the store takes writes again."""
    if failed is None or now - failed[1] >= backoff_s:
        return None
    return failed[0]


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(text: str | bytes) -> Any:
    return orjson.loads(text)
