"""Specification of the incremental warm parse (warm_format.parse_day_bytes, WarmStore's parsed entries): whatever
happened to a day file, memd's own appends, another tool's `>>` appends, a partial last line, a rewrite, a
truncation or a new day, the entries memd serves are exactly what parsing the whole file again gives."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from clocks import START, FixedClock
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.config import WorkspaceConfig
from memd.context import build_context, load_recent, recent_page
from memd.tiers import flush_identities, warm_format, warm_parse, warm_store
from memd.tiers.warm_format import Resume, WarmEntry, day_header, parse_day, parse_day_bytes, render_entry
from memd.tokens import TokenCounter
from memd.workspace import Workspace

ZONE = "UTC+00:00, UTC"


def grow(whole: bytes, cuts: list[int], current: bool = False) -> list[WarmEntry]:
    """Parse `whole` as a file that grew to each cut in turn (then to its end), incrementally."""
    entries: list[WarmEntry] = []
    resume: Resume | None = None
    for size in [*sorted(cuts), len(whole)]:
        start = 0 if resume is None else resume.offset
        parsed, new = parse_day_bytes(whole[start:size], resume, current)
        entries = entries[: 0 if resume is None else resume.entries] + parsed
        resume = new
    return entries


# --- the pure incremental parse ---------------------------------------------------------------------------------

PIECES = [
    "### 09:00:00 - deploy\n",
    "### 09:00:0",
    "1 - half a heading\n",
    "```\nkey: value\n",
    "    next line\n",
    "```\n",
    "Result: ok\n",
    "\n",
    "\r\n",
    "# Activity Log 2024-03-15 (UTC+00:00, UTC)\n",
    "# Activity Log 2024-03-15\n",
    "free text é ✓\n",
    "\\ escaped\n",
    "### 10:00:00 -",
    " trailing\n",
    "````\n",
    "\ufeff",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
    st.booleans(),
)
def test_a_file_parsed_as_it_grew_reads_as_the_whole_file(text: str, cuts: list[int], current: bool) -> None:
    whole = text.encode()
    cuts = [c % (len(whole) + 1) for c in cuts]  # anywhere: inside a line, a heading, even a character

    assert grow(whole, cuts, current) == parse_day(text, current)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=12), st.lists(st.integers(min_value=0, max_value=500), max_size=6))
def test_any_bytes_parsed_as_they_grew_read_as_the_whole_file(chunks: list[bytes], cuts: list[int]) -> None:
    whole = b"### 09:00:00 - a\n".join(chunks)
    cuts = [c % (len(whole) + 1) for c in cuts]

    assert grow(whole, cuts) == parse_day(whole.decode("utf-8", "replace"))


FLUSHABLE = [  # entries whose flush identity a checkpoint looks up (flush_identities.flush_identity)
    render_entry(WarmEntry("09:00:02", "decision: use pathlib", (("reason", "portable"),))),
    render_entry(WarmEntry("09:00:03", flush_identities.FLUSHED_NOTE, (("id", "n1"), ("ts", "t"), ("text", "kept")))),
    render_entry(WarmEntry("09:00:04", "decision: two\nlines\u2028", (("reason", "a\\b"),))),
    "### 09:00:05 - not a decision: really\n",
    "reason: a decision: in a detail\n",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES + FLUSHABLE), max_size=40).map("".join),
    st.booleans(),
    st.integers(min_value=1, max_value=6),
)
def test_a_parse_of_the_newest_entries_only_reads_them_as_the_whole_file_and_the_head_keeps_their_identities(
    text: str, current: bool, window: int
) -> None:
    """A big day's first parse starts at its window_start: the entries from there, where the parse goes on, and
    the flush identities of the entries before (head_identities) are what a parse of the whole file gives."""
    whole = text.encode()
    entries, resume = parse_day_bytes(whole, None, current)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(warm_parse, "DAY_WINDOW", window)
        start = warm_parse.window_start(whole, current)
        if start is None:  # no more entries than the window (and one whose heading line is not complete yet)
            assert len(entries) <= window + 1
            return
        newest, after = parse_day_bytes(whole[start.offset :], start, current)
        head = warm_parse.head_identities(whole[: start.offset], current)

    assert len(newest) in (window, window + 1)  # and an entry whose heading line is not complete yet
    assert entries[start.entries :] == newest and after == resume
    identities = [flush_identities.flush_identity(e.action, dict(e.details)) for e in entries[: start.entries]]
    assert head == [i for i in identities if i is not None]


def test_the_part_parsed_again_starts_at_the_last_entry_whose_heading_line_is_complete() -> None:
    first = render_entry(WarmEntry("09:00:00", "one"))
    second = render_entry(WarmEntry("09:01:00", "two"))
    data = (day_header(date(2024, 3, 15), ZONE) + first + second + "### 09:02:00 - thr").encode()

    entries, resume = parse_day_bytes(data)

    assert [e.action for e in entries] == ["one", "two", "thr"]
    assert data[resume.offset :].startswith(b"### 09:01:00 - two")  # the partial heading may yet not be one
    assert (resume.entries, resume.current, resume.at_end) == (1, True, True)


# --- the store: every kind of change ------------------------------------------------------------------------------


@pytest.fixture
def ws(tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor) -> Workspace:
    workspace = Workspace(WorkspaceConfig("alpha", tmp_path / "alpha"), counter, FixedClock(START), io)
    workspace.open()
    return workspace


def log(ws: Workspace, *actions: str) -> None:
    async def go() -> None:
        await asyncio.gather(*(ws.write(lambda d, a=a: d.log(a, (("n", a),), "ok")) for a in actions))

    asyncio.run(go())


def day_path(ws: Workspace, day: date | None = None) -> Path:
    return ws.warm.path_for(day or ws.today())


def append_outside(ws: Workspace, text: str, day: date | None = None) -> None:
    with open(day_path(ws, day), "a", encoding="utf-8") as f:  # what `echo ... >> warm/DAY.md` does
        f.write(text)


def served(ws: Workspace, day: date) -> list[WarmEntry]:
    ws.refresh()  # what a read does first
    return ws.warm.entries_for(day)


def on_disk(ws: Workspace, day: date) -> list[WarmEntry]:
    path = day_path(ws, day)
    return parse_day(path.read_bytes().decode("utf-8", "replace")) if path.exists() else []


def rewrite(ws: Workspace, change: Callable[[bytes], bytes], replace: bool) -> None:
    path = day_path(ws)
    data = change(path.read_bytes())
    if replace:  # an editor's save: a new inode
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    else:  # in place (`cat new > file`, truncate): the same inode
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(data)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a later mtime, however coarse the clock


STEPS: dict[str, Callable[[Workspace, random.Random], None]] = {
    "memd logs": lambda ws, rng: log(ws, *(f"memd {rng.random():.6f}" for _ in range(rng.randint(1, 3)))),
    "outside >> an entry": lambda ws, rng: append_outside(ws, render_entry(WarmEntry("11:00:00", "outside"))),
    "outside >> half a line": lambda ws, rng: append_outside(ws, "### 11:30:00 - ha"),
    "outside >> the rest": lambda ws, rng: append_outside(ws, "lf done\nResult: finished\n"),
    "outside >> a result line": lambda ws, rng: append_outside(ws, "Result: added later\n"),
    "outside rewrite": lambda ws, rng: rewrite(ws, lambda b: b.replace(b"memd", b"edit", 1), replace=True),
    "outside rewrite in place, longer": lambda ws, rng: rewrite(
        ws, lambda b: b.replace(b"- ", b"- edited ", 1) + b"### 12:00:00 - x\n", replace=False
    ),
    "outside truncate": lambda ws, rng: rewrite(ws, lambda b: b[: len(b) * 2 // 3], replace=False),
    "a new day": lambda ws, rng: setattr(ws.clock, "current", ws.clock.now() + timedelta(days=1)),
}


@pytest.mark.parametrize("seed", range(12))
def test_served_entries_equal_a_full_parse_after_any_sequence_of_changes(ws: Workspace, seed: int) -> None:
    rng = random.Random(seed)
    log(ws, "first")
    names = list(STEPS)
    for _ in range(40):
        step = rng.choice(names)
        if step != "a new day" and not day_path(ws).exists():
            log(ws, "first of the day")
        STEPS[step](ws, rng)
        if rng.random() < 0.7:  # reads now and then: the parse has more or less to catch up on
            for day in ws.warm.recent_days(ws.today(), 3):
                assert served(ws, day) == on_disk(ws, day), (seed, step)
    for day in ws.warm.recent_days(ws.today(), 3):
        assert served(ws, day) == on_disk(ws, day), seed


@pytest.mark.parametrize("seed", range(8))
def test_a_day_keeps_only_its_newest_entries_parsed_and_every_one_can_still_be_read(
    ws: Workspace, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warm_parse, "DAY_WINDOW", 4)
    monkeypatch.setattr(warm_parse, "DAY_WINDOW_SLACK", 2)
    rng = random.Random(seed)
    log(ws, "first")
    names = [n for n in STEPS if n != "a new day"]
    for _ in range(60):
        if not day_path(ws).exists():
            log(ws, "first of the day")
        STEPS[rng.choice(names + ["memd logs"] * 4)](ws, rng)
        if rng.random() < 0.5:
            day = ws.today()
            kept, whole = served(ws, day), on_disk(ws, day)
            first = ws.warm.first_kept(day)
            assert len(kept) < 4 + 2 + 3  # the window, its slack, and one batch of memd's
            assert kept == whole[first:] and first + len(kept) == len(whole), seed
            assert asyncio.run(ws.warm.load_all(day)) == whole
    served(ws, ws.today())
    assert ws.warm.first_kept(ws.today()) > 0  # the window was reached


def test_a_big_days_first_parse_reads_its_newest_entries_and_a_checkpoint_flush_still_finds_the_older_ones(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warm_parse, "DAY_WINDOW", 10)
    monkeypatch.setattr(warm_parse, "NEWEST_ONLY_FROM_BYTES", 1000)
    decision = render_entry(WarmEntry("08:00:00", "decision: use pathlib", (("reason", "portable"),)))
    others = "".join(render_entry(WarmEntry(f"08:{i // 60:02d}:{i % 60:02d}", f"step {i}")) for i in range(1, 200))
    day_path(ws).write_text(day_header(ws.today(), ZONE) + decision + others, encoding="utf-8")
    parsed: list[tuple[int, int]] = []
    parse = warm_parse.parse

    def spied(*args: Any) -> warm_parse.Result:
        result = parse(*args)
        parsed.append((args[3].start, len(result.entries)))
        return result

    monkeypatch.setattr(warm_parse, "parse", spied)

    kept = served(ws, ws.today())

    assert parsed == [(0, 10)]  # from the start of the file, but only the newest ten read
    assert kept == on_disk(ws, ws.today())[190:] and ws.warm.first_kept(ws.today()) == 190
    assert asyncio.run(ws.warm.load_all(ws.today())) == on_disk(ws, ws.today())  # a page that reaches back
    identity = flush_identities.flush_identity("decision: use pathlib", {"reason": "portable"})
    assert identity not in ws.warm.let_go_identities(ws.today())  # not read yet
    asyncio.run(ws.warm.complete_let_go(ws.today()))  # what a checkpoint's flush does first
    assert identity in ws.warm.let_go_identities(ws.today())
    log(ws, "after")
    assert served(ws, ws.today()) == on_disk(ws, ws.today())[190:]


@pytest.fixture
def sixty_entries(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """Today with 60 entries, of which a window of 10 (and a slack of 5) stays parsed."""
    monkeypatch.setattr(warm_parse, "DAY_WINDOW", 10)
    monkeypatch.setattr(warm_parse, "DAY_WINDOW_SLACK", 5)
    log(ws, "entry 0")
    served(ws, ws.today())  # parsed once: memd's appends extend it from then on
    for i in range(1, 60):
        log(ws, f"entry {i}")
    assert ws.warm.first_kept(ws.today()) > 0
    return ws


def test_paging_through_a_day_returns_every_entry_once_across_what_was_let_go(sixty_entries: Workspace) -> None:
    ws = sixty_entries

    async def every_page() -> list[str]:
        actions: list[str] = []
        position = None
        while True:
            page, position = await recent_page(ws, 1, 7, position)
            actions[:0] = [e.action for _, entries in page for e in entries]
            if position is None:
                return actions

    assert asyncio.run(every_page()) == [f"entry {i}" for i in range(60)]


def test_context_counts_the_entries_let_go_as_omitted_and_all_includes_them(sixty_entries: Workspace) -> None:
    ws = sixty_entries

    async def context(everything: bool) -> dict[str, Any]:
        recent = await load_recent(ws, 1, everything)
        return build_context(ws, None, everything=everything, recent=recent)

    some = asyncio.run(context(False))
    assert some["included"]["warm"] + some["omitted"]["warm"] == 60
    every = asyncio.run(context(True))
    assert every["included"]["warm"] == 60 and every["omitted"]["warm"] == 0


def test_memds_own_append_is_taken_from_what_it_wrote_without_reading_the_file(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    log(ws, "one")
    assert served(ws, ws.today())[-1].action == "one"
    reads: list[Any] = []
    original = warm_store.read_tier_file
    for module in (warm_store, warm_parse):  # its count and its parse
        monkeypatch.setattr(module, "read_tier_file", lambda *a: reads.append(a) or original(*a))

    log(ws, "two", "three")

    assert [e.action for e in served(ws, ws.today())] == ["one", "two", "three"]
    assert reads == []


def test_an_outside_append_is_read_from_the_last_entry_on_not_from_the_start(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    log(ws, *(f"entry {i}" for i in range(50)))
    served(ws, ws.today())
    offsets: list[int] = []
    original = warm_store.read_tier_file
    for module in (warm_store, warm_parse):  # its count and its parse
        monkeypatch.setattr(module, "read_tier_file", lambda p, m, o=0: offsets.append(o) or original(p, m, o))

    append_outside(ws, render_entry(WarmEntry("11:00:00", "from a shell")))

    assert served(ws, ws.today())[-1].action == "from a shell"
    assert offsets and min(offsets) > day_path(ws).stat().st_size // 2  # its count and its parse


@pytest.mark.parametrize("replace", [True, False])
def test_an_outside_edit_drops_what_was_parsed(ws: Workspace, replace: bool) -> None:
    log(ws, "kept", "changed by a person")
    assert [e.action for e in served(ws, ws.today())] == ["kept", "changed by a person"]

    rewrite(ws, lambda b: b.replace(b"changed by a person", b"what the person wrote"), replace=replace)

    assert [e.action for e in served(ws, ws.today())] == ["kept", "what the person wrote"]


# --- off the event loop ---------------------------------------------------------------------------------------------


def big_day(ws: Workspace, entries: int = 2000) -> None:
    parts = [day_header(ws.today(), ZONE)]
    parts += [render_entry(WarmEntry("09:00:00", f"entry {i}", (("k", "v" * 20),), "ok")) for i in range(entries)]
    day_path(ws).write_text("".join(parts), encoding="utf-8")
    assert day_path(ws).stat().st_size > warm_store.INLINE_PARSE_BYTES
    ws.refresh()


def test_a_big_parse_runs_in_a_worker_thread_and_readers_of_the_day_share_it(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    big_day(ws)
    threads: list[threading.Thread] = []
    original = warm_format.parse_day_bytes
    monkeypatch.setattr(
        warm_format, "parse_day_bytes", lambda *a: threads.append(threading.current_thread()) or original(*a)
    )

    async def two_readers() -> list[list[WarmEntry]]:
        return list(await asyncio.gather(ws.warm.load(ws.today()), ws.warm.load(ws.today())))

    first, second = asyncio.run(two_readers())

    assert first == second == on_disk(ws, ws.today())
    assert len(threads) == 1 and threads[0] is not threading.main_thread()


def test_a_small_catch_up_is_parsed_on_the_loop(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    log(ws, "one")
    served(ws, ws.today())
    append_outside(ws, render_entry(WarmEntry("11:00:00", "two")))
    ws.refresh()
    threads: list[threading.Thread] = []
    original = warm_format.parse_day_bytes
    monkeypatch.setattr(
        warm_format, "parse_day_bytes", lambda *a: threads.append(threading.current_thread()) or original(*a)
    )

    entries = asyncio.run(ws.warm.load(ws.today()))

    assert [e.action for e in entries] == ["one", "two"]
    assert threads == [threading.main_thread()]


def blocked_parse(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Make the next parse in a worker thread wait: (started, release)."""
    started, release = threading.Event(), threading.Event()
    original = warm_format.parse_day_bytes

    def parse(*args: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            started.set()
            release.wait(10)
        return original(*args)

    monkeypatch.setattr(warm_format, "parse_day_bytes", parse)
    return started, release


async def when(event: threading.Event) -> None:
    while not event.is_set():
        await asyncio.sleep(0.005)


def test_a_write_acknowledged_while_a_big_parse_runs_is_in_what_the_read_returns(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    big_day(ws)
    started, release = blocked_parse(monkeypatch)

    async def go() -> list[WarmEntry]:
        reading = asyncio.ensure_future(ws.warm.load(ws.today()))
        await when(started)
        await ws.write(lambda d: d.log("written meanwhile"))  # the loop is free: the writer goes on
        release.set()
        return await reading

    entries = asyncio.run(go())

    assert entries[-1].action == "written meanwhile"
    assert entries == on_disk(ws, ws.today())


def test_a_parse_overtaken_by_an_outside_edit_is_not_taken(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    big_day(ws)
    started, release = blocked_parse(monkeypatch)

    async def go() -> list[WarmEntry]:
        reading = asyncio.ensure_future(ws.warm.load(ws.today()))
        await when(started)
        rewrite(ws, lambda b: b[: b.index(b"### 09:00:00 - entry 3\n")], replace=True)
        ws.refresh()
        release.set()
        return await reading

    entries = asyncio.run(go())

    assert [e.action for e in entries] == ["entry 0", "entry 1", "entry 2"]


def test_parsed_days_are_dropped_oldest_first_past_the_bound(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    days = []
    for _ in range(3):
        log(ws, "an entry of the day")
        days.append(ws.today())
        ws.clock.current = ws.clock.now() + timedelta(days=1)  # type: ignore[attr-defined]
    ws.refresh()
    size = day_path(ws, days[0]).stat().st_size
    monkeypatch.setattr(warm_store, "PARSED_MAX_BYTES", 2 * size)

    for day in days:
        asyncio.run(ws.warm.load(day))

    assert [ws.warm.days[d].parsed is not None for d in days] == [False, True, True]
    assert served(ws, days[0]) == on_disk(ws, days[0])  # parsed again when read


def test_a_worker_parse_overtaken_by_a_parse_on_the_loop_is_not_taken_twice(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    log(ws, "before")
    served(ws, ws.today())
    append_outside(
        ws, "".join(render_entry(WarmEntry("10:00:00", f"outside {i}", (("k", "v" * 40),))) for i in range(400))
    )
    ws.refresh()
    started, release = blocked_parse(monkeypatch)

    async def go() -> list[WarmEntry]:
        reading = asyncio.ensure_future(ws.warm.load(ws.today()))
        await when(started)
        ws.warm.entries_for(ws.today())  # a synchronous reader catches up first, on the loop
        release.set()
        return await reading

    entries = asyncio.run(go())

    assert entries == on_disk(ws, ws.today())
    assert len(entries) == 401


def test_an_entrys_flush_identity_is_made_once_and_is_not_part_of_its_value() -> None:
    entry = WarmEntry("09:00:00", "decision: use pathlib", (("reason", "portable"),))
    twin = WarmEntry("09:00:00", "decision: use pathlib", (("reason", "portable"),))
    identity = flush_identities.entry_flush_identity(entry)
    assert identity == flush_identities.flush_identity("decision: use pathlib", {"reason": "portable"})
    assert flush_identities.entry_flush_identity(entry) is identity  # kept with the entry, not made again
    assert entry == twin and hash(entry) == hash(twin) and repr(entry) == repr(twin)  # the twin has none yet
    other = WarmEntry("09:00:01", "ran the tests")
    assert flush_identities.entry_flush_identity(other) is None
    assert flush_identities.entry_flush_identity(other) is None  # nothing to digest, remembered as such
