"""What every scenario shares: the run context, reports, spawned-process bookkeeping, a daemon process on a temporary
config, raw JSON-RPC connections, and small bounded-wait helpers.

Every wait here is bounded; every process is started in its own session (so a whole process group can be killed)
and registered, and `Procs.kill_all` ends whatever is still running when a scenario or the run ends. No traffic
leaves the machine: daemons listen on Unix sockets and the fake LLM on 127.0.0.1, with proxies removed from the
daemon's environment.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import tomli_w

REPO = Path(__file__).resolve().parent.parent
TORTURE = REPO / "torture"
PYTHON = sys.executable
T = TypeVar("T")

STARTUP_TIMEOUT = 30.0
_DROP_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
_PROXY_ENV = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


# --- run context and reports ------------------------------------------------------------------------------------


@dataclass
class Report:
    """What one scenario found. `counters` feed the summary line; any `failures` make the run exit non-zero."""

    name: str
    figures: list[tuple[str, str]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str = ""
    summary: str = ""  # a few words for the final summary line
    seconds: float = 0.0

    def figure(self, label: str, value: Any) -> None:
        self.figures.append((label, value if isinstance(value, str) else fmt(value)))

    def count(self, key: str, n: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    def fail(self, message: str) -> None:
        if len(self.failures) < 200:
            self.failures.append(message)
        elif len(self.failures) == 200:
            self.failures.append("... (more failures not listed)")

    def check(self, ok: bool, message: str) -> bool:
        if not ok:
            self.fail(message)
        return ok


class Context:
    """Run-wide settings: seed, CI sizes, a scale factor, the run's temporary root and its processes."""

    def __init__(self, seed: int, ci: bool, scale: float, tmp: Path, verbose: bool) -> None:
        self.seed = seed
        self.ci = ci
        self.scale = scale
        self.tmp = tmp
        self.verbose = verbose
        self.procs = Procs()
        self.parts: dict[str, set[str]] = {}  # scenario -> the parts asked for with --only scenario:part
        self.long = False  # --long: the hour-long variants (soak), never in CI
        self.soak_mix = ""  # --soak-mix: the soak's write mix instead of its own (soak.MIX)
        self.soak_snapshots = True  # --soak-no-snapshots: False
        self.soak_search = True  # --soak-no-search: False
        self.soak_seed_minutes = 0.0  # --soak-seed-minutes: the workspaces start as that much of the load left them
        self.home = tmp / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self._serial = 0

    def wants(self, scenario: str, part: str) -> bool:
        chosen = self.parts.get(scenario)
        return not chosen or part in chosen

    def size(self, full: int, ci: int, minimum: int = 1) -> int:
        n = ci if self.ci else full
        return max(minimum, round(n * self.scale))

    def seconds(self, full: float, ci: float) -> float:
        return (ci if self.ci else full) * min(1.0, max(self.scale, 0.1))

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}:{name}")

    def dir(self, name: str) -> Path:
        """A fresh short directory for one daemon or experiment (Unix socket paths must stay under 107 bytes)."""
        self._serial += 1
        path = self.tmp / f"{name}{self._serial}"
        path.mkdir(parents=True)
        return path

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV and k not in _PROXY_ENV}
        env = {k: v for k, v in env.items() if not k.startswith(("MEMD_", "XDG_", "OPENAI_"))}
        env.update(HOME=str(self.home), NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
        env["OPENAI_API_KEY"] = "sk-torture-fake-key-not-a-secret"
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.update(extra or {})
        return env

    def log(self, message: str) -> None:
        if self.verbose:
            print(f"    · {message}", flush=True)


def fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


def percentiles(values: list[float], points: tuple[float, ...] = (50, 90, 99)) -> dict[str, float]:
    if not values:
        return {f"p{int(p)}": 0.0 for p in points} | {"max": 0.0}
    ordered = sorted(values)
    out = {}
    for p in points:
        k = min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))
        out[f"p{int(p)}"] = ordered[k]
    out["max"] = ordered[-1]
    return out


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


# --- processes --------------------------------------------------------------------------------------------------


class Procs:
    """Every process a scenario starts, each in its own session, so that cleanup can kill whole groups."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        kwargs.setdefault("start_new_session", True)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc: subprocess.Popen[bytes] = subprocess.Popen(args, **kwargs)
        self._procs.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self._procs:
            kill_group(proc)
        self._procs = [p for p in self._procs if p.poll() is None]


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Kill `proc`'s process group (it was started in its own session) and reap it, bounded."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(ProcessLookupError):
        if proc.poll() is None:
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def group_alive(pgid: int) -> bool:
    """Is any process of group `pgid` still running (zombies, which nobody may reap here, do not count)?"""
    return bool(group_members(pgid, running=True))


def wait_until(probe: Callable[[], T | None], timeout: float, interval: float = 0.02) -> T | None:
    """Poll `probe` until it returns something truthy or `timeout` passes; returns the last value."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = probe()
    return value


# --- JSON-RPC over the socket ------------------------------------------------------------------------------------


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


def encode(method: str, params: Mapping[str, Any] | None = None, request_id: Any = 1) -> bytes:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": dict(params or {})}
    if request_id is not None:
        obj["id"] = request_id
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


class Conn:
    """One raw connection: send bytes or requests, read response lines with a deadline."""

    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.timeout = timeout
        try:
            self.sock.connect(str(path))
        except BaseException:
            self.sock.close()
            raise
        self.buffer = b""
        self._ids = 0

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_line(self, timeout: float | None = None) -> bytes | None:
        """The next response line, or None when the connection was closed. Raises TimeoutError past the deadline."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no response line in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            except TimeoutError:
                raise
            except OSError as exc:
                if isinstance(exc, socket.timeout):
                    raise TimeoutError("no response line in time") from None
                chunk = b""
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def request(self, method: str, params: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        """Send one request and return its response object (raises ConnectionError when the daemon hung up)."""
        self._ids += 1
        self.send(encode(method, params, self._ids))
        while True:
            line = self.read_line(timeout)
            if line is None:
                raise ConnectionError(f"connection closed before the answer to {method}")
            obj = json.loads(line)
            if isinstance(obj, dict) and obj.get("id") in (self._ids, None):
                return obj

    def call(self, method: str, params: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        response = self.request(method, params, timeout)
        if "error" in response:
            err = response["error"]
            raise RpcError(int(err.get("code", 0)), str(err.get("message", "")), err.get("data"))
        return response.get("result")


# --- a daemon ---------------------------------------------------------------------------------------------------


def base_config(root: Path, workspaces: Mapping[str, Path], **sections: Mapping[str, Any]) -> dict[str, Any]:
    """A config rooted in `root` (state dir, short socket path), quiet logs, quick snapshots."""
    config: dict[str, Any] = {
        "daemon": {"state_dir": str(root / "state"), "log_level": "info", "shutdown_timeout_seconds": 10},
        "server": {"socket": str(root / "run" / "memd.sock")},
        "snapshot": {"settle_seconds": 0.05, "max_wait_seconds": 0.3, "interval_seconds": 5.0},
        "workspaces": {name: {"path": str(path)} for name, path in workspaces.items()},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return config


class Daemon:
    """One `memd run` process on a temporary config.

    `start()` spawns `python -m memd --config CFG run`. For loops that restart the daemon hundreds of times,
    `prespawn()` starts torture/launcher.py ahead of time: it imports memd and loads the tokenizer, then waits on
    stdin; `start()` then releases it and it runs exactly `memd.cli.main(["--config", CFG, "run"])`.
    """

    def __init__(self, ctx: Context, root: Path, config: Mapping[str, Any], env: Mapping[str, str] | None = None):
        self.ctx = ctx
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.config_path = root / "memd.toml"
        self.config: dict[str, Any] = {}
        self.write_config(config)
        self.log_path = root / "daemon.log"
        self.env = ctx.env(env)
        self.proc: subprocess.Popen[bytes] | None = None
        self._pending: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def socket_path(self) -> Path:
        return Path(self.config["server"]["socket"])

    def write_config(self, config: Mapping[str, Any]) -> None:
        self.config = json.loads(json.dumps(config))
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(tomli_w.dumps(self.config), encoding="utf-8")
        os.replace(tmp, self.config_path)

    def workspace(self, name: str) -> Path:
        return Path(self.config["workspaces"][name]["path"])

    # lifecycle

    def _spawn_logged(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start a child with its output appended to the daemon log (the file is the child's; ours closes)."""
        with open(self.log_path, "ab") as log:
            return self.ctx.procs.spawn(
                args, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=str(self.root), **kwargs
            )

    def prespawn(self) -> None:
        if self._pending is not None:
            return
        self._pending = self._spawn_logged(
            [PYTHON, str(TORTURE / "launcher.py"), str(self.config_path)], stdin=subprocess.PIPE
        )

    def spawn(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        if self._pending is not None:
            proc, self._pending = self._pending, None
            assert proc.stdin is not None
            try:
                proc.stdin.write(b"go\n")
                proc.stdin.close()
            except OSError:
                pass
            self.proc = proc
            return proc
        self.proc = self._spawn_logged([PYTHON, "-m", "memd", "--config", str(self.config_path), "run"])
        return self.proc

    def start(self, timeout: float = STARTUP_TIMEOUT) -> Daemon:
        self.spawn()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"daemon exited with {self.returncode()} while starting:\n{self.log_tail()}")
            if self.ping(timeout=2.0):
                return
            time.sleep(0.02)
        raise RuntimeError(f"daemon not ready within {timeout:.0f}s:\n{self.log_tail()}")

    def ping(self, timeout: float = 5.0) -> bool:
        try:
            with Conn(self.socket_path, timeout) as c:
                return bool((c.call("ping") or {}).get("pong"))
        except (OSError, RpcError, ValueError, ConnectionError, TimeoutError):
            return False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill9(self, group: bool = False) -> None:
        """SIGKILL the daemon (and, with `group`, everything it started, as systemd does to a unit's cgroup)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                os.kill(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def reap_group(self, timeout: float = 10.0) -> bool:
        """Wait (bounded) for the children the killed daemon left (a git commit finishing); kill them after.
        Returns True when they ended by themselves."""
        if self.proc is None:
            return True
        pgid = self.proc.pid
        ended = bool(wait_until(lambda: not group_alive(pgid), timeout, 0.01))
        if not ended:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            wait_until(lambda: not group_alive(pgid), 5.0, 0.01)
        return ended

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.returncode()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            return None

    def close(self) -> None:
        """Kill whatever is left of this daemon (used in finally blocks)."""
        for proc in (self.proc, self._pending):
            if proc is not None and proc.poll() is None:
                kill_group(proc)
        self._pending = None

    # requests

    def conn(self, timeout: float = 30.0) -> Conn:
        return Conn(self.socket_path, timeout)

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> Any:
        with self.conn(timeout) as c:
            return c.call(method, params, timeout)

    def request(self, method: str, timeout: float = 30.0, **params: Any) -> Any:
        with self.conn(timeout) as c:
            return c.request(method, params, timeout)

    # observation

    def rss_kb(self) -> int:
        with open(f"/proc/{self.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


@contextlib.contextmanager
def daemon(ctx: Context, root: Path, config: Mapping[str, Any], **kwargs: Any) -> Iterator[Daemon]:
    d = Daemon(ctx, root, config, **kwargs)
    try:
        yield d
    finally:
        d.close()


# --- files ------------------------------------------------------------------------------------------------------


def tree_checksum(*roots: Path) -> str:
    """sha256 over every path (relative), its type/mode and its bytes, below each root; symlinks by their target."""
    import hashlib

    h = hashlib.sha256()
    for root in roots:
        h.update(f"root {root}\n".encode())
        if not root.exists() and not root.is_symlink():
            h.update(b"absent\n")
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                p = Path(dirpath) / name
                st = os.lstat(p)
                h.update(f"{p.relative_to(root)}\0{st.st_mode:o}\0".encode())
                if os.path.islink(p):
                    h.update(os.readlink(p).encode())
                elif p.is_file():
                    h.update(p.read_bytes())
    return h.hexdigest()


def listing(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def git(repo_dir: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
    env.update(GIT_CONFIG_NOSYSTEM="1", HOME="/nonexistent", GIT_TERMINAL_PROMPT="0")
    return subprocess.run(
        ["git", f"--git-dir={repo_dir}", "-c", f"safe.directory={repo_dir}", *args],
        capture_output=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def git_dir_of(workspace: Path, state_dir: Path | None = None, name: str = "") -> Path | None:
    """The snapshot repository memd uses for a workspace: its own `.git` when memd manages it (memd.managed), else
    the separate one under the state dir, as memd.gitrepo.GitRepo.locate decides."""
    own = workspace / ".git"
    if own.is_dir() and git(own, "config", "--get", "memd.managed").stdout.strip() == b"true":
        return own
    if state_dir is not None and name and (state_dir / "git" / f"{name}.git").is_dir():
        return state_dir / "git" / f"{name}.git"
    return None


def stray_git_dir(workspace: Path) -> bool:
    """A `.git` in the workspace that memd did not mark as its own (memd.managed unset)."""
    own = workspace / ".git"
    return own.is_dir() and git(own, "config", "--get", "memd.managed").stdout.strip() != b"true"


def fsck(repo_dir: Path) -> tuple[bool, str]:
    """`git fsck`: clean when it exits 0 and reports nothing but dangling objects."""
    try:
        out = git(repo_dir, "fsck", "--no-progress", "--no-dangling")
    except subprocess.TimeoutExpired:
        return False, "git fsck timed out"
    text = (out.stdout + out.stderr).decode(errors="replace").strip()
    bad = [line for line in text.splitlines() if line and not line.startswith(("dangling", "notice: "))]
    return out.returncode == 0 and not bad, text[-2000:]


def group_members(pgid: int, name: str = "", running: bool = True) -> list[int]:
    """Pids in process group `pgid` (optionally only those whose command name is `name`; with `running`, no
    zombies), from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and (not name or comm == name) and not (running and fields[0] in "ZX"):
            found.append(int(entry))
    return found


# --- load clients -----------------------------------------------------------------------------------------------


class Writers:
    """A set of torture/writer.py processes, started ahead (waiting for "go") or at once."""

    def __init__(
        self,
        ctx: Context,
        socket_path: Path,
        workspace: str,
        out: Path,
        clients: list[str],
        windows: list[int],
        mix: str = "w=4,h=3,c=2,d=1",
        wait_go: bool = True,
        extra: list[str] | None = None,
    ) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.clients = clients
        self.procs: list[subprocess.Popen[bytes]] = []
        errlog = open(out / "writers.stderr", "ab")  # noqa: SIM115 - handed to the children
        try:
            for client, window in zip(clients, windows, strict=True):
                args = [
                    PYTHON, str(TORTURE / "writer.py"), "--socket", str(socket_path), "--workspace", workspace,
                    "--client", client, "--out", str(out), "--window", str(window), "--mix", mix,
                    "--seed", str(ctx.seed), *(extra or []),
                ]  # fmt: skip
                if wait_go:
                    args.append("--wait-go")
                self.procs.append(
                    ctx.procs.spawn(
                        args,
                        stdin=subprocess.PIPE if wait_go else subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=errlog,
                    )
                )
        finally:
            errlog.close()

    def go(self) -> None:
        for proc in self.procs:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.write(b"go\n")
                    proc.stdin.close()

    def wait(self, timeout: float) -> int:
        """Wait for every writer to end (bounded); kill the rest. Returns how many had to be killed."""
        deadline = time.monotonic() + timeout
        killed = 0
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_group(proc)
                killed += 1
        return killed

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                kill_group(proc)

    def latencies(self) -> tuple[list[float], dict[str, int]]:
        values: list[float] = []
        counters: dict[str, int] = {}
        for client in self.clients:
            path = self.out / f"{client}.lat"
            if not path.exists():
                continue
            data = json.loads(path.read_text())
            values += data["latencies"]
            for k, v in data["counters"].items():
                counters[k] = counters.get(k, 0) + v
        return values, counters

    def timeline(self) -> list[tuple[float, float, str]]:
        """(sent at, latency, method) of every answered request of every client, by send time (CLOCK_MONOTONIC)."""
        points: list[tuple[float, float, str]] = []
        for client in self.clients:
            path = self.out / f"{client}.lat"
            if path.exists():
                data = json.loads(path.read_text())
                methods = data.get("methods") or ["?"] * len(data["latencies"])
                points += zip(data.get("sent", []), data["latencies"], methods, strict=False)
        return sorted(points)
