"""Specification of the git adapter (memd.gitrepo.GitRepo) with the real git CLI in temporary directories.

Where a workspace's repository lives: `<workspace>/.git` when memd may create or owns it, a separate git dir
under the state directory when the workspace sits inside someone's work tree or has a `.git` memd did not create,
and the workspace's own `.git` when the config says to adopt it. `ensure()` creates the repository (marked
`memd.managed`) and never the workspace. `stage()` lists what changed, so memd never makes an empty
commit; trailers written by `commit()` parse back through `git_history.log()`; a merge or rebase in progress is refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from harness import person_env

from memd import git_history, git_locks, gitrepo_setup, gitsync, retention
from memd.errors import NotFound
from memd.git_staging import nothing_else_staged, stage
from memd.gitrepo import GitRepo
from memd.gitrepo_setup import GitError, RemoteBranchLocked, RepoUnsafe, find_git

PATHS = ("hot", "warm", "cold")
GIT = find_git()


def person_git(cwd: Path, *args: str) -> str:
    """git as a person runs it: in a directory, with their identity, no GIT_DIR from memd."""
    out = subprocess.run([GIT, *args], cwd=cwd, env=person_env(), capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"git {' '.join(args)} failed: {out.stderr}"
    return out.stdout


def make_workspace(path: Path) -> Path:
    for tier in PATHS:
        (path / tier).mkdir(parents=True, exist_ok=True)
    return path


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def locate(workspace: Path, state: Path, adopt: bool = False) -> GitRepo:
    return GitRepo.locate(workspace, state / "git" / "ws.git", GIT, PATHS, adopt)


def user_repo(path: Path) -> str:
    """A repository a person made (not memd's), with one commit. Returns its HEAD."""
    path.mkdir(parents=True, exist_ok=True)
    person_git(path, "init", "--quiet", "--initial-branch=main")
    write(path / "README.md", "mine\n")
    person_git(path, "add", "README.md")
    person_git(path, "commit", "--quiet", "-m", "initial")
    return person_git(path, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    """A fresh memd-managed repository in a plain workspace directory."""
    ws = make_workspace(tmp_path / "ws")
    r = locate(ws, tmp_path / "state")
    r.ensure("main")
    return r


def snapshot(r: GitRepo, reason: str = "writes", **trailers: str) -> str:
    paths = stage(r)
    assert paths, "expected something to commit"
    return r.commit(paths, f"memd: {reason}", "Task: t", {"Memd-Reason": reason, **trailers})


# --- where the repository lives -------------------------------------------------------------------------------


def test_a_plain_directory_gets_its_own_dot_git(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")

    r = locate(ws, tmp_path / "state")

    assert r.git_dir == ws / ".git"
    assert r.work_tree == ws


def test_a_workspace_inside_another_work_tree_gets_a_separate_git_dir(tmp_path: Path) -> None:
    outer = tmp_path / "project"
    user_repo(outer)
    ws = make_workspace(outer / "agent-memory")
    write(ws / "hot" / "context.json", "{}\n")

    r = locate(ws, tmp_path / "state")

    assert r.git_dir == tmp_path / "state" / "git" / "ws.git"
    r.ensure("main")
    snapshot(r)
    assert not (ws / ".git").exists()
    assert person_git(outer, "status", "--porcelain") == "?? agent-memory/\n"


def test_workspaces_side_by_side_in_a_project_ask_git_about_their_parent_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outer = tmp_path / "project"
    user_repo(outer)
    asked: list[list[str]] = []
    real_run = subprocess.run

    def counting_run(cmd: list[str], *args: Any, **kwargs: Any) -> Any:
        if "rev-parse" in cmd:
            asked.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(gitrepo_setup.subprocess, "run", counting_run)
    repos = [locate(make_workspace(outer / f"agent-{i}"), tmp_path / f"state-{i}") for i in range(5)]

    assert all(r.git_dir == tmp_path / f"state-{i}" / "git" / "ws.git" for i, r in enumerate(repos))
    assert len(asked) == 1


def test_a_parent_that_became_a_work_tree_is_seen_once_its_answer_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = tmp_path / "agents"
    make_workspace(parent / "first")
    (tmp_path / ".git").mkdir()  # a `.git` above, but not a repository: git is asked, and says no
    assert locate(parent / "first", tmp_path / "state-1").git_dir == parent / "first" / ".git"
    user_repo(parent)  # a person makes the parent a project

    clock = time.monotonic() + gitrepo_setup.PARENT_ANSWER_SECONDS + 1
    monkeypatch.setattr(gitrepo_setup.time, "monotonic", lambda: clock)
    second = locate(make_workspace(parent / "second"), tmp_path / "state-2")

    assert second.git_dir == tmp_path / "state-2" / "git" / "ws.git"


def test_an_existing_dot_git_memd_did_not_create_is_left_alone(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    user_repo(ws)

    r = locate(ws, tmp_path / "state")

    assert r.git_dir == tmp_path / "state" / "git" / "ws.git"


def test_a_dot_git_file_is_left_alone(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    write(ws / ".git", "gitdir: /somewhere/else\n")

    r = locate(ws, tmp_path / "state")

    assert r.git_dir == tmp_path / "state" / "git" / "ws.git"


def test_a_dot_git_memd_created_is_used_again(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    locate(ws, tmp_path / "state").ensure("main")

    r = locate(ws, tmp_path / "state")

    assert r.git_dir == ws / ".git"


def test_adopting_uses_an_existing_dot_git(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    user_repo(ws)

    r = locate(ws, tmp_path / "state", adopt=True)

    assert r.git_dir == ws / ".git"


# --- creating the repository ----------------------------------------------------------------------------------


def test_ensure_creates_a_repository_marked_as_memds(repo: GitRepo) -> None:
    assert (repo.git_dir / "HEAD").is_file()
    assert repo.run("config", "--get", "memd.managed").decode().strip() == "true"
    assert repo.run("config", "--get", "core.worktree").decode().strip() == str(repo.work_tree)
    assert "*.memd-tmp-*" in (repo.git_dir / "info" / "exclude").read_text()


def test_ensure_twice_changes_nothing(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    rev = snapshot(repo)

    repo.ensure("main")

    assert repo.head() == rev


def test_a_separate_git_dir_points_at_the_workspace(tmp_path: Path) -> None:
    outer = tmp_path / "project"
    user_repo(outer)
    ws = make_workspace(outer / "agent-memory")
    r = locate(ws, tmp_path / "state")
    r.ensure("main")
    write(ws / "hot" / "context.json", '{"task": "t"}\n')

    snapshot(r)

    assert git_history.show(r, "HEAD", "hot/context.json") == b'{"task": "t"}\n'
    assert person_git(outer, "log", "--format=%s") == "initial\n"


def test_ensure_never_creates_a_missing_workspace(tmp_path: Path) -> None:
    gone = tmp_path / "gone"

    with pytest.raises(GitError, match="gone"):
        locate(gone, tmp_path / "state").ensure("main")

    assert not gone.exists()


def test_ensure_never_creates_a_missing_workspace_for_a_separate_git_dir(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    separate = tmp_path / "state" / "git" / "gone.git"
    r = GitRepo(gone, separate, GIT, PATHS)

    with pytest.raises(GitError):
        r.ensure("main")

    assert not gone.exists()
    assert not separate.exists()


# --- staging and committing -----------------------------------------------------------------------------------


def test_an_empty_workspace_has_nothing_to_commit(repo: GitRepo) -> None:
    assert stage(repo) == []


def test_nothing_changed_means_nothing_staged(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    snapshot(repo)

    assert stage(repo) == []
    assert stage(repo) == []


def test_a_change_a_new_file_and_a_deletion_are_each_staged(repo: GitRepo) -> None:
    hot = repo.work_tree / "hot" / "context.json"
    write(hot, "{}\n")
    write(repo.work_tree / "warm" / "2026-01-01.md", "day\n")
    snapshot(repo)

    write(hot, '{"task": "x"}\n')
    paths = stage(repo)
    assert paths
    repo.commit(paths, "c", "", {})

    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")
    paths = stage(repo)
    assert paths
    repo.commit(paths, "c", "", {})

    shutil.rmtree(repo.work_tree / "warm")
    paths = stage(repo)
    assert paths
    repo.commit(paths, "c", "", {})
    assert git_history.files_at(repo, "HEAD", ["warm"]) == {}


def test_a_held_file_is_neither_staged_nor_committed_and_the_rest_is(repo: GitRepo) -> None:
    hot = repo.work_tree / "hot" / "context.json"
    write(hot, '{"session_id": "other machine"}\n')
    snapshot(repo)

    write(hot, '{"session_id": "this machine"}\n')
    write(repo.work_tree / "warm" / "2026-01-01.md", "day\n")
    paths = stage(repo, hold=["hot/context.json"])
    assert paths == ["warm/2026-01-01.md"]
    repo.commit(paths, "c", "", {})

    assert git_history.show(repo, "HEAD", "hot/context.json") == b'{"session_id": "other machine"}\n'
    assert stage(repo, hold=["hot/context.json"]) == []
    assert stage(repo) == ["hot/context.json"]  # no longer held: committed as usual


# A snapshot commits the index as it is when it holds nothing but memd's paths: `commit --only` would hash every
# listed file again (a 40 MB day: 0.26 s of git's CPU at every snapshot). Anything else in the index: `--only`.


def committed(r: GitRepo, only: bool) -> tuple[str, str]:
    """Stage, commit with or without `--only`; (HEAD's tree, what stays staged)."""
    paths = stage(r)
    r.commit(paths, "memd: writes", "", {}, only=only)
    return person_git(r.work_tree, "rev-parse", "HEAD^{tree}"), person_git(
        r.work_tree, "diff", "--cached", "--name-only"
    )


def test_an_index_of_the_workspaces_files_alone_is_committed_as_it_is_and_gives_the_same_commit(
    tmp_path: Path,
) -> None:
    repos = []
    for name in ("plain", "only"):
        r = locate(make_workspace(tmp_path / name), tmp_path / f"state-{name}")
        r.ensure("main")
        write(r.work_tree / "hot" / "context.json", "{}\n")
        write(r.work_tree / "warm" / "2026-01-01.md", "day\n")
        snapshot(r)
        write(r.work_tree / "warm" / "2026-01-01.md", "day\nmore\n")
        write(r.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")
        (r.work_tree / "hot" / "context.json").unlink()
        repos.append(r)

    stage(repos[0])
    assert nothing_else_staged(repos[0])
    assert committed(repos[0], only=False) == committed(repos[1], only=True)
    assert committed(repos[0], only=False)[1] == ""


@pytest.mark.parametrize(
    "what", ["a person's file", "a held file", "an intent-to-add file", "a tier outside a narrowed view"]
)
def test_an_index_holding_anything_else_is_committed_with_only(repo: GitRepo, what: str) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "warm" / "2026-01-01.md", "day\n")
    snapshot(repo)
    write(repo.work_tree / "hot" / "context.json", '{"task": "t"}\n')
    view, hold = repo, ()
    if what == "a person's file":
        write(repo.work_tree / "notes.txt", "mine\n")
        person_git(repo.work_tree, "add", "-f", "notes.txt")
    elif what == "a held file":
        hold = ("hot/context.json",)
        write(repo.work_tree / "warm" / "2026-01-01.md", "day\nmore\n")
    elif what == "a tier outside a narrowed view":
        view = repo.narrowed(["hot"])
        write(repo.work_tree / "warm" / "2026-01-01.md", "day\nmore\n")
        repo.run("add", "warm/2026-01-01.md")  # staged by a whole snapshot that failed before its commit

    stage(view, hold=hold)
    if what == "an intent-to-add file":  # `git add -N` of a day file, after memd's add
        write(repo.work_tree / "warm" / "2026-01-02.md", "next\n")
        person_git(repo.work_tree, "add", "-N", "warm/2026-01-02.md")

    assert not nothing_else_staged(view, hold)


def test_memds_own_files_in_the_index_are_committed_with_only(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    snapshot(repo)
    write(repo.work_tree / "hot" / ".context.json.memd-tmp-1-abcd", "half")
    person_git(repo.work_tree, "add", "-f", "hot/.context.json.memd-tmp-1-abcd")
    write(repo.work_tree / "hot" / "context.json", '{"task": "t"}\n')

    stage(repo)

    assert not nothing_else_staged(repo)


def test_only_the_snapshot_paths_and_no_temp_files_are_committed(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "hot" / ".context.json.memd-tmp-1-abcd", "half")
    write(repo.work_tree / "notes.txt", "not memory\n")

    snapshot(repo)

    files = person_git(repo.work_tree, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert files == ["hot/context.json"]


def test_no_ignore_rule_of_the_user_or_the_workspace_keeps_a_tier_file_out(repo: GitRepo, temporary_home: Path) -> None:
    ignore = temporary_home / ".config" / "git" / "ignore"  # the user's global excludes (git's default place)
    write(ignore, "*.md\n*.json\n")
    write(repo.work_tree / ".gitignore", "warm/\n")
    write(repo.work_tree / "cold" / ".gitignore", "*\n")
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "hot" / "memd.json", "{}\n")  # memd's own hot file: a tier file like the others
    write(repo.work_tree / "warm" / "2026-01-01.md", "day\n")
    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")

    snapshot(repo)

    files = person_git(repo.work_tree, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert {"hot/context.json", "hot/memd.json", "warm/2026-01-01.md", "cold/MEMORY.md"} <= set(files), files


def test_memds_own_files_are_never_staged_whatever_the_workspace_says(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "hot" / ".gitignore", "!*\n")  # a rule that would pull everything in
    write(repo.work_tree / "hot" / ".context.json.memd-tmp-1-abcd", "half")
    write(repo.work_tree / "warm" / "archive" / ".2026-01.md.gz.memd-tmp-2-beef", "half")
    write(repo.work_tree / ".memd.lock", "4242\n")

    snapshot(repo)

    files = person_git(repo.work_tree, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert sorted(files) == ["hot/.gitignore", "hot/context.json"]
    # A person's `git add -A` in memd's repository skips them too (info/exclude; a `!*` of their own would win).
    (repo.work_tree / "hot" / ".gitignore").unlink()
    person_git(repo.work_tree, "add", "-A")
    staged = person_git(repo.work_tree, "diff", "--cached", "--name-only").split()
    assert ".memd.lock" not in staged and not [p for p in staged if ".memd-tmp-" in p], staged


# --- editor temporaries and files that vanish while git stages ---------------------------------------------------


def vanish_during_add(repo: GitRepo, victim: str) -> None:
    """Make git delete `victim` half-way through its own `add`, deterministically: a clean filter on
    hot/context.json removes it after git has listed the directory and before it looks at the file (a tracked,
    modified file is hashed before the untracked files are added), as an editor does when it saves."""
    target = repo.work_tree / victim
    person_git(
        repo.work_tree, "--git-dir", str(repo.git_dir), "config", "filter.vanish.clean", f"rm -f '{target}'; cat"
    )
    with (repo.git_dir / "info" / "attributes").open("a") as f:
        f.write("hot/context.json filter=vanish\n")


def test_an_editor_file_that_vanishes_while_git_stages_does_not_fail_the_snapshot(repo: GitRepo) -> None:
    hot = repo.work_tree / "hot" / "context.json"
    write(hot, "{}\n")
    snapshot(repo)
    vanish_during_add(repo, "hot/.context.json.person-3")
    write(hot, '{"task": "saved"}\n')
    write(repo.work_tree / "hot" / ".context.json.person-3", "a person's half-saved context\n")
    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")

    paths = stage(repo)

    assert sorted(paths) == ["cold/MEMORY.md", "hot/context.json"]
    repo.commit(paths, "c", "", {})
    assert git_history.show(repo, "HEAD", "hot/context.json") == b'{"task": "saved"}\n'
    assert not (repo.work_tree / "hot" / ".context.json.person-3").exists()


@pytest.mark.parametrize(
    "stderr",
    [
        b'error: open("hot/.context.json.swp"): No such file or directory\n'
        b"error: unable to index file 'hot/.context.json.swp'\n",
        b"fatal: unable to stat 'hot/.context.json.swp': No such file or directory\n",
    ],
    ids=["gone-before-open", "gone-before-lstat"],
)
def test_whatever_way_git_reports_a_vanished_file_the_snapshot_goes_on(
    repo: GitRepo, monkeypatch: pytest.MonkeyPatch, stderr: bytes
) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "hot" / "notes.txt", "a person's notes\n")
    temp = repo.work_tree / "hot" / ".context.json.swp"
    write(temp, "swap")
    real_run, adds = subprocess.run, []

    def run(cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        if "add" in cmd:
            adds.append(cmd)
            if len(adds) == 1:  # git's first add: the editor's file goes while git looks at it
                temp.unlink()
                return subprocess.CompletedProcess(cmd, 1 if stderr.startswith(b"error") else 128, b"", stderr)
        return real_run(cmd, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(subprocess, "run", run)
        paths = stage(repo)

    assert sorted(paths) == ["hot/context.json", "hot/notes.txt"]


def test_any_other_git_add_error_still_fails_the_snapshot(repo: GitRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "hot" / "notes.txt", "a person's notes\n")
    real_run = subprocess.run
    stderr = b"error: open(\"hot/notes.txt\"): Permission denied\nerror: unable to index file 'hot/notes.txt'\n"

    def run(cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        if "add" in cmd:
            return subprocess.CompletedProcess(cmd, 1, b"", stderr)
        return real_run(cmd, **kwargs)

    with monkeypatch.context() as m, pytest.raises(GitError, match="Permission denied"):
        m.setattr(subprocess, "run", run)
        stage(repo)


def test_a_failing_filter_on_a_file_that_is_still_there_fails_the_snapshot(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "hot" / "notes.txt", "a person's notes\n")
    person_git(repo.work_tree, "--git-dir", str(repo.git_dir), "config", "filter.broken.clean", "false")
    person_git(repo.work_tree, "--git-dir", str(repo.git_dir), "config", "filter.broken.required", "true")
    with (repo.git_dir / "info" / "attributes").open("a") as f:
        f.write("hot/notes.txt filter=broken\n")

    with pytest.raises(GitError):
        stage(repo)


EDITOR_TEMPS = (
    "hot/.context.json.swp",
    "hot/.context.json.swo",
    "hot/4913",
    "cold/MEMORY.md~",
    "cold/#MEMORY.md#",
    "warm/2026-01-01.md.tmp",
    "warm/.2026-01-01.md.swp",
)


def test_editor_temporaries_are_not_committed_by_default(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")
    write(repo.work_tree / "warm" / "2026-01-01.md", "day\n")
    write(repo.work_tree / "hot" / "notes.txt", "a person's notes\n")  # anything else is committed as before
    for name in EDITOR_TEMPS:
        write(repo.work_tree / name, "editor scratch\n")
    os.symlink("person@host.4242:1700000000", repo.work_tree / "cold" / ".#MEMORY.md")  # emacs' lock: dangling

    snapshot(repo)

    files = person_git(repo.work_tree, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert sorted(files) == ["cold/MEMORY.md", "hot/context.json", "hot/notes.txt", "warm/2026-01-01.md"]


def test_people_can_ignore_their_own_editor_files_and_tier_files_still_go_in(
    repo: GitRepo, temporary_home: Path
) -> None:
    write(temporary_home / ".config" / "git" / "ignore", "*.md\n*.gz\n*.json\n")
    write(repo.work_tree / ".gitignore", "*\n")
    tiers = {
        "hot/context.json": "{}\n",
        "cold/MEMORY.md": "# Agent Memory\n",
        "cold/PROPOSED.md": "# Proposed\n",
        "warm/2026-01-01.md": "day\n",
        "warm/archive/2025-12.md.gz": "not really gzip\n",
        "warm/archive/2025-11.1.md.gz": "not really gzip either\n",
    }
    for name, text in tiers.items():
        write(repo.work_tree / name, text)
    write(repo.work_tree / "hot" / ".context.json.person-3", "a person's save temp\n")
    write(repo.work_tree / "warm" / "notes.txt", "ignored by the workspace's *\n")

    snapshot(repo)

    assert sorted(person_git(repo.work_tree, "ls-tree", "-r", "--name-only", "HEAD").split()) == sorted(tiers)
    # Deletions of tracked tier files are still recorded, ignored or not.
    (repo.work_tree / "warm" / "2026-01-01.md").unlink()
    (repo.work_tree / "cold" / "PROPOSED.md").unlink()
    assert sorted(stage(repo)) == ["cold/PROPOSED.md", "warm/2026-01-01.md"]


def test_tier_files_are_never_followed_through_a_symlink(repo: GitRepo, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside / "2026-01-02.md", "someone else's file\n")
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    os.symlink(outside / "2026-01-02.md", repo.work_tree / "cold" / "MEMORY.md")
    shutil.rmtree(repo.work_tree / "warm")
    os.symlink(outside, repo.work_tree / "warm")

    snapshot(repo)

    tree = person_git(repo.work_tree, "ls-tree", "-r", "HEAD")
    assert "someone else's file" not in person_git(repo.work_tree, "grep", "-I", "--cached", "-e", ".", "--", ".")
    assert "warm/2026-01-02.md" not in tree  # git never commits through a symlinked directory
    for line in tree.splitlines():
        if line.endswith(("cold/MEMORY.md", "\twarm")):
            assert line.startswith("120000"), tree  # committed as what it is: a symlink


def test_git_stores_each_file_exactly_whatever_the_users_line_ending_settings(
    repo: GitRepo, temporary_home: Path
) -> None:
    write(temporary_home / ".gitconfig", "[core]\n\tautocrlf = true\n")
    data = b"# Activity Log 2026-01-01\r\n\r\n### 09:00:00 - crlf\r\n"
    (repo.work_tree / "warm" / "2026-01-01.md").write_bytes(data)

    snapshot(repo)

    head, blobs = repo.committed_files("warm")
    assert head == repo.head()
    assert blobs == {"2026-01-01.md": retention.blob_id(data)}
    assert git_history.show(repo, "HEAD", "warm/2026-01-01.md") == data


def test_committed_files_lists_the_regular_files_directly_in_a_directory(repo: GitRepo) -> None:
    write(repo.work_tree / "warm" / "2026-01-01.md", "one\n")
    write(repo.work_tree / "warm" / "archive" / "2026-01.md.gz", "not really gzip\n")
    os.symlink("2026-01-01.md", repo.work_tree / "warm" / "2026-01-02.md")
    snapshot(repo)

    head, blobs = repo.committed_files("warm")

    assert set(blobs) == {"2026-01-01.md"}
    assert blobs["2026-01-01.md"] == person_git(repo.work_tree, "rev-parse", f"{head}:warm/2026-01-01.md").strip()
    assert blobs["2026-01-01.md"] == retention.blob_id(b"one\n")


def test_committed_files_of_a_given_commit_are_that_commits_not_heads(repo: GitRepo) -> None:
    write(repo.work_tree / "warm" / "2026-01-01.md", "one\n")
    snapshot(repo)
    first = repo.head()
    write(repo.work_tree / "warm" / "2026-01-01.md", "one, edited\n")
    snapshot(repo)

    head, blobs = repo.committed_files("warm", first)

    assert head == first != repo.head()
    assert blobs == {"2026-01-01.md": retention.blob_id(b"one\n")}


def test_a_branch_a_person_deleted_after_memds_commits_starts_afresh_at_the_next_snapshot(repo: GitRepo) -> None:
    write(repo.work_tree / "warm" / "2026-01-01.md", "one\n")
    snapshot(repo)
    branch = person_git(repo.work_tree, "symbolic-ref", "HEAD").strip()
    person_git(repo.work_tree, "update-ref", "-d", branch)  # HEAD names a branch that no longer exists
    write(repo.work_tree / "warm" / "2026-01-01.md", "two\n")

    paths = stage(repo)
    repo.commit(paths, "memd: after the reset", "", {})

    assert "warm/2026-01-01.md" in paths
    assert git_history.show(repo, "HEAD", "warm/2026-01-01.md") == b"two\n"
    write(repo.work_tree / "warm" / "2026-01-01.md", "three\n")
    assert stage(repo) == ["warm/2026-01-01.md"]  # a diff against the new HEAD again


def test_a_repository_made_by_an_older_memd_gets_memds_rules_added_not_replaced(repo: GitRepo) -> None:
    exclude = repo.git_dir / "info" / "exclude"
    exclude.write_text("# written by memd\n*.memd-tmp-*\n.git.memd-tmp-*\nscratch/\n")  # plus a person's line
    (repo.git_dir / "info" / "attributes").unlink()

    locate(repo.work_tree, repo.git_dir.parent).ensure("main")

    lines = exclude.read_text().splitlines()
    assert "scratch/" in lines and "/.memd.lock" in lines
    assert {"*~", ".*.sw[a-p]", "*.tmp"} <= set(lines)  # editor temporaries, added by a newer memd
    assert lines.count("*.memd-tmp-*") == 1
    assert "-text" in (repo.git_dir / "info" / "attributes").read_text()


# --- the workspace directory is pinned ---------------------------------------------------------------------------


def test_a_symlinked_workspace_gets_no_repository_anywhere(tmp_path: Path) -> None:
    target = make_workspace(tmp_path / "target")
    link = tmp_path / "ws"
    link.symlink_to(target)

    with pytest.raises(GitError, match="symlink"):
        locate(link, tmp_path / "state").ensure("main")

    assert not (target / ".git").exists()
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("swap", ["symlink", "directory"])
def test_a_workspace_swapped_after_locating_is_never_initialised_or_committed_through(
    tmp_path: Path, swap: str
) -> None:
    ws = make_workspace(tmp_path / "ws")
    r = locate(ws, tmp_path / "state")
    elsewhere = make_workspace(tmp_path / "elsewhere")
    ws.rename(tmp_path / "ws-moved")
    if swap == "symlink":
        ws.symlink_to(elsewhere)
    else:
        make_workspace(ws)
        write(ws / "hot" / "context.json", "{}\n")

    with pytest.raises(GitError, match="symlink" if swap == "symlink" else "no longer the directory"):
        r.ensure("main")
    with pytest.raises(GitError):
        stage(r)

    assert not (elsewhere / ".git").exists() and not (ws / ".git").exists()


def test_a_dot_git_symlink_is_not_taken_for_memds_repository(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    other = locate(make_workspace(tmp_path / "other"), tmp_path / "other-state")
    other.ensure("main")  # a real memd repository somewhere else
    (ws / ".git").symlink_to(other.git_dir)

    r = locate(ws, tmp_path / "state")

    assert r.git_dir == tmp_path / "state" / "git" / "ws.git"


def test_a_deleted_repository_is_gone_and_ensure_makes_a_new_one(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    snapshot(repo)
    assert not repo.gone()

    shutil.rmtree(repo.git_dir)

    assert repo.gone()
    repo.ensure("main")
    assert not repo.gone()
    assert stage(repo) == ["hot/context.json"]


def test_trailers_parse_back_through_log(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    rev = snapshot(repo, "session start", **{"Memd-Session": "s-1", "Memd-Step": "write tests", "Memd-Tiers": ""})

    [commit] = git_history.log(repo, None, 10)

    assert commit.rev == rev
    assert commit.subject == "memd: session start"
    assert commit.as_dict()["reason"] == "session start"
    assert commit.as_dict()["session"] == "s-1"
    assert commit.as_dict()["step"] == "write tests"
    assert "Memd-Tiers" not in commit.trailers  # empty values are left out


def test_a_multi_line_trailer_value_becomes_one_line(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    snapshot(repo, "writes", **{"Memd-Step": "first line\n\nMemd-Reason: forged\nthird"})

    [commit] = git_history.log(repo, None, 10)

    assert commit.trailers["Memd-Reason"] == "writes"
    assert commit.trailers["Memd-Step"] == "first line Memd-Reason: forged third"


def test_log_of_a_path_lists_only_the_commits_that_touched_it(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    first = snapshot(repo, "one")
    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")
    second = snapshot(repo, "two")

    assert [c.rev for c in git_history.log(repo, None, 10)] == [second, first]
    assert [c.rev for c in git_history.log(repo, "hot/context.json", 10)] == [first]
    assert [c.rev for c in git_history.log(repo, None, 1)] == [second]


def test_log_of_a_repository_without_commits_is_empty(repo: GitRepo) -> None:
    assert git_history.log(repo, None, 10) == []


def test_show_files_at_and_diff_read_the_history(repo: GitRepo) -> None:
    hot = repo.work_tree / "hot" / "context.json"
    write(hot, '{"step": 1}\n')
    first = snapshot(repo)
    write(hot, '{"step": 2}\n')
    snapshot(repo)

    assert git_history.show(repo, first, "hot/context.json") == b'{"step": 1}\n'
    assert git_history.files_at(repo, first, ["hot"]) == {"hot/context.json": b'{"step": 1}\n'}
    diff = git_history.diff(repo, first, "HEAD", ["hot"])
    assert '-{"step": 1}' in diff and '+{"step": 2}' in diff


def test_unknown_revisions_paths_and_option_like_revisions_are_not_found(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    snapshot(repo)

    with pytest.raises(NotFound):
        git_history.resolve(repo, "no-such-rev")
    with pytest.raises(NotFound):
        git_history.resolve(repo, "--output=/tmp/x")
    with pytest.raises(NotFound):
        git_history.show(repo, "HEAD", "cold/MEMORY.md")


# --- unsafe states and locks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("marker", ["MERGE_HEAD", "rebase-merge", "rebase-apply", "CHERRY_PICK_HEAD"])
def test_a_merge_or_rebase_in_progress_is_refused(repo: GitRepo, marker: str) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    head = snapshot(repo)
    write(repo.work_tree / "hot" / "context.json", '{"task": "x"}\n')
    if marker.startswith("rebase"):
        (repo.git_dir / marker).mkdir()
    else:
        (repo.git_dir / marker).write_text(head + "\n")

    with pytest.raises(RepoUnsafe, match=marker):
        repo.check_safe()
    with pytest.raises(RepoUnsafe):
        stage(repo)

    assert person_git(repo.work_tree, "diff", "--cached", "--name-only") == ""  # nothing was staged


def test_a_stale_index_lock_is_removed(repo: GitRepo) -> None:
    lock = repo.git_dir / "index.lock"
    lock.write_bytes(b"")
    old = time.time() - 120
    os.utime(lock, (old, old))
    write(repo.work_tree / "hot" / "context.json", "{}\n")

    assert stage(repo)

    assert not lock.exists()


def test_a_fresh_index_lock_is_waited_on_and_then_reported(repo: GitRepo) -> None:
    lock = repo.git_dir / "index.lock"
    lock.write_bytes(b"")

    with pytest.raises(GitError, match=r"index\.lock"):
        repo.wait_for_index_lock(timeout=0.3)

    assert lock.exists()  # a live git's lock is never taken away


# --- push -----------------------------------------------------------------------------------------------------


def test_push_fast_forwards_and_reports_divergence_without_forcing(repo: GitRepo, tmp_path: Path) -> None:
    bare = tmp_path / "remote.git"
    person_git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    snapshot(repo)

    assert repo.push(str(bare), "main", 30) == "ok"
    assert person_git(bare, "rev-parse", "main").strip() == repo.head()

    other = tmp_path / "other"
    person_git(tmp_path, "clone", "--quiet", str(bare), str(other))
    write(other / "foreign.txt", "from elsewhere\n")
    person_git(other, "add", "foreign.txt")
    person_git(other, "commit", "--quiet", "-m", "foreign")
    person_git(other, "push", "--quiet", "origin", "HEAD:main")
    foreign = person_git(other, "rev-parse", "HEAD").strip()
    write(repo.work_tree / "hot" / "context.json", '{"task": "x"}\n')
    snapshot(repo)

    assert repo.push(str(bare), "main", 30) == "diverged"
    assert person_git(bare, "rev-parse", "main").strip() == foreign


def test_a_push_that_finds_the_remotes_branch_locked_names_the_lock_file(
    repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = tmp_path / "remote.git"
    person_git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    snapshot(repo)
    assert repo.push(str(bare), "main", 30) == "ok"
    write(repo.work_tree / "hot" / "context.json", '{"task": "x"}\n')
    snapshot(repo)
    lock = bare / "refs" / "heads" / "main.lock"
    lock.write_bytes(b"")  # another machine's push holds the branch right now, or died holding it
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")  # git's refusals are read in the C locale whatever the user's

    with pytest.raises(RemoteBranchLocked) as refused:  # the sync tries again; the push job says which file it is
        repo.push(str(bare), "main", 30)
    assert str(lock) in refused.value.message and "remove that file" in refused.value.message
    lock.unlink()
    assert repo.push(str(bare), "main", 30) == "ok"


def test_push_to_a_missing_remote_is_an_error(repo: GitRepo, tmp_path: Path) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    snapshot(repo)

    with pytest.raises(GitError):
        repo.push(str(tmp_path / "nowhere.git"), "main", 30)


def test_ref_locks_left_by_a_killed_git_are_cleared_at_start_and_once_stale(tmp_path: Path, repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    repo.commit(stage(repo), "first", "", {})
    head_lock = repo.git_dir / "HEAD.lock"
    branch_lock = repo.git_dir / "refs" / "heads" / "main.lock"
    for lock in (head_lock, branch_lock):
        lock.write_text("")  # what `git commit` or `update-ref` leaves when it is killed half-way

    assert git_locks.clear_stale_locks(repo) == []  # fresh: it may belong to a git that is still working
    old = time.time() - 3600
    os.utime(head_lock, (old, old))
    assert git_locks.clear_stale_locks(repo) == ["HEAD.lock"]

    again = locate(repo.work_tree, tmp_path / "state")
    again.ensure("main", started_at=time.time())  # a daemon starting: a lock from before it, with no git running,
    assert not branch_lock.exists()  # was left by a git killed with the previous daemon
    write(repo.work_tree / "hot" / "context.json", '{"a": 1}\n')
    assert again.commit(stage(again), "after the kill", "", {})


def test_a_repository_first_opened_long_after_the_start_leaves_a_fresh_lock_to_the_git_holding_it(
    tmp_path: Path, repo: GitRepo
) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    repo.commit(stage(repo), "first", "", {})
    branch_lock = repo.git_dir / "refs" / "heads" / "main.lock"
    branch_lock.write_text("")  # a git of another user, working right now (memd may not see its process)
    again = locate(repo.work_tree, tmp_path / "state")

    again.ensure("main", started_at=time.time() - 3600)  # the first snapshot, an hour after the daemon started
    assert branch_lock.exists()
    again.ensure("main")  # no daemon start known: the same 30 s rule
    assert branch_lock.exists()

    old = time.time() - 60
    os.utime(branch_lock, (old, old))
    again.ensure("main", started_at=time.time() - 3600)
    assert not branch_lock.exists()  # stale by then


def test_moving_head_for_a_sync_keeps_what_a_person_staged_in_paths_the_merge_did_not_change(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")
    old = snapshot(repo)
    write(repo.work_tree / "warm" / "2024-01-01.md", "### 09:00:00 - from the other machine\n")
    new = snapshot(repo)  # stands for the merge commit a sync made
    repo.run("update-ref", "HEAD", old)
    repo.run("read-tree", old)
    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n\n## Mine\n- [2024-01-01] staged by hand\n")
    repo.run("add", "cold/MEMORY.md")  # what a person staged in an adopted repository

    gitsync.move_head(repo, new, old)

    assert repo.head() == new
    assert repo.run("diff", "--cached", "--name-only").decode().split() == ["cold/MEMORY.md"]
    assert b"warm/2024-01-01.md" in repo.run("ls-files", "--stage")


@pytest.mark.parametrize("layout", ["loose", "packed", "detached"])
def test_a_commit_returns_its_own_id_however_the_repository_keeps_its_refs(repo: GitRepo, layout: str) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    first = snapshot(repo)
    if layout == "packed":  # e.g. after a person's `git gc`: the branch lives only in packed-refs until memd commits
        person_git(repo.work_tree, f"--git-dir={repo.git_dir}", "pack-refs", "--all")
    elif layout == "detached":  # a person checked out a commit in the snapshot repository
        person_git(repo.work_tree, f"--git-dir={repo.git_dir}", "checkout", "--quiet", "--detach", first)

    write(repo.work_tree / "hot" / "context.json", '{"task": "x"}\n')
    rev = repo.commit(stage(repo), "c", "", {})

    assert rev == person_git(repo.work_tree, f"--git-dir={repo.git_dir}", "rev-parse", "HEAD").strip()
    assert rev != first


@pytest.mark.parametrize("name", ["with space", 'quote"d', "back\\slash", "hash#semi;colon", " lead and trail "])
def test_a_new_repository_is_marked_as_memds_and_names_its_work_tree_whatever_the_path(
    tmp_path: Path, name: str
) -> None:
    ws = make_workspace(tmp_path / name / "ws")
    r = locate(ws, tmp_path / "state")
    r.ensure("main")
    write(ws / "hot" / "context.json", "{}\n")
    snapshot(r)

    def config(key: str) -> str:
        return person_git(tmp_path, f"--git-dir={r.git_dir}", "config", "--get", key).removesuffix("\n")

    assert r.managed()
    assert config("memd.managed") == "true"
    assert config("core.worktree") == str(ws)
    assert not (r.git_dir / "hooks").exists()  # no sample hooks copied in (memd's git never runs hooks)
    assert person_git(tmp_path, f"--git-dir={r.git_dir}", "status", "--porcelain") == ""


@pytest.mark.parametrize("refs", ["loose", "packed"])
def test_a_new_repository_whose_branch_another_git_moved_stages_only_what_differs_from_it(
    repo: GitRepo, refs: str
) -> None:
    # As a sync's fast-forward leaves it: the branch, made by another git before memd's first commit, holds the
    # workspace's files exactly as they are on disk.
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    git = (f"--git-dir={repo.git_dir}", f"--work-tree={repo.work_tree}")
    person_git(repo.work_tree, *git, "add", "hot")
    person_git(repo.work_tree, *git, "commit", "--quiet", "-m", "another machine's first commit")
    if refs == "packed":
        person_git(repo.work_tree, *git, "pack-refs", "--all")

    assert stage(repo) == []
    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")
    assert stage(repo) == ["cold/MEMORY.md"]


def test_a_commit_starts_no_other_git_process(repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git commit runs `git maintenance run --auto` after itself unless told not to: a process per snapshot that
    finds nothing to do (memd packs with git_maintenance), 1.8 of ~10 git processes per workspace in a first
    sweep."""
    trace = tmp_path / "git-trace"
    with_trace = {**repo.env(), "GIT_TRACE": str(trace)}
    monkeypatch.setattr(GitRepo, "env", lambda self: with_trace)
    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")

    snapshot(repo)

    traced = trace.read_text()
    assert "git commit" in traced  # the trace saw the commit
    assert "maintenance" not in traced


def _traced_gits(repo: GitRepo, trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_trace = {**repo.env(), "GIT_TRACE": str(trace)}
    monkeypatch.setattr(GitRepo, "env", lambda self: with_trace)


def _adds(trace: Path) -> list[str]:
    return [line for line in trace.read_text().splitlines() if "trace: built-in: git add " in line]


@pytest.mark.parametrize(
    ("rules", "adds"),
    [({}, 1), ({"cold/.gitignore": "MEMORY.md\n"}, 2)],
    ids=["no ignore rule: one add", "a rule holding a tier file back: a second add, with --force"],
)
def test_a_snapshot_stages_with_one_git_add_unless_an_ignore_rule_holds_a_tier_file_back(
    repo: GitRepo,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    temporary_home: Path,
    rules: dict[str, str],
    adds: int,
) -> None:
    trace = tmp_path / "git-trace"
    _traced_gits(repo, trace, monkeypatch)
    tiers = {"hot/context.json": "{}\n", "warm/2026-01-01.md": "day\n", "cold/MEMORY.md": "# Agent Memory\n"}
    for name, text in {**rules, **tiers}.items():
        write(repo.work_tree / name, text)

    snapshot(repo)

    traced = _adds(trace)
    assert len(traced) == adds and ("--force" in traced[-1]) == (adds == 2)
    assert set(tiers) <= set(person_git(repo.work_tree, "ls-tree", "-r", "--name-only", "HEAD").split())


def test_a_held_tier_file_stays_out_of_the_one_add_too(repo: GitRepo, temporary_home: Path) -> None:
    # Two guards keep it out: its exclude pathspec, and its not being named among the tier files.
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")

    assert stage(repo, hold=["hot/context.json"]) == ["cold/MEMORY.md"]


def _ls_tree_blobs(repo: GitRepo, commit: str, directory: str) -> dict[str, str]:
    out = person_git(repo.work_tree, "ls-tree", "--full-tree", commit, "--", f"{directory}/")
    blobs = {}
    for line in out.splitlines():
        meta, name = line.split("\t")
        mode, kind, oid = meta.split()
        if kind == "blob" and mode in ("100644", "100755"):
            blobs[name.rsplit("/", 1)[-1]] = oid
    return blobs


def test_what_a_commit_holds_is_read_from_its_loose_objects_as_git_lists_it(
    repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(repo.work_tree / "warm" / "2026-01-01.md", "one\n")
    write(repo.work_tree / "warm" / "2026-01-02.md", "two\n")
    write(repo.work_tree / "warm" / "archive" / "2025-12.md.gz", "not really gzip\n")
    os.symlink("2026-01-01.md", repo.work_tree / "warm" / "2026-01-03.md")
    head = snapshot(repo)
    trace = tmp_path / "git-trace"
    _traced_gits(repo, trace, monkeypatch)

    loose = repo.committed_files("warm", head)
    nested = repo.committed_files("warm/archive", head)
    missing = repo.committed_files("hot/nothing", head)

    assert not trace.exists()  # no git process
    assert loose == (head, _ls_tree_blobs(repo, head, "warm"))
    assert set(loose[1]) == {"2026-01-01.md", "2026-01-02.md"}
    assert nested == (head, _ls_tree_blobs(repo, head, "warm/archive"))
    assert missing == (head, {})


def test_what_a_packed_commit_holds_is_asked_of_git(repo: GitRepo) -> None:
    write(repo.work_tree / "warm" / "2026-01-01.md", "one\n")
    head = snapshot(repo)
    person_git(repo.work_tree, "gc", "--quiet", "--prune=now")  # no loose object left
    assert not any((repo.git_dir / "objects").glob("??/*"))

    assert repo.committed_files("warm", head) == (head, {"2026-01-01.md": retention.blob_id(b"one\n")})


@pytest.mark.parametrize(
    "damage",
    [lambda data: b"not zlib", lambda data: data + b"garbage"],
    ids=["not zlib", "bytes after its zlib stream"],
)
def test_a_damaged_loose_object_is_left_to_git_which_refuses_it(
    repo: GitRepo, damage: Callable[[bytes], bytes]
) -> None:
    write(repo.work_tree / "warm" / "2026-01-01.md", "one\n")
    head = snapshot(repo)
    commit_file = repo.git_dir / "objects" / head[:2] / head[2:]
    os.chmod(commit_file, 0o644)
    commit_file.write_bytes(damage(commit_file.read_bytes()))

    with pytest.raises(GitError):  # git refuses it; memd does not trust it either
        repo.committed_files("warm", head)


def sha256_workspace(tmp_path: Path) -> Path:
    """A workspace whose own repository (a person's) has SHA-256 object ids, with a day file and learnings."""
    ws = make_workspace(tmp_path / "ws")
    person_git(ws, "init", "--quiet", "--object-format=sha256", "--initial-branch=main")
    write(ws / "warm" / "2026-01-01.md", "one\n")
    write(ws / "cold" / "MEMORY.md", "# Agent Memory\n")
    return ws


def test_a_sha256_repository_is_read_from_its_loose_objects_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = sha256_workspace(tmp_path)
    person_git(ws, "add", "warm")
    person_git(ws, "commit", "--quiet", "-m", "day")
    head = person_git(ws, "rev-parse", "HEAD").strip()
    r = locate(ws, tmp_path / "state", adopt=True)
    trace = tmp_path / "git-trace"
    with monkeypatch.context() as m:
        _traced_gits(r, trace, m)
        found = r.committed_files("warm", head)

    assert len(head) == 64 and not trace.exists()  # read from the objects, no git process
    assert found == (head, _ls_tree_blobs(r, head, "warm"))


def test_a_repository_with_replace_refs_is_asked_of_git(repo: GitRepo) -> None:
    write(repo.work_tree / "warm" / "2026-01-01.md", "one\n")
    first = snapshot(repo)
    write(repo.work_tree / "warm" / "2026-01-01.md", "two\n")
    second = snapshot(repo)
    person_git(repo.work_tree, "replace", first, second)  # git now reads the second commit where the first is named

    assert repo.committed_files("warm", first) == (first, {"2026-01-01.md": retention.blob_id(b"two\n")})


def test_the_first_snapshot_of_a_sha256_repository_lists_what_it_staged_from_the_index_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = locate(sha256_workspace(tmp_path), tmp_path / "state", adopt=True)
    trace = tmp_path / "git-trace"
    _traced_gits(r, trace, monkeypatch)

    assert sorted(stage(r)) == ["cold/MEMORY.md", "warm/2026-01-01.md"]
    assert "ls-files" not in trace.read_text()


def test_the_first_snapshot_of_a_new_repository_lists_what_it_staged_from_the_index_file(
    repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "git-trace"
    _traced_gits(repo, trace, monkeypatch)
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    write(repo.work_tree / "warm" / "2026-01-01.md", "day\n")
    write(repo.work_tree / "notes.txt", "outside the snapshot paths\n")

    assert sorted(stage(repo)) == ["hot/context.json", "warm/2026-01-01.md"]
    assert "ls-files" not in trace.read_text()


def test_a_first_snapshot_where_someone_staged_before_lists_only_the_snapshot_paths(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    person_git(ws, "init", "--quiet", "--initial-branch=main")
    write(ws / "README.md", "a person's\n")
    person_git(ws, "add", "README.md")
    write(ws / "cold" / "MEMORY.md", "# Agent Memory\n")
    r = locate(ws, tmp_path / "state", adopt=True)

    paths = stage(r)
    r.commit(paths, "memd: first", "", {})

    assert paths == ["cold/MEMORY.md"]
    assert person_git(ws, "ls-tree", "-r", "--name-only", "HEAD").split() == ["cold/MEMORY.md"]
    assert person_git(ws, "diff", "--cached", "--name-only") == "README.md\n"  # still staged, not memd's


@pytest.mark.parametrize("was", ["file", "symlink"])
def test_a_file_that_became_a_directory_is_committed_as_the_directory_and_snapshots_go_on(
    repo: GitRepo, was: str
) -> None:
    write(repo.work_tree / "hot" / "context.json", "{}\n")
    if was == "file":
        write(repo.work_tree / "hot" / "notes", "one file\n")
    else:
        os.symlink("context.json", repo.work_tree / "hot" / "notes")
    snapshot(repo)
    os.unlink(repo.work_tree / "hot" / "notes")
    write(repo.work_tree / "hot" / "notes" / "a.md", "now a directory\n")

    snapshot(repo)
    write(repo.work_tree / "hot" / "context.json", '{"task": "later"}\n')
    snapshot(repo)

    tree = person_git(repo.work_tree, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert sorted(tree) == ["hot/context.json", "hot/notes/a.md"]
    assert person_git(repo.work_tree, "status", "--porcelain", "--", "hot") == ""


def test_a_directory_that_became_a_file_is_committed_as_the_file(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "notes" / "a.md", "a directory\n")
    snapshot(repo)
    shutil.rmtree(repo.work_tree / "hot" / "notes")
    write(repo.work_tree / "hot" / "notes", "now one file\n")

    snapshot(repo)

    assert person_git(repo.work_tree, "ls-tree", "-r", "--name-only", "HEAD").split() == ["hot/notes"]


def test_a_file_that_became_an_empty_directory_does_not_stop_the_snapshots_after_it(repo: GitRepo) -> None:
    write(repo.work_tree / "hot" / "notes", "one file\n")
    snapshot(repo)
    os.unlink(repo.work_tree / "hot" / "notes")
    (repo.work_tree / "hot" / "notes").mkdir()

    assert repo.commit(stage(repo), "memd: writes", "", {}) == ""  # git records no directory: nothing to commit
    write(repo.work_tree / "cold" / "MEMORY.md", "# Agent Memory\n")
    snapshot(repo)

    assert "cold/MEMORY.md" in person_git(repo.work_tree, "ls-tree", "-r", "--name-only", "HEAD").split()


def test_snapshots_write_loose_objects_at_zlibs_fastest_level_whatever_the_users_setting(
    repo: GitRepo, temporary_home: Path
) -> None:
    write(temporary_home / ".gitconfig", "[core]\n\tcompression = 9\n")
    write(repo.work_tree / "warm" / "2026-01-01.md", "a day that grows all day\n" * 1000)

    head = snapshot(repo)

    blob = retention.blob_id(("a day that grows all day\n" * 1000).encode())
    assert (repo.git_dir / "objects" / blob[:2] / blob[2:]).read_bytes()[:2] == b"\x78\x01"  # zlib, level 1
    assert (repo.git_dir / "objects" / head[:2] / head[2:]).read_bytes()[:2] == b"\x78\x01"


def test_the_trailers_of_the_commits_that_changed_a_file_are_read_back_newest_first(repo: GitRepo) -> None:
    """What a restore of cold/MEMORY.md tries, newest first: the run marks of the commits that made the file."""
    memory = repo.work_tree / "cold" / "MEMORY.md"
    write(memory, "# Agent Memory\n")
    snapshot(repo, **{"Memd-Cold-Run": "10:aa"})
    write(repo.work_tree / "hot" / "context.json", '{"task": "other"}\n')
    snapshot(repo, **{"Memd-Cold-Run": "99:hot-only"})  # did not change MEMORY.md: not asked
    write(memory, "# Agent Memory\n\n## A\n")
    snapshot(repo)  # a commit without one (a merge, a person's): left out
    write(memory, "# Agent Memory\n\n## B\n")
    head = snapshot(repo, **{"Memd-Cold-Run": "12:bb"})

    assert git_history.trailers_of_changes(repo, head, "cold/MEMORY.md", "Memd-Cold-Run", 20) == ["12:bb", "10:aa"]
    assert git_history.trailers_of_changes(repo, head, "cold/MEMORY.md", "Memd-Cold-Run", 1) == ["12:bb"]
    assert git_history.trailers_of_changes(repo, f"{head}~1", "cold/MEMORY.md", "Memd-Cold-Run", 20) == ["10:aa"]
