"""memd benchmarks: `make bench` (or `.venv/bin/python bench/run.py [--quick] [--only NAME[,NAME]]`).

Starts real `memd run` daemons on scratch directories under bench/scratch/, drives them over the real socket
from separate client processes, measures each figure's peers (raw fsync loops, SQLite) in the same run on the
same disk, repeats every measurement (3 times; 1 with --quick, which also uses smaller counts), prints one
table and writes bench/results/latest.json plus a timestamped copy. Exits 0 even when a target is missed: the
table says so. What each figure means: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemonctl import SCRATCH, cleanup_sockets, empty_trash
from fig_history import fig7_snapshots, fig8_checkpoints
from fig_ops import fig5_watcher, fig6_scale
from fig_reads import fig10_reads, fig10b_cold_reads
from fig_search import fig9_search
from fig_write import Settings, fig1_warm_one_client, fig2_warm_concurrent, fig3_hot, fig4_tokens
from report import Row, loadavg, machine, table, write_json

FIGURES: dict[str, tuple[str, Callable[[Settings], list[Row]]]] = {
    "warm1": ("1", fig1_warm_one_client),
    "warmN": ("2", fig2_warm_concurrent),
    "hot": ("3", fig3_hot),
    "tokens": ("4", fig4_tokens),
    "watcher": ("5", fig5_watcher),
    "scale": ("6", fig6_scale),
    "snapshot": ("7", fig7_snapshots),
    "checkpoint": ("8", fig8_checkpoints),
    "search": ("9", fig9_search),
    "reads": ("10", fig10_reads),
    "coldreads": ("10b", fig10b_cold_reads),
}


def cpu_background(seconds: float) -> dict[str, float]:
    """How busy the machine is while the bench itself is idle (from /proc/stat): the noise from other work.

    busy = user + nice + system + irq + softirq + steal, as a share of all CPUs; steal (time the hypervisor gave
    to other guests) and iowait are also reported on their own.
    """

    def sample() -> list[int]:
        return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]

    before = sample()
    time.sleep(seconds)
    delta = [b - a for a, b in zip(before, sample(), strict=True)]
    user, nice, system, _idle, iowait, irq, softirq, steal = delta
    total = max(1, sum(delta))
    return {
        "busy_percent": round(100.0 * (user + nice + system + irq + softirq + steal) / total, 1),
        "steal_percent": round(100.0 * steal / total, 1),
        "iowait_percent": round(100.0 * iowait / total, 1),
    }


def select(only: str | None) -> list[str]:
    if not only:
        return list(FIGURES)
    wanted = []
    for item in only.split(","):
        item = item.strip()
        by_number = [name for name, (number, _) in FIGURES.items() if number == item]
        if item in FIGURES:
            wanted.append(item)
        elif by_number:
            wanted += by_number
        else:
            raise SystemExit(f"unknown figure {item!r}; choose from {', '.join(FIGURES)} (or 1-10)")
    return wanted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 repetition, shorter runs, smaller counts")
    parser.add_argument("--only", help=f"comma-separated figures: {', '.join(FIGURES)} (or their numbers 1-10)")
    parser.add_argument("--reps", type=int, help="repetitions per measurement (default 3, --quick 1)")
    parser.add_argument("--duration", type=float, help="seconds per throughput measurement (default 2)")
    args = parser.parse_args(argv)
    settings = Settings(
        reps=args.reps or (1 if args.quick else 3),
        duration=args.duration or (1.0 if args.quick else 2.0),
        quick=args.quick,
    )
    names = select(args.only)
    SCRATCH.mkdir(parents=True, exist_ok=True)
    started = time.time()
    background_before = cpu_background(3.0)
    info = machine(SCRATCH)
    print(f"memd bench: {', '.join(names)}; {settings.reps} repetition(s), {settings.duration} s per run", flush=True)
    rows: list[Row] = []
    runs: dict[str, dict[str, object]] = {}
    for name in names:
        number, fn = FIGURES[name]
        t0 = time.time()
        load_before = loadavg()
        print(f"[{number}] {name} ...", end=" ", flush=True)
        try:
            produced = fn(settings)
            error = ""
        except Exception as exc:
            traceback.print_exc()
            error = f"{type(exc).__name__}: {exc}"
            produced = [Row(number, f"{name}: FAILED ({type(exc).__name__})", "", [], check=("<", 0), note=error)]
        elapsed = time.time() - t0
        print(f"{elapsed:.0f} s", flush=True)
        rows += produced
        runs[name] = {"seconds": round(elapsed, 1), "loadavg_before": load_before, "loadavg_after": loadavg()}
        if error:
            runs[name]["error"] = error
    cleanup_sockets()
    background_after = cpu_background(3.0)
    empty_trash()  # after the figures and the background reading: deleting thousands of files is work too
    total = time.time() - started
    noise = {"background_before": background_before, "background_after": background_after, "loadavg_end": loadavg()}
    latest, copy = write_json(
        {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "seconds": round(total, 1),
            "settings": {"reps": settings.reps, "duration": settings.duration, "quick": settings.quick},
            "machine": info,
            "noise": noise,
            "figures": runs,
            "rows": [r.as_dict() for r in rows],
        }
    )
    print()
    print(
        "machine: {nproc} CPU ({cpu}), {memory_mib} MiB, Linux {kernel}, scratch on {scratch_fs}, Python {python}, "
        "{git}, SQLite {sqlite}, memd {memd} ({memd_commit}{dirty})".format(
            **info, dirty=", uncommitted changes" if info["memd_tree_dirty"] else ""
        )
    )
    b, a = background_before, background_after
    print(
        f"noise (bench idle, 3 s): CPUs busy {b['busy_percent']:.0f}% before / {a['busy_percent']:.0f}% after "
        f"(steal {b['steal_percent']:.0f}% / {a['steal_percent']:.0f}%, iowait {b['iowait_percent']:.0f}% / "
        f"{a['iowait_percent']:.0f}%); load average per figure in {latest.name}"
    )
    print(f"total {total:.0f} s; results in {latest} and {copy.name}")
    missed = [r for r in rows if r.met is False]
    print(f"targets: {sum(r.met is True for r in rows)} met, {len(missed)} missed")
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
