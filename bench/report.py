"""Rows of the results table, the machine description, the printed table and the JSON files."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Row:
    """One figure: a value measured in each repetition, optionally against a peer measured in the same run."""

    figure: str  # short id, e.g. "1"
    name: str  # what is measured
    unit: str  # "/s", "ms", "MiB", "s", "%", "x", ""
    values: list[float]
    peer: str = ""
    peer_values: list[float] = field(default_factory=list)
    target: str = ""
    # ("ratio>=", 0.5) / ("ratio<=", 1.5) compare median(values)/median(peer_values); ("<", 5.0) / (">=", x)
    # compare median(values) itself.
    check: tuple[str, float] | None = None
    note: str = ""
    compare: bool = True  # False when the peer column is just another statistic (p99 next to p50): no ratio

    @property
    def median(self) -> float:
        return _median(self.values)

    @property
    def ratio(self) -> float | None:
        if not self.peer_values or not self.compare:
            return None
        peer = _median(self.peer_values)
        return self.median / peer if peer else None

    @property
    def met(self) -> bool | None:
        if self.check is None:
            return None
        op, bound = self.check
        value = self.ratio if op.startswith("ratio") else self.median
        if value is None or math.isnan(value):
            return False
        op = op.removeprefix("ratio")
        return {"<": value < bound, "<=": value <= bound, ">": value > bound, ">=": value >= bound}[op]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(median=self.median, ratio=self.ratio, met=self.met)
        if self.values:
            d.update(min=min(self.values), max=max(self.values))
        if self.peer_values:
            d["peer_median"] = _median(self.peer_values)
        return d


def _median(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else float("nan")


def fmt(value: float, unit: str) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    if unit in ("/s", "tok"):
        return f"{value:,.0f}"
    if unit in ("ms", "MiB", "s", "%", "x", "KiB"):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:,.4g}"


def fmt_range(values: list[float], unit: str) -> str:
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        return "n/a"
    med = fmt(_median(clean), unit)
    if len(clean) == 1:
        return f"{med} {unit}".rstrip()
    return f"{med} [{fmt(min(clean), unit)}-{fmt(max(clean), unit)}] {unit}".rstrip()


def table(rows: list[Row]) -> str:
    header = ["#", "figure", "value median [min-max]", "peer (same run)", "ratio", "target", "met?"]
    lines = []
    for r in rows:
        peer = f"{r.peer}: {fmt_range(r.peer_values, r.unit)}" if r.peer_values else r.peer
        ratio = r.ratio
        met = r.met
        lines.append(
            [
                r.figure,
                r.name,
                fmt_range(r.values, r.unit),
                peer,
                f"{ratio:.2f}x" if ratio is not None else "",
                r.target,
                "" if met is None else ("yes" if met else "NO"),
            ]
        )
    widths = [max(len(header[i]), *(len(line[i]) for line in lines)) if lines else len(header[i]) for i in range(7)]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"]
    out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in lines:
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |")
    return "\n".join(out)


def _cmd(*args: str) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except OSError:
        return ""


def machine(scratch: Path) -> dict[str, Any]:
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    cpu_model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    memd_version = _cmd(sys.executable, "-c", "import memd; print(memd.__version__)")
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model,
        "memory_mib": mem_kib // 1024,
        "kernel": platform.release(),
        "scratch_fs": _cmd("findmnt", "-n", "-o", "FSTYPE", "--target", str(scratch)),
        "scratch_mount": _cmd("findmnt", "-n", "-o", "SOURCE,FSTYPE,OPTIONS", "--target", str(scratch)),
        "python": platform.python_version(),
        "git": _cmd("git", "--version"),
        "sqlite": __import__("sqlite3").sqlite_version,
        "memd": memd_version,
        "memd_commit": _cmd("git", "-C", str(scratch.parent.parent), "rev-parse", "--short", "HEAD"),
        "memd_tree_dirty": bool(_cmd("git", "-C", str(scratch.parent.parent), "status", "--porcelain", "memd")),
    }


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def write_json(payload: dict[str, Any]) -> tuple[Path, Path]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    text = json.dumps(payload, indent=1, default=str) + "\n"
    latest = RESULTS / "latest.json"
    copy = RESULTS / f"{stamp}.json"
    latest.write_text(text, encoding="utf-8")
    copy.write_text(text, encoding="utf-8")
    return latest, copy
