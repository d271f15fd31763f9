"""A store shared by several proxy replicas: conversations live in Redis.

Per conversation, under `<prefix>:c:<tenant>:<conversation>`:
`:conv` (hash: head, position, state, working, turns, times), `:msgs`
(hash: chain hash -> [parent, message]), `:order` (list of chain hashes in
arrival order), `:snaps` (hash: head -> [position, state, created_at]) and
`:snapturns` (sorted set: head by turn, for pruning), and `:vecs` (hash:
"model:chain hash" -> base64 float32, recall's embeddings, shared by replicas) and
`:kept` (hash: request key -> [kept at, text], summaries made ahead).
`<prefix>:idx:<tenant>` and `<prefix>:idx` index conversations by last update
for the admin listing.

A turn is one Lua script, which Redis runs atomically: no replica ever sees
half a turn, and two replicas committing to one conversation are serialised.
Every key of a conversation gets `EXPIRE ttl_s` on each commit, so Redis
itself forgets idle conversations; reads also compare `updated_at` with the
injected clock, so expiry behaves exactly as in the other backends.
Keys are not hash-tagged: the script touches the shared indexes too, so it
needs a single Redis (or a cluster with one shard), not Redis Cluster.
A call that times out makes the store skip Redis for `backoff_s` (`_calling`),
measured on a monotonic clock, which a step of the wall clock does not move.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from proxy.messages import Message
from proxy.store import search
from proxy.store.base import (
    DEFAULT_MAX_SNAPSHOTS,
    DEFAULT_TTL_S,
    SUMMARIES_KEPT,
    ArchivedMessage,
    Conflict,
    Conversation,
    ConversationSummary,
    ConvKey,
    Snapshot,
    StoreError,
    TurnCommit,
    dumps,
    loads,
    standing,
)
from proxy.store.indexed import ArchiveSearch, Searchable

_HMGET_CHUNK = 500
DEFAULT_BACKOFF_S = 30.0
log = logging.getLogger("context_proxy.store")

# A message's archived value and its ancestors', newest first, walked inside Redis (one
# call however long the walk). A value is `["<parent>", message]`: the parent, a hex
# hash, is read off its start, never decoding a message (a tool result may be large).
_CHAIN = """
local found, last, limit = {}, ARGV[1], tonumber(ARGV[2])
while #found < limit do
  local value = redis.call('HGET', KEYS[1], last)
  if not value then break end
  found[#found + 1] = value
  last = string.match(value, '^%["(%x*)"')
  if not last then break end
end
return found
"""

_COMMIT = """
local conv, msgs, order, snaps, snapturns, tidx, gidx = unpack(KEYS)
local now, cutoff, ttl, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local updated = redis.call('HGET', conv, 'updated_at')
local expired = ttl > 0 and updated and tonumber(updated) < cutoff
-- Checked before the expired conversation is dropped, so a refused commit writes nothing.
if ARGV[11] ~= '' then
  local current = 0
  if not expired then current = tonumber(redis.call('HGET', conv, 'turns') or '0') end
  if current ~= tonumber(ARGV[11]) then return redis.error_reply('CONFLICT') end
end
if expired then
  redis.call('DEL', conv, msgs, order, snaps, snapturns)
end
local turns = redis.call('HINCRBY', conv, 'turns', 1)
if turns == 1 then redis.call('HSET', conv, 'created_at', now) end
redis.call('HSET', conv, 'head', ARGV[5], 'position', ARGV[6], 'state', ARGV[7],
  'working', ARGV[8], 'updated_at', now)
for i = 12, #ARGV, 2 do
  if redis.call('HSETNX', msgs, ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('RPUSH', order, ARGV[i])
  end
end
redis.call('HSET', snaps, ARGV[5], ARGV[9])
redis.call('ZADD', snapturns, turns, ARGV[5])
local excess = redis.call('ZCARD', snapturns) - keep
if excess > 0 then
  local old = redis.call('ZRANGE', snapturns, 0, excess - 1)
  redis.call('HDEL', snaps, unpack(old))
  redis.call('ZREM', snapturns, unpack(old))
end
if ttl > 0 then
  for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ttl) end
  redis.call('ZREMRANGEBYSCORE', tidx, '-inf', '(' .. ARGV[2])
  redis.call('ZREMRANGEBYSCORE', gidx, '-inf', '(' .. ARGV[2])
end
redis.call('ZADD', tidx, now, ARGV[10])
redis.call('ZADD', gidx, now, ARGV[10])
return turns
"""


T = TypeVar("T")


class RedisStore(Searchable):
    """Conversations in Redis at `url`; see the module docstring for the key layout.

    The client connects lazily: call `ping()` at start-up to fail fast.
    """

    def __init__(
        self,
        url: str,
        *,
        ttl_s: int = DEFAULT_TTL_S,
        max_snapshots: int = DEFAULT_MAX_SNAPSHOTS,
        prefix: str = "context-proxy",
        now: Callable[[], float] = time.time,
        backoff_s: float = DEFAULT_BACKOFF_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis: Redis = Redis.from_url(url, decode_responses=True)
        self._ttl_s = ttl_s
        self._max_snapshots = max(1, max_snapshots)
        self._prefix = prefix
        self._now = now  # dates what is stored, and expiry
        self._monotonic = monotonic  # the back-offs: durations a wall clock's step would move
        self._commit = self._redis.register_script(_COMMIT)
        self._chain = self._redis.register_script(_CHAIN)
        self._search = ArchiveSearch()
        # Why the last commit failed (out of memory, say), and when (`monotonic`): see `_refusing`.
        self._commit_failed: tuple[str, float] | None = None
        self._backoff_s = backoff_s
        self._skip_until = float("-inf")  # Redis timed out: skipped until then (`_calling`)

    @contextlib.contextmanager
    def _calling(self) -> Iterator[None]:
        """Around calls to Redis: its errors as `StoreError`, and the back-off.

        A Redis that hangs (stopped, its host gone) answers nothing, and every
        request would wait the client's socket timeout for each call; after a
        timeout, calls fail at once for `backoff_s`, then the next one tries.
        """
        if self._monotonic() < self._skip_until:
            left = self._skip_until - self._monotonic()
            raise StoreError(f"Redis timed out; skipped for {left:.0f} s more")
        try:
            yield
        except RedisTimeoutError as exc:
            self._skip_until = self._monotonic() + self._backoff_s
            log.warning("Redis timed out; skipping it for %s s: %s", self._backoff_s, exc)
            raise StoreError(f"Redis: {exc}") from exc
        except RedisError as exc:
            raise StoreError(f"Redis: {exc}") from exc

    def _keys(self, key: ConvKey) -> list[str]:
        base = f"{self._prefix}:c:{key.tenant}:{key.conversation}"
        return [f"{base}:{part}" for part in ("conv", "msgs", "order", "snaps", "snapturns")]

    def _cutoff(self) -> float:
        return self._now() - self._ttl_s if self._ttl_s > 0 else float("-inf")

    async def _live(self, key: ConvKey) -> bool:
        updated = cast("str | None", await self._redis.hget(self._keys(key)[0], "updated_at"))
        return updated is not None and float(updated) >= self._cutoff()

    async def commit(self, turn: TurnCommit, *, wait: bool = True) -> None:
        snap = turn.snapshot
        keys = [
            *self._keys(turn.key),
            f"{self._prefix}:idx:{turn.key.tenant}",
            f"{self._prefix}:idx",
        ]
        args: list[Any] = [
            repr(self._now()),
            repr(self._cutoff()),
            self._ttl_s if self._ttl_s > 0 else 0,
            self._max_snapshots,
            snap.head,
            snap.position,
            dumps(snap.state),
            dumps(turn.working),
            dumps([snap.position, snap.state, snap.created_at]),
            dumps([turn.key.tenant, turn.key.conversation]),
            "" if turn.expected_turns is None else str(turn.expected_turns),
        ]
        for entry in turn.archive:
            args += [entry.hash, dumps([entry.parent, entry.message])]
        try:
            with self._calling():
                await self._commit(keys=keys, args=args)
        except StoreError as exc:
            if isinstance(exc.__cause__, ResponseError) and "CONFLICT" in str(exc):
                raise Conflict(f"{turn.key.conversation} moved on") from exc
            self._commit_failed = (str(exc), self._monotonic())
            raise
        self._commit_failed = None

    async def find_snapshot(self, key: ConvKey, heads: Sequence[str]) -> Snapshot | None:
        with self._calling():
            if not heads or not await self._live(key):
                return None
            snaps = self._keys(key)[3]
            for end in range(len(heads), 0, -_HMGET_CHUNK):
                chunk = list(heads[max(0, end - _HMGET_CHUNK) : end])
                values = cast("list[str | None]", await self._redis.hmget(snaps, chunk))
                for head, value in zip(reversed(chunk), reversed(values), strict=True):
                    if value is not None:
                        position, state, created_at = loads(value)
                        return Snapshot(head, position, state, created_at)
            return None

    async def latest(self, key: ConvKey) -> Conversation | None:
        fields = ("head", "position", "state", "working", "turns", "created_at", "updated_at")
        with self._calling():
            row = cast("list[str | None]", await self._redis.hmget(self._keys(key)[0], fields))
        if row[0] is None:
            return None
        head, position, state, working, turns, created_at, updated_at = map(_present, row)
        if float(updated_at) < self._cutoff():
            return None
        return Conversation(
            key,
            head,
            int(position),
            loads(state),
            loads(working),
            int(turns),
            float(created_at),
            float(updated_at),
        )

    async def archive(
        self, key: ConvKey, *, limit: int = 1000, offset: int = 0
    ) -> list[ArchivedMessage]:
        if limit <= 0:
            return []
        _, msgs, order, _, _ = self._keys(key)
        with self._calling():
            if not await self._live(key):
                return []
            start = max(0, offset)
            hashes = cast("list[str]", await self._redis.lrange(order, start, start + limit - 1))
            values = (
                cast("list[str | None]", await self._redis.hmget(msgs, hashes)) if hashes else []
            )
        archived = []
        for seq, (h, value) in enumerate(zip(hashes, values, strict=True), start):
            parent, message = loads(_present(value))
            archived.append(ArchivedMessage(h, parent, message, seq))
        return archived

    async def chain(self, key: ConvKey, last: str, *, limit: int) -> list[Message]:
        with self._calling():
            if limit <= 0 or not await self._live(key):
                return []
            values = await self._chain(keys=[self._keys(key)[1]], args=[last, limit])
        return [loads(value)[1] for value in reversed(cast("list[str]", values))]

    async def _indexed(
        self, key: ConvKey, op: Callable[[sqlite3.Connection, int], T], none: T
    ) -> T:
        async def fetch(k: ConvKey, offset: int, count: int) -> list[ArchivedMessage]:
            return await self.archive(k, limit=count, offset=offset)

        with self._calling():
            if not await self._live(key):
                return none
        return await self._search.run(key, fetch, op)

    def _vectors(self, key: ConvKey) -> str:
        return f"{self._prefix}:c:{key.tenant}:{key.conversation}:vecs"

    def _kept(self, key: ConvKey) -> str:
        return f"{self._prefix}:c:{key.tenant}:{key.conversation}:kept"

    async def keep_summary(self, key: ConvKey, request: str, text: str) -> None:
        with self._calling():
            if not await self._live(key):
                return
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._kept(key), request, dumps([self._now(), text]))
                if self._ttl_s > 0:
                    pipe.expire(self._kept(key), self._ttl_s)
                pipe.hgetall(self._kept(key))
                kept = cast("dict[str, str]", (await pipe.execute())[-1])
            # Two replicas keeping at once may both trim: a summary fewer, never a wrong one.
            by_age = sorted(kept, key=lambda r: float(loads(kept[r])[0]))
            if len(by_age) > SUMMARIES_KEPT:
                await self._redis.hdel(self._kept(key), *by_age[:-SUMMARIES_KEPT])

    async def kept_summaries(self, key: ConvKey) -> dict[str, str]:
        with self._calling():
            if not await self._live(key):
                return {}
            kept = cast("dict[str, str]", await self._redis.hgetall(self._kept(key)))
        return {request: loads(value)[1] for request, value in kept.items()}

    async def _hashes(self, key: ConvKey, seqs: list[int]) -> dict[int, str]:
        none: dict[int, str] = {}
        return await self._indexed(key, lambda db, c: search.hashes_of(db, c, seqs), none)

    async def unembedded(self, key: ConvKey, model: str, *, limit: int) -> list[tuple[int, str]]:
        """Pending messages, after taking the vectors other replicas stored in Redis."""
        while True:
            pending = await super().unembedded(key, model, limit=limit)
            seqs = [seq for seq, _ in pending]
            hashes = await self._hashes(key, seqs)
            fields = [f"{model}:{hashes[s]}" for s in seqs if s in hashes]
            with self._calling():
                found = await self._redis.hmget(self._vectors(key), fields) if fields else []
            by_field = dict(zip(fields, found, strict=True))
            shared = [
                (s, base64.b64decode(v))
                for s in seqs
                if s in hashes and (v := by_field.get(f"{model}:{hashes[s]}"))
            ]
            if not shared:
                return pending
            await super().put_vectors(key, model, shared)

    async def put_vectors(
        self, key: ConvKey, model: str, vectors: Sequence[tuple[int, bytes]]
    ) -> None:
        """Store locally and in Redis (by chain hash), so other replicas need not pay again."""
        vectors = list(vectors)
        await super().put_vectors(key, model, vectors)
        seqs = [seq for seq, _ in vectors]
        hashes = await self._hashes(key, seqs)
        mapping = {
            f"{model}:{hashes[s]}": base64.b64encode(v).decode() for s, v in vectors if s in hashes
        }
        if not mapping:
            return
        with self._calling():
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._vectors(key), mapping=cast(Any, mapping))
                if self._ttl_s > 0:
                    pipe.expire(self._vectors(key), self._ttl_s)
                await pipe.execute()

    async def delete(self, key: ConvKey) -> bool:
        self._search.forget(key)
        member = dumps([key.tenant, key.conversation])
        with self._calling():
            existed = await self._live(key)
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(*self._keys(key), self._vectors(key), self._kept(key))
                pipe.zrem(f"{self._prefix}:idx:{key.tenant}", member)
                pipe.zrem(f"{self._prefix}:idx", member)
                await pipe.execute()
        return existed

    async def list_conversations(
        self, tenant: str | None, *, limit: int = 50, offset: int = 0
    ) -> list[ConversationSummary]:
        index = f"{self._prefix}:idx" + ("" if tenant is None else f":{tenant}")
        if limit <= 0:
            return []
        with self._calling():
            members = await self._redis.zrevrangebyscore(
                index, "+inf", self._cutoff(), start=max(0, offset), num=limit
            )
            keys = [ConvKey(*loads(cast(str, m))) for m in members]
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    conv, _, order, _, _ = self._keys(key)
                    pipe.hmget(conv, ("turns", "position", "created_at", "updated_at"))
                    pipe.llen(order)
                results = await pipe.execute()
        summaries = []
        for i, key in enumerate(keys):
            turns, position, created_at, updated_at = results[2 * i]
            if turns is not None and float(updated_at) >= self._cutoff():
                summaries.append(
                    ConversationSummary(
                        key,
                        int(turns),
                        int(position),
                        int(results[2 * i + 1]),
                        float(created_at),
                        float(updated_at),
                    )
                )
        return summaries

    def _refusing(self) -> str | None:
        return standing(self._commit_failed, self._monotonic(), self._backoff_s)

    def problem(self) -> str | None:
        error = self._refusing()
        return None if error is None else f"writes fail: {error}"

    def failing(self) -> bool:
        return self._refusing() is not None

    async def ping(self) -> None:
        try:
            with self._calling():
                await cast(Any, self._redis.ping())
        except (StoreError, OSError) as exc:
            raise StoreError(f"Redis unreachable: {exc}") from exc
        problem = self.problem()
        if problem is not None:  # Redis answers, and refuses turns (out of memory, say)
            raise StoreError(problem)

    async def close(self) -> None:
        self._search.close()
        await self._redis.aclose()


def _present(value: str | None) -> str:
    """A field every committed conversation has; missing means the data was tampered with."""
    if value is None:
        raise StoreError("Redis: a conversation is missing a field it was committed with")
    return value
