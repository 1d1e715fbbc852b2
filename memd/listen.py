"""Where the daemon listens and how it stays the only one: the single-instance lock and the Unix socket.

The lock is an flock on `<state_dir>/memd.lock`, held for the daemon's whole life, never deleted; the holder's
pid is written into it for the loser's error message. The socket directory is created 0700 (0750 with a socket
group) and refused when someone else owns it or others can write to it; a stale socket is removed only while the
lock is held. Socket activation (LISTEN_FDS) takes precedence over binding. Imports memd.notify, memd.config and
memd.errors.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import socket
import stat
import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from memd import notify
from memd.config import ServerConfig
from memd.errors import StartupError


@dataclass(frozen=True)
class Listener:
    sock: socket.socket
    path: Path
    activated: bool  # inherited from systemd: memd neither chmods nor removes it


def take_lock(state_dir: Path) -> int:
    """Hold the single-instance lock; returns its fd (keep it open). Raises StartupError naming the holder."""
    ensure_private_dir(state_dir, group=False)
    path = state_dir / "memd.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        os.close(fd)
        raise StartupError(
            f"another memd (pid {holder}) is already running on state dir {state_dir}; stop it first"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _lock_holder(fd: int) -> str:
    """The pid the running daemon wrote into the lock file. It writes it just after taking the lock, so a
    loser racing it may look too early: wait briefly for a pid that is alive."""
    deadline = time.monotonic() + 2.0
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
    return "unknown: the holder did not record its pid (find it with `fuser -v memd.lock`)"


def listen(server: ServerConfig, env: MutableMapping[str, str], previous: Path | None = None) -> Listener:
    """The socket systemd handed over, or a new one bound at `server.socket` (replacing `previous`)."""
    fds = notify.listen_fds(env, os.getpid())
    if fds:
        sock = socket.socket(fileno=fds[0])
        sock.setblocking(False)
        name = sock.getsockname()
        return Listener(sock, Path(name) if isinstance(name, str) and name else server.socket, activated=True)
    path = server.socket
    ensure_private_dir(path.parent, group=bool(server.socket_group))
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise StartupError(f"{path} exists and is not a socket; remove it or choose another server.socket")
        os.unlink(path)  # stale: we hold the single-instance lock, so nobody else is serving it
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
    finally:
        os.umask(old_umask)
    try:
        apply_permissions(path, server)
    except StartupError:
        sock.close()
        raise
    sock.listen(512)
    sock.setblocking(False)
    if previous is not None and previous != path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(previous)
    return Listener(sock, path, activated=False)


def apply_permissions(path: Path, server: ServerConfig) -> None:
    try:
        if server.socket_group:
            os.chown(path, -1, _gid(server.socket_group))
        os.chmod(path, server.socket_mode)
    except OSError as exc:
        raise StartupError(
            f"cannot set owner group/mode of {path}: {exc.strerror or exc}; check server.socket_group "
            "(memd must be a member of it) and server.socket_mode"
        ) from exc


def remove(listener: Listener | None) -> None:
    if listener is not None and not listener.activated:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(listener.path)


def _gid(group: str) -> int:
    try:
        return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise StartupError(f"server.socket_group: no group named {group!r}") from None


def ensure_private_dir(path: Path, group: bool) -> None:
    """Create the directory 0700 (0750 with a socket group); refuse one another user owns or others can write."""
    path.mkdir(parents=True, exist_ok=True, mode=0o750 if group else 0o700)
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise StartupError(
            f"{path} is owned by uid {st.st_uid}, not by memd's uid {os.getuid()}; chown it or choose another path"
        )
    if st.st_mode & 0o022:
        raise StartupError(
            f"{path} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o}); run chmod go-w {path}"
        )
