"""Specification of the hot tier's two files: hot/context.json holds the article's session fields (and what a person
adds), hot/memd.json memd's own (notes, summary, checkpoint records, version); both written by the one writer with
the same guarantees, a workspace from before the split migrated after a commit that undoes it, and checkpoints of
the old single-file layout still shown and undone from git."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from clocks import START, FixedClock
from edits import note
from hot_files import context_file, own_file, read_hot

from memd import fsio, fsio_batch, git_history, snapshot_history
from memd.batch import Draft
from memd.checkpoint import Checkpointer
from memd.checkpoint_plan import entry_key
from memd.config import CheckpointConfig, SnapshotConfig, WorkspaceConfig
from memd.errors import CorruptFile
from memd.git_staging import stage
from memd.gitrepo import GitRepo
from memd.gitrepo_setup import find_git
from memd.snapshots import Snapshotter
from memd.summarizer import ExtractiveSummarizer
from memd.tiers import hot_format
from memd.tokens import TokenCounter
from memd.workspace import Workspace

T = TypeVar("T")
NOTES = [{"id": f"n-2024010100000{i}-abcdef", "ts": "2024-01-01T00:00:00+00:00", "text": f"note {i}"} for i in range(6)]
LEGACY: dict[str, Any] = {  # hot/context.json as memd wrote it before the split (format 1)
    "version": 1,
    "session_id": "s-1",
    "task": "Refactor the parser",
    "current_step": "Tokenizer",
    "files_modified": ["src/lex.py"],
    "decisions": [{"action": "a", "reason": "r", "id": "d-20240101000000-abcdef", "ts": "2024-01-01T00:00:00+00:00"}],
    "pending_actions": ["tests"],
    "notes": NOTES,
    "summary": "",
    "checkpoints": [],
    "their_field": "a person's",
}


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def make_workspace(tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor) -> Callable[..., Workspace]:
    def make(context: dict[str, Any] | None = None) -> Workspace:
        root = tmp_path / "alpha"
        if context is not None:
            (root / "hot").mkdir(parents=True)
            context_file(root).write_text(json.dumps(context, indent=2), encoding="utf-8")
        ws = Workspace(WorkspaceConfig("alpha", root), counter, FixedClock(START), io)
        ws.open()
        return ws

    return make


def write(ws: Workspace, *edits: Callable[[Draft], Any]) -> list[Any]:
    async def go() -> list[Any]:
        return list(await asyncio.gather(*(ws.write(e) for e in edits), return_exceptions=True))

    return run(go())


def decide(action: str) -> Callable[[Draft], Any]:
    def edit(draft: Draft) -> dict[str, Any]:
        doc, added = hot_format.add_decision(draft.edit_hot(), action, "because", None, draft.now)
        draft.set_hot(doc)
        return added

    return edit


def recorded_writes(monkeypatch: pytest.MonkeyPatch) -> list[list[Path]]:
    batches: list[list[Path]] = []
    real_apply = fsio_batch.write_batch

    def recording(root: fsio.PinnedDir, writes: list[fsio_batch.FileWrite]) -> list[fsio.Fingerprint]:
        batches.append([w.path for w in writes])
        return real_apply(root, writes)

    monkeypatch.setattr("memd.fsio_batch.write_batch", recording)
    return batches


# --- the layout ------------------------------------------------------------------------------------------------


def test_a_fresh_workspace_keeps_the_articles_fields_in_context_json_and_memds_own_in_memd_json(
    make_workspace: Callable[..., Workspace],
) -> None:
    ws = make_workspace()

    write(ws, note("a note"), decide("a decision"))

    assert list(json.loads(context_file(ws.root).read_bytes())) == list(hot_format.ARTICLE_KEYS)
    assert list(json.loads(own_file(ws.root).read_bytes())) == list(hot_format.OWN_KEYS)
    assert read_hot(ws.root) == ws.hot.doc
    assert ws.hot.tokens == ws.hot.count(ws.hot.doc)  # one budget over both files


def test_a_batch_rewrites_only_the_file_whose_content_changes(
    make_workspace: Callable[..., Workspace], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace()
    write(ws, note("first"), decide("first"))
    batches = recorded_writes(monkeypatch)

    write(ws, note("second"))
    write(ws, decide("second"))
    write(ws, note("third"), decide("third"))

    assert batches == [[own_file(ws.root)], [context_file(ws.root)], [own_file(ws.root), context_file(ws.root)]]


def test_an_outside_edit_of_memd_json_is_adopted_by_the_next_write(make_workspace: Callable[..., Workspace]) -> None:
    ws = make_workspace()
    write(ws, note("mine"))
    own = json.loads(own_file(ws.root).read_bytes())
    own["notes"][0]["text"] = "mine, corrected by hand"
    own["their_key"] = 1
    own_file(ws.root).write_text(json.dumps(own), encoding="utf-8")

    assert ws.looks_changed()
    write(ws, note("next"))

    on_disk = json.loads(own_file(ws.root).read_bytes())
    assert [n["text"] for n in on_disk["notes"]] == ["mine, corrected by hand", "next"]
    assert on_disk["their_key"] == 1  # a person's key stays in the file they put it in


def test_a_corrupt_memd_json_blocks_hot_writes_names_the_file_and_is_never_overwritten(
    make_workspace: Callable[..., Workspace],
) -> None:
    ws = make_workspace()
    write(ws, note("last good"))
    own_file(ws.root).write_text('{"notes": "not a list"}', encoding="utf-8")

    (result,) = write(ws, note("refused"))

    assert isinstance(result, CorruptFile) and str(own_file(ws.root)) in result.message
    assert own_file(ws.root).read_text(encoding="utf-8") == '{"notes": "not a list"}'
    assert [n["text"] for n in ws.hot.doc["notes"]] == ["last good"]


def test_each_file_is_capped_by_hot_max_bytes(make_workspace: Callable[..., Workspace]) -> None:
    ws = make_workspace()
    write(ws, note("small"))
    ws.hot.max_bytes = 2048

    (result,) = write(ws, note("x" * 4096))

    assert "hot_max_bytes" in result.message
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == ["small"]


# --- a workspace from before the split ------------------------------------------------------------------------


def test_a_legacy_context_json_is_read_whole_and_plain_writes_keep_its_layout_until_it_is_split(
    make_workspace: Callable[..., Workspace],
) -> None:
    ws = make_workspace(LEGACY)

    assert ws.hot.needs_split
    assert ws.hot.doc == LEGACY
    write(ws, note("before the split"))
    assert not own_file(ws.root).exists()  # not before a commit of the state could be made (the snapshotter)
    assert [n["text"] for n in json.loads(context_file(ws.root).read_bytes())["notes"]][-1] == "before the split"

    assert run(ws.split_hot())

    context = json.loads(context_file(ws.root).read_bytes())
    own = json.loads(own_file(ws.root).read_bytes())
    assert list(context) == [*hot_format.ARTICLE_KEYS, "their_field"]  # a person's key stays where it was
    assert own["version"] == 2 and own["notes"][:6] == NOTES
    assert ws.hot.doc == read_hot(ws.root) and not ws.hot.needs_split
    assert not run(ws.split_hot())  # nothing left to move


def snapshots_for(tmp_path: Path, io: ThreadPoolExecutor, **config: Any) -> Snapshotter:
    return Snapshotter(SnapshotConfig(settle_seconds=0.01, **config), tmp_path / "state", io)


async def settled(snapshots: Snapshotter, ws: Workspace) -> None:
    """Until the split the snapshotter scheduled is done (no task left) and nothing needs one."""
    for _ in range(500):
        await asyncio.sleep(0.01)
        if not ws.hot.needs_split and not snapshots.hot_split.pending:
            return
    raise AssertionError("the hot split did not happen")


def git_show(ws: Workspace, rev: str, path: str) -> bytes:
    repo = GitRepo(ws.root, ws.root / ".git", find_git(), ["hot", "warm", "cold"])
    return git_history.show(repo, rev, path)


def test_the_split_is_made_after_a_commit_of_the_state_before_it_which_undoes_it(
    make_workspace: Callable[..., Workspace], tmp_path: Path, io: ThreadPoolExecutor
) -> None:
    ws = make_workspace(LEGACY)
    legacy_bytes = context_file(ws.root).read_bytes()
    snapshots = snapshots_for(tmp_path, io)

    async def go() -> list[dict[str, Any]]:
        snapshots.track(ws)  # what the registry does with every workspace it serves
        await settled(snapshots, ws)
        return await snapshot_history.history(snapshots, ws, None, 10)

    commits = run(go())

    assert [c["reason"] for c in commits[:2]] == ["hot split", "before hot split"]
    assert git_show(ws, commits[1]["rev"], "hot/context.json") == legacy_bytes
    assert commits[0]["trailers"]["Memd-Hot-Split-From"] == commits[1]["rev"]
    assert set(json.loads(context_file(ws.root).read_bytes())) == {*hot_format.ARTICLE_KEYS, "their_field"}

    async def undo() -> None:
        await snapshot_history.restore(snapshots, ws, commits[1]["rev"], ["hot"])
        assert context_file(ws.root).read_bytes() == legacy_bytes and not own_file(ws.root).exists()
        await settled(snapshots, ws)  # restored from before the split: split again, after the restore's commit

    run(undo())
    assert own_file(ws.root).exists() and not ws.hot.needs_split


def test_nothing_moves_while_the_state_before_cannot_be_committed(
    make_workspace: Callable[..., Workspace], tmp_path: Path, io: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(LEGACY)
    snapshots = snapshots_for(tmp_path, io)

    async def failing(*args: Any, **kwargs: Any) -> tuple[str, bool]:
        return "", False

    monkeypatch.setattr(snapshots, "_snapshot_locked", failing)

    assert not run(snapshots.hot_split.split(ws))
    assert not own_file(ws.root).exists() and ws.hot.needs_split

    monkeypatch.undo()
    assert run(snapshots.hot_split.split(ws))  # the next flush (or change) tries again


def test_with_snapshots_off_the_split_is_made_at_once(
    make_workspace: Callable[..., Workspace], tmp_path: Path, io: ThreadPoolExecutor
) -> None:
    ws = make_workspace(LEGACY)
    snapshots = snapshots_for(tmp_path, io, enabled=False)

    async def go() -> None:
        snapshots.track(ws)
        await settled(snapshots, ws)

    run(go())
    assert not (ws.root / ".git").exists()
    assert json.loads(own_file(ws.root).read_bytes())["notes"] == NOTES


def test_one_of_memds_keys_put_into_context_json_by_hand_is_adopted_then_moved_home(
    make_workspace: Callable[..., Workspace], tmp_path: Path, io: ThreadPoolExecutor
) -> None:
    ws = make_workspace()
    write(ws, note("mine"))
    context = json.loads(context_file(ws.root).read_bytes())
    context_file(ws.root).write_text(json.dumps({**context, "summary": "written by hand"}), encoding="utf-8")
    snapshots = snapshots_for(tmp_path, io)

    async def go() -> None:
        changed = await ws.adopt()
        snapshots.on_change(ws, frozenset(changed), "external")  # the registry's listener
        await settled(snapshots, ws)

    run(go())
    assert ws.hot.doc["summary"] == "written by hand"
    assert "summary" not in json.loads(context_file(ws.root).read_bytes())
    assert json.loads(own_file(ws.root).read_bytes())["summary"] == "written by hand"


# --- checkpoints recorded before the split, read back from git -------------------------------------------------


def test_a_checkpoint_recorded_before_the_split_is_shown_and_undone_from_its_single_file_commits(
    make_workspace: Callable[..., Workspace], tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter
) -> None:
    ws = make_workspace(LEGACY)
    repo = GitRepo.locate(ws.root, tmp_path / "unused.git", find_git(), ["hot", "warm", "cold"], adopt=False)
    repo.ensure("main")
    pre = repo.commit(stage(repo), "memd: before checkpoint", "", {})
    compressed = [entry_key(n) for n in NOTES[:4]]
    after = {
        **LEGACY,
        "notes": NOTES[4:],
        "summary": "# Context Summary\n- notes 0 to 3\n",
        "checkpoints": [
            {
                "id": "ckpt-20240101-000000-abcd",
                "pre_commit": pre,
                "post_commit": "",
                "compressed": compressed,
                "entries_compressed": 4,
            }
        ],
    }
    context_file(ws.root).write_text(json.dumps(after, indent=2), encoding="utf-8")
    post = repo.commit(stage(repo), "memd: after checkpoint", "", {})
    after["checkpoints"][0]["post_commit"] = post
    context_file(ws.root).write_text(json.dumps(after, indent=2), encoding="utf-8")
    ws.refresh()
    snapshots = snapshots_for(tmp_path, io)
    checkpointer = Checkpointer(CheckpointConfig(), ExtractiveSummarizer(counter), snapshots, 10_000, 30.0, lambda: 0.0)

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        await snapshots.hot_split.split(ws)
        assert own_file(ws.root).exists()
        shown = await checkpointer.show(ws, "ckpt-20240101-000000-abcd")
        undone = await checkpointer.undo(ws, "ckpt-20240101-000000-abcd")
        return shown, undone

    shown, undone = run(go())

    assert [e["text"] for e in shown["original_entries"]] == [n["text"] for n in NOTES[:4]]
    assert shown["summary"] == after["summary"]
    assert undone["restored_entries"] == 4
    assert [n["text"] for n in json.loads(own_file(ws.root).read_bytes())["notes"]] == [n["text"] for n in NOTES]


def test_a_split_workspace_of_an_older_format_version_gets_the_current_one_and_nothing_moves(
    make_workspace: Callable[..., Workspace],
) -> None:
    ws = make_workspace()
    write(ws, note("a note"), decide("a decision"))
    own = json.loads(own_file(ws.root).read_bytes())
    own["version"] = hot_format.SCHEMA_VERSION - 1  # written by an older memd, already in two files
    own_file(ws.root).write_text(json.dumps(own, indent=2), encoding="utf-8")
    context_before = context_file(ws.root).read_bytes()

    moved = asyncio.run(ws.split_hot())

    assert moved is False
    assert json.loads(own_file(ws.root).read_bytes())["version"] == hot_format.SCHEMA_VERSION
    assert context_file(ws.root).read_bytes() == context_before


def test_splitting_a_workspace_already_split_and_current_writes_nothing(
    make_workspace: Callable[..., Workspace], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace()
    write(ws, note("a note"), decide("a decision"))
    batches = recorded_writes(monkeypatch)

    assert asyncio.run(ws.split_hot()) is False
    assert batches == []
