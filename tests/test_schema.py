"""The SQLite schema: a new file, a file from before the squash, a file of an earlier step,
anything else.

`tests/data/store-before-squash.db` was written by the release before the
schema was squashed (its `_migrations` records the seven steps that built
it): two conversations, one in full-history mode and one in append mode.
`tests/data/store-schema-1.db` was written by the release before the first
step after it (its `_migrations` records `schema-1` alone): one conversation.
Both are opened with no expiry: their conversations are as old as the files.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from proxy.conversation import chain_hashes, tenant_of
from proxy.store import ConvKey, SqliteStore, StoreError
from proxy.store.schema import BEFORE_SQUASH, SCHEMA, STEPS, migrate

from .factories import user
from .test_store import turn

BEFORE = Path(__file__).parent / "data" / "store-before-squash.db"
SCHEMA_1 = Path(__file__).parent / "data" / "store-schema-1.db"
STEP_NAMES = [name for name, _ in STEPS]
TENANT = tenant_of("sk-fixture")
FULL = ConvKey(TENANT, "full")
APPENDED = ConvKey(TENANT, "appended")


def shape(path: Path) -> dict[str, object]:
    """Every table's columns and every index's columns, as SQLite reports them."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        names = [
            n
            for (n,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                " ORDER BY name"
            )
        ]
        out: dict[str, object] = {}
        for name in names:
            out[name] = [tuple(c[1:]) for c in db.execute(f"PRAGMA table_info('{name}')")]
            out[name + " indexes"] = sorted(
                (bool(i[2]), [c[2] for c in db.execute(f"PRAGMA index_info('{i[1]}')")])
                for i in db.execute(f"PRAGMA index_list('{name}')")
            )
        out["triggers"] = sorted(
            n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        )
        return out


def migrated(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return {n for (n,) in db.execute("SELECT name FROM _migrations")}


@pytest.mark.asyncio
async def test_a_file_from_before_the_squash_is_opened_read_and_continued(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    shutil.copy(BEFORE, old)
    fresh = tmp_path / "fresh.db"
    await SqliteStore(str(fresh)).close()

    store = SqliteStore(str(old), ttl_s=0)
    try:
        full = await store.latest(FULL)
        appended = await store.latest(APPENDED)
        assert full is not None and full.turns == 3
        assert [m.get("content") for m in full.working][:2] == ["Be brief.", "Hello there"]
        assert appended is not None and appended.turns == 2
        assert appended.working[-2]["content"] == "more please"
        archive = await store.archive(FULL)
        said = [a.message["content"] for a in archive if a.message["role"] == "user"]
        assert said == ["Hello there", "and then 0", "and then 1"]
        # The next full-history turn finds the stored one by its messages.
        resent = [*full.working, user("and more")]
        assert await store.find_snapshot(FULL, chain_hashes(resent)) is not None
    finally:
        await store.close()
    assert migrated(old) == {*BEFORE_SQUASH, SCHEMA, *STEP_NAMES}
    assert shape(old) == shape(fresh)


@pytest.mark.asyncio
async def test_a_file_of_an_earlier_step_is_read_as_it_is_and_given_the_steps_it_lacks(
    tmp_path: Path,
) -> None:
    old = tmp_path / "old.db"
    shutil.copy(SCHEMA_1, old)
    fresh = tmp_path / "fresh.db"
    await SqliteStore(str(fresh)).close()
    before = old.read_bytes()

    # The read-only tools read it without the steps, which add nothing they read.
    looker = SqliteStore(str(old), ttl_s=0, read_only=True)
    try:
        seen = await looker.latest(FULL)
        assert seen is not None and seen.turns == 1
    finally:
        await looker.close()
    assert old.read_bytes() == before

    store = SqliteStore(str(old), ttl_s=0)
    try:
        full = await store.latest(FULL)
        assert full is not None and [m["content"] for m in full.working][1] == "Hello there"
        await store.keep_summary(FULL, "request", "They said hello.")
        assert await store.kept_summaries(FULL) == {"request": "They said hello."}
    finally:
        await store.close()
    assert migrated(old) == {SCHEMA, *STEP_NAMES}
    assert shape(old) == shape(fresh)


@pytest.mark.asyncio
async def test_an_index_built_without_dates_is_built_again_and_dates_its_sittings(
    tmp_path: Path,
) -> None:
    path = tmp_path / "indexed.db"
    store = SqliteStore(str(path), ttl_s=0)
    try:
        await store.commit(turn(FULL, [user("(8 May 2023) Hi!"), user("I got a kitten.")]))
        (hit,) = await store.search(FULL, ["kitten"], limit=5)
        assert hit.dated == "8 May 2023"
    finally:
        await store.close()
    # As a release before the dates left it: the index holds the messages, no dates.
    dating = [name for name in STEP_NAMES if name >= "s003"]
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("DROP TRIGGER conversations_forget_dates")
        db.execute("DROP TABLE search_dates")
        db.executemany("DELETE FROM _migrations WHERE name = ?", [(n,) for n in dating])
        assert db.execute("SELECT COUNT(*) FROM message_search").fetchone() == (3,)

    store = SqliteStore(str(path), ttl_s=0)
    try:
        (hit,) = await store.search(FULL, ["kitten"], limit=5)
        assert hit.dated == "8 May 2023"
    finally:
        await store.close()
    assert migrated(path) == {SCHEMA, *STEP_NAMES}
    with contextlib.closing(sqlite3.connect(path)) as db:  # built again, not added to
        assert db.execute("SELECT COUNT(*) FROM message_search").fetchone() == (3,)


def test_a_new_file_records_the_schema_once(tmp_path: Path) -> None:
    with contextlib.closing(sqlite3.connect(tmp_path / "new.db", isolation_level=None)) as db:
        assert migrate(db) == [SCHEMA, *STEP_NAMES]
        assert migrate(db) == []


@pytest.mark.parametrize(
    ("recorded", "says"),
    [(BEFORE_SQUASH[:5], "development build"), ((), "not a context-proxy store")],
    ids=["a development build's", "no record"],
)
def test_any_other_file_is_refused_and_left_alone(
    tmp_path: Path, recorded: tuple[str, ...], says: str
) -> None:
    path = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("CREATE TABLE conversations (id INTEGER PRIMARY KEY, tenant TEXT)")
        if recorded:
            db.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
            db.executemany("INSERT INTO _migrations VALUES (?, 0)", [(n,) for n in recorded])
    before = path.read_bytes()
    with pytest.raises(StoreError, match=says):
        SqliteStore(str(path))
    with pytest.raises(StoreError, match=says):  # as `inspect` opens it
        SqliteStore(str(path), read_only=True)
    assert path.read_bytes() == before
