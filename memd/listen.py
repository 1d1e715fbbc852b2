"""Where the daemon listens and how it stays the only one: the single-instance lock and the Unix socket.

The lock is an flock on `<state_dir>/memd.lock`, held for the daemon's whole life, never deleted; the holder's
pid is written into it for the loser's error message. The socket directory is created 0700 (0750 and owned by
the socket group when one is set) and refused when someone else owns it or others can write to it. A socket path
has its own lock (`.<name>.lock` beside it), and a socket file is replaced only when it is stale: nobody accepts
on it. Socket activation (LISTEN_FDS) takes precedence over binding. Each served workspace holds its own lock,
`<workspace>/.memd.lock` (`WorkspaceLocks`). Imports memd.notify, memd.fsio, memd.config and memd.errors.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import socket
import stat
import struct
import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from memd import fsio, notify
from memd.config import ServerConfig
from memd.errors import StartupError


@dataclass(frozen=True)
class Listener:
    sock: socket.socket
    path: Path
    activated: bool  # inherited from systemd: memd neither chmods nor removes it
    lock_fd: int = -1  # the flock on `.<socket name>.lock` beside the socket, held while serving it
    ino: int = 0  # the socket file memd bound: it removes that file only, never one bound after it


def take_lock(state_dir: Path) -> int:
    """Hold the single-instance lock; returns its fd (keep it open). Raises StartupError naming the holder."""
    ensure_private_dir(state_dir)
    path = state_dir / "memd.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StartupError(f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd, path)
        os.close(fd)
        raise StartupError(
            f"another memd (pid {holder}) is already running on state dir {state_dir}; stop it first"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _lock_holder(fd: int, path: Path, wait: float = 2.0) -> str:
    """The pid the running daemon wrote into the lock file. It writes it just after taking the lock, so a
    loser racing it may look too early: wait briefly (`wait` seconds at most) for a pid that is alive."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if text.isdigit():
            try:
                os.kill(int(text), 0)
                return text
            except ProcessLookupError:
                pass  # the previous holder, dead: the new one has not written yet
            except PermissionError:
                return text
        time.sleep(0.01)
    return f"unknown: the holder did not record its pid (find it with `fuser -v {path}`)"


WORKSPACE_LOCK = ".memd.lock"  # in the workspace's own directory: never a tier file, never snapshotted or deleted


class WorkspaceLocks:
    """One writer per workspace across daemons: an flock on `<workspace>/.memd.lock`, held while a daemon serves
    the workspace (the holder's pid written into it). It lives in the directory itself, so two daemons with
    different state dirs, configs or paths to it (symlinks, bind mounts) meet on the same lock. Within one daemon
    the lock is shared by the names that point at the directory while a reload swaps one for the other."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, int], list[int]] = {}  # the lock file's (st_dev, st_ino) -> [fd, users]

    def acquire(self, name: str, root: Path) -> tuple[int, int]:
        """Take (or share) the lock of workspace `name` at `root`, creating the directory. Raises StartupError;
        when another process holds the lock, its `data` names the holder (`held_by`)."""
        path = root / WORKSPACE_LOCK
        try:
            fsio.ensure_dir(root)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        except OSError as exc:
            raise StartupError(
                f"cannot open workspace {name!r} at {root}: {exc.strerror or exc} (taking its lock {path}); "
                "fix the directory or its permissions, or remove it from the config"
            ) from exc
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise StartupError(f"cannot open workspace {name!r} at {root}: {path} is not a regular file")
        if key in self._held:
            os.close(fd)
            self._held[key][1] += 1
            return key
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(fd, path, wait=0.1)  # on the loop (discovery, reconcile): briefly
            os.close(fd)
            raise StartupError(
                f"workspace {name!r} at {root} is held by another memd (pid {holder}): one writer per workspace; "
                f"stop that memd or remove the workspace from one of the two configs",
                data={"workspace": name, "held_by": holder},
            ) from None
        with contextlib.suppress(OSError):  # the pid only names the holder to a loser; the flock is the lock
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._held[key] = [fd, 1]
        return key

    def release(self, key: tuple[int, int]) -> None:
        entry = self._held.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self._held[key]
            os.close(entry[0])  # the file stays: deleting it would let a second holder lock a new one


def listen(server: ServerConfig, env: MutableMapping[str, str]) -> Listener:
    """The socket systemd handed over, or a new one bound at `server.socket`. Raises StartupError, never OSError.

    A socket path has one daemon: memd holds an flock on `.<name>.lock` beside the socket for as long as it
    serves it, and before it replaces a socket file it asks it (connect): one that answers is never deleted."""
    fds = notify.listen_fds(env, os.getpid())
    if fds:
        sock = socket.socket(fileno=fds[0])
        sock.setblocking(False)
        name = sock.getsockname()
        return Listener(sock, Path(name) if isinstance(name, str) and name else server.socket, activated=True)
    path = server.socket
    ensure_private_dir(path.parent, _gid(server.socket_group) if server.socket_group else None)
    lock_fd = _take_socket_lock(path)
    try:
        sock, ino = _bind(path, server)
    except BaseException:
        os.close(lock_fd)
        raise
    return Listener(sock, path, activated=False, lock_fd=lock_fd, ino=ino)


def _take_socket_lock(path: Path) -> int:
    lock_path = path.parent / f".{path.name}.lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise StartupError(f"cannot open {lock_path}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd, lock_path)
        os.close(fd)
        raise _served_by(path, holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _served_by(path: Path, pid: int | str) -> StartupError:
    return StartupError(
        f"{path} is being served by another process (pid {pid}); stop it or choose another server.socket"
    )


def _bind(path: Path, server: ServerConfig) -> tuple[socket.socket, int]:
    """Bind, apply mode and group, listen. A failure after the bind removes the socket file it made."""
    try:
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise StartupError(f"{path} exists and is not a socket; remove it or choose another server.socket")
            holder = _serving_pid(path)
            if holder is not None:
                raise _served_by(path, holder)
            os.unlink(path)  # stale: nobody accepts on it, and we hold the socket's lock
    except OSError as exc:
        raise StartupError(f"cannot replace the stale socket {path}: {exc.strerror or exc}") from exc
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
    finally:
        os.umask(old_umask)
    ino = os.lstat(path).st_ino
    try:
        apply_permissions(path, server)
        sock.listen(512)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        _unlink_socket(path, ino)
        raise
    return sock, ino


def _serving_pid(path: Path) -> int | str | None:
    """Who accepts connections on the socket file at `path`: a pid, "unknown", or None when nobody does."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return None  # a socket file without a listener: left behind by a daemon that died
    except OSError:
        return "unknown"  # it exists and did not refuse (a full backlog, no permission): assume it is alive
    else:
        with contextlib.suppress(OSError):
            pid: int = struct.unpack("3i", probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
            return pid
        return "unknown"
    finally:
        probe.close()


def apply_permissions(path: Path, server: ServerConfig) -> None:
    """The socket's mode and group, and its directory's group (so that members can reach it)."""
    gid = _gid(server.socket_group) if server.socket_group else None
    if gid is not None:
        ensure_private_dir(path.parent, gid)
    try:
        if gid is not None:
            os.chown(path, -1, gid)
        os.chmod(path, server.socket_mode)
    except OSError as exc:
        raise StartupError(
            f"cannot set owner group/mode of {path}: {exc.strerror or exc}; check server.socket_group "
            "(memd must be a member of it) and server.socket_mode"
        ) from exc


def remove(listener: Listener | None) -> None:
    """Remove our socket file (only if it is still ours) and let go of the socket's lock."""
    if listener is None or listener.activated:
        return
    _unlink_socket(listener.path, listener.ino)
    with contextlib.suppress(OSError):
        os.close(listener.lock_fd)


def _unlink_socket(path: Path, ino: int) -> None:
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISSOCK(st.st_mode) and st.st_ino == ino:
            os.unlink(path)


def _gid(group: str) -> int:
    try:
        return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise StartupError(f"server.socket_group: no group named {group!r}") from None


def ensure_private_dir(path: Path, gid: int | None = None) -> None:
    """Create the directory 0700, or with a socket group 0750 and owned by that group (members reach the socket
    through it); refuse one another user owns or others can write."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700 if gid is None else 0o750)
        st = os.stat(path)
    except OSError as exc:
        raise StartupError(f"cannot create directory {path}: {exc.strerror or exc}") from exc
    if st.st_uid != os.getuid():
        raise StartupError(
            f"{path} is owned by uid {st.st_uid}, not by memd's uid {os.getuid()}; chown it or choose another path"
        )
    if st.st_mode & 0o022:
        raise StartupError(
            f"{path} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o}); run chmod go-w {path}"
        )
    if gid is not None and (st.st_gid != gid or st.st_mode & 0o050 != 0o050):
        try:
            os.chown(path, -1, gid)
            os.chmod(path, stat.S_IMODE(st.st_mode) | 0o050)  # the umask (UMask=0077) took g+rx from mkdir
        except OSError as exc:
            raise StartupError(
                f"cannot give {path} to group {gid} (server.socket_group): {exc.strerror or exc}; "
                "memd must be a member of that group"
            ) from exc
