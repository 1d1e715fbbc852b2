"""Contract 6 against the real daemon: private socket directory and socket modes, refusal of unsafe directories,
peer credentials (SO_PEERCRED) checked against allowed uids/gids, and per-workspace reader/writer rules.

Other users are played by forked children of the test (running as root) that drop to uid/gid 65534/65535 before
touching the socket; they speak the wire protocol with the standard library only, so they need no access to
the virtualenv. Waits are bounded polls, never timing assertions.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import RunningDaemon, base_config, wait_for

from memd.client import Client
from memd.errors import ACCESS_DENIED, MemdError

NOBODY = 65534
OTHER = 65535
DEADLINE = 20.0
MakeDaemon = Callable[..., RunningDaemon]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def wait_exit(proc: subprocess.Popen[bytes] | None, timeout: float = DEADLINE) -> int:
    assert proc is not None
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"process still running after {timeout}s") from None


# --- a client running as another user -----------------------------------------------------------------------------


def _converse(path: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    """Send each request and read its answer; with none, or once memd closes, read until the connection ends."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    try:
        sock.connect(path)
    except OSError as exc:
        return {"connect_error": type(exc).__name__}
    lines: list[Any] = []
    buffer = b""

    def read_line() -> bool:
        nonlocal buffer
        while b"\n" not in buffer:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:  # memd closed with our unread request still queued on its side
                chunk = b""
            if not chunk:
                return False
            buffer += chunk
        line, _, buffer = buffer.partition(b"\n")
        lines.append(json.loads(line))
        return True

    with sock:
        for i, request in enumerate(requests, 1):
            try:
                sock.sendall(json.dumps({"jsonrpc": "2.0", "id": i, **request}).encode() + b"\n")
            except (BrokenPipeError, ConnectionResetError):
                break  # memd already closed; what it said before closing is still there to read
            if not read_line():
                break
        else:
            if requests:  # every request was answered and the connection is still open
                return {"lines": lines, "closed": False}
        while read_line():
            pass
        return {"lines": lines, "closed": True}


def as_user(
    uid: int, gid: int, action: Callable[..., dict[str, Any]], *args: Any, groups: tuple[int, ...] = ()
) -> dict[str, Any]:
    """`action(*args)` in a forked child that dropped every root privilege to uid/gid and `groups` (the
    supplementary groups; none by default).

    The child inherits the test's imported modules, so it needs no access to the virtualenv; its JSON-able
    result comes back over a pipe and it never returns into pytest.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read_end)
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            outcome = action(*args)
            os.write(write_end, json.dumps(outcome).encode())
            status = 0
        except BaseException as exc:
            os.write(write_end, json.dumps({"child_error": f"{type(exc).__name__}: {exc}"}).encode())
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        while chunk := pipe.read(65536):
            chunks.append(chunk)
    os.waitpid(pid, 0)
    outcome: dict[str, Any] = json.loads(b"".join(chunks))
    assert "child_error" not in outcome, outcome
    return outcome


def converse(
    uid: int, gid: int, path: Path, requests: list[dict[str, Any]] | None = None, groups: tuple[int, ...] = ()
) -> dict[str, Any]:
    """As uid/gid (and supplementary `groups`): send each request and read its answer; with none, read until memd
    closes the connection."""
    return as_user(uid, gid, _converse, str(path), requests or [], groups=groups)


def error_code(line: dict[str, Any]) -> int | None:
    return line.get("error", {}).get("code")


def open_up(d: RunningDaemon, socket_dir: bool = True) -> None:
    """Let other users reach the socket at the filesystem level (the daemon only checks its directory at start).

    The test's private temporary directories above the socket directory, and (unless `socket_dir` is False) the
    socket directory itself, get o+x (search) only.
    """
    for directory in d.socket_path.parents:
        if directory == Path(tempfile.gettempdir()):
            break
        if directory != d.socket_path.parent or socket_dir:
            directory.chmod(mode(directory) | 0o011)


PING = {"method": "ping", "params": {}}


# --- modes --------------------------------------------------------------------------------------------------------


def _reload_by_sighup(d: RunningDaemon) -> None:
    before = d.call("status")["last_reload"]
    d.signal(signal.SIGHUP)
    record = wait_for(
        lambda: (r := d.call("status")["last_reload"]) and r != before and r, "the SIGHUP reload to be recorded"
    )
    assert record["reloaded"] is True, record


def test_socket_directory_is_0700_and_socket_0600_by_default_through_reload_and_restart(daemon: RunningDaemon) -> None:
    run_dir = daemon.socket_path.parent
    assert mode(run_dir) == 0o700
    assert mode(daemon.socket_path) == 0o600
    assert stat.S_ISSOCK(os.lstat(daemon.socket_path).st_mode)
    state = Path(daemon.config["daemon"]["state_dir"])
    assert mode(state) == 0o700
    assert mode(state / "memd.lock") == 0o600

    _reload_by_sighup(daemon)
    assert (mode(run_dir), mode(daemon.socket_path)) == (0o700, 0o600)

    assert daemon.stop() == 0
    daemon.start()
    assert (mode(run_dir), mode(daemon.socket_path)) == (0o700, 0o600)


def test_configured_socket_mode_0660_holds_through_reload_and_restart(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    d = make_daemon(config=base_config(short_root / "d", server={"socket_mode": "0660"}))
    assert mode(d.socket_path) == 0o660
    assert mode(d.socket_path.parent) == 0o700

    _reload_by_sighup(d)
    assert mode(d.socket_path) == 0o660

    assert d.stop() == 0
    d.start()
    assert mode(d.socket_path) == 0o660


def test_a_reload_that_changes_socket_mode_applies_it(daemon: RunningDaemon) -> None:
    assert mode(daemon.socket_path) == 0o600
    daemon.rewrite_config({**daemon.config, "server": {**daemon.config["server"], "socket_mode": "0660"}})

    assert daemon.call("config.reload")["reloaded"] is True

    assert mode(daemon.socket_path) == 0o660


# --- unsafe directories -------------------------------------------------------------------------------------------


def test_refuses_to_start_when_the_socket_directory_is_group_or_world_writable(make_daemon: MakeDaemon) -> None:
    d = make_daemon(start=False)
    run_dir = d.socket_path.parent
    run_dir.mkdir(parents=True)
    run_dir.chmod(0o777)

    assert wait_exit(d.spawn()) != 0

    assert f"{run_dir} is group- or world-writable (mode 0777); run chmod go-w {run_dir}" in d.log()
    assert not d.socket_path.exists()


def test_refuses_to_start_when_the_socket_directory_belongs_to_another_user(make_daemon: MakeDaemon) -> None:
    d = make_daemon(start=False)
    run_dir = d.socket_path.parent
    run_dir.mkdir(parents=True, mode=0o700)
    os.chown(run_dir, NOBODY, NOBODY)

    assert wait_exit(d.spawn()) != 0

    assert f"{run_dir} is owned by uid {NOBODY}, not by memd's uid 0; chown it" in d.log()
    assert not d.socket_path.exists()


def test_refuses_to_start_when_the_state_directory_is_world_writable(make_daemon: MakeDaemon) -> None:
    d = make_daemon(start=False)
    state = Path(d.config["daemon"]["state_dir"])
    state.mkdir(parents=True)
    state.chmod(0o777)

    assert wait_exit(d.spawn()) != 0

    assert f"run chmod go-w {state}" in d.log()


# --- peer credentials ---------------------------------------------------------------------------------------------


def test_another_user_cannot_even_reach_the_socket_with_default_modes(daemon: RunningDaemon) -> None:
    open_up(daemon, socket_dir=False)  # only memd's own 0700 directory stands in the way
    assert converse(NOBODY, NOBODY, daemon.socket_path, [PING]) == {"connect_error": "PermissionError"}

    open_up(daemon)  # and with the directory opened, the 0600 socket itself
    assert converse(NOBODY, NOBODY, daemon.socket_path, [PING]) == {"connect_error": "PermissionError"}
    assert daemon.call("status")["server"]["denied"] == 0, "no connection should have reached memd"


def test_a_reachable_socket_still_denies_a_uid_that_is_not_allowed(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = make_daemon(config=base_config(short_root / "d", server={"socket_mode": "0666"}))
    open_up(d)

    outcome = converse(NOBODY, NOBODY, d.socket_path)  # says nothing: the denial comes unasked, then the close

    assert outcome["closed"] is True
    assert len(outcome["lines"]) == 1, outcome
    (line,) = outcome["lines"]
    assert error_code(line) == ACCESS_DENIED
    assert f"uid {NOBODY} is not allowed" in line["error"]["message"]
    assert "result" not in line
    wait_for(lambda: f"denied connection from uid {NOBODY} gid {NOBODY}" in d.log(), "the denial in the log")
    assert d.call("status")["server"]["denied"] == 1


def test_a_denied_uid_gets_no_answer_to_what_it_sends(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = make_daemon(config=base_config(short_root / "d", server={"socket_mode": "0666"}))
    open_up(d)

    outcome = converse(NOBODY, NOBODY, d.socket_path, [{"method": "warm.log", "params": {"workspace": "alpha"}}, PING])

    assert outcome["closed"] is True
    assert [error_code(line) for line in outcome["lines"]] == [ACCESS_DENIED]
    assert list((d.workspace("alpha") / "warm").glob("*.md")) == []


def _call_after_refusal(path: str) -> dict[str, Any]:
    """Connect with memd.client, wait until memd has refused and hung up, then make a call."""
    client = Client(Path(path), timeout=10)
    try:
        poller = select.poll()
        poller.register(client._connect(), select.POLLRDHUP)
        if not poller.poll(10_000):
            return {"error": "memd never hung up"}
        client.call("ping")
    except MemdError as exc:
        return {"raised": type(exc).__name__, "code": exc.code, "message": exc.message}
    except OSError as exc:
        return {"raised": type(exc).__name__, "message": str(exc)}
    finally:
        client.close()
    return {"raised": None}


def test_the_python_client_reports_a_refusal_as_access_denied_even_when_memd_hung_up_first(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    d = make_daemon(config=base_config(short_root / "d", server={"socket_mode": "0666"}))
    open_up(d)

    outcome = as_user(NOBODY, NOBODY, _call_after_refusal, str(d.socket_path))

    assert outcome["raised"] == "AccessDenied", outcome
    assert outcome["code"] == ACCESS_DENIED
    assert f"uid {NOBODY} is not allowed" in outcome["message"]


def test_an_allowed_uid_is_served(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = make_daemon(config=base_config(short_root / "d", server={"socket_mode": "0666", "allowed_uids": [NOBODY]}))
    open_up(d)

    outcome = converse(
        NOBODY,
        NOBODY,
        d.socket_path,
        [PING, {"method": "warm.log", "params": {"workspace": "alpha", "action": "from nobody"}}],
    )

    assert outcome["closed"] is False
    pong, logged = outcome["lines"]
    assert pong["result"]["pong"] is True
    assert logged["result"]["entry"]["action"] == "from nobody"


def test_an_allowed_gid_is_served(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = make_daemon(config=base_config(short_root / "d", server={"socket_mode": "0666", "allowed_gids": [NOBODY]}))
    open_up(d)

    served = converse(OTHER, NOBODY, d.socket_path, [PING])
    denied = converse(OTHER, OTHER, d.socket_path)

    assert served["lines"][0]["result"]["pong"] is True
    assert [error_code(line) for line in denied["lines"]] == [ACCESS_DENIED]


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a client as another uid with chosen groups")
def test_an_allowed_gid_held_only_as_a_supplementary_group_is_served(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = make_daemon(config=base_config(short_root / "d", server={"socket_mode": "0666", "allowed_gids": [NOBODY]}))
    open_up(d)

    member = converse(OTHER, OTHER, d.socket_path, [PING], groups=(OTHER, NOBODY))  # usermod -aG, then a login
    stranger = converse(OTHER, OTHER, d.socket_path, groups=(OTHER, 65533))

    assert member["lines"][0].get("result", {}).get("pong") is True, member
    assert [error_code(line) for line in stranger["lines"]] == [ACCESS_DENIED]
    assert d.call("status")["server"]["denied"] == 1


# --- per-workspace rules ------------------------------------------------------------------------------------------


def _log(workspace: str, action: str) -> dict[str, Any]:
    return {"method": "warm.log", "params": {"workspace": workspace, "action": action}}


def _hot(workspace: str) -> dict[str, Any]:
    return {"method": "hot.get", "params": {"workspace": workspace}}


@pytest.fixture
def ruled(make_daemon: MakeDaemon, short_root: Path) -> RunningDaemon:
    """alpha: writer 65534, reader 65535; beta: no rules. Both uids (and 65533) pass the socket-level check."""
    config = base_config(short_root / "d", server={"socket_mode": "0666", "allowed_uids": [NOBODY, OTHER, 65533]})
    config["workspaces"]["alpha"].update(writers=[NOBODY], readers=[OTHER])
    d = make_daemon(config=config)
    open_up(d)
    return d


def test_a_listed_writer_can_write_and_read(ruled: RunningDaemon) -> None:
    outcome = converse(NOBODY, NOBODY, ruled.socket_path, [_log("alpha", "by the writer"), _hot("alpha")])

    logged, hot = outcome["lines"]
    assert logged["result"]["entry"]["action"] == "by the writer"
    assert "result" in hot


def test_a_reader_can_read_but_not_write(ruled: RunningDaemon) -> None:
    outcome = converse(OTHER, OTHER, ruled.socket_path, [_log("alpha", "by a reader"), _hot("alpha"), PING])

    denied, hot, pong = outcome["lines"]
    assert error_code(denied) == ACCESS_DENIED
    assert f"uid {OTHER} may not write to workspace 'alpha'" in denied["error"]["message"]
    assert "result" in hot
    assert pong["result"]["pong"] is True, "a per-request denial must not close the connection"
    days = list((ruled.workspace("alpha") / "warm").glob("*.md"))
    assert all("by a reader" not in f.read_text() for f in days)


def test_a_uid_in_neither_list_can_neither_read_nor_write_but_unruled_workspaces_are_open(ruled: RunningDaemon) -> None:
    outcome = converse(65533, 65533, ruled.socket_path, [_log("alpha", "x"), _hot("alpha"), _log("beta", "open")])

    write, read, beta = outcome["lines"]
    assert error_code(write) == ACCESS_DENIED
    assert error_code(read) == ACCESS_DENIED
    assert "may not read workspace 'alpha'" in read["error"]["message"]
    assert beta["result"]["entry"]["action"] == "open"


def test_the_daemons_own_uid_is_not_bound_by_workspace_rules(ruled: RunningDaemon) -> None:
    assert ruled.call("warm.log", workspace="alpha", action="by root")["entry"]["action"] == "by root"


def test_admin_methods_are_refused_to_unprivileged_allowed_uids(ruled: RunningDaemon) -> None:
    outcome = converse(OTHER, OTHER, ruled.socket_path, [{"method": "config.reload", "params": {}}, PING])

    denied, pong = outcome["lines"]
    assert error_code(denied) == ACCESS_DENIED
    assert pong["result"]["pong"] is True


def test_listings_show_another_uid_only_the_workspaces_it_may_read(ruled: RunningDaemon) -> None:
    requests = [{"method": "workspace.list", "params": {}}, {"method": "status", "params": {}}]
    reader = converse(OTHER, OTHER, ruled.socket_path, requests)
    stranger = converse(65533, 65533, ruled.socket_path, requests)

    listed, status = reader["lines"]
    assert [w["name"] for w in listed["result"]["workspaces"]] == ["alpha", "beta"]
    assert sorted(status["result"]["workspaces"]) == ["alpha", "beta"]
    listed, status = stranger["lines"]
    assert [w["name"] for w in listed["result"]["workspaces"]] == ["beta"]
    assert sorted(status["result"]["workspaces"]) == ["beta"]


def test_status_names_nothing_of_a_workspace_the_peer_may_not_read_anywhere_in_it(ruled: RunningDaemon) -> None:
    ruled.call("warm.log", workspace="alpha", action="marks alpha for the search index")
    ruled.call("config.reload")  # the last reload's result names the workspaces it serves
    requests = [{"method": "status", "params": {}}, {"method": "status", "params": {"summary": True}}]

    full, summary = converse(65533, 65533, ruled.socket_path, requests)["lines"]

    for answer in (full, summary):
        shown = json.dumps(answer["result"])
        assert "alpha" not in shown, shown
        assert str(ruled.workspace("alpha")) not in shown
    assert full["result"]["last_reload"]["workspaces"] == ["beta"]
