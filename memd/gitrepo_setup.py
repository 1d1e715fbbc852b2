"""What comes before a snapshot repository's first git command: finding git, where the repository lives, whether
it is memd's, making it, and refusing one in the middle of a merge. Blocking calls: run them in a worker thread.

Where the repository lives (`git_dir_for`): `<workspace>/.git` when memd creates it there (so `git log
hot/context.json` works in the workspace), unless that would nest inside, or take over, a repository memd did not
create: a workspace inside someone's project work tree, or one that already has its own `.git`, gets a separate git
dir under the state directory (`core.worktree` pointing at the workspace), which never touches the outer
repository. A `.git` that exists is used only if it says `memd.managed = true`, or if the config says to adopt it
(a `.git` that is a symlink or a file never is).

A repository memd creates (`ensure`) gets `info/exclude` (memd's own files and the common editor temporaries: a
person's `git add -A` skips them too) and `info/attributes` that turn off end-of-line conversion and filters, so git
stores each file's exact bytes.

Also here, because set-up raises them and runs git before any GitRepo can: the errors of memd's git, its timeout,
and the environment every git of memd's runs with (`base_env`). GitRepo (memd.gitrepo) runs everything else and
delegates `locate`, `ensure`, `check_safe`, `managed` and its directory pin (`root_identity`) to this module.
Imports memd.errors, memd.fsio and memd.git_locks (memd.gitrepo's `GitRepo` only for annotations: memd.gitrepo
calls this module).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from memd import fsio, git_locks
from memd.errors import MemdError, Unavailable

if TYPE_CHECKING:
    from memd.gitrepo import GitRepo

GIT_TIMEOUT = 30.0
_UNSAFE_MARKERS = ("MERGE_HEAD", "rebase-merge", "rebase-apply", "CHERRY_PICK_HEAD", "REVERT_HEAD", "BISECT_LOG")
LOCK_FILE = ".memd.lock"  # the workspace lock at the workspace's root: never committed
# Editors' temporaries (vim's swap files and its `4913` write probe, backups `name~`, emacs' `.#name` locks and
# `#name#` autosaves, ...): not committed by default. A workspace `.gitignore` line `!pattern` brings one back.
EDITOR_TEMPORARIES = (
    "*~",
    ".*.sw[a-p]",
    "4913",
    ".#*",
    "\\#*#",
    "*.tmp",
    "*.kate-swp",
    ".~lock.*#",
    "*___jb_tmp___",
    "*___jb_old___",
)
INFO_EXCLUDE = (
    f"# written by memd\n*.memd-tmp-*\n.git.memd-tmp-*\n/{LOCK_FILE}\n# editors' temporaries\n"
    + "\n".join(EDITOR_TEMPORARIES)
    + "\n"
)
# Exact bytes in, exact bytes out: retention compares the committed blob with the file before it deletes.
INFO_ATTRIBUTES = (
    "# written by memd: store every file exactly as it is\n* -text -filter -ident -working-tree-encoding\n"
)


class GitError(MemdError):
    code = -32010


class RepoUnsafe(GitError):
    """A merge, rebase or similar is in progress: memd will not commit into the middle of it."""


class GitInterrupted(GitError):
    """A background git (a gc) ended because memd is stopping: nothing is wrong with the repository."""


class RemoteBranchLocked(GitError):
    """A push found the remote's branch locked: another push holds it now, or one stopped in the middle (killed,
    or the remote's machine lost power) left its lock file behind, which only a person may remove."""


class GitMissing(Unavailable):
    pass


def find_git() -> str:
    git = shutil.which("git")
    if git is None:
        raise GitMissing("git is not on PATH: snapshots are disabled (install git; writes are unaffected)")
    return git


def base_env() -> dict[str, str]:
    # What git needs to run and to reach a push remote (an ssh agent, a custom ssh command); nothing else.
    passed = ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "SSH_AUTH_SOCK", "GIT_SSH_COMMAND", "GIT_SSH")
    keep = {k: v for k, v in os.environ.items() if k in passed}
    return {
        **keep,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "memd",
        "GIT_AUTHOR_EMAIL": "memd@localhost",
        "GIT_COMMITTER_NAME": "memd",
        "GIT_COMMITTER_EMAIL": "memd@localhost",
        "GIT_OPTIONAL_LOCKS": "0",
    }


# --- where the repository lives ----------------------------------------------------------------------------------


def git_dir_for(work_tree: Path, separate_dir: Path, git: str, adopt: bool) -> Path:
    """The git dir of this workspace's snapshot repository (see the module docstring)."""
    root_identity(work_tree)  # a symlinked or missing workspace gets no repository anywhere
    own = work_tree / ".git"
    if fsio.is_real_dir(own):
        return own if adopt or managed_marker(git, own) == "true" else separate_dir
    if os.path.lexists(own) or inside_other_work_tree(work_tree, git):
        return separate_dir
    return own


# A workspace's parent's answer, kept this long: workspaces usually share a parent (one directory of agents), and a
# first sweep locates hundreds of repositories, each asking about the same parent; a `git init` there is seen
# after this long.
PARENT_ANSWER_SECONDS = 10.0
_parent_answers: dict[str, tuple[float, bool]] = {}


def inside_other_work_tree(path: Path, git: str) -> bool:
    """True when `path`'s parent belongs to a git work tree (someone's project repository)."""
    parent = path.absolute().parent
    if not any(os.path.lexists(directory / ".git") for directory in (parent, *parent.parents)):
        return False  # git finds a work tree only through a `.git` above it: no process to ask (most workspaces)
    now = time.monotonic()
    known = _parent_answers.get(str(parent))
    if known is not None and now - known[0] < PARENT_ANSWER_SECONDS:
        return known[1]
    try:
        out = subprocess.run(
            [git, "-C", str(parent), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            timeout=GIT_TIMEOUT,
            env={**base_env(), "GIT_CEILING_DIRECTORIES": ""},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    inside = out.returncode == 0 and out.stdout.strip() == b"true"
    if len(_parent_answers) > 256:
        _parent_answers.clear()  # bounded: a few parents in practice
    _parent_answers[str(parent)] = (now, inside)
    return inside


def managed_marker(git: str, git_dir: Path) -> str:
    """`memd.managed` read from the config file itself: a repository whose HEAD or objects broke while memd was
    down is still recognised as memd's (and reported as broken) instead of being replaced by a fresh one."""
    config = git_dir / "config"
    if not config.exists():
        return ""
    try:
        out = subprocess.run(
            [git, "config", "--file", str(config), "--get", "memd.managed"],
            capture_output=True, timeout=GIT_TIMEOUT, env=base_env(), check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if out.returncode not in (0, 1):  # 1: key absent; anything else: the file cannot be read
        raise GitError(f"cannot read {config} to tell whether memd manages it: {out.stderr.decode().strip()}")
    return out.stdout.decode().strip()


def root_identity(work_tree: Path) -> tuple[int, int]:
    """(device, inode) of the workspace directory itself; GitError when it is gone, a symlink or not a directory."""
    try:
        st = os.lstat(work_tree)
    except FileNotFoundError:
        raise GitError(f"workspace directory {work_tree} is gone; no git command runs for it") from None
    except OSError as exc:
        raise GitError(f"cannot look at workspace directory {work_tree}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise GitError(f"workspace directory {work_tree} is a symlink now; memd never runs git through it")
    if not stat.S_ISDIR(st.st_mode):
        raise GitError(f"workspace directory {work_tree} is not a directory; no git command runs for it")
    return st.st_dev, st.st_ino


# --- making it, and using it safely ----------------------------------------------------------------------------


def ensure(repo: GitRepo, branch: str, started_at: float | None) -> bool:
    """`GitRepo.ensure`: make the repository unless it exists; one memd made gets its rules again and loses the
    locks a killed git left. Returns whether it made the repository."""
    repo.check_root()
    if (repo.git_dir / "HEAD").exists():
        if managed_marker(repo.git, repo.git_dir) == "true":
            _write_own_rules(repo.git_dir)  # repositories made by an older memd get them too
            git_locks.clear_stale_locks(repo, min_age=git_locks.start_lock_age(started_at))
        return False
    repo.git_dir.parent.mkdir(parents=True, exist_ok=True)
    # Built under a temporary name and renamed into place, so a kill half-way never leaves a `.git` without
    # its memd.managed mark (which memd would then take for someone else's repository). `repo` runs its git there
    # meanwhile: its git dir is the temporary one until the rename.
    final = repo.git_dir
    for leftover in final.parent.glob(f"{final.name}.memd-tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    repo.git_dir = final.parent / f"{final.name}.memd-tmp-{os.getpid()}"
    try:
        # No template (git's sample hooks are never run: hooks are off for memd's git), and memd's two settings
        # written beside git's own: two `git config` processes less per new workspace.
        repo.run("init", "--quiet", "--template=", f"--initial-branch={branch}")
        settings = f"[memd]\n\tmanaged = true\n[core]\n\tworktree = {_config_value(str(repo.work_tree))}\n"
        with open(repo.git_dir / "config", "a", encoding="utf-8") as config:
            config.write(settings)
            config.flush()
            os.fsync(config.fileno())  # the mark must not be lost once the repository is in place
        _write_own_rules(repo.git_dir)
        repo.check_root()  # the last look before the repository appears in the workspace
        os.rename(repo.git_dir, final)
    except BaseException:
        shutil.rmtree(repo.git_dir, ignore_errors=True)
        raise
    finally:
        repo.git_dir = final
    return True


def _write_own_rules(git_dir: Path) -> None:
    """memd's `info/exclude` and `info/attributes` (only in repositories memd made; never in an adopted one)."""
    info = git_dir / "info"
    info.mkdir(parents=True, exist_ok=True)
    for name, text in (("exclude", INFO_EXCLUDE), ("attributes", INFO_ATTRIBUTES)):
        path = info / name
        try:
            current = path.read_text()
        except FileNotFoundError:
            current = ""
        have = set(current.splitlines())
        missing = [line for line in text.splitlines() if line not in have]
        if missing:  # added to, never rewritten: lines a person put there stay
            path.write_text(
                current + ("" if not current or current.endswith("\n") else "\n") + "\n".join(missing) + "\n"
            )


def check_safe(git_dir: Path) -> None:
    """RepoUnsafe while a merge, rebase, cherry-pick, revert or bisect is in progress in the repository."""
    for marker in _UNSAFE_MARKERS:
        if (git_dir / marker).exists():
            raise RepoUnsafe(
                f"repo-unsafe: {marker} in {git_dir} (a merge/rebase is in progress); memd skips snapshots "
                "until it is finished or aborted"
            )


def _config_value(value: str) -> str:
    """`value` as a git config file holds it: quoted, so that spaces, `#` and `;` are kept, with backslash, quote
    and newline escaped (git-config(1), "Syntax")."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
