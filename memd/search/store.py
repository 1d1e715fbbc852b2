"""The search index on disk: one SQLite database (stdlib sqlite3, FTS5) in the state dir. Derived state only.

    docs    one row per document (memd.search.documents.Doc) with its workspace and file; the text lives here once
    words   FTS5 over docs (external content), tokenize='porter unicode61': stemmed words, BM25; with prefix
            indexes of 2, 3 and 4 characters (PREFIX_INDEXES)
    grams   FTS5 over docs (external content), tokenize='trigram': substrings (identifiers, CJK)
    files   what each indexed file looked like (size, mtime, inode) and where its last warm entry starts
    workspaces  the directory each workspace name was indexed from

Triggers keep both FTS tables in step with docs. A database of another schema version, or one SQLite cannot
read, is deleted and built again from the files (nothing here is the only copy of anything). Not thread-safe:
one thread (memd.search.service's) owns it; queries go through `searcher` (memd.search.searcher). Imports
memd.search.documents and memd.search.searcher.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from memd.search.documents import DayTail, Doc
from memd.search.searcher import CURATED_IDS, MAX_ID, Searcher

SCHEMA_VERSION = 4  # 2: docs_by_age; 3: prefix indexes; 4: the curated tiers' row ids apart
# Row ids come from two ranges, the warm tier's and the curated tiers' (memd.search.searcher.CURATED_IDS).
_ID_RANGES = {False: (1, CURATED_IDS), True: (CURATED_IDS, MAX_ID)}
# A prefix query (`repl*`) reads the doclist of every word that starts with it and merges them, unless FTS5 keeps
# an index of prefixes of exactly that length. Short prefixes match the most words, so those are indexed: at
# 100,000 entries, after a grep, `ru*` 8.3 -> 1.4 ms, `cach*` 4.2 -> 1.6 ms, `repl*` 1.4 -> 0.9 ms (the bench's
# corpus). The words index grows 8.8 -> 30.9 MB there (the database ~98 -> ~120 MB: the docs and the trigram index
# are most of it), and its build 0.55 -> 1.31 s. A longer prefix matches few words, and costs little without one.
PREFIX_INDEXES = "2 3 4"
_SCHEMA = f"""
CREATE TABLE workspaces(name TEXT PRIMARY KEY, root TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE files(
    workspace TEXT NOT NULL, file TEXT NOT NULL,
    size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ino INTEGER NOT NULL,
    tail_offset INTEGER, tail_line INTEGER, tail_current INTEGER, prefix_hash BLOB, error TEXT,
    PRIMARY KEY (workspace, file)) WITHOUT ROWID;
CREATE TABLE docs(
    id INTEGER PRIMARY KEY,
    workspace TEXT NOT NULL, file TEXT NOT NULL, tier TEXT NOT NULL, kind TEXT NOT NULL,
    date TEXT, dayn INTEGER, time TEXT, line_start INTEGER NOT NULL, line_end INTEGER NOT NULL,
    heading TEXT NOT NULL, body TEXT NOT NULL, ref TEXT, archived INTEGER NOT NULL);
CREATE INDEX docs_by_file ON docs(workspace, file, line_start);
CREATE INDEX docs_by_age ON docs(workspace, tier, dayn);
CREATE VIRTUAL TABLE words USING fts5(heading, body, content='docs', content_rowid='id',
    tokenize='porter unicode61', prefix='{PREFIX_INDEXES}');
CREATE VIRTUAL TABLE grams USING fts5(heading, body, content='docs', content_rowid='id', tokenize='trigram');
PRAGMA user_version = {SCHEMA_VERSION};
"""
_FTS = ("words", "grams")
READ_CACHE_KIB = 16 * 1024  # the query connection's page cache, at most (see read_connection)
_COLUMNS = "workspace, file, tier, kind, date, dayn, time, line_start, line_end, heading, body, ref, archived"
_INCOMING_COLUMNS = "tier, kind, date, dayn, time, line_start, line_end, heading, body, ref"
_MATCH_KEY = "body, heading, tier, kind, date, time, ref"  # what makes an indexed row the same document
# Scratch tables of the writer connection (temp schema: never on disk with the index, gone with the connection).
_SCRATCH = """
CREATE TABLE IF NOT EXISTS temp.incoming(seq INTEGER PRIMARY KEY, tier, kind, date, dayn, time, line_start,
    line_end, heading, body, ref);
CREATE TABLE IF NOT EXISTS temp.numbered(seq INTEGER PRIMARY KEY, line_start, line_end, body, heading, tier, kind,
    date, time, ref, k INTEGER);
CREATE INDEX IF NOT EXISTS temp.numbered_by_key ON numbered(body, heading, k, date, time, ref, tier, kind);
CREATE TABLE IF NOT EXISTS temp.kept(id INTEGER PRIMARY KEY, seq INTEGER, line_start, line_end);
"""


@dataclass(frozen=True, slots=True)
class FileState:
    size: int
    mtime_ns: int
    ino: int
    tail: DayTail | None = None
    prefix_hash: bytes | None = None
    error: str | None = None

    def same_file(self, other: FileState) -> bool:
        return (self.size, self.mtime_ns, self.ino) == (other.size, other.mtime_ns, other.ino)


def fts5_available() -> bool:
    try:
        with contextlib.closing(sqlite3.connect(":memory:")) as conn:
            conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='trigram')")
            conn.execute("CREATE VIRTUAL TABLE u USING fts5(x, tokenize='porter unicode61')")
    except sqlite3.Error:
        return False
    return True


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.rebuilt = False  # the database was (re)created when opened
        self.generation = 0  # bumped when the database is created afresh: readers open it again
        self.loading = False  # a bulk load is under way: the FTS tables are not built yet
        self._bulk = False
        self.conn = self._open()

    def _open(self) -> sqlite3.Connection:
        try:
            conn = self._connect()
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == SCHEMA_VERSION:
                conn.execute("SELECT count(*) FROM files").fetchone()
                return self._with_scratch(conn)
            conn.close()
        except sqlite3.DatabaseError:
            pass
        self._remove()
        self.rebuilt = True
        conn = self._connect()
        conn.executescript(_SCHEMA)
        return self._with_scratch(conn)

    def _with_scratch(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        conn.executescript(_SCRATCH)
        self.searcher = Searcher(conn)
        return conn

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        os.close(fd)  # created private (it holds every workspace's text) before SQLite opens it
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # derived state: a lost last transaction is re-indexed at start
        return conn

    def _remove(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}{suffix}")

    def close(self) -> None:
        self.conn.close()

    def recreate(self) -> None:
        """Start from an empty database (a full reindex)."""
        self.conn.close()
        self._remove()
        self.conn = self._open()
        self.generation += 1

    def read_connection(self) -> sqlite3.Connection:
        """Another connection to the database, for queries on another thread (WAL: it reads committed state while
        the writer goes on). Its page cache holds up to READ_CACHE_KIB: a query ranks up to 500 matches spread over
        the whole index, and with SQLite's default 2 MiB each of them is a read() from the OS again (a rare word in
        100,000 entries: 1.3 ms a query with the default, 0.8 ms with 16 MiB)."""
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA cache_size = -{READ_CACHE_KIB}")
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self.conn.execute("BEGIN")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # --- workspaces and files ----------------------------------------------------------------------------------

    def root_of(self, workspace: str) -> str | None:
        row = self.conn.execute("SELECT root FROM workspaces WHERE name = ?", (workspace,)).fetchone()
        return None if row is None else str(row[0])

    def set_root(self, workspace: str, root: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO workspaces(name, root) VALUES (?, ?)", (workspace, root))

    def workspace_names(self) -> set[str]:
        return {str(r[0]) for r in self.conn.execute("SELECT name FROM workspaces")}

    def drop_workspace(self, workspace: str) -> None:
        with self.transaction():
            self._delete("workspace = ?", (workspace,))
            self.conn.execute("DELETE FROM files WHERE workspace = ?", (workspace,))
            self.conn.execute("DELETE FROM workspaces WHERE name = ?", (workspace,))

    def files(self, workspace: str) -> dict[str, FileState]:
        rows = self.conn.execute(
            "SELECT file, size, mtime_ns, ino, tail_offset, tail_line, tail_current, prefix_hash, error FROM files "
            "WHERE workspace = ?",
            (workspace,),
        )
        return {
            str(r[0]): FileState(
                r[1], r[2], r[3], DayTail(r[4], r[5], bool(r[6])) if r[4] is not None else None, r[7], r[8]
            )
            for r in rows
        }

    def _put_file(self, workspace: str, file: str, state: FileState) -> None:
        tail = state.tail
        self.conn.execute(
            "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                workspace,
                file,
                state.size,
                state.mtime_ns,
                state.ino,
                tail.offset if tail else None,
                tail.line if tail else None,
                tail.current if tail else None,
                state.prefix_hash,
                state.error,
            ),
        )

    def replace_file(
        self, workspace: str, file: str, state: FileState, docs: Iterable[Doc], from_line: int | None = None
    ) -> int:
        """Make the rows of `file` the given documents (only those from line `from_line` on, when given: the tail
        of a day file after an append). Returns the documents indexed anew.

        A whole file's rows are compared with what is indexed first: a document whose text is already there keeps
        its row and its FTS entries (only its lines move when lines before it were added or removed), and only the
        documents that are new or changed are indexed. cold/MEMORY.md grows by one learning at a time in the
        middle of the file, and indexing all of it again after each cost the size of the file (FTS5 forgets a row
        only when given its text again, and tokenizes every row it inserts, in two tables)."""
        archived = int(file.startswith("warm/archive/"))
        ids = _ID_RANGES[not file.startswith("warm/")]
        rows = (
            (d.tier, d.kind, d.date, _ordinal(d.date), d.time, d.line_start, d.line_end, d.heading, d.body, d.ref)
            for d in docs
        )
        with self.transaction():
            if from_line is None and not self._bulk:
                self._load_incoming(rows)
                self._keep_indexed(workspace, file)
                first = self._first_id(ids)
                added = self.conn.execute(
                    f"INSERT INTO docs(id, {_COLUMNS}) SELECT ? - 1 + row_number() OVER (ORDER BY seq), ?, ?, "
                    f"{_INCOMING_COLUMNS}, ? FROM temp.incoming WHERE seq NOT IN (SELECT seq FROM temp.kept) "
                    "ORDER BY seq",
                    (first, workspace, file, archived),
                ).rowcount
                self._clear_scratch()  # the file's text is not kept a moment longer than the comparison
            else:
                where = "workspace = ? AND file = ?" + ("" if from_line is None else " AND line_start >= ?")
                self._delete(where, (workspace, file) if from_line is None else (workspace, file, from_line))
                first = self._first_id(ids)
                added = self.conn.executemany(
                    f"INSERT INTO docs(id, {_COLUMNS}) VALUES (?, ?, ?, {', '.join('?' * 10)}, ?)",
                    ((doc_id, workspace, file, *row, archived) for doc_id, row in enumerate(rows, first)),
                ).rowcount
            if not self._bulk:
                for table in _FTS:
                    self.conn.execute(
                        f"INSERT INTO {table}(rowid, heading, body) SELECT id, heading, body FROM docs "
                        "WHERE id >= ? AND id < ?",
                        (first, ids[1]),
                    )
            self._put_file(workspace, file, state)
        return int(added)

    def _first_id(self, ids: tuple[int, int]) -> int:
        """The row id after the highest one in the range `ids` (its start when it is empty)."""
        return int(
            self.conn.execute(
                "SELECT coalesce(max(id) + 1, ?) FROM docs WHERE id >= ? AND id < ?", (ids[0], *ids)
            ).fetchone()[0]
        )

    def _load_incoming(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """The file's documents now, in order, into the scratch table `temp.incoming`.
        They are compared with the indexed rows in SQL, not in Python: a fold of a 40,000-learning MEMORY.md
        made ~45 MB of tuples and dicts at once on the search thread (the soak's RSS kept every such peak)."""
        self._clear_scratch()
        self.conn.executemany(f"INSERT INTO temp.incoming({_INCOMING_COLUMNS}) VALUES ({', '.join('?' * 10)})", rows)

    def _clear_scratch(self) -> None:
        for table in ("incoming", "numbered", "kept"):
            self.conn.execute(f"DELETE FROM temp.{table}")

    def _keep_indexed(self, workspace: str, file: str) -> None:
        """Match the incoming documents with the file's indexed rows by everything but their lines, the n-th of
        several alike with the n-th (in line order): a match keeps its row (its lines updated where they moved)
        and is recorded in `temp.kept`; indexed rows left unmatched are deleted. In a transaction."""
        # Which of several alike each document is (k), so that the join below pairs them in order; the join then
        # looks each indexed row up by its whole key and k in the scratch table's index (by body alone, the many
        # documents of one body, an empty one say, would each meet all the others: quadratic).
        self.conn.execute(
            f"INSERT INTO temp.numbered(seq, line_start, line_end, {_MATCH_KEY}, k) "
            f"SELECT seq, line_start, line_end, {_MATCH_KEY}, "
            f"row_number() OVER (PARTITION BY {_MATCH_KEY} ORDER BY seq) FROM temp.incoming"
        )
        self.conn.execute(
            "INSERT INTO temp.kept(id, seq, line_start, line_end) "
            "SELECT i.id, n.seq, n.line_start, n.line_end FROM "
            f"(SELECT id, {_MATCH_KEY}, row_number() OVER (PARTITION BY {_MATCH_KEY} ORDER BY line_start, id) AS k "
            "FROM docs WHERE workspace = ? AND file = ?) AS i "
            "JOIN temp.numbered AS n ON n.body = i.body AND n.heading = i.heading AND n.k = i.k "
            "AND n.date IS i.date AND n.time IS i.time AND n.ref IS i.ref AND n.tier = i.tier AND n.kind = i.kind",
            (workspace, file),
        )
        # Only the file's rows are looked at (docs_by_file), not every row of the index.
        self.conn.execute(
            "UPDATE docs SET line_start = k.line_start, line_end = k.line_end FROM temp.kept AS k "
            "WHERE docs.workspace = ? AND docs.file = ? AND docs.id = k.id "
            "AND (docs.line_start != k.line_start OR docs.line_end != k.line_end)",
            (workspace, file),
        )
        self._delete("workspace = ? AND file = ? AND id NOT IN (SELECT id FROM temp.kept)", (workspace, file))

    def _delete(self, where: str, args: tuple[Any, ...]) -> None:
        """Delete docs rows and (outside a bulk load, which rebuilds them) their FTS entries; in a transaction.
        An external-content FTS table forgets a row only when told its indexed values."""
        if not self._bulk:
            for table in _FTS:
                self.conn.execute(
                    f"INSERT INTO {table}({table}, rowid, heading, body) "
                    f"SELECT 'delete', id, heading, body FROM docs WHERE {where}",
                    args,
                )
        self.conn.execute(f"DELETE FROM docs WHERE {where}", args)

    @contextlib.contextmanager
    def bulk(self) -> Iterator[None]:
        """Load many files into an empty index: the rows go in alone and each FTS table is built once at the end
        (FTS5 'rebuild': about 5x faster than indexing row by row). A load that fails or is cut short leaves
        the database marked as of no schema, so the next start builds it afresh."""
        self._bulk = self.loading = True
        try:
            try:
                yield
            except BaseException:
                self.conn.execute("PRAGMA user_version = 0")
                raise
            finally:
                self._bulk = False
            with self.transaction():
                for table in _FTS:
                    self.conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        finally:
            self.loading = False

    def mark_file(self, workspace: str, file: str, state: FileState) -> None:
        """Record a file's look without touching its rows (it could not be read: the last good rows stay)."""
        self._put_file(workspace, file, state)

    def drop_file(self, workspace: str, file: str) -> None:
        with self.transaction():
            self._delete("workspace = ? AND file = ?", (workspace, file))
            self.conn.execute("DELETE FROM files WHERE workspace = ? AND file = ?", (workspace, file))

    def empty(self) -> bool:
        return self.conn.execute("SELECT 1 FROM docs LIMIT 1").fetchone() is None

    def count(self, workspace: str | None = None) -> int:
        if workspace is None:
            return int(self.conn.execute("SELECT count(*) FROM docs").fetchone()[0])
        return int(self.conn.execute("SELECT count(*) FROM docs WHERE workspace = ?", (workspace,)).fetchone()[0])

    def rows(self, workspace: str) -> list[tuple[Any, ...]]:
        """Every document of a workspace, without row ids, in a stable order (tests compare two indexes)."""
        return self.conn.execute(
            "SELECT file, tier, kind, date, time, line_start, line_end, heading, body, ref FROM docs "
            "WHERE workspace = ? ORDER BY file, line_start, kind, heading, body",
            (workspace,),
        ).fetchall()


def _ordinal(day: str | None) -> int | None:
    if day is None:
        return None
    try:
        return date.fromisoformat(day).toordinal()
    except ValueError:
        return None
