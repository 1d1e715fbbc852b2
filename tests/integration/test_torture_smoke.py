"""The torture harness runs in `make test`: its fuzz and traversal scenarios at tiny sizes against a real daemon,
and the power-loss replay (every crash point of a recorded batch sequence under the "only what was fsynced
survives" model: the one check that sees a missing directory fsync, which a kill -9 cannot).

`torture/run.py --ci --scale 0.1 --only SCENARIO` must exit 0 (nothing lost or corrupt, no daemon death, no other
failed check) and print its summary line last. The full runs are `make torture` and `make torture-ci`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120  # each run takes well under 30 s; this only bounds a hung harness


@pytest.mark.parametrize("scenario", ["fuzz", "traversal", "powerloss"])
def test_torture_scenario_passes_at_tiny_size(scenario: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "torture" / "run.py"), "--ci", "--scale", "0.1", "--only", scenario],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("torture: "), output[-2000:]


def _run_with_a_scenario_that_cannot_run(*args: str) -> subprocess.CompletedProcess[str]:
    """torture/run.py with `users` replaced by a scenario that skips itself, as it does without root."""
    program = (
        "import sys; sys.path[:0] = [sys.argv[1]]\n"
        "from torture import run\n"
        "from torture.lib import Report\n"
        "def cannot(ctx):\n"
        "    report = Report('users')\n"
        "    report.skipped = 'needs root to start clients as another uid'\n"
        "    return report\n"
        "run.SCENARIOS['users'] = cannot\n"
        "sys.exit(run.main(sys.argv[2:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program, str(REPO), "--only", "users", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO,
        check=False,
    )


def test_a_scenario_that_cannot_run_fails_a_ci_run_but_not_a_local_one() -> None:
    ci = _run_with_a_scenario_that_cannot_run("--ci")
    local = _run_with_a_scenario_that_cannot_run()

    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert "users cannot run under --ci: needs root" in ci.stdout
    assert ci.stdout.strip().splitlines()[-1].startswith("torture: users 1 failed checks"), ci.stdout
    assert local.returncode == 0, local.stdout + local.stderr
    assert "skipped: needs root" in local.stdout
