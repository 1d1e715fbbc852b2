"""memd.metrics: the daemon's own registry, the request and batch measurements, and the series read from status."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from memd.errors import BUSY, INVALID_PARAMS
from memd.metrics import Metrics, result_label

STATUS: dict[str, Any] = {
    "version": "9.9.9",
    "loop": "uvloop",
    "uptime_seconds": 12.5,
    "connections": 2,
    "server": {"accepted": 7, "refused": 1, "denied": 0, "unidentified": 0},
    "sync": {"watcher": {"alive": True, "events": 40, "overflows": 3, "watched": 6, "polled_paths": []}},
    "jobs": {"reconcile": {"runs": 4, "errors": 1, "missed": 0}},
    "workspaces": {
        "alpha": {
            "usage": {"hot": {"tokens": 120, "budget": 1000}, "cold": {"tokens": 5, "budget": 10}},
            "writes": 9,
            "batches": 4,
            "write_fault": False,
            "file_errors": {"hot": "not JSON"},
            "snapshot": {"state": "error", "failures": 2, "commits": 5, "last_commit_at": "2026-01-01T00:00:00+00:00"},
            "checkpoint": {"runs": 3, "failed": 1, "llm_tokens": 1500, "llm_tokens_today": 200},
        }
    },
}


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_results_are_ok_or_the_error_name() -> None:
    assert result_label(None) == "ok"
    assert result_label(INVALID_PARAMS) == "invalid_params"
    assert result_label(BUSY) == "busy"
    assert result_label(-1) == "error_-1"


def test_requests_are_counted_by_declared_method_and_result_and_undeclared_names_share_one_label() -> None:
    metrics = Metrics(lambda: STATUS)
    metrics.request("warm.log", None, 0.001)
    metrics.request("warm.log", None, 0.002)
    metrics.request("warm.log", INVALID_PARAMS, 0.0001)
    for name in ("made.up", "another.one", ""):
        metrics.request(name, -32601, 0.0001)

    got = samples(metrics)

    assert got[("memd_requests_total", frozenset({("method", "warm.log"), ("result", "ok")}))] == 2
    assert got[("memd_requests_total", frozenset({("method", "warm.log"), ("result", "invalid_params")}))] == 1
    assert got[("memd_requests_total", frozenset({("method", "(unknown)"), ("result", "method_not_found")}))] == 3
    assert got[("memd_request_duration_seconds_count", frozenset({("method", "warm.log")}))] == 3


def test_batches_record_their_size_and_io_time() -> None:
    metrics = Metrics(lambda: STATUS)
    metrics.batch(16, 0.0004)
    metrics.batch(1, 0.0002)

    got = samples(metrics)

    assert got[("memd_batch_requests_count", frozenset())] == 2
    assert got[("memd_batch_requests_sum", frozenset())] == 17
    assert got[("memd_batch_write_seconds_bucket", frozenset({("le", "0.0005")}))] == 2


def test_series_read_from_status_at_collection() -> None:
    got = samples(Metrics(lambda: STATUS))

    alpha = frozenset({("workspace", "alpha")})
    assert got[("memd_info", frozenset({("version", "9.9.9"), ("loop", "uvloop")}))] == 1
    assert got[("memd_connections_total", frozenset({("outcome", "refused")}))] == 1
    assert got[("memd_budget_tokens", alpha | {("tier", "hot")})] == 120
    assert got[("memd_budget_limit_tokens", alpha | {("tier", "cold")})] == 10
    assert got[("memd_file_errors", alpha)] == 1
    assert got[("memd_snapshot_ok", alpha)] == 0
    assert got[("memd_snapshot_failures_total", alpha)] == 2
    assert got[("memd_snapshot_last_commit_timestamp_seconds", alpha)] == 1767225600
    assert got[("memd_checkpoints_total", alpha | {("result", "failed")})] == 1
    assert got[("memd_llm_tokens_total", alpha)] == 1500
    assert got[("memd_watcher_overflows_total", frozenset())] == 3
    assert got[("memd_job_errors_total", frozenset({("job", "reconcile")}))] == 1


def test_each_daemon_has_its_own_registry() -> None:
    first, second = Metrics(lambda: STATUS), Metrics(lambda: STATUS)
    first.request("ping", None, 0.0001)

    assert ("memd_requests_total", frozenset({("method", "ping"), ("result", "ok")})) not in samples(second)
