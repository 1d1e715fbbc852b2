"""The mirror a snapshot stages from (memd.git_mirror), with the real git CLI.

What must hold: the mirror holds exactly what the workspace held when it was made (hard links for files memd
replaces whole, copies of the day files memd appends to, symbolic links as links, never followed), so a commit
staged from it is the state under the writer even while writes go on; an unchanged file is not hashed again at the
next snapshot; a mirror left by an interrupted snapshot goes; none is made where hard links cannot reach. Its
directories stay from one snapshot to the next and change nothing that is committed.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from harness import person_env

from memd import git_mirror
from memd.git_staging import stage
from memd.gitrepo import GitRepo
from memd.gitrepo_setup import find_git

GIT = find_git()
PATHS = ("hot", "warm", "cold")
TODAY = "2026-12-02.md"
OLD_DAY = "2026-11-20.md"


def person_git(cwd: Path, *args: str) -> str:
    out = subprocess.run([GIT, *args], cwd=cwd, env=person_env(), capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"git {' '.join(args)} failed: {out.stderr}"
    return out.stdout


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    ws = tmp_path / "ws"
    for tier in PATHS:
        (ws / tier).mkdir(parents=True)
    (ws / "hot" / "context.json").write_text('{"task": "t"}\n')
    (ws / "cold" / "MEMORY.md").write_text("# Memory\n\n## Ops\n- [2026-12-01] keep backups\n")
    (ws / "warm" / OLD_DAY).write_text("# Activity Log 2026-11-20\n")
    (ws / "warm" / TODAY).write_text("# Activity Log 2026-12-02\n\n### 09:00:00 - first\n")
    r = GitRepo.locate(ws, tmp_path / "state" / "ws.git", GIT, PATHS, False)
    r.ensure("main")
    return r


def mirrored(repo: GitRepo) -> Path | None:
    """The mirror as a snapshot makes it: built (under the writer), then completed (after it)."""
    mirror = git_mirror.build(repo, {TODAY})
    return None if mirror is None else git_mirror.complete(mirror)


def commit_from_mirror(repo: GitRepo, tree: Path) -> str:
    view = repo.over(tree)
    paths = stage(view)
    assert paths
    rev = view.commit(paths, "memd: writes", "", {"Memd-Reason": "writes"})
    git_mirror.clear(tree)
    return rev


def show(repo: GitRepo, path: str) -> str:
    return person_git(repo.root, f"--git-dir={repo.git_dir}", "show", f"HEAD:{path}")


def test_files_memd_replaces_whole_are_linked_and_the_files_it_appends_to_are_copied(repo: GitRepo) -> None:
    """Today's day file, and cold/MEMORY.md, which a burst of learnings appends to (and a failed batch cuts back)."""
    ws = repo.root
    os.chmod(ws / "hot" / "context.json", 0o640)
    tree = mirrored(repo)
    assert tree == repo.git_dir / git_mirror.MIRROR_DIR

    for linked in ("hot/context.json", f"warm/{OLD_DAY}"):
        assert os.stat(tree / linked).st_ino == os.stat(ws / linked).st_ino, linked
    for name in (f"warm/{TODAY}", "cold/MEMORY.md"):
        copied = tree / name
        assert os.stat(copied).st_ino != os.stat(ws / name).st_ino, name
        assert copied.read_bytes() == (ws / name).read_bytes()
    assert oct(os.stat(tree / "hot" / "context.json").st_mode & 0o777) == "0o640"


def test_a_commit_from_the_mirror_is_the_state_it_was_made_of_while_writes_go_on(repo: GitRepo) -> None:
    ws = repo.root
    tree = mirrored(repo)
    assert tree is not None
    with (ws / "warm" / TODAY).open("a") as f:  # the writer, let go: an append lands while git stages
        f.write("\n### 09:01:00 - second\n")
    with (ws / "cold" / "MEMORY.md").open("a") as f:  # and one of a burst of learnings
        f.write("\n## Ops\n- [2026-12-02] appended later\n")
    (ws / "hot" / "context.json.new").write_text('{"task": "later"}\n')
    os.replace(ws / "hot" / "context.json.new", ws / "hot" / "context.json")  # a hot write: a new file

    commit_from_mirror(repo, tree)

    assert "second" not in show(repo, f"warm/{TODAY}")
    assert "first" in show(repo, f"warm/{TODAY}")
    assert show(repo, "cold/MEMORY.md") == "# Memory\n\n## Ops\n- [2026-12-01] keep backups\n"
    assert show(repo, "hot/context.json") == '{"task": "t"}\n'
    assert files_in(tree) == []


def test_symbolic_links_are_mirrored_as_links_and_never_followed(repo: GitRepo, tmp_path: Path) -> None:
    ws = repo.root
    secret = tmp_path / "secret.txt"
    secret.write_text("not for git\n")
    (ws / "cold" / "leak.md").symlink_to(secret)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.md").write_text("outside\n")
    (ws / "warm" / "elsewhere").symlink_to(outside)
    os.mkfifo(ws / "cold" / "pipe")
    (ws / "cold" / "x.memd-tmp-1").write_text("half-written\n")

    tree = mirrored(repo)
    assert tree is not None
    assert (tree / "cold" / "leak.md").is_symlink() and os.readlink(tree / "cold" / "leak.md") == str(secret)
    assert (tree / "warm" / "elsewhere").is_symlink()
    assert not (tree / "cold" / "pipe").exists()
    assert not (tree / "cold" / "x.memd-tmp-1").exists()
    commit_from_mirror(repo, tree)
    tracked = person_git(ws, f"--git-dir={repo.git_dir}", "ls-tree", "-r", "HEAD").splitlines()
    modes = {line.split("\t")[1]: line.split()[0] for line in tracked}
    assert modes.get("cold/leak.md") == "120000"  # the link itself, as git records one
    assert "warm/elsewhere/big.md" not in modes


def test_an_unchanged_file_is_not_hashed_again_at_the_next_snapshot(repo: GitRepo) -> None:
    commit_from_mirror(repo, mirrored(repo) or Path("/nonexistent"))
    with (repo.root / "warm" / TODAY).open("a") as f:
        f.write("\n### 09:02:00 - third\n")
    commit_from_mirror(repo, mirrored(repo) or Path("/nonexistent"))

    # Index entries whose stat data no longer match the file are what git hashes again: only the copied files.
    dirty = repo.run("diff-files", "--name-only").decode().split()
    assert sorted(dirty) == ["cold/MEMORY.md", f"warm/{TODAY}"]


def test_a_mirror_left_by_an_interrupted_snapshot_is_replaced(repo: GitRepo) -> None:
    stale = repo.git_dir / git_mirror.MIRROR_DIR / "hot"
    stale.mkdir(parents=True)
    (stale / "leftover.json").write_text("{}")

    tree = mirrored(repo)
    assert tree is not None
    assert not (tree / "hot" / "leftover.json").exists()
    assert (tree / "hot" / "context.json").exists()


def files_in(tree: Path) -> list[str]:
    return sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if not p.is_dir() or p.is_symlink())


def test_between_snapshots_the_mirror_keeps_its_directories_and_nothing_else(repo: GitRepo) -> None:
    tree = mirrored(repo)
    assert tree is not None
    commit_from_mirror(repo, tree)

    assert files_in(tree) == []
    assert sorted(p.name for p in tree.iterdir()) == ["cold", "hot", "warm"]
    assert (repo.root / "hot" / "context.json").stat().st_nlink == 1  # no link to a workspace file is left


def test_a_kept_directory_where_the_workspace_now_has_a_file_gives_way_to_the_file(repo: GitRepo) -> None:
    (repo.root / "hot" / "notes").mkdir()
    (repo.root / "hot" / "notes" / "a.md").write_text("a\n")
    commit_from_mirror(repo, mirrored(repo) or Path("/nonexistent"))
    shutil.rmtree(repo.root / "hot" / "notes")
    (repo.root / "hot" / "notes").write_text("a file now\n")

    commit_from_mirror(repo, mirrored(repo) or Path("/nonexistent"))

    assert show(repo, "hot/notes") == "a file now\n"
    assert "hot/notes/a.md" not in person_git(repo.root, f"--git-dir={repo.git_dir}", "ls-tree", "-r", "HEAD")


def test_a_directory_the_workspace_no_longer_has_is_committed_as_gone(repo: GitRepo) -> None:
    archive = repo.root / "warm" / "archive"
    archive.mkdir()
    (archive / "2026-10.md.gz").write_bytes(b"not really gzip")
    commit_from_mirror(repo, mirrored(repo) or Path("/nonexistent"))
    shutil.rmtree(archive)

    commit_from_mirror(repo, mirrored(repo) or Path("/nonexistent"))

    tree = person_git(repo.root, f"--git-dir={repo.git_dir}", "ls-tree", "-r", "--name-only", "HEAD").split()
    assert "warm/archive/2026-10.md.gz" not in tree and f"warm/{TODAY}" in tree


def test_a_directory_the_workspace_no_longer_has_is_not_kept_in_the_mirror(repo: GitRepo) -> None:
    (repo.root / "hot" / "drafts").mkdir()
    (repo.root / "hot" / "drafts" / "a.md").write_text("a\n")
    first = git_mirror.build(repo, {TODAY})
    assert first is not None
    git_mirror.clear(git_mirror.complete(first), first.dirs)
    assert (first.tree / "hot" / "drafts").is_dir()  # kept while the workspace has it
    shutil.rmtree(repo.root / "hot" / "drafts")

    second = git_mirror.build(repo, {TODAY})
    assert second is not None
    git_mirror.clear(git_mirror.complete(second), second.dirs)

    assert not (second.tree / "hot" / "drafts").exists()
    assert sorted(p.name for p in second.tree.iterdir()) == ["cold", "hot", "warm"]


def test_no_mirror_where_the_repository_is_on_another_file_system(tmp_path: Path) -> None:
    other = Path("/dev/shm")
    if not other.is_dir() or os.stat(other).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a file system of its own")
    ws = tmp_path / "ws"
    for tier in PATHS:
        (ws / tier).mkdir(parents=True)
    (ws / ".git").mkdir()  # a .git memd did not make: the repository goes to the state directory
    state = other / f"memd-mirror-{os.getpid()}"
    try:
        r = GitRepo.locate(ws, state / "ws.git", GIT, PATHS, False)
        r.ensure("main")
        assert r.git_dir == state / "ws.git"
        assert git_mirror.build(r, {TODAY}) is None
    finally:
        shutil.rmtree(state, ignore_errors=True)


# --- a big day: copied after the writer is let go --------------------------------------------------------------


def big_day(repo: GitRepo) -> bytes:
    entry = "\n### 09:00:00 - an entry of a long day\n- **files**: memd/writer.py\n"
    data = ("# Activity Log 2026-12-02\n" + entry * (git_mirror.PREFIX_COPY_BYTES // len(entry) + 10)).encode()
    (repo.root / "warm" / TODAY).write_bytes(data)
    return data


def test_a_big_day_is_copied_after_the_writer_exactly_as_it_was_under_it(repo: GitRepo) -> None:
    data = big_day(repo)
    mirror = git_mirror.build(repo, {TODAY})
    assert mirror is not None
    assert not (mirror.tree / "warm" / TODAY).exists()  # nothing copied under the writer
    with (repo.root / "warm" / TODAY).open("a") as f:  # the writer, let go: memd appends while git stages
        f.write("\n### 23:59:00 - after the snapshot\n")

    commit_from_mirror(repo, git_mirror.complete(mirror))

    assert show(repo, f"warm/{TODAY}").encode() == data


def test_a_big_live_file_replaced_before_it_was_copied_is_committed_as_it_was_under_the_writer(
    repo: GitRepo,
) -> None:
    """A person's save of a day, an ordinary learning's replace of a big MEMORY.md: the snapshot pairs the file
    with the rest as they all were under the writer (the replace is the next snapshot's)."""
    day = big_day(repo)
    memory = repo.root / "cold" / "MEMORY.md"
    memory.write_bytes(
        b"# Memory\n" + b"".join(b"\n## T%d\n- [2026-12-01] learning %d\n" % (n, n) for n in range(9000))
    )
    before = memory.read_bytes()
    assert len(before) > git_mirror.PREFIX_COPY_BYTES
    mirror = git_mirror.build(repo, {TODAY})
    assert mirror is not None
    saved = b"# Activity Log 2026-12-02\n\n### 10:00:00 - a person's shorter version\n"
    (repo.root / "warm" / "editor.tmp").write_bytes(saved)
    os.replace(repo.root / "warm" / "editor.tmp", repo.root / "warm" / TODAY)
    (repo.root / "cold" / "next.tmp").write_bytes(b"# Memory\n\n## T0\n- [2026-12-03] newer\n" + before[9:])
    os.replace(repo.root / "cold" / "next.tmp", memory)

    tree = git_mirror.complete(mirror)
    assert not list(tree.rglob("*.memd-tmp-*"))  # the pins are gone before git looks
    commit_from_mirror(repo, tree)

    assert show(repo, f"warm/{TODAY}").encode() == day
    assert show(repo, "cold/MEMORY.md").encode() == before


def test_a_big_day_rewritten_in_place_before_it_was_copied_is_committed_whole_never_a_torn_prefix(
    repo: GitRepo,
) -> None:
    data = big_day(repo)
    mirror = git_mirror.build(repo, {TODAY})
    assert mirror is not None
    rewritten = data.replace(b"an entry of a long day", b"AN ENTRY OF A LONG DAY") + b"\n### 11:00:00 - more\n"
    with (repo.root / "warm" / TODAY).open("r+b") as f:  # same inode, longer, other bytes where the end was
        f.write(rewritten)

    commit_from_mirror(repo, git_mirror.complete(mirror))

    assert show(repo, f"warm/{TODAY}").encode() == rewritten


@pytest.mark.parametrize("refusal", ["EXDEV", "ENOSYS", "EPERM", "absent", "copies nothing"])
def test_a_big_day_is_copied_by_hand_where_the_kernel_will_not_copy_it(
    repo: GitRepo, monkeypatch: pytest.MonkeyPatch, refusal: str
) -> None:
    data = big_day(repo)
    if refusal == "absent":  # not Linux
        monkeypatch.delattr(os, "copy_file_range")
    elif refusal == "copies nothing":  # some FUSE file systems answer 0 before the end
        monkeypatch.setattr(os, "copy_file_range", lambda *_args: 0)
    else:
        code = getattr(errno, refusal)

        def refuse(*_args: object) -> int:
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(os, "copy_file_range", refuse)
    mirror = git_mirror.build(repo, {TODAY})
    assert mirror is not None
    with (repo.root / "warm" / TODAY).open("a") as f:
        f.write("\n### 23:59:00 - after the snapshot\n")

    commit_from_mirror(repo, git_mirror.complete(mirror))

    assert len(data) > git_mirror._CHUNK  # copied in more than one piece
    assert show(repo, f"warm/{TODAY}").encode() == data


def test_a_kernel_copy_that_stops_half_way_is_finished_by_hand(repo: GitRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    data = big_day(repo)
    real = os.copy_file_range
    calls: list[int] = []

    def once_then_refuse(src: int, dst: int, count: int, offset_src: int | None = None) -> int:
        calls.append(count)
        if len(calls) > 1:
            raise OSError(errno.EXDEV, "cross-device")
        return real(src, dst, min(count, 1000), offset_src)

    monkeypatch.setattr(os, "copy_file_range", once_then_refuse)
    mirror = git_mirror.build(repo, {TODAY})
    assert mirror is not None

    commit_from_mirror(repo, git_mirror.complete(mirror))

    assert len(calls) == 2
    assert show(repo, f"warm/{TODAY}").encode() == data


def test_another_error_of_the_kernel_copy_is_not_hidden(repo: GitRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    big_day(repo)

    def no_space(*_args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "copy_file_range", no_space)
    mirror = git_mirror.build(repo, {TODAY})
    assert mirror is not None

    with pytest.raises(OSError) as raised:
        git_mirror.complete(mirror)
    assert raised.value.errno == errno.ENOSPC


@pytest.mark.parametrize("size", ["small", "big"])
def test_a_copy_is_never_newer_than_the_racy_margin_so_git_does_not_hash_it_again_at_the_commit(
    repo: GitRepo, size: str
) -> None:
    """git takes a file whose mtime is not older than the index (in whole seconds here) for "racily clean" and
    hashes it again at the commit's refresh: today's 40 MB day, twice per snapshot. A copy made just now is dated
    RACY_MARGIN_NS back; one whose source is older keeps its source's time."""
    if size == "big":
        big_day(repo)
    day = repo.root / "warm" / TODAY
    os.utime(day)  # written just now
    old = repo.root / "cold" / "MEMORY.md"
    week_ago = os.stat(old).st_mtime_ns - 7 * 86_400 * 10**9
    os.utime(old, ns=(week_ago, week_ago))

    before = time.time_ns()
    tree = mirrored(repo)
    assert tree is not None

    assert os.stat(tree / "warm" / TODAY).st_mtime_ns <= before - git_mirror.RACY_MARGIN_NS + 10**9
    assert os.stat(tree / "warm" / TODAY).st_mtime_ns < os.stat(day).st_mtime_ns
    assert os.stat(tree / "cold" / "MEMORY.md").st_mtime_ns == week_ago
    commit_from_mirror(repo, tree)
    assert show(repo, f"warm/{TODAY}").encode() == day.read_bytes()
