"""The daemon's scheduled jobs: which ones run, from the config (`schedule`), and the work of each: retention
sweeps of many workspaces, the interval snapshot flush, the reconcile scan, the budget scan and the metrics textfile.

memd.jobs schedules callables and knows nothing of what they do; memd.daemon calls `schedule` at start and after
every reload, handing in itself as the parts the jobs work on (`DaemonParts`), so that the daemon keeps only its
lifecycle and the jobs, their wiring and their bodies, can be read, and tested, without the rest of it.

Retention sweeps of many workspaces (the cron job, `retention.sweep` without a workspace) run at most
`daemon.sweep_concurrency` workspaces at once. Lock order: a sweep holds only its own workspace's locks, in the
order used everywhere (its repository's lock, then its writer; memd.snapshots), one after the other, so sweeps
of different workspaces never wait on each other and cannot deadlock; the semaphore is taken before either lock
and nothing that holds a workspace lock ever waits for it.
Imports memd.checkpoint, memd.config, memd.jobs, memd.metrics, memd.registry, memd.search, memd.snapshot_gc,
memd.snapshot_push, memd.snapshots, memd.stoppable, memd.sweep, memd.sync and memd.workspace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, Protocol

from memd import snapshot_gc, snapshot_push, sweep
from memd.checkpoint import Checkpointer
from memd.config import Config, MetricsConfig
from memd.jobs import Jobs
from memd.metrics import Metrics, write_textfile
from memd.registry import Registry
from memd.search.service import SearchService
from memd.snapshots import Snapshotter
from memd.stoppable import Stoppable
from memd.sync import Syncer
from memd.workspace import Workspace

log = logging.getLogger("memd")


class DaemonParts(Protocol):
    """What the jobs work on (memd.daemon.Daemon): read when a job runs, so a reload's new config is the one used."""

    @property
    def config(self) -> Config: ...
    @property
    def jobs(self) -> Jobs: ...
    @property
    def registry(self) -> Registry: ...
    @property
    def search(self) -> SearchService: ...
    @property
    def snapshots(self) -> Snapshotter: ...
    @property
    def syncer(self) -> Syncer: ...
    @property
    def checkpoints(self) -> Checkpointer: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def io(self) -> Executor: ...
    @property
    def gc_io(self) -> Executor: ...
    @property
    def background(self) -> Stoppable: ...


def schedule(daemon: DaemonParts) -> None:
    """(Re)register every job from the daemon's current config. Each job reads the config when it runs, not when it
    was registered."""
    config = daemon.config
    jobs = daemon.jobs
    keep = {"reconcile", "budget-scan", "snapshot-flush"}
    jobs.every(
        "reconcile",
        config.watch.reconcile_interval_seconds,
        lambda: reconcile(daemon.registry, daemon.search),
    )
    jobs.every(
        "snapshot-flush",
        config.snapshot.interval_seconds,
        lambda: snapshot_flush(daemon.snapshots, daemon.registry.workspaces),
    )
    if config.snapshot.remote and config.snapshot.sync:
        keep.add("snapshot-sync")  # fetch, merge, then push: the push job's work and more
        jobs.every("snapshot-sync", config.snapshot.push_interval_seconds, daemon.syncer.sync_all)
    elif config.snapshot.remote:
        keep.add("snapshot-push")
        jobs.every(
            "snapshot-push",
            config.snapshot.push_interval_seconds,
            lambda: snapshot_push.push_all(daemon.snapshots),
        )
    if config.snapshot.enabled and config.snapshot.gc_interval_seconds > 0:
        keep.add("snapshot-gc")
        jobs.every(
            "snapshot-gc",
            config.snapshot.gc_interval_seconds,
            lambda: snapshot_gc.maintain_all(daemon.snapshots, daemon.gc_io, daemon.background),
        )
    jobs.every(
        "budget-scan",
        config.jobs.budget_scan_interval_seconds,
        lambda: budget_scan(daemon.registry, daemon.checkpoints),
    )
    if config.metrics.textfile is not None:
        keep.add("metrics-textfile")
        jobs.every(
            "metrics-textfile",
            config.metrics.textfile_interval_seconds,
            lambda: write_metrics(daemon.metrics, daemon.config.metrics, daemon.io),
        )
    groups: dict[tuple[str, str], list[str]] = {}
    for name, ws in daemon.registry.workspaces.items():
        groups.setdefault((ws.config.warm.sweep_cron, ws.config.warm.timezone), []).append(name)
    for cron, tz in groups:
        job_id = f"sweep {tz} {cron}"
        keep.add(job_id)

        async def one_group(cron: str = cron, tz: str = tz) -> dict[str, Any]:
            concurrency = daemon.config.daemon.sweep_concurrency
            return await sweep_group(daemon.registry.workspaces, cron, tz, concurrency)

        jobs.cron(job_id, cron, tz, one_group)
    jobs.remove_all_except(keep)


async def sweep_each(
    targets: Sequence[Workspace], dry_run: bool, confirm: bool = False, *, concurrency: int
) -> list[dict[str, Any] | BaseException]:
    """Sweep each workspace, at most `concurrency` at once (lock order: module docstring). Results in the order of
    `targets`; a workspace whose sweep failed has its exception in its place."""
    bound = asyncio.Semaphore(concurrency)

    async def one(ws: Workspace) -> dict[str, Any]:
        async with bound:
            return await sweep.run(ws, dry_run, confirm)

    return await asyncio.gather(*(one(ws) for ws in targets), return_exceptions=True)


async def sweep_group(served: Mapping[str, Workspace], cron: str, tz: str, concurrency: int) -> dict[str, Any]:
    """The cron job `sweep <tz> <cron>`: sweep every served workspace whose `warm.sweep_cron` and `warm.timezone`
    are these; a failure is logged and reported, the other workspaces are swept all the same."""
    names = [n for n, w in served.items() if (w.config.warm.sweep_cron, w.config.warm.timezone) == (cron, tz)]
    targets = [served[n] for n in names]
    outcomes = await sweep_each(targets, dry_run=False, concurrency=concurrency)
    failed = {
        ws.name: getattr(o, "message", None) or f"{type(o).__name__}: {o}"
        for ws, o in zip(targets, outcomes, strict=True)
        if isinstance(o, BaseException)
    }
    for name, why in failed.items():
        log.warning("retention sweep of %s failed: %s", name, why)
    removed = sum(len(o["removed"]) for o in outcomes if not isinstance(o, BaseException))
    return {"workspaces": len(outcomes), "removed": removed, "failed": failed}


async def write_metrics(metrics: Metrics, config: MetricsConfig, io: Executor) -> str:
    """The textfile for node_exporter: collected on the loop, written (atomically) by a worker."""
    path = config.textfile
    assert path is not None
    data = metrics.exposition()
    await asyncio.get_running_loop().run_in_executor(io, write_textfile, path, data)
    return str(path)


async def snapshot_flush(snapshots: Snapshotter, served: Collection[str]) -> int:
    snapshots.prune(set(served))
    return await snapshots.flush("interval flush")


async def reconcile(registry: Registry, search: SearchService) -> int:
    changed = await registry.reconcile()
    search.mark_all(registry.workspaces.values())  # what no listener reports (a restore from git)
    return changed


async def budget_scan(registry: Registry, checkpoints: Checkpointer) -> dict[str, Any]:
    """Catch what the write path missed (outside edits): schedule checkpoints for hot tiers over threshold."""
    over: dict[str, Any] = {}
    for name, ws in list(registry.workspaces.items()):
        if ws.looks_changed():  # adopted like a watcher hint: counted, and the change sink is told
            await registry.adopt_outside_changes(name, ws)
        if checkpoints.over_threshold(ws):
            over[name] = {"hot": ws.usage()["hot"].as_dict(), "scheduled": checkpoints.maybe_schedule(ws)}
    return {"over_threshold": over}
