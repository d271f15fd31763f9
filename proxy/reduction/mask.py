"""The `mask` strategy: old tool results cleared to a placeholder, then a second strategy.

In agent conversations most tokens are tool output that mattered once: a
file read, a search, a command's log. Clearing the old ones (the way
Anthropic's context editing and LangChain's `ClearToolUsesEdit` do) frees
most of the window without a summariser call, and the call/result pairing
stays valid because each result keeps its place and only its text changes.

- Trigger: the history as it would be forwarded (standing clearings
  applied) passes `budget.limit`.
- A clearing replaces every result older than the newest
  `keep_tool_uses` and than the last call (the active tool round), except
  results of `exclude_tools`. It happens only when it frees at least
  `MaskPolicy.minimum` tokens: a smaller one would cost a prompt-cache
  write for little room.
- Between clearings nothing more is cleared: the state keeps the body
  index below which results stay cleared (`extra["mask"]`), so the
  forwarded prefix is the same from one turn to the next.
- The masked history then goes through `policy.mask.then` (default
  `summarize`), which cuts or summarises only if clearing was not enough.

The placeholder names the tool, the call and the tokens cleared; the full
text stays in the archive, where recall can find it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..messages import Message
from .layout import head_of
from .types import Budget, Counter, Policy, ReductionState, Working, tokens_of

MASK_KEY = "mask"


def placeholder_text(tool: str, call_id: str, tokens: int) -> str:
    return (
        f"[Tool result cleared to save context: {tool} (call {call_id}), {tokens} tokens. "
        "The full text is kept in the context-proxy archive.]"
    )


@dataclass(frozen=True)
class Masked:
    """The working history with its results cleared, and how the clearing went."""

    working: Working
    before: int  # body index below which results are cleared (the next turn's too)
    fired: bool  # this turn cleared results that were forwarded whole before
    # Under the trigger, a clearing that would happen now: the next crossing clears
    # rather than summarises, so no summary needs preparing for it.
    ready: bool


def cleared_before(state: ReductionState) -> int:
    value = state.extra.get(MASK_KEY, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def mask_working(working: Working, policy: Policy, budget: Budget, count: Counter) -> Masked:
    """Apply the standing clearings, and clear more if the history passes the trigger."""
    dialect, rules = policy.dialect, policy.mask
    tail, start = working.tail, working.state.tail_start
    before = cleared_before(working.state)
    if not dialect.holds_tools(tail):
        return Masked(working, before, fired=False, ready=False)
    names: dict[str, str] = {}
    results: list[tuple[int, str, str]] = []  # (tail index, tool, call id) of clearable ones
    last_call = -1
    for i, item in enumerate(tail):
        made = dialect.call_names(item)
        if made:
            names.update(made)
            last_call = i
        for answered in dialect.answers(item):
            tool = names.get(answered)
            if tool is not None and tool not in rules.exclude_tools:
                results.append((i, tool, answered))

    out = list(tail)
    standing = _placeholders(
        tail, [r for r in results if start + r[0] < before], count, dialect.cleared
    )
    for i, short, _ in standing:
        out[i] = short
    head = head_of(working.leading, working.state, dialect)
    total = tokens_of(count, head) + tokens_of(count, out)
    ready = False
    near = policy.prepare_ratio * budget.limit if policy.prepare_ratio else budget.limit
    if total > near:
        keep = rules.keep_tool_uses
        kept_from = len(tail) if keep == 0 else results[-keep][0] if keep <= len(results) else 0
        newer = [r for r in results if start + r[0] >= before and r[0] < last_call]
        shorter = _placeholders(tail, newer, count, dialect.cleared)
        minimum = rules.minimum(budget)
        # By the crossing, results now among the newest kept will be older ones:
        # what all of them would free says whether that crossing clears.
        ready = sum(freed for _, _, freed in shorter) >= minimum
        now = [s for s in shorter if s[0] < kept_from]
        if total > budget.limit and now and sum(freed for _, _, freed in now) >= minimum:
            for i, short, _ in now:
                out[i] = short
            masked = replace(working, tail=tuple(out))
            return Masked(masked, start + now[-1][0] + 1, fired=True, ready=False)
    if not standing:
        return Masked(working, before, fired=False, ready=ready)
    return Masked(replace(working, tail=tuple(out)), before, fired=False, ready=ready)


def _placeholders(
    tail: Sequence[Message],
    results: Sequence[tuple[int, str, str]],
    count: Counter,
    cleared: Callable[[Message, str, str], Message],
) -> list[tuple[int, Message, int]]:
    """Each item's index, the item with its results cleared, and the tokens that frees.

    A result already shorter than its placeholder stays as it is. An item
    holding several results (Anthropic's) names in each placeholder what
    that result's own content took.
    """
    by_item: dict[int, list[tuple[str, str]]] = {}
    for i, tool, call_id in results:
        by_item.setdefault(i, []).append((tool, call_id))
    out: list[tuple[int, Message, int]] = []
    for i, calls in by_item.items():
        whole = count(tail[i])
        short = tail[i]
        for tool, call_id in calls:
            size = count(short)
            tokens = whole if len(calls) == 1 else size - count(cleared(short, call_id, ""))
            shorter = cleared(short, call_id, placeholder_text(tool, call_id, tokens))
            if count(shorter) < size:
                short = shorter
        freed = whole - count(short)
        if freed > 0:
            out.append((i, short, freed))
    return out
