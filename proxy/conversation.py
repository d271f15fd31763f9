"""Which conversation a request belongs to, and how it lines up with what was stored.

Pure functions: the app loads stored values, these decide, the app writes.

Matching is by content, not by count: every message gets a hash chained to
its parent's (`messages.chain_hashes`), and each completed turn is stored
as a snapshot keyed by the hash of the last message it forwarded. A
full-history request continues the snapshot whose head appears latest in
its own chain, so an edit or a regeneration continues from the point of
divergence, and two conversations that open alike (and so share a derived
id) each find their own branch without disturbing the other.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .blocks import marked, unmarked
from .dialects import Dialect
from .dialects.chat_completions import CHAT
from .errors import ProxyError
from .messages import Message, as_meant, canonical, chain_hashes, is_leading, split_leading
from .reduction.types import ReductionState, Working
from .turn.state import SnapshotState, Stats

MAX_ID_LENGTH = 200
_ID_PATTERN = re.compile(r"^[\x21-\x7e]{1,200}$")


@dataclass(frozen=True)
class Identity:
    tenant: str
    conversation: str


def tenant_of(api_key: str) -> str:
    """The namespace of everything a key stores: its SHA-256, never the key itself."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def derive_id(tenant: str, messages: Sequence[Message]) -> str:
    """A stable id from the tenant and the opening (instructions and first message).

    Only the opening is read: a long history costs no more than a short one.
    The first message counts as it is meant (`messages.as_meant`): a client
    that marks its newest message for the prompt cache marks the first one
    on the first turn only. The instructions count as sent, as they go
    upstream.
    """
    digest = hashlib.blake2b(tenant.encode(), digest_size=12)
    for message in messages:
        if not is_leading(message):
            digest.update(canonical(as_meant(message)))
            break
        digest.update(canonical(message))
    return "conv_" + digest.hexdigest()


def identify(tenant: str, header_id: str | None, messages: Sequence[Message]) -> Identity:
    if header_id is None or header_id == "":
        return Identity(tenant, derive_id(tenant, messages))
    if not _ID_PATTERN.match(header_id):
        raise ProxyError(
            400,
            "X-Conversation-Id must be 1 to 200 printable ASCII characters without spaces.",
            param="X-Conversation-Id",
            code="invalid_conversation_id",
        )
    return Identity(tenant, header_id)


@dataclass(frozen=True)
class Turn:
    """A request reconciled with stored state.

    `history` is the conversation as the client knows it this turn (in append
    mode, as the proxy supplies it); `new` are the messages not archived yet,
    chained from `parent`; `head`/`position` key the snapshot this turn stores.
    """

    history: tuple[Message, ...]
    working: Working
    new: tuple[Message, ...]
    new_hashes: tuple[str, ...]
    parent: str
    head: str
    position: int
    prior: SnapshotState
    continued: bool
    # The archive's hash of the history's last message, which the answer chains from:
    # `head` unless the store holds the history under a longer chain (`Archived`).
    tip: str
    # Chain hashes of every message of `history`, when known (full-history mode).
    hashes: tuple[str, ...] = ()

    @property
    def rooted(self) -> bool:
        """Whether the archive chains this turn's messages from its own first one."""
        return self.tip == self.head


@dataclass(frozen=True, slots=True)
class Archived:
    """The first `count` messages of a request the store holds already, though no
    snapshot matched it, the last of them archived as `hash`; `stats` are the
    conversation's so far, which the turn adds to.

    A client that trims its own history resends a window of what was stored:
    its chain starts at the window's first message, the archive's at the
    conversation's, so only what follows the window is new.
    """

    count: int
    hash: str
    stats: Stats = field(default_factory=Stats)


def window_end(incoming: Sequence[bytes], leading: int, answer: bytes) -> int:
    """Where a window of the stored conversation would end in a request (by digests):
    after the last copy of the stored `answer` past its `leading` instructions; 0: none."""
    for end in range(len(incoming), leading, -1):
        if incoming[end - 1] == answer:
            return end
    return 0


def reconcile_full(
    incoming: Sequence[Message],
    hashes: Sequence[str],
    position: int | None,
    prior: Mapping[str, Any] | None,
    archived: Archived | None = None,
) -> Turn:
    """The client resent its whole history; `position`/`prior` are the matched snapshot, if any.

    `archived` says how much of it the store holds though no snapshot matched:
    only what follows is archived, chained from there.
    """
    leading, body = split_leading(incoming)
    state = ReductionState()
    continued = False
    stored = SnapshotState.from_json(prior) if prior is not None else None
    if position is not None and stored is not None and stored.leading == len(leading):
        candidate = stored.reduction
        covered = max((b.covers for b in candidate.summaries), default=0)
        # A stored window is usable only if everything it replaces lies inside
        # the prefix the client provably still sends.
        if covered <= candidate.tail_start <= max(0, position - len(leading)) <= len(body):
            state, continued = candidate, True
    p = position if continued and position is not None else 0
    before = stored if continued and stored is not None else SnapshotState()
    archived_at = ""  # the archive's hash to chain the new messages from, if not the request's
    if continued and stored is not None and stored.archived_head:
        archived_at = stored.archived_head  # the snapshot's turn was archived further back
    elif not continued and archived is not None and 0 < archived.count <= len(incoming):
        p, archived_at, before = archived.count, archived.hash, SnapshotState(stats=archived.stats)
    new = tuple(incoming[p:])
    if archived_at:
        parent, new_hashes = archived_at, tuple(chain_hashes(new, archived_at))
    else:
        parent, new_hashes = (hashes[p - 1] if p > 0 else ""), tuple(hashes[p:])
    head = hashes[-1] if hashes else ""
    return Turn(
        history=tuple(incoming),
        working=Working(tuple(leading), tuple(body[state.tail_start :]), state),
        new=new,
        new_hashes=new_hashes,
        parent=parent,
        head=head,
        position=len(incoming),
        prior=before,
        continued=continued,
        tip=new_hashes[-1] if new_hashes else parent,
        hashes=tuple(hashes),
    )


def reconcile_append(
    new: Sequence[Message],
    stored_working: Sequence[Message],
    prior: Mapping[str, Any],
    stored_position: int,
    dialect: Dialect = CHAT,
) -> Turn:
    """The client sent only new messages; the stored working history supplies the rest.

    A client that marks what it sends for the prompt cache has moved its
    breakpoints there: the stored messages keep the ones they were sent with
    only while the new messages carry none, or each turn would add one more
    and pass the four Anthropic allows. `new` is empty when the request was
    only the start of the answer (Anthropic's prefill): the answer then
    follows the stored one.
    """
    stored = SnapshotState.from_json(prior) or SnapshotState()
    leading = tuple(stored_working[: stored.leading])
    earlier = stored_working[stored.leading :]
    if any(map(marked, new)):
        earlier = [unmarked(m) for m in earlier]
    tail = tuple(earlier) + tuple(new)
    state = stored.reduction
    parent = stored.answer_hash
    hashes = chain_hashes(new, parent)
    summary = [dialect.summary(b.text) for b in state.summaries]
    return Turn(
        history=(*leading, *summary, *tail),
        working=Working(leading, tail, state),
        new=tuple(new),
        new_hashes=tuple(hashes),
        parent=parent,
        head=hashes[-1] if hashes else parent,
        position=stored_position + len(new),
        prior=stored,
        continued=True,
        tip=hashes[-1] if hashes else parent,
    )
