"""Who is on the other end of the socket (memd.peercred): the kernel's word or an error, never a guess."""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memd import peercred
from memd.peercred import peer_groups, peer_of


class Refusing:
    """A socket whose getsockopt fails for the options in `refused` and asks a real socket for the rest."""

    def __init__(self, real: socket.socket, refused: set[int], error: int = errno.ENOPROTOOPT) -> None:
        self.real = real
        self.refused = refused
        self.error = error

    def getsockopt(self, level: int, option: int, size: int) -> bytes:
        if option in self.refused:
            raise OSError(self.error, os.strerror(self.error))
        return self.real.getsockopt(level, option, size)


def test_the_real_peer_of_a_socket_pair_is_this_process_with_its_groups() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        peer = peer_of(a)

    assert (peer.pid, peer.uid, peer.gid) == (os.getpid(), os.getuid(), os.getgid())
    assert set(peer.groups) == set(os.getgroups())


def test_a_failed_so_peercred_raises_instead_of_guessing_a_peer() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b, pytest.raises(OSError):
        peer_of(Refusing(a, {socket.SO_PEERCRED}, errno.ENOTSOCK))  # type: ignore[arg-type]


def test_a_short_so_peercred_answer_raises() -> None:
    class Short:
        def getsockopt(self, *args: Any) -> bytes:
            return b"\1\0\0\0"

    with pytest.raises(struct.error):
        peer_of(Short())  # type: ignore[arg-type]


def test_without_so_peergroups_the_groups_come_from_proc() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        groups = peer_groups(Refusing(a, {peercred._SO_PEERGROUPS}), os.getpid())  # type: ignore[arg-type]

    assert set(groups) == set(os.getgroups())


def test_groups_of_a_process_that_is_gone_are_none_rather_than_someone_elses() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        groups = peer_groups(Refusing(a, {peercred._SO_PEERGROUPS}), 2**22 + 12345)  # type: ignore[arg-type]

    assert groups == ()


def test_so_peergroups_answers_are_read_whole_gids() -> None:
    many = tuple(range(1000, 1000 + 300))

    class Answering:
        def getsockopt(self, level: int, option: int, size: int) -> bytes:
            assert (level, option) == (socket.SOL_SOCKET, peercred._SO_PEERGROUPS)
            assert size >= 4 * len(many)
            return struct.pack(f"{len(many)}I", *many) + b"\7\7"  # a stray partial gid is not a group

    assert peer_groups(Answering(), os.getpid()) == many  # type: ignore[arg-type]


GROUPS = (4242, 4343, 4444)


@pytest.fixture
def child_peer(tmp_path: Path) -> Iterator[tuple[socket.socket, int]]:
    """A connection from a child process running with supplementary groups GROUPS (root only), and its pid.
    The child stays connected until the test ends."""
    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups(list(GROUPS))
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(path)
            client.recv(1)  # until the parent closes
        finally:
            os._exit(0)
    conn, _ = listener.accept()
    try:
        yield conn, pid
    finally:
        conn.close()
        listener.close()
        os.waitpid(pid, 0)


root_only = pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a child process supplementary groups")


@root_only
def test_the_peers_supplementary_groups_come_from_the_kernel(child_peer: tuple[socket.socket, int]) -> None:
    conn, pid = child_peer

    peer = peer_of(conn)

    assert (peer.pid, peer.uid, peer.gid) == (pid, 0, 0)
    assert set(peer.groups) == set(GROUPS)


@root_only
def test_without_so_peergroups_the_peers_groups_are_read_from_its_proc_status(
    child_peer: tuple[socket.socket, int],
) -> None:
    conn, pid = child_peer
    no_peergroups = Refusing(conn, {peercred._SO_PEERGROUPS})

    assert peer_groups(no_peergroups, pid) == GROUPS  # type: ignore[arg-type]
    assert peer_of(no_peergroups).groups == GROUPS  # type: ignore[arg-type]
