"""The settings' definitions: every section, key, default and meaning, in one place.

Settings are frozen dataclasses loaded once at start-up (`config.py`) and
passed down; no module reads the environment later. Each field carries its
documentation in `metadata["doc"]`, so the configuration reference is
generated from the same definition the loader uses and cannot drift
(`context-proxy config-doc`).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ENV_PREFIX = "CONTEXT_PROXY_"


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"doc": text}, **kw)


@dataclass(frozen=True)
class ServerSettings:
    host: str = _doc("Address to listen on.", default="127.0.0.1")
    port: int = _doc("Port to listen on.", default=8787)
    max_body_bytes: int = _doc(
        "Largest request body accepted; larger ones get 413.", default=16 * 1024 * 1024
    )
    max_messages: int = _doc(
        "Most messages (items) a conversation request may carry; more get 413.", default=20_000
    )
    body_timeout_s: float = _doc(
        "Seconds a client may take to send a request's body before a 408.", default=60.0
    )
    keepalive_timeout_s: float = _doc(
        "Seconds an idle client connection is kept open between requests.", default=5.0
    )
    limit_concurrency: int = _doc(
        "Most connections and requests served at once; past it new ones get 503 (0: no "
        "limit). Keep it below the process's open-file limit.",
        default=900,
    )
    shutdown_timeout_s: float = _doc(
        "On SIGTERM or Ctrl-C, requests under way (streamed answers included) get this "
        "long to finish; then they are cut, unstored (one without an answer yet gets 503), "
        "and the process exits.",
        default=30.0,
    )
    log_level: str = _doc("debug | info | warning | error.", default="info")
    log_format: str = _doc("text (human-readable) | json (one object per line).", default="text")
    workers: int = _doc(
        "Processes serving the same port and store (sqlite or redis). Each keeps its own "
        "in-process memory of conversations, so a turn served by another process than the "
        "last one is only slower, never different.",
        default=1,
    )
    fast_path: bool = _doc(
        "Reuse what the last turn computed for the history a full-history request "
        "resends, instead of parsing, hashing and counting it again. Off: every request "
        "is handled in full (same results, more CPU).",
        default=True,
    )


@dataclass(frozen=True)
class UpstreamSettings:
    base_url: str = _doc(
        "The OpenAI-compatible API that requests go to.", default="https://api.openai.com/v1"
    )
    timeout_s: float = _doc(
        "Seconds to wait for the upstream to answer (and between streamed chunks) before a 504.",
        default=600.0,
    )
    connect_timeout_s: float = _doc("Seconds to establish a connection before a 502.", default=10.0)
    api_key: str = _doc(
        "When set, sent upstream instead of the client's key; then clients "
        "must present one of [auth].client_keys.",
        default="",
    )
    max_connections: int = _doc("Size of the pooled upstream connection pool.", default=512)
    keepalive_s: float = _doc(
        "Seconds an idle upstream connection is kept for reuse. Keep it below the "
        "upstream's own idle timeout (5 s for uvicorn-based servers such as vLLM): a "
        "request sent just as the upstream closes an idle connection fails with a 502.",
        default=4.0,
    )
    max_answer_bytes: int = _doc(
        "Largest answer assembled for the archive (a whole answer's bytes, a streamed "
        "one's text). A larger answer is relayed in full but not stored, and the log "
        "says so; the next full-history request archives it.",
        default=16 * 1024 * 1024,
    )
    transport: str = _doc(
        "auto (reqwest when the `reqwest` extra is installed, else aiohttp) | aiohttp "
        "(aiohttp's pool for everything) | reqwest (pyreqwest, Rust on a thread of its "
        "own, for whole answers; streamed ones through aiohttp; needs "
        "`pip install 'context-proxy[reqwest]'`) | httpx (httpcore's own pool).",
        default="auto",
    )


@dataclass(frozen=True)
class StoreSettings:
    backend: str = _doc("memory | sqlite | redis.", default="sqlite")
    path: str = _doc("SQLite database file.", default="context-proxy.db")
    url: str = _doc("Redis URL.", default="redis://127.0.0.1:6379/0")
    ttl_s: int = _doc("Idle conversations expire after this many seconds.", default=2_592_000)
    max_conversations: int = _doc("Bound of the memory backend.", default=10_000)
    backoff_s: float = _doc(
        "Redis: after a call times out, Redis is skipped for this long (turns are served "
        "stateless, append turns get 503), then tried again, so a Redis that hangs costs one "
        "timeout (redis-py's socket timeout, 5 s unless store.url sets socket_timeout) per "
        "interval instead of one per request. Also how long a failed write (SQLite or Redis) "
        "makes append turns 503 unless a write succeeds first. Measured on a monotonic "
        "clock: a step of the system clock (NTP) neither ends nor extends it.",
        default=30.0,
    )


@dataclass(frozen=True)
class MaskSettings:
    keep_tool_uses: int = _doc("mask: the newest tool results always forwarded whole.", default=3)
    clear_at_least: int = _doc(
        "mask: fewest tokens a clearing must free, or nothing is cleared (it costs a "
        "prompt-cache write); 0: a fifth of the model's context window.",
        default=0,
    )
    exclude_tools: tuple[str, ...] = _doc(
        "mask: tools whose results are never cleared.", default=()
    )
    then: str = _doc(
        "mask: the strategy applied after clearing, which cuts or summarises only when "
        "clearing was not enough: none | messages | tokens | summarize | tiered | filter.",
        default="summarize",
    )


@dataclass(frozen=True)
class ReductionSettings:
    strategy: str = _doc(
        "none | messages | tokens | summarize | tiered | filter | mask (or mask+<strategy>: "
        "mask, then that strategy instead of [reduction.mask].then).",
        default="summarize",
    )
    trigger_ratio: float = _doc(
        "Reduce when the history passes this share of the context window (less reserved output).",
        default=0.7,
    )
    keep_recent_ratio: float = _doc(
        "Share of the history budget kept verbatim after a summary.", default=0.3
    )
    target_messages: int = _doc(
        "messages strategy (and summarize by count): messages kept.", default=20
    )
    threshold_messages: int = _doc("Reduce only when target + threshold is exceeded.", default=5)
    summarize_by: str = _doc("What triggers summarize: tokens | messages | both.", default="tokens")
    single_summary: bool = _doc(
        "true: re-summarise the old summary with the newly evicted "
        "messages; false: layered summaries.",
        default=True,
    )
    repair_tool_chains: bool = _doc(
        "Drop orphaned tool results and close unanswered calls on the way out.", default=True
    )
    summarizer_model: str = _doc("Model for summaries; empty: the request's own model.", default="")
    summarizer_base_url: str = _doc(
        "Where summaries are requested; empty: upstream.base_url.", default=""
    )
    prepare_ratio: float = _doc(
        "summarize: past this share of the trigger, the next summary is prepared in the "
        "background after the response, so the crossing turn does not wait; 0 disables.",
        default=0.8,
    )
    summarizer_api: str = _doc(
        "auto (a /v1/messages conversation through Anthropic's /v1/messages, the others "
        "through chat) | chat (POST /chat/completions) | responses (POST /responses, for "
        "upstreams that serve only the Responses API) | anthropic (POST /v1/messages).",
        default="auto",
    )
    summarizer_timeout_s: float = _doc(
        "A summary slower than this falls back to a window.", default=60.0
    )
    pinned_prefixes: tuple[str, ...] = _doc(
        "filter strategy: messages starting with these are always kept.",
        default=("SYSTEM CONTEXT (JSON):",),
    )
    mask: MaskSettings = field(
        default_factory=MaskSettings, metadata={"doc": "The mask strategy's table."}
    )


@dataclass(frozen=True)
class RecallSettings:
    enabled: bool = _doc(
        "Bring back archived messages relevant to the current question.", default=False
    )
    k: int = _doc("How many archived messages at most.", default=3)
    method: str = _doc(
        "lexical: SQLite FTS5 BM25 over the archive, no extra calls. embeddings: vectors "
        "from the upstream's /v1/embeddings with the client's key, computed in the "
        "background after each turn, plus one call per question. hybrid: both, their "
        "rankings fused (reciprocal rank fusion).",
        default="lexical",
    )
    embedding_model: str = _doc("Model for embeddings recall.", default="text-embedding-3-small")
    min_similarity: float = _doc(
        "embeddings: cosine similarity a message needs to be recalled.", default=0.35
    )
    max_tokens: int = _doc("Token cap of the recalled block.", default=2000)
    feedback: bool = _doc(
        "Pseudo-relevance feedback: where recall chose fewer than k messages for a question, "
        "the places left go to other messages holding a word the chosen ones say seldom "
        "(a pet's name, a car's make). No extra call; never a block where there was none.",
        default=True,
    )


@dataclass(frozen=True)
class ResponsesSettings:
    manage_server_state: bool = _doc(
        "A /v1/responses request chained by previous_response_id to the latest answer this "
        "process relayed for its conversation is continued from the proxy's store and "
        "forwarded stateless and reduced, without the id. Off (and for any other id): such "
        "requests go through as sent, and OpenAI holds the conversation.",
        default=False,
    )


@dataclass(frozen=True)
class AnthropicSettings:
    base_url: str = _doc(
        "Where /v1/messages (and the other Anthropic routes) go.",
        default="https://api.anthropic.com",
    )
    api_key: str = _doc(
        "When set, sent upstream as x-api-key instead of the client's key; then clients "
        "must present one of [auth].client_keys.",
        default="",
    )
    summarizer_model: str = _doc(
        "Model for the summaries of /v1/messages conversations made through Anthropic; "
        "empty: the request's own model.",
        default="",
    )
    version: str = _doc(
        "anthropic-version of the proxy's own calls (summaries) when the client sent none.",
        default="2023-06-01",
    )
    count_tokens: bool = _doc(
        "Near the trigger, ask /v1/messages/count_tokens for the reduced request's exact "
        "count (one call more on such turns) and reduce again if the estimate fell short.",
        default=False,
    )


@dataclass(frozen=True)
class RecordSettings:
    enabled: bool = _doc(
        "Append every chat request body, as received, to `path` (one JSON per line) for "
        "`context-proxy simulate`. Holds message content: opt-in.",
        default=False,
    )
    path: str = _doc("Where recorded request bodies go.", default="context-proxy-requests.jsonl")


@dataclass(frozen=True)
class ModelsSettings:
    default_context_tokens: int = _doc(
        "Context window of models missing from the table.", default=128_000
    )
    windows: Mapping[str, int] = _doc(
        'Per-model context windows, e.g. "my-local-model" = 32768.', default_factory=dict
    )


@dataclass(frozen=True)
class AuthSettings:
    client_keys: tuple[str, ...] = _doc(
        "When set, clients must present one of these keys.", default=()
    )
    admin_token: str = _doc("Enables /admin/* for `Authorization: Bearer <token>`.", default="")
    allow_anonymous: bool = _doc(
        "Allow an upstream.api_key without client_keys (an open relay); only for trusted networks.",
        default=False,
    )
    require_client_key: str = _doc(
        "auto | true | false. true: a request without an API key gets 401, since every "
        "keyless client shares one tenant (and so one another's conversations). auto: "
        "true when server.host is not a loopback address.",
        default="auto",
    )


@dataclass(frozen=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    upstream: UpstreamSettings = field(default_factory=UpstreamSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    reduction: ReductionSettings = field(default_factory=ReductionSettings)
    recall: RecallSettings = field(default_factory=RecallSettings)
    responses: ResponsesSettings = field(default_factory=ResponsesSettings)
    anthropic: AnthropicSettings = field(default_factory=AnthropicSettings)
    record: RecordSettings = field(default_factory=RecordSettings)
    models: ModelsSettings = field(default_factory=ModelsSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def requires_client_key(settings: Settings) -> bool:
    """Whether a request must carry an API key (`auth.require_client_key`)."""
    choice = settings.auth.require_client_key
    if choice == "auto":
        host = settings.server.host
        return not (host in LOOPBACK_HOSTS or host.startswith("127."))
    return choice == "true"


SECTIONS: dict[str, type[Any]] = {
    f.name: typing.get_type_hints(Settings)[f.name] for f in dataclasses.fields(Settings)
}
