"""Starting and observing a real `python -m memd run` for the benchmarks.

Each daemon gets its own scratch directory under bench/scratch/ (state dir, config, log) and a socket in a short
private directory under /tmp (sun_path is 107 bytes at most, and memd refuses a group/world-writable socket
directory). Readiness is measured both ways a supervisor sees it: the first answered `ping`, and the `READY=1`
datagram on a NOTIFY_SOCKET we bind. Resource figures come straight from /proc/<pid>.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import tomli_w

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
SCRATCH = BENCH_DIR / "scratch"
CLK_TCK = os.sysconf("SC_CLK_TCK")
_serial = itertools.count(1)
_socket_dir: Path | None = None


def socket_dir() -> Path:
    """One private (0700) directory in /tmp for this run's sockets."""
    global _socket_dir
    if _socket_dir is None:
        _socket_dir = Path(tempfile.mkdtemp(prefix="memdb-", dir="/tmp"))
        os.chmod(_socket_dir, 0o700)
    return _socket_dir


def cleanup_sockets() -> None:
    if _socket_dir is not None:
        shutil.rmtree(_socket_dir, ignore_errors=True)


TRASH = SCRATCH / ".trash"


def fresh_dir(name: str) -> Path:
    """An empty scratch directory bench/scratch/<name>. What was there is moved into bench/scratch/.trash/,
    deleted by `empty_trash` once the run's figures are taken: on ext4 without a journal (these machines) each
    new inode steps over every inode freed in the last 5 minutes whose inode-table block is still dirty (the
    kernel's `recently_deleted`), so deleting a previous run's 300 repositories right before a figure that
    creates files made that figure up to 2x slower."""
    path = SCRATCH / name
    if path.exists():
        TRASH.mkdir(parents=True, exist_ok=True)
        path.rename(TRASH / f"{name}-{os.getpid()}-{next(_serial)}")
    path.mkdir(parents=True)
    return path


def empty_trash() -> None:
    """Delete what `fresh_dir` moved aside (at the end of a run: no figure is taken after it)."""
    shutil.rmtree(TRASH, ignore_errors=True)


def base_config(root: Path, workspaces: dict[str, Path], **sections: dict[str, Any]) -> dict[str, Any]:
    """Write-path defaults: snapshots and the watcher off unless a section turns them on."""
    config: dict[str, Any] = {
        "daemon": {"state_dir": str(root / "state"), "log_level": "warning", "shutdown_timeout_seconds": 30},
        "server": {"socket": str(socket_dir() / f"d{next(_serial)}.sock")},
        "snapshot": {"enabled": False},
        "watch": {"enabled": False},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    config["workspaces"] = {name: {"path": str(path)} for name, path in workspaces.items()}
    return config


def proc_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def proc_threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all threads), seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of the process so far, all its threads (live ones: a thread
    that exited took its counts with it, so measure a process whose threads stay)."""
    voluntary = involuntary = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except FileNotFoundError:  # the thread ended between the listing and the read
            continue
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


class Daemon:
    """One memd process on its own scratch directory."""

    def __init__(self, root: Path, config: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.config_path = root / "memd.toml"
        self.config_path.write_text(tomli_w.dumps(config), encoding="utf-8")
        self.socket_path = config["server"]["socket"]
        self.log_path = root / "daemon.log"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.t_spawn = 0.0
        self.ping_seconds = 0.0  # process start -> first answered ping
        self.ready_seconds: float | None = None  # process start -> READY=1 datagram
        self.python_args: list[str] = []  # before `-m memd` (bench/profile.py runs the daemon under cProfile)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, notify: bool = False, timeout: float = 60.0) -> Daemon:
        env = dict(self.env)
        notify_sock: socket.socket | None = None
        ready_at: list[float] = []
        waiter: threading.Thread | None = None
        if notify:
            path = socket_dir() / f"n{next(_serial)}.sock"
            notify_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            notify_sock.bind(str(path))
            notify_sock.settimeout(timeout)
            env["NOTIFY_SOCKET"] = str(path)

            def wait_ready() -> None:
                assert notify_sock is not None
                try:
                    while True:
                        data = notify_sock.recv(4096)
                        if b"READY=1" in data.split(b"\n"):
                            ready_at.append(time.perf_counter())
                            return
                except OSError:
                    return

            waiter = threading.Thread(target=wait_ready, daemon=True)
            waiter.start()
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        # cwd is the scratch dir, not the repository: `python -m` puts the cwd first on sys.path.
        self.t_spawn = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, *self.python_args, "-m", "memd", "--config", str(self.config_path), "run"],
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        self._wait_ping(timeout)
        self.ping_seconds = time.perf_counter() - self.t_spawn
        if waiter is not None and notify_sock is not None:
            waiter.join(timeout)
            notify_sock.close()
            if ready_at:
                self.ready_seconds = ready_at[0] - self.t_spawn
        return self

    def _wait_ping(self, timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        request = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
        while time.perf_counter() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"memd exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(5)
                    s.connect(self.socket_path)
                    s.sendall(request)
                    if b'"pong"' in _recv_line(s):
                        return
            except OSError:
                pass
            time.sleep(0.002)
        raise RuntimeError(f"memd did not answer ping within {timeout}s:\n{self.log_tail()}")

    def client(self) -> RpcClient:
        return RpcClient(self.socket_path)

    def call(self, method: str, **params: Any) -> Any:
        with self.client() as c:
            return c.call(method, **params)

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _recv_line(sock: socket.socket, buffer: bytearray | None = None) -> bytes:
    buf = buffer if buffer is not None else bytearray()
    while True:
        i = buf.find(b"\n")
        if i >= 0:
            line = bytes(buf[:i])
            del buf[: i + 1]
            return line
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("memd closed the connection")
        buf += chunk


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.error = error


class RpcClient:
    """A plain JSON-RPC client over one connection (the bench's own, so memd.client's cost is not measured)."""

    def __init__(self, path: str, timeout: float = 120.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = bytearray()
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> Any:
        request = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        self.sock.sendall(json.dumps(request, separators=(",", ":")).encode() + b"\n")
        response = json.loads(_recv_line(self.sock, self.buf))
        if "error" in response:
            raise RpcError(response["error"])
        return response["result"]

    def timed(self, method: str, **params: Any) -> tuple[float, Any]:
        t0 = time.perf_counter()
        result = self.call(method, **params)
        return time.perf_counter() - t0, result

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
