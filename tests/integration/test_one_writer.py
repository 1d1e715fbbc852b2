"""One writer per workspace, whatever the configuration (issue 12, contract 2): the same directory under two
names, a configured workspace that also lies under a discovery root, two daemons on one workspace path, and two
daemons on one socket path.

Real daemons, real files: a second daemon is a second `python -m memd run` with its own state directory.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import RunningDaemon, base_config, wait_for, write_config

from memd.client import Client
from memd.errors import UNKNOWN_WORKSPACE, MemdError

DEADLINE = 20.0
MakeDaemon = Callable[..., RunningDaemon]
LOCK = ".memd.lock"


def wait_exit(proc: subprocess.Popen[bytes] | None, timeout: float = DEADLINE) -> int:
    assert proc is not None
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"process still running after {timeout}s") from None


def memd_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memd", *args], capture_output=True, text=True, timeout=DEADLINE, env=dict(os.environ)
    )


def pings(path: Path) -> bool:
    try:
        with Client(path, timeout=5) as client:
            return bool(client.call("ping")["pong"])
    except Exception:
        return False


def names(d: RunningDaemon) -> list[str]:
    return [w["name"] for w in d.call("workspace.list")["workspaces"]]


def day_files(workspace: Path) -> str:
    return "".join(p.read_text() for p in sorted((workspace / "warm").glob("*.md")))


# --- the same directory under two names ---------------------------------------------------------------------------


def test_one_directory_under_two_names_is_refused_by_config_check_and_at_start_naming_both(short_root: Path) -> None:
    real = short_root / "ws" / "alpha"
    real.mkdir(parents=True)
    (short_root / "link").symlink_to(real)
    for second in (short_root / "ws" / "beta" / ".." / "alpha", short_root / "link"):
        config = base_config(short_root, workspaces={"alpha": real, "beta": second})
        path = write_config(short_root / "memd.toml", config)

        check = memd_cli("config", "check", str(path))

        assert check.returncode == 4, check
        assert re.search(r"workspaces\.alpha\.path and workspaces\.beta\.path: .*same directory", check.stderr), check

        d = RunningDaemon(short_root / "d", config)
        try:
            assert wait_exit(d.spawn()) != 0
        finally:
            d.kill()
        assert "workspaces.alpha.path and workspaces.beta.path" in d.log(), d.log()
        assert not d.socket_path.exists()


def test_a_reload_that_names_a_served_directory_a_second_time_is_rejected_naming_both(daemon: RunningDaemon) -> None:
    alpha = daemon.workspace("alpha")
    (daemon.root / "alias").symlink_to(alpha)
    config = {
        **daemon.config,
        "workspaces": {**daemon.config["workspaces"], "gamma": {"path": str(daemon.root / "alias")}},
    }
    daemon.rewrite_config(config)

    result = daemon.call("config.reload")

    assert result["reloaded"] is False, result
    assert any("workspaces.alpha.path and workspaces.gamma.path" in e for e in result["errors"]), result
    assert names(daemon) == ["alpha", "beta"]


def test_a_configured_workspace_under_a_discovery_root_is_served_once_under_its_configured_name(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "d"
    agents = root / "agents"
    (agents / "proj" / "hot").mkdir(parents=True)
    (agents / "other" / "hot").mkdir(parents=True)
    config = base_config(
        root, workspaces={"mine": agents / "other" / ".." / "proj"}, discovery={"roots": [str(agents)]}
    )
    d = make_daemon("d", config=config)

    assert names(d) == ["mine", "other"]
    conflicts = d.call("status")["sync"]["discovery_conflicts"]
    assert "proj" in conflicts and "'mine'" in conflicts["proj"], conflicts
    wait_for(lambda: "discovery:" in d.log() and "'mine'" in d.log(), "the clash in the log")

    d.call("warm.log", workspace="mine", action="through the configured name")
    assert "through the configured name" in day_files(agents / "proj")
    try:
        d.call("warm.log", workspace="proj", action="through the discovered name")
        raise AssertionError("the discovered duplicate must not be served")
    except MemdError as exc:
        assert exc.code == UNKNOWN_WORKSPACE


def test_a_configured_workspace_added_by_reload_over_a_discovered_one_replaces_it(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "d"
    agents = root / "agents"
    (agents / "proj" / "hot").mkdir(parents=True)
    config = base_config(root, workspaces={"alpha": root / "ws" / "alpha"}, discovery={"roots": [str(agents)]})
    d = make_daemon("d", config=config)
    assert names(d) == ["alpha", "proj"]

    d.rewrite_config({**config, "workspaces": {**config["workspaces"], "mine": {"path": str(agents / "proj")}}})
    result = d.call("config.reload")

    assert result["reloaded"] is True, result
    assert names(d) == ["alpha", "mine"]
    assert "proj" in d.call("status")["sync"]["discovery_conflicts"]


# --- two daemons, one workspace -----------------------------------------------------------------------------------


def test_a_second_daemon_refuses_a_held_workspace_naming_the_holder_and_serves_its_others(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    shared = short_root / "shared" / "alpha"
    first = make_daemon("first", config=base_config(short_root / "first", workspaces={"alpha": shared}))
    holder_pid = first.call("status")["pid"]
    assert (shared / LOCK).exists()
    (short_root / "alias").symlink_to(short_root / "shared")
    second_config = base_config(
        short_root / "second",
        workspaces={"alpha": short_root / "alias" / "alpha", "own": short_root / "second" / "own"},
        watch={"reconcile_interval_seconds": 0.5},
    )
    second = make_daemon("second", config=second_config)

    status = second.call("status")
    assert list(status["workspaces"]) == ["own"]
    refused = status["sync"]["refused"]
    assert f"pid {holder_pid}" in refused["alpha"], refused
    assert f"workspace 'alpha' at {second_config['workspaces']['alpha']['path']}" in refused["alpha"], refused
    assert f"pid {holder_pid}" in second.log()
    second.call("warm.log", workspace="own", action="second serves its own")
    try:
        second.call("warm.log", workspace="alpha", action="must not land")
        raise AssertionError("the second daemon wrote into a workspace another daemon holds")
    except MemdError as exc:
        assert exc.code == UNKNOWN_WORKSPACE and f"pid {holder_pid}" in exc.message, exc.message
    first.call("warm.log", workspace="alpha", action="first still writes")
    assert "must not land" not in day_files(shared)
    assert "first still writes" in day_files(shared)

    # Once the holder is gone, the workspace is the second daemon's (the reconcile job retries it).
    assert first.stop() == 0
    wait_for(lambda: "alpha" in names(second), "the second daemon to take the released workspace")
    assert second.call("status")["sync"]["refused"] == {}
    second.call("warm.log", workspace="alpha", action="second now writes")
    assert "second now writes" in day_files(shared)


def test_the_workspace_lock_is_never_committed_nor_taken_for_a_tier_file(daemon: RunningDaemon) -> None:
    alpha = daemon.workspace("alpha")
    daemon.call("warm.log", workspace="alpha", action="something to commit")
    daemon.call("snapshot.run", workspace="alpha")
    tracked = subprocess.run(
        ["git", "-C", str(alpha), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert (alpha / LOCK).exists()
    assert LOCK not in tracked and tracked, tracked
    assert stat.S_IMODE(os.lstat(alpha / LOCK).st_mode) == 0o600
    assert (alpha / LOCK).read_text() == f"{daemon.call('status')['pid']}\n"
    assert daemon.stop() == 0
    assert (alpha / LOCK).exists(), "the lock file is never deleted (a new one would let two holders in)"


# --- two daemons, one socket --------------------------------------------------------------------------------------


def test_a_second_daemon_never_deletes_a_socket_another_daemon_serves(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    first = make_daemon("first")
    config: dict[str, Any] = base_config(short_root / "second")
    config["server"]["socket"] = str(first.socket_path)
    second = make_daemon("second", config=config, start=False)

    assert wait_exit(second.spawn()) != 0

    holder = first.call("status")["pid"]
    assert f"{first.socket_path} is being served by another process (pid {holder})" in second.log(), second.log()
    assert pings(first.socket_path)
    assert first.call("status")["pid"] == holder


def test_a_socket_that_answers_is_never_replaced_even_without_memds_lock(make_daemon: MakeDaemon) -> None:
    d = make_daemon(start=False)
    d.socket_path.parent.mkdir(mode=0o700, parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as live:  # another program serving that path
        live.bind(str(d.socket_path))
        live.listen(8)
        inode = os.lstat(d.socket_path).st_ino

        assert wait_exit(d.spawn()) != 0

        assert f"{d.socket_path} is being served by another process (pid {os.getpid()})" in d.log(), d.log()
        assert os.lstat(d.socket_path).st_ino == inode
