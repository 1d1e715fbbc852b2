"""Specification of the search index (memd.search: documents, store, indexer): what a workspace's files become, where
each hit points, how ranking weighs age, and that the index follows the files: appends, edits, deletions,
archives, unreadable files, and a rebuild from scratch that equals what the increments made.

Workspaces are real directories written the way memd writes them; the index is a real SQLite file.
"""

from __future__ import annotations

import json
import os
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memd import archive, fsio
from memd.errors import InvalidParams
from memd.search import documents, indexer, searcher
from memd.search import query as q
from memd.search.documents import DayTail
from memd.search.indexer import ALL_TIERS, Source
from memd.search.searcher import Filters
from memd.search.store import FileState, Store
from memd.tiers import hot_format, warm_format
from memd.tiers.warm_format import WarmEntry

TODAY = date(2026, 3, 10)


def header(day: date) -> str:
    return f"# Activity Log {day.isoformat()} (UTC+00:00, UTC)\n\n"


def entry(time: str, action: str, result: str | None = None, **details: str) -> str:
    return warm_format.render_entry(WarmEntry(time, action, tuple(details.items()), result))


def write_day(root: Path, day: date, *entries: str, mode: str = "w") -> Path:
    path = root / "warm" / f"{day.isoformat()}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode, encoding="utf-8") as f:
        if mode == "w":
            f.write(header(day))
        f.write("".join(entries))
    return path


def write_hot(root: Path, notes: list[str], summary: str = "", decisions: tuple[tuple[str, str], ...] = ()) -> None:
    """The hot tier as memd writes it: the session fields in context.json, its own notes and summary in memd.json."""
    context = {
        "task": "Refactor authentication",
        "decisions": [
            {"id": f"d-{i}", "ts": "2026-03-09T08:00:00Z", "action": a, "reason": r}
            for i, (a, r) in enumerate(decisions)
        ],
    }
    own: dict[str, object] = {
        "version": 2,
        "notes": [{"id": f"n-{i}", "ts": f"2026-03-0{i + 1}T10:00:00Z", "text": t} for i, t in enumerate(notes)],
        "summary": summary,
        "checkpoints": [{"id": "ckpt-1", "at": "2026-03-08T12:00:00+00:00"}] if summary else [],
    }
    (root / "hot").mkdir(parents=True, exist_ok=True)
    (root / "hot" / "context.json").write_bytes(hot_format.serialize(context))
    (root / "hot" / "memd.json").write_bytes(hot_format.serialize(own))


MEMORY = """\
# Agent Memory

## Auth
- [2024-03-01] JWT secrets live in vault
- [2023-01-01] rotate the signing keys every 90 days

## Testing
- [2026-01-05] run pytest with -x
"""


def source(root: Path, name: str = "alpha") -> Source:
    for tier in ("hot", "warm", "cold"):
        (root / tier).mkdir(parents=True, exist_ok=True)
    return Source(name, root, fsio.PinnedDir.pin(root), 4 << 20, 16 << 20, 64 << 20, 64 << 20)


def filters(*scope: str, tiers: tuple[str, ...] = ("hot", "warm", "cold"), **kw: str) -> Filters:
    return Filters(scope or ("alpha",), tiers, kw.get("since"), kw.get("until"), TODAY, 30.0, 0.3)


def search(store: Store, text: str, f: Filters | None = None, limit: int = 20) -> list[dict[str, object]]:
    return store.searcher.search(q.parse(text), f or filters(), limit)


def equals_a_full_build(store: Store, ws: Source, tmp_path: Path) -> Store:
    """What the increments left in `store` equals a build from scratch of the same files; the fresh build."""
    fresh = Store(tmp_path / "fresh.sqlite3")
    indexer.sync(fresh, ws, ALL_TIERS)
    assert store.rows(ws.name) == fresh.rows(ws.name)
    return fresh


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "state" / "search.sqlite3")
    yield s
    s.close()


@pytest.fixture
def ws(tmp_path: Path) -> Source:
    root = tmp_path / "alpha"
    src = source(root)
    write_hot(
        root,
        ["the validator caches signing keys for 5 minutes", "second note"],
        "# Context Summary\n- moved token refresh into middleware",
        (("Split jwt.py", "File exceeded 500 lines"),),
    )
    write_day(
        root,
        TODAY,
        entry("09:12:03", "Refactored JWT validation", "Tests passing", file="auth/jwt.py"),
        entry("09:40:51", "Ran test suite", "12 passed, 0 failed", command="pytest tests/auth -q"),
    )
    (root / "cold" / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    return src


# --- where hits point -----------------------------------------------------------------------------------------------


def test_hits_come_from_every_tier_with_their_file_lines_heading_date_and_a_marked_snippet(
    store: Store, ws: Source
) -> None:
    indexer.sync(store, ws, ALL_TIERS)
    hot_lines = (ws.root / "hot" / "memd.json").read_text().split("\n")

    (note,) = search(store, "minutes")
    assert note["tier"] == "hot" and note["kind"] == "note" and note["file"] == "hot/memd.json"
    assert note["id"] == "n-0" and note["date"] == "2026-03-01"
    line = note["lines"][0]
    assert note["lines"] == [line, line] and '"the validator caches' in hot_lines[line - 1]
    assert note["snippet"] == "the validator caches signing keys for 5 «minutes»"

    (decision,) = search(store, "exceeded")
    assert (decision["kind"], decision["heading"], decision["id"]) == ("decision", "Split jwt.py", "d-0")
    assert decision["file"] == "hot/context.json"
    (summary,) = search(store, "middleware")
    assert (summary["kind"], summary["date"]) == ("summary", "2026-03-08")
    assert '"summary"' in hot_lines[summary["lines"][0] - 1]

    (logged,) = search(store, "refactored")
    assert logged == {
        "workspace": "alpha",
        "tier": "warm",
        "kind": "entry",
        "file": f"warm/{TODAY}.md",
        "date": TODAY.isoformat(),
        "time": "09:12:03",
        "lines": [3, 7],
        "heading": "Refactored JWT validation",
        "snippet": "«Refactored» JWT validation",
        "score": logged["score"],
        "match": "words",
    }
    day_lines = (ws.root / "warm" / f"{TODAY}.md").read_text().split("\n")
    assert day_lines[2] == "### 09:12:03 - Refactored JWT validation" and day_lines[6] == "Result: Tests passing"

    (learning,) = search(store, "vault")
    assert (learning["tier"], learning["file"], learning["lines"]) == ("cold", "cold/MEMORY.md", [4, 4])
    assert (learning["heading"], learning["date"], learning["kind"]) == ("Auth", "2024-03-01", "learning")
    assert MEMORY.split("\n")[3] == "- [2024-03-01] JWT secrets live in vault"


def test_details_and_results_are_searched_and_marked(store: Store, ws: Source) -> None:
    indexer.sync(store, ws, ALL_TIERS)
    (hit,) = search(store, '"12 passed"')
    assert hit["heading"] == "Ran test suite"
    assert "«12 passed»" in hit["snippet"]
    assert search(store, "auth/jwt.py")[0]["snippet"] == "file: «auth/jwt.py» / Tests passing"


def test_only_the_page_the_caller_returns_gets_snippets_and_they_are_the_unpaged_ones(store: Store, ws: Source) -> None:
    indexer.sync(store, ws, ALL_TIERS)
    whole = search(store, "jwt OR auth OR vault OR pytest")
    assert len(whole) >= 3 and all(h["snippet"] for h in whole)
    paged = store.searcher.search(q.parse("jwt OR auth OR vault OR pytest"), filters(), 3, page=range(1, 2))
    assert [h["snippet"] for h in paged] == ["", whole[1]["snippet"], ""]
    where = [(h["file"], h["lines"], h["score"]) for h in whole[:3]]
    assert [(h["file"], h["lines"], h["score"]) for h in paged] == where


def test_identifier_parts_and_cjk_are_found_as_substrings(store: Store, tmp_path: Path) -> None:
    ws = source(tmp_path / "alpha")
    write_day(ws.root, TODAY, entry("10:00:00", "Fixed JwtValidatorFactory caching", "数据库连接失败 resolved"))
    indexer.sync(store, ws, ALL_TIERS)

    (hit,) = search(store, "Validator")
    assert (hit["match"], hit["snippet"]) == ("substring", "Fixed Jwt«Validator»Factory caching")
    assert search(store, "数据库")[0]["snippet"] == "«数据库»连接失败 resolved"
    assert search(store, "数据")[0]["match"] == "substring", "two characters: found by a scan"


def test_an_archived_day_is_found_at_its_archive_with_the_days_own_line_numbers(store: Store, tmp_path: Path) -> None:
    ws = source(tmp_path / "alpha")
    old = date(2026, 1, 15)
    path = write_day(ws.root, old, entry("08:00:00", "Migrated the billing schema", "done"))
    archive.add_to_month(ws.root / "warm" / "archive", "2026-01", [(path.name, path.read_bytes())], 64 << 20)
    indexer.sync(store, ws, ALL_TIERS)
    assert len(search(store, "billing")) == 1, "in warm/ and in the archive (a sweep stopped half-way): found once"

    path.unlink()
    indexer.sync(store, ws, ALL_TIERS)
    (hit,) = search(store, "billing")
    assert (hit["file"], hit["date"], hit["lines"]) == ("warm/archive/2026-01.md.gz", "2026-01-15", [3, 4])


# --- following the files ------------------------------------------------------------------------------------------


def test_a_deleted_day_file_takes_its_entries_out_of_the_index(store: Store, ws: Source) -> None:
    indexer.sync(store, ws, ALL_TIERS)
    (ws.root / "warm" / f"{TODAY}.md").unlink()
    indexer.sync(store, ws, frozenset({"warm"}))
    assert search(store, "refactored") == []
    assert search(store, "vault"), "the other tiers stay"


def test_appends_are_indexed_from_the_last_entry_and_equal_a_full_build(store: Store, tmp_path: Path) -> None:
    ws = source(tmp_path / "alpha")
    path = write_day(ws.root, TODAY, entry("09:00:00", "first entry"))
    indexer.sync(store, ws, ALL_TIERS)
    inode = path.stat().st_ino
    for i in range(1, 6):
        write_day(ws.root, TODAY, entry(f"09:0{i}:00", f"entry number {i}", "ok"), mode="a")
        indexer.sync(store, ws, frozenset({"warm"}))
    piece = entry("10:00:00", "written in two parts", "the second half")
    write_day(ws.root, TODAY, piece[:10], mode="a")  # an append caught half-way (no newline yet)
    indexer.sync(store, ws, frozenset({"warm"}))
    write_day(ws.root, TODAY, piece[10:], mode="a")
    indexer.sync(store, ws, frozenset({"warm"}))
    assert path.stat().st_ino == inode

    fresh = equals_a_full_build(store, ws, tmp_path)
    assert len(store.rows("alpha")) == 7
    assert search(store, '"second half"')[0]["lines"][0] == fresh.rows("alpha")[-1][5]


def test_a_burst_of_learnings_appended_is_indexed_alone_and_equals_a_full_build(store: Store, tmp_path: Path) -> None:
    """A burst appends blocks of one learning each to MEMORY.md: each sync indexes those alone (a diff of the
    whole file after every batch took the search thread's CPU from every request as MEMORY.md grew)."""
    ws = source(tmp_path / "alpha")
    memory = ws.root / "cold" / "MEMORY.md"
    memory.write_text("# Agent Memory\n\n## Ops\n- [2026-03-01] keep backups\n- [2026-03-01] rotate keys\n")
    indexer.sync(store, ws, ALL_TIERS)
    inode = memory.stat().st_ino
    for n in range(1, 4):
        with memory.open("a", encoding="utf-8") as f:
            f.write(f"\n## Ops\n- [2026-03-0{n + 1}] appended {n}\n")
        assert indexer.sync(store, ws, frozenset({"cold"})).documents == 1  # the block, not the file again
    burst = Store(tmp_path / "burst.sqlite3")
    indexer.sync(burst, ws, ALL_TIERS)
    assert store.rows("alpha") == burst.rows("alpha")
    assert search(store, "appended 3")[0]["lines"] == [14, 14]
    with memory.open("a", encoding="utf-8") as f:  # a person's `>>` under the last heading: read whole
        f.write("- [2026-03-09] by hand\n")
    indexer.sync(store, ws, frozenset({"cold"}))
    assert memory.stat().st_ino == inode

    equals_a_full_build(store, ws, tmp_path)
    assert len(store.rows("alpha")) == 6


def memory_file(sections: dict[str, list[str]]) -> str:
    return "# Agent Memory\n" + "".join(
        f"\n## {name}\n" + "".join(f"- [2026-03-01] {text}\n" for text in texts) for name, texts in sections.items()
    )


def row_ids(store: Store, file: str) -> dict[str, int]:
    return dict(store.conn.execute("SELECT body, id FROM docs WHERE file = ?", (file,)).fetchall())


def test_a_rewritten_memory_file_indexes_only_what_changed_and_equals_a_full_build(
    store: Store, tmp_path: Path
) -> None:
    ws = source(tmp_path / "alpha")
    memory = ws.root / "cold" / "MEMORY.md"
    sections = {
        "Auth": [f"auth learning {i}" for i in range(30)],
        "Testing": [f"testing learning {i}" for i in range(30)],
    }
    memory.write_text(memory_file(sections))
    indexer.sync(store, ws, ALL_TIERS)
    ids = row_ids(store, "cold/MEMORY.md")

    changes = [
        lambda: sections["Auth"].insert(0, "a new first learning, as memd inserts one"),  # every line after it moves
        lambda: sections["Testing"].__setitem__(5, "testing learning 5, edited by a person"),
        lambda: sections["Auth"].remove("auth learning 7"),
        lambda: sections["Testing"].append("testing learning 0"),  # the same text twice in one section
        lambda: sections.update({"Deploy": ["a whole new section"]}),
    ]
    for change in changes:
        change()
        memory.write_text(memory_file(sections))
        outcome = indexer.sync(store, ws, frozenset({"cold"}))
        assert outcome.documents <= 1  # only the new or edited learning is indexed anew

        fresh = Store(tmp_path / f"fresh-{len(os.listdir(tmp_path))}.sqlite3")
        indexer.sync(fresh, ws, ALL_TIERS)
        assert store.rows("alpha") == fresh.rows("alpha")  # lines included
        for table in ("words", "grams"):
            store.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
        fresh.close()

    kept = row_ids(store, "cold/MEMORY.md")
    unchanged = [f"auth learning {i}" for i in range(30) if i != 7] + ["testing learning 29"]
    assert all(kept[text] == ids[text] for text in unchanged)  # their rows and FTS entries were left alone
    assert search(store, "edited")[0]["lines"][0] == 1 + memory.read_text().splitlines().index(
        "- [2026-03-01] testing learning 5, edited by a person"
    )
    assert not search(store, '"auth learning 7"')


_ALIKE = st.tuples(st.sampled_from(["A", "B"]), st.sampled_from(["x", "y", "x y", "z"]), st.sampled_from([None, "r1"]))


@settings(max_examples=60, deadline=None)
@given(st.lists(_ALIKE, max_size=14), st.lists(_ALIKE, max_size=14))
def test_a_file_compared_again_keeps_the_row_of_every_document_still_there_the_nth_alike_with_the_nth(
    tmp_path_factory: pytest.TempPathFactory,
    before: list[tuple[str, str, str | None]],
    after: list[tuple[str, str, str | None]],
) -> None:
    """The whole-file comparison (an edit, a fold) pairs documents in SQL: each document of the file now keeps the
    row of one indexed alike (same everything but its lines), several alike paired in line order, and only the
    rest is indexed anew; the result is what a build from scratch makes."""
    store = Store(tmp_path_factory.mktemp("pairs") / "index.sqlite3")

    def docs(items: list[tuple[str, str, str | None]]) -> list[documents.Doc]:
        return [
            documents.Doc("cold", "learning", "2026-03-01", None, n, n, h, b, r) for n, (h, b, r) in enumerate(items, 1)
        ]

    def rows() -> list[tuple[Any, ...]]:
        return store.conn.execute("SELECT id, heading, body, ref, line_start FROM docs ORDER BY line_start").fetchall()

    state = FileState(1, 1, 1)
    store.replace_file("w", "cold/MEMORY.md", state, docs(before))
    old = rows()

    indexed = store.replace_file("w", "cold/MEMORY.md", state, docs(after))

    new = rows()
    assert [r[1:] for r in new] == [(h, b, r, n) for n, (h, b, r) in enumerate(after, 1)]
    kept = 0
    for key in set(after):
        old_ids = [r[0] for r in old if r[1:4] == key]
        new_ids = [r[0] for r in new if r[1:4] == key]
        shared = min(len(old_ids), len(new_ids))
        assert new_ids[:shared] == old_ids[:shared]  # the n-th alike kept the n-th's row
        kept += shared
    assert indexed == len(after) - kept
    for table in ("words", "grams"):
        store.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
    store.close()


def test_comparing_a_file_of_many_documents_of_one_body_costs_in_proportion_to_the_file(tmp_path: Path) -> None:
    """Warm entries without details all have an empty body: pairing documents by body alone made each of them meet
    every other (4x the work for twice the entries). Counted in SQLite's virtual-machine steps, not time."""
    store = Store(tmp_path / "index.sqlite3")

    def steps_to_compare_again(n: int) -> int:
        docs = [
            documents.Doc(
                "warm", "entry", "2026-01-01", f"{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}", i, i, "a", ""
            )
            for i in range(1, n + 1)
        ]
        store.replace_file("w", f"warm/{n}.md", FileState(1, 1, 1), docs)
        moved = [
            documents.Doc(d.tier, d.kind, d.date, d.time, d.line_start + 1, d.line_end + 1, d.heading, d.body)
            for d in docs
        ]
        counted = [0]

        def count() -> int:
            counted[0] += 1
            return 0

        store.conn.set_progress_handler(count, 100)
        try:
            assert store.replace_file("w", f"warm/{n}.md", FileState(1, 1, 1), moved) == 0  # every row kept
        finally:
            store.conn.set_progress_handler(None, 0)
        return counted[0]

    small, large = steps_to_compare_again(400), steps_to_compare_again(1600)

    assert large < 6 * small  # linear and a sort: ~4.4x; pairing by body alone: ~16x
    store.close()


def test_an_edit_inside_a_day_file_that_also_grows_it_is_read_again_whole(store: Store, tmp_path: Path) -> None:
    ws = source(tmp_path / "alpha")
    path = write_day(ws.root, TODAY, entry("09:00:00", "deploy to staging"), entry("09:30:00", "smoke tests"))
    indexer.sync(store, ws, ALL_TIERS)
    with open(path, "r+", encoding="utf-8") as f:  # same inode, bigger, earlier bytes changed
        text = f.read().replace("staging", "production canary")
        f.seek(0)
        f.write(text)
    indexer.sync(store, ws, frozenset({"warm"}))
    assert search(store, "staging") == []
    assert search(store, "canary")[0]["heading"] == "deploy to production canary"


def test_a_day_cut_short_in_place_and_appended_to_is_read_again_whole(store: Store, tmp_path: Path) -> None:
    ws = source(tmp_path / "alpha")
    first, second = entry("09:00:00", "deploy to staging"), entry("09:30:00", "smoke tests")
    path = write_day(ws.root, TODAY, first, second)
    indexer.sync(store, ws, ALL_TIERS)
    with open(path, "r+", encoding="utf-8") as f:  # same inode: cut before the last entry, then a new one
        f.truncate(len(header(TODAY)) + len(first.encode()))
    write_day(ws.root, TODAY, entry("10:00:00", "rollback"), mode="a")
    indexer.sync(store, ws, frozenset({"warm"}))

    equals_a_full_build(store, ws, tmp_path)
    assert search(store, "smoke") == []
    assert search(store, "rollback")[0]["heading"] == "rollback"


def test_an_append_to_a_day_of_megabytes_is_indexed_from_its_last_entry_and_equals_a_full_build(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = source(tmp_path / "alpha")
    long_day = [entry(f"0{i // 3600}:{i // 60 % 60:02d}:{i % 60:02d}", f"step {i}", "ok") for i in range(30000)]
    path = write_day(ws.root, TODAY, *long_day)
    assert path.stat().st_size > 1 << 20  # its prefix is hashed through the buffer more than once
    indexer.sync(store, ws, ALL_TIERS)
    write_day(ws.root, TODAY, entry("09:00:00", "the newest step", "indexed"), mode="a")
    read: list[int] = []
    real_read = indexer.read_tier_file

    def counting_read(path: Path, max_bytes: int, offset: int = 0, skipped: Any = None) -> bytes | None:
        data = real_read(path, max_bytes, offset, skipped)
        read.append(len(data or b""))
        return data

    monkeypatch.setattr(indexer, "read_tier_file", counting_read)
    indexer.sync(store, ws, frozenset({"warm"}))
    assert len(read) == 1 and read[0] < 1000  # only what follows the last entry, and the file read once
    monkeypatch.undo()

    fresh = equals_a_full_build(store, ws, tmp_path)
    assert search(store, '"newest step"')[0]["lines"][0] == fresh.rows("alpha")[-1][5]


def test_a_file_that_cannot_be_read_keeps_its_last_rows_until_it_is_fixed(store: Store, ws: Source) -> None:
    indexer.sync(store, ws, ALL_TIERS)
    hot = ws.root / "hot" / "memd.json"
    good = hot.read_bytes()
    hot.write_text("{not json", encoding="utf-8")
    outcome = indexer.sync(store, ws, ALL_TIERS)
    assert outcome.errors == 1
    assert search(store, "minutes"), "the last good notes stay searchable"
    assert "not valid JSON" in (store.files("alpha")["hot/memd.json"].error or "")

    hot.write_bytes(good.replace(b"minutes", b"hours"))
    indexer.sync(store, ws, ALL_TIERS)
    assert search(store, "minutes") == [] and search(store, "hours")


def test_symlinked_tier_files_are_never_read(store: Store, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text(header(TODAY) + entry("01:00:00", "password hunter2"), encoding="utf-8")
    ws = source(tmp_path / "alpha")
    os.symlink(secret, ws.root / "warm" / f"{TODAY}.md")
    os.symlink(secret, ws.root / "cold" / "MEMORY.md")
    indexer.sync(store, ws, ALL_TIERS)
    assert search(store, "hunter2") == []


def test_a_workspace_name_served_from_another_directory_is_indexed_afresh(
    store: Store, ws: Source, tmp_path: Path
) -> None:
    indexer.sync(store, ws, ALL_TIERS)
    other = source(tmp_path / "elsewhere")
    write_day(other.root, TODAY, entry("11:00:00", "a different project"))
    indexer.sync(store, other, ALL_TIERS)
    assert search(store, "vault") == [] and search(store, "different")


def test_a_database_of_another_schema_or_not_a_database_is_built_again(tmp_path: Path) -> None:
    path = tmp_path / "search.sqlite3"
    first = Store(path)
    assert first.rebuilt
    first.conn.execute("PRAGMA user_version = 99")
    first.close()
    assert Store(path).rebuilt
    path.write_bytes(b"garbage" * 1000)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    again = Store(path)
    assert again.rebuilt and again.empty()
    assert oct(path.stat().st_mode & 0o777) == "0o600", "it holds every workspace's text"


def test_a_bulk_load_equals_row_by_row_indexing(tmp_path: Path, ws: Source) -> None:
    one = Store(tmp_path / "one.sqlite3")
    indexer.sync(one, ws, ALL_TIERS)
    bulk = Store(tmp_path / "bulk.sqlite3")
    with bulk.bulk():
        indexer.sync(bulk, ws, ALL_TIERS)
    assert one.rows("alpha") == bulk.rows("alpha")
    for text in ("minutes", "refactored", "vault", "Validat", '"12 passed"'):
        assert search(one, text) == search(bulk, text)


# --- ranking and filters -------------------------------------------------------------------------------------------


def test_recent_warm_entries_rank_first_and_cold_learnings_do_not_decay(store: Store, tmp_path: Path) -> None:
    ws = source(tmp_path / "alpha")
    text = "rotate the signing keys every 90 days"
    write_day(ws.root, TODAY, entry("09:00:00", "today", text))
    write_day(ws.root, TODAY - timedelta(days=300), entry("09:00:00", "long ago", text))
    write_day(ws.root, TODAY - timedelta(days=1), *(entry("10:00:00", f"filler {i}", "unrelated") for i in range(20)))
    (ws.root / "cold" / "MEMORY.md").write_text(f"## Keys\n- [2020-01-01] {text}\n", encoding="utf-8")
    indexer.sync(store, ws, ALL_TIERS)

    hits = search(store, "rotate signing")
    assert [h["heading"] for h in hits][-1] == "long ago"
    scores = {h["heading"]: h["score"] for h in hits}
    assert scores["today"] > scores["long ago"] and scores["Keys"] > scores["long ago"]


def test_since_until_and_tiers_narrow_the_hits(store: Store, ws: Source) -> None:
    indexer.sync(store, ws, ALL_TIERS)
    assert {h["tier"] for h in search(store, "jwt OR keys OR vault")} == {"hot", "warm", "cold"}
    assert {h["tier"] for h in search(store, "jwt OR keys OR vault", filters(tiers=("cold",)))} == {"cold"}
    dated = search(store, "jwt OR keys OR vault", filters(since="2026-03-01"))
    assert dated and all(str(h["date"]) >= "2026-03-01" for h in dated)
    assert [h["date"] for h in search(store, "jwt OR keys OR vault", filters(until="2023-12-31"))] == ["2023-01-01"]


def test_a_frequent_word_ranks_its_newest_matches_and_a_small_scope_still_finds_its_own(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(searcher, "CANDIDATES", 5)
    big = source(tmp_path / "big", "big")
    for back in range(4):
        day = TODAY - timedelta(days=back)
        write_day(big.root, day, *(entry(f"0{i}:00:00", f"cache warmed {back}-{i}") for i in range(10)))
    small = source(tmp_path / "small", "small")
    write_day(small.root, TODAY - timedelta(days=30), entry("01:00:00", "cache cleared in small"))
    indexer.sync(store, small, ALL_TIERS)
    indexer.sync(store, big, ALL_TIERS)  # indexed after: its rows are the newest

    hits = search(store, "cache", filters("big", "small"), limit=3)
    assert [h["date"] for h in hits] == [TODAY.isoformat()] * 3
    (own,) = search(store, "cache", filters("small"), limit=3)
    assert own["heading"] == "cache cleared in small"


def test_a_frequent_word_ranks_the_curated_tiers_matches_however_many_newer_warm_entries_hold_it(
    store: Store, ws: Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ranking window holds the newest matches of the warm tier, which grows all day; a learning and the hot
    # notes do not decay, and a day's worth of warm entries naming the same word must not push them out of it.
    monkeypatch.setattr(searcher, "CANDIDATES", 5)
    (ws.root / "cold" / "MEMORY.md").write_text("## Cache\n- [2026-01-05] the cache evicts LRU\n", encoding="utf-8")
    write_hot(ws.root, ["the cache is cold after a deploy"])
    indexer.sync(store, ws, ALL_TIERS)
    said = "after the deploy every node of the cluster was warmed again and the cache took minutes to fill"
    weak = [entry(f"0{i % 10}:00:00", f"warmed the nodes {i}", said) for i in range(20)]
    weak[10] = entry("05:00:00", "cache flushed")  # the 10th newest: the last the warm window holds (5 + 5)
    write_day(ws.root, TODAY, *weak)
    indexer.sync(store, ws, frozenset({"warm"}))  # indexed after: the warm rows are the newest

    # The short texts rank above the long entries that mention the word once; they must be ranked at all: the
    # two curated documents, and the warm window still reaches as far as it would without them.
    hits = search(store, "cache", limit=5)
    assert {h["tier"] for h in hits[:3]} == {"cold", "hot", "warm"}
    assert "cache flushed" in [h["heading"] for h in hits[:3]]
    (learning,) = search(store, "cache", filters(tiers=("cold",)), limit=5)
    assert learning["heading"] == "Cache"


def test_a_word_in_more_learnings_than_the_window_holds_still_ranks_the_newest_warm_entries(
    store: Store, ws: Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other way round: a MEMORY.md of many learnings naming the word fills the window with theirs (their ids
    # are above every warm one); the newest warm entries must still be ranked.
    monkeypatch.setattr(searcher, "CANDIDATES", 5)
    said = "the cache was flushed again after the nightly deploy of every node of the cluster, nothing else"
    learnings = "".join(f"- [2026-01-05] {said} ({i})\n" for i in range(30))
    (ws.root / "cold" / "MEMORY.md").write_text(f"## Ops\n{learnings}", encoding="utf-8")
    indexer.sync(store, ws, ALL_TIERS)
    warm = [entry(f"0{i % 10}:00:00", f"deployed node {i}", said) for i in range(20)]
    warm[15] = entry("05:00:00", "cache cold")  # the 5th newest: in the window only if warm entries get one
    write_day(ws.root, TODAY, *warm)
    indexer.sync(store, ws, frozenset({"warm"}))

    hits = search(store, "cache", limit=5)
    assert hits[0]["heading"] == "cache cold"
    assert {"warm", "cold"} <= {h["tier"] for h in search(store, "cache", limit=20)}


@pytest.mark.parametrize("tiers", [("hot", "warm", "cold"), ("cold",)])
def test_a_ranking_looks_up_only_its_candidates_documents_whatever_statistics_sqlite_holds(
    store: Store, ws: Source, tiers: tuple[str, ...]
) -> None:
    # Statistics that say a workspace holds few rows of each tier (what `ANALYZE` or `PRAGMA optimize` leave, by
    # hand or from another tool; SQLite 3.51 plans this way with none): a planner free to choose then reads every
    # document of the workspace through docs_by_age and probes the candidates, 29 ms instead of 0.7 ms for a
    # word of 2,800 matches in 100,000 entries (docs/benchmarks.md, figure 9).
    indexer.sync(store, ws, ALL_TIERS)
    store.conn.execute("ANALYZE workspaces")  # makes sqlite_stat1
    store.conn.execute("INSERT INTO sqlite_stat1 VALUES ('docs', 'docs_by_age', '100000 2 1 1')")
    store.conn.execute("ANALYZE sqlite_schema")  # the planner reads the statistics again
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    try:
        assert search(store, "signing", filters(tiers=tiers))
    finally:
        store.conn.set_trace_callback(None)

    ranking = next(sql for sql in statements if "cand AS MATERIALIZED" in sql)
    plan = [row[3] for row in store.conn.execute("EXPLAIN QUERY PLAN " + ranking)]
    assert "SEARCH d USING INTEGER PRIMARY KEY (rowid=?)" in plan
    # (docs_by_age counts the scope's hot and cold documents, as `c`: how far the window reaches)
    assert not [step for step in plan if step.startswith(("SCAN d", "SEARCH d USING INDEX docs_by_age"))]
    assert not [step for step in plan if "docs_by_age" in step and not step.startswith("SEARCH c USING COVERING")]


def test_prefix_queries_of_every_length_find_exactly_the_words_that_start_so(store: Store, tmp_path: Path) -> None:
    # Prefixes of 2, 3 and 4 characters are answered from FTS5's prefix indexes, longer ones by merging the
    # doclists of the words they match: the hits must be the same either way.
    # (words whose stems start with the same letters as they do: "reply" is stemmed "repli")
    words = ["replica", "replicated", "repo", "rename", "ruby", "rust", "rum", "render", "react"]
    big = source(tmp_path / "big", "big")
    write_day(big.root, TODAY, *(entry(f"0{i}:00:00", f"step {i}", note=f"{w} work") for i, w in enumerate(words)))
    indexer.sync(store, big, ALL_TIERS)
    declared = store.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'words'").fetchone()[0]
    assert "prefix='2 3 4'" in declared
    for prefix in ("ru", "rep", "repl", "repli", "replic", "ren"):
        hits = search(store, f"{prefix}*", filters("big"), limit=50)
        expected = {f"step {i}" for i, w in enumerate(words) if w.startswith(prefix)}
        assert {h["heading"] for h in hits} == expected, prefix
        assert all(f"\u00ab{prefix}" in str(h["snippet"]).lower() for h in hits), prefix


def test_a_short_term_scan_of_one_workspaces_tier_reads_newest_first_and_stops_at_its_limit(
    store: Store, tmp_path: Path
) -> None:
    ws = source(tmp_path / "alpha")
    texts = [f"learning {i} about the cache" for i in range(3000)]
    (ws.root / "cold" / "MEMORY.md").write_text(memory_file({"Ops": texts}))
    indexer.sync(store, ws, ALL_TIERS)
    looked_at = 0

    def like(pattern: str, text: str, escape: str) -> bool:  # SQLite's LIKE, counting the rows it is asked about
        nonlocal looked_at
        looked_at += 1
        return pattern.strip("%").lower() in text.lower()

    store.conn.create_function("like", 3, like)
    hits = store.searcher.search(q.parse("c"), filters(tiers=("cold",)), 5)

    assert [h["lines"][0] for h in hits] == [3003, 3002, 3001, 3000, 2999]  # the last learnings (newest rows) first
    assert looked_at == 5  # not every learning that matches


def test_a_ranking_without_scan_leaves_short_terms_to_the_caller_and_reads_no_document_for_them(
    store: Store, tmp_path: Path
) -> None:
    ws = source(tmp_path / "alpha")
    (ws.root / "cold" / "MEMORY.md").write_text(
        memory_file({"Ops": [f"learning {i} about c1 and c2" for i in range(50)]})
    )
    indexer.sync(store, ws, ALL_TIERS)
    looked_at = 0

    def like(pattern: str, text: str, escape: str) -> bool:
        nonlocal looked_at
        looked_at += 1
        return pattern.strip("%").lower() in text.lower()

    store.conn.create_function("like", 3, like)
    assert store.searcher.search(q.parse("c9"), filters(tiers=("cold",)), 5, texts=True, scan=False) == []
    assert looked_at == 0
    assert (
        len(store.searcher.search(q.parse("c1"), filters(tiers=("cold",)), 5, texts=True)) == 5
    )  # with the scan: found


def test_offset_pages_through_word_and_substring_hits_without_repeats(store: Store, tmp_path: Path) -> None:
    ws = source(tmp_path / "alpha")
    write_day(ws.root, TODAY, *(entry(f"0{i}:00:00", f"tokenizer step {i}") for i in range(6)))
    write_day(ws.root, TODAY - timedelta(days=1), entry("01:00:00", "retokenize everything"))
    indexer.sync(store, ws, ALL_TIERS)
    every = search(store, "tokeniz", limit=50)
    assert len(every) == 7 and len({(h["file"], h["lines"][0]) for h in every}) == 7


# --- documents --------------------------------------------------------------------------------------------------------


def test_a_day_files_tail_is_where_its_last_entry_starts() -> None:
    data = (header(TODAY) + entry("09:00:00", "a") + entry("09:10:00", "b", "ok")).encode()
    docs, tail = documents.warm_day(data, TODAY.isoformat())
    assert [(d.line_start, d.line_end) for d in docs] == [(3, 3), (5, 6)]
    assert tail == DayTail(data.index(b"### 09:10:00"), 5, True)
    more, _ = documents.warm_day(data[tail.offset :] + entry("09:20:00", "c").encode(), TODAY.isoformat(), tail)
    assert [(d.heading, d.line_start) for d in more] == [("b", 5), ("c", 8)]


def test_hot_items_without_ids_are_located_by_their_text_in_order() -> None:
    doc = {"notes": [{"text": "same"}, {"text": "same"}, {"text": "other"}]}
    raw = json.dumps(doc, indent=2)
    lines = [d.line_start for d in documents.hot(doc, raw)]
    assert lines == [4, 7, 10]
    assert [raw.split("\n")[n - 1].strip() for n in lines] == ['"text": "same"', '"text": "same"', '"text": "other"']


_PIECES = [
    "### 09:00:00 - deploy\n",
    "### 09:00:01 -\n",
    "### 09:00:02 - crlf\r\n",
    "### 9:00:00 - not an entry\n",
    "# Activity Log 2026-03-10 (UTC+01:00, Europe/Paris)\n",
    "# Activity Log 2026-03-10\n",
    "```\n",
    "key: value\n",
    "    continued\n",
    "Result: ok\n",
    "prose line\n",
    "\n",
    "\ufeff",
    "### 10:00:00 - café ☕\n",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30), st.integers(min_value=0, max_value=2000))
@example(  # found by this test in CI: a byte-order mark before a zoned day heading
    ["\ufeff", "# Activity Log 2026-03-10 (UTC+01:00, Europe/Paris)\n", "### 09:00:00 - deploy\n", "    continued\n"], 0
)
def test_entries_are_those_the_warm_parser_reads_and_an_append_reads_the_same(pieces: list[str], cut: int) -> None:
    data = "".join(pieces).encode()
    whole, _ = documents.warm_day(data, "2026-03-10")
    expected = warm_format.parse_day(data.decode())
    assert [(d.time, d.heading) for d in whole] == [(e.time, e.action) for e in expected]

    cut = min(cut, len(data))
    _, tail = documents.warm_day(data[:cut], "2026-03-10")
    resumed, _ = documents.warm_day(data[tail.offset :], "2026-03-10", tail)
    before = [d for d in whole if d.line_start < tail.line]
    assert before + resumed == whole


# --- queries that would hold the connection -------------------------------------------------------------------------


def test_a_phrase_repeating_what_the_text_repeats_is_stopped_with_a_clear_error_and_the_next_query_runs(
    store: Store, tmp_path: Path
) -> None:
    """FTS5 matches a phrase position by position, so a run of one letter searched in a longer run costs their
    product (the fuzz suite found a 2,049-character topic holding the query thread for minutes and 16 GB). The
    query is stopped at its deadline, the error says what to do, and the connection answers the next query."""
    root = tmp_path / "alpha"
    src = source(root)
    (root / "cold" / "MEMORY.md").write_text(
        "# Agent Memory\n\n## Notes\n- [2026-03-01] " + "y" * 100_000 + "\n- [2026-03-02] fuzz learning\n",
        encoding="utf-8",
    )
    indexer.sync(store, src, ALL_TIERS, lambda: False)
    with pytest.raises(InvalidParams, match=r"stopped after 0\.2 s: .*search for fewer, shorter or more distinctive"):
        store.searcher.search(q.parse("y" * 1500), filters(), 20, seconds=0.2)
    with pytest.raises(InvalidParams, match="stopped after"):
        store.searcher.search(
            q.any_of("fuzz " + "y" * 1500), filters(), 1000, seconds=0.2
        )  # context.get's topic ranking
    assert [h["snippet"] for h in search(store, "fuzz")] == ["«fuzz» learning"]
    assert not store.conn.in_transaction
    assert len(search(store, "y" * 20)) == 1  # a shorter run is answered in time: the deadline is per query
