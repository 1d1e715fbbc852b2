"""memd torture run: `make torture` (bounded, seeded, < 10 minutes) or `torture/run.py --ci` (< 3 minutes).

    .venv/bin/python torture/run.py [--seed N] [--only SCENARIO[,SCENARIO...]] [--ci] [--scale F] [--keep] [-v]

Scenarios (torture/README.md says what each proves): crash, powerloss, disk, fuzz, traversal, users, deps, soak,
person, sharing, sync.
Each prints its figures; the last line is the summary. The exit status is 1 when anything was lost or corrupt,
the daemon died, or any other check failed; 2 for a harness error. A scenario that cannot run (missing privilege)
says why; it does not fail a local run, but under `--ci` it does (CI runs as root, so a skip there is a gap).
`--scale` multiplies every size (the smoke test runs `--ci --scale 0.1`).
Everything runs under one temporary directory in /tmp, removed at the end (`--keep` keeps it for a post-mortem).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "torture"]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from torture import (  # noqa: E402
    crash,
    deps,
    diskfault,
    fuzz,
    person,
    powerloss,
    sharing,
    soak,
    syncing,
    traversal,
    users,
)
from torture.lib import Context, Report, fmt  # noqa: E402

SCENARIOS: dict[str, Callable[[Context], Report]] = {
    "crash": crash.run,
    "powerloss": powerloss.run,
    "disk": diskfault.run,
    "fuzz": fuzz.run,
    "traversal": traversal.run,
    "users": users.run,
    "deps": deps.run,
    "soak": soak.run,
    "person": person.run,
    "sharing": sharing.run,
    "sync": syncing.run,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated scenarios (or scenario:part): " + ", ".join(SCENARIOS))
    ap.add_argument("--ci", action="store_true", help="CI sizes (under 3 minutes)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every size by this")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument(
        "--long", action="store_true", help="the long variants: soak runs an hour (x --scale) with steadiness checks"
    )
    ap.add_argument(
        "--soak-mix",
        default="",
        help="the soak's write mix instead of its own (writer.py --mix, e.g. w=3,h=2,d=1: no learnings), to find "
        "which requests a drift comes from",
    )
    ap.add_argument(
        "--soak-no-snapshots",
        action="store_true",
        help="the soak with [snapshot] enabled = false (compressed notes and decisions are then looked for in the "
        "warm log, where a checkpoint flushes them: no history holds the older checkpoint records)",
    )
    ap.add_argument(
        "--soak-no-search",
        action="store_true",
        help="the soak with [search] enabled = false (no index is kept: what indexing costs the run shows)",
    )
    ap.add_argument(
        "--soak-seed-minutes",
        type=float,
        default=0.0,
        help="start the soak on workspaces holding what that many minutes of its load leave (a big day file, a "
        "big MEMORY.md), so that 12 minutes show how the end of an hour behaves",
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    parts: dict[str, set[str]] = {}
    names: list[str] = []
    for item in (n.strip() for n in args.only.split(",")):
        if item:
            name, _, part = item.partition(":")
            names += [name] if name not in names else []
            if part:
                parts.setdefault(name, set()).add(part)
    names = names or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupted)
    tmp = Path(tempfile.mkdtemp(prefix="memd-torture-", dir="/tmp"))
    os.chmod(tmp, 0o700)
    ctx = Context(args.seed, args.ci, args.scale, tmp, args.verbose)
    ctx.parts = parts
    ctx.long = args.long and not args.ci
    ctx.soak_mix = args.soak_mix
    ctx.soak_snapshots = not args.soak_no_snapshots
    ctx.soak_search = not args.soak_no_search
    ctx.soak_seed_minutes = args.soak_seed_minutes
    mode = "ci" if args.ci else "full"
    print(f"memd torture: seed {args.seed}, {mode} sizes x{args.scale:g}, scenarios {', '.join(names)}", flush=True)
    reports: list[Report] = []
    started = time.monotonic()
    harness_error = False
    try:
        for name in names:
            t0 = time.monotonic()
            try:
                report = SCENARIOS[name](ctx)
            except KeyboardInterrupt:
                raise
            except Exception:
                harness_error = True
                report = Report(name)
                report.fail("harness error:\n" + traceback.format_exc())
            finally:
                ctx.procs.kill_all()
            if ctx.ci and report.skipped:  # CI has every privilege a scenario needs: a skip there hides a gap
                report.fail(f"{name} cannot run under --ci: {report.skipped}")
            report.seconds = time.monotonic() - t0
            reports.append(report)
            print_report(report)
    except KeyboardInterrupt as exc:
        print(f"\ninterrupted ({exc}); cleaning up", flush=True)
        ctx.procs.kill_all()
        return 130
    finally:
        ctx.procs.kill_all()
        if args.keep:
            print(f"kept {tmp}")
        else:
            _remove(tmp)
    total = time.monotonic() - started
    print(summary(reports, total), flush=True)
    if harness_error:
        return 2
    return 1 if any(r.failures for r in reports) else 0


def _remove(tmp: Path) -> None:
    import shutil

    # a scenario may have left a mount behind if it was interrupted mid-way
    with open("/proc/self/mounts", encoding="utf-8") as f:
        mounts = [line.split()[1] for line in f if line.split()[1].startswith(str(tmp))]
    for mount in sorted(mounts, reverse=True):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
    shutil.rmtree(tmp, ignore_errors=True)


def print_report(report: Report) -> None:
    status = "FAILED" if report.failures else ("SKIPPED" if report.skipped else "ok")
    print(f"== {report.name}: {status} ({report.seconds:.1f} s)", flush=True)
    if report.skipped:
        print(f"  skipped: {report.skipped}")
    width = max((len(label) for label, _ in report.figures), default=0)
    for label, value in report.figures:
        print(f"  {label.ljust(width)}  {value}")
    for note in report.notes:
        print(f"  note: {note}")
    for failure in report.failures[:60]:
        print("  FAIL: " + failure.replace("\n", "\n        "))
    if len(report.failures) > 60:
        print(f"  ... and {len(report.failures) - 60} more failures")
    sys.stdout.flush()


def summary(reports: list[Report], seconds: float) -> str:
    total: dict[str, int] = {}
    for r in reports:
        for k, v in r.counters.items():
            total[k] = total.get(k, 0) + v
    by_name = {r.name: r for r in reports}
    parts = []
    if "crash" in by_name or "crashes" in total:
        parts.append(
            f"{fmt(total.get('crashes', 0))} crashes, {fmt(total.get('acked', 0))} acked writes, "
            f"{fmt(total.get('lost', 0))} lost, {fmt(total.get('corrupt', 0))} corrupt"
        )
    if "powerloss" in by_name:
        parts.append(
            f"{fmt(total.get('powerloss_states', 0))} power-loss states, {fmt(total.get('powerloss_bad', 0))} bad"
        )
    if "fuzz" in by_name:
        parts.append(
            f"{fmt(total.get('fuzz_cases', 0))} fuzz cases, {fmt(total.get('daemon_deaths', 0))} daemon deaths, "
            f"{fmt(total.get('internal_errors', 0))} internal errors"
        )
    for name in ("disk", "traversal", "users", "deps", "soak", "person", "sharing"):
        r = by_name.get(name)
        if r is not None:
            state = f"{len(r.failures)} failed checks" if r.failures else ("skipped" if r.skipped else "ok")
            parts.append(f"{name} {state}" + (f" ({r.summary})" if r.summary and not r.skipped else ""))
    failed = sum(len(r.failures) for r in reports)
    parts.append(f"{failed} failures in {seconds:.0f} s")
    return "torture: " + "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
