"""What every request handler shares, created once in the app's lifespan."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Hashable
from dataclasses import dataclass, field

import httpx

from .config import Settings
from .metrics import Metrics
from .models import context_window
from .record import Recorder
from .reduction.types import Budget, Policy
from .store import Store
from .summarizer import Summarizer
from .tokens import TokenCounter


class KeyedLocks:
    """One asyncio lock per key, gone when no request holds or waits for it.

    Turns of one conversation are applied in arrival order; different
    conversations never wait on each other.
    """

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[Hashable, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def get(self, key: Hashable) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock


@dataclass
class AppContext:
    settings: Settings
    client: httpx.AsyncClient
    store: Store
    counter: TokenCounter
    summarizer: Summarizer
    metrics: Metrics
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    recorder: Recorder | None = None

    def policy(self, strategy: str) -> Policy:
        r = self.settings.reduction
        return Policy(
            strategy=strategy,
            single_summary=r.single_summary,
            repair_tool_chains=r.repair_tool_chains,
            summarize_by=r.summarize_by,
            pinned_prefixes=r.pinned_prefixes,
        )

    def budget(self, model: str, reserved_output: int) -> Budget:
        r = self.settings.reduction
        m = self.settings.models
        return Budget(
            context_tokens=context_window(model, m.windows, m.default_context_tokens),
            reserved_output=reserved_output,
            trigger_ratio=r.trigger_ratio,
            keep_recent_ratio=r.keep_recent_ratio,
            target_messages=r.target_messages,
            threshold_messages=r.threshold_messages,
        )
