"""The daemon's life as systemd and its users see it: single instance, stale sockets, graceful stop under load,
reload (SIGHUP, `config.reload`, `memd reload`), sd_notify readiness and watchdog, socket activation, and the CLI.

Every test runs real `python -m memd run` processes (tests/harness.py) and waits with bounded polling; no test
asserts on how long something took, only that it happened before a generous deadline.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from harness import LOOPS, RunningDaemon, base_config, wait_for, write_config

from memd.client import Client
from memd.errors import UnknownWorkspace
from memd.tiers.cold_format import parse_memory
from memd.tiers.warm_format import parse_day

T = TypeVar("T")
DEADLINE = 20.0  # generous: only ever reached when something is wrong
MakeDaemon = Callable[..., RunningDaemon]


def wait_exit(proc: subprocess.Popen[Any], timeout: float = DEADLINE) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"process {proc.args!r} still running after {timeout}s") from None


def memd_cli(*args: str, config: Path | None = None, timeout: float = DEADLINE) -> subprocess.CompletedProcess[str]:
    """Run the `memd` command as a user would: a fresh interpreter, `--config FILE`, captured output."""
    prefix = ["--config", str(config)] if config is not None else []
    return subprocess.run(
        [sys.executable, "-m", "memd", *prefix, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def pings(path: Path) -> bool:
    try:
        with Client(path, timeout=5) as client:
            return bool(client.call("ping")["pong"])
    except Exception:
        return False


def workspace_names(d: RunningDaemon) -> list[str]:
    return [w["name"] for w in d.call("workspace.list")["workspaces"]]


# --- single instance ----------------------------------------------------------------------------------------------


def test_two_daemons_racing_on_one_state_dir_exactly_one_serves_and_the_other_names_it(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    config = base_config(short_root / "shared")
    first = make_daemon("first", config=config, start=False)
    second = make_daemon("second", config=config, start=False)
    for round_no in range(20):
        for d in (first, second):
            d.log_path.unlink(missing_ok=True)
        procs = {first: first.spawn(), second: second.spawn()}
        loser = wait_for(
            lambda procs=procs: next((d for d, p in procs.items() if p.poll() is not None), None),
            f"one of the two racing daemons to give up (round {round_no})",
        )
        winner = second if loser is first else first
        assert procs[loser].returncode != 0, f"round {round_no}: the loser exited 0:\n{loser.log()}"
        winner.wait_ready()
        assert winner.call("status")["pid"] == procs[winner].pid
        named = re.search(r"another memd \(pid (\S+)\) is already running on state dir .*; stop it first", loser.log())
        assert named is not None, f"round {round_no}: no clear message from the loser:\n{loser.log()}"
        assert named[1] == str(procs[winner].pid), f"round {round_no}: named pid {named[1]}, holder {procs[winner].pid}"
        assert procs[winner].poll() is None
        assert winner.stop() == 0


def test_a_refused_daemon_never_names_a_holder_that_is_not_running(make_daemon: MakeDaemon) -> None:
    previous = make_daemon("previous")
    dead_pid = previous.proc.pid  # type: ignore[union-attr]
    assert previous.stop() == 0
    lock_path = Path(previous.config["daemon"]["state_dir"]) / "memd.lock"
    assert lock_path.read_text() == f"{dead_pid}\n"
    # Hold the lock without recording a pid: a new holder between its flock() and its pwrite(), or `flock(1)`.
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused = make_daemon("refused", config=previous.config, start=False)
        assert wait_exit(refused.spawn()) != 0
    finally:
        os.close(fd)

    assert "is already running" in refused.log()
    assert f"pid {dead_pid})" not in refused.log(), refused.log()


def test_a_second_daemon_on_a_held_state_dir_names_the_holder_and_leaves_it_serving(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    config = base_config(short_root / "shared")
    holder = make_daemon("holder", config=config)
    late = make_daemon("late", config=config, start=False)
    assert wait_exit(late.spawn()) != 0
    assert f"pid {holder.proc.pid}" in late.log() and "stop it first" in late.log()  # type: ignore[union-attr]
    assert pings(holder.socket_path)


# --- stale and foreign files at the socket path -------------------------------------------------------------------


def test_a_stale_socket_left_by_a_killed_daemon_is_replaced_on_the_next_start(daemon: RunningDaemon) -> None:
    daemon.kill()
    assert stat.S_ISSOCK(os.lstat(daemon.socket_path).st_mode), "kill -9 should leave the socket file behind"
    assert not pings(daemon.socket_path)

    daemon.start()

    assert pings(daemon.socket_path)
    assert stat.S_ISSOCK(os.lstat(daemon.socket_path).st_mode)
    assert daemon.stop() == 0


def test_a_regular_file_at_the_socket_path_stops_startup_with_a_clear_message(make_daemon: MakeDaemon) -> None:
    d = make_daemon(start=False)
    d.socket_path.parent.mkdir(mode=0o700, parents=True)
    d.socket_path.write_text("not a socket\n")

    assert wait_exit(d.spawn()) != 0

    assert f"{d.socket_path} exists and is not a socket" in d.log()
    assert d.socket_path.read_text() == "not a socket\n", "memd must never delete a file that is not its socket"


# --- graceful stop under load -------------------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from memd.client import Client

    socket_path, workspace, writer = sys.argv[1:4]
    n = 0
    try:
        with Client(Path(socket_path), timeout=30) as client:
            while True:
                client.call("warm.log", workspace=workspace, action=f"writer {writer} entry {n}")
                print(n, flush=True)  # printed only once the daemon acknowledged the write
                n += 1
    except Exception as exc:
        print(f"writer {writer} stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
    """
)


def _acknowledged(out: Path) -> list[int]:
    return [int(line) for line in out.read_text().splitlines() if line.strip().isdigit()]


@pytest.mark.parametrize("loop", LOOPS)
def test_sigterm_during_16_concurrent_writers_exits_0_and_keeps_every_acknowledged_entry_exactly_once(
    make_daemon: MakeDaemon, short_root: Path, loop: str
) -> None:
    daemon = make_daemon("load", config=base_config(short_root / "load", daemon={"loop": loop}))
    writers: list[tuple[subprocess.Popen[bytes], str, Path]] = []
    try:
        for i in range(16):
            workspace = ("alpha", "beta")[i % 2]
            out = daemon.root / f"writer-{i}.out"
            with open(out, "wb") as stdout, open(daemon.root / f"writer-{i}.err", "wb") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, "-c", WRITER, str(daemon.socket_path), workspace, str(i)],
                    stdout=stdout,
                    stderr=stderr,
                )
            writers.append((proc, workspace, out))
        wait_for(
            lambda: all(len(_acknowledged(out)) >= 5 for _, _, out in writers),
            "every writer to have 5 acknowledged entries",
        )

        daemon.signal(signal.SIGTERM)

        assert wait_exit(daemon.proc) == 0, daemon.log()  # type: ignore[arg-type]
        for proc, _, _ in writers:
            wait_exit(proc)
    finally:
        for proc, _, _ in writers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    for workspace in ("alpha", "beta"):
        on_disk = Counter(
            entry.action
            for day_file in sorted((daemon.workspace(workspace) / "warm").glob("*.md"))
            for entry in parse_day(day_file.read_text())
        )
        duplicated = {action: n for action, n in on_disk.items() if n != 1}
        assert not duplicated, f"{workspace}: entries written more than once: {duplicated}"
        for writer, (_, ws, out) in enumerate(writers):
            if ws != workspace:
                continue
            acked = _acknowledged(out)
            assert acked == list(range(len(acked)))
            missing = [n for n in acked if on_disk[f"writer {writer} entry {n}"] != 1]
            assert not missing, f"writer {writer}: acknowledged entries missing from {workspace}'s warm log: {missing}"


# --- reload -------------------------------------------------------------------------------------------------------


def _last_reload_after(d: RunningDaemon, previous: dict[str, Any]) -> Callable[[], dict[str, Any] | None]:
    """A probe for `wait_for`: the daemon's last reload record once it differs from `previous`."""

    def probe() -> dict[str, Any] | None:
        record: dict[str, Any] = d.call("status")["last_reload"]
        return record if record and record != previous else None

    return probe


def test_sighup_with_an_unknown_key_keeps_the_old_config_and_logs_why(daemon: RunningDaemon) -> None:
    broken = {**daemon.config, "warm": {"retention_dayz": 3}}
    daemon.rewrite_config(broken)

    daemon.signal(signal.SIGHUP)

    record = wait_for(_last_reload_after(daemon, {}), "the SIGHUP reload to be recorded")
    assert record["reloaded"] is False
    assert any(e.startswith("warm.retention_dayz: unknown key") for e in record["errors"]), record
    assert "reload rejected, keeping the running config: warm.retention_dayz: unknown key" in daemon.log()
    assert workspace_names(daemon) == ["alpha", "beta"]
    assert daemon.call("warm.log", workspace="alpha", action="still serving")["entry"]["action"] == "still serving"
    assert daemon.proc is not None and daemon.proc.poll() is None


def test_config_reload_reports_every_error_of_a_broken_config_and_changes_nothing(daemon: RunningDaemon) -> None:
    broken = {
        **daemon.config,
        "warm": {"retention_dayz": 3},
        "workspaces": {**daemon.config["workspaces"], "gamma": {"path": str(daemon.root / "ws" / "gamma"), "x": 1}},
    }
    daemon.rewrite_config(broken)

    result = daemon.call("config.reload")

    assert result["reloaded"] is False
    assert any(e.startswith("warm.retention_dayz: unknown key") for e in result["errors"]), result
    assert any(e.startswith("workspaces.gamma.x: unknown key") for e in result["errors"]), result
    assert workspace_names(daemon) == ["alpha", "beta"]

    daemon.config_path.write_text("[server\nsocket = 'x'\n")
    result = daemon.call("config.reload")
    assert result["reloaded"] is False
    assert len(result["errors"]) == 1 and "not valid TOML" in result["errors"][0]
    assert workspace_names(daemon) == ["alpha", "beta"]

    # The CLI reads the config only to find the socket; this one is not valid TOML, so name the socket.
    cli = memd_cli("--socket", str(daemon.socket_path), "reload")
    assert cli.returncode == 1, cli
    assert "reload rejected" in cli.stdout and "not valid TOML" in cli.stdout


def test_a_valid_config_adds_a_workspace_on_sighup_and_drops_one_on_memd_reload(daemon: RunningDaemon) -> None:
    gamma = daemon.root / "ws" / "gamma"
    with_gamma = {**daemon.config, "workspaces": {**daemon.config["workspaces"], "gamma": {"path": str(gamma)}}}
    daemon.rewrite_config(with_gamma)

    daemon.signal(signal.SIGHUP)

    wait_for(lambda: "gamma" in workspace_names(daemon), "gamma to appear in workspace.list after SIGHUP")
    assert workspace_names(daemon) == ["alpha", "beta", "gamma"]
    entry = daemon.call("warm.log", workspace="gamma", action="first in gamma")["entry"]
    assert [e.action for e in parse_day((gamma / "warm" / f"{entry['date']}.md").read_text())] == ["first in gamma"]

    without_beta = {**with_gamma, "workspaces": {k: v for k, v in with_gamma["workspaces"].items() if k != "beta"}}
    daemon.rewrite_config(without_beta)
    cli = memd_cli("reload", config=daemon.config_path)

    assert cli.returncode == 0, cli
    assert cli.stdout.strip() == "reloaded"
    assert workspace_names(daemon) == ["alpha", "gamma"]
    with pytest.raises(UnknownWorkspace, match="no workspace named 'beta'"):
        daemon.call("warm.log", workspace="beta", action="too late")
    assert daemon.call("status")["last_reload"]["workspaces"] == ["alpha", "gamma"]


def test_a_reload_whose_new_workspace_cannot_be_opened_changes_nothing(daemon: RunningDaemon) -> None:
    blocker = daemon.root / "not-a-dir"
    blocker.write_text("a file where gamma's directory would go\n")
    config = {
        **daemon.config,
        "workspaces": {"alpha": daemon.config["workspaces"]["alpha"], "gamma": {"path": str(blocker / "gamma")}},
    }
    daemon.rewrite_config(config)

    result = daemon.call("config.reload")

    assert result["reloaded"] is False
    assert any("gamma" in e for e in result["errors"]), result
    assert workspace_names(daemon) == ["alpha", "beta"], "a rejected reload must keep the running config"


def test_changing_server_socket_and_reloading_moves_the_socket(daemon: RunningDaemon) -> None:
    old_path = daemon.socket_path
    new_path = daemon.root / "run2" / "memd.sock"
    daemon.rewrite_config({**daemon.config, "server": {"socket": str(new_path)}})

    result = daemon.call("config.reload")

    assert result["reloaded"] is True, result
    assert pings(new_path)
    assert not old_path.exists() and not old_path.is_symlink()
    assert not pings(old_path)
    daemon.socket_path = new_path
    assert daemon.call("status")["socket"] == str(new_path)
    assert stat.S_IMODE(os.stat(new_path).st_mode) == 0o600
    assert daemon.stop() == 0
    assert not new_path.exists()


def test_a_rejected_socket_move_can_be_retried_and_is_rejected_again(daemon: RunningDaemon) -> None:
    unsafe = daemon.root / "unsafe"
    unsafe.mkdir()
    unsafe.chmod(0o777)
    daemon.rewrite_config({**daemon.config, "server": {"socket": str(unsafe / "memd.sock")}})

    first = daemon.call("config.reload")
    assert first["reloaded"] is False and "chmod go-w" in first["errors"][0], first

    second = daemon.call("config.reload")

    assert second["reloaded"] is False, f"same config, same problem, yet: {second}"
    assert pings(daemon.socket_path)


# --- systemd notify -----------------------------------------------------------------------------------------------


class NotifyManager:
    """Stands in for systemd's notify socket: records every datagram the daemon sends."""

    def __init__(self, address: str | bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.messages: list[list[str]] = []

    def close(self) -> None:
        self.sock.close()

    def next_matching(self, predicate: Callable[[list[str]], bool], what: str, timeout: float = DEADLINE) -> list[str]:
        """Receive datagrams until one matches; every datagram is also kept in `messages`."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no datagram with {what} within {timeout}s; got {self.messages}")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            message = data.decode().split("\n")
            self.messages.append(message)
            if predicate(message):
                return message


@pytest.fixture
def notify_manager(short_root: Path) -> Iterator[NotifyManager]:
    manager = NotifyManager(str(short_root / "notify"))
    yield manager
    manager.close()


def test_notify_ready_only_when_serving_watchdog_pings_reload_and_stopping(
    make_daemon: MakeDaemon, notify_manager: NotifyManager, short_root: Path
) -> None:
    d = make_daemon(start=False, env={"NOTIFY_SOCKET": str(short_root / "notify"), "WATCHDOG_USEC": "200000"})
    d.spawn()

    ready = notify_manager.next_matching(lambda m: "READY=1" in m, "READY=1")
    assert pings(d.socket_path), "READY=1 was sent before the socket answered"
    assert any(line.startswith("STATUS=") and str(d.socket_path) in line for line in ready), ready
    assert not any("READY=1" in m for m in notify_manager.messages[:-1]), notify_manager.messages

    for _ in range(3):
        notify_manager.next_matching(lambda m: m == ["WATCHDOG=1"], "WATCHDOG=1")

    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    d.signal(signal.SIGHUP)
    reloading = notify_manager.next_matching(lambda m: "RELOADING=1" in m, "RELOADING=1")
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    usec = [int(line.split("=", 1)[1]) for line in reloading if re.fullmatch(r"MONOTONIC_USEC=[0-9]+", line)]
    assert len(usec) == 1 and before <= usec[0] <= after, reloading
    ready_again = notify_manager.next_matching(lambda m: "READY=1" in m, "READY=1 after the reload")
    assert any(line.startswith("STATUS=") for line in ready_again)

    d.signal(signal.SIGTERM)
    stopping = notify_manager.next_matching(lambda m: "STOPPING=1" in m, "STOPPING=1")
    assert any(line.startswith("STATUS=") for line in stopping)
    assert wait_exit(d.proc) == 0  # type: ignore[arg-type]
    states = {"READY=1", "RELOADING=1", "STOPPING=1"}
    sequence = [line for m in notify_manager.messages for line in m if line in states]
    assert sequence == ["READY=1", "RELOADING=1", "READY=1", "STOPPING=1"]


def test_notify_to_an_abstract_socket(make_daemon: MakeDaemon) -> None:
    name = f"memd-test-{uuid.uuid4().hex}"
    manager = NotifyManager(b"\0" + name.encode())
    try:
        d = make_daemon(start=False, env={"NOTIFY_SOCKET": f"@{name}"})
        d.spawn()
        manager.next_matching(lambda m: "READY=1" in m, "READY=1 on the abstract socket")
        assert pings(d.socket_path)
        d.signal(signal.SIGTERM)
        manager.next_matching(lambda m: "STOPPING=1" in m, "STOPPING=1 on the abstract socket")
        assert wait_exit(d.proc) == 0  # type: ignore[arg-type]
    finally:
        manager.close()


# --- socket activation --------------------------------------------------------------------------------------------


def test_socket_activation_serves_on_the_inherited_socket_and_leaves_its_path_alone(short_root: Path) -> None:
    activate = shutil.which("systemd-socket-activate")
    if activate is None:
        pytest.skip("systemd-socket-activate is not installed (package systemd)")
    root = short_root / "activated"
    root.mkdir()
    config_path = write_config(root / "memd.toml", base_config(root))
    own_socket = root / "run" / "memd.sock"  # what memd would bind by itself: it must not
    listen = short_root / "activate.sock"
    # systemd-socket-activate passes only PATH, HOME and TERM (plus -E names) to what it starts.
    passed = [arg for name in ("PYTHONPATH",) if name in os.environ for arg in ("-E", name)]
    command = [sys.executable, "-m", "memd", "--config", str(config_path), "run"]
    with open(root / "daemon.log", "wb") as log:
        proc = subprocess.Popen(
            [activate, "-l", str(listen), *passed, *command],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: listen.exists(), "systemd-socket-activate to listen")
        try:
            with Client(listen, timeout=DEADLINE) as client:  # this connection is what starts memd
                assert client.call("ping")["pong"] is True
                status = client.call("status")
        except OSError as exc:
            raise AssertionError(f"activated memd did not serve: {exc}\n{(root / 'daemon.log').read_text()}") from exc
        assert status["pid"] == proc.pid  # systemd-socket-activate execs memd in its own process
        assert status["socket"] == str(listen)
        assert not own_socket.exists()

        proc.send_signal(signal.SIGTERM)
        assert wait_exit(proc) == 0, (root / "daemon.log").read_text()
        assert stat.S_ISSOCK(os.lstat(listen).st_mode), "memd deleted a socket it did not create"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_listen_variables_for_another_process_are_ignored(make_daemon: MakeDaemon) -> None:
    d = make_daemon(env={"LISTEN_PID": "1", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "memd.socket"})
    assert d.call("status")["socket"] == str(d.socket_path)
    assert stat.S_ISSOCK(os.lstat(d.socket_path).st_mode)
    assert d.stop() == 0
    assert not d.socket_path.exists()


# --- refusing to start --------------------------------------------------------------------------------------------


def test_memd_run_with_an_invalid_config_exits_4_naming_the_key(make_daemon: MakeDaemon) -> None:
    d = make_daemon(start=False)
    d.rewrite_config({**d.config, "warm": {"retention_dayz": 3}})

    assert wait_exit(d.spawn()) == 4
    assert "warm.retention_dayz: unknown key" in d.log()
    assert not d.socket_path.exists()

    d.config_path.write_text("[daemon\n")
    assert wait_exit(d.spawn()) == 4
    assert "not valid TOML" in d.log()


def test_memd_run_with_a_socket_path_over_107_bytes_exits_4(make_daemon: MakeDaemon) -> None:
    d = make_daemon(start=False)
    long_socket = d.root / ("x" * (108 - len(str(d.root)) - 1))
    assert len(os.fsencode(str(long_socket))) == 108
    d.rewrite_config({**d.config, "server": {"socket": str(long_socket)}})

    assert wait_exit(d.spawn()) == 4
    assert "server.socket: path is 108 bytes, over the 107-byte limit" in d.log()


# --- the CLI against a real daemon --------------------------------------------------------------------------------


def test_cli_commands_against_a_running_daemon(daemon: RunningDaemon) -> None:
    cfg = daemon.config_path

    ping = memd_cli("ping", config=cfg)
    assert ping.returncode == 0 and ping.stdout.startswith("pong (memd "), ping

    status = memd_cli("status", config=cfg)
    assert status.returncode == 0, status
    assert f"pid {daemon.proc.pid}" in status.stdout  # type: ignore[union-attr]
    assert f"socket {daemon.socket_path}" in status.stdout
    assert "\nalpha  " in status.stdout and "\nbeta  " in status.stdout

    logged = memd_cli("log", "alpha", "ran the suite", "--detail", "file=a.py", "--result", "green", config=cfg)
    assert logged.returncode == 0 and logged.stdout.startswith("ok  ("), logged
    entries = [e for f in (daemon.workspace("alpha") / "warm").glob("*.md") for e in parse_day(f.read_text())]
    assert [(e.action, e.details, e.result) for e in entries] == [("ran the suite", (("file", "a.py"),), "green")]

    learned = memd_cli("learn", "alpha", "testing", "run pytest with -q", config=cfg)
    assert learned.returncode == 0, learned
    memory = parse_memory((daemon.workspace("alpha") / "cold" / "MEMORY.md").read_text())
    assert [(lr.category, lr.text) for lr in memory] == [("testing", "run pytest with -q")]

    context = memd_cli("context", "alpha", config=cfg)
    assert context.returncode == 0, context
    assert "ran the suite" in context.stdout and "run pytest with -q" in context.stdout
    assert "-- tokens: hot " in context.stdout

    as_json = memd_cli("--json", "status", config=cfg)
    assert as_json.returncode == 0, as_json
    parsed = json.loads(as_json.stdout)
    assert parsed["pid"] == daemon.proc.pid  # type: ignore[union-attr]
    assert sorted(parsed["workspaces"]) == ["alpha", "beta"]

    unknown = memd_cli("log", "nope", "x", config=cfg)
    assert unknown.returncode == 1 and "no workspace named 'nope'" in unknown.stderr, unknown


def test_cli_without_a_daemon_exits_3_naming_the_socket_and_how_to_start(make_daemon: MakeDaemon) -> None:
    d = make_daemon(start=False)

    for args in (("ping",), ("status",), ("log", "alpha", "x")):
        result = memd_cli(*args, config=d.config_path)
        assert result.returncode == 3, result
        assert str(d.socket_path) in result.stderr
        assert "memd run" in result.stderr

    sockname = memd_cli("sockname", config=d.config_path)
    assert sockname.returncode == 0 and sockname.stdout == f"{d.socket_path}\n"


def test_config_check_accepts_a_valid_file_and_lists_every_error_of_an_invalid_one(short_root: Path) -> None:
    valid = write_config(short_root / "valid.toml", base_config(short_root))
    ok = memd_cli("config", "check", str(valid))
    assert ok.returncode == 0 and "ok, 2 workspace(s)" in ok.stdout, ok

    raw = base_config(short_root)
    raw["warm"] = {"retention_dayz": 3}
    raw["server"]["socket_mod"] = "0600"
    raw["workspaces"]["alpha"]["budget"] = {"hott": 5}
    invalid = write_config(short_root / "invalid.toml", raw)
    bad = memd_cli("config", "check", str(invalid))
    assert bad.returncode == 4, bad
    for key in ("warm.retention_dayz", "server.socket_mod", "workspaces.alpha.budget.hott"):
        assert f"{key}: unknown key" in bad.stderr, bad.stderr


def test_config_show_prints_toml_that_config_check_accepts(short_root: Path) -> None:
    raw = base_config(short_root, server={"socket_mode": "0660", "allowed_uids": [1000]})
    raw["workspaces"]["alpha"].update(budget={"hot": 5000}, writers=[1000])
    config = write_config(short_root / "memd.toml", raw)

    shown = memd_cli("config", "show", config=config)
    assert shown.returncode == 0, shown
    again = write_config(short_root / "shown.toml", {})
    again.write_text(shown.stdout)

    check = memd_cli("config", "check", str(again))
    assert check.returncode == 0, check
    assert memd_cli("config", "show", config=again).stdout == shown.stdout
