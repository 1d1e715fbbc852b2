"""The systemd service-manager protocols, implemented directly: sd_notify, the watchdog and socket activation.

No python-systemd dependency: the protocols are a few lines each (see sd_notify(3), sd_watchdog_enabled(3),
sd_listen_fds(3)). Nothing here reads os.environ: the daemon, the only composition root, passes its
environment in, which also keeps these functions testable with a plain dict.

Notification is best effort. A service manager that went away, a full queue or a bad address must never
stop memd from serving, so `Notifier.send` logs at debug and returns False instead of raising.
Imports nothing from memd.
"""

from __future__ import annotations

import fcntl
import logging
import socket
import threading
import time
from collections.abc import Mapping, MutableMapping

log = logging.getLogger(__name__)

SD_LISTEN_FDS_START = 3
LISTEN_VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")

# systemd reads its notify socket promptly; a manager so stuck that a datagram cannot be queued within this
# time must not stall memd's event loop (the caller may be the loop itself).
_SEND_TIMEOUT = 1.0


class Notifier:
    """Sends sd_notify datagrams to the socket systemd named in NOTIFY_SOCKET, over one long-lived socket."""

    def __init__(self, address: str | bytes) -> None:
        # A str is a filesystem path; bytes starting with NUL name a socket in the abstract namespace.
        self.address = address
        self._sock: socket.socket | None = None
        # The watchdog ping may come from a timer thread while the loop sends STATUS=: one socket, one lock.
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Notifier | None:
        """The notifier for NOTIFY_SOCKET, or None when memd is not run by a notify-aware manager."""
        value = env.get("NOTIFY_SOCKET", "")
        if not value:
            return None
        if value.startswith("/"):
            return cls(value)
        if value.startswith("@") and len(value) > 1:
            return cls(b"\0" + value[1:].encode())
        # Relative paths are refused by sd_notify too; vsock: addresses (systemd >= 254, for VMs) are not
        # something memd is run under. Readiness will then time out, so say why.
        log.warning("NOTIFY_SOCKET=%r is not a path or abstract socket; not notifying systemd", value)
        return None

    def send(self, *assignments: str) -> bool:
        """Send one datagram of newline-separated VAR=value assignments; True when the kernel took it."""
        if not assignments:
            return False
        message = "\n".join(assignments).encode()
        with self._lock:
            try:
                if self._sock is None:
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    sock.settimeout(_SEND_TIMEOUT)
                    self._sock = sock
                self._sock.sendto(message, self.address)
            except OSError as exc:
                log.debug("sd_notify %r to %r failed: %s", assignments, self.address, exc)
                return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *_status(status))

    def status(self, text: str) -> bool:
        return self.send(*_status(text) or ["STATUS="])

    def reloading(self, status: str = "") -> bool:
        # systemd holds the unit in "reloading" until READY=1: follow with ready() after every reload, a
        # rejected config included. MONOTONIC_USEC lets systemd >= 253 (Type=notify-reload) match this to
        # the reload it asked for; older managers ignore the field.
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}", *_status(status))

    def stopping(self, status: str = "") -> bool:
        return self.send("STOPPING=1", *_status(status))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def _status(text: str) -> list[str]:
    # A newline in the text would start a new assignment (a status must never be able to say READY=1).
    return [f"STATUS={' '.join(text.splitlines())}"] if text else []


def _unsigned(value: str | None) -> int | None:
    # Plain ASCII digits only: int() would also take " 3", "+3", "1_0" and non-ASCII digits.
    if value is None or not (value.isascii() and value.isdigit()):
        return None
    return int(value)


def watchdog_interval(env: Mapping[str, str], pid: int) -> float | None:
    """Seconds between WATCHDOG=1 pings (half the manager's timeout), or None when no watchdog is armed."""
    usec = _unsigned(env.get("WATCHDOG_USEC"))
    if not usec:
        return None
    if "WATCHDOG_PID" in env and _unsigned(env["WATCHDOG_PID"]) != pid:
        return None
    return usec / 2 / 1e6


def listen_fds(env: MutableMapping[str, str], pid: int) -> list[int]:
    """The sockets systemd passed to this process (fds 3, 4, ...), marked close-on-exec.

    LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are removed from `env` in every case, so that a child (git,
    the reload client) never believes the fds were meant for it. [] when the variables are absent or name
    another process. ValueError when they name this process but LISTEN_FDS is not a count, OSError when a
    passed fd is not open: a broken activation fails the start loudly rather than letting memd bind a socket
    of its own beside the one systemd listens on.
    """
    try:
        if _unsigned(env.get("LISTEN_PID")) != pid:
            return []
        count = env.get("LISTEN_FDS")
        if count is None:
            return []
        n = _unsigned(count)
        if n is None:
            raise ValueError(f"LISTEN_FDS={count!r} is not a count of file descriptors")
        fds = list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + n))
        for fd in fds:
            flags = fcntl.fcntl(fd, fcntl.F_GETFD)
            fcntl.fcntl(fd, fcntl.F_SETFD, flags | fcntl.FD_CLOEXEC)
        return fds
    finally:
        for name in LISTEN_VARIABLES:
            env.pop(name, None)


__all__ = ["LISTEN_VARIABLES", "SD_LISTEN_FDS_START", "Notifier", "listen_fds", "watchdog_interval"]
