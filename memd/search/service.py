"""Search as the daemon runs it: an index kept current off the write path, and queries that see every ack.

The registry calls `on_change(ws, tiers, origin)` on the loop after every committed batch and every adopted
outside edit; it only records (workspace, tiers) as dirty and pokes a debouncer. Once changes pause for
`[search] index_delay_seconds` (or `index_max_wait_seconds` after the first, under constant writes), the dirty set
is handed to the search thread (`memd-search`), which re-indexes what changed (memd.search.indexer): a burst of
writes is indexed after it, in one pass, not while it is being acknowledged. Nothing here runs on the ack path: a
write is acknowledged before its listener is called, and the listener does a dict update.

A query first takes the dirty marks of the workspaces it covers, adds the tiers whose store saw a change since
the query before (a read's refresh adopts an outside edit without telling the listeners, a restore from git tells
no one), and has the search thread bring those in step: it runs jobs in order, so the catch-up comes after every
pass already queued. Then it reads on its own thread and connection (`memd-search-q`; WAL: it sees what was
committed). So a query sees every write acknowledged before it was sent: the mark was set before the ack went
out. A workspace not seen yet is synced whole first. The reconcile job marks every workspace (`mark_all`), so the
background pass catches up with what no listener reported.
Imports memd.workspace, memd.config, memd.errors and memd.search's modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

from memd.config import SearchConfig
from memd.debounce import Debouncer
from memd.early_ack import EarlyAck
from memd.errors import InvalidParams, Unavailable
from memd.search import indexer
from memd.search import query as q
from memd.search.indexer import ALL_TIERS, Source
from memd.search.searcher import QUERY_SECONDS, Filters, Searcher
from memd.search.store import Store, fts5_available
from memd.workspace import Workspace

log = logging.getLogger(__name__)
T = TypeVar("T")
Batch = dict[str, tuple[Source, frozenset[str]]]
RANK_TIMEOUT_SECONDS = 1.0  # context.get falls back to substring matching rather than wait longer on the index
# The most learnings a topic ranking returns per this many tokens of the cold budget: no learning line is shorter
# (`- [YYYY-MM-DD] x`), so more could not be rendered in it.
RANK_TOKENS_PER_LEARNING = 8


@dataclass(frozen=True)
class Request:
    query: q.Query
    tiers: Sequence[str]
    since: str | None
    until: str | None
    limit: int
    offset: int
    seconds: float = QUERY_SECONDS  # the query is stopped after this long (memd.search.searcher)
    catch_up: bool = True  # index what changed in the workspaces first (False: the index as it is)
    texts: bool = False  # hits carry their document's whole text, not a snippet
    scan: bool = True  # terms too short for trigrams are looked for by a scan of every document in scope

    @property
    def page(self) -> range:
        """The positions of the hits returned: the searcher ranks one more, to tell whether there is more."""
        return range(self.offset, self.offset + self.limit)


_PASS = "pass"  # the one key of the debouncer


class _Stopped(Exception):
    """memd is stopping: a pass ends between two files."""


def _page(hits: list[dict[str, Any]], request: Request) -> dict[str, Any]:
    """The page of `hits` the request asked for, and whether there are more (the searcher ranks one more)."""
    return {"hits": hits[request.offset : request.offset + request.limit], "more": len(hits) > request.page.stop}


def seen_state(ws: Workspace) -> dict[str, object]:
    """What the workspace's stores last saw of each tier (fingerprints, the warm version): it changes with every
    commit and every adoption, whichever path adopted it (the watcher, a read's refresh, a restore, a sweep)."""
    return {
        "hot": (ws.hot.fingerprint, ws.hot.own_fingerprint),
        "cold": (ws.cold.fingerprint, ws.proposals.fingerprint),
        "warm": ws.warm.version,
    }


def source_of(ws: Workspace) -> Source:
    return Source(
        ws.name,
        ws.root,
        ws.pinned,
        ws.hot.max_bytes,
        ws.cold.max_bytes,
        ws.warm.max_bytes,
        ws.config.warm.archive_max_bytes,
    )


class SearchService:
    def __init__(self, config: SearchConfig, path: Path) -> None:
        self.config = config
        self.path = path
        # The search thread owns the database and writes it; queries read on their own thread and connection, so
        # one that has nothing to catch up on does not wait behind a pass. (Not niced: a lower-priority thread
        # holding the GIL would make the loop wait for it, the priority inversion a write's ack must not suffer.)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memd-search")
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memd-search-q")
        self._store: Store | None = None  # used on the search thread (the query thread reads its path, generation)
        self._searcher: Searcher | None = None  # on the query thread
        self._searcher_of = -1  # the store generation it reads
        self._dirty: dict[str, tuple[Source, frozenset[str]]] = {}
        self._seen: set[str] = set()  # workspaces synced whole (or marked for it) since start
        self._states: dict[str, dict[str, object]] = {}  # seen_state of each workspace at its last catch-up
        # The background pass runs once changes pause (index_delay_seconds), or index_max_wait_seconds after the
        # first at the latest: a burst of writes is indexed after it, in one pass, not while it is acknowledged.
        self._debounce: Debouncer[str] = Debouncer(
            config.index_delay_seconds, config.index_max_wait_seconds, lambda _key, _why: self._pass()
        )
        self._busy = False  # a background pass is on the thread
        self._closed = False
        self._lost = False  # set by the search thread when it had to start the database afresh
        self.error = ""  # why search is unavailable ("" when it is not)
        self.stats = {
            "passes": 0,
            "files_indexed": 0,
            "documents_indexed": 0,
            "errors": 0,
            "queries": 0,
            "stopped": 0,
            "rebuilds": 0,
        }
        self.last_pass_seconds = 0.0
        self.rebuilt_at_start = False

    # --- lifecycle (on the loop) --------------------------------------------------------------------------------

    async def start(self, workspaces: Iterable[Workspace]) -> None:
        """Open the index (building it afresh when missing or of another schema) and schedule a sync of every
        workspace: whatever changed while memd was down is indexed in the background."""
        if not self.config.enabled:
            self.error = "search is turned off ([search] enabled = false)"
            return
        served = list(workspaces)
        try:
            self.rebuilt_at_start = await self._run(self._open, {ws.name for ws in served})
        except Exception as exc:
            self.error = f"the search index at {self.path} cannot be opened: {exc}"
            log.error("search: %s; search is unavailable, context.get matches substrings", self.error)
            return
        self.mark_all(served)

    def _open(self, served: set[str]) -> bool:
        if not fts5_available():
            raise RuntimeError("this Python's SQLite has no FTS5 (or no trigram tokenizer: SQLite 3.34 or newer)")
        self._store = Store(self.path)
        for name in self._store.workspace_names() - served:
            self._store.drop_workspace(name)  # no longer served: its text does not stay in the state dir
        return self._store.rebuilt

    async def close(self) -> None:
        self._closed = True
        self._debounce.cancel(_PASS)
        if self._store is not None:
            try:
                await self._run_on(self._reader, self._close_searcher)
                await self._run(self._close_store)
            except Exception:
                log.exception("search: closing the index failed")
        self._reader.shutdown(wait=True)
        self._thread.shutdown(wait=True)

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def reconfigure(self, config: SearchConfig) -> None:
        """Recency and delay apply at once; turning search on or off takes a restart (said in the log)."""
        if config.enabled != self.config.enabled:
            log.warning("search: [search] enabled changed; it takes effect when memd restarts")
            config = dataclasses.replace(config, enabled=self.config.enabled)
        self.config = config
        self._debounce.settle, self._debounce.max_wait = config.index_delay_seconds, config.index_max_wait_seconds

    @property
    def available(self) -> bool:
        return self._store is not None and not self._closed

    # --- change tracking (on the loop) -----------------------------------------------------------------------

    def on_change(self, ws: Workspace, tiers: frozenset[str], origin: str) -> None:
        """Change listener: mark and arm; never reads a file or waits (this runs right after an ack)."""
        if not self.available:
            return
        self._mark(ws, tiers)
        self._arm()

    def mark_all(self, workspaces: Iterable[Workspace]) -> None:
        if not self.available:
            return
        for ws in workspaces:
            self._mark(ws, ALL_TIERS)
        self._arm()

    def _mark(self, ws: Workspace, tiers: frozenset[str]) -> None:
        if ws.name not in self._seen:
            self._seen.add(ws.name)
            tiers = ALL_TIERS
        known = self._dirty.get(ws.name)
        self._dirty[ws.name] = (source_of(ws), tiers | known[1] if known else tiers)

    def _arm(self) -> None:
        if self._dirty and not self._closed:
            self._debounce.poke(_PASS)

    def _take(self, workspaces: Iterable[Workspace] | None) -> Batch:
        if self._lost:  # the database was built afresh: every workspace is synced whole again
            self._lost = False
            self._seen.clear()
            self._states.clear()
        if workspaces is None:
            batch, self._dirty = self._dirty, {}
            return batch
        batch = {}
        for ws in workspaces:
            if ws.name not in self._seen:
                self._mark(ws, ALL_TIERS)
            # A tier whose store changed since the last catch-up is synced even without a mark: a read's refresh
            # adopts an outside edit without telling the listeners (the watcher then finds nothing left to adopt).
            state, before = seen_state(ws), self._states.get(ws.name, {})
            changed = frozenset(t for t, v in state.items() if before.get(t) != v)
            if changed:
                self._mark(ws, changed)
            self._states[ws.name] = state
            entry = self._dirty.pop(ws.name, None)
            if entry is not None:
                batch[ws.name] = entry
        return batch

    def _give_back(self, batch: Batch) -> None:
        for name, (source, tiers) in batch.items():
            known = self._dirty.get(name)
            self._dirty[name] = (source, tiers | known[1] if known else tiers)
        self._arm()

    def _pass(self) -> None:
        if self._busy or not self._dirty or self._closed:
            return  # a pass in flight pokes again when it ends
        self._busy = True
        future = asyncio.get_running_loop().run_in_executor(self._thread, self._index, self._take(None))
        future.add_done_callback(self._passed)

    def _passed(self, future: asyncio.Future[bool]) -> None:
        self._busy = False
        if not future.cancelled() and future.exception() is not None:
            log.error("search: indexing failed: %s", future.exception())
        self._arm()

    # --- on the search thread ----------------------------------------------------------------------------------

    def _index(self, batch: Batch) -> bool:
        """Bring the workspaces of `batch` in step. False: the database was damaged and has been created afresh
        (every workspace is then synced whole again: the loop sees `_lost`)."""
        store = self._store
        if store is None or not batch:
            return True
        started = time.perf_counter()
        try:
            with store.bulk() if store.empty() else contextlib.nullcontext():  # a first build, a full reindex
                for name, (source, tiers) in batch.items():
                    try:
                        outcome = indexer.sync(store, source, tiers, lambda: self._closed)
                    except sqlite3.DatabaseError:
                        raise
                    except Exception:
                        log.exception("search: indexing workspace %s failed", name)
                        self.stats["errors"] += 1
                        continue
                    self.stats["files_indexed"] += outcome.files
                    self.stats["documents_indexed"] += outcome.documents
                    self.stats["errors"] += outcome.errors
                    if outcome.stopped:
                        raise _Stopped
        except _Stopped:
            return True  # memd is stopping; a bulk load cut short is built afresh at the next start
        except sqlite3.DatabaseError as exc:
            self._rebuild(exc)
            return False
        self.stats["passes"] += 1
        self.last_pass_seconds = time.perf_counter() - started
        return True

    def _rebuild(self, exc: sqlite3.DatabaseError) -> None:
        """The database failed (damaged on disk, removed under memd): start it afresh; the files are the truth."""
        assert self._store is not None
        log.error("search: the index failed (%s); building it again from the files", exc)
        self.stats["rebuilds"] += 1
        self._lost = True
        self._store.recreate()

    def _catch_up(self, batch: Batch, sources: list[Source]) -> None:
        if not self._index(batch):
            self._index({s.name: (s, ALL_TIERS) for s in sources})  # built afresh: the scope at least, now

    def _filters(self, sources: list[Source], request: Request, today: date) -> Filters:
        half_life, floor = self.config.recency_half_life_days, self.config.recency_floor
        return Filters([s.name for s in sources], request.tiers, request.since, request.until, today, half_life, floor)

    def _search(self, sources: list[Source], request: Request, today: date) -> list[dict[str, Any]]:
        """A query on the search thread's own connection: when the query thread cannot answer (a database being
        built from scratch, or one that failed it), after whatever the search thread is doing."""
        assert self._store is not None
        filters, limit = self._filters(sources, request, today), request.offset + request.limit + 1
        asked = (request.query, filters, limit, request.seconds, request.texts, request.scan, request.page)
        with self._counting_stops():
            try:
                return self._store.searcher.search(*asked)
            except sqlite3.DatabaseError as exc:
                self._rebuild(exc)
            self._index({s.name: (s, ALL_TIERS) for s in sources})
            return self._store.searcher.search(*asked)

    @contextlib.contextmanager
    def _counting_stops(self) -> Iterator[None]:
        """Count the queries stopped at their deadline: here, on the thread that ran them, since the caller may
        have given up on them already (the topic ranking's own timeout)."""
        try:
            yield
        except InvalidParams:
            self.stats["stopped"] += 1
            raise

    def _query(self, sources: list[Source], request: Request, today: date) -> list[dict[str, Any]] | None:
        """On the query thread. None: it cannot answer now (the database is being built from scratch, or reading
        it failed); the search thread will."""
        store = self._store
        if store is None or store.loading:
            return None
        try:
            if self._searcher is None or self._searcher_of != store.generation:
                self._close_searcher()
                self._searcher_of = store.generation
                self._searcher = Searcher(store.read_connection())
            with self._counting_stops():
                return self._searcher.search(
                    request.query,
                    self._filters(sources, request, today),
                    request.offset + request.limit + 1,
                    request.seconds,
                    request.texts,
                    request.scan,
                    request.page,
                )
        except sqlite3.DatabaseError as exc:
            log.warning("search: reading the index failed (%s); asking the search thread", exc)
            self._close_searcher()
            return None

    def _close_searcher(self) -> None:
        if self._searcher is not None:
            self._searcher.conn.close()
            self._searcher = None

    def _reindex(self, sources: list[Source], everything: bool) -> dict[str, int]:
        assert self._store is not None
        if everything:
            self._store.recreate()
        else:
            for source in sources:
                self._store.drop_workspace(source.name)
        self._index({s.name: (s, ALL_TIERS) for s in sources})
        return {s.name: self._store.count(s.name) for s in sources}

    # --- queries (on the loop) ---------------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._run_on(self._thread, fn, *args)

    @staticmethod
    async def _run_on(thread: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(thread, fn, *args)

    def _require(self) -> None:
        if not self.available:
            raise Unavailable(self.error or "the search index is not open", data={"search": "unavailable"})

    async def search(
        self, workspaces: Sequence[Workspace], request: Request, early: EarlyAck | None = None
    ) -> dict[str, Any]:
        """Hits of `request` in `workspaces` (the caller checked access), best first, after catching up: `{hits,
        more}`. `early`: the caller's answer to this page, which the query thread sends when it can."""
        self._require()
        if not workspaces:
            return {"hits": [], "more": False}
        batch = self._take(workspaces) if request.catch_up else {}
        today = max(ws.today() for ws in workspaces)
        sources = [source_of(ws) for ws in workspaces]
        try:
            if batch:
                await self._run(self._catch_up, batch, sources)
        except asyncio.CancelledError:
            self._give_back(batch)  # the job may never have run: its marks must not be lost
            raise
        hits = await self._run_on(self._reader, self._query_answering, sources, request, today, early)
        if hits is None:
            hits = await self._run(self._search, sources, request, today)
        self.stats["queries"] += 1
        return _page(hits, request)

    def _query_answering(
        self, sources: list[Source], request: Request, today: date, early: EarlyAck | None
    ) -> list[dict[str, Any]] | None:
        """`_query`, and with `early` the answer sent from here (memd.early_ack): the query thread that has the
        hits encodes and sends them itself, so the loop's wake-up and turn are not between the index and the
        client (~0.17 ms of a 100,000-entry search's ~3.7 ms, docs/benchmarks.md figure 9). The loop still makes
        the result, and sends it only when this could not (an answer owed ahead of it, a full socket buffer)."""
        hits = self._query(sources, request, today)
        if hits is not None and early is not None:
            try:
                early.prepare(_page(hits, request), {})
                early.send()
            except Exception:  # an answer that cannot be encoded here is encoded (and its error reported) by the loop
                log.exception("search: sending an answer from the query thread failed")
        return hits

    async def rank_cold(self, ws: Workspace, topic: str) -> list[tuple[str, str]] | None:
        """The cold learnings (category, text) matching any word of `topic`, best first, as many as the cold budget
        could hold; None when the index cannot answer within RANK_TIMEOUT_SECONDS (the caller matches substrings
        instead). The index as it is, without catching up first: a topic is asked with every `context.get`, the
        learnings change with every `cold.learn`, and catching up costs the size of cold/MEMORY.md; the caller adds
        what the index does not have yet by the substring rule, and learnings are told by content, not by line,
        so one the index has at an older line is still found."""
        query = q.any_of(topic)
        if query is None or not self.available:
            return None
        limit = max(1, ws.config.budget.cold // RANK_TOKENS_PER_LEARNING)
        # The deadline goes with the query too: the wait below gives up on it, and the query thread stops by itself
        # rather than go on holding up the searches behind it.
        # No scan for a term under three characters: the caller's substring rule (cold_selection.relevant) finds the
        # same learnings from what the cold store keeps, and knows from its kept counts when there is none, while
        # a scan reads every learning on each read (the hour soak's topic "C1", in no learning: 17% of samples).
        request = Request(
            query, ("cold",), None, None, limit, 0, RANK_TIMEOUT_SECONDS, catch_up=False, texts=True, scan=False
        )
        try:
            result = await asyncio.wait_for(self.search([ws], request), RANK_TIMEOUT_SECONDS)
        except (TimeoutError, Unavailable, InvalidParams):
            return None
        except Exception:
            log.exception("search: ranking learnings of %s failed", ws.name)
            return None
        # Learnings only, not proposals (cold/PROPOSED.md is in the cold tier too).
        return [(hit["heading"], hit["text"]) for hit in result["hits"] if hit["file"] == indexer.COLD_FILE]

    async def reindex(self, workspaces: Sequence[Workspace], everything: bool) -> dict[str, Any]:
        """Build the index of `workspaces` again from their files (`everything`: the whole database afresh)."""
        self._require()
        started = time.perf_counter()
        for ws in workspaces:
            self._dirty.pop(ws.name, None)
            self._seen.add(ws.name)
        counts = await self._run(self._reindex, [source_of(ws) for ws in workspaces], everything)
        return {"workspaces": counts, "seconds": round(time.perf_counter() - started, 3)}

    def status(self) -> dict[str, Any]:
        return {
            "enabled": self.config.enabled,
            "available": self.available,
            "error": self.error or None,
            "path": str(self.path),
            "pending": sorted(self._dirty),
            "indexing": self._busy,
            "rebuilt_at_start": self.rebuilt_at_start,
            "last_pass_seconds": round(self.last_pass_seconds, 4),
            **self.stats,
        }
