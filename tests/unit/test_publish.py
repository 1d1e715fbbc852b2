"""Specification of contract 2 at publish time: a person's save that lands between planning a batch and
publishing it is never replaced (memd.fsio's guarded replace, the writer's re-plan), and a workspace whose
directory was swapped for another is never written, read or swept."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from clocks import START
from edits import note
from hooked_io import HookedIO
from hot_files import context_file, own_file, read_hot

from memd import fsio, fsio_batch, sweep
from memd.batch import Draft
from memd.errors import CorruptFile, StorageError
from memd.handlers import proposals as proposals_handlers
from memd.tiers import hot_format, proposals_format, warm_format
from memd.workspace import Workspace


@pytest.fixture(params=["renameat2", "compare-then-rename"])
def publish_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Both ways of publishing: RENAME_EXCHANGE, and the fallback for filesystems without it."""
    if request.param == "compare-then-rename":
        monkeypatch.setattr(fsio.RENAMES, "supported", False)
    else:
        assert fsio.RENAMES.supported, "this machine's kernel and filesystem support renameat2(RENAME_EXCHANGE)"
    yield request.param


def temps(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if fsio.is_temp_name(p.name)]


# --- fsio: the guarded replace ----------------------------------------------------------------------------------


def test_a_guarded_replace_over_the_planned_bytes_is_published(tmp_path: Path, publish_mode: str) -> None:
    target = tmp_path / "context.json"
    target.write_bytes(b"planned-from")

    fsio_batch.apply_writes(
        [fsio_batch.FileWrite(target, b"new", append=False, guarded=True, expected=b"planned-from")]
    )

    assert target.read_bytes() == b"new"
    assert temps(tmp_path) == []


def test_a_rename_over_save_after_planning_is_kept_and_reported(tmp_path: Path, publish_mode: str) -> None:
    target = tmp_path / "context.json"
    target.write_bytes(b"planned-from")
    saved = tmp_path / "editor-tmp"
    saved.write_bytes(b"the person's save")
    os.replace(saved, target)  # what editors do, between memd's planning and its publishing

    with pytest.raises(fsio_batch.OutsideChange):
        fsio_batch.apply_writes(
            [fsio_batch.FileWrite(target, b"memd's", append=False, guarded=True, expected=b"planned-from")]
        )

    assert target.read_bytes() == b"the person's save"
    assert temps(tmp_path) == []


def test_an_in_place_append_of_the_same_size_class_is_seen_by_content_not_by_metadata(
    tmp_path: Path, publish_mode: str
) -> None:
    target = tmp_path / "MEMORY.md"
    target.write_bytes(b"# Agent Memory\n")
    before = os.stat(target)
    with target.open("r+b") as f:  # same inode, same size, same coarse mtime tick: only the bytes differ
        f.write(b"# Agent Memorx\n")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))

    with pytest.raises(fsio_batch.OutsideChange):
        fsio_batch.apply_writes(
            [fsio_batch.FileWrite(target, b"x", append=False, guarded=True, expected=b"# Agent Memory\n")]
        )

    assert target.read_bytes() == b"# Agent Memorx\n"


def test_a_writer_that_opened_the_file_before_the_publish_keeps_its_late_write(tmp_path: Path) -> None:
    target = tmp_path / "MEMORY.md"
    target.write_bytes(b"planned-from")
    fd = os.open(target, os.O_WRONLY | os.O_APPEND)  # `echo ... >> MEMORY.md` has opened the file, not yet written
    try:
        with pytest.raises(fsio_batch.OutsideChange) as caught:
            fsio_batch.apply_writes(
                [fsio_batch.FileWrite(target, b"memd's", append=False, guarded=True, expected=b"planned-from")]
            )
        os.write(fd, b" + written late")
    finally:
        os.close(fd)

    assert caught.value.busy
    assert target.read_bytes() == b"planned-from + written late"  # the write landed in the file, not in a temp
    assert temps(tmp_path) == []


def test_appends_on_both_sides_of_a_withdrawn_publish_are_all_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "MEMORY.md"
    target.write_bytes(b"# M\n")
    real_check = fsio_batch._held_open_for_writing
    injected: list[Path] = []

    def person_at_the_exchange(path: Path) -> bool:
        if not injected:  # right after memd's exchange: one `>>` landed in the old file, the next in memd's
            injected.append(path)
            with path.open("ab") as old:
                old.write(b"- person 1\n")
            with target.open("ab") as new:
                new.write(b"- person 2\n")
        return real_check(path)

    monkeypatch.setattr(fsio_batch, "_held_open_for_writing", person_at_the_exchange)

    with pytest.raises(fsio_batch.OutsideChange):
        fsio_batch.apply_writes(
            [fsio_batch.FileWrite(target, b"# M\n- memd\n", append=False, guarded=True, expected=b"# M\n")]
        )

    assert target.read_bytes() == b"# M\n- person 1\n- person 2\n"  # memd's line comes with the re-plan
    assert temps(tmp_path) == []


def test_a_file_created_by_someone_else_after_planning_is_not_replaced(tmp_path: Path, publish_mode: str) -> None:
    target = tmp_path / "context.json"
    target.write_bytes(b"created meanwhile")

    with pytest.raises(fsio_batch.OutsideChange):
        fsio_batch.apply_writes([fsio_batch.FileWrite(target, b"memd's", append=False, guarded=True, expected=None)])

    assert target.read_bytes() == b"created meanwhile"


def test_a_file_deleted_after_planning_is_a_change_too(tmp_path: Path, publish_mode: str) -> None:
    target = tmp_path / "context.json"

    with pytest.raises(fsio_batch.OutsideChange):
        fsio_batch.apply_writes(
            [fsio_batch.FileWrite(target, b"memd's", append=False, guarded=True, expected=b"was here")]
        )

    assert not target.exists()
    assert temps(tmp_path) == []


def test_guarded_replaces_go_in_all_or_none(tmp_path: Path, publish_mode: str) -> None:
    cold, hot = tmp_path / "MEMORY.md", tmp_path / "context.json"
    cold.write_bytes(b"cold as planned")
    hot.write_bytes(b"hot edited by a person")
    writes = [
        fsio_batch.FileWrite(cold, b"cold by memd", append=False, guarded=True, expected=b"cold as planned"),
        fsio_batch.FileWrite(hot, b"hot by memd", append=False, guarded=True, expected=b"hot as planned"),
    ]

    with pytest.raises(fsio_batch.OutsideChange) as caught:
        fsio_batch.apply_writes(writes)

    assert caught.value.path == hot
    assert cold.read_bytes() == b"cold as planned"  # published, then put back
    assert hot.read_bytes() == b"hot edited by a person"
    assert temps(tmp_path) == []


def test_a_failed_append_puts_the_batchs_replaces_back(tmp_path: Path, publish_mode: str) -> None:
    hot = tmp_path / "context.json"
    hot.write_bytes(b"before")
    log = tmp_path / "day.md"
    log.mkdir()  # an append to a directory fails after the replace was published

    with pytest.raises(OSError):
        fsio_batch.apply_writes(
            [
                fsio_batch.FileWrite(hot, b"after", append=False, guarded=True, expected=b"before"),
                fsio_batch.FileWrite(log, b"entry\n", append=True),
            ]
        )

    assert hot.read_bytes() == b"before"
    assert temps(tmp_path) == []


def test_an_append_after_someone_left_the_last_line_open_starts_on_a_new_line(tmp_path: Path) -> None:
    day = tmp_path / "2024-03-15.md"
    day.write_bytes(b"# day\n")
    planned = day.stat().st_size
    with day.open("ab") as f:
        f.write(b"a person's line without a newline")

    fsio_batch.apply_writes([fsio_batch.FileWrite(day, b"### 10:00:00 - memd\n", append=True, expected_size=planned)])

    assert day.read_bytes() == b"# day\na person's line without a newline\n### 10:00:00 - memd\n"


# --- the writer: plan again on the person's version -------------------------------------------------------------


@pytest.fixture
def person_io() -> Iterator[HookedIO]:
    executor = HookedIO()
    yield executor
    executor.shutdown()


@pytest.fixture
def ws(open_alpha: Callable[..., Workspace], person_io: HookedIO) -> Workspace:
    return open_alpha(person_io)


def decide(action: str, reason: str) -> Callable[[Draft], Any]:
    def edit(draft: Draft) -> dict[str, Any]:
        return draft.add_decision(action, reason, None)

    return edit


def write(ws: Workspace, *edits: Callable[[Draft], Any]) -> list[Any]:
    async def go() -> list[Any]:
        return list(await asyncio.gather(*(ws.write(e) for e in edits), return_exceptions=True))

    return asyncio.run(go())


def rename_over(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".swp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def test_a_hot_save_between_planning_and_publishing_survives_with_the_agents_note(
    ws: Workspace, person_io: HookedIO, publish_mode: str
) -> None:
    write(ws, note("first"))
    own = own_file(ws.root)  # the notes' file
    person = {**json.loads(own.read_bytes()), "owner": "kim"}
    person["notes"][0]["text"] = "first, corrected by a person"
    person_io.edits.append(lambda: rename_over(own, json.dumps(person).encode()))

    results = write(ws, note("second"))

    assert not isinstance(results[0], BaseException)
    on_disk = json.loads(own.read_bytes())
    assert on_disk["owner"] == "kim"
    assert [n["text"] for n in on_disk["notes"]] == ["first, corrected by a person", "second"]
    assert ws.hot.doc == read_hot(ws.root)
    assert ws.health.replans == 1


def test_a_context_json_save_between_planning_and_publishing_survives_with_the_agents_decision(
    ws: Workspace, person_io: HookedIO, publish_mode: str
) -> None:
    write(ws, note("first"))
    hot = context_file(ws.root)  # the session's file: task, step, decisions
    person = {**json.loads(hot.read_bytes()), "task": "set by a person", "owner": "kim"}
    person_io.edits.append(lambda: rename_over(hot, json.dumps(person).encode()))

    results = write(ws, decide("ship", "tests pass"), note("second"))

    assert not isinstance(results[0], BaseException)
    on_disk = json.loads(hot.read_bytes())
    assert (on_disk["task"], on_disk["owner"]) == ("set by a person", "kim")
    assert [d["action"] for d in on_disk["decisions"]] == ["ship"]
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == ["first", "second"]
    assert ws.hot.doc == read_hot(ws.root)
    assert ws.health.replans == 1


def person_builds_on_memds_withdrawn_publish(
    monkeypatch: pytest.MonkeyPatch, target: Path, edit: Callable[[bytes], bytes]
) -> list[Path]:
    """What the person torture did (round 1, "in-place write orphaned by a concurrent replace (redone)"): a person
    opened `target` before memd's exchange and rewrote it in place after, so their bytes went to the file memd's
    exchange displaced; memd sees it changed and withdraws its publish. Their redo, meanwhile, read memd's new
    version, still in place, and rewrote it in place with their edit: memd cannot put its displaced file back
    over that, and plans again on the person's file, which holds memd's batch already."""
    real_check = fsio_batch._held_open_for_writing
    seen: list[Path] = []

    def person(path: Path) -> bool:
        if not seen and path.name.startswith(f".{target.name}"):  # memd checks the file its exchange displaced
            seen.append(path)
            with path.open("ab") as displaced:  # the orphaned write
                displaced.write(b"\n")
            data = edit(target.read_bytes())  # the redo, on memd's version
            with target.open("r+b") as f:
                f.truncate(0)
                f.write(data)
        return real_check(path)

    monkeypatch.setattr(fsio_batch, "_held_open_for_writing", person)
    return seen


def with_owner(data: bytes) -> bytes:
    return json.dumps({**json.loads(data), "owner": "kim"}, indent=2).encode()


def test_a_decision_a_person_saved_on_top_of_memds_withdrawn_publish_is_not_added_twice(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(ws, decide("first", "r"))
    hot = context_file(ws.root)
    seen = person_builds_on_memds_withdrawn_publish(monkeypatch, hot, with_owner)

    results = write(ws, decide("second", "r"))

    assert seen and ws.health.replans == 1  # the race took place
    on_disk = json.loads(hot.read_bytes())
    assert on_disk["owner"] == "kim"
    assert [d["action"] for d in on_disk["decisions"]] == ["first", "second"]
    assert on_disk["decisions"][1] == results[0]  # the decision acknowledged is the one in the file
    assert ws.hot.doc == read_hot(ws.root)


def test_a_note_a_person_saved_on_top_of_memds_withdrawn_publish_is_not_added_twice(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(ws, note("first"))
    own = own_file(ws.root)
    seen = person_builds_on_memds_withdrawn_publish(monkeypatch, own, with_owner)

    results = write(ws, note("second"), lambda d: d.log("noted"))

    assert seen and ws.health.replans == 1
    on_disk = json.loads(own.read_bytes())
    assert on_disk["owner"] == "kim"
    assert [n["text"] for n in on_disk["notes"]] == ["first", "second"]
    assert on_disk["notes"][1] == results[0]
    day = next((ws.root / "warm").glob("*.md")).read_text(encoding="utf-8")
    assert day.count("noted") == 1  # the batch's append is made once, after the re-plan


def test_a_learning_a_person_saved_on_top_of_memds_withdrawn_publish_is_not_added_twice(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(ws, lambda d: d.learn("Testing", "memd's first"))
    memory = ws.root / "cold" / "MEMORY.md"
    theirs = b"## Testing\n- [2024-03-15] theirs\n"  # a line of their own on top of the section: not an append
    seen = person_builds_on_memds_withdrawn_publish(
        monkeypatch, memory, lambda data: data.replace(b"## Testing\n", theirs, 1)
    )

    write(ws, lambda d: d.learn("Testing", "memd's second"))

    assert seen and ws.health.replans == 1
    text = memory.read_text(encoding="utf-8")
    assert text.count("memd's second") == 1, text
    assert [lr.text for lr in ws.cold.learnings] == ["theirs", "memd's second", "memd's first"]


def test_a_re_plan_of_a_batch_that_learns_one_line_twice_still_writes_it_twice(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two requests of one batch, the same learning: the copy the person's save holds is one of them, not both."""
    write(ws, lambda d: d.learn("Testing", "memd's first"))
    memory = ws.root / "cold" / "MEMORY.md"
    theirs = b"## Testing\n- [2024-03-15] theirs\n"
    seen = person_builds_on_memds_withdrawn_publish(
        monkeypatch, memory, lambda data: data.replace(b"## Testing\n", theirs, 1)
    )

    write(ws, lambda d: d.learn("Testing", "twice"), lambda d: d.learn("Testing", "twice"))

    assert seen and ws.health.replans == 1
    assert memory.read_text(encoding="utf-8").count("] twice\n") == 2


def test_a_re_plan_on_a_save_made_before_memds_publish_writes_a_learning_learned_twice_twice(
    ws: Workspace, person_io: HookedIO
) -> None:
    """The re-plan finds none of its copies in the person's file: both requests add theirs."""
    write(ws, lambda d: d.learn("Testing", "memd's first"))
    memory = ws.root / "cold" / "MEMORY.md"
    saved = memory.read_bytes().replace(b"## Testing\n", b"## Testing\n- [2024-03-15] theirs\n", 1)
    person_io.edits.append(lambda: rename_over(memory, saved))

    write(ws, lambda d: d.learn("Testing", "twice"), lambda d: d.learn("Testing", "twice"))

    assert ws.health.replans == 1
    text = memory.read_text(encoding="utf-8")
    assert text.count("] twice\n") == 2 and "theirs" in text


def test_an_accepted_proposal_a_person_saved_on_top_of_memds_withdrawn_publish_is_still_learned(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch publishes MEMORY.md (the learning) and PROPOSED.md (the proposal gone); the person's save on
    memd's PROPOSED.md stays, MEMORY.md is put back: the re-plan still learns it, from the proposal it took."""
    write(ws, propose("p-1", "cache the parse tree"), propose("p-2", "keep the lexer pure"))
    proposed = ws.root / "cold" / "PROPOSED.md"
    seen = person_builds_on_memds_withdrawn_publish(
        monkeypatch, proposed, lambda data: data.replace(b"# ", b"# (reviewed) ", 1)
    )

    results = write(ws, proposals_handlers.accepting("p-1"))

    assert seen and ws.health.replans == 1
    assert not isinstance(results[0], BaseException), results[0]
    assert [lr.text for lr in ws.cold.learnings] == ["cache the parse tree"]
    assert (ws.root / "cold" / "MEMORY.md").read_text(encoding="utf-8").count("cache the parse tree") == 1
    text = proposed.read_text(encoding="utf-8")
    assert "(reviewed)" in text and "keep the lexer pure" in text and "cache the parse tree" not in text


def test_a_learning_appended_with_shell_redirection_meanwhile_is_kept(
    ws: Workspace, person_io: HookedIO, publish_mode: str
) -> None:
    write(ws, lambda d: d.learn("Testing", "memd's first"))
    memory = ws.root / "cold" / "MEMORY.md"

    def append() -> None:
        with memory.open("a", encoding="utf-8") as f:
            f.write("- [2024-03-15] appended by a person\n")

    person_io.edits.append(append)

    write(ws, lambda d: d.learn("Testing", "memd's second"))

    text = memory.read_text(encoding="utf-8")
    for line in ("memd's first", "appended by a person", "memd's second"):
        assert text.count(line) == 1, text


def test_the_warm_append_of_a_replanned_batch_is_made_once(
    ws: Workspace, person_io: HookedIO, publish_mode: str
) -> None:
    write(ws, note("first"), lambda d: d.set_hot({**d.edit_hot(), "current_step": "first"}))
    hot = context_file(ws.root)
    person_io.edits.append(lambda: rename_over(hot, hot.read_bytes().replace(b'"first"', b'"first, edited"')))

    def decide(draft: Draft) -> None:
        draft.set_hot(hot_format.add_decision(draft.edit_hot(), "ship", "tests pass", None, draft.now)[0])
        draft.log("decision: ship")

    write(ws, decide)

    entries = warm_format.parse_day((ws.root / "warm" / "2024-03-15.md").read_text(encoding="utf-8"))
    assert [e.action for e in entries] == ["decision: ship"]
    doc = json.loads(hot.read_bytes())
    assert doc["current_step"] == "first, edited"
    assert [d["action"] for d in doc["decisions"]] == ["ship"]
    assert ws.health.replans == 1


def test_a_file_rewritten_before_every_attempt_fails_the_batch_with_a_clear_error(
    ws: Workspace, person_io: HookedIO
) -> None:
    write(ws, note("first"))
    hot = own_file(ws.root)  # where the notes are
    counter = iter(range(1000))

    class Always(list[Callable[[], None]]):
        def __bool__(self) -> bool:
            return True

    def churn() -> None:
        doc = json.loads(hot.read_bytes())
        rename_over(hot, json.dumps({**doc, "churn": next(counter)}).encode())

    person_io.submit = _always_before(person_io, churn)  # type: ignore[method-assign]

    results = write(ws, note("second"))

    assert isinstance(results[0], StorageError)
    assert "changed outside memd" in results[0].message
    assert "second" not in hot.read_text(encoding="utf-8")


def _always_before(executor: ThreadPoolExecutor, edit: Callable[[], None]) -> Callable[..., Future[Any]]:
    submit = ThreadPoolExecutor.submit

    def run_after_edit(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        def run() -> Any:
            edit()
            return fn(*args, **kwargs)

        return submit(executor, run)

    return run_after_edit


# --- the workspace directory is pinned ------------------------------------------------------------------------


def test_a_workspace_swapped_for_a_symlink_to_another_is_never_written_there(ws: Workspace, tmp_path: Path) -> None:
    write(ws, note("alpha's"))
    other = tmp_path / "bob"
    (other / "hot").mkdir(parents=True)
    (other / "hot" / "context.json").write_text('{"task": "bob\'s"}', encoding="utf-8")
    os.rename(ws.root, tmp_path / "alpha-moved-away")
    os.symlink(other, ws.root)

    results = write(ws, note("written after the swap"))

    assert isinstance(results[0], StorageError)
    assert "symlink" in results[0].message
    assert (other / "hot" / "context.json").read_text(encoding="utf-8") == '{"task": "bob\'s"}'
    assert sorted(p.name for p in other.iterdir()) == ["hot"]
    with pytest.raises(StorageError):
        ws.check_identity()
    assert ws.refresh() == set()
    assert ws.hot.doc["task"] != "bob's"
    assert "symlink" in ws.health.identity_error
    with pytest.raises(StorageError):
        asyncio.run(sweep.run(ws, dry_run=True))


def test_another_directory_moved_into_the_workspaces_place_is_refused(ws: Workspace, tmp_path: Path) -> None:
    write(ws, note("alpha's"))
    os.rename(ws.root, tmp_path / "alpha-moved-away")
    (ws.root / "hot").mkdir(parents=True)

    results = write(ws, note("after"))

    assert isinstance(results[0], StorageError)
    assert "no longer the directory memd opened" in results[0].message
    assert not (ws.root / "hot" / "context.json").exists()


def test_identity_holds_again_once_the_directory_is_back(ws: Workspace, tmp_path: Path) -> None:
    write(ws, note("alpha's"))
    os.rename(ws.root, tmp_path / "away")
    os.symlink(tmp_path / "away", ws.root)
    assert isinstance(write(ws, note("refused"))[0], StorageError)
    os.unlink(ws.root)
    os.rename(tmp_path / "away", ws.root)

    assert not isinstance(write(ws, note("accepted"))[0], BaseException)
    assert ws.health.identity_error == ""
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == ["alpha's", "accepted"]


def test_startup_recovery_removes_dead_writers_temp_files_but_not_this_processs_own(tmp_path: Path) -> None:
    stale = tmp_path / f".context.json{fsio.TEMP_MARKER}1-deadbeef"
    live = fsio.temp_name(tmp_path / "context.json")  # this process's: a batch in flight during a reload
    previous_run_same_pid = tmp_path / f".context.json{fsio.TEMP_MARKER}{os.getpid()}-abcdef-cafef00d"
    previous_run_same_pid.write_bytes(b"left by an earlier run that had this pid (pid 1 in a container)")
    stale.write_bytes(b"left by a crash")
    live.write_bytes(b"being published")

    removed = fsio.remove_stale_temp_files([tmp_path])

    assert sorted(removed) == sorted([stale, previous_run_same_pid])
    assert live.exists() and not stale.exists()


# --- the writer never hangs and never plans on a half-read store ------------------------------------------------


def test_a_re_plan_whose_re_read_fails_fails_the_batch_and_frees_the_writer(
    ws: Workspace, person_io: HookedIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(ws, note("first"))
    hot = ws.root / "hot" / "context.json"
    holder: list[int] = []
    person_io.edits.append(  # a writer holds the hot files open
        lambda: holder.extend(os.open(p, os.O_WRONLY | os.O_APPEND) for p in hot.parent.iterdir() if p.is_file())
    )

    def unreadable() -> None:
        raise NotADirectoryError(20, "Not a directory", str(hot))

    monkeypatch.setattr(ws.hot, "load", unreadable)
    try:
        results = write(ws, note("second"))
    finally:
        for fd in holder:
            os.close(fd)
    monkeypatch.undo()

    assert isinstance(results[0], StorageError)
    assert not isinstance(write(ws, note("third"))[0], BaseException)  # the writer was not left locked


def test_a_cancelled_adoption_keeps_the_writer_waiting_until_the_stores_are_whole(ws: Workspace) -> None:
    import threading
    import time

    memory = ws.root / "cold" / "MEMORY.md"
    write(ws, lambda d: d.learn("Notes", "memd's first"))
    with memory.open("a", encoding="utf-8") as f:
        f.write("- [2024-03-15] a person's correction\n")
    loading = threading.Event()
    real_load = ws.cold.load

    def slow_load() -> None:  # a big file: the worker is still reading when the adoption is cancelled
        loading.set()
        time.sleep(0.3)
        real_load()

    ws.cold.load = slow_load  # type: ignore[method-assign]

    async def go() -> Any:
        adoption = asyncio.ensure_future(ws.adopt())
        assert await asyncio.get_running_loop().run_in_executor(None, loading.wait, 30)
        adoption.cancel()
        learned = asyncio.ensure_future(ws.write(lambda d: d.learn("Notes", "memd's second")))
        with pytest.raises(asyncio.CancelledError):
            await adoption
        return await learned

    asyncio.run(go())

    text = memory.read_text(encoding="utf-8")
    assert "a person's correction" in text and "memd's second" in text and "memd's first" in text


def test_an_adoption_cancelled_twice_still_keeps_the_writer_until_its_worker_has_finished(ws: Workspace) -> None:
    import threading

    memory = ws.root / "cold" / "MEMORY.md"
    write(ws, lambda d: d.learn("Notes", "memd's first"))
    with memory.open("a", encoding="utf-8") as f:
        f.write("- [2024-03-15] a person's correction\n")
    loading, finish = threading.Event(), threading.Event()
    real_load = ws.cold.load

    def gated_load() -> None:  # the worker reads until the test lets it finish
        loading.set()
        finish.wait(30)
        real_load()

    ws.cold.load = gated_load  # type: ignore[method-assign]

    async def go() -> tuple[bool, bool]:
        adoption = asyncio.ensure_future(ws.adopt())
        assert await asyncio.get_running_loop().run_in_executor(None, loading.wait, 30)
        adoption.cancel()  # a job's timeout...
        for _ in range(3):
            await asyncio.sleep(0)
        adoption.cancel()  # ...then shutdown: cancelled again while it waits for the worker
        for _ in range(3):
            await asyncio.sleep(0)
        held, done = ws.exclusive.locked(), adoption.done()
        finish.set()
        with pytest.raises(asyncio.CancelledError):
            await adoption
        return held, done

    held, done = asyncio.run(go())

    assert (held, done) == (True, False)  # the worker still loads the stores: no batch may be planned on them
    assert not ws.exclusive.locked()
    assert "a person's correction" in memory.read_text(encoding="utf-8")


def test_a_request_that_failed_in_the_first_plan_is_not_run_again_and_the_rest_are_planned_again(
    ws: Workspace, person_io: HookedIO
) -> None:
    write(ws, note("first"))
    own = own_file(ws.root)
    person = json.loads(own.read_bytes())
    person["notes"][0]["text"] = "first, corrected by a person"
    person_io.edits.append(lambda: rename_over(own, json.dumps(person).encode()))
    runs = {"failing": 0}

    def failing(draft: Draft) -> None:
        runs["failing"] += 1
        raise CorruptFile("refused")

    results = write(ws, failing, note("second"), note("third"))

    assert isinstance(results[0], CorruptFile) and runs["failing"] == 1  # not run again in the re-plan
    assert not [r for r in results[1:] if isinstance(r, BaseException)]
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == ["first, corrected by a person", "second", "third"]
    assert ws.health.replans == 1


def in_place_keeping_the_stamp(path: Path, old: bytes, new: bytes) -> None:
    """Rewrite `path` in place with bytes of the same length and put its mtime back: its fingerprint (size,
    mtime, inode) stays what memd recorded, so only a comparison of the content can see the edit."""
    assert len(old) == len(new)
    st = path.stat()
    data = path.read_bytes()
    assert old in data
    with open(path, "r+b") as f:
        f.write(data.replace(old, new))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def propose(pid: str, text: str) -> Callable[[Draft], Any]:
    def edit(draft: Draft) -> None:
        p = proposals_format.Proposal(pid, "Ops", START.date().isoformat(), text, kind="notable")
        draft.proposals = proposals_format.insert(draft.edit_proposals(), p)

    return edit


@pytest.mark.parametrize("tier", ["hot", "cold", "proposals"])
def test_an_edit_the_fingerprint_cannot_see_is_read_again_once_the_publish_finds_it(
    ws: Workspace, person_io: HookedIO, tier: str
) -> None:
    if tier == "hot":
        write(ws, note("first note"))
        path, old, new, edit = own_file(ws.root), b"first note", b"FIRST NOTE", note("second")
    elif tier == "proposals":
        write(ws, propose("p-00000001", "first proposal"))
        path, old, new = ws.root / "cold" / "PROPOSED.md", b"first proposal", b"FIRST PROPOSAL"
        edit = propose("p-00000002", "second")
    else:
        write(ws, lambda d: d.learn("Ops", "first learning"))
        path, old, new = ws.root / "cold" / "MEMORY.md", b"first learning", b"FIRST LEARNING"
        edit = lambda d: d.learn("Ops", "second")  # noqa: E731
    person_io.edits.append(lambda: in_place_keeping_the_stamp(path, old, new))

    results = write(ws, edit)

    assert not isinstance(results[0], BaseException), results
    text = path.read_bytes()
    assert new in text and b"second" in text  # the person's edit kept, memd's added on top of it
    assert ws.health.replans == 1


def test_a_cancelled_sweep_keeps_the_writer_until_its_worker_has_removed_the_days(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep cut short (its job's timeout, shutdown) used to let the writer go while its worker was still
    deleting or archiving: a restore or a sync's publish let in then would rewrite files it was removing. The
    writer now waits for the worker's end, as a restore's rewrite does."""
    import threading
    import time

    from memd import retention

    for name in ("2024-01-01.md", "2024-01-02.md"):
        (ws.root / "warm" / name).write_text(f"# Activity Log {name[:10]}\n\n### 09:00:00 - old\n", encoding="utf-8")
    removing = threading.Event()
    order: list[str] = []

    def slowly(real: Callable[..., Any]) -> Callable[..., Any]:
        def remove(*args: Any) -> Any:
            removing.set()
            time.sleep(0.3)  # many day files: the worker is still at it when the sweep is cancelled
            outcome = real(*args)
            order.append("swept")
            return outcome

        return remove

    monkeypatch.setattr(retention, "delete_expired", slowly(retention.delete_expired))
    monkeypatch.setattr(retention, "archive_expired", slowly(retention.archive_expired))

    def logged(draft: Draft) -> None:
        order.append("written")
        draft.log("after the sweep")

    async def go() -> None:
        sweeping = asyncio.ensure_future(sweep.run(ws, dry_run=False, confirm=True))
        await asyncio.get_running_loop().run_in_executor(None, removing.wait)
        sweeping.cancel()
        written = asyncio.ensure_future(ws.write(logged))
        with pytest.raises(asyncio.CancelledError):
            await sweeping
        await written

    asyncio.run(go())

    assert order == ["swept", "written"]
    assert not (ws.root / "warm" / "2024-01-01.md").exists()
