"""Retention sweeps of many workspaces run with bounded concurrency (memd.daemon_jobs: `daemon.sweep_concurrency`).

The workspaces are fakes whose sweep waits on an event the test releases: what is checked is how many sweeps run
at once, that every workspace is swept, and that one failure neither stops the others nor goes unreported.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from memd import daemon_jobs, sweep
from memd.daemon import Daemon


@dataclass
class Gauge:
    running: int = 0
    most: int = 0


@dataclass
class FakeWorkspace:
    name: str
    gauge: Gauge
    fail: bool = False
    swept: list[bool] = field(default_factory=list)
    cron: str = "30 3 * * *"

    @property
    def config(self) -> Any:
        return SimpleNamespace(warm=SimpleNamespace(sweep_cron=self.cron, timezone="UTC"))

    async def sweep(self, dry_run: bool, confirm: bool = False) -> dict[str, Any]:
        self.gauge.running += 1
        self.gauge.most = max(self.gauge.most, self.gauge.running)
        try:
            for _ in range(3):  # give every other sweep the chance to start meanwhile
                await asyncio.sleep(0)
            if self.fail:
                raise OSError(f"{self.name} cannot be swept")
            self.swept.append(dry_run)
            return {"workspace": self.name, "removed": [f"{self.name}.md"]}
        finally:
            self.gauge.running -= 1


@pytest.fixture(autouse=True)
def sweeps_of_the_fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    async def run(ws: FakeWorkspace, dry_run: bool, confirm: bool = False) -> dict[str, Any]:
        return await ws.sweep(dry_run, confirm)

    monkeypatch.setattr(sweep, "run", run)


def fake_daemon(spaces: list[FakeWorkspace], bound: int) -> Any:
    config = SimpleNamespace(daemon=SimpleNamespace(sweep_concurrency=bound))
    registry = SimpleNamespace(workspaces={ws.name: ws for ws in spaces})
    return SimpleNamespace(config=config, registry=registry)


@pytest.mark.parametrize("bound", [1, 3, 8])
def test_no_more_workspaces_are_swept_at_once_than_the_bound_and_every_one_is_swept(bound: int) -> None:
    gauge = Gauge()
    spaces = [FakeWorkspace(f"w{i}", gauge) for i in range(20)]

    result = asyncio.run(Daemon.sweep(fake_daemon(spaces, bound), None, dry_run=False))

    assert gauge.most == bound
    assert [r["workspace"] for r in result["results"]] == [ws.name for ws in spaces]
    assert all(ws.swept == [False] for ws in spaces)


def test_one_failing_workspace_does_not_stop_the_others_and_its_error_is_the_answer() -> None:
    gauge = Gauge()
    spaces = [FakeWorkspace(f"w{i}", gauge, fail=(i == 2)) for i in range(6)]

    with pytest.raises(OSError, match="w2 cannot be swept"):
        asyncio.run(Daemon.sweep(fake_daemon(spaces, 2), None, dry_run=True))

    assert [ws.name for ws in spaces if ws.swept] == ["w0", "w1", "w3", "w4", "w5"]


def test_a_sweep_job_sweeps_the_workspaces_of_its_schedule_and_reports_a_failure_without_stopping_the_rest() -> None:
    gauge = Gauge()
    spaces = [
        FakeWorkspace(f"w{i}", gauge, fail=(i == 1), cron="0 4 * * *" if i == 3 else "30 3 * * *") for i in range(5)
    ]
    served = {ws.name: ws for ws in spaces}

    result = asyncio.run(daemon_jobs.sweep_group(served, "30 3 * * *", "UTC", concurrency=2))  # type: ignore[arg-type]

    assert result == {"workspaces": 4, "removed": 3, "failed": {"w1": "OSError: w1 cannot be swept"}}
    assert [ws.name for ws in spaces if ws.swept] == ["w0", "w2", "w4"]
    assert gauge.most == 2
