"""Prometheus metrics of one daemon, in the text exposition format (the `metrics` method, `memd metrics`, and
optionally a file for node_exporter's textfile collector). memd never listens on a port for them.

The registry is the daemon's own (`CollectorRegistry`), never prometheus_client's process-wide default, so two
daemons in one process (tests) never mix and nothing else in the process can add series. Two kinds of metric:

- **Measured where they happen**, by one call each: requests by method and result and their latency (the
  server calls `request`), group-commit batch sizes and the time a batch's writes and fsyncs took (the writer
  calls `batch`). These are histograms and counters that only this module knows.
- **Read at collection** from what `status` already reports (`StatusCollector`): budget use per workspace and
  tier, write faults, snapshot failures and age, checkpoints by result, LLM tokens, watcher events and overflows,
  jobs, connections. Nothing is counted twice, and a scrape costs one `status` (about 20-40 ms at 1,000
  workspaces, on the loop; scrape every 15 s or more).

Labels are bounded: `method` is a declared method name (anything else is `(unknown)`), `result` is `ok` or an
error's name from memd.errors, `workspace` and `tier` come from the config. Imports memd.fsio, memd.errors and
memd.methods (prometheus_client outside).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from memd import errors, fsio
from memd.methods import DECLARED

UNKNOWN_METHOD = "(unknown)"  # a request whose method memd does not declare, or that did not parse
# Request latency from the line's arrival to its answer: a ping is ~0.1 ms, a durable write ~0.3-1 ms, a
# context read up to tens of ms, a checkpoint or sweep seconds.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # requests per group commit
WRITE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)  # one batch's I/O

# Error code -> the name used as the `result` label (the constant's name in memd.errors, lower case).
_ERROR_NAMES: dict[int, str] = {
    value: name.lower() for name, value in vars(errors).items() if name.isupper() and type(value) is int
}
Status = Callable[[], Mapping[str, Any]]


def result_label(code: int | None) -> str:
    """`ok`, or the name of the error code the request was answered with."""
    if code is None:
        return "ok"
    return _ERROR_NAMES.get(code, f"error_{code}")


class Metrics:
    """The daemon's registry and the metrics measured where they happen."""

    def __init__(self, status: Status) -> None:
        # No `_created` series: a start time per label set is noise here (uptime says it).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests = Counter(
            "memd_requests", "Requests answered, by method and result (ok or the error's name)",
            ("method", "result"), registry=self.registry,
        )  # fmt: skip
        self._latency = Histogram(
            "memd_request_duration_seconds", "From a request line's arrival to its answer, by method",
            ("method",), buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._batch_size = Histogram(
            "memd_batch_requests", "Write requests per group commit (one batch: one fsync per file it touches)",
            buckets=BATCH_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._batch_write = Histogram(
            "memd_batch_write_seconds",
            "A batch's durable I/O as the writer waits for it: writes and fsyncs in a worker, and the hop back",
            buckets=WRITE_BUCKETS, registry=self.registry,
        )  # fmt: skip
        # The request path runs per request: keep the labelled children instead of looking them up each time.
        self._request_children: dict[tuple[str, int | None], tuple[Any, Any]] = {}
        self.registry.register(StatusCollector(status))

    def request(self, method: str, code: int | None, seconds: float) -> None:
        """One answered request (the server's call): `code` None for a result, else the error's code."""
        key = (method, code)
        children = self._request_children.get(key)
        if children is None:
            name = method if method in DECLARED else UNKNOWN_METHOD
            children = (self._requests.labels(name, result_label(code)), self._latency.labels(name))
            if len(self._request_children) < 4096:  # bounded: unknown names map to one label anyway
                self._request_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def batch(self, requests: int, seconds: float) -> None:
        """One durable batch (the writer's call): how many requests it carried and how long its I/O took."""
        self._batch_size.observe(requests)
        self._batch_write.observe(seconds)

    def exposition(self) -> bytes:
        """Every metric, in the text exposition format (collects status once)."""
        return generate_latest(self.registry)


def write_textfile(path: Path, data: bytes) -> None:
    """Replace node_exporter's textfile (atomically: the collector never reads half a file). Runs in a worker."""
    fsio.ensure_dir(path.parent)
    fsio.atomic_replace(path, data, 0o640)  # it names every workspace: readable by the owner's group (node_exporter)


class StatusCollector:
    """Metrics read from `status` at collection time: nothing to keep in step, nothing counted twice."""

    def __init__(self, status: Status) -> None:
        self._status = status

    def describe(self) -> list[Metric]:
        return []  # no collection at registration (it would build a status): names are unique by construction

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        now = time.time()
        yield from _daemon(status)
        yield from _workspaces(status.get("workspaces") or {}, now)
        yield from _watcher(status.get("sync") or {})
        yield from _jobs(status.get("jobs") or {})


def _gauge(name: str, doc: str, value: float, labels: Mapping[str, str] | None = None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    family.add_metric(list((labels or {}).values()), value)
    return family


def _daemon(status: Mapping[str, Any]) -> Iterator[Metric]:
    yield _gauge(
        "memd_info", "memd's version and event loop (always 1)", 1,
        {"version": str(status.get("version", "")), "loop": str(status.get("loop", ""))},
    )  # fmt: skip
    yield _gauge("memd_uptime_seconds", "Seconds since the daemon started", float(status.get("uptime_seconds", 0)))
    yield _gauge("memd_open_connections", "Open client connections", float(status.get("connections", 0)))
    server = status.get("server") or {}
    connections = CounterMetricFamily(
        "memd_connections", "Connections by outcome: accepted, refused (over the cap), denied, unidentified",
        labels=["outcome"],
    )  # fmt: skip
    for outcome in ("accepted", "refused", "denied", "unidentified"):
        connections.add_metric([outcome], float(server.get(outcome, 0)))
    yield connections
    yield _gauge("memd_workspaces", "Workspaces served", float(len(status.get("workspaces") or {})))
    refused = (status.get("sync") or {}).get("refused") or {}
    yield _gauge("memd_workspaces_refused", "Configured workspaces another daemon holds", float(len(refused)))


def _workspaces(workspaces: Mapping[str, Any], now: float) -> Iterator[Metric]:
    tokens = GaugeMetricFamily("memd_budget_tokens", "Tokens a tier holds", labels=["workspace", "tier"])
    limit = GaugeMetricFamily("memd_budget_limit_tokens", "A tier's token budget", labels=["workspace", "tier"])
    writes = CounterMetricFamily("memd_writes", "Acknowledged write requests", labels=["workspace"])
    batches = CounterMetricFamily("memd_batches", "Durable batches (group commits)", labels=["workspace"])
    pending = GaugeMetricFamily("memd_pending_writes", "Writes queued for the writer", labels=["workspace"])
    fault = GaugeMetricFamily(
        "memd_write_fault", "1 while the last batch that wrote failed (or the directory is not memd's)",
        labels=["workspace"],
    )  # fmt: skip
    file_errors = GaugeMetricFamily("memd_file_errors", "Tier files memd cannot parse", labels=["workspace"])
    snap_ok = GaugeMetricFamily("memd_snapshot_ok", "1 when the last snapshot succeeded", labels=["workspace"])
    snap_failures = CounterMetricFamily("memd_snapshot_failures", "Failed snapshots", labels=["workspace"])
    snap_commits = CounterMetricFamily("memd_snapshot_commits", "Snapshot commits made", labels=["workspace"])
    snap_time = GaugeMetricFamily(
        "memd_snapshot_last_commit_timestamp_seconds", "When the last snapshot commit was made (Unix time)",
        labels=["workspace"],
    )  # fmt: skip
    snap_age = GaugeMetricFamily(
        "memd_snapshot_age_seconds", "Seconds since the last snapshot commit", labels=["workspace"]
    )
    checkpoints = CounterMetricFamily(
        "memd_checkpoints", "Checkpoint runs by result: ok or failed", labels=["workspace", "result"]
    )
    rejected = CounterMetricFamily(
        "memd_llm_summaries_rejected", "LLM summaries refused by the checks (extractive applied)", labels=["workspace"]
    )
    llm_tokens = CounterMetricFamily("memd_llm_tokens", "LLM tokens spent on summaries", labels=["workspace"])
    llm_today = GaugeMetricFamily(
        "memd_llm_tokens_today", "LLM tokens spent today (what llm.max_tokens_per_day caps)", labels=["workspace"]
    )
    for name, ws in workspaces.items():
        for tier, usage in (ws.get("usage") or {}).items():
            tokens.add_metric([name, tier], float(usage.get("tokens", 0)))
            limit.add_metric([name, tier], float(usage.get("budget", 0)))
        writes.add_metric([name], float(ws.get("writes", 0)))
        batches.add_metric([name], float(ws.get("batches", 0)))
        pending.add_metric([name], float(ws.get("pending_writes", 0)))
        fault.add_metric([name], float(bool(ws.get("write_fault") or ws.get("identity_error"))))
        file_errors.add_metric([name], float(len(ws.get("file_errors") or {})))
        snapshot = ws.get("snapshot") or {}
        if snapshot.get("state") not in (None, "disabled"):
            snap_ok.add_metric([name], float(snapshot.get("state") in ("ok", "new")))
            snap_failures.add_metric([name], float(snapshot.get("failures") or 0))
            snap_commits.add_metric([name], float(snapshot.get("commits") or 0))
            at = _timestamp(snapshot.get("last_commit_at"))
            if at is not None:
                snap_time.add_metric([name], at)
                snap_age.add_metric([name], max(0.0, now - at))
        checkpoint = ws.get("checkpoint") or {}
        checkpoints.add_metric([name, "ok"], float(checkpoint.get("runs") or 0))
        checkpoints.add_metric([name, "failed"], float(checkpoint.get("failed") or 0))
        rejected.add_metric([name], float(checkpoint.get("llm_summaries_rejected") or 0))
        llm_tokens.add_metric([name], float(checkpoint.get("llm_tokens") or 0))
        llm_today.add_metric([name], float(checkpoint.get("llm_tokens_today") or 0))
    yield from (tokens, limit, writes, batches, pending, fault, file_errors)
    yield from (snap_ok, snap_failures, snap_commits, snap_time, snap_age)
    yield from (checkpoints, rejected, llm_tokens, llm_today)


def _watcher(sync: Mapping[str, Any]) -> Iterator[Metric]:
    watcher = sync.get("watcher") or {}
    if watcher.get("disabled"):
        return
    yield _gauge("memd_watcher_alive", "1 while the inotify reader thread runs", float(bool(watcher.get("alive"))))
    events = CounterMetricFamily("memd_watcher_events", "inotify events read")
    events.add_metric([], float(watcher.get("events") or 0))
    yield events
    overflows = CounterMetricFamily(
        "memd_watcher_overflows", "inotify queue overflows (each makes memd rescan every workspace)"
    )
    overflows.add_metric([], float(watcher.get("overflows") or 0))
    yield overflows
    yield _gauge("memd_watcher_watches", "Directories watched through inotify", float(watcher.get("watched") or 0))
    yield _gauge(
        "memd_watcher_polled_paths", "Paths polled because the kernel refused a watch",
        float(len(watcher.get("polled_paths") or [])),
    )  # fmt: skip
    adopted = CounterMetricFamily("memd_outside_changes_adopted", "Outside edits memd picked up")
    adopted.add_metric([], float(sync.get("adopted_changes") or 0))
    yield adopted


def _jobs(jobs: Mapping[str, Any]) -> Iterator[Metric]:
    runs = CounterMetricFamily("memd_job_runs", "Scheduled job runs that finished", labels=["job"])
    failed = CounterMetricFamily("memd_job_errors", "Scheduled job runs that failed or timed out", labels=["job"])
    missed = CounterMetricFamily("memd_job_missed", "Scheduled job runs missed past the grace time", labels=["job"])
    for job, record in jobs.items():
        runs.add_metric([job], float(record.get("runs") or 0))
        failed.add_metric([job], float(record.get("errors") or 0))
        missed.add_metric([job], float(record.get("missed") or 0))
    yield from (runs, failed, missed)


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None
