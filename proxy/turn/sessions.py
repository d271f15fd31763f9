"""The one home of a conversation's in-process state: what this process remembers between turns.

Everything a process keeps about a conversation outside the store lives in
its `Session`:

- `known`: its last full-history request and what was computed for it,
  which the resend fast path reuses (see `proxy.fastpath`);
- `branches`: summaries prepared in the background, per branch;
- `recalled`: the recall block its current question got, so the requests of
  the same turn (tool results) repeat it verbatim;
- `response`: the id of its latest Responses answer and that answer's chain
  hash, so that a request chained to it (`previous_response_id`) continues it,
  and, for a conversation whose id is derived, `lineage`: the chain hashes of
  that answer's branch, which the continuing turn's recall keeps to;
- `answer`: the digest of the last message its latest stored turn ends with,
  so that a request resending it but extending no snapshot (a client that
  trims its history) is looked for in the store (see `turn.load`);
- `unwritten`: an append-mode turn that was answered but that the store
  refused, written before the conversation's next turn (see `turn.commit`).

Sessions are bounded together, by roughly the bytes they hold, and dropped
least recently used first. `forget(key)` drops one at once: after it,
nothing of the conversation remains in this object but when it was forgotten
(`forgotten_since`), so that a turn under way then is not stored.

A branch is named by the snapshot its next turn extends (the one its last
turn stored). Two conversations that share a derived id but diverge each
continue their own branch, so one's preparation never replaces the other's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Set
from dataclasses import dataclass, field

from cachetools import LRUCache

from ..fastpath.known import Known
from ..store import ConvKey
from .state import SnapshotState

log = logging.getLogger("context_proxy.chat")

# Bytes all sessions may hold (their remembered requests dominate).
SESSION_BYTES = 64 * 1024 * 1024
# Fingerprints of conversations without an id that lead back to their session.
OPENINGS = 16_384
# What a chain hash held in a set costs (64 characters and the set's slot).
HASH_BYTES = 150
# Conversations whose deletion time is kept, for the turns under way when they went.
FORGOTTEN = 4_096
# Branches a session keeps prepared summaries for; the oldest go first.
BRANCHES = 4
# A session's own bookkeeping, counted on top of what it holds.
OVERHEAD = 200


@dataclass(slots=True, eq=False)
class Branch:
    """Summaries prepared for one branch of a conversation.

    `stretch` is the stretch between reductions a preparation was started
    for (one per stretch is enough: the turn crossing the trigger finds it).
    `texts` are the prepared summaries by their request's content key, and
    `tokens` what the summariser spent on those this process prepared.
    `at` is the head of the snapshot it is kept under (None: not kept yet).
    """

    stretch: tuple[int, int] | None = None
    texts: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    at: str | None = None


@dataclass(slots=True, eq=False)
class Recalled:
    """The recall block a question got: its digest, the block, and how many hits it quotes;
    `tip`, in a derived conversation, the chain hash its request ended with (the block
    serves only requests of that branch)."""

    question: bytes
    block: str
    hits: int
    tip: str = ""


@dataclass(slots=True, eq=False)
class Unwritten:
    """An append-mode turn answered but not written: `write` tries again (True: written;
    False: kept again); `size` is roughly the bytes it holds."""

    write: Callable[[], Awaitable[bool]]
    size: int


@dataclass(slots=True, eq=False)
class Session:
    known: Known | None = None
    branches: dict[str, Branch] = field(default_factory=dict)
    recalled: Recalled | None = None
    openings: set[Hashable] = field(default_factory=set)
    response: tuple[str, str] | None = None  # the latest answer's id and chain hash
    lineage: set[str] = field(default_factory=set)  # that answer's branch (derived ids only)
    answer: bytes | None = None  # the digest of the latest stored turn's last message
    unwritten: Unwritten | None = None

    @property
    def weight(self) -> int:
        held = self.known.weight if self.known is not None else 0
        held += HASH_BYTES * len(self.lineage)
        held += sum(len(t) for b in self.branches.values() for t in b.texts.values())
        held += len(self.recalled.block) if self.recalled is not None else 0
        held += self.unwritten.size if self.unwritten is not None else 0
        return OVERHEAD + held


class _Bounded(LRUCache[ConvKey, Session]):
    """An LRU of sessions by weight that unlinks a session's openings when it is evicted."""

    def __init__(self, maxsize: int, openings: LRUCache[Hashable, ConvKey]) -> None:
        super().__init__(maxsize, getsizeof=_weight)
        self._openings = openings

    def popitem(self) -> tuple[ConvKey, Session]:
        key, session = super().popitem()
        _unlink(self._openings, key, session.openings)
        _lost(key, session)
        return key, session


def _weight(session: Session) -> int:
    return session.weight


def _lost(key: ConvKey, session: Session) -> None:
    if session.unwritten is not None:
        log.error(
            "turn of %s not stored: dropped from memory before the store took it", key.conversation
        )


def _unlink(openings: LRUCache[Hashable, ConvKey], key: ConvKey, marks: Iterable[Hashable]) -> None:
    for mark in marks:
        if openings.get(mark) == key:
            del openings[mark]


class Sessions:
    """Every conversation's `Session`, bounded by `max_bytes`, with one `forget`."""

    def __init__(self, max_bytes: int = SESSION_BYTES, max_openings: int = OPENINGS) -> None:
        self._openings: LRUCache[Hashable, ConvKey] = LRUCache(max_openings)
        self._sessions = _Bounded(max_bytes, self._openings)
        self._forgotten: LRUCache[ConvKey, float] = LRUCache(FORGOTTEN)

    def __contains__(self, key: ConvKey) -> bool:
        return key in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, key: ConvKey) -> Session | None:
        return self._sessions.get(key)

    def known(self, key: ConvKey) -> Known | None:
        session = self._sessions.get(key)
        return session.known if session is not None else None

    def opened_by(self, fingerprint: Hashable) -> ConvKey | None:
        """The conversation whose last request began with these bytes (no id needed)."""
        return self._openings.get(fingerprint)

    def remember(self, key: ConvKey, known: Known, fingerprints: Iterable[Hashable] = ()) -> None:
        """Keep `known` as the conversation's last request, findable by its `fingerprints`."""
        session = self._sessions.get(key) or Session()
        session.known = known
        for fingerprint in fingerprints:
            self._openings[fingerprint] = key
            session.openings.add(fingerprint)
        self._store(key, session)

    def answered(
        self,
        key: ConvKey,
        response_id: str,
        answer_hash: str,
        lineage: Set[str] = frozenset(),
        added: Iterable[str] = (),
    ) -> None:
        """The conversation's latest answer has this id (and chain hash), on the branch
        of `lineage`'s chain hashes and those `added` (kept for a derived id's recall;
        none: not kept).

        Only the latest is kept: a request chained to an earlier answer (a
        retry, a branch) would otherwise continue turns it never saw. A turn
        that continued the branch kept here (`lineage` is it) extends it in
        place: a chained turn costs what it adds, not the whole branch.
        """
        session = self._sessions.get(key) or Session()
        if session.response is not None:
            old = ("response", key.tenant, session.response[0])
            session.openings.discard(old)
            _unlink(self._openings, key, [old])
        mark = ("response", key.tenant, response_id)
        self._openings[mark] = key
        session.openings.add(mark)
        session.response = (response_id, answer_hash)
        if lineage is session.lineage:
            session.lineage.update(added)
        else:
            session.lineage = {*lineage, *added}
        self._store(key, session)

    def lineage(self, key: ConvKey, tip: str) -> Set[str]:
        """The chain hashes of the branch of the conversation's latest answer (see `answered`),
        if `tip` is that answer's chain hash; else none (a turn forked from an earlier answer
        is on another branch). The kept set itself, which only that branch's next chained
        turn extends (append-mode turns of a conversation apply one at a time; any other
        turn replaces it)."""
        session = self._sessions.get(key)
        if session is None or session.response is None or session.response[1] != tip:
            return frozenset()
        return session.lineage

    def stored(self, key: ConvKey, answer: bytes) -> None:
        """The conversation's latest stored turn ends with a message of digest `answer`."""
        session = self._sessions.get(key) or Session()
        session.answer = answer
        self._store(key, session)

    def last_answer(self, key: ConvKey) -> bytes | None:
        session = self._sessions.get(key)
        return session.answer if session is not None else None

    def chained(self, tenant: str, response_id: str) -> tuple[ConvKey, str] | None:
        """The conversation whose latest answer had this id, and that answer's chain hash."""
        key = self._openings.get(("response", tenant, response_id))
        session = self._sessions.get(key) if key is not None else None
        if key is None or session is None or session.response is None:
            return None
        found_id, answer_hash = session.response
        return (key, answer_hash) if found_id == response_id else None

    def branch(self, key: ConvKey, extends: str, stored: SnapshotState | None = None) -> Branch:
        """The branch whose next turn extends the snapshot with head `extends`.

        None kept (another process served the snapshot's turn): a new one, for
        the stretch the `stored` snapshot says a preparation was started for,
        with what this process prepared for that stretch in an earlier turn
        (the store keeps what another process prepared). Texts are keyed by what
        they summarise, so one prepared on another branch fits only a request
        to summarise the very same messages.
        """
        session = self._sessions.get(key)
        found = session.branches.get(extends) if session is not None else None
        if found is not None:
            return found
        if stored is None or stored.prepared_for is None:
            return Branch()
        texts: dict[str, str] = {}
        tokens: dict[str, int] = {}
        for mine in session.branches.values() if session is not None else ():
            if mine.stretch == stored.prepared_for:
                texts.update(mine.texts)
                tokens.update(mine.tokens)
        return Branch(stored.prepared_for, texts, tokens)

    def advance(self, key: ConvKey, branch: Branch, head: str) -> None:
        """A turn of `branch` stored the snapshot `head`: the branch's next turn extends it."""
        if branch.stretch is None and not branch.texts:
            return
        session = self._sessions.get(key) or Session()
        if branch.at is not None and session.branches.get(branch.at) is branch:
            del session.branches[branch.at]
        branch.at = head
        session.branches[head] = branch
        while len(session.branches) > BRANCHES:
            del session.branches[next(iter(session.branches))]
        self._store(key, session)

    def prepared(
        self, key: ConvKey, branch: Branch, texts: dict[str, str], tokens: dict[str, int]
    ) -> None:
        """A background preparation for `branch` finished: its texts replace the branch's."""
        branch.texts, branch.tokens = texts, tokens
        session = self._sessions.get(key)
        if session is not None and any(b is branch for b in session.branches.values()):
            self._store(key, session)  # its weight changed

    def recall(self, key: ConvKey) -> Recalled | None:
        session = self._sessions.get(key)
        return session.recalled if session is not None else None

    def recalled(self, key: ConvKey, recalled: Recalled) -> None:
        session = self._sessions.get(key) or Session()
        session.recalled = recalled
        self._store(key, session)

    def unwritten(self, key: ConvKey, turn: Unwritten) -> None:
        """Keep an append-mode turn the store refused, to write before the next one."""
        session = self._sessions.get(key) or Session()
        _lost(key, session)  # one kept already (its write was cut) goes: the newer holds more
        session.unwritten = turn
        self._store(key, session)

    def take_unwritten(self, key: ConvKey) -> Unwritten | None:
        """The conversation's turn kept unwritten, if any, no longer kept."""
        session = self._sessions.get(key)
        if session is None or session.unwritten is None:
            return None
        turn, session.unwritten = session.unwritten, None
        self._store(key, session)
        return turn

    def take_every_unwritten(self) -> list[Unwritten]:
        """Every conversation's turn kept unwritten, no longer kept (the process stops)."""
        return [turn for key in list(self._sessions) if (turn := self.take_unwritten(key))]

    def forget(self, key: ConvKey, *, deleted: bool = True) -> None:
        """Drop everything this process keeps of the conversation; `deleted` (the store's
        copy goes too) marks its turns under way as not to be stored."""
        if deleted:
            self._forgotten[key] = time.monotonic()
        session = self._sessions.pop(key, None)
        if session is not None:
            _unlink(self._openings, key, session.openings)

    def forgotten_since(self, key: ConvKey, began: float) -> bool:
        """Whether the conversation was forgotten (deleted) after `began` (`time.monotonic`):
        a turn under way then would bring back what its deletion removed."""
        return self._forgotten.get(key, float("-inf")) > began

    def holds(self, key: ConvKey) -> bool:
        """Whether anything of the conversation is kept here (its session or an opening)."""
        return key in self._sessions or key in set(self._openings.values())

    def _store(self, key: ConvKey, session: Session) -> None:
        if session.weight <= self._sessions.maxsize:
            self._sessions[key] = session  # (re)computes its weight
        else:  # grown past the whole bound: kept, it would break it
            _lost(key, session)
            self.forget(key, deleted=False)
