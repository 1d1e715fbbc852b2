"""A connection's outbox: answers leave in request order, whether the loop writes them or the worker that made a
write durable sends its answer itself; the two never send the same answer, and never into the middle of the
other's bytes. Real sockets (a socketpair); the transport is a stand-in that writes to the same socket."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from memd.outbox import Outbox


class Transport:
    """What the loop's transport does for the outbox: write now, or keep what the socket would not take."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffered = b""
        self.closing = False
        self.hold = False  # keep everything written (a client that stopped reading)

    def write(self, data: bytes) -> None:
        if self.hold:
            self.buffered += data
        else:
            self.sock.sendall(data)

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return len(self.buffered)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(2)
    yield ours, client
    ours.close()
    client.close()


@pytest.fixture
def box(pair: tuple[socket.socket, socket.socket]) -> Iterator[Outbox]:
    """An outbox on our end of the pair; lost at the end, as a connection's is (closing the socket's duplicate)."""
    outbox = Outbox()
    outbox.attach(pair[0].fileno())
    yield outbox
    outbox.lost()


def received(client: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = client.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def nothing_waiting(client: socket.socket) -> bool:
    client.setblocking(False)
    try:
        client.recv(1)
    except BlockingIOError:
        return True
    finally:
        client.settimeout(2)
    return False


def test_answers_leave_in_request_order_however_they_finish(
    pair: tuple[socket.socket, socket.socket], box: Outbox
) -> None:
    ours, client = pair
    transport = Transport(ours)
    first, second, third = box.add(), box.add(), box.add()
    third.set(b"3\n")
    second.set(b"2\n")
    box.flush(transport)  # the first is still owed: nothing may overtake it
    assert nothing_waiting(client) and box.owed == 3
    first.set(b"1\n")
    box.flush(transport)
    assert received(client, 6) == b"1\n2\n3\n"
    assert box.owed == 0


def test_a_notification_takes_its_turn_and_sends_nothing(
    pair: tuple[socket.socket, socket.socket], box: Outbox
) -> None:
    ours, client = pair
    transport = Transport(ours)
    box.add().set(None)
    box.add().set(b"2\n")
    box.flush(transport)
    assert received(client, 2) == b"2\n"


def test_the_worker_sends_the_oldest_answer_owed_and_the_loop_does_not_send_it_again(
    pair: tuple[socket.socket, socket.socket], box: Outbox
) -> None:
    ours, client = pair
    transport = Transport(ours)
    write = box.add()
    assert box.send_early(write, b"durable\n", closing=False)
    assert received(client, 8) == b"durable\n"
    box.claim(write)  # the loop catches up: it publishes and finishes the request
    write.set(b"the loop's own answer\n")
    box.flush(transport)
    assert nothing_waiting(client) and box.owed == 0


def test_the_worker_never_sends_ahead_of_an_answer_still_owed(
    pair: tuple[socket.socket, socket.socket], box: Outbox
) -> None:
    client = pair[1]
    box.add()
    later = box.add()
    assert not box.send_early(later, b"later\n", closing=False)
    assert nothing_waiting(client)


def test_the_worker_sends_behind_answers_it_sent_whole_that_the_loop_has_not_caught_up_with(
    pair: tuple[socket.socket, socket.socket], box: Outbox
) -> None:
    # A client that sends its next request as soon as it has the last answer: the loop has not yet taken up the
    # answer a worker sent, but nothing of it is left to send, so the next one need not wait for the loop.
    ours, client = pair
    transport = Transport(ours)
    first, second, third = box.add(), box.add(), box.add()
    assert box.send_early(first, b"first\n", closing=False)
    assert box.send_early(second, b"second\n", closing=False)
    assert received(client, 13) == b"first\nsecond\n"
    for reply in (first, second):  # the loop catches up: nothing of either goes out again
        box.claim(reply)
        reply.set(b"the loop's own answer\n")
    box.flush(transport)
    third.set(b"third\n")
    box.flush(transport)
    assert received(client, 6) == b"third\n" and box.owed == 0


def test_the_worker_never_sends_behind_an_answer_it_sent_in_part(
    pair: tuple[socket.socket, socket.socket], box: Outbox
) -> None:
    ours, client = pair
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    big = b"x" * (1 << 20) + b"\n"
    first, second = box.add(), box.add()
    assert box.send_early(first, big, closing=False) and first.early_sent < len(big)
    half = first.early_sent // 2
    assert received(client, half) == b"x" * half  # room in the socket again
    assert not box.send_early(second, b"second\n", closing=False)  # it would land inside the first's bytes


def test_an_answer_the_loop_has_taken_up_is_never_sent_by_the_worker(
    pair: tuple[socket.socket, socket.socket], box: Outbox
) -> None:
    client = pair[1]
    write = box.add()
    box.claim(write)
    assert not box.send_early(write, b"late\n", closing=False)
    assert nothing_waiting(client)


def test_the_worker_waits_while_the_loop_has_bytes_unsent_and_sends_again_once_they_are_out(
    pair: tuple[socket.socket, socket.socket], box: Outbox
) -> None:
    ours, client = pair
    transport = Transport(ours)
    transport.hold = True
    box.add().set(b"first\n")
    box.flush(transport)  # the transport keeps it: the client is not reading
    write = box.add()
    assert not box.send_early(write, b"second\n", closing=False)  # it would land before "first"
    transport.sock.sendall(transport.buffered)
    transport.buffered, transport.hold = b"", False
    box.check_unsent(transport)
    assert box.send_early(write, b"second\n", closing=False)
    assert received(client, 13) == b"first\nsecond\n"


def test_a_partial_early_send_is_finished_by_the_loop(pair: tuple[socket.socket, socket.socket], box: Outbox) -> None:
    ours, client = pair
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    transport = Transport(ours)
    big = b"x" * (1 << 20) + b"\n"
    write = box.add()
    assert box.send_early(write, big, closing=False)
    assert 0 < write.early_sent < len(big)  # the socket took what fit, without blocking the worker
    box.claim(write)
    write.set(b"not this\n")
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(received(client, len(big) + 1)))
    reader.start()
    box.flush(transport)  # the rest of the worker's answer, not the loop's own
    box.add().set(b"!")
    box.flush(transport)
    reader.join(5)
    assert got == [big + b"!"]


def test_no_answer_goes_out_on_a_lost_or_closing_connection_and_the_duplicate_socket_is_closed(
    pair: tuple[socket.socket, socket.socket], box: Outbox
) -> None:
    ours, client = pair
    transport = Transport(ours)
    first = box.add()
    assert not box.send_early(first, b"x\n", closing=True)
    assert box.send_early(first, b"x\n", closing=False)  # the first early send makes the socket's duplicate
    box.claim(first)
    first.set(b"x\n")
    box.flush(transport)
    duplicate = box._early_socket
    assert duplicate is not None and duplicate.fileno() >= 0
    second = box.add()
    box.lost()
    assert duplicate.fileno() == -1  # closed: its number is never written to once the loop closes the socket
    assert not box.send_early(second, b"y\n", closing=False)
    assert received(client, 2) == b"x\n" and nothing_waiting(client)


def test_a_connection_without_a_socket_to_reach_is_answered_by_the_loop_only(
    pair: tuple[socket.socket, socket.socket], box: Outbox
) -> None:
    ours, client = pair
    box, transport = Outbox(), Transport(ours)
    box.attach(-1)
    write = box.add()
    assert not box.send_early(write, b"early\n", closing=False)
    write.set(b"loop\n")
    box.flush(transport)
    assert received(client, 5) == b"loop\n"
