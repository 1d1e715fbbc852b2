"""Scenario 3, disk faults: a workspace on a 2 MiB filesystem (tmpfs, else a loop-mounted ext4) filled until
writes fail, then remounted read-only.

Checks: a write that cannot be made durable is answered -32005 (storage error, with data.errno) and never
acknowledged; every earlier acknowledged write is intact and exactly once; the files are byte-exact (no torn
append, no half-replaced file) and no temp file is left; `status` shows last_write_error; a daemon killed while
the disk is full starts again and serves reads; after space is freed (or the filesystem is writable again),
writes of every tier succeed and read back.

EIO from fsync needs kernel help (device-mapper's dm-error or dm-flakey); it is used when `dmsetup targets`
works, otherwise the output says so: tests/unit/test_fsio.py covers it by monkeypatching os.fsync.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path
from typing import Any

from torture import verify
from torture.lib import Context, Daemon, Report, RpcError, base_config

STORAGE_ERROR = -32005
SIZE = "2m"


def _run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(args), capture_output=True, timeout=60, check=False)


def mount_small(ctx: Context, target: Path) -> tuple[str, str]:
    """Mount a small filesystem at `target`. Returns (kind, reason it could not); kind "" when nothing worked."""
    reasons = []
    out = _run("mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0755", "tmpfs", str(target))
    if out.returncode == 0:
        return "tmpfs", ""
    reasons.append(f"tmpfs: {out.stderr.decode(errors='replace').strip()}")
    image = target.parent / "disk.img"
    with open(image, "wb") as f:
        f.truncate(4 << 20)
    mk = _run("mkfs.ext4", "-q", "-F", str(image))
    if mk.returncode == 0:
        lo = _run("mount", "-o", "loop", str(image), str(target))
        if lo.returncode == 0:
            return "ext4 on a loop device", ""
        reasons.append(f"loop: {lo.stderr.decode(errors='replace').strip()}")
    else:
        reasons.append(f"mkfs.ext4: {mk.stderr.decode(errors='replace').strip()}")
    return "", "; ".join(reasons)


def unmount(target: Path) -> None:
    if _run("umount", str(target)).returncode != 0:
        _run("umount", "-l", str(target))


def dm_reason() -> str:
    try:
        out = _run("dmsetup", "targets")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"dmsetup not usable ({exc})"
    if out.returncode != 0:
        return (
            "device-mapper is not available in this kernel (`dmsetup targets`: "
            + (out.stderr.decode(errors="replace").strip().splitlines() or ["failed"])[0]
            + ")"
        )
    return ""


class Tracker:
    """What the scenario sent and what memd acknowledged, in the writer processes' label scheme."""

    def __init__(self, d: Daemon, workspace: str, report: Report) -> None:
        self.d = d
        self.ws = workspace
        self.report = report
        self.ledger = verify.Ledger()
        self.n = 0
        self.errors: dict[int, int] = {}

    def write(self, kind: str, size: int = 0) -> dict[str, Any] | None:
        """One write; returns the error object when it failed."""
        self.n += 1
        label = f"{kind}-disk-{self.n}"
        pad = "x" * size
        method, params = {
            "w": ("warm.log", {"action": label, "result": pad}),
            "h": ("hot.note", {"text": label}),
            "c": ("cold.learn", {"category": "Cdisk", "learning": label}),
            "d": ("decision.record", {"action": label, "reason": pad}),
        }[kind]
        if label:
            self.ledger.sent.add(label)
        response = self.d.request(method, timeout=30, workspace=self.ws, **params)
        if "result" in response:
            if label:
                self.ledger.acked[label] = "-"
            return None
        err = response["error"]
        code = int(err.get("code", 0))
        self.errors[code] = self.errors.get(code, 0) + 1
        self.report.check(code == STORAGE_ERROR, f"{method} on a full/read-only disk answered {code}: {err}")
        return dict(err)

    def verify(self, root: Path, tag: str) -> None:
        state = verify.inspect(root)
        acc = verify.account(state, self.ledger)
        for problem in state.problems:
            self.report.fail(f"{tag}: corrupt: {problem}")
        for x in acc.lost:
            self.report.fail(f"{tag}: LOST {x}")
        for x in acc.duplicated:
            self.report.fail(f"{tag}: duplicated {x}")
        self.report.check(not state.temps, f"{tag}: temp files left: {state.temps}")
        self.report.count("lost", len(acc.lost))
        self.report.count("corrupt", len(state.problems) + len(acc.duplicated))


def run(ctx: Context) -> Report:
    report = Report("disk")
    root = ctx.dir("disk")
    mnt = root / "small"
    mnt.mkdir()
    kind, why = mount_small(ctx, mnt)
    if not kind:
        report.skipped = f"cannot mount a small filesystem ({why}); an fsio fault-injection switch does not exist"
        return report
    try:
        scenario(ctx, report, root, mnt, kind)
    finally:
        unmount(mnt)
    reason = dm_reason()
    report.notes.append(
        "EIO from fsync: "
        + (f"not produced here: {reason}; " if reason else "dm-error is available but not wired up; ")
        + "covered by tests/unit/test_fsio.py, which monkeypatches os.fsync"
    )
    return report


def scenario(ctx: Context, report: Report, root: Path, mnt: Path, kind: str) -> None:
    name = "df"
    ws = mnt / "ws" / name
    config = base_config(root, {name: ws}, snapshot={"enabled": False})
    d = Daemon(ctx, root / "d", config)
    try:
        d.start()
        t = Tracker(d, name, report)
        for k in range(40):
            t.write("wwhcd"[k % 5])
        t.verify(ws, "before filling")
        acked_before = len(t.ledger.acked)
        reserve = mnt / "reserve"  # freed at the end, so that recovery has room for a whole hot/cold rewrite
        reserve.write_bytes(b"\0" * (1200 << 10))
        # fill with large entries until memd refuses; every refusal must be -32005 and change nothing acked
        first_error: dict[str, Any] | None = None
        for k in range(400):
            what = "wwwwwwcd"[k % 8]
            first_error = t.write(what, size=32_768 if what == "w" else 512)
            if first_error is not None:
                break
        report.check(first_error is not None, "the 2 MiB filesystem never filled up")
        if first_error is not None:
            data = first_error.get("data") or {}
            report.check(
                data.get("errno") == errno.ENOSPC, f"storage error without errno {errno.ENOSPC}: {first_error}"
            )
        # now take the last free block too, then try every kind of write
        filler = mnt / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        failures_full = 0
        for k in range(10):
            failures_full += int(t.write("whcd"[k % 4], size=64 if k % 2 else 0) is not None)
        report.check(failures_full > 0, "with the disk 100% full every write still succeeded")
        t.verify(ws, "disk full")
        status = d.call("status")["workspaces"][name]
        report.check(bool(status.get("last_write_error")), f"status shows no last_write_error: {status}")
        # a crash while the disk is full: memd must come back and serve reads
        d.kill9()
        d.start()
        hot = d.call("hot.get", workspace=name)
        report.check("error" not in hot, f"hot.get after a restart on a full disk: {hot.get('error')}")
        t.verify(ws, "restart on a full disk")
        # free the space: every tier writes again
        filler.unlink()
        reserve.unlink()
        recovered = [t.write(x) is None for x in "whcd"]
        report.check(all(recovered), f"writes still fail after space was freed: {recovered}")
        t.verify(ws, "after freeing space")
        # read-only filesystem: refused as storage errors, then writable again
        ro = _run("mount", "-o", "remount,ro", str(mnt)).returncode == 0
        ro_failures = 0
        if ro:
            ro_failures = sum(t.write(x) is not None for x in "whcd")
            report.check(ro_failures == 4, f"on a read-only filesystem only {ro_failures}/4 writes were refused")
            _run("mount", "-o", "remount,rw", str(mnt))
            report.check(all(t.write(x) is None for x in "whcd"), "writes fail after remounting read-write")
        t.verify(ws, "after read-only")
        d.stop()
        report.figure("filesystem", f"{kind}, {SIZE}")
        report.figure(
            "writes",
            f"{len(t.ledger.acked):,} acknowledged ({acked_before} before filling), "
            f"{len(t.ledger.sent) - len(t.ledger.acked)} refused; error codes {dict(sorted(t.errors.items()))}",
        )
        report.figure("full disk", f"{failures_full}/10 writes refused at 100% full; restart on a full disk ok")
        report.figure("read-only", f"{ro_failures}/4 refused, then writable again" if ro else "remount not permitted")
        report.count("acked", len(t.ledger.acked))
        report.summary = f"{sum(t.errors.values())} refused writes, all -32005" if set(t.errors) <= {-32005} else ""
    except (RuntimeError, RpcError, OSError) as exc:
        report.fail(f"disk scenario: {type(exc).__name__}: {exc}\n{d.log_tail()}")
    finally:
        d.close()
        for leftover in ("filler", "reserve"):
            with contextlib.suppress(OSError):
                os.unlink(mnt / leftover)
