"""Test harness: a real `python -m memd run` process on a temporary config, reached over its real socket."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import tomli_w

from memd.client import Client

STARTUP_TIMEOUT = 20.0
# The event loops memd runs on (memd.runtime.loop_factory); tests of the server's behaviour run on each.
LOOPS = ("uvloop", "asyncio")
DEADLINE = 20.0  # generous: only ever reached when something is wrong
T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = DEADLINE, interval: float = 0.02) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    path.write_text(tomli_w.dumps(dict(config)), encoding="utf-8")
    return path


def base_config(root: Path, workspaces: Mapping[str, Path] | None = None, **sections: Any) -> dict[str, Any]:
    """A config rooted in `root`: state dir, a short socket path, and workspaces (default: alpha, beta)."""
    if workspaces is None:
        workspaces = {"alpha": root / "ws" / "alpha", "beta": root / "ws" / "beta"}
    config: dict[str, Any] = {
        "daemon": {"state_dir": str(root / "state"), "log_level": "debug", "shutdown_timeout_seconds": 10},
        "server": {"socket": str(root / "run" / "memd.sock")},
        "workspaces": {name: {"path": str(path)} for name, path in workspaces.items()},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return config


class RunningDaemon:
    """One daemon process. `start()` waits until it answers ping; `stop()` sends SIGTERM and waits."""

    def __init__(self, root: Path, config: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.config = dict(config)
        self.config_path = write_config(root / "memd.toml", self.config)
        self.socket_path = Path(self.config["server"]["socket"])
        self.log_path = root / "daemon.log"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def rewrite_config(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)
        write_config(self.config_path, self.config)

    def spawn(self, extra_args: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it for its whole life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memd", "--config", str(self.config_path), *extra_args, "run"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        log.close()
        return self.proc

    def start(self) -> RunningDaemon:
        self.spawn()
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with self.client(timeout=2) as c:
                    c.call("ping")
                return
            except (OSError, Exception):
                time.sleep(0.05)
        raise AssertionError(f"daemon did not become ready within {timeout}s:\n{self.log()}")

    def client(self, timeout: float = 30.0) -> Client:
        return Client(self.socket_path, timeout=timeout)

    def call(self, method: str, **params: Any) -> Any:
        with self.client() as c:
            return c.call(method, **params)

    def raw_socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(self.socket_path))
        return sock

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"daemon ignored SIGTERM for {timeout}s:\n{self.log()}") from None

    def kill(self) -> None:
        """SIGKILL the daemon and everything it started (its git commands too: they share its process group, and
        one still writing into .git would race the removal of the test's directory)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # start_new_session: the daemon leads its own group
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the last member of the group is gone
            try:
                os.killpg(self.proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.02)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def workspace(self, name: str) -> Path:
        return Path(self.config["workspaces"][name]["path"])


# Set by the autouse per-test fixtures (temporary home, sockets); a daemon that outlives one test must not see them.
_PER_TEST_VARS = ("XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_DATA_HOME", "MEMD_SOCKET", "NOTIFY_SOCKET", "LISTEN_FDS")


def module_daemon(root: Path, config: Mapping[str, Any], env: Mapping[str, str] | None = None) -> RunningDaemon:
    """A daemon (not started) shared by a whole module: HOME is `root`, not the first test's temporary home."""
    daemon = RunningDaemon(root, config, env=env)
    daemon.env["HOME"] = str(root)
    for var in _PER_TEST_VARS:
        daemon.env.pop(var, None)
    return daemon


@contextlib.contextmanager
def running_for_module(root: Path, config: Mapping[str, Any]) -> Iterator[RunningDaemon]:
    """A module-scoped daemon (module fixtures cannot use the per-test `make_daemon`), killed at the end."""
    daemon = module_daemon(root, config)
    try:
        yield daemon.start()
    finally:
        daemon.kill()


def person_env() -> dict[str, str]:
    """The environment of a person running git by hand: their identity, no GIT_* from memd or the test run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="Person",
        GIT_AUTHOR_EMAIL="person@example.com",
        GIT_COMMITTER_NAME="Person",
        GIT_COMMITTER_EMAIL="person@example.com",
        GIT_CONFIG_NOSYSTEM="1",
    )
    return env
