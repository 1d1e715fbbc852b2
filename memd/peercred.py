"""Who is on the other end of a Unix socket: pid, uid, primary gid (SO_PEERCRED) and supplementary groups.

`peer_of` raises when the kernel does not say who the peer is; it never guesses one (the server refuses such a
connection). Only the supplementary groups fall back, to /proc, and an unreadable fallback means no groups.

Imports memd.handlers (the Peer record).
"""

from __future__ import annotations

import socket
import struct

from memd.handlers import Peer

_PEERCRED = struct.Struct("3i")
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13; Python 3.11 does not name it
_GID = struct.Struct("I")


def peer_of(sock: socket.socket) -> Peer:
    pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return Peer(pid=pid, uid=uid, gid=gid, groups=peer_groups(sock, pid))


def peer_groups(sock: socket.socket, pid: int) -> tuple[int, ...]:
    """SO_PEERCRED gives only the primary gid; a user added to memd's group has it as a supplementary one.
    SO_PEERGROUPS asks the kernel (works under ProtectProc=invisible); /proc is the fallback."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, _GID.size * 1024)
        return tuple(g for (g,) in _GID.iter_unpack(raw[: len(raw) - len(raw) % _GID.size]))
    except OSError:
        return _supplementary_groups(pid)


def _supplementary_groups(pid: int) -> tuple[int, ...]:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Groups:"):
                    return tuple(int(g) for g in line.split()[1:])
    except (OSError, ValueError):
        pass
    return ()
