"""What every request handler shares, created once in the app's lifespan."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Hashable
from dataclasses import dataclass, field, replace

import httpx

from .dialects import Dialect
from .dialects.chat_completions import CHAT
from .embeddings import Embedder
from .metrics import Metrics
from .models import context_window
from .record import Recorder
from .reduction.types import Budget, MaskPolicy, Policy
from .settings import Settings, requires_client_key
from .store import ConvKey, Store
from .summarizer import Summarizer
from .tokens import TokenCounter
from .turn.background import Background
from .turn.sessions import Sessions
from .upstream import Provider, UpstreamClient, providers

MEMO_LIMIT = 4096


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
    client: UpstreamClient
    store: Store
    counter: TokenCounter
    summarizer: Summarizer
    metrics: Metrics
    embedder: Embedder | None = None  # set when recall uses embeddings
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    recorder: Recorder | None = None
    background: Background = field(default_factory=Background)
    # Everything this process keeps of each conversation between its turns.
    sessions: Sessions = field(default_factory=Sessions)

    def forget(self, key: ConvKey) -> None:
        """Drop everything this process keeps of a conversation (the store's part is `delete`)."""
        self.background.cancel(key)
        self.sessions.forget(key)

    # Budgets and policies are pure functions of settings and a few request values;
    # built once per distinct input instead of once per request.
    _budgets: dict[tuple[str, int], Budget] = field(default_factory=dict, repr=False)
    _policies: dict[tuple[str, bool, str], Policy] = field(default_factory=dict, repr=False)
    # The upstream is fixed by configuration, so each route's URL is parsed once.
    _urls: dict[tuple[str, str], httpx.URL] = field(default_factory=dict, repr=False)
    require_key: bool = field(init=False)
    providers: dict[str, Provider] = field(init=False)

    def __post_init__(self) -> None:
        self.require_key = requires_client_key(self.settings)
        self.providers = providers(self.settings)

    def url_for(self, path: str, provider: str = "openai", query: str = "") -> httpx.URL:
        """The upstream URL of a wire format's route (`path` is fixed by the dialect), with
        the client's `query` as sent (Azure's `api-version`, say)."""
        if query:  # the client's to choose, so not kept
            return httpx.URL(self.providers[provider].url(path, query))
        found = self._urls.get((path, provider))
        if found is None:
            found = self._urls[path, provider] = httpx.URL(self.providers[provider].url(path))
        return found

    def policy(self, strategy: str, *, preparing: bool = True, dialect: Dialect = CHAT) -> Policy:
        """The strategy's policy; `preparing=False` turns summary preparation off.

        A stretch that has its preparation already needs no other (see
        `turn.background.prepare_next`), and without one to compute the core answers a
        turn near the trigger at a glance instead of grouping the tail to
        find the eviction it would prepare.
        """
        key = (strategy, preparing, dialect.name)
        found = self._policies.get(key)
        if found is None:
            found = replace(self._policy(strategy), dialect=dialect)
            if not preparing:
                found = replace(found, prepare_ratio=0.0)
            self._policies[key] = found
        return found

    def estimates(self, provider: str) -> bool:
        """Whether token counts for `provider` are estimates: Claude's tokenizer is not
        available offline, nor OpenAI's without its encoding files."""
        return provider == "anthropic" or not self.counter.exact

    def budget(self, model: str, reserved_output: int) -> Budget:
        key = (model, reserved_output)
        found = self._budgets.get(key)
        if found is None:
            if len(self._budgets) >= MEMO_LIMIT:  # models and max_tokens come from clients
                self._budgets.clear()
            found = self._budgets[key] = self._budget(model, reserved_output)
        return found

    def _policy(self, strategy: str) -> Policy:
        r = self.settings.reduction
        return Policy(
            strategy=strategy,
            single_summary=r.single_summary,
            repair_tool_chains=r.repair_tool_chains,
            summarize_by=r.summarize_by,
            prepare_ratio=r.prepare_ratio,
            pinned_prefixes=r.pinned_prefixes,
            mask=MaskPolicy(
                keep_tool_uses=r.mask.keep_tool_uses,
                clear_at_least=r.mask.clear_at_least,
                exclude_tools=r.mask.exclude_tools,
                then=r.mask.then,
            ),
        )

    def _budget(self, model: str, reserved_output: int) -> Budget:
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
