"""The git CLI adapter for one workspace's snapshot repository. Blocking calls: run them in a worker thread.

Where the repository lives (a `.git` in the workspace, or a separate git dir under the state directory), making
it with memd's ignore and attribute rules, telling whether it is memd's, and refusing one in the middle of a merge:
memd.gitrepo_setup, to which `locate`, `ensure`, `managed` and `check_safe` delegate; it also defines the errors
raised here (`GitError` and its kinds), `GIT_TIMEOUT` and git's environment, since set-up needs them before there is
a GitRepo. What a snapshot holds, and how it is staged: memd.git_staging.

The workspace directory is pinned (device, inode) when this object is made: every git command first checks that
the path is still that directory, not a symlink or another directory swapped in, so nothing is ever `git init`-ed
or committed somewhere else.

Every call: a timeout, `GIT_TERMINAL_PROMPT=0`, an explicit identity, hooks disabled, no detached gc,
`core.fsync=all` for durable objects and refs, `safe.directory` set for the paths memd owns.

The locks git leaves (waiting for a live git's `index.lock`, removing the ones a killed git left): memd.git_locks.
Reading the history back (log, a file at a commit, diffs): memd.git_history.
Imports memd.gitrepo_setup (and its errors), memd.git_locks, memd.git_objects and memd.stoppable.
"""

from __future__ import annotations

import contextlib
import copy
import os
import posixpath
import re
import shutil
import stat
import subprocess
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from memd import git_locks, git_objects, gitrepo_setup
from memd.gitrepo_setup import GIT_TIMEOUT, LOCK_FILE, GitError, GitInterrupted, GitMissing, RemoteBranchLocked
from memd.stoppable import ProcessStopped, Stoppable

TRAILERS = (
    "Memd-Reason",
    "Memd-Session",
    "Memd-Step",
    "Memd-Tiers",
    "Memd-Checkpoint",
    "Memd-Tokens-Before",
    "Memd-Tokens-After",
)
# Never staged, whatever anyone's ignore rules say (`add --force` ignores every exclude file, memd's own too).
OWN_FILES_PATHSPECS = (":(exclude,glob)**/*.memd-tmp-*", f":(exclude,top){LOCK_FILE}")
# The tier files proper: added with `--force` whatever the ignore rules say (`git_staging.stage`).
HOT_FILES = ("hot/context.json", "hot/memd.json")
TIER_FILES = (*HOT_FILES, "cold/MEMORY.md", "cold/PROPOSED.md")
WARM_DIR, ARCHIVE_DIR = "warm", "warm/archive"
DAY_FILE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\.md")

_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


def redact_urls(text: str) -> str:
    """`text` with the user information (`user:token@`) of every URL in it removed: a remote's URL may carry
    credentials, and it is shown in status, replies, logs and git's own messages."""
    return _URL_USERINFO.sub(r"\1", text)


class GitRepo:
    def __init__(self, work_tree: Path, git_dir: Path, git: str, paths: Sequence[str]) -> None:
        self.root = work_tree  # the workspace directory
        self.work_tree = work_tree  # what git reads as the work tree: the workspace, or a mirror of it (`over`)
        self.git_dir = git_dir
        self.git = git
        self.paths = tuple(paths)
        self._root: tuple[int, int] | None = None  # (device, inode) of the workspace directory, pinned on first use
        # Once HEAD is seen to exist, `git_staging.stage` stops asking (one git process less per snapshot); a diff
        # against a HEAD that is gone again (the repository deleted and made again, the branch deleted) asks again.
        self.has_commits = False
        self._made_here = False  # `ensure` made the repository (so HEAD's branch has no packed ref of git's making)
        # How many of memd's snapshots are waiting for a running git's index.lock right now (status shows it: a
        # person whose `git commit` editor is open sees why memd has not committed); a view shares it.
        self.lock_waits = git_locks.Waiters()
        with contextlib.suppress(GitError):
            self.check_root()

    @classmethod
    def locate(cls, work_tree: Path, separate_dir: Path, git: str, paths: Sequence[str], adopt: bool) -> GitRepo:
        """Choose where this workspace's snapshot repository lives (`gitrepo_setup.git_dir_for`)."""
        return cls(work_tree, gitrepo_setup.git_dir_for(work_tree, separate_dir, git, adopt), git, paths)

    def narrowed(self, tops: Collection[str]) -> GitRepo:
        """This repository with only those of its snapshot paths that are in `tops` (all of them when none is):
        a commit of part of the workspace, whose other paths stay as HEAD has them (a checkpoint's hot tier)."""
        view = copy.copy(self)
        view.paths = tuple(p for p in self.paths if p in tops) or self.paths
        return view

    def over(self, tree: Path) -> GitRepo:
        """This repository reading `tree` as its work tree (a mirror of the workspace, memd.git_mirror), for staging
        and committing from it; each command still checks the workspace directory's identity first."""
        view = copy.copy(self)
        view.work_tree = tree  # `lock_waits` is shared: a view's wait for index.lock shows as the repository's
        return view

    def check_root(self) -> None:
        """Raise GitError unless the workspace path is still the directory this repository was made for."""
        identity = gitrepo_setup.root_identity(self.root)
        if self._root is None:
            self._root = identity
        elif identity != self._root:
            raise GitError(
                f"workspace directory {self.root} is no longer the directory memd opened (another was moved "
                "into its place); no git command runs there"
            )

    def gone(self) -> bool:
        """Was the repository deleted (nothing at all where its git dir was)? Checks the workspace first."""
        self.check_root()
        return not os.path.lexists(self.git_dir)

    # --- plumbing --------------------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The environment every git of this repository runs with."""
        return {**gitrepo_setup.base_env(), "GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.work_tree)}

    def run(self, *args: str, check: bool = True, timeout: float = GIT_TIMEOUT, input: bytes | None = None) -> bytes:
        return self._exec(args, check, timeout, input).stdout

    def run_niced(self, *args: str, timeout: float = GIT_TIMEOUT, stoppable: Stoppable | None = None) -> bytes:
        """git at the lowest CPU priority, its children too (`nice -n 19` where `nice` exists): background work
        such as a repack must not take the CPU from acknowledgements. With `stoppable`, a stopping daemon ends it
        (GitInterrupted) instead of waiting for it."""
        return self._exec(args, True, timeout, None, niced=True, stoppable=stoppable).stdout

    def returncode(self, *args: str) -> int:
        return self._exec(args, False, GIT_TIMEOUT, None).returncode

    def attempt(self, *args: str, timeout: float = GIT_TIMEOUT) -> subprocess.CompletedProcess[bytes]:
        """Run git, whatever its exit status, with its messages in the C locale (for callers that read them)."""
        return self._exec(args, False, timeout, None, env=_C_LOCALE)

    def managed(self) -> bool:
        """Did memd make this repository (`memd.managed = true`)? An adopted one is left as its owner set it."""
        return gitrepo_setup.managed_marker(self.git, self.git_dir) == "true"

    def _exec(
        self,
        args: Sequence[str],
        check: bool,
        timeout: float,
        input: bytes | None,
        env: Mapping[str, str] | None = None,
        niced: bool = False,
        stoppable: Stoppable | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        self.check_root()
        nice = shutil.which("nice") if niced else None
        cmd = [
            *((nice, "-n", "19") if nice else ()),
            self.git,
            "-c", "core.hooksPath=/dev/null",
            "-c", "gc.autoDetach=false",
            "-c", "gc.auto=0",
            # ...nor start `git maintenance run --auto` after each commit: a process per commit that finds
            # nothing to do (gc.auto=0), 1.8 per workspace in a first sweep (git_maintenance packs instead).
            "-c", "maintenance.auto=false",
            # git's own default, pinned against a user's `core.compression`: a snapshot writes each changed file
            # whole as a loose object, today's growing day included, and zlib's level 6 took 0.46-0.53 s of CPU
            # for a 12.6 MB day where level 1 took 0.16 s. git_maintenance packs them at pack.compression.
            "-c", "core.looseCompression=1",
            "-c", "core.fsync=all",
            "-c", "core.fsyncMethod=fsync",
            # A snapshot stages from hard links to the workspace's files (memd.git_mirror); linking changes an
            # inode's ctime, which must not make git hash every unchanged file again.
            "-c", "core.trustctime=false",
            "-c", f"safe.directory={self.work_tree}",
            "-c", f"safe.directory={self.git_dir}",
            "-c", "commit.gpgSign=false",
            "-c", "core.quotePath=false",
            *args,
        ]  # fmt: skip
        try:
            if stoppable is not None:
                out = stoppable.run(cmd, cwd=self.work_tree, env={**self.env(), **(env or {})}, timeout=timeout)
            else:
                out = subprocess.run(
                    cmd,
                    cwd=self.work_tree,
                    env={**self.env(), **(env or {})},
                    capture_output=True,
                    timeout=timeout,
                    input=input,
                    check=False,
                )
        except ProcessStopped as exc:
            raise GitInterrupted(f"git {args[0]} in {self.git_dir}: {exc}") from None
        except FileNotFoundError:
            raise GitMissing(f"git binary {self.git} is gone: snapshots are disabled") from None
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} timed out after {timeout:.0f}s in {self.git_dir}") from None
        except OSError as exc:  # E2BIG for an absurd argument list, EMFILE, ...
            raise GitError(f"cannot run git {args[0]}: {exc.strerror or exc}") from None
        if check and out.returncode != 0:
            err = out.stderr.decode(errors="replace").strip()
            raise GitError(redact_urls(f"git {args[0]} failed in {self.git_dir}: {err or f'exit {out.returncode}'}"))
        return out

    # --- snapshots -------------------------------------------------------------------------------------------

    def ensure(self, branch: str, started_at: float | None = None) -> None:
        """Create the repository on first use (memd-managed, with what it must ignore: `gitrepo_setup.ensure`).
        `started_at`: when this daemon started (wall clock), or None; a lock older than that, with no git running,
        was left by a git killed with the previous daemon and goes at once; any other only once stale
        (`git_locks.clear_stale_locks`)."""
        if gitrepo_setup.ensure(self, branch, started_at):
            self.has_commits = False
            self._made_here = True

    def check_safe(self) -> None:
        gitrepo_setup.check_safe(self.git_dir)

    def wait_for_index_lock(self, timeout: float = GIT_TIMEOUT) -> None:
        """Wait for a live git's index.lock, removing the locks a git that died left (`git_locks`); GitError when
        a running git still holds it after `timeout` seconds."""
        if not git_locks.index_lock_released(self, timeout):
            lock = self.git_dir / "index.lock"
            raise GitError(f"{lock} is held by a running git for over {timeout:.0f}s; snapshot postponed")

    def has_head(self) -> bool:
        if self._loose_head():
            return True
        if self._made_here and not (self.git_dir / "packed-refs").exists():
            return False  # made by `ensure`, and no ref written since, loose or packed: no process to ask
        return self.returncode("rev-parse", "--verify", "--quiet", "HEAD") == 0

    def commit(
        self, paths: Sequence[str], subject: str, body: str, trailers: Mapping[str, str], only: bool = True
    ) -> str:
        """Commit exactly the files `stage` listed (`--only`: anything else someone staged in an adopted
        repository stays staged and out of memd's commit). Returns the commit, or "" when nothing was left to
        commit. `only=False`: the index as it is, when it holds nothing else (`git_staging.nothing_else_staged`):
        the same commit, without git hashing the listed files again.

        A listed path that is a directory now (a file or link that became one) is left out of the pathspec:
        `git commit --only` would take the directory for a submodule and refuse ("does not have a commit checked
        out"), every snapshot after it too. The files listed under it replace the old entry in the commit as in
        the index; a directory with no file in it leaves the old entry committed (git records no directory)."""
        paths = [path for path in paths if not self._now_a_directory(path)]
        if not paths:
            return ""
        lines = [subject, ""]
        if body:
            lines += [body, ""]
        lines += [f"{k}: {_one_line(v)}" for k, v in trailers.items() if v != ""]
        message = "\n".join(lines).encode()
        self.run(
            "commit",
            "--quiet",
            "--no-verify",
            "--allow-empty-message",
            "-F",
            "-",
            *(("--only", "--", *paths) if only else ()),
            input=message,
        )
        self.has_commits = True
        return self._loose_head() or self.head()

    def head(self) -> str:
        return self.run("rev-parse", "HEAD").decode().strip()

    def _now_a_directory(self, path: str) -> bool:
        """Is `path` a real directory in the work tree now, and not another repository (a submodule's place)?"""
        where = self.work_tree / path
        try:
            return stat.S_ISDIR(os.lstat(where).st_mode) and not os.path.lexists(where / ".git")
        except OSError:
            return False

    def head_commit(self) -> str:
        """HEAD's commit, or "" when the repository has none yet."""
        if rev := self._loose_head():
            return rev
        if not self.has_head():
            return ""
        out = self._exec(("rev-parse", "--verify", "--quiet", "HEAD^{commit}"), False, GIT_TIMEOUT, None)
        return out.stdout.decode().strip() if out.returncode == 0 else ""

    def _loose_head(self) -> str:
        """HEAD's commit read from the files `git commit` has just written (HEAD names a branch, the branch's
        loose ref holds the id), or "" when the repository keeps refs otherwise (a detached HEAD, a packed or
        reftable ref): one `rev-parse` process less per snapshot, which is most of a sweep's cost at hundreds
        of workspaces."""
        try:
            target = (self.git_dir / "HEAD").read_text(encoding="ascii").strip()
            if not target.startswith("ref: refs/heads/"):
                return ""
            ref = target.removeprefix("ref: ")
            if ".." in ref.split("/"):
                return ""
            rev = (self.git_dir / ref).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return ""
        return rev if len(rev) in (40, 64) and all(c in "0123456789abcdef" for c in rev) else ""

    def committed_files(self, directory: str, commit: str = "") -> tuple[str, dict[str, str]]:
        """`commit` (default HEAD) and the blob id of each regular file directly in `directory` in it (name -> id),
        what retention checks each day file against before it deletes it. Read from the loose objects where they
        all are (a commit memd has just made), else in one `ls-tree`."""
        head = commit or self.head()
        loose = git_objects.directory_blobs(self.git_dir, head, directory)
        if loose is not None:
            return head, loose
        out = self.run("ls-tree", "-z", "--full-tree", head, "--", f"{directory}/")
        blobs: dict[str, str] = {}
        for record in out.split(b"\0"):
            meta, _, path = record.partition(b"\t")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == b"blob" and parts[0] in (b"100644", b"100755"):
                name = path.decode("utf-8", "surrogateescape").rsplit("/", 1)[-1]
                blobs[name] = parts[2].decode()
        return head, blobs

    # --- push ------------------------------------------------------------------------------------------------

    def push(self, remote: str, branch: str, timeout: float) -> str:
        """Fast-forward push of HEAD. Returns "ok" or "diverged"; raises RemoteBranchLocked when the remote's branch
        stays locked past git's own short wait for it (core.filesRefLockTimeout), GitError for any other refusal."""
        self.check_root()
        cmd = [self.git, "-c", "core.hooksPath=/dev/null", "push", "--porcelain", remote, f"HEAD:refs/heads/{branch}"]
        try:
            out = subprocess.run(
                cmd,
                cwd=self.work_tree,
                env={**self.env(), **_C_LOCALE},
                capture_output=True,
                timeout=timeout,
                check=False,
            )  # the C locale: its refusals are read below
        except subprocess.TimeoutExpired:
            raise GitError(f"git push to {redact_urls(remote)} timed out after {timeout:.0f}s") from None
        text = (out.stdout + out.stderr).decode(errors="replace")
        if out.returncode == 0:
            return "ok"
        locked = _REF_LOCK_HELD.search(text)
        if locked:
            lock = posixpath.normpath(locked.group(1))  # git writes it as <repo>/./refs/heads/<branch>.lock
            raise RemoteBranchLocked(
                redact_urls(
                    f"the branch {branch} of {remote} is locked: {lock} exists (on the remote's machine). Another "
                    "push may be running; if none is, a push was stopped in the middle there (a kill, a power "
                    "loss) and left it: remove that file, and memd pushes again on its next run"
                )
            )
        if any(why in text for why in _MOVED_MEANWHILE):
            return "diverged"
        raise GitError(redact_urls(f"git push to {remote} failed: {text.strip()[-500:]}"))

    def fsck(self) -> str:
        return self.run("fsck", "--no-progress", check=False).decode(errors="replace")


# What git push says when the remote branch is not where this push expected it: behind us (a non-fast-forward),
# or moved by another push at the same moment (the receiving side's ref lock or compare-and-swap lost the race).
_MOVED_MEANWHILE = (
    "non-fast-forward",
    "fetch first",
    "[rejected]",
    "cannot lock ref",
    "failed to update ref",
    "incorrect old value provided",
)


# The remote's ref lock file exists: a push is holding the branch right now, or one died holding it. Told apart
# from a lost compare-and-swap ("cannot lock ref ...: is at X but expected Y"), which is plain divergence.
_REF_LOCK_HELD = re.compile(r"Unable to create '([^'\n]*\.lock)': File exists")

_C_LOCALE = {"LC_ALL": "C", "LANGUAGE": "C"}  # git's messages, for the callers that read them


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]
