"""Running memd at scale, as an operator sees it: which event loop serves, `status {summary: true}`, Prometheus
metrics (the `metrics` method, `memd metrics`, node_exporter's textfile) and retention sweeps of many workspaces
with snapshots on. Real daemons over real sockets; waits are bounded polls, never timed assertions.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harness import LOOPS, RunningDaemon, base_config, wait_for
from prometheus_client.parser import text_string_to_metric_families

from memd.errors import MemdError

MakeDaemon = Callable[..., RunningDaemon]


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, by name and labels (parsed by prometheus_client's own parser)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, frozenset(labels.items()))]


def memd_cli(daemon: RunningDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memd", "--config", str(daemon.config_path), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=daemon.env,
        check=False,
    )


# --- the event loop ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", LOOPS)
def test_status_says_which_event_loop_serves_as_configured(
    make_daemon: MakeDaemon, short_root: Path, loop: str
) -> None:
    daemon = make_daemon("loop", config=base_config(short_root / "loop", daemon={"loop": loop}))

    assert daemon.call("status")["loop"] == loop
    assert daemon.call("warm.log", workspace="alpha", action="on this loop")["entry"]["action"] == "on this loop"


def test_uvloop_serves_by_default_when_it_is_installed(daemon: RunningDaemon) -> None:
    assert daemon.call("status")["loop"] == "uvloop"


def test_status_says_what_memd_set_of_glibc_malloc_and_the_environment_wins(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    own = make_daemon("malloc-own").call("status")["malloc"]
    theirs = make_daemon("malloc-env", env={"MALLOC_ARENA_MAX": "4"}).call("status")["malloc"]

    if platform.libc_ver()[0] == "glibc":
        assert own == {"applied": True, "mmap_threshold": 262144, "trim_threshold": 4194304, "arena_max": 2}
    assert theirs == {"applied": False, "reason": "set in the environment (MALLOC_ARENA_MAX)"}


def test_memd_loop_in_the_environment_overrides_the_config(make_daemon: MakeDaemon, short_root: Path) -> None:
    config = base_config(short_root / "env", daemon={"loop": "uvloop"})

    daemon = make_daemon("env", config=config, env={"MEMD_LOOP": "asyncio"})

    assert daemon.call("status")["loop"] == "asyncio"


def test_an_unknown_memd_loop_stops_startup_naming_it(make_daemon: MakeDaemon) -> None:
    daemon = make_daemon("bad", start=False, env={"MEMD_LOOP": "trio"})

    proc = daemon.spawn()

    assert proc.wait(timeout=30) != 0
    assert "MEMD_LOOP='trio'" in daemon.log()


# --- status summary ------------------------------------------------------------------------------------------------


def test_a_status_summary_counts_every_workspace_and_lists_only_those_with_a_problem(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "sum"
    names = ["fine", "tight", "broken", "also-fine"]
    config = base_config(root, {n: root / "ws" / n for n in names})
    config["workspaces"]["tight"]["budget"] = {"cold": 5}  # far below what its memory file holds
    (root / "ws" / "tight" / "cold").mkdir(parents=True)
    (root / "ws" / "tight" / "cold" / "MEMORY.md").write_text(
        "# Agent Memory\n\n## Setup\n" + "- [2026-01-01] a learning that takes many more than five tokens\n" * 5
    )
    (root / "ws" / "broken" / "hot").mkdir(parents=True)
    (root / "ws" / "broken" / "hot" / "context.json").write_text("{not json")
    daemon = make_daemon("sum", config=config)
    daemon.call("warm.log", workspace="fine", action="all good")

    full = daemon.call("status")
    summary = daemon.call("status", summary=True)

    assert sorted(full["workspaces"]) == sorted(names)
    assert summary["summary"] is True
    assert summary["loop"] == full["loop"]
    assert set(summary["workspaces"]) == {"tight", "broken"}
    assert summary["workspaces"]["tight"]["problems"] == ["over_budget:cold"]
    assert summary["workspaces"]["broken"]["problems"] == ["file_errors"]
    assert summary["workspaces"]["broken"]["file_errors"] == full["workspaces"]["broken"]["file_errors"]
    counts = summary["counts"]
    assert counts["workspaces"] == 4
    assert counts["over_budget"] == 1
    assert counts["file_errors"] == 1
    assert counts["write_fault"] == counts["snapshot_error"] == counts["checkpoint_failing"] == 0


def test_memd_status_summary_prints_the_counts_and_the_workspaces_with_problems(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "cli"
    config = base_config(root)
    (root / "ws" / "beta" / "hot").mkdir(parents=True)
    (root / "ws" / "beta" / "hot" / "context.json").write_text("[]")  # not an object: memd cannot use it
    daemon = make_daemon("cli", config=config)

    out = memd_cli(daemon, "status", "--summary")

    assert out.returncode == 0, out.stderr
    assert "2 workspaces; file errors 1" in out.stdout
    assert "beta" in out.stdout
    assert "alpha" not in out.stdout


# --- metrics -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", LOOPS)
def test_metrics_count_requests_by_method_and_result_and_group_commits(
    make_daemon: MakeDaemon, short_root: Path, loop: str
) -> None:
    daemon = make_daemon("met", config=base_config(short_root / "met", daemon={"loop": loop}))
    for i in range(5):
        daemon.call("warm.log", workspace="alpha", action=f"entry {i}")
    with daemon.client() as c:
        with pytest.raises(MemdError, match="action"):
            c.call("warm.log", workspace="alpha")
        with pytest.raises(MemdError, match=r"no\.such"):
            c.call("no.such.method")

    text = daemon.call("metrics")["text"]

    assert value(text, "memd_requests_total", method="warm.log", result="ok") == 5
    assert value(text, "memd_requests_total", method="warm.log", result="invalid_params") == 1
    assert value(text, "memd_requests_total", method="(unknown)", result="method_not_found") == 1
    assert value(text, "memd_request_duration_seconds_count", method="warm.log") == 6
    assert value(text, "memd_batch_requests_count") >= 1
    assert value(text, "memd_batch_requests_sum") == 5  # every acknowledged write went through one batch
    assert value(text, "memd_batch_write_seconds_count") == value(text, "memd_batch_requests_count")
    assert value(text, "memd_info", version=daemon.call("ping")["version"], loop=loop) == 1


def test_metrics_read_budgets_snapshots_checkpoints_and_the_watcher_from_status(daemon: RunningDaemon) -> None:
    daemon.call("warm.log", workspace="alpha", action="something to count")
    daemon.call("snapshot.run", workspace="alpha")
    status = daemon.call("status")["workspaces"]["alpha"]

    text = daemon.call("metrics")["text"]

    for tier in ("hot", "warm", "cold"):
        assert value(text, "memd_budget_tokens", workspace="alpha", tier=tier) == status["usage"][tier]["tokens"]
        assert value(text, "memd_budget_limit_tokens", workspace="alpha", tier=tier) == status["usage"][tier]["budget"]
    assert value(text, "memd_snapshot_ok", workspace="alpha") == 1
    assert value(text, "memd_snapshot_commits_total", workspace="alpha") >= 1
    assert value(text, "memd_snapshot_failures_total", workspace="alpha") == 0
    assert value(text, "memd_snapshot_age_seconds", workspace="alpha") >= 0
    assert value(text, "memd_checkpoints_total", workspace="alpha", result="failed") == 0
    assert value(text, "memd_llm_tokens_total", workspace="alpha") == 0
    assert value(text, "memd_watcher_overflows_total") == 0
    assert value(text, "memd_workspaces") == 2


def test_memd_metrics_prints_the_text_exposition_format(daemon: RunningDaemon) -> None:
    out = memd_cli(daemon, "metrics")

    assert out.returncode == 0, out.stderr
    assert "# TYPE memd_requests_total counter" in out.stdout
    assert value(out.stdout, "memd_workspaces") == 2


def test_metrics_are_written_to_a_textfile_for_node_exporter_when_configured(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "tf"
    prom = root / "textfile" / "memd.prom"
    config = base_config(root, metrics={"textfile": str(prom), "textfile_interval_seconds": 0.2})
    daemon = make_daemon("tf", config=config)
    daemon.call("warm.log", workspace="alpha", action="counted")

    def written() -> str | None:
        text = prom.read_text() if prom.exists() else ""
        return text if 'method="warm.log"' in text else None

    text = wait_for(written, "the textfile to show the write")

    assert value(text, "memd_requests_total", method="warm.log", result="ok") == 1
    assert not [p for p in prom.parent.iterdir() if p != prom]  # replaced atomically: no temporary left behind


# --- retention sweeps of many workspaces --------------------------------------------------------------------------


def _seed(root: Path, name: str, expired: list[str]) -> Path:
    ws = root / "ws" / name
    (ws / "warm").mkdir(parents=True)
    for day in expired:
        (ws / "warm" / f"{day}.md").write_text(f"# Activity Log {day}\n\n### 10:00:00 - old work in {name}\n\n")
    return ws


def committed(ws: Path, path: str) -> str:
    """The file as the oldest commit of the workspace's repository that touched it holds it."""
    git = ["git", "-C", str(ws)]
    commits = subprocess.run([*git, "log", "--all", "--format=%H", "--", path], capture_output=True, text=True)
    oldest = commits.stdout.split()[-1]
    return subprocess.run([*git, "show", f"{oldest}:{path}"], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("loop", LOOPS)
def test_a_sweep_of_many_workspaces_with_snapshots_removes_every_expired_day_and_git_keeps_each(
    make_daemon: MakeDaemon, short_root: Path, loop: str
) -> None:
    root = short_root / "sw"
    today = datetime.now(UTC).date()
    expired = [(today - timedelta(days=back)).isoformat() for back in (40, 41)]
    names = [f"w{i:02d}" for i in range(12)]
    spaces = {n: _seed(root, n, expired) for n in names}
    # adopted_sweep = "run": the seeded day files would otherwise make each workspace adopted (sweeps only report)
    sections = {"snapshot": {"enabled": True}, "warm": {"retention_days": 30, "adopted_sweep": "run"}}
    config = base_config(root, spaces, daemon={"loop": loop, "sweep_concurrency": 3}, **sections)
    daemon = make_daemon("sw", config=config)

    result = daemon.call("retention.sweep", dry_run=False)

    assert [r["workspace"] for r in result["results"]] == names  # one result per workspace, in config order
    assert [sorted(r["removed"]) for r in result["results"]] == [[f"{d}.md" for d in sorted(expired)]] * len(names)
    for name, ws in spaces.items():
        assert not [p for p in (ws / "warm").glob("*.md") if p.stem in expired], name
        for day in expired:  # what the sweep deleted is in the workspace's own history
            assert f"old work in {name}" in committed(ws, f"warm/{day}.md")


def test_sweep_concurrency_out_of_range_is_a_config_error_naming_the_key(make_daemon: MakeDaemon) -> None:
    daemon = make_daemon("cc", start=False)
    daemon.rewrite_config({**daemon.config, "daemon": {**daemon.config["daemon"], "sweep_concurrency": 0}})

    out = memd_cli(daemon, "config", "check", str(daemon.config_path))

    assert out.returncode != 0
    assert "daemon.sweep_concurrency" in out.stdout + out.stderr
