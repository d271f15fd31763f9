"""Search over a conversation's archive: SQLite FTS5 ranked by BM25.

One implementation serves every backend. The SQLite store keeps the index in
its own file beside the archive; the memory and Redis stores keep it in an
in-process SQLite database (`proxy.store.indexed`), fed from their archives. FTS5
indexes incrementally, which the in-process BM25 libraries do not: bm25s
rebuilds its whole index to add a document, so every turn of a long
conversation would pay for all of it again; rank_bm25 likewise.

Indexing is lazy: a search first indexes what the archive gained since the
last search of that conversation, so commits never pay for search and a store
that ran with recall off catches up on first use. The cost of a search is
therefore proportional to the new messages plus the postings of the query words.

Embedding vectors are stored beside the index (`proxy.store.vectors`).

What passes the relevance floor is `proxy.store.relevance`'s to decide; the
search ranks what passes by BM25 over the question's words, the names the
sides call each other by left out.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections.abc import Iterable, Sequence, Set

import orjson

from proxy import english
from proxy.blocks import holds_results
from proxy.messages import Message, role, text_of
from proxy.store import dates, relevance
from proxy.store.base import SearchHit, StoreError
from proxy.store.replies import REPLIED, Replies

MAX_WORDS = 16
# Feedback words (`search(feedback=)`) come from a few chosen hits, each word one index lookup.
MAX_FEEDBACK_WORDS = 48
# Messages holding a relation ("sister") read for the names it is called by.
ALIAS_SAMPLE = 50
MAX_ALIASES = 3
# The roles whose messages are indexed: what was said, not the instructions.
SEARCHED = ("user", "assistant", "tool")

# The `conv` column holds one token naming the conversation, so a query is an
# index intersection rather than a scan of every tenant's postings.
CREATE_INDEX = """
    CREATE VIRTUAL TABLE IF NOT EXISTS message_search USING fts5(
        body, conv, seq UNINDEXED, turn UNINDEXED, role UNINDEXED, hash UNINDEXED,
        tokenize = 'porter unicode61'
    )
"""
CREATE_PROGRESS = """
    CREATE TABLE IF NOT EXISTS search_progress (
        conversation_id INTEGER PRIMARY KEY,
        seq INTEGER NOT NULL,
        turns INTEGER NOT NULL
    )
"""
CREATE_VECTORS = """
    CREATE TABLE IF NOT EXISTS message_vectors (
        conversation_id INTEGER NOT NULL,
        model TEXT NOT NULL,
        seq INTEGER NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (conversation_id, model, seq)
    ) WITHOUT ROWID
"""
_ROWIDS = "SELECT rowid, seq, hash FROM message_search WHERE message_search MATCH ?"
_BODIES = "SELECT body FROM message_search WHERE rowid IN (SELECT value FROM json_each(?))"
# Rank by the body alone: every row of a conversation matches `conv` alike.
SET_RANK = "INSERT INTO message_search (message_search, rank) VALUES ('rank', 'bm25(1.0, 0.0)')"


def create(db: sqlite3.Connection) -> None:
    db.execute(CREATE_INDEX)
    db.execute(CREATE_PROGRESS)
    db.execute(CREATE_VECTORS)
    db.execute(dates.CREATE)
    db.execute(SET_RANK)


def conv_tag(conv: int) -> str:
    """The FTS5 term that keeps a query to conversation `conv`'s rows."""
    return f'conv : "k{conv}"'


def forget(db: sqlite3.Connection, conv: int) -> None:
    db.execute(
        "DELETE FROM message_search WHERE rowid IN"
        " (SELECT rowid FROM message_search WHERE message_search MATCH ?)",
        (conv_tag(conv),),
    )
    db.execute("DELETE FROM search_progress WHERE conversation_id = ?", (conv,))
    db.execute("DELETE FROM message_vectors WHERE conversation_id = ?", (conv,))
    dates.forget(db, conv)


def progress(db: sqlite3.Connection, conv: int) -> tuple[int, int]:
    """(last indexed seq, user turns seen so far); (-1, 0) before the first message."""
    row = db.execute(
        "SELECT seq, turns FROM search_progress WHERE conversation_id = ?", (conv,)
    ).fetchone()
    return (-1, 0) if row is None else (int(row[0]), int(row[1]))


def add(db: sqlite3.Connection, conv: int, rows: Sequence[tuple[int, str, Message]]) -> None:
    """Index `(seq, chain hash, message)` rows that follow what is indexed, in seq order.

    A long message is indexed as its passages (`english.passages`), each a row
    with the message's seq, in order: joined, a seq's rows are its text.
    """
    if not rows:
        return
    _, turns = progress(db, conv)
    docs: list[tuple[str, str, int, int, str, str]] = []
    said: list[tuple[int, str, str]] = []  # what the sides said, where a sitting is dated
    for seq, hash_, message in rows:
        who = role(message)
        if who == "user" and holds_results(message.get("content")):
            who = "tool"  # Anthropic's results ride in a user message: a tool's output, no turn
        if who == "user":
            turns += 1
        if who not in SEARCHED:
            continue
        text = text_of(message).strip()
        if text:
            label = "tool result" if who == "tool" else who
            tag, turn = f"k{conv}", max(turns, 1)
            docs += [(part, tag, seq, turn, label, hash_) for part in english.passages(text)]
            if who != "tool":
                said.append((seq, hash_, text))
    db.executemany(
        "INSERT INTO message_search (body, conv, seq, turn, role, hash) VALUES (?, ?, ?, ?, ?, ?)",
        docs,
    )
    dates.add(db, conv, said)
    db.execute(
        "INSERT INTO search_progress (conversation_id, seq, turns) VALUES (?, ?, ?)"
        " ON CONFLICT (conversation_id) DO UPDATE SET seq = excluded.seq, turns = excluded.turns",
        (conv, rows[-1][0], turns),
    )


def search(
    db: sqlite3.Connection,
    conv: int,
    words: Sequence[str | tuple[str, ...]],
    limit: int,
    *,
    asks: bool = True,
    forwarded: Set[str] = frozenset(),
    within: Set[str] | None = None,
    feedback: Set[int] | None = None,
) -> list[SearchHit]:
    """The best `limit` hits above the relevance floor, best first.

    A word given with its other forms matches by any of them; the floor counts
    them as one word, under the first. A capitalised word is a name, which the
    floor weighs as `proxy.store.relevance` says, as it does words searched
    for a turn that asks nothing (`asks` false). Hits whose text is among the
    `forwarded` ones carry no replies. `within` (chain hashes) keeps hits and
    replies to one branch of the conversation; None searches every branch.
    With `feedback` (the seqs of the hits recall chose), the `words` are theirs,
    and the floor is `relevance.bridged`'s: other messages holding a word of
    theirs said seldom.
    """
    forms = _grouped(words)
    wanted = list(forms)[: MAX_WORDS if feedback is None else MAX_FEEDBACK_WORDS]
    if not wanted or limit <= 0:
        return []
    tag = conv_tag(conv)
    # The floor weighs messages, whatever passages they are indexed as: a fact and the
    # words around it in one message (a speaker's label, the question it answers) are
    # one statement. BM25 then ranks the passages of the messages that pass.
    (total,) = db.execute(
        "SELECT COUNT(DISTINCT seq) FROM message_search WHERE message_search MATCH ?", (tag,)
    ).fetchone()
    if not total:
        return []
    postings = {w: _postings(db, tag, forms[w], within) for w in wanted}
    if feedback is None:
        forms, postings = _aliased(db, tag, forms, postings, within)
    else:  # only the words that lead somewhere are weighed, named and ranked by
        postings = {
            w: p for w, p in postings.items() if relevance.leads(w, set(p.values()), feedback)
        }
        wanted = [w for w in wanted if w in postings]
    names = [w for w, p in postings.items() if len(forms[w]) == 1 and _calls(db, w, p)]
    counted = {w: frozenset(p.values()) for w, p in postings.items() if w not in names}
    # A capitalised word is a name the question writes (`recall.terms`): it says whom
    # or what the question is about. Capitals inside a word ("UserService") are an
    # identifier's, which a question about code names without asking from outside.
    about = asks and any(w[:1].isupper() and w[1:].islower() for w in postings)
    if feedback is None:
        passing = set(relevance.passing(counted, total, asks=asks, about=about))
    else:
        passing = set(relevance.bridged(counted, feedback))
    wanted = [w for w in wanted if w not in names]
    eligible = sorted({r for w in wanted for r, seq in postings[w].items() if seq in passing})
    if not eligible:
        return []
    anyword = " OR ".join(_match(forms[w]) for w in wanted)
    query = f"{tag} AND ({anyword})"
    rows = db.execute(
        "SELECT rowid, seq, turn, role, body, rank FROM message_search WHERE message_search MATCH ?"
        " AND rowid IN (SELECT value FROM json_each(?)) ORDER BY rank, seq DESC, rowid LIMIT ?",
        (query, orjson.dumps(eligible).decode(), limit),
    ).fetchall()
    # FTS5's bm25() is lower-is-better; hits report higher-is-better. What the model
    # reads already needs no reply nor date, nor counts among the replied; only the best
    # `REPLIED` others may be quoted, and the rest are only compared.
    followed = Replies(db, tag, within)
    hits: list[SearchHit] = []
    quotable: list[int] = []
    for rowid, s, t, r, b, x in rows:
        hit = SearchHit(int(s), int(t), str(r), str(b).strip(), -float(x))
        if hit.text not in forwarded and len(quotable) < REPLIED:
            rank = len(quotable)
            hit = dataclasses.replace(
                hit, replies=followed.of(rowid, hit, rank), prompt=followed.prompt(rowid, hit, rank)
            )
            quotable.append(len(hits))
        hits.append(hit)
    found = dates.dated(db, conv, [hits[i] for i in quotable], within)
    for at, hit in zip(quotable, found, strict=True):
        hits[at] = hit
    return hits


def _grouped(words: Sequence[str | tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Each word's forms, under the word as first written; one entry per word, whatever its case."""
    written: dict[str, str] = {}
    merged: dict[str, tuple[str, ...]] = {}
    for word in words:
        group = (word,) if isinstance(word, str) else word
        if group:
            key = group[0].lower()
            written.setdefault(key, group[0])
            merged[key] = tuple(dict.fromkeys((*merged.get(key, ()), *map(str.lower, group))))
    return {written[key]: group for key, group in merged.items()}


def _aliased(
    db: sqlite3.Connection,
    tag: str,
    forms: dict[str, tuple[str, ...]],
    postings: dict[str, dict[int, int]],
    within: Set[str] | None,
) -> tuple[dict[str, tuple[str, ...]], dict[str, dict[int, int]]]:
    """`forms` and their `postings`, each relation the question asks by ("Caroline's
    sister") given the names the conversation calls it by ("my sister Rosa"), which the
    floor then weighs with it as one word: what is said of her later says "Rosa".

    Names are read in the first `ALIAS_SAMPLE` messages holding the relation. A name
    the sides call each other by is not one, nor a word the conversation also writes
    in lower case ("our dog Max" and "max tokens"). A relation called by more than
    `MAX_ALIASES` names ("my friend ...") is many people: no name of one says what is
    said of "Evan's friend", and together they would make the word everyday.
    """
    forms, postings = dict(forms), dict(postings)
    for word in [w for w in postings if w.lower() in english.RELATIONS]:
        # By any name the relation goes by: "my dad Joe" names "Melanie's father".
        relations = [f for f in forms[word] if f in english.RELATIONS]
        texts = _texts(db, postings[word])
        names = set().union(*(english.named(r, b) for r in relations for b in texts))
        kept = [n for n in sorted(names) if _a_name(db, tag, n, within)]
        if 0 < len(kept) <= MAX_ALIASES:
            forms[word] = tuple(dict.fromkeys((*forms[word], *kept)))
            postings[word] = _postings(db, tag, forms[word], within)
    return forms, postings


def _a_name(db: sqlite3.Connection, tag: str, word: str, within: Set[str] | None) -> bool:
    """Whether `word` (found written as a name) is only ever one, and not the sides' own."""
    texts = _texts(db, _postings(db, tag, (word,), within))
    lower = re.compile(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])")
    return not any(lower.search(t) for t in texts) and not relevance.addressed(word, texts)


def _texts(db: sqlite3.Connection, rowids: Iterable[int], first: int = ALIAS_SAMPLE) -> list[str]:
    """The bodies of the `first` of the rows, in order."""
    sample = sorted(rowids)[:first]
    return [str(r[0]) for r in db.execute(_BODIES, (orjson.dumps(sample).decode(),))]


def _match(forms: tuple[str, ...]) -> str:
    """The FTS5 query for a word in any of its forms."""
    return "body : (" + " OR ".join(f'"{form}"' for form in forms) + ")"


def _postings(
    db: sqlite3.Connection, tag: str, forms: tuple[str, ...], within: Set[str] | None
) -> dict[int, int]:
    """The rows (passages) holding one of `forms`, with the message (seq) each is of; only
    the rows of messages `within` a branch, if given."""
    query = f"{tag} AND {_match(forms)}"
    rows = db.execute(_ROWIDS, (query,))
    return {int(r): int(seq) for r, seq, h in rows if within is None or h in within}


def called(db: sqlite3.Connection, conv: int, name: str, within: Set[str] | None) -> bool:
    """Whether the conversation's sides call each other `name` (as `search` leaves a
    name out of its query)."""
    return _calls(db, name, _postings(db, conv_tag(conv), (name,), within))


def _calls(db: sqlite3.Connection, word: str, postings: dict[int, int]) -> bool:
    """Whether `word`, in the rows `postings` (to their messages), is a name the
    conversation's sides call each other by: said in enough messages, mostly so.

    The sample is of rows, so a long message's passages count one by one: a
    greeting opens one of them, which is how a name addressed reads anyway.
    """
    if len(set(postings.values())) < relevance.ADDRESSED_ALL:
        return False
    return relevance.addressed(word, _texts(db, postings, relevance.ADDRESS_SAMPLE))


def hashes_of(db: sqlite3.Connection, conv: int, seqs: Sequence[int]) -> dict[int, str]:
    """The chain hashes of indexed messages, by seq."""
    rows = db.execute(
        "SELECT seq, hash FROM message_search WHERE message_search MATCH ?"
        " AND seq IN (SELECT value FROM json_each(?))",
        (conv_tag(conv), orjson.dumps(list(seqs)).decode()),
    )
    return {int(seq): str(h) for seq, h in rows}


def search_messages(
    messages: Sequence[Message],
    queries: Sequence[tuple[Sequence[str | tuple[str, ...]], bool]],
    limit: int,
    *,
    forwarded: Set[str] = frozenset(),
    feedback: Set[int] | None = None,
) -> list[list[SearchHit]]:
    """`search` over messages no store holds yet, as it would run once they are archived:
    the hits of each of the `queries` (words, and whether they ask something).

    The index is built for these searches and thrown away (blocking: run it off the loop).
    """
    db = sqlite3.connect(":memory:", isolation_level=None)
    try:
        create(db)
        add(db, 1, [(seq, "", message) for seq, message in enumerate(messages)])
        return [
            search(db, 1, words, limit, asks=asks, forwarded=forwarded, feedback=feedback)
            for words, asks in queries
        ]
    except sqlite3.Error as exc:
        raise StoreError(f"search index: {exc}") from exc
    finally:
        db.close()
