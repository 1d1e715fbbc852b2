"""`make mutate`: mutation testing (mutmut 3) of the modules where a silent bug loses data or lets someone in.

    .venv/bin/python tests/mutation.py [MODULE ...] [--dir DIR]

mutmut rewrites each function of a module into variants that differ by one small change (a mutant: `<` for `<=`,
a constant, an argument dropped, a string) and runs the tests that cover that function against each; a mutant
the tests still pass (a survivor) is a behaviour no test pins down. Its settings are `[tool.mutmut]` in
pyproject.toml: the modules, and the fast in-process test files mutmut may choose from (per function it runs only
those that call it; a test that starts the daemon in a subprocess cannot see an in-process mutant).

The run happens in a copy of the working tree (DIR, default /tmp/memd-mutate, kept between runs so that a second
run re-tests only what changed), never in the checkout. Modules run one at a time in the order given (default:
`only_mutate`'s order, the writer modules last). The last lines printed are a markdown table per module:
mutants, killed, survived, timeouts, without tests. `mutmut results` and `mutmut show NAME` inside DIR list the
survivors and show one's diff. docs/testing.md keeps the report and the reasons for what survives.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SKIP = {".git", ".venv", "mutants", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "memd.egg-info"}


# Modules mutated only in part: the functions named here (mutmut's names, `x` + class + `ǁ` + function). server.py
# is mostly framing and flow control, which only the daemon-level tests reach and mutmut cannot see (its mutants
# live in the test process); what lets a peer in or keeps it out is unit-tested in tests/unit/test_server.py.
ONLY_FUNCTIONS = {
    "memd.server": (
        "xǁConnectionǁconnection_made",
        "xǁConnectionǁ_readmit",
        "xǁConnectionǁ_refuse",
        "xǁServerǁrecheck_peers",
    ),
}


def modules_in_config() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]
    return [p.removesuffix(".py").replace("/", ".") for p in config["only_mutate"]]


def sync(src: Path, dst: Path) -> None:
    """Make `dst` a copy of the working tree (mutmut's own `mutants/` in it is kept: that is its memory)."""
    wanted: set[Path] = set()
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in SKIP]
        rel = Path(root).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            wanted.add(rel / name)
            a, b = Path(root) / name, dst / rel / name
            st = a.stat()
            if not b.exists() or b.stat().st_mtime_ns != st.st_mtime_ns or b.stat().st_size != st.st_size:
                shutil.copy2(a, b)
    for root, dirs, files in os.walk(dst):
        dirs[:] = [d for d in dirs if d not in SKIP]
        rel = Path(root).relative_to(dst)
        for name in files:
            if rel / name not in wanted:
                (dst / rel / name).unlink()


def results(work: Path, modules: list[str]) -> dict[str, collections.Counter[str]]:
    """mutmut's verdict on every mutant (`memd.fsio.x_fsync_dir__mutmut_3: killed`), counted per module."""
    out = subprocess.run(
        [str(BIN / "mutmut"), "results", "--all", "true"], cwd=work, capture_output=True, text=True, check=False
    ).stdout
    by_module: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        module = next((m for m in modules if name.startswith(m + ".x")), None)
        only = ONLY_FUNCTIONS.get(module or "", ())
        if only and not any(name.startswith(f"{module}.{f}__mutmut_") for f in only):
            continue
        if sep and module:
            by_module[module][status] += 1
    return by_module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("modules", nargs="*", help="dotted module names (default: [tool.mutmut] only_mutate)")
    ap.add_argument("--dir", type=Path, default=Path(os.environ.get("MUTATE_DIR", "/tmp/memd-mutate")))
    ap.add_argument(
        "--deselect", action="append", default=[], metavar="NODEID", help="a test that fails on the unmutated tree"
    )
    ap.add_argument("--max-children", type=int, help="parallel test processes (mutmut's default: one per CPU)")
    args = ap.parse_args()
    modules = args.modules or modules_in_config()
    work: Path = args.dir
    work.mkdir(parents=True, exist_ok=True)
    sync(REPO, work)
    if args.deselect:  # mutmut needs every selected test green on the unmutated code
        pyproject = work / "pyproject.toml"
        extra = "".join(f', "--deselect", "{node}"' for node in args.deselect)
        text = pyproject.read_text(encoding="utf-8")
        pyproject.write_text(
            text.replace(
                'pytest_add_cli_args = ["-p", "no:cacheprovider"',
                f'pytest_add_cli_args = ["-p", "no:cacheprovider"{extra}',
            ),
            encoding="utf-8",
        )
    env = {**os.environ, "PYTHONPATH": ""}  # the mutants, not the checkout, must be what the tests import
    children = ["--max-children", str(args.max_children)] if args.max_children else []
    for module in modules:
        started = time.monotonic()
        log = work / f"mutate-{module}.log"
        with open(log, "w", encoding="utf-8") as f:
            patterns = [f"{module}.{name}__mutmut_*" for name in ONLY_FUNCTIONS.get(module, ())] or [f"{module}.*"]
            proc = subprocess.run(
                [str(BIN / "mutmut"), "run", *children, *patterns],
                cwd=work,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
            )
        print(f"{module}: mutmut exited {proc.returncode} after {time.monotonic() - started:.0f} s (log: {log})")
    table = results(work, modules)
    print("\n| module | mutants | killed | survived | timeout | no tests | other |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for module in modules:
        c = table.get(module, collections.Counter())
        other = sum(c.values()) - c["killed"] - c["survived"] - c["timeout"] - c["no tests"]
        row = [sum(c.values()), c["killed"], c["survived"], c["timeout"], c["no tests"], other]
        print(f"| {module} | " + " | ".join(str(n) for n in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
