"""Queries on the search index: ranked hits with their locations and marked snippets. Reads only.

One `Searcher` per SQLite connection (it keeps a scratch FTS5 table for snippets in that connection's temp
schema): the search thread's writer connection, and the read connection queries use. Imports memd.search.query
and memd.errors.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from memd.errors import InvalidParams
from memd.search import query as q

MARK = ("\u00ab", "\u00bb")  # « »: around each matched term in a snippet
ELLIPSIS = "\u2026"
SNIPPET_TOKENS = 16
HEADING_WEIGHT = 2.0  # a match in an entry's heading (action, category) counts twice one in its body
# A query ranks at most this many matches, the newest (by row id: files are indexed oldest day first, and an
# append or a rewrite gets new ids): BM25 is computed per match, so a word in a third of 100,000 entries would
# otherwise cost ~90 ms. Older matches weigh less anyway (warm decays); more words, `until` or paging reach them
# (the window grows by the offset asked for). 100: ten pages of the default page of 10 hits (200 was ten pages
# of the page of 20 before stop 39). Each candidate costs its BM25 (column sizes and positions, two lookups) and
# its document row, memory a query touches once after the machine idled: at 100,000 entries, with a `grep -r`
# between queries, 100 instead of 200 takes the bench's median query from 2.74-2.79 to 2.41-2.63 ms
# (docs/benchmarks.md, figure 9).
CANDIDATES = 100
# Row ids, which follow indexing order, come from two ranges (memd.search.store allocates them): the warm tier's
# documents below CURATED_IDS, the hot and cold tiers' (a person's curated learnings, the session's notes: neither
# decays) from it up, so a ranking's newest matches (by row id) begin with theirs (see Searcher._ranked).
CURATED_IDS = 1 << 40
MAX_ID = 1 << 62
# The longest a query may hold its connection. FTS5 matches a phrase by walking the positions of each of its
# tokens, so a phrase that repeats a token against text that repeats it too costs their product: a 300-character
# run of one letter searched in a 100,000-character one takes seconds, 2,000 characters minutes and gigabytes.
# SQLite's progress handler stops such a query between rows; the caller gets a clear error (memory.search) or
# falls back to substring matching (context.get's topic ranking), and the next query is not held up behind it.
QUERY_SECONDS = 5.0
_PROGRESS_STEPS = 1000  # SQLite virtual-machine steps between two looks at the clock
# A hit's row: its document's columns in this order, then, from a ranking, its score, the candidates' count and
# how many of them are warm.
_DOC_COLUMNS = (
    "d.id, d.workspace, d.tier, d.kind, d.file, d.date, d.time, d.line_start, d.line_end, d.heading, d.ref, d.body"
)
_SCORE, _COUNT, _WARM = 12, 13, 14


@dataclass(frozen=True, slots=True)
class Filters:
    scope: Sequence[str]  # workspace names
    tiers: Sequence[str]
    since: str | None
    until: str | None
    today: date
    half_life_days: float
    floor: float  # the weight an entry keeps however old (0..1)


class Searcher:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # The scratch table for snippets: FTS5 over a temporary table's rows (external content), so that a 'rebuild'
        # replaces its whole index by one of just the page's rows, without tokenizing the old ones to delete them.
        conn.execute("CREATE TABLE IF NOT EXISTS temp.snip_rows(id INTEGER PRIMARY KEY, heading TEXT, body TEXT)")
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.snip USING fts5(heading, body, content='snip_rows', "
            "content_rowid='id', tokenize='porter unicode61')"
        )

    def search(
        self,
        query: q.Query,
        f: Filters,
        limit: int,
        seconds: float = QUERY_SECONDS,
        texts: bool = False,
        scan: bool = True,
        page: range | None = None,
    ) -> list[dict[str, Any]]:
        """Up to `limit` hits, best first: stemmed-word matches by BM25 times the recency weight, then matches
        only the trigram index finds (substrings: parts of identifiers, CJK), then, for a query with a term under
        three characters that found nothing as words, a scan. A query still running after `seconds` is stopped
        with InvalidParams (see QUERY_SECONDS). `texts`: each hit has its document's whole `text` instead of a
        snippet, and nothing but `file` and `heading` besides (a ranking that looks the documents up by content:
        no snippet is made, no other column read). `scan` False: no scan for short terms (the caller has a
        substring rule of its own that finds the same, and a scan reads every document of the scope). `page`: the
        positions of the hits the caller returns; the others are ranked but get no snippet (a caller pages past
        some, and asks one more than it returns to say whether there is more)."""
        deadline = time.monotonic() + seconds
        self.conn.set_progress_handler(lambda: time.monotonic() >= deadline, _PROGRESS_STEPS)
        try:
            return self._search(query, f, limit, texts, scan, range(limit) if page is None else page)
        except sqlite3.OperationalError as exc:
            if time.monotonic() < deadline:
                raise
            raise InvalidParams(
                f"the search was stopped after {seconds:g} s: its terms match too much repeated text (a long run "
                "of one character, a phrase repeating a word); search for fewer, shorter or more distinctive words",
                data={"search": "stopped", "seconds": seconds},
            ) from exc
        finally:
            self.conn.set_progress_handler(None, 0)

    def _search(
        self, query: q.Query, f: Filters, limit: int, texts: bool, scan: bool, page: range
    ) -> list[dict[str, Any]]:
        hits = self._ranked(query, "words", q.words_match(query), f, limit, (), texts, page)
        if len(hits) < limit:
            seen = tuple(h["_id"] for h in hits)
            grams = q.substring_match(query)
            if grams is not None:
                hits += self._ranked(query, "grams", grams, f, limit - len(hits), seen, texts, range(limit))
            elif scan:
                hits += self._scan(query, f, limit - len(hits), seen, texts)
        for hit in hits:
            del hit["_id"]
        return hits

    def _where(self, f: Filters) -> tuple[str, list[Any]]:
        # One workspace and one tier (a topic's ranking, most searches) as equalities: then the index on
        # (workspace, tier, dayn) hands the rows over newest first, and a scan stops at its limit (an IN list over
        # json_each hides that order from SQLite: it sorts every match, ~15 ms for 20,000 learnings).
        one = len(f.tiers) == 1
        scope, args = self._scope(f, "d")
        sql = [
            scope,
            "d.tier = ?" if one else "d.tier IN (SELECT value FROM json_each(?))",
            # an archived day that is also still in warm/ (a sweep stopped between archive and unlink) counts once
            "NOT (d.archived AND EXISTS (SELECT 1 FROM files f WHERE f.workspace = d.workspace "
            "AND f.file = 'warm/' || d.date || '.md'))",
        ]
        args.append(f.tiers[0] if one else json.dumps(list(f.tiers)))
        if f.since is not None:
            sql.append("d.date >= ?")
            args.append(f.since)
        if f.until is not None:
            sql.append("d.date <= ?")
            args.append(f.until)
        return " AND ".join(sql), args

    @staticmethod
    def _scope(f: Filters, alias: str) -> tuple[str, list[Any]]:
        """The condition on `alias`.workspace for the scope (one workspace as an equality: see _where)."""
        if len(f.scope) == 1:
            return f"{alias}.workspace = ?", [f.scope[0]]
        return f"{alias}.workspace IN (SELECT value FROM json_each(?))", [json.dumps(list(f.scope))]

    def _ranked(
        self,
        query: q.Query,
        table: str,
        user: str,
        f: Filters,
        limit: int,
        seen: tuple[int, ...],
        texts: bool,
        page: range,
    ) -> list[dict[str, Any]]:
        """Up to `limit` hits of the MATCH expression `user` on `table` not in `seen`, best first; snippets (of
        the stemmed-word index: one SQL round) only for the hits at `page` positions."""
        where, args = self._where(f)
        half = max(f.half_life_days, 1e-6)
        # Warm entries decay hyperbolically with age (1 today, halfway to `floor` after `half_life_days`); hot and
        # cold do not: a learning is as true next year.
        weight = (
            "(CASE WHEN d.tier = 'warm' AND d.dayn IS NOT NULL "
            "THEN ? + (1.0 - ?) * ? / (? + max(0, ? - d.dayn)) ELSE 1.0 END)"
        )
        weight_args = [f.floor, f.floor, half, half, f.today.toordinal()]
        cap = CANDIDATES + len(seen) + limit
        # The candidates: the newest `cap` matches, and before them those of the hot and cold tiers, whose row ids
        # are above every warm one (CURATED_IDS): the window grows by how many documents those tiers hold in the
        # scope, up to CANDIDATES more, so that a day of warm entries naming a word does not crowd out a learning
        # that names it (a learning and the hot notes do not decay). Counting the documents costs a look at
        # docs_by_age; a second FTS5 window over the curated ids costs a seek into every term's doclist, ~55-160 us
        # for a frequent word at 100,000 entries even when nothing is there.
        scope, scope_args = self._scope(f, "c")
        bm25 = f"SELECT rowid AS id, bm25({table}, {HEADING_WEIGHT}, 1.0) AS r FROM {table} WHERE {table} MATCH ?"
        # A scope with more hot and cold documents than that (a MEMORY.md of thousands of learnings) can fill the
        # window with theirs when a word matches many of them; then the ranking is asked again with two windows,
        # the newest `cap` matches of each range (each one's BM25 counts the word's matches again for its IDF:
        # paid only then).
        windows = {
            False: (
                f"WITH curated AS (SELECT count(*) AS n FROM (SELECT 1 FROM docs c WHERE {scope} "
                "AND c.tier IN ('hot', 'cold') LIMIT ?)), "
                f"cand AS MATERIALIZED ({bm25} ORDER BY rowid DESC LIMIT ? + (SELECT n FROM curated)) ",
                "(SELECT count(*) FROM cand) - (SELECT n FROM curated), "
                f"(SELECT count(*) FROM cand WHERE id < {CURATED_IDS})",
            ),
            True: (
                f"WITH cand AS MATERIALIZED (SELECT * FROM ({bm25} AND rowid >= {CURATED_IDS} ORDER BY rowid DESC "
                f"LIMIT ?) UNION ALL SELECT * FROM ({bm25} AND rowid < {CURATED_IDS} ORDER BY rowid DESC LIMIT ?)) ",
                f"(SELECT max(n) FROM (SELECT count(*) AS n FROM cand GROUP BY id >= {CURATED_IDS})), 0",
            ),
        }
        split = False
        while True:
            # CROSS JOIN: the candidates first, each one's document by its id. Left free, SQLite 3.51 (and 3.40 once
            # `ANALYZE` statistics exist) reads every document of the workspace through docs_by_age and probes the
            # candidates instead: 29 ms against 0.7 ms for a word of 2,800 matches in 100,000 entries.
            candidates_sql, counts = windows[split]
            sql = (
                f"{candidates_sql}SELECT {_DOC_COLUMNS}, -cand.r * {weight} AS score, {counts} "
                f"FROM cand CROSS JOIN docs d ON d.id = cand.id WHERE {where} ORDER BY score DESC, d.id DESC LIMIT ?"
            )
            window_args = [user, cap, user, cap] if split else [*scope_args, CANDIDATES, user, cap]
            found = self.conn.execute(sql, [*window_args, *weight_args, *args, limit + len(seen)]).fetchall()
            skip = set(seen)
            ranked = [row for row in found if row[0] not in skip][:limit]
            candidates = found[0][_COUNT] if found else self._count(table, user, cap)
            if not split and found and "warm" in f.tiers and candidates >= cap and found[0][_WARM] < cap:
                split = True  # hot and cold matches took the room of the warm window: rank both windows
                continue
            if len(ranked) >= limit or candidates < cap or cap >= 1 << 24:
                break
            cap *= 8  # the scope's rows filter out most candidates (many workspaces, a date range): look further
        if not ranked:
            return []
        if texts:
            return [_text_hit(row[0], row[4], row[9], row[11]) for row in ranked]
        if table == "grams":
            needles = [t.text for c in query.positive for t in c.terms]
            return [self._hit(row, row[_SCORE], _snippet(row, needles), "substring") for row in ranked]
        # The hits the caller returns (the rest are only counted) have a snippet; the ranking read their text.
        wanted = [(row[0], row[9], row[11]) for n, row in enumerate(ranked) if n in page]
        snippets = self._snippets(user, wanted) if wanted else {}
        return [self._hit(row, row[_SCORE], snippets.get(row[0], ""), "words") for row in ranked]

    def _snippets(self, match: str, rows: list[tuple[int, str, str]]) -> dict[int, str]:
        """FTS5 snippets of a few rows: they are indexed alone in a temporary table and matched there (asking the
        big table for a row's snippet loads every match of the query again: ~10 ms for a frequent word; emptying
        and refilling a plain FTS5 table tokenizes every row twice: 0.44 ms for 21 rows, ~0.14 ms this way)."""
        self.conn.execute("BEGIN")  # one transaction: the scratch rows are not each a commit
        try:
            self.conn.execute("DELETE FROM temp.snip_rows")
            self.conn.executemany("INSERT INTO temp.snip_rows(id, heading, body) VALUES (?, ?, ?)", rows)
            self.conn.execute("INSERT INTO temp.snip(snip) VALUES ('rebuild')")  # replaces the whole index
            found = self.conn.execute(
                "SELECT rowid, snippet(snip, -1, ?, ?, ?, ?) FROM temp.snip WHERE snip MATCH ?",
                (*MARK, ELLIPSIS, SNIPPET_TOKENS, match),
            ).fetchall()
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:  # an interrupted statement may have ended it already
                self.conn.set_progress_handler(None, 0)  # past the deadline: the rollback must not be stopped too
                self.conn.execute("ROLLBACK")
            raise
        return {int(i): str(text) for i, text in found}

    def _count(self, table: str, match: str, cap: int) -> int:
        sql = f"SELECT count(*) FROM (SELECT rowid FROM {table} WHERE {table} MATCH ? LIMIT ?)"
        return int(self.conn.execute(sql, (match, cap)).fetchone()[0])

    def _scan(self, query: q.Query, f: Filters, limit: int, seen: tuple[int, ...], texts: bool) -> list[dict[str, Any]]:
        """Substring matches for a query with a term too short for trigrams, newest first (no BM25 here)."""
        where, args = self._where(f)
        text = "(d.heading || char(10) || d.body)"
        conditions: list[str] = []
        for clause in query.clauses:
            inner = " OR ".join(f"{text} LIKE ? ESCAPE '\\'" for _ in clause.terms)
            conditions.append(f"NOT ({inner})" if clause.excluded else f"({inner})")
            args += [q.like_pattern(t) for t in clause.terms]
        sql = (
            f"SELECT d.id, d.file, d.heading, d.body FROM docs d WHERE {where} AND {' AND '.join(conditions)} "
            "ORDER BY d.dayn DESC, d.id DESC LIMIT ?"
        )
        skip = set(seen)
        found = [r for r in self.conn.execute(sql, [*args, limit + len(seen)]) if r[0] not in skip][:limit]
        if texts:
            return [_text_hit(*row) for row in found]
        ids = [r[0] for r in found]
        rows = self._docs(ids)
        needles = [t.text for c in query.positive for t in c.terms]
        return [self._hit(rows[i], 0.0, _snippet(rows[i], needles), "substring") for i in ids if i in rows]

    def _docs(self, ids: list[int]) -> dict[int, tuple[Any, ...]]:
        return {
            r[0]: r
            for r in self.conn.execute(
                f"SELECT {_DOC_COLUMNS} FROM docs d WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),)
            )
        }

    @staticmethod
    def _hit(row: tuple[Any, ...], score: float, snippet: str | None, how: str) -> dict[str, Any]:
        """A hit; with `snippet` None, the document's whole text instead of a snippet."""
        _id, workspace, tier, kind, file, day, time, first, last, heading, ref, body = row[:_SCORE]
        hit: dict[str, Any] = {
            "workspace": workspace,
            "tier": tier,
            "kind": kind,
            "file": file,
            "date": day,
            "lines": [first, last],
            "heading": heading,
            **({"text": body} if snippet is None else {"snippet": _one_line(snippet)}),
            "score": float(f"{score:.6g}"),
            "match": how,
            "_id": _id,
        }
        if time is not None:
            hit["time"] = time
        if ref is not None:
            hit["id"] = ref
        return hit


def _text_hit(doc_id: int, file: str, heading: str, body: str) -> dict[str, Any]:
    """A hit of a search for texts: what a ranking by content reads, nothing else."""
    return {"file": file, "heading": heading, "text": body, "_id": doc_id}


def _one_line(text: str) -> str:
    """A snippet on one line: the line breaks between an entry's details become ` / `."""
    return " / ".join(part.strip() for part in text.splitlines() if part.strip())


def _snippet(row: tuple[Any, ...], needles: list[str], width: int = 60) -> str:
    """A window of the heading or body around the first of `needles` found in it (case-insensitive), every
    occurrence of each needle in the window marked: the snippet of a substring match."""
    lowered = [n.lower() for n in needles if n]
    for text in (row[9], row[11]):
        low = text.lower()
        found = [i for i in (low.find(n) for n in lowered) if i >= 0]
        if not found:
            continue
        first = min(found)
        start, end = max(0, first - width), min(len(text), first + width)
        marks = sorted(
            {(at, at + len(n)) for n in lowered for at in _occurrences(low, n, start, end)}, key=lambda m: m[0]
        )
        out, pos = [ELLIPSIS] if start else [], start
        for begin, finish in marks:
            if begin < pos:
                continue
            out += [text[pos:begin], MARK[0], text[begin:finish], MARK[1]]
            pos = finish
        out.append(text[pos:end] + (ELLIPSIS if end < len(text) else ""))
        return "".join(out)
    return str(row[11])[: 2 * width]


def _occurrences(text: str, needle: str, start: int, end: int) -> Iterator[int]:
    at = text.find(needle, start, end + len(needle))
    while at >= 0:
        yield at
        at = text.find(needle, at + len(needle), end + len(needle))
