"""Load generators, each run in its own client processes started together at a barrier.

Kinds of worker (one process each, closed loop: wait for the answer before the next request):
  rpc      one socket connection to memd, pre-encoded requests cycled in order (the client's own cost stays
           small: on a 2-CPU machine 16 clients compete with the daemon for the CPUs)
  append   the raw ceiling: O_APPEND write of one entry + fsync, per write
  replace  the raw ceiling for whole-file updates: tmp + write + fsync + rename + fsync(dir), per write
  sqlite   stdlib sqlite3, WAL, synchronous=FULL, autocommit: one durable commit per insert
The "socket floor" peer is `floor_server`: a minimal blocking server (one thread per connection, no parsing) that
appends and fsyncs each request line's entry before answering: what any socket daemon pays on top of the raw
loop (two process wake-ups per request), so the gap between it and memd is memd's own. Two kinds: one
append+fsync at a time (a lock), and concurrent (each connection's thread fsyncs on its own, the kernel's journal
committing concurrent fsyncs together: issue 17's probe, the floor its 16-client target is measured against).
Each worker reports its count, errors, per-request latencies and its first/last timestamps (perf_counter is
CLOCK_MONOTONIC, comparable across processes); the rate is all requests over the union of the windows.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import sqlite3
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CTX = mp.get_context("fork")  # the parent has no threads while load runs; fork starts 16 clients in ms


@dataclass
class LoadResult:
    kind: str
    clients: int
    count: int
    errors: int
    seconds: float
    latencies: list[float] = field(repr=False)
    first_error: str = ""

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    def pct(self, q: float) -> float:
        return percentile(self.latencies, q)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def rpc_templates(method: str, params: dict[str, Any]) -> tuple[bytes, bytes]:
    """(prefix, suffix) so that prefix + id + suffix is a request line."""
    body = json.dumps({"method": method, "params": params}, separators=(",", ":"), ensure_ascii=False)
    return b'{"jsonrpc":"2.0","id":', b"," + body[1:].encode() + b"\n"


def _rpc(args: dict[str, Any], index: int, barrier: Any, duration: float) -> tuple[Any, ...]:
    templates: list[tuple[bytes, bytes]] = args["templates"]
    pause: float = args.get("pause", 0.0)  # seconds between an answer and the next request (an agent between steps)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)
    sock.connect(args["socket"])
    buf = bytearray()
    n_templates = len(templates)

    def one(i: int) -> bytes:
        prefix, suffix = templates[(i + index) % n_templates]
        sock.sendall(prefix + str(i).encode() + suffix)
        while True:
            j = buf.find(b"\n")
            if j >= 0:
                line = bytes(buf[:j])
                del buf[: j + 1]
                return line
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("memd closed the connection")
            buf.extend(chunk)

    for i in range(args.get("warmup", 20)):
        one(i)
    lat = array("d")
    errors = 0
    first_error = ""
    barrier.wait()
    t_first = time.perf_counter()
    deadline = t_first + duration
    i = 0
    now = t_first
    while now < deadline:
        if pause:
            time.sleep(pause)
            now = time.perf_counter()
        t0 = now
        line = one(i)
        now = time.perf_counter()
        lat.append(now - t0)
        if b'"error":{' in line[:60]:
            errors += 1
            first_error = first_error or line[:300].decode(errors="replace")
        i += 1
    sock.close()
    return len(lat), errors, lat.tobytes(), t_first, now, first_error


def _append(args: dict[str, Any], index: int, barrier: Any, duration: float) -> tuple[Any, ...]:
    path = Path(args["path"]) if args.get("shared") else Path(f"{args['path']}.{index}")
    data: bytes = args["data"]
    pause: float = args.get("pause", 0.0)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    lat = array("d")
    barrier.wait()
    t_first = now = time.perf_counter()
    deadline = t_first + duration
    while now < deadline:
        if pause:
            time.sleep(pause)
            now = time.perf_counter()
        t0 = now
        os.write(fd, data)
        os.fsync(fd)
        now = time.perf_counter()
        lat.append(now - t0)
    os.close(fd)
    return len(lat), 0, lat.tobytes(), t_first, now, ""


def _replace(args: dict[str, Any], index: int, barrier: Any, duration: float) -> tuple[Any, ...]:
    target = Path(f"{args['path']}.{index}")
    directory = target.parent
    data: bytes = args["data"]
    lat = array("d")
    barrier.wait()
    t_first = now = time.perf_counter()
    deadline = t_first + duration
    n = 0
    while now < deadline:
        t0 = now
        tmp = directory / f".{target.name}.tmp-{n}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        os.replace(tmp, target)
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(dfd)
        os.close(dfd)
        now = time.perf_counter()
        lat.append(now - t0)
        n += 1
    return len(lat), 0, lat.tobytes(), t_first, now, ""


def sqlite_prepare(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, ts REAL, body TEXT)")
    conn.commit()
    conn.close()


def _sqlite(args: dict[str, Any], index: int, barrier: Any, duration: float) -> tuple[Any, ...]:
    conn = sqlite3.connect(args["path"], timeout=60, isolation_level=None)  # autocommit: a commit per insert
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=60000")
    body: str = args["data"].decode()
    lat = array("d")
    errors = 0
    first_error = ""
    barrier.wait()
    t_first = now = time.perf_counter()
    deadline = t_first + duration
    while now < deadline:
        t0 = now
        try:
            conn.execute("INSERT INTO log (ts, body) VALUES (?, ?)", (t0, body))
        except sqlite3.OperationalError as exc:
            errors += 1
            first_error = first_error or str(exc)
        now = time.perf_counter()
        lat.append(now - t0)
    conn.close()
    return len(lat), errors, lat.tobytes(), t_first, now, first_error


def _floor_server(path: str, data_path: str, data: bytes, ready: Any, serial: bool) -> None:
    import resource
    import threading

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    fd = os.open(data_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    lock = threading.Lock()
    reply = b'{"jsonrpc":"2.0","id":0,"result":{}}\n'

    def serve(conn: socket.socket) -> None:
        buf = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            if chunk == b"RUSAGE\n":  # FloorServer.context_switches (all threads, ended ones too)
                usage = resource.getrusage(resource.RUSAGE_SELF)
                conn.sendall(f"{usage.ru_nvcsw} {usage.ru_nivcsw}\n".encode())
                continue
            buf += chunk
            n = buf.count(b"\n")
            buf = buf[buf.rfind(b"\n") + 1 :]
            for _ in range(n):
                if serial:
                    with lock:
                        os.write(fd, data)
                        os.fsync(fd)
                else:  # each connection's thread fsyncs on its own; the journal commits concurrent ones together
                    os.write(fd, data)
                    os.fsync(fd)
                conn.sendall(reply)

    ready.set()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


class FloorServer:
    """The minimal blocking socket server + fsync, in its own process (see the module docstring)."""

    def __init__(self, path: str, data_path: str, data: bytes, serial: bool = True) -> None:
        """`serial`: one append+fsync at a time (a lock); else each connection's thread fsyncs concurrently (the
        probe of issue 17: no parsing, an fsync per request, the kernel joining concurrent fsyncs)."""
        ready = CTX.Event()
        self.path = path
        self.proc = CTX.Process(target=_floor_server, args=(path, data_path, data, ready, serial), daemon=True)
        self.proc.start()
        if not ready.wait(30):
            raise RuntimeError("floor server did not start")

    def context_switches(self) -> tuple[int, int]:
        """(voluntary, involuntary) context switches of the floor process so far, every thread counted."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(self.path)
            sock.sendall(b"RUSAGE\n")
            voluntary, involuntary = sock.makefile().readline().split()
        return int(voluntary), int(involuntary)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.join(10)
        Path(self.path).unlink(missing_ok=True)


_KINDS = {"rpc": _rpc, "append": _append, "replace": _replace, "sqlite": _sqlite}


def _child(kind: str, args: dict[str, Any], index: int, barrier: Any, duration: float, out: Any) -> None:
    try:
        out.put((index, _KINDS[kind](args, index, barrier, duration)))
    except BaseException as exc:
        barrier.abort()
        out.put((index, exc.__class__.__name__ + ": " + str(exc)))


def run_load(kind: str, clients: int, duration: float, args: dict[str, Any]) -> LoadResult:
    """Start `clients` processes of `kind`, release them together, and merge what they measured."""
    barrier = CTX.Barrier(clients)
    out = CTX.Queue()
    procs = [
        CTX.Process(target=_child, args=(kind, args, i, barrier, duration, out), daemon=True) for i in range(clients)
    ]
    for p in procs:
        p.start()
    results: list[tuple[Any, ...]] = []
    failure = ""
    for _ in procs:
        _, payload = out.get(timeout=duration + 120)
        if isinstance(payload, str):
            failure = failure or payload
        else:
            results.append(payload)
    for p in procs:
        p.join(timeout=30)
    if failure:
        raise RuntimeError(f"{kind} load client failed: {failure}")
    latencies: list[float] = []
    for r in results:
        latencies.extend(array("d", r[2]))
    start = min(r[3] for r in results)
    end = max(r[4] for r in results)
    return LoadResult(
        kind=kind,
        clients=clients,
        count=sum(r[0] for r in results),
        errors=sum(r[1] for r in results),
        seconds=end - start,
        latencies=latencies,
        first_error=next((r[5] for r in results if r[5]), ""),
    )
