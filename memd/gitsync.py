"""The git plumbing of a two-way sync, on one workspace's snapshot repository. Blocking: run it in a git thread.

Nothing here ever touches the work tree, leaves a merge in progress or moves a remote branch backwards: the
remote's branch is fetched into a private ref (`refs/memd/sync/remote`), the merge is `git merge-tree
--write-tree` (objects only: no index, no work tree, no MERGE_HEAD, so a kill at any moment leaves the repository
as it was), the merge commit is made with `commit-tree`, HEAD is moved with a compare-and-swap `update-ref`
(only over the commit the merge started from), and the push is a plain `git push` that the remote refuses unless it
fast-forwards. The merges of memd's files are git merge drivers (memd.merge_driver), declared through attributes
and `merge.memd-*.driver` passed on the merge's own command line; a repository memd made also gets them in its
`info/attributes` and config, so a person's `git pull` in it merges the same way.
Imports memd.gitrepo, memd.gitrepo_setup and memd.merge_driver.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from memd.gitrepo import ARCHIVE_DIR, DAY_FILE, TIER_FILES, WARM_DIR, GitRepo, redact_urls
from memd.gitrepo_setup import GitError
from memd.merge_driver import KINDS, kind_of

SYNC_REF = "refs/memd/sync/remote"
DAY_PATTERN = "warm/[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9].md"
ATTRIBUTES = (
    "# written by memd: how its files merge (memd.merge_driver)\n"
    f"{DAY_PATTERN} merge=memd-warm\n"
    "cold/MEMORY.md merge=memd-cold\n"
    "cold/PROPOSED.md merge=memd-proposed\n"
    "hot/*.json merge=memd-hot\n"
)
MERGE_TIMEOUT = 120.0  # seconds: a merge runs a driver process per file both sides changed
PACKAGE_PARENT = Path(__file__).resolve().parent.parent  # where `import memd` finds this package


def driver_command(python: str, kind: str) -> str:
    """The shell command git runs for one kind of file (`%O %A %B %P`: ancestor, ours and result, theirs, path)."""
    return (
        f"PYTHONPATH={shlex.quote(str(PACKAGE_PARENT))} {shlex.quote(python)} -m memd.merge_driver {kind} %O %A %B %P"
    )


def driver_options(python: str, attributes: Path) -> list[str]:
    options = ["-c", f"core.attributesFile={attributes}"]
    for kind in KINDS:
        options += ["-c", f"merge.memd-{kind}.name=memd {kind} merge", "-c", f"merge.memd-{kind}.driver="
                    + driver_command(python, kind)]  # fmt: skip
    return options


def write_attributes(path: Path) -> None:
    """The attributes file the merge reads (in memd's state directory: it applies to adopted repositories too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.read_text() == ATTRIBUTES:
            return
    except FileNotFoundError:
        pass
    tmp = path.with_name(path.name + ".memd-tmp")
    tmp.write_text(ATTRIBUTES)
    tmp.replace(path)


def install_drivers(repo: GitRepo, python: str) -> None:
    """In a repository memd made: the merge attributes in `info/attributes` and the drivers in its config, so a
    person's own `git pull` there merges memd's files as a sync does (kept current with the running python)."""
    if not repo.managed():
        return
    info = repo.git_dir / "info" / "attributes"
    try:
        current = info.read_text()
    except FileNotFoundError:
        current = ""
    missing = [line for line in ATTRIBUTES.splitlines() if line not in set(current.splitlines())]
    if missing:
        info.parent.mkdir(parents=True, exist_ok=True)
        sep = "" if not current or current.endswith("\n") else "\n"
        info.write_text(current + sep + "\n".join(missing) + "\n")
    for kind in KINDS:
        key, value = f"merge.memd-{kind}.driver", driver_command(python, kind)
        if repo.run("config", "--get", key, check=False).decode().strip() != value:
            repo.run("config", f"merge.memd-{kind}.name", f"memd {kind} merge")
            repo.run("config", key, value)


# --- the remote ---------------------------------------------------------------------------------------------------


def fetch(repo: GitRepo, remote: str, branch: str, timeout: float) -> str:
    """Fetch the remote's branch into SYNC_REF. Returns its commit, or "" when the remote has no such branch yet."""
    out = repo.attempt(
        "-c",
        "fetch.fsckObjects=true",  # a tree with `..`, `.` or `.git` entries (or any malformed object) is refused
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        remote,
        f"+refs/heads/{branch}:{SYNC_REF}",
        timeout=timeout,
    )
    if out.returncode != 0:
        err = out.stderr.decode(errors="replace").strip()
        if "couldn't find remote ref" in err:
            return ""
        raise GitError(redact_urls(f"git fetch from {remote} failed: {err[-500:] or f'exit {out.returncode}'}"))
    return rev(repo, SYNC_REF)


def rev(repo: GitRepo, ref: str) -> str:
    return repo.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).decode().strip()


def is_ancestor(repo: GitRepo, ancestor: str, descendant: str) -> bool:
    code = repo.returncode("merge-base", "--is-ancestor", ancestor, descendant)
    if code not in (0, 1):
        raise GitError(f"git merge-base --is-ancestor {ancestor[:12]} {descendant[:12]} failed (exit {code})")
    return code == 0


# --- the merge ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Conflict:
    path: str
    kind: str  # git's stable label: "CONFLICT (contents)", "CONFLICT (modify/delete)", ...
    message: str


@dataclass(frozen=True)
class TreeMerge:
    tree: str  # the merged tree; meaningful only when `unresolved` is empty
    unresolved: tuple[Conflict, ...]  # what memd cannot merge: a person decides


def merge_trees(repo: GitRepo, ours: str, theirs: str, options: list[str]) -> TreeMerge:
    """`git merge-tree --write-tree` of two commits with memd's drivers. Conflicts that memd's rules settle are
    settled here: anything under hot/ takes ours (one machine's live session; theirs stays in history), and a day
    file deleted on one side and written to on the other keeps the written version (no entry is lost; retention
    removes it again on both machines)."""
    out = repo.attempt(
        *options,
        "merge-tree",
        "--write-tree",
        "-z",
        "--name-only",
        "--allow-unrelated-histories",
        ours,
        theirs,
        timeout=MERGE_TIMEOUT,
    )
    if out.returncode not in (0, 1):
        raise GitError(f"git merge-tree failed: {out.stderr.decode(errors='replace').strip()[-500:]}")
    fields = out.stdout.decode("utf-8", "surrogateescape").split("\0")
    tree = fields[0].strip()
    conflicts = _conflicts(fields[1:]) if out.returncode == 1 else []
    unresolved = []
    hot = False
    for c in conflicts:
        if c.path.startswith("hot/"):
            hot = True
        elif kind_of(c.path) == "warm" and c.kind == "CONFLICT (modify/delete)":
            continue
        else:
            unresolved.append(c)
    if hot and not unresolved:
        tree = replace_subtree(repo, tree, ours, "hot")
    return TreeMerge(tree, tuple(unresolved))


def _conflicts(fields: list[str]) -> list[Conflict]:
    """The conflicted paths and their messages from merge-tree's -z output (after the tree): names, an empty
    field, then records of <count> NUL <path>... NUL <label> NUL <message> NUL."""
    try:
        blank = fields.index("")
    except ValueError:
        return []
    names = fields[:blank]
    found: dict[str, Conflict] = {}
    i = blank + 1
    while i < len(fields) and fields[i].isdigit():
        count = int(fields[i])
        paths = fields[i + 1 : i + 1 + count]
        label, message = [*fields[i + 1 + count : i + 3 + count], "", ""][:2]
        i += 3 + count
        if label.startswith("CONFLICT"):
            for path in paths:
                found.setdefault(path, Conflict(path, label, message.strip()))
    return [found.get(name, Conflict(name, "CONFLICT", f"conflict in {name}")) for name in names]


def replace_subtree(repo: GitRepo, tree: str, source: str, name: str) -> str:
    """`tree` with its top-level entry `name` taken from commit `source` (dropped if `source` has none)."""

    def entries(treeish: str) -> list[str]:
        raw = repo.run("ls-tree", "-z", treeish).decode("utf-8", "surrogateescape")
        return [e for e in raw.split("\0") if e]

    kept = [e for e in entries(tree) if e.split("\t", 1)[1] != name]
    kept += [e for e in entries(source) if e.split("\t", 1)[1] == name]
    body = "".join(e + "\0" for e in kept).encode("utf-8", "surrogateescape")
    return repo.run("mktree", "-z", input=body).decode().strip()


def commit_tree(repo: GitRepo, tree: str, parents: list[str], message: str) -> str:
    args = ["commit-tree", tree]
    for parent in parents:
        args += ["-p", parent]
    return repo.run(*args, "-F", "-", input=message.encode()).decode().strip()


def tree_of(repo: GitRepo, commit: str) -> str:
    return repo.run("rev-parse", f"{commit}^{{tree}}").decode().strip()


def memd_file(path: str) -> bool:
    """Is `path` (relative, `/`-separated, from a tree) one of the files a sync may write into a workspace: a tier
    file (`cold/MEMORY.md`, `cold/PROPOSED.md`, ...), a warm day file or a warm archive, named without any empty,
    `.`, `..` or `.git` part? Anything else a remote's tree holds is never written (a crafted `warm/../x` would
    land outside the tier, or outside the workspace)."""
    parts = path.split("/")
    if any(part in ("", ".", "..") or part.lower() == ".git" for part in parts) or "\0" in path:
        return False
    if path in TIER_FILES:
        return True
    directory, _, name = path.rpartition("/")
    if directory == WARM_DIR:
        return DAY_FILE.fullmatch(name) is not None
    if directory == ARCHIVE_DIR:
        return name.endswith(".md.gz") and not name.startswith(".")
    return False


# --- moving HEAD and reading what changed -----------------------------------------------------------------------


def move_head(repo: GitRepo, new: str, old: str) -> None:
    """HEAD (its branch) to `new`, only if it is still `old` ("" : no commit yet); then the index from `old`'s tree
    to `new`'s by a two-tree merge of the index alone (`read-tree -m -i`), so what a person staged in a path the
    merge did not change stays staged (the work tree is not touched: the next snapshot stages what differs from
    it). A staged change in a path the merge changed gives way to the merge (the file itself stays as it is)."""
    repo.wait_for_index_lock()
    repo.run("update-ref", "-m", "memd: sync", "HEAD", new, old)
    if not old or repo.returncode("read-tree", "-m", "-i", old, new) != 0:
        repo.run("read-tree", new)


def changed_paths(repo: GitRepo, old: str, new: str, paths: list[str]) -> list[str]:
    """Files under `paths` that differ between commits `old` ("": none) and `new`."""
    if old:
        out = repo.run("diff-tree", "-r", "-z", "--no-renames", "--name-only", old, new, "--", *paths)
    else:
        out = repo.run("ls-tree", "-r", "-z", "--name-only", new, "--", *paths)
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def blob(repo: GitRepo, commit: str, path: str) -> bytes | None:
    """The file `path` at `commit`, or None where it does not exist (or `commit` is "")."""
    if not commit:
        return None
    out = repo.attempt("cat-file", "blob", f"{commit}:{path}")
    return out.stdout if out.returncode == 0 else None


def push(repo: GitRepo, remote: str, branch: str, timeout: float) -> str:
    """Fast-forward push of HEAD (never forced): "ok", or "diverged" when the remote moved since the fetch; raises
    RemoteBranchLocked when the remote's branch is locked (by a push now, or left locked by one that died)."""
    return repo.push(remote, branch, timeout)
