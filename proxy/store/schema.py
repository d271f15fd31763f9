"""The SQLite schema: numbered migrations, and the statements written against the result.

Schema changes are functions recorded by name in `_migrations` once applied
(as simonw/llm `migrations.py` does), so `migrate` is a no-op the second time
and an old file catches up in order. Append new migrations at the end and
never edit an applied one. The statements live here too because they change
together with the schema.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from proxy.store import search

Migration = Callable[[sqlite3.Connection], None]


def m001_initial(db: sqlite3.Connection) -> None:
    db.execute(
        """
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            tenant TEXT NOT NULL,
            conversation TEXT NOT NULL,
            head TEXT NOT NULL,
            position INTEGER NOT NULL,
            state TEXT NOT NULL,
            working TEXT NOT NULL,
            turns INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (tenant, conversation)
        )
        """
    )
    db.execute("CREATE INDEX conversations_updated ON conversations (updated_at)")
    db.execute("CREATE INDEX conversations_tenant_updated ON conversations (tenant, updated_at)")
    # Archive rows are deduplicated per conversation rather than globally, so
    # deleting or expiring one conversation never touches another tenant's rows.
    db.execute(
        """
        CREATE TABLE messages (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            hash TEXT NOT NULL,
            parent TEXT NOT NULL,
            message TEXT NOT NULL,
            UNIQUE (conversation_id, hash)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE snapshots (
            conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            head TEXT NOT NULL,
            position INTEGER NOT NULL,
            state TEXT NOT NULL,
            created_at REAL NOT NULL,
            turn INTEGER NOT NULL,
            PRIMARY KEY (conversation_id, head)
        ) WITHOUT ROWID
        """
    )
    db.execute("CREATE INDEX snapshots_turn ON snapshots (conversation_id, turn)")


def m002_message_search(db: sqlite3.Connection) -> None:
    """The FTS5 index recall searches; rows are added lazily by the first search."""
    search.create(db)
    db.execute(
        """
        CREATE TRIGGER conversations_forget_search BEFORE DELETE ON conversations BEGIN
            DELETE FROM message_search WHERE rowid IN (
                SELECT rowid FROM message_search
                WHERE message_search MATCH 'conv : "k' || old.id || '"'
            );
            DELETE FROM search_progress WHERE conversation_id = old.id;
            DELETE FROM message_vectors WHERE conversation_id = old.id;
        END
        """
    )


def m003_working_rows(db: sqlite3.Connection) -> None:
    """The working history as one row per message, so a turn writes only its new messages.

    One JSON text per conversation means rewriting the whole working history,
    however long, on every turn. A row keeps
    the message's position in the conversation and its chain hash, which is
    how a commit tells that the rows it keeps belong to its own history.
    A row may hold no text: then the archive row with its chain hash has it
    (the commit that wrote the row archived the message too), so a new
    message is written once, not twice.
    `conversations.working` stays (SQLite keeps old columns), and nothing reads it.
    """
    db.execute(
        """
        CREATE TABLE working (
            conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            pos INTEGER NOT NULL,
            hash TEXT,
            message TEXT,
            PRIMARY KEY (conversation_id, pos)
        )
        """
    )
    db.execute(
        "INSERT INTO working (conversation_id, pos, hash, message)"
        " SELECT c.id, j.key, NULL, j.value FROM conversations c, json_each(c.working) j"
    )
    db.execute("UPDATE conversations SET working = '[]'")


def m004_change_counter(db: sqlite3.Connection) -> None:
    """A number that every change to a snapshot, or deletion of a conversation, moves.

    A process keeps the snapshots it committed in memory and answers its own
    next turns from there; reading this one row tells it whether anyone else
    (another replica, the admin API on the worker, the expiry sweep) changed
    snapshots since, whatever version of the code they run: the triggers
    live in the file.
    """
    db.execute(
        "CREATE TABLE change_counter"
        " (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL)"
    )
    db.execute("INSERT INTO change_counter (id, value) VALUES (1, 0)")
    for table, event in (
        ("snapshots", "INSERT"),
        ("snapshots", "UPDATE"),
        ("snapshots", "DELETE"),
        ("conversations", "DELETE"),
    ):
        db.execute(
            f"CREATE TRIGGER {table}_{event.lower()}_count AFTER {event} ON {table} BEGIN"
            " UPDATE change_counter SET value = value + 1 WHERE id = 1; END"
        )


def m005_working_chain(db: sqlite3.Connection) -> None:
    """A working history that is a stretch of the archived chain, described instead of copied.

    In full-history mode the working history is the conversation's leading
    messages and its verbatim tail, all archived already: `[leading, start,
    last]` (positions 0 to `leading` and from `start` on, of the chain that
    ends with the archived message `last`) says the same as a row per
    message, and spares each turn writing those rows. NULL: the rows hold it.

    A conversation starts described when its first turn archives its whole
    history, and stays so while every turn's new messages continue an
    archived one (see `SqliteStore.commit`); an append-mode turn, a
    conversation older than this migration, or one whose archive lost its
    start (expired between lookup and commit) keeps rows from then on.
    Releases before this one read only the rows: replicas sharing a file
    must all run this one or later.
    """
    db.execute("ALTER TABLE conversations ADD COLUMN working_chain TEXT")


def m006_data_version(db: sqlite3.Connection) -> None:
    """The change counter gives way to SQLite's own `PRAGMA data_version`.

    A process learns that another connection committed (another replica, an
    operator's `sqlite3` shell, its own worker's deletes and sweeps) from
    the data version of its writing connection, which SQLite moves for every
    commit but that connection's own, whoever made it and whatever it
    touched. The triggers that keep the counter run at every snapshot
    write, a part of every turn's SQL that this saves. The table goes too,
    so a release from before this one
    sharing the file fails on its first lookup instead of trusting a
    counter nobody moves: replicas sharing a file must all run this one
    or later.
    """
    for table, event in (
        ("snapshots", "insert"),
        ("snapshots", "update"),
        ("snapshots", "delete"),
        ("conversations", "delete"),
    ):
        db.execute(f"DROP TRIGGER IF EXISTS {table}_{event}_count")
    db.execute("DROP TABLE change_counter")


def m007_lighter_turn(db: sqlite3.Connection) -> None:
    """Two structures every turn writes and few reads need, made cheaper to write.

    - Snapshots move to a rowid table with a unique (conversation, head)
      index. WITHOUT ROWID keeps each whole row in the primary key's tree,
      which SQLite advises only for rows under about a twentieth of a page;
      a snapshot's state is a few hundred bytes to kilobytes.
    - The (tenant, updated_at) index goes: every turn moves the row's entry
      in it, and only a tenant's listing (an operator's request) uses it;
      that listing reads the tenant's rows through the unique
      (tenant, conversation) index and sorts them. `conversations_updated`
      stays for the expiry sweep and the global listing.
    """
    db.execute("DROP INDEX conversations_tenant_updated")
    db.execute(
        """
        CREATE TABLE snapshots_new (
            conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            head TEXT NOT NULL,
            position INTEGER NOT NULL,
            state TEXT NOT NULL,
            created_at REAL NOT NULL,
            turn INTEGER NOT NULL,
            UNIQUE (conversation_id, head)
        )
        """
    )
    db.execute(
        "INSERT INTO snapshots_new (conversation_id, head, position, state, created_at, turn)"
        " SELECT conversation_id, head, position, state, created_at, turn FROM snapshots"
        " ORDER BY conversation_id, turn"
    )
    db.execute("DROP TABLE snapshots")
    db.execute("ALTER TABLE snapshots_new RENAME TO snapshots")
    db.execute("CREATE INDEX snapshots_turn ON snapshots (conversation_id, turn)")


MIGRATIONS: list[Migration] = [
    m001_initial,
    m002_message_search,
    m003_working_rows,
    m004_change_counter,
    m005_working_chain,
    m006_data_version,
    m007_lighter_turn,
]


def migrate(db: sqlite3.Connection, migrations: list[Migration] | None = None) -> list[str]:
    """Apply the migrations not yet recorded, each in its own transaction; return their names.

    `db` must be in autocommit mode (`isolation_level=None`): transactions are explicit.
    """
    db.execute(
        "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    ran: list[str] = []
    for migration in MIGRATIONS if migrations is None else migrations:
        name = migration.__name__
        # Checked inside the write lock: two processes opening one new file
        # at once must not both run the same migration.
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("SELECT 1 FROM _migrations WHERE name = ?", (name,)).fetchone():
                db.execute("ROLLBACK")
                continue
            migration(db)
            db.execute(
                "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (name, time.time())
            )
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        ran.append(name)
    return ran


def pending(db: sqlite3.Connection) -> list[str]:
    """The migrations `db` has not recorded, read without writing anything."""
    known = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'"
    ).fetchone()
    done = {n for (n,) in db.execute("SELECT name FROM _migrations")} if known else set()
    return [m.__name__ for m in MIGRATIONS if m.__name__ not in done]


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

# Moves whenever a connection other than the one asking commits (see m006).
DATA_VERSION = "PRAGMA data_version"

# A conversation's last activity and the highest position of its snapshots.
LIVE_POSITION = """
    SELECT c.updated_at, (SELECT MAX(s.position) FROM snapshots s WHERE s.conversation_id = c.id)
    FROM conversations c WHERE c.tenant = ? AND c.conversation = ?
"""

DELETE_IDLE = "DELETE FROM conversations WHERE updated_at < ?"

UPSERT_CONVERSATION = """
    INSERT INTO conversations (
        tenant, conversation, head, position, state, working, turns, created_at, updated_at,
        working_chain
    )
    VALUES (?, ?, ?, ?, ?, '[]', 1, ?6, ?6, ?7)
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

# Snapshot turns are unique per conversation, so everything at or below the
# (max_snapshots + 1)-th newest turn is what falls out of the window.
PRUNE_SNAPSHOTS = """
    DELETE FROM snapshots WHERE conversation_id = ? AND turn <= (
        SELECT turn FROM snapshots WHERE conversation_id = ?
        ORDER BY turn DESC LIMIT 1 OFFSET ?
    )
"""
