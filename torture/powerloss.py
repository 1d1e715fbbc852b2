"""Scenario 2, power-loss approximation: replay every prefix of memd's durable-operation log under a pessimistic
model of what survives a power cut, and check that what survives is valid and holds every acknowledged write.

Recording (in-process, no daemon): memd's own Workspace writer (group commit, memd.fsio, memd.fsio_append and
memd.fsio_batch underneath) performs a seeded sequence of batches of warm.log / hot.note / cold.learn /
decision.record edits, with a clock that moves 3 hours per batch so that new day files get created. `os` in
memd.fsio, memd.fsio_append and memd.fsio_batch is replaced by a recorder that performs each call and logs its
effect: create, write(offset, bytes), ftruncate, fsync(file), fsync(directory), rename, unlink, mkdir. When a write
call returns, an "ack" marker is logged (that is when the daemon would answer).

The model. A file's bytes are durable as of its last fsync; a directory's entries (names -> files, including a
rename's result and a new file's name) are durable as of that directory's last fsync. For every prefix of the log
(a crash after operation k) the recovered state is materialized in six ways, crossing
  names: "current" (every name operation survived) or "synced" (only those followed by a directory fsync),
  data:  "current" (every write survived: a process crash), "synced" (only fsynced bytes), or "torn" (fsynced
         bytes plus a random part of the unsynced tail of each file: a write cut short by the power loss).
Each distinct state is then checked:
  * the files parse with memd's parsers; except in "torn" states they are byte-exact (torture/verify.py);
  * every write acknowledged before the crash point is present (exactly once, except in "torn" states where a
    cut-off unacknowledged tail may look like anything, so there: at least once);
  * memd's startup recovery (Workspace.open) accepts the state, and a following write of each tier succeeds and
    reads back as its own entry (a torn tail must not swallow the next entry).
Not modelled (honestly out of reach of this approximation): reordering of writes within one file below an fsync,
filesystems that lose fsynced data, and a crash in the middle of one system call other than a write.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from torture import verify
from torture.lib import Context, Report

NAME_MODES = ("current", "synced")
DATA_MODES = ("current", "synced", "torn")


# --- recording ----------------------------------------------------------------------------------------------------


@dataclass
class Model:
    """The file tree as the operations so far left it, and what of it was made durable."""

    entries: dict[str, dict[str, int]] = field(default_factory=lambda: {"": {}})
    synced: dict[str, dict[str, int]] = field(default_factory=lambda: {"": {}})
    data: dict[int, bytearray] = field(default_factory=dict)
    synced_data: dict[int, bytes] = field(default_factory=dict)
    dirs: dict[int, str] = field(default_factory=lambda: {0: ""})
    next_ino: int = 1

    def lookup(self, rel: str) -> int | None:
        parent, _, name = rel.rpartition("/")
        return self.entries.get(parent, {}).get(name)

    def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "create":
            _, rel, ino = op
            parent, _, name = rel.rpartition("/")
            self.entries[parent][name] = ino
            self.data[ino] = bytearray()
        elif kind == "mkdir":
            _, rel, ino = op
            parent, _, name = rel.rpartition("/")
            self.entries[parent][name] = ino
            self.entries[rel] = {}
            self.synced.setdefault(rel, {})
            self.dirs[ino] = rel
        elif kind == "write":
            _, ino, offset, data = op
            buf = self.data[ino]
            if len(buf) < offset:
                buf.extend(b"\0" * (offset - len(buf)))
            buf[offset : offset + len(data)] = data
        elif kind == "truncate":
            _, ino, size = op
            buf = self.data[ino]
            del buf[size:]
            buf.extend(b"\0" * (size - len(buf)))
        elif kind == "fsync":
            self.synced_data[op[1]] = bytes(self.data[op[1]])
        elif kind == "fsyncdir":
            self.synced[op[1]] = dict(self.entries.get(op[1], {}))
        elif kind == "rename":
            _, src, dst = op
            sp, _, sn = src.rpartition("/")
            dp, _, dn = dst.rpartition("/")
            self.entries[dp][dn] = self.entries[sp].pop(sn)
        elif kind == "exchange":  # renameat2(RENAME_EXCHANGE): the two names swap files, in one step
            _, a, b = op
            ap, _, an = a.rpartition("/")
            bp, _, bn = b.rpartition("/")
            self.entries[ap][an], self.entries[bp][bn] = self.entries[bp][bn], self.entries[ap][an]
        elif kind == "unlink":
            parent, _, name = op[1].rpartition("/")
            self.entries[parent].pop(name, None)

    def materialize(self, names: str, data: str, rng: random.Random) -> dict[str, bytes | None]:
        """Relative path -> bytes (None for a directory) of the state recovered under the given modes."""
        table = self.entries if names == "current" else self.synced
        out: dict[str, bytes | None] = {}

        def walk(directory: str) -> None:
            for name, ino in sorted(table.get(directory, {}).items()):
                rel = f"{directory}/{name}" if directory else name
                if ino in self.dirs:
                    out[rel] = None
                    walk(rel)
                    continue
                current = bytes(self.data.get(ino, b""))
                synced = self.synced_data.get(ino, b"")
                if data == "current":
                    out[rel] = current
                elif data == "torn" and len(current) - len(synced) > 1 and current.startswith(synced):
                    out[rel] = (
                        synced + current[len(synced) : len(synced) + rng.randint(1, len(current) - len(synced) - 1)]
                    )
                else:
                    out[rel] = synced

        walk("")
        return out


class Recorder:
    """Stands in for the `os` module inside memd.fsio: performs each call and logs its durable effect."""

    def __init__(self, real: Any, root: Path) -> None:
        self._os = real
        self.root = str(root)
        self.ops: list[tuple[Any, ...]] = []
        self.model = Model()
        self._fds: dict[int, list[Any]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._os, name)

    def _rel(self, path: Any) -> str | None:
        p = self._os.path.abspath(self._os.fspath(path))
        if p == self.root:
            return ""
        if not p.startswith(self.root + "/"):
            return None
        return p[len(self.root) + 1 :]

    def _log(self, op: tuple[Any, ...]) -> None:
        self.model.apply(op)
        self.ops.append(op)

    def ack(self, label: str) -> None:
        self.ops.append(("ack", label))

    def open(self, path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        rel = self._rel(path)
        existed = self._os.path.lexists(path)
        fd = self._os.open(path, flags, mode, **kwargs)
        if rel is None:
            return fd
        if flags & getattr(self._os, "O_DIRECTORY", 0):
            self._fds[fd] = ["dir", rel]
        else:
            if not existed and flags & self._os.O_CREAT:
                ino = self.model.next_ino
                self.model.next_ino += 1
                self._log(("create", rel, ino))
            else:
                ino = self.model.lookup(rel)
            self._fds[fd] = ["file", ino, bool(flags & self._os.O_APPEND), 0]
        return fd

    def write(self, fd: int, data: Any) -> int:
        n = self._os.write(fd, data)
        entry = self._fds.get(fd)
        if entry is not None and entry[0] == "file" and entry[1] is not None:
            ino = entry[1]
            offset = len(self.model.data[ino]) if entry[2] else entry[3]
            self._log(("write", ino, offset, bytes(data[:n])))
            entry[3] = offset + n
        return n

    def fsync(self, fd: int) -> None:
        self._os.fsync(fd)
        entry = self._fds.get(fd)
        if entry is None:
            return
        if entry[0] == "dir":
            self._log(("fsyncdir", entry[1]))
        elif entry[1] is not None:
            self._log(("fsync", entry[1]))

    def ftruncate(self, fd: int, size: int) -> None:
        self._os.ftruncate(fd, size)
        entry = self._fds.get(fd)
        if entry is not None and entry[0] == "file" and entry[1] is not None:
            self._log(("truncate", entry[1], size))

    def close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        self._os.close(fd)

    def replace(self, src: Any, dst: Any) -> None:
        self._os.replace(src, dst)
        a, b = self._rel(src), self._rel(dst)
        if a is not None and b is not None:
            self._log(("rename", a, b))

    def unlink(self, path: Any) -> None:
        self._os.unlink(path)
        rel = self._rel(path)
        if rel is not None:
            self._log(("unlink", rel))

    def rename_logged(self, real: Callable[[Any, Any], None], kind: str, src: Any, dst: Any) -> None:
        """memd.fsio.RENAMES' calls (renameat2 flags that `os` lacks), performed and logged like `replace`."""
        real(src, dst)
        a, b = self._rel(src), self._rel(dst)
        if a is not None and b is not None:
            self._log((kind, a, b))

    def mkdir(self, path: Any, mode: int = 0o777) -> None:
        self._os.mkdir(path, mode)
        rel = self._rel(path)
        if rel is not None:
            ino = self.model.next_ino
            self.model.next_ino += 1
            self._log(("mkdir", rel, ino))


class Clock:
    def __init__(self, now: datetime) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current


def _edit(kind: str, label: str) -> Callable[[Any], Any]:
    from memd.tiers import hot_format

    def warm(draft: Any) -> Any:
        return draft.log(label, (("n", label),), "ok")

    def note(draft: Any) -> Any:
        doc, result = hot_format.add_note(draft.edit_hot(), label, draft.now)
        draft.set_hot(doc)
        return result

    def learn(draft: Any) -> Any:
        return draft.learn(f"C{label.split('-')[1]}", label)

    def decide(draft: Any) -> Any:
        doc, result = hot_format.add_decision(draft.edit_hot(), label, "because", None, draft.now)
        draft.set_hot(doc)
        draft.log(f"decision: {label}", (("reason", "because"),))
        return result

    return {"w": warm, "h": note, "c": learn, "d": decide}[kind]


def record(root: Path, batches: list[list[str]], counter: Any) -> Recorder:
    from memd import fsio, fsio_append, fsio_batch
    from memd.config import WorkspaceConfig
    from memd.workspace import Workspace

    recorder = Recorder(os, root)
    clock = Clock(datetime(2024, 3, 15, 20, 0, 0, tzinfo=UTC))

    async def drive() -> None:
        with ThreadPoolExecutor(max_workers=2) as io:
            ws = Workspace(WorkspaceConfig("p", root), counter, clock, io)
            ws.open()
            for batch in batches:
                clock.current += timedelta(hours=3)
                await asyncio.gather(*(ws.write(_edit(label[0], label)) for label in batch))
                for label in batch:
                    recorder.ack(label)

    original = fsio.os
    renames = fsio.RENAMES
    real_exchange, real_noreplace = renames.exchange, renames.noreplace
    fsio.os = recorder  # type: ignore[assignment]
    fsio_batch.os = recorder  # type: ignore[assignment]
    fsio_append.os = recorder  # type: ignore[assignment]
    renames.exchange = lambda a, b: recorder.rename_logged(real_exchange, "exchange", a, b)  # type: ignore[method-assign]
    renames.noreplace = lambda a, b: recorder.rename_logged(real_noreplace, "rename", a, b)  # type: ignore[method-assign]
    try:
        asyncio.run(drive())
    finally:
        fsio.os = original
        fsio_batch.os = original
        fsio_append.os = original
        del renames.exchange, renames.noreplace
    return recorder


# --- checking -----------------------------------------------------------------------------------------------------


def run(ctx: Context) -> Report:
    from memd.tokens import TokenCounter

    report = Report("powerloss")
    rng = ctx.rng("powerloss")
    writes = ctx.size(60, 24)
    labels = [f"{rng.choice('wwhhcd')}-p-{n}" for n in range(1, writes + 1)]
    batches: list[list[str]] = []
    while labels:
        size = rng.choice((1, 1, 2, 3, 4))
        batches.append(labels[:size])
        del labels[:size]
    base = ctx.dir("pl")
    counter = TokenCounter.for_encoding("cl100k_base")
    recorder = record(base / "rec", batches, counter)
    ops = recorder.ops
    durable = sum(1 for op in ops if op[0] != "ack")
    states: dict[str, tuple[str, str, int]] = {}
    bad = torn_seen = probes = 0
    check_dir = base / "check"
    for k in range(len(ops) + 1):
        model = Model()
        acked: set[str] = set()
        for op in ops[:k]:
            if op[0] == "ack":
                acked.add(op[1])
            else:
                model.apply(op)
        for names in NAME_MODES:
            for data in DATA_MODES:
                tree = model.materialize(names, data, random.Random(f"{ctx.seed}:{k}:{names}:{data}"))
                digest = _digest(tree, acked, data == "torn")
                if digest in states:
                    continue
                states[digest] = (names, data, k)
                problems = check_state(check_dir, tree, acked, torn=data == "torn", counter=counter)
                probes += 1
                torn_seen += int(data == "torn" and tree != model.materialize(names, "synced", random.Random(0)))
                if problems:
                    bad += 1
                    for problem in problems[:3]:
                        report.fail(f"crash after op {k}/{len(ops)} ({names} names, {data} data): {problem}")
    report.count("powerloss_states", len(states))
    report.count("powerloss_bad", bad)
    report.figure("recorded", f"{writes} writes in {len(batches)} batches: {durable} durable operations")
    report.figure(
        "replayed",
        f"{len(ops) + 1} crash points x {len(NAME_MODES) * len(DATA_MODES)} survival models: "
        f"{len(states):,} distinct states checked ({torn_seen} with a torn tail), {bad} invalid or missing acked data",
    )
    report.summary = f"{len(states):,} states, {bad} bad"
    return report


def _digest(tree: dict[str, bytes | None], acked: set[str], torn: bool) -> str:
    h = hashlib.sha256(b"torn" if torn else b"whole")
    for rel in sorted(tree):
        data = tree[rel]
        h.update(rel.encode() + b"\0" + (b"<dir>" if data is None else data) + b"\0")
    h.update(",".join(sorted(acked)).encode())
    return h.hexdigest()


def check_state(directory: Path, tree: dict[str, bytes | None], acked: set[str], torn: bool, counter: Any) -> list[str]:
    from memd import fsio
    from memd.config import WorkspaceConfig
    from memd.workspace import Workspace

    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    # The recording ran in this process; the memd that recovers after a power cut is another one, so the temp
    # files the recording left are a dead writer's (fsio keeps a live process's own temp files).
    mine = f"{fsio.TEMP_MARKER}{os.getpid()}-"
    for rel, data in sorted(tree.items()):
        path = directory / rel.replace(mine, f"{fsio.TEMP_MARKER}0-")
        if data is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    problems: list[str] = []
    state = verify.inspect(directory, strict=not torn)
    problems += state.problems
    ledger = verify.Ledger(acked=dict.fromkeys(acked, "-"), sent=set(acked))
    acc = verify.account(state, ledger)
    problems += [f"acknowledged write lost: {x}" for x in acc.lost]
    if not torn:
        problems += [f"duplicated: {x}" for x in acc.duplicated]
    # memd's own recovery, then one more write per tier on top of what survived
    probe = ["w-probe-1", "h-probe-2", "c-probe-3", "d-probe-4"]

    async def reopen() -> None:
        with ThreadPoolExecutor(max_workers=1) as io:
            ws = Workspace(WorkspaceConfig("p", directory), counter, Clock(datetime(2030, 1, 1, tzinfo=UTC)), io)
            ws.open()
            for store in (ws.hot, ws.cold):
                if store.error is not None:
                    problems.append(f"memd refuses the recovered file: {store.error.message}")
            await asyncio.gather(*(ws.write(_edit(label[0], label)) for label in probe))

    try:
        asyncio.run(reopen())
    except Exception as exc:
        problems.append(f"recovery or the next write failed: {type(exc).__name__}: {exc}")
        return problems
    after = verify.inspect(directory, strict=False)
    probe_ledger = verify.Ledger(acked=dict.fromkeys(probe, "-"), sent=set(probe))
    acc2 = verify.account(after, probe_ledger)
    problems += [f"write after recovery unreadable: {x}" for x in acc2.lost + acc2.duplicated]
    if after.temps:
        problems.append(f"temp files left after recovery: {after.temps}")
    return problems
