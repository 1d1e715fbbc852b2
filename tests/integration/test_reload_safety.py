"""A reload never kills, and what a reload takes away is taken at once (issue 12): any failure while applying a
new config is a rejected reload (`reloaded: false`, the old config serving on, `memd reload` failing, which is
what `systemctl reload` runs); a socket group reaches the socket directory (tested as a real member uid); a uid
or a workspace rule removed by a reload stops working on connections that were already open.

Other users are forked children of the test (which runs as root) that drop to another uid before touching the
socket and speak the wire protocol with the standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import RunningDaemon, base_config, wait_for

from memd.client import Client
from memd.errors import ACCESS_DENIED

DEADLINE = 20.0
MakeDaemon = Callable[..., RunningDaemon]
NOBODY = 65534
MEMBER_GID = 65531  # a group no account has as its primary group: membership is a supplementary group only


def pings(path: Path) -> bool:
    try:
        with Client(path, timeout=5) as client:
            return bool(client.call("ping")["pong"])
    except Exception:
        return False


def memd_reload(d: RunningDaemon) -> subprocess.CompletedProcess[str]:
    """What the units' ExecReload= runs, hence what `systemctl reload memd` reports."""
    return subprocess.run(
        [sys.executable, "-m", "memd", "--config", str(d.config_path), "reload", "--socket", str(d.socket_path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env=dict(os.environ),
    )


def open_parents(d: RunningDaemon) -> None:
    """o+x on the test's temporary directories above the socket directory (never on the socket directory)."""
    for directory in d.socket_path.parent.parents:
        if directory == Path(tempfile.gettempdir()):
            break
        directory.chmod(stat.S_IMODE(directory.stat().st_mode) | 0o001)


def _request(method: str, **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode() + b"\n"


class OtherUser:
    """A forked child that runs as another uid with one open connection; it sends a request when told to and
    reports what came back. The connection outlives the parent's reloads in between."""

    def __init__(self, uid: int, gid: int, groups: list[int], path: Path) -> None:
        self._to_child_r, self._to_child = os.pipe()
        self._from_child, self._from_child_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child never returns into pytest
            try:
                os.close(self._to_child)
                os.close(self._from_child)
                os.setgroups(groups)
                os.setgid(gid)
                os.setuid(uid)
                self._serve(path)
            finally:
                os._exit(0)
        os.close(self._to_child_r)
        os.close(self._from_child_w)
        self._replies = os.fdopen(self._from_child, "rb")

    def _serve(self, path: Path) -> None:
        out = os.fdopen(self._from_child_w, "wb", buffering=0)
        commands = os.fdopen(self._to_child_r, "rb")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect(str(path))
        except OSError as exc:
            out.write(json.dumps({"connect_error": type(exc).__name__}).encode() + b"\n")
            return
        out.write(b'{"connected": true}\n')
        reader = sock.makefile("rb")
        for line in commands:
            try:
                sock.sendall(line)
                answer = reader.readline()
            except OSError as exc:
                answer = json.dumps({"socket_error": type(exc).__name__}).encode() + b"\n"
            out.write(answer if answer else b'{"closed": true}\n')

    def read(self) -> dict[str, Any]:
        line = self._replies.readline()
        assert line, "the child went away"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        os.write(self._to_child, _request(method, **params))
        return self.read()

    def close(self) -> None:
        os.close(self._to_child)
        self._replies.close()
        os.waitpid(self.pid, 0)


@contextmanager
def other_user(uid: int, gid: int, path: Path, groups: list[int] | None = None) -> Iterator[OtherUser]:
    user = OtherUser(uid, gid, groups or [], path)
    try:
        yield user
    finally:
        user.close()


# --- a reload that cannot be applied is rejected, never fatal -----------------------------------------------------


def _unreachable_socket_config(d: RunningDaemon) -> dict[str, Any]:
    blocker = d.root / "a-file"
    blocker.write_text("a regular file where the new socket's directory would go\n")
    return {**d.config, "server": {**d.config["server"], "socket": str(blocker / "run" / "memd.sock")}}


def test_sighup_with_a_socket_path_that_cannot_be_created_keeps_serving_and_logs_why(daemon: RunningDaemon) -> None:
    daemon.call("warm.log", workspace="alpha", action="before")
    daemon.rewrite_config(_unreachable_socket_config(daemon))

    daemon.signal(signal.SIGHUP)

    record = wait_for(lambda: daemon.call("status")["last_reload"], "the SIGHUP reload to be recorded")
    assert record["reloaded"] is False, record
    assert "a-file" in record["errors"][0], record
    assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log()
    assert "reload rejected, keeping the running config" in daemon.log()
    assert pings(daemon.socket_path)
    daemon.call("warm.log", workspace="alpha", action="after")
    assert daemon.stop() == 0


def test_config_reload_and_memd_reload_report_a_socket_that_cannot_be_created_as_rejected(
    daemon: RunningDaemon,
) -> None:
    daemon.rewrite_config(_unreachable_socket_config(daemon))

    result = daemon.call("config.reload")

    assert result["reloaded"] is False, result
    assert "cannot" in result["errors"][0] and "a-file" in result["errors"][0], result
    cli = memd_reload(daemon)
    assert cli.returncode != 0, cli
    assert "a-file" in cli.stdout + cli.stderr, cli
    assert pings(daemon.socket_path)
    assert daemon.call("status")["socket"] == str(daemon.socket_path)


def test_a_rejected_reload_leaves_a_moved_workspace_where_it_was(daemon: RunningDaemon) -> None:
    old = daemon.workspace("alpha")
    moved = daemon.root / "elsewhere" / "alpha"
    config = _unreachable_socket_config(daemon)
    config["workspaces"] = {**config["workspaces"], "alpha": {"path": str(moved)}}
    daemon.rewrite_config(config)

    assert daemon.call("config.reload")["reloaded"] is False

    daemon.call("warm.log", workspace="alpha", action="still in the old place")
    daemon.call("snapshot.run", workspace="alpha")
    status = daemon.call("status")["workspaces"]["alpha"]
    assert status["path"] == str(old)
    assert status["snapshot"]["git_dir"] == str(old / ".git"), status
    assert not (moved / ".git").exists()
    log = subprocess.run(["git", "-C", str(old), "log", "-p"], capture_output=True, text=True, check=True).stdout
    assert "still in the old place" in log
    # The directory the rejected config named was let go: another daemon may take it.
    other = RunningDaemon(daemon.root / "other", base_config(daemon.root / "other", workspaces={"alpha": moved}))
    try:
        other.start()
        assert [w["name"] for w in other.call("workspace.list")["workspaces"]] == ["alpha"]
    finally:
        other.kill()


# --- socket group -------------------------------------------------------------------------------------------------


def test_a_socket_group_member_reaches_the_socket_through_its_directory(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    config = base_config(
        short_root / "d", server={"socket_group": str(MEMBER_GID), "socket_mode": "0660", "allowed_gids": [MEMBER_GID]}
    )
    d = make_daemon(config=config)
    open_parents(d)

    run_dir = os.stat(d.socket_path.parent)
    assert run_dir.st_gid == MEMBER_GID and stat.S_IMODE(run_dir.st_mode) == 0o750
    assert os.stat(d.socket_path).st_gid == MEMBER_GID
    with other_user(NOBODY, NOBODY, d.socket_path, groups=[MEMBER_GID]) as member:
        assert member.read() == {"connected": True}
        assert member.send("ping")["result"]["pong"] is True
    with other_user(NOBODY, NOBODY, d.socket_path) as stranger:
        assert stranger.read() == {"connect_error": "PermissionError"}


def test_a_socket_group_added_by_reload_opens_the_directory_to_its_members(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    d = make_daemon(config=base_config(short_root / "d", server={"socket_mode": "0660", "allowed_gids": [MEMBER_GID]}))
    open_parents(d)
    d.rewrite_config({**d.config, "server": {**d.config["server"], "socket_group": str(MEMBER_GID)}})

    assert d.call("config.reload")["reloaded"] is True

    assert os.stat(d.socket_path.parent).st_gid == MEMBER_GID
    with other_user(NOBODY, NOBODY, d.socket_path, groups=[MEMBER_GID]) as member:
        assert member.read() == {"connected": True}
        assert member.send("ping")["result"]["pong"] is True


# --- what a reload takes away is gone on open connections too -----------------------------------------------------


def _opened(make_daemon: MakeDaemon, short_root: Path, **server: Any) -> RunningDaemon:
    d = make_daemon(config=base_config(short_root / "d", server={"socket_mode": "0666", **server}))
    for directory in (d.socket_path.parent, *d.socket_path.parent.parents):
        if directory == Path(tempfile.gettempdir()):
            break
        directory.chmod(stat.S_IMODE(directory.stat().st_mode) | 0o011)
    return d


def test_a_uid_removed_from_allowed_uids_loses_its_open_connection(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = _opened(make_daemon, short_root, allowed_uids=[NOBODY])
    with other_user(NOBODY, NOBODY, d.socket_path) as user:
        assert user.read() == {"connected": True}
        assert "result" in user.send("warm.log", workspace="alpha", action="while allowed")
        d.rewrite_config({**d.config, "server": {**d.config["server"], "allowed_uids": []}})
        assert d.call("config.reload")["reloaded"] is True

        after = user.send("warm.log", workspace="alpha", action="after the reload")

        assert after.get("error", {}).get("code") == ACCESS_DENIED, after
        assert f"uid {NOBODY} is no longer allowed" in after["error"]["message"]
        assert user.send("ping") in (
            {"closed": True},
            {"socket_error": "ConnectionResetError"},
            {"socket_error": "BrokenPipeError"},
        )
    text = "".join(p.read_text() for p in (d.workspace("alpha") / "warm").glob("*.md"))
    assert "while allowed" in text and "after the reload" not in text
    assert d.call("status")["server"]["denied"] == 1


def test_a_uid_removed_from_a_workspaces_writers_loses_write_access_on_its_open_connection(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    d = _opened(make_daemon, short_root, allowed_uids=[NOBODY])
    config = {
        **d.config,
        "workspaces": {**d.config["workspaces"], "alpha": {"path": str(d.workspace("alpha")), "writers": [NOBODY]}},
    }
    d.rewrite_config(config)
    assert d.call("config.reload")["reloaded"] is True
    with other_user(NOBODY, NOBODY, d.socket_path) as user:
        assert user.read() == {"connected": True}
        assert "result" in user.send("warm.log", workspace="alpha", action="as a writer")
        config["workspaces"]["alpha"] = {"path": str(d.workspace("alpha")), "writers": [1000], "readers": [NOBODY]}
        d.rewrite_config(config)
        assert d.call("config.reload")["reloaded"] is True

        denied = user.send("warm.log", workspace="alpha", action="no longer a writer")
        read = user.send("warm.recent", workspace="alpha")

        assert denied.get("error", {}).get("code") == ACCESS_DENIED, denied
        assert "result" in read, read
