"""Where a missed target's time goes: py-spy on a real daemon under one of the bench's loads.

    .venv/bin/pip install py-spy      # a tool of this script only; not a memd dependency
    .venv/bin/python bench/profile.py warm16 [--seconds 5] [--top 25]

Scenarios:
  warm1       1 client sending warm.log (figure 1)
  warm16      16 client processes sending warm.log (figure 2)
  hot16       16 clients alternating hot.note / progress.update (figure 3)
  start1000   daemon start with 1,000 workspaces, recorded from exec to the first answered ping (figure 6);
              --no-watch to see the start without the watcher
  first10m    the first warm.log after start with a 10 MiB day file (figure 4)
Prints the top functions by own (self) samples and by inclusive samples, non-idle threads only, and keeps the
collapsed stacks in bench/scratch/profile-<scenario>.txt (feed them to a flame graph tool if you like).

--cprofile (warm1, warm16, hot16) runs the daemon under cProfile instead (the event loop thread only, exact
call counts): prints the top functions by own and cumulative time with their calls per request.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemonctl import SCRATCH, Daemon, base_config, cleanup_sockets, empty_trash, fresh_dir
from fig_ops import _make_workspaces
from fig_write import WS, _prefilled_day, hot_templates, warm_params
from load import rpc_templates, run_load

PY_SPY = Path(sys.executable).with_name("py-spy")


def aggregate(path: Path, top: int, thread: str = "") -> str:
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or (thread and thread not in stack.split(";", 1)[0]):
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for frame in set(frames):
            incl[frame] += n
    out = [f"{total} samples" + (f" of threads named *{thread}*" if thread else "")]
    for title, counter in (("own", own), ("inclusive", incl)):
        out.append(f"\ntop {top} by {title} samples:")
        for frame, n in counter.most_common(top):
            out.append(f"{100 * n / max(total, 1):6.1f}%  {frame}")
    return "\n".join(out)


GIL = False  # --gil: only samples of the thread holding the GIL (Python CPU work, no waiting in syscalls)
IDLE = False  # --idle: also idle samples (waiting in epoll or on a queue): where the wall-clock time goes


def record(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(PY_SPY), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200",
         "--format", "raw", "--nolineno", "--threads", "--output", str(out),
         *(["--gil"] if GIL else []), *(["--idle"] if IDLE else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def under_load(templates: list[tuple[bytes, bytes]], seconds: float, out: Path, clients: int = 16) -> None:
    root = fresh_dir("profile")
    with Daemon(root, base_config(root, {WS: root / "ws"})).start() as d:
        spy = record(d.pid, seconds, out)
        time.sleep(0.5)
        run_load("rpc", clients, seconds, {"socket": d.socket_path, "templates": templates})
        spy.wait(timeout=seconds + 30)


def cprofile_load(templates: list[tuple[bytes, bytes]], seconds: float, clients: int, top: int) -> None:
    import pstats

    root = fresh_dir("profile")
    out = root / "daemon.prof"
    d = Daemon(root, base_config(root, {WS: root / "ws"}))
    d.python_args = ["-m", "cProfile", "-o", str(out)]
    with d.start():
        result = run_load("rpc", clients, seconds, {"socket": d.socket_path, "templates": templates})
    requests = result.count + 20 * clients  # the measured requests and each client's warm-up
    print(f"{requests} requests, {result.rate:.0f}/s under cProfile ({clients} clients); per request:")
    stats = pstats.Stats(str(out))
    rows = stats.stats  # type: ignore[attr-defined]
    for key, title in (("tt", "own"), ("ct", "cumulative")):
        index = 2 if key == "tt" else 3
        ranked = sorted(rows.items(), key=lambda kv: kv[1][index], reverse=True)[:top]
        print(f"\ntop {top} by {title} time (us per request, calls per request):")
        for (file, line, name), (_cc, nc, tt, ct, _callers) in ranked:
            where = f"{Path(file).name}:{line}" if line else file
            value = tt if key == "tt" else ct
            print(f"{1e6 * value / requests:9.1f} us {nc / requests:7.2f}  {name} ({where})")


def start1000(out: Path, watch: bool) -> None:
    base = SCRATCH / "fig6" / "ws"
    paths = _make_workspaces(base, 1000)
    root = fresh_dir("profile")
    config = base_config(root, {p.name: p for p in paths}, watch={"enabled": watch})
    d = Daemon(root, config)
    # py-spy starts the daemon itself so that the import and workspace opening are recorded too.
    cmd = [str(PY_SPY), "record", "--rate", "200", "--format", "raw", "--nolineno", "--threads", "--output",
           str(out), "--", sys.executable, "-m", "memd", "--config", str(d.config_path), "run"]  # fmt: skip
    spy = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.perf_counter()
    d.proc = spy  # reuse the ping wait; the daemon answers on the configured socket
    try:
        d._wait_ping(300)
        print(f"ready (ping) after {time.perf_counter() - t0:.1f} s under py-spy")
    finally:
        # Stop the daemon (a child of py-spy): py-spy then writes its output and exits.
        pids = subprocess.run(["pgrep", "-P", str(spy.pid)], capture_output=True, text=True).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-TERM", pid], check=False)
        spy.wait(timeout=120)


def first10m(out: Path) -> None:
    root = fresh_dir("profile")
    today = datetime.now(UTC).date().isoformat()
    _prefilled_day(root / "ws" / "warm" / f"{today}.md", 10 << 20, today)
    with Daemon(root, base_config(root, {WS: root / "ws"})).start() as d:
        spy = record(d.pid, 10, out)
        time.sleep(0.5)
        with d.client() as c:
            t, _ = c.timed("warm.log", **warm_params())
        print(f"first warm.log: {t * 1000:.0f} ms")
        spy.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=["warm1", "warm16", "hot16", "start1000", "first10m"])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--gil", action="store_true", help="only sample the thread holding the GIL")
    parser.add_argument("--idle", action="store_true", help="include idle samples (wall-clock view)")
    parser.add_argument("--thread", default="", help="only stacks of threads whose name contains this")
    parser.add_argument("--cprofile", action="store_true", help="cProfile the loop thread instead (load scenarios)")
    parser.add_argument("--no-watch", action="store_true", help="start1000: with [watch] enabled = false")
    args = parser.parse_args()
    global GIL, IDLE
    GIL, IDLE = args.gil, args.idle
    if not args.cprofile and not PY_SPY.exists() and shutil.which("py-spy") is None:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    out = SCRATCH / f"profile-{args.scenario}.txt"
    out.unlink(missing_ok=True)
    loads = {"warm1": (1, "warm"), "warm16": (16, "warm"), "hot16": (16, "hot")}
    if args.cprofile and args.scenario in loads:
        clients, kind = loads[args.scenario]
        templates = [rpc_templates("warm.log", warm_params())] if kind == "warm" else hot_templates()
        cprofile_load(templates, args.seconds, clients, args.top)
        cleanup_sockets()
        empty_trash()
        return 0
    if args.scenario == "warm1":
        under_load([rpc_templates("warm.log", warm_params())], args.seconds, out, clients=1)
    elif args.scenario == "warm16":
        under_load([rpc_templates("warm.log", warm_params())], args.seconds, out)
    elif args.scenario == "hot16":
        under_load(hot_templates(), args.seconds, out)
    elif args.scenario == "start1000":
        start1000(out, watch=not args.no_watch)
    else:
        first10m(out)
    cleanup_sockets()
    empty_trash()
    print(aggregate(out, args.top, args.thread))
    return 0


if __name__ == "__main__":
    sys.exit(main())
