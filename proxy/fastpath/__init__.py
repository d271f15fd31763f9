"""The resend fast path: a full-history request's resent prefix is not worked on again.

In full-history mode a client resends every message every turn. `Resend`
finds, before or while the body is checked, what of a request came last
turn (see `known` for how), and hands the turn pipeline what was computed
for it then: digests, chain hashes, token counts and the reduction core's
grouped tail. Everything it hands on is what the plain path would compute;
with `server.fast_path = false` nothing is found and every request is
handled in full, and a property test holds the two paths equal.

It only looks; any doubt (append mode, a header `identify` will refuse,
messages too malformed to derive an id from) means "nothing known".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import conversation as conv
from ..errors import ProxyError
from ..messages import Message, is_leading
from ..reduction.tail import Tail
from ..reduction.types import Reduction
from ..store import ConvKey
from ..tokens import RequestCounts
from ..upstream import bearer_token
from .known import Bounds, Known, fingerprints, list_start, locate, remember, reparse, resent

if TYPE_CHECKING:
    from ..turn.sessions import Sessions


class Resend:
    """What of one request's history the process already knows, and what to remember of it.

    `reparse` is tried first: a body that resends the remembered messages is
    parsed from its new bytes only. Otherwise the body is parsed in full and
    the parser calls this object with the payload. Either way the prefix it
    reports is not checked again (it was, when first seen).
    """

    def __init__(
        self,
        sessions: Sessions,
        headers: Mapping[str, str],
        body: bytes,
        *,
        enabled: bool = True,
        field: str = "messages",
        opening: Callable[[dict[str, Any]], list[Message]] | None = None,
    ) -> None:
        self.sessions = sessions
        self.field = field  # the payload's key that holds the history
        # What a derived conversation id is made from (the wire's `opening`).
        self.opening = opening or (lambda payload: payload[field])
        self.body = body
        self.tenant = conv.tenant_of(bearer_token(headers))
        self.header = headers.get("x-conversation-id")
        mode = headers.get("x-context-mode", "full").strip().lower()
        self.active = enabled and mode == "full"
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
        if not self.active:
            return None
        if self.header:
            keys: Sequence[Hashable] = [ConvKey(self.tenant, self.header)]
        else:
            self.looked_up = fingerprints(self.tenant, self.body)
            found = (self.sessions.opened_by(f) for f in self.looked_up)
            keys = list(dict.fromkeys(k for k in found if k is not None))
        for key in keys:
            assert isinstance(key, ConvKey)
            known = self.sessions.known(key)
            payload = reparse(self.body, known, self.field)
            if known is None or payload is None:
                continue
            if self._identify(self.opening(payload)) != key:
                return None
            self.key, self.known, self.count = key, known, len(known.messages)
            self.bounds = locate(self.body, payload, known, self.field)
            self.list_start = known.list_start
            self.reparsed = True
            return payload
        return None

    def __call__(self, payload: dict[str, Any]) -> int:
        """How many leading messages of a fully parsed `payload` were checked last turn."""
        if self.reparsed:
            return self.count
        if not self.active:
            return 0
        messages: list[Message] = payload[self.field]
        self.key = self._identify(self.opening(payload))
        if self.key is None:
            return 0
        self.known = self.sessions.known(self.key)
        self.bounds = locate(self.body, payload, self.known, self.field)
        self.list_start = list_start(self.body, payload, self.field)
        self.count = resent(self.known, messages, self.body, self.bounds, self.field)
        return self.count

    def of(self, key: ConvKey) -> Resend | None:
        """This object, if it speaks for conversation `key` (else the turn is handled in full)."""
        return self if self.active and self.key == key else None

    def memo(self, model: str, turn: conv.Turn) -> Tail | None:
        """Last turn's grouped tail, if this turn's tail starts where that one did."""
        known = self.known
        if not self.count or known is None or known.model != model or known.tail is None:
            return None
        same = known.leading == len(turn.working.leading)
        return known.tail if same and known.tail_start == turn.working.state.tail_start else None

    def remember(
        self,
        key: ConvKey,
        messages: list[Message],
        digests: list[bytes],
        hashes: list[str],
        count: RequestCounts,
        turn: conv.Turn,
        reduction: Reduction,
        memo: Tail | None,
    ) -> None:
        """Keep this request, with its tail as the next turn will start it, for the next one.

        A turn the core answered at a glance grouped nothing (its result has
        no tail), so the tail it was given as a memo is handed on: a prefix
        of the next turns' tails still, it spares the turn that crosses the
        trigger a regroup of the whole tail (a stale one only costs that).
        """
        tail = reduction.tail if reduction.tail is not None else memo
        moved = reduction.state.tail_start - turn.working.state.tail_start
        prefix_len, prefix_digest, suffix_len, suffix_digest = remember(self.body, self.bounds)
        known = Known(
            messages=tuple(messages),
            prefix_len=prefix_len,
            prefix_digest=prefix_digest,
            suffix_len=suffix_len,
            suffix_digest=suffix_digest,
            digests=tuple(digests),
            hashes=tuple(hashes),
            model=count.model,
            counts=count.counts,
            leading=len(turn.working.leading),
            tail_start=reduction.state.tail_start,
            tail=tail.since(moved) if tail is not None and moved >= 0 else None,
            list_start=self.list_start,
        )
        self.sessions.remember(key, known, self._fingerprints(known))

    def _fingerprints(self, known: Known) -> list[tuple[str, int, bytes]]:
        """How the next request finds `known` without a conversation id (none with one).

        Only the longest the resent part covers: a conversation whose start it
        shares has every shorter one in common too, so those would not tell
        them apart. Taken from the lookup's, which covered this whole body.
        """
        if self.header:
            return []
        found = self.looked_up or fingerprints(self.tenant, self.body)
        return [f for f in found if f[1] <= known.prefix_len][:1]
