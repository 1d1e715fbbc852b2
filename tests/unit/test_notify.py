"""memd.notify speaks systemd's notify, watchdog and socket-activation protocols exactly.

Notifications are checked against a real AF_UNIX datagram socket standing in for systemd; the fd-passing part
of socket activation runs in a child interpreter so that pytest's own descriptors are never touched.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import memd
from memd.notify import Notifier, listen_fds, watchdog_interval

REPO = Path(memd.__file__).resolve().parent.parent


class Manager:
    """Stands in for systemd: a datagram socket bound at a path, as /run/systemd/notify is."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(5)

    def received(self) -> bytes:
        return self.sock.recv(4096)


# Socket paths must fit in 108 bytes: they live under the short directory `short_root` (tests/conftest.py).
@pytest.fixture
def manager(short_root: Path) -> Iterator[Manager]:
    found = Manager(short_root / "notify")
    yield found
    found.sock.close()


@pytest.fixture
def notifier(manager: Manager) -> Iterator[Notifier]:
    found = Notifier.from_env({"NOTIFY_SOCKET": str(manager.path)})
    assert found is not None
    yield found
    found.close()


# --- finding the manager ------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", [{}, {"NOTIFY_SOCKET": ""}, {"OTHER": "x"}])
def test_without_notify_socket_there_is_no_notifier(env: dict[str, str]) -> None:
    assert Notifier.from_env(env) is None


@pytest.mark.parametrize("value", ["run/systemd/notify", "@", "vsock:2:1234"])
def test_a_relative_empty_abstract_or_vsock_address_gives_no_notifier(value: str) -> None:
    assert Notifier.from_env({"NOTIFY_SOCKET": value}) is None


def test_at_sign_names_an_abstract_socket() -> None:
    name = f"memd-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        notifier = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert notifier is not None
        assert notifier.address == b"\0" + name.encode()
        try:
            assert notifier.ready("up")
            assert sock.recv(4096) == b"READY=1\nSTATUS=up"
        finally:
            notifier.close()


# --- what is sent -------------------------------------------------------------------------------------------


def test_ready_with_a_status_is_one_datagram(manager: Manager, notifier: Notifier) -> None:
    assert notifier.ready("serving 3 workspaces")
    assert manager.received() == b"READY=1\nSTATUS=serving 3 workspaces"


def test_ready_without_a_status_sends_only_ready(manager: Manager, notifier: Notifier) -> None:
    assert notifier.ready()
    assert manager.received() == b"READY=1"


def test_status(manager: Manager, notifier: Notifier) -> None:
    assert notifier.status("checkpointing alpha")
    assert manager.received() == b"STATUS=checkpointing alpha"


def test_a_status_cannot_smuggle_another_assignment(manager: Manager, notifier: Notifier) -> None:
    assert notifier.status("workspace x\nREADY=1")
    assert manager.received() == b"STATUS=workspace x READY=1"


def test_reloading_carries_the_monotonic_time_in_microseconds(manager: Manager, notifier: Notifier) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert notifier.reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    first, second = manager.received().decode().split("\n")
    assert first == "RELOADING=1"
    name, value = second.split("=")
    assert name == "MONOTONIC_USEC"
    assert value.isdigit()
    assert before <= int(value) <= after


def test_stopping(manager: Manager, notifier: Notifier) -> None:
    assert notifier.stopping()
    assert manager.received() == b"STOPPING=1"


def test_watchdog_ping(manager: Manager, notifier: Notifier) -> None:
    assert notifier.watchdog()
    assert manager.received() == b"WATCHDOG=1"


def test_send_joins_assignments_with_newlines(manager: Manager, notifier: Notifier) -> None:
    assert notifier.send("STATUS=draining", "EXTEND_TIMEOUT_USEC=5000000")
    assert manager.received() == b"STATUS=draining\nEXTEND_TIMEOUT_USEC=5000000"


def test_nothing_to_send_sends_nothing(manager: Manager, notifier: Notifier) -> None:
    assert notifier.send() is False
    manager.sock.settimeout(0.05)
    with pytest.raises(TimeoutError):
        manager.sock.recv(4096)


def test_many_notifications_reuse_one_socket(manager: Manager, notifier: Notifier) -> None:
    notifier.watchdog()
    manager.received()
    open_before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        assert notifier.watchdog()
        assert manager.received() == b"WATCHDOG=1"
    assert len(os.listdir("/proc/self/fd")) == open_before


def test_close_is_idempotent(notifier: Notifier) -> None:
    notifier.close()
    notifier.close()


# --- best effort --------------------------------------------------------------------------------------------


def test_a_vanished_manager_makes_send_return_false(
    manager: Manager, notifier: Notifier, caplog: pytest.LogCaptureFixture
) -> None:
    assert notifier.ready()
    manager.sock.close()
    manager.path.unlink()
    with caplog.at_level(logging.DEBUG, logger="memd.notify"):
        assert notifier.watchdog() is False
        assert notifier.stopping() is False
    assert any("WATCHDOG=1" in record.getMessage() for record in caplog.records)


def test_a_manager_that_never_existed_makes_send_return_false(short_root: Path) -> None:
    notifier = Notifier.from_env({"NOTIFY_SOCKET": str(short_root / "absent")})
    assert notifier is not None
    assert notifier.ready("up") is False
    notifier.close()


def test_sending_recovers_when_the_manager_comes_back(short_root: Path) -> None:
    path = short_root / "notify"
    notifier = Notifier.from_env({"NOTIFY_SOCKET": str(path)})
    assert notifier is not None
    assert notifier.watchdog() is False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(5)
        assert notifier.watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"
    notifier.close()


# --- watchdog interval --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, 15.0),
        ({"WATCHDOG_USEC": "1"}, 0.0000005),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": ""}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "abc"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "-30000000"}, None),
        ({"WATCHDOG_USEC": "30s"}, None),
        ({"WATCHDOG_USEC": ""}, None),
        ({"WATCHDOG_PID": "4242"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval_is_half_the_timeout_for_this_process(env: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval(env, 4242) == expected


# --- socket activation: the environment ---------------------------------------------------------------------

ACTIVATION = {"LISTEN_PID": "4242", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "memd.socket"}


@pytest.mark.parametrize(
    "env",
    [
        {},
        {**ACTIVATION, "LISTEN_PID": "4243"},
        {**ACTIVATION, "LISTEN_PID": "not-a-pid"},
        {**ACTIVATION, "LISTEN_FDS": "0"},
        {"LISTEN_PID": "4242"},
        {"LISTEN_FDS": "1", "LISTEN_FDNAMES": "memd.socket"},
    ],
)
def test_fds_meant_for_someone_else_or_none_are_not_taken_and_the_variables_go(env: dict[str, str]) -> None:
    env = {**env, "HOME": "/home/a"}
    assert listen_fds(env, 4242) == []
    assert env == {"HOME": "/home/a"}


@pytest.mark.parametrize("count", ["", "-1", "one", " 1"])
def test_a_malformed_count_for_this_process_is_an_error_and_the_variables_still_go(count: str) -> None:
    env = {**ACTIVATION, "LISTEN_FDS": count}
    with pytest.raises(ValueError, match="LISTEN_FDS"):
        listen_fds(env, 4242)
    assert env == {}


# --- socket activation: real descriptors, in a child process ------------------------------------------------


def run_child(code: str, *args: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


ACTIVATED_CHILD = """
    import json, os, socket, subprocess, sys
    from memd.notify import listen_fds

    # What systemd does before exec: listening sockets at fds 3.., inheritable, and the LISTEN_* variables.
    # Placeholders keep the new sockets off fds 3.. so that dup2 really puts them there.
    placeholders = [os.open(os.devnull, os.O_RDONLY) for _ in range(8)]
    listeners = []
    for path in sys.argv[1:]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        sock.listen()
        listeners.append(sock)
    for number, sock in enumerate(listeners, start=3):
        os.dup2(sock.fileno(), number, inheritable=True)
    os.environ["LISTEN_PID"] = os.environ.pop("CLAIM_PID", str(os.getpid()))
    os.environ["LISTEN_FDS"] = str(len(listeners))
    os.environ["LISTEN_FDNAMES"] = ":".join(["memd"] * len(listeners))

    fds = listen_fds(os.environ, os.getpid())
    names = [socket.socket(fileno=os.dup(fd)).getsockname() for fd in range(3, 3 + len(listeners))]
    show = "import json, os; print(json.dumps(sorted(k for k in os.environ if k.startswith('LISTEN_'))))"
    grandchild = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, check=True)
    print(json.dumps({
        "fds": fds,
        "inheritable": [os.get_inheritable(fd) for fd in range(3, 3 + len(listeners))],
        "names": names,
        "left_in_environ": sorted(k for k in os.environ if k.startswith("LISTEN_")),
        "seen_by_grandchild": json.loads(grandchild.stdout),
    }))
"""


def test_passed_sockets_are_returned_in_order_and_made_close_on_exec(short_root: Path) -> None:
    paths = [str(short_root / "a.sock"), str(short_root / "b.sock")]
    result = run_child(ACTIVATED_CHILD, *paths)
    assert result["fds"] == [3, 4]
    assert result["names"] == paths
    assert result["inheritable"] == [False, False]
    assert result["left_in_environ"] == []
    assert result["seen_by_grandchild"] == []


def test_sockets_passed_to_another_pid_are_left_alone_but_the_variables_still_go(
    short_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAIM_PID", "1")
    result = run_child(ACTIVATED_CHILD, str(short_root / "a.sock"))
    assert result["fds"] == []
    assert result["inheritable"] == [True]
    assert result["left_in_environ"] == []
    assert result["seen_by_grandchild"] == []


def test_a_promised_fd_that_is_not_open_is_an_error() -> None:
    result = run_child(
        """
        import json, os
        from memd.notify import listen_fds

        os.closerange(3, 64)
        env = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "1"}
        try:
            listen_fds(env, os.getpid())
        except OSError as exc:
            print(json.dumps({"error": exc.__class__.__name__, "env": env}))
        else:
            print(json.dumps({"error": None, "env": env}))
        """
    )
    assert result == {"error": "OSError", "env": {}}
