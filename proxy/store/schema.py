"""The SQLite schema, in one piece, and the statements written against it.

The schema is created whole on a new file and recorded in `_migrations`
under `SCHEMA` and every name of `STEPS` (the table keeps the name
simonw/llm's `migrations.py` gives it). A file written before the schema was
squashed into one piece records the seven steps that built it
(`BEFORE_SQUASH`); it holds the same tables plus one column nobody reads,
which `migrate` drops before recording `SCHEMA`. A file of `SCHEMA` gets the
`STEPS` it lacks, in order. Any other file is refused with what to do, never
guessed at. A later change to the schema appends a named step to `STEPS`.
The statements live here too because they change together with the schema.
"""

from __future__ import annotations

import sqlite3
import time

from proxy.store import dates, search

SCHEMA = "schema-1"
BEFORE_SQUASH = (
    "m001_initial",
    "m002_message_search",
    "m003_working_rows",
    "m004_change_counter",
    "m005_working_chain",
    "m006_data_version",
    "m007_lighter_turn",
)

# Archive rows are deduplicated per conversation rather than globally, so
# deleting or expiring one conversation never touches another tenant's rows.
#
# The working history (what append mode forwards next) is one row per
# message, so a turn writes only its new ones; a row may hold no text, and
# then the archive row with its chain hash has it. A full-history working
# history, a stretch of the archived chain, is described instead by
# `conversations.working_chain` ([leading, start, last]: positions 0 to
# `leading` and from `start` on of the chain ending with archived message
# `last`); NULL means the rows hold it.
#
# Snapshots are a rowid table with a unique (conversation, head) index:
# WITHOUT ROWID keeps each whole row in the key's tree, which SQLite advises
# only for rows under about a twentieth of a page, and a state is a few
# hundred bytes to kilobytes.
#
# Only `conversations_updated` indexes the conversations' activity (the
# expiry sweep and the global listing use it): every turn moves the row's
# entry, and a tenant's listing reads its rows through the unique
# (tenant, conversation) index.
TABLES = (
    """
    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL,
        conversation TEXT NOT NULL,
        head TEXT NOT NULL,
        position INTEGER NOT NULL,
        state TEXT NOT NULL,
        turns INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        working_chain TEXT,
        UNIQUE (tenant, conversation)
    )
    """,
    "CREATE INDEX conversations_updated ON conversations (updated_at)",
    """
    CREATE TABLE messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        hash TEXT NOT NULL,
        parent TEXT NOT NULL,
        message TEXT NOT NULL,
        UNIQUE (conversation_id, hash)
    )
    """,
    """
    CREATE TABLE snapshots (
        conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        head TEXT NOT NULL,
        position INTEGER NOT NULL,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        turn INTEGER NOT NULL,
        UNIQUE (conversation_id, head)
    )
    """,
    "CREATE INDEX snapshots_turn ON snapshots (conversation_id, turn)",
    """
    CREATE TABLE working (
        conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        pos INTEGER NOT NULL,
        hash TEXT,
        message TEXT,
        PRIMARY KEY (conversation_id, pos)
    )
    """,
)

# Summaries made ahead of the reduction that needs them, kept for whichever process
# serves that turn (`Store.keep_summary`), by the key of what they summarise.
KEPT_SUMMARIES_TABLE = """
    CREATE TABLE kept_summaries (
        conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        request TEXT NOT NULL,
        text TEXT NOT NULL,
        kept_at REAL NOT NULL,
        PRIMARY KEY (conversation_id, request)
    )
"""

# A conversation's dated sittings (`proxy.store.dates`) leave with it.
FORGET_DATES = """
    CREATE TRIGGER conversations_forget_dates BEFORE DELETE ON conversations BEGIN
        DELETE FROM search_dates WHERE conversation_id = old.id;
    END
"""

# Changes since `SCHEMA`, by name, in the order they apply: each only adds, so a
# release that predates one reads and writes a file that has it. The search index
# is a cache of the archive: emptied, it is built again, a conversation at its next
# search, so what it was indexed without (its sittings' dates) is found then.
STEPS: tuple[tuple[str, str], ...] = (
    ("s002_kept_summaries", KEPT_SUMMARIES_TABLE),
    ("s003_search_dates", dates.CREATE),
    ("s004_forget_dates", FORGET_DATES),
    # Dropped and made again, not emptied: FTS5 deletes row by row, reading each row's
    # words back, which holds the write lock past other processes' busy timeout.
    ("s005_reindex", "DROP TABLE message_search"),
    ("s005_reindex_table", search.CREATE_INDEX),
    ("s005_reindex_rank", search.SET_RANK),
    ("s006_reindex_progress", "DELETE FROM search_progress"),
)

# The search index has no foreign keys (FTS5 tables cannot have them): a
# conversation's rows leave with it through this trigger.
FORGET_SEARCH = """
    CREATE TRIGGER conversations_forget_search BEFORE DELETE ON conversations BEGIN
        DELETE FROM message_search WHERE rowid IN (
            SELECT rowid FROM message_search
            WHERE message_search MATCH 'conv : "k' || old.id || '"'
        );
        DELETE FROM search_progress WHERE conversation_id = old.id;
        DELETE FROM message_vectors WHERE conversation_id = old.id;
    END
"""


class SchemaError(sqlite3.DatabaseError):
    """The file's schema is neither this release's nor one it can bring up to date."""


def create(db: sqlite3.Connection) -> None:
    for statement in TABLES:
        db.execute(statement)
    search.create(db)  # the FTS5 index recall searches, filled lazily by the first search
    db.execute(FORGET_SEARCH)
    for _, statement in STEPS:
        db.execute(statement)


def _squashed(db: sqlite3.Connection) -> None:
    """A file built by the steps before the squash: the same tables, less a column never read."""
    db.execute("ALTER TABLE conversations DROP COLUMN working")


def check(db: sqlite3.Connection) -> str:
    """What `migrate` has to do to `db`: "current", "create", "squashed" or "steps"; reads only.

    Raises `SchemaError`, with what to do, for a file it cannot bring up to
    date, before anything (even the journal mode) is changed in it.
    """
    done = _recorded(db)
    if SCHEMA in done:
        return "current" if all(name in done for name, _ in STEPS) else "steps"
    if not done and not _tables(db):
        return "create"
    if done == set(BEFORE_SQUASH):
        return "squashed"
    raise SchemaError(_refusal(done))


def migrate(db: sqlite3.Connection) -> list[str]:
    """Bring the file to this release's schema; return what was done (nothing the second time).

    `db` must be in autocommit mode (`isolation_level=None`): the transaction
    is explicit, and taken with the write lock, so two processes opening one
    new file at once do not both create the schema.
    """
    db.execute(
        "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    db.execute("BEGIN IMMEDIATE")
    try:
        todo = check(db)
        if todo == "current":
            db.execute("ROLLBACK")
            return []
        missing = _missing(db)
        if todo == "create":
            create(db)  # with every step
        else:
            if todo == "squashed":
                _squashed(db)
            for name, statement in STEPS:
                if name in missing:
                    db.execute(statement)
        db.executemany(
            "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)",
            [(name, time.time()) for name in missing],
        )
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return missing


def pending(db: sqlite3.Connection) -> list[str]:
    """What `migrate` would do to `db` (empty: this release's schema), read without writing."""
    try:
        return [] if check(db) == "current" else _missing(db)
    except SchemaError:
        return _missing(db)


def _missing(db: sqlite3.Connection) -> list[str]:
    """The names `_migrations` lacks of `SCHEMA` and `STEPS`, in order."""
    done = _recorded(db)
    return [name for name in (SCHEMA, *(n for n, _ in STEPS)) if name not in done]


def _recorded(db: sqlite3.Connection) -> set[str]:
    known = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'"
    ).fetchone()
    return {n for (n,) in db.execute("SELECT name FROM _migrations")} if known else set()


def _tables(db: sqlite3.Connection) -> list[str]:
    rows = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name != '_migrations'"
    )
    return [name for (name,) in rows]


def _refusal(done: set[str]) -> str:
    if not done:
        return (
            "the file holds tables but no record of a context-proxy schema: "
            "it is not a context-proxy store"
        )
    return (
        f"the file was written by a development build (it records {', '.join(sorted(done))}); "
        "move it aside and start context-proxy serve on a new file"
    )


# Statements used by `SqliteStore`; they assume every migration above has run.

LIST_CONVERSATIONS = """
    SELECT c.tenant, c.conversation, c.turns, c.position, c.created_at, c.updated_at,
           (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id)
    FROM conversations c
"""

SELECT_WORKING = """
    SELECT COALESCE(w.message, m.message) FROM working w
    LEFT JOIN messages m ON m.conversation_id = w.conversation_id AND m.hash = w.hash
    WHERE w.conversation_id = ? ORDER BY w.pos
"""

# Snapshots of a live conversation (tenant, conversation, not idle since ?).
SELECT_SNAPSHOTS = """
    SELECT s.head, s.position, s.state, s.created_at
    FROM conversations c JOIN snapshots s ON s.conversation_id = c.id
    WHERE c.tenant = ? AND c.conversation = ? AND c.updated_at >= ?
"""

# Moves whenever a connection other than the one asking commits.
DATA_VERSION = "PRAGMA data_version"

# A conversation's last activity and the highest position of its snapshots.
LIVE_POSITION = """
    SELECT c.updated_at, (SELECT MAX(s.position) FROM snapshots s WHERE s.conversation_id = c.id)
    FROM conversations c WHERE c.tenant = ? AND c.conversation = ?
"""

DELETE_IDLE = "DELETE FROM conversations WHERE updated_at < ?"

UPSERT_CONVERSATION = """
    INSERT INTO conversations (
        tenant, conversation, head, position, state, turns, created_at, updated_at, working_chain
    )
    VALUES (?, ?, ?, ?, ?, 1, ?6, ?6, ?7)
    ON CONFLICT (tenant, conversation) DO UPDATE SET
        head = excluded.head, position = excluded.position, state = excluded.state,
        turns = turns + 1, updated_at = excluded.updated_at,
        working_chain = CASE WHEN working_chain IS NULL THEN NULL ELSE ?8 END
    RETURNING id, turns, working_chain
"""

# A conversation's row as UPSERT_CONVERSATION leaves it, for a row whose id and turns are known.
UPDATE_CONVERSATION = """
    UPDATE conversations SET
        head = ?1, position = ?2, state = ?3, turns = ?4, updated_at = ?5, working_chain = ?6
    WHERE id = ?7
"""

# The archived chain that ends with message ?2, root first, at most ?3 messages long.
WALK_CHAIN = """
    WITH RECURSIVE chain (depth, parent, message) AS (
        SELECT 0, parent, message FROM messages WHERE conversation_id = ?1 AND hash = ?2
        UNION ALL
        SELECT c.depth + 1, m.parent, m.message FROM chain c
        JOIN messages m ON m.conversation_id = ?1 AND m.hash = c.parent
        WHERE c.depth + 1 < ?3
    )
    SELECT parent, message FROM chain ORDER BY depth DESC
"""

UPSERT_SNAPSHOT = """
    INSERT INTO snapshots (conversation_id, head, position, state, created_at, turn)
    VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (conversation_id, head) DO UPDATE SET
        position = excluded.position, state = excluded.state,
        created_at = excluded.created_at, turn = excluded.turn
"""

# A kept summary replaces any of the same request; then only the newest ?2 stay.
KEEP_SUMMARY = """
    INSERT INTO kept_summaries (conversation_id, request, text, kept_at) VALUES (?, ?, ?, ?)
    ON CONFLICT (conversation_id, request) DO UPDATE SET
        text = excluded.text, kept_at = excluded.kept_at
"""
PRUNE_KEPT_SUMMARIES = """
    DELETE FROM kept_summaries WHERE conversation_id = ?1 AND request NOT IN (
        SELECT request FROM kept_summaries WHERE conversation_id = ?1
        ORDER BY kept_at DESC LIMIT ?2
    )
"""

# Snapshot turns are unique per conversation, so everything at or below the
# (max_snapshots + 1)-th newest turn is what falls out of the window.
PRUNE_SNAPSHOTS = """
    DELETE FROM snapshots WHERE conversation_id = ? AND turn <= (
        SELECT turn FROM snapshots WHERE conversation_id = ?
        ORDER BY turn DESC LIMIT 1 OFFSET ?
    )
"""
