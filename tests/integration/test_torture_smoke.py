"""The torture harness runs in `make test`: its fuzz and traversal scenarios at tiny sizes against a real daemon.

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


@pytest.mark.parametrize("scenario", ["fuzz", "traversal"])
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
