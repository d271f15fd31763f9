"""The tail grouped into units, with running sums, extended turn by turn instead of regrouped.

In full-history mode a conversation of a thousand messages resends all of
them every turn, and only the last two are new. Grouping, repairing and
counting the whole tail again each turn would make a turn's cost grow with
the conversation. A `Tail` remembers the result for the messages it has seen;
`grouped_tail` reuses it for an equal prefix and groups only the rest, so a
turn costs what its new messages cost plus a few C-level copies.

Reuse is exact, not approximate: units are a left fold in which a message
can only join the unit right before it, and the repair passes act on each
unit alone, so every unit but the last of a prefix is final. The last one is
regrouped together with the new messages (a tool result may still join it).
The one exception is an item of a run (`Dialect.held_by`: a running
program's calls, code execution going on after the client's tools answered):
its unit reaches back to the run's first item, whose unit is regrouped with
everything after it. Where each run is, the tail learns the first turn that
needs it (`runs`) and keeps up to date from then on, so such a turn does not
read the whole tail again.

The running sums let `finish` keep a suffix of units without walking them:
the tokens, client messages and forwarded messages before unit `i` are
`token_sums[i]`, `message_sums[i]` and `forward_sums[i]`.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..dialects import Dialect
from ..dialects.chat_completions import CHAT
from ..messages import Message, as_meant, canonical
from .chains import Unit, group
from .repair import REPAIR_PASSES
from .types import Counter


@dataclass(frozen=True, eq=False)
class Tail:
    """`messages` grouped into `units` (repaired when `repair`), with token `sizes` per unit."""

    messages: tuple[Message, ...]
    units: tuple[Unit, ...]
    sizes: tuple[int, ...]
    repair: bool
    token_sums: tuple[int, ...]
    message_sums: tuple[int, ...]
    forward: tuple[Message, ...]
    forward_sums: tuple[int, ...]
    repaired: tuple[int, ...]  # indices of repaired units, ascending
    # The unit holding each run, by run id (one unit holds all of a run's items); None
    # until a turn's new messages go on with a run.
    runs: dict[str, int] | None = None
    # Running summary-key digests: previous texts -> (units hashed, digest state).
    keys: dict[tuple[str, ...], tuple[int, Any]] = field(default_factory=dict, repr=False)

    def keep_tokens_drop(self, active: int, keep: int) -> int:
        """Fewest leading units to drop so the rest fits `keep` tokens; never past `active`."""
        return _keep_drop(self.token_sums, active, keep)

    def keep_messages_drop(self, active: int, keep: int) -> int:
        """Fewest leading units to drop so at most `keep` messages remain; never past `active`."""
        return _keep_drop(self.message_sums, active, keep)

    def evicted_messages(self, units: int) -> tuple[Message, ...]:
        """The client messages of the first `units` units (what evicting them removes)."""
        return self.messages[: self.message_sums[units]]

    def evicted_key(self, previous: tuple[str, ...], units: int) -> str:
        """`summary_key(previous, self.evicted_messages(units))`, hashing only what is new.

        Near the trigger a summary is prepared every turn for a slightly
        longer span; the digest of the span hashed last time is carried on.
        """
        done, digest = self.keys.get(previous, (0, None))
        if digest is None or done > units:
            done, digest = 0, key_start(previous)
        else:
            digest = digest.copy()
        digest = key_extend(
            digest, self.messages[self.message_sums[done] : self.message_sums[units]]
        )
        self.keys[previous] = (units, digest.copy())
        return str(digest.hexdigest())

    def since(self, dropped: int) -> Tail | None:
        """The tail left after its first `dropped` messages, if they end on a unit boundary.

        After a reduction moves `tail_start`, the next turn's tail is this one
        minus the evicted units; rebasing the sums once is cheaper than
        regrouping from scratch.
        """
        if dropped == 0:
            return self
        at = bisect.bisect_left(self.message_sums, dropped)
        if at >= len(self.message_sums) or self.message_sums[at] != dropped:
            return None
        tokens, forwards = self.token_sums[at], self.forward_sums[at]
        return Tail(
            messages=self.messages[dropped:],
            units=self.units[at:],
            sizes=self.sizes[at:],
            repair=self.repair,
            token_sums=tuple(t - tokens for t in self.token_sums[at:]),
            message_sums=tuple(m - dropped for m in self.message_sums[at:]),
            forward=self.forward[forwards:],
            forward_sums=tuple(f - forwards for f in self.forward_sums[at:]),
            repaired=tuple(r - at for r in self.repaired if r >= at),
            runs=None
            if self.runs is None
            else {r: i - at for r, i in self.runs.items() if i >= at},
        )


def _keep_drop(sums: Sequence[int], active: int, keep: int) -> int:
    """The first d with `sums[-1] - sums[d] <= keep`, at most `active`: a bisection, not a walk."""
    return min(active, bisect.bisect_left(sums, sums[-1] - keep))


def key_start(previous: Iterable[str]) -> Any:
    """The summary-key digest of the previous summary texts (see `layout.summary_key`)."""
    digest = hashlib.blake2b(digest_size=16)
    for text in previous:
        digest.update(b"p" + text.encode() + b"\0")
    return digest


def key_extend(digest: Any, messages: Iterable[Message]) -> Any:
    # As meant: a summary prepared while a message held the client's cache
    # breakpoint still serves once the client has moved it on.
    for message in messages:
        digest.update(b"m" + canonical(as_meant(message)) + b"\0")
    return digest


def grouped_tail(
    messages: Sequence[Message],
    count: Counter,
    repair: bool,
    memo: Tail | None = None,
    dialect: Dialect = CHAT,
) -> Tail:
    """Group `messages`, reusing `memo` when it was built from a prefix of them.

    `memo` must come from a counter that agrees with `count` (same model);
    its messages are compared with the new ones, so a stale memo costs a
    regroup, never a wrong result.
    """
    messages = tuple(messages)
    keep = 0
    runs: dict[str, int] | None = None
    if memo is not None and memo.repair == repair and memo.units:
        n = len(memo.messages)
        if n <= len(messages) and messages[:n] == memo.messages:
            keep = len(memo.units) - 1  # the last unit may still grow
            runs = memo.runs
            going_on = {r for m in messages[n:] for r in dialect.held_by(m)}
            if going_on:  # a run reaches back to the unit of its first item
                runs = _runs(memo.units, dialect) if runs is None else runs
                keep = min([keep, *(runs[r] for r in going_on if r in runs)])
    start = memo.message_sums[keep] if memo is not None and keep else 0
    fresh = group(messages[start:], REPAIR_PASSES if repair else (), dialect)
    if runs is not None:
        runs = {r: i for r, i in runs.items() if i < keep} | _runs(fresh, dialect, keep)
    sizes = tuple(sum(count(m) for m in u.forward) for u in fresh)
    if memo is None or keep == 0:
        return _build(messages, fresh, sizes, repair, (0,), (0,), (0,), (), (), runs=runs)
    tail = _build(
        messages,
        memo.units[:keep] + fresh,
        memo.sizes[:keep] + sizes,
        repair,
        memo.token_sums[: keep + 1],
        memo.message_sums[: keep + 1],
        memo.forward_sums[: keep + 1],
        memo.forward[: memo.forward_sums[keep]],
        tuple(r for r in memo.repaired if r < keep),
        fresh_from=keep,
        runs=runs,
    )
    tail.keys.update({p: (n, d) for p, (n, d) in memo.keys.items() if n <= keep})
    return tail


def _runs(units: Sequence[Unit], dialect: Dialect, first: int = 0) -> dict[str, int]:
    """The index (from `first`) of the unit holding each run the `units` hold."""
    return {
        r: first + i for i, u in enumerate(units) for m in u.messages for r in dialect.held_by(m)
    }


def _build(
    messages: tuple[Message, ...],
    units: tuple[Unit, ...],
    sizes: tuple[int, ...],
    repair: bool,
    token_sums: tuple[int, ...],
    message_sums: tuple[int, ...],
    forward_sums: tuple[int, ...],
    forward: tuple[Message, ...],
    repaired: tuple[int, ...],
    fresh_from: int = 0,
    runs: dict[str, int] | None = None,
) -> Tail:
    """Extend the sums (which cover `units[:fresh_from]`) over the remaining units."""
    fresh = units[fresh_from:]
    new_sizes = sizes[fresh_from:]
    return Tail(
        messages=messages,
        units=units,
        sizes=sizes,
        repair=repair,
        token_sums=token_sums + tuple(itertools.accumulate(new_sizes, initial=token_sums[-1]))[1:],
        message_sums=message_sums
        + tuple(itertools.accumulate((u.size for u in fresh), initial=message_sums[-1]))[1:],
        forward=forward + tuple(m for u in fresh for m in u.forward),
        forward_sums=forward_sums
        + tuple(itertools.accumulate((len(u.forward) for u in fresh), initial=forward_sums[-1]))[
            1:
        ],
        repaired=repaired + tuple(fresh_from + i for i, u in enumerate(fresh) if u.repaired),
        runs=runs,
    )
