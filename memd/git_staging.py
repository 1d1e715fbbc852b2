"""What a snapshot commits: staging a workspace's snapshot paths in its repository (`stage`, and `stage_snapshot`
with the hot files a sync left as they were held back), committing what was staged (`commit_staged`), and whether
HEAD already holds the day files a retention sweep is about to delete (`held_at_head`). Blocking: run them in a
worker thread.

One `git add` in the usual case: everything under the snapshot paths, the normal way (ignore rules respected,
so editors' temporaries stay out; a file that vanishes while git looks at it is retried, never a failed
snapshot), with the tier files proper named one by one. Only when git says an ignore rule held a named path back
(the user's global excludes, `core.excludesFile`, or a `.gitignore` in the workspace) does a second add stage the
tier files with `--force`: no ignore rule decides what memd keeps. memd's own files (its `.memd-tmp-`
temporaries, the workspace lock `.memd.lock`) are left out by exclude pathspecs on every `add`. Imports
memd.gitrepo, memd.gitrepo_setup, memd.git_objects, memd.fsio and memd.retention (its `Held`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from memd import fsio, git_objects
from memd.gitrepo import ARCHIVE_DIR, DAY_FILE, OWN_FILES_PATHSPECS, TIER_FILES, WARM_DIR, GitRepo
from memd.gitrepo_setup import GIT_TIMEOUT, LOCK_FILE, GitError
from memd.retention import Held

ADD_ATTEMPTS = 5  # `git add`s in a row that may each lose a file someone deleted while git was looking at it
# An index bigger than this holds more than a workspace's files (an adopted repository's code): not read for
# `nothing_else_staged`, whose answer would be no anyway. memd's own hold a few hundred bytes a file.
ALONE_INDEX_MAX_BYTES = 256 * 1024


def stage(repo: GitRepo, lock_wait: float = GIT_TIMEOUT, hold: Sequence[str] = ()) -> list[str]:
    """Stage the snapshot paths but the files in `hold` (their index entries stay as they are). Returns the
    files that differ from HEAD (deletions included); [] if none.

    One pass, and a second only when the first could not stage everything. (1) `git add --all --ignore-errors`
    of the snapshot paths and, named one by one, the tier files that exist (listed here without following a
    symlink), respecting ignore rules (editors' temporaries stay out), recording changes and deletions; a file
    deleted while git looks at it (an editor's temporary, typically) makes git stop or skip it: that add is run
    again, and if files keep vanishing this pass is left to the next snapshot. Any other error fails. (2) Only
    when git reported a named path as ignored, or pass 1 was left: the tier files added with `--force`, so that
    no ignore rule decides what memd keeps; this pass must succeed. Naming the tier files in pass 1 is what makes
    git report an ignore rule that holds one back; without such a rule (most workspaces) a snapshot stages with
    one process. memd's own files are excluded by pathspec in both."""
    repo.check_safe()
    repo.wait_for_index_lock(lock_wait)
    present = _present(repo)
    if not present:
        return []
    held = tuple(f":(exclude,literal){path}" for path in hold)
    index_was_empty = not (repo.git_dir / "index").exists()  # a new repository: what gets staged is all it holds

    def everything() -> list[str]:
        paths = _present(repo)
        return [*paths, *_tier_files(repo, hold)] if paths else []

    if not _add(repo, everything, ("--all", "--ignore-errors"), must_succeed=False, excluded=held):
        _add(repo, lambda: _tier_files(repo, hold), ("--force",), must_succeed=True, excluded=held)
    excluded = (*OWN_FILES_PATHSPECS, *held)
    diff = ("diff", "--cached", "--name-only", "--no-renames", "-z", "HEAD", "--", *present, *excluded)
    listing: bytes | None = None
    if repo.has_commits:
        try:
            listing = repo.run(*diff)
        except GitError:
            if repo.has_head():
                raise
            repo.has_commits = False  # HEAD gone meanwhile (the repository made again, the branch deleted)
    elif repo.has_head():
        repo.has_commits = True
        listing = repo.run(*diff)
    if listing is None:  # no commit yet: everything staged is new
        if index_was_empty and (staged := _index_paths(repo)) is not None:
            return [name for name in staged if _under(name, present)]
        listing = repo.run("ls-files", "-z", "--", *present, *excluded)
    return [name for name in listing.decode("utf-8", "surrogateescape").split("\0") if name]


def nothing_else_staged(repo: GitRepo, hold: Sequence[str] = ()) -> bool:
    """After `stage`: does the index hold nothing but the snapshot paths, none of them held, none of memd's own
    files? Then a plain `git commit` commits exactly what `GitRepo.commit` with `--only` would, without git adding
    the listed files again from the work tree: `--only` builds its commit from HEAD and hashes each listed file
    once more (0.26 s of CPU for a 40 MB day file, at every snapshot of a busy day, on top of the `add`'s 0.30 s).
    False (commit with `--only`) whenever it cannot tell: an index this does not read, too big to be memd's alone
    (an adopted repository's), an unmerged or intent-to-add entry."""
    try:
        if (repo.git_dir / "index").stat().st_size > ALONE_INDEX_MAX_BYTES:
            return False
    except OSError:
        return False
    paths = _index_paths(repo, plain_only=True)
    if not paths:
        return False
    held = set(hold)
    return all(_under(path, repo.paths) and path not in held and not _own_file(path) for path in paths)


class Staged(NamedTuple):
    """What `stage_snapshot` staged, for `commit_staged`; false when nothing differs from HEAD."""

    paths: list[str]  # what differs from HEAD: the commit's paths
    alone: bool  # the index holds nothing else (nothing_else_staged): committed as it is

    def __bool__(self) -> bool:
        return bool(self.paths)


def stage_snapshot(repo: GitRepo, hot_kept: dict[str, bytes], whole: bool, lock_wait: float) -> Staged:
    """Stage the workspace or its mirror, leaving out the hot files that still hold what this machine last
    committed before a sync moved HEAD past them (`hot_kept`, path -> bytes: the snapshotter's
    `RepoState.hot_kept`), unless `whole`. A file changed since, or every one when `whole`, is dropped from
    `hot_kept`."""
    hold: list[str] = []
    for path, kept in list(hot_kept.items()):
        try:
            unchanged = (repo.work_tree / path).read_bytes() == kept
        except OSError:
            unchanged = False
        if unchanged and not whole:
            hold.append(path)
        else:  # changed here (or committed whole now): from here on it is committed as usual
            del hot_kept[path]
    paths = stage(repo, lock_wait, hold)
    return Staged(paths, bool(paths) and nothing_else_staged(repo, hold))


def commit_staged(repo: GitRepo, staged: Staged, subject: str, body: str, trailers: dict[str, str]) -> str:
    """Commit what `stage_snapshot` staged: the index as it is when it holds nothing else, else `--only` its
    paths. Returns the commit."""
    return repo.commit(staged.paths, subject, body, trailers, only=not staged.alone)


def held_at_head(repo: GitRepo, directory: Path, days: Sequence[str]) -> Held | None:
    """What HEAD holds of `warm/`, when it holds each of the day files `days` (in `directory`) exactly as the file
    is now; else None, and the caller commits first (`Snapshotter.before_destructive`). One `ls-tree`, and each
    day file read and hashed."""
    repo.check_safe()
    head = repo.head_commit()
    if not head:
        return None
    head, blobs = repo.committed_files("warm", head)
    held = Held(head, blobs)
    for name in days:
        data = fsio.read_bytes(directory / name)
        if data is None or held.why_not(name, data) is not None:
            return None
    return held


def _own_file(path: str) -> bool:
    """One of memd's own files, which `OWN_FILES_PATHSPECS` keep out of every snapshot."""
    return path == LOCK_FILE or fsio.TEMP_MARKER in path.rpartition("/")[2]


def _index_paths(repo: GitRepo, plain_only: bool = False) -> list[str] | None:
    """The index's paths read from the file (`git_objects.index_paths`), or None: ask git."""
    try:
        config = (repo.git_dir / "config").read_text(encoding="utf-8", errors="replace").lower()
    except OSError:
        return None
    declared = _OBJECT_FORMAT.search(config)
    form = declared["format"].strip('"') if declared else "sha1"
    if form not in ("sha1", "sha256"):
        return None  # an object format this does not know
    return git_objects.index_paths(repo.git_dir, sha256=form == "sha256", plain_only=plain_only)


def _present(repo: GitRepo) -> list[str]:
    return [p for p in repo.paths if (repo.work_tree / p).exists() or _tracked(repo, p)]


def _add(
    repo: GitRepo,
    pathspecs: Callable[[], list[str]],
    options: Sequence[str],
    must_succeed: bool,
    excluded: Sequence[str],
) -> bool:
    """`git add` of `pathspecs()` (listed again before each try), tried again while the only trouble is files
    that vanished as git looked at them. True when everything named was staged; False when git reported named
    paths as ignored (the rest is staged), or after ADD_ATTEMPTS of vanishing files (GitError instead if
    `must_succeed`)."""
    stderr = ""
    for _ in range(ADD_ATTEMPTS):
        paths = pathspecs()
        if not paths:
            return True
        args = ("add", *options, "--", *paths, *OWN_FILES_PATHSPECS, *excluded)
        out = repo.attempt(*args)  # in the C locale: git's messages are parsed below
        if out.returncode == 0:
            return True
        stderr = out.stderr.decode("utf-8", "surrogateescape")
        vanished, other, ignored = _add_trouble(stderr, repo.work_tree, repo.paths)
        if other or not (vanished or ignored):
            message = "\n".join(other) or stderr.strip() or f"exit {out.returncode}"
            raise GitError(f"git add failed in {repo.git_dir}: {message}")
        if not vanished:  # only the report of ignored paths: the rest is staged
            return False
    if must_succeed:
        raise GitError(f"git add failed in {repo.git_dir} {ADD_ATTEMPTS} times, files vanishing: {stderr.strip()}")
    return False


def _tier_files(repo: GitRepo, hold: Sequence[str]) -> list[str]:
    """The tier files that exist under the snapshot paths as regular files, reached without a symlink, but those
    in `hold`: `:(literal)` pathspecs (an archive's name may hold a glob character)."""
    found = [name for name in TIER_FILES if _regular_file(repo, name)]
    for directory, match in (
        (WARM_DIR, DAY_FILE.fullmatch),
        (ARCHIVE_DIR, lambda name: name.endswith(".md.gz") and not name.startswith(".")),
    ):
        if not _real_dir(repo, directory):
            continue
        try:
            with os.scandir(repo.work_tree / directory) as entries:
                found += [
                    f"{directory}/{e.name}" for e in entries if match(e.name) and e.is_file(follow_symlinks=False)
                ]
        except OSError:  # gone, or not a directory any more: nothing of it to add
            continue
    wanted = [name for name in found if _under(name, repo.paths) and name not in hold]
    return [f":(literal){name}" for name in sorted(wanted)]


def _real_dir(repo: GitRepo, relative: str) -> bool:
    """Is every component of `relative` a directory, none a symlink?"""
    parts = relative.split("/")
    return all(fsio.is_real_dir(repo.work_tree.joinpath(*parts[: i + 1])) for i in range(len(parts)))


def _regular_file(repo: GitRepo, relative: str) -> bool:
    directory, _, _ = relative.rpartition("/")
    if directory and not _real_dir(repo, directory):
        return False
    try:
        return stat.S_ISREG(os.lstat(repo.work_tree / relative).st_mode)
    except OSError:
        return False


def _tracked(repo: GitRepo, path: str) -> bool:
    if not (repo.git_dir / "HEAD").exists():
        return False
    return bool(repo.run("ls-files", "--", path, check=False).strip())


_OBJECT_FORMAT = re.compile(r"^\s*objectformat\s*=\s*(?P<format>\S+)", re.MULTILINE)  # in [extensions]
# `git add` messages, in the C locale: a file deleted between git's directory scan and its lstat/open/readlink.
_GONE = re.compile(r"""(?:error|fatal): [^'"]*(['"])(?P<path>.*)\1\)?: (?:No such file or directory|Not a directory)""")
_UNINDEXED = re.compile(r"error: unable to index file '(?P<path>.*)'")
_NO_MATCH = re.compile(r"fatal: pathspec '(?:[:][(]literal[)])?(?P<path>.*)' did not match any files")
_IGNORED_REPORT = "The following paths are ignored by one of your .gitignore files:"
_CONSEQUENCES = ("fatal: adding files failed", "fatal: updating files failed")


def _add_trouble(stderr: str, work_tree: Path, scope: Sequence[str]) -> tuple[list[str], list[str], bool]:
    """Sort what a failed `git add` said: (the paths under `scope` that vanished while git looked at them, every
    other error line, whether it reported ignored paths). Hints, warnings, the paths the report lists and the
    "adding files failed" that follows an error are none of them."""

    vanished: list[str] = []
    unindexed: list[str] = []
    other: list[str] = []
    ignored = in_report = False
    for line in stderr.splitlines():
        if not line.strip() or line.startswith(("hint: ", "warning: ")) or line in _CONSEQUENCES:
            continue
        if line == _IGNORED_REPORT:
            ignored = in_report = True
            continue
        if in_report and not line.startswith(("error: ", "fatal: ")):
            continue  # a path the report lists
        in_report = False
        gone, no_match = _GONE.fullmatch(line), _NO_MATCH.fullmatch(line)
        if gone and _under(gone["path"], scope):
            vanished.append(gone["path"])
        elif no_match and _under(no_match["path"], scope) and not os.path.lexists(work_tree / no_match["path"]):
            vanished.append(no_match["path"])
        elif unindexable := _UNINDEXED.fullmatch(line):
            unindexed.append(unindexable["path"])  # follows the reason: an error only if that was not vanishing
        else:
            other.append(line)
    other += [f"error: unable to index file '{path}'" for path in unindexed if path not in vanished]
    return vanished, other, ignored


def _under(path: str, paths: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in paths)
