"""Range and consistency checks of a parsed configuration (memd.config calls `validate`).

Each check adds messages naming the full key path to `errors`; none raises. Imports memd.config_types (the types
it checks).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from memd.config_types import BudgetConfig, Config, WarmConfig

SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the terminating NUL
TIER_MAX_BYTES_RANGE = (1 << 20, 1 << 30)  # a tier file is read whole into memory: bounded both ways
ARCHIVE_MAX_BYTES_RANGE = (1 << 20, 1 << 30)  # decompressed in memory when read: bounded both ways


def validate(config: Config, errors: list[str]) -> None:
    """Range and consistency checks. Each runs on its own, so a wrongly typed value (already reported) cannot
    hide the other problems."""
    checks = (_validate_server, _validate_tiers, _validate_jobs, _validate_workspace_paths, _validate_limits)
    for check in (*checks, _validate_daemon):
        with contextlib.suppress(TypeError, ValueError):
            check(config, errors)


def directory_identity(path: Path) -> tuple[int, int] | str:
    """Which directory `path` names, symlinks and `..` resolved: its device and inode when it exists (so a bind
    mount is the same directory too), else its resolved path. Two workspaces with one identity are one directory."""
    resolved = os.path.realpath(path)
    try:
        st = os.stat(resolved)
    except OSError:
        return resolved
    return (st.st_dev, st.st_ino)


def _validate_workspace_paths(config: Config, errors: list[str]) -> None:
    """One writer per workspace: the same directory under two names is refused, both names in the message."""
    seen: dict[tuple[int, int] | str, str] = {}
    for name, ws in config.workspaces.items():
        identity = directory_identity(ws.path)
        first = seen.setdefault(identity, name)
        if first != name:
            errors.append(
                f"workspaces.{first}.path and workspaces.{name}.path: {config.workspaces[first].path} and {ws.path} "
                f"are the same directory ({os.path.realpath(ws.path)}); a workspace has one name, keep one of them"
            )


PROMOTE_MAX_PER_DAY = 100  # candidates proposed from one day: a file people read, not a second log
SWEEP_CONCURRENCY_RANGE = (1, 64)  # every workspace in a sweep holds its repository and writer locks: bounded


def _validate_daemon(config: Config, errors: list[str]) -> None:
    low, high = SWEEP_CONCURRENCY_RANGE
    value = config.daemon.sweep_concurrency
    if isinstance(value, int) and not low <= value <= high:
        errors.append(f"daemon.sweep_concurrency: must be between {low} and {high}, got {value}")
    metrics = config.metrics
    _positive(errors, "metrics.textfile_interval_seconds", metrics.textfile_interval_seconds)
    if metrics.textfile is not None and not metrics.textfile.is_absolute():
        errors.append(f"metrics.textfile: must be an absolute path, got {metrics.textfile}")


def _validate_limits(config: Config, errors: list[str]) -> None:
    low, high = TIER_MAX_BYTES_RANGE
    for key in ("hot_max_bytes", "cold_max_bytes", "warm_day_max_bytes"):
        value = getattr(config.limits, key)
        if isinstance(value, int) and not low <= value <= high:
            errors.append(f"limits.{key}: must be between {low} (1 MiB) and {high} (1 GiB), got {value}")


def _validate_tiers(config: Config, errors: list[str]) -> None:
    _safely(_validate_budget, config.budget, "budget", errors)
    _safely(_validate_warm, config.warm, "warm", errors)
    for name, ws in config.workspaces.items():
        _safely(_validate_budget, ws.budget, f"workspaces.{name}.budget", errors)
        _safely(_validate_warm, ws.warm, f"workspaces.{name}.warm", errors)


def _safely(check: Any, section: Any, where: str, errors: list[str]) -> None:
    with contextlib.suppress(TypeError, ValueError):
        check(section, where, errors)


def _validate_server(config: Config, errors: list[str]) -> None:
    s = config.server
    if not 0 <= s.socket_mode <= 0o777:
        errors.append("server.socket_mode: must be a permission mode between 0000 and 0777")
    if len(os.fsencode(str(s.socket))) > SUN_PATH_MAX:
        errors.append(
            f"server.socket: path is {len(os.fsencode(str(s.socket)))} bytes, over the {SUN_PATH_MAX}-byte "
            "limit of a Unix socket address; choose a shorter path"
        )
    _positive(errors, "server.max_request_bytes", s.max_request_bytes, minimum=1024)
    _positive(errors, "server.max_connections", s.max_connections)
    _positive(errors, "server.idle_timeout_seconds", s.idle_timeout_seconds)
    _positive(errors, "server.request_timeout_seconds", s.request_timeout_seconds)
    _positive(errors, "server.max_pending_writes", s.max_pending_writes)
    _positive(errors, "daemon.shutdown_timeout_seconds", config.daemon.shutdown_timeout_seconds)


def _validate_jobs(config: Config, errors: list[str]) -> None:
    snap = config.snapshot
    _positive(errors, "snapshot.settle_seconds", snap.settle_seconds)
    if snap.max_wait_seconds < snap.settle_seconds:
        errors.append("snapshot.max_wait_seconds: must be at least snapshot.settle_seconds")
    for i, p in enumerate(snap.paths):
        if p not in ("hot", "warm", "cold"):
            errors.append(f"snapshot.paths[{i}]: {p!r} is not one of 'hot', 'warm', 'cold'")
    if snap.gc_interval_seconds < 0:
        errors.append("snapshot.gc_interval_seconds: must be 0 (never) or more")
    if snap.sync and not snap.remote:
        errors.append("snapshot.sync: needs snapshot.remote (the git remote to sync with)")
    watch = config.watch
    _positive(errors, "watch.settle_seconds", watch.settle_seconds)
    _positive(errors, "watch.reconcile_interval_seconds", watch.reconcile_interval_seconds)
    _positive(errors, "watch.polling_interval_seconds", watch.polling_interval_seconds)
    if watch.max_wait_seconds < watch.settle_seconds:
        errors.append("watch.max_wait_seconds: must be at least watch.settle_seconds")
    for key in ("budget_scan_interval_seconds", "misfire_grace_seconds", "job_timeout_seconds"):
        _positive(errors, f"jobs.{key}", getattr(config.jobs, key))
    search = config.search
    _positive(errors, "search.recency_half_life_days", search.recency_half_life_days)
    if not 0 <= search.recency_floor <= 1:
        errors.append(f"search.recency_floor: must be between 0 and 1, got {search.recency_floor}")
    if not 0 <= search.index_delay_seconds <= 60:
        errors.append(f"search.index_delay_seconds: must be between 0 and 60, got {search.index_delay_seconds}")
    if not search.index_delay_seconds <= search.index_max_wait_seconds <= 3600:
        errors.append("search.index_max_wait_seconds: must be at least search.index_delay_seconds and at most 3600")
    cp = config.checkpoint
    if cp.keep_decisions < 0:
        errors.append("checkpoint.keep_decisions: must be 0 or more")
    if not 0 <= cp.recent_share < 1:
        errors.append("checkpoint.recent_share: must be in [0, 1)")
    _positive(errors, "checkpoint.backoff_seconds", cp.backoff_seconds)
    if cp.backoff_max_seconds < cp.backoff_seconds:
        errors.append("checkpoint.backoff_max_seconds: must be at least checkpoint.backoff_seconds")
    if not 0 <= cp.min_fact_coverage <= 1:
        errors.append("checkpoint.min_fact_coverage: must be in [0, 1]")
    llm = config.llm
    _positive(errors, "llm.timeout_seconds", llm.timeout_seconds)
    _positive(errors, "llm.deadline_seconds", llm.deadline_seconds)
    if llm.max_retries < 0:
        errors.append("llm.max_retries: must be 0 or more")
    _positive(errors, "llm.max_tokens_per_day", llm.max_tokens_per_day)
    if llm.backend == "openai" and not llm.model:
        errors.append("llm.model: required when llm.backend = 'openai'")
    if config.promote.backend == "openai" and not llm.model:
        errors.append("llm.model: required when promote.backend = 'openai'")
    _positive(errors, "promote.max_prompt_tokens", config.promote.max_prompt_tokens)


def _validate_budget(b: BudgetConfig, where: str, errors: list[str]) -> None:
    for key in ("model_window", "hot", "warm", "cold"):
        _positive(errors, f"{where}.{key}", getattr(b, key))
    if b.hot + b.warm + b.cold > b.model_window:
        errors.append(f"{where}: hot + warm + cold ({b.hot + b.warm + b.cold}) exceed model_window ({b.model_window})")
    if not 0 < b.checkpoint_threshold <= 1:
        errors.append(f"{where}.checkpoint_threshold: must be in (0, 1]")
    if not 0 < b.checkpoint_target < b.checkpoint_threshold:
        errors.append(f"{where}.checkpoint_target: must be above 0 and below checkpoint_threshold")


def _validate_warm(w: WarmConfig, where: str, errors: list[str]) -> None:
    _positive(errors, f"{where}.retention_days", w.retention_days)
    _positive(errors, f"{where}.recent_days", w.recent_days)
    try:
        ZoneInfo(w.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        errors.append(f"{where}.timezone: unknown time zone {w.timezone!r} (use an IANA name such as 'Europe/Paris')")
    if len(w.sweep_cron.split()) != 5:
        errors.append(f"{where}.sweep_cron: expected 5 crontab fields (minute hour day month weekday)")
    if not ARCHIVE_MAX_BYTES_RANGE[0] <= w.archive_max_bytes <= ARCHIVE_MAX_BYTES_RANGE[1]:
        errors.append(
            f"{where}.archive_max_bytes: must be between {ARCHIVE_MAX_BYTES_RANGE[0]} (1 MiB) and "
            f"{ARCHIVE_MAX_BYTES_RANGE[1]} (1 GiB)"
        )
    if not 0 <= w.promote_max_per_day <= PROMOTE_MAX_PER_DAY:
        errors.append(f"{where}.promote_max_per_day: must be between 0 (no promotion) and {PROMOTE_MAX_PER_DAY}")


def _positive(errors: list[str], where: str, value: Any, minimum: float = 0) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value <= minimum and minimum == 0:
        errors.append(f"{where}: must be greater than 0")
    elif isinstance(value, int | float) and minimum and value < minimum:
        errors.append(f"{where}: must be at least {minimum}")
