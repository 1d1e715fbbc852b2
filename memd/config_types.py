"""The configuration's types: the frozen dataclass tree a TOML file becomes, with every default.

Pure data, no loading: memd.config parses a file into these (and re-exports them: memd.config is the name every
other module imports them by), memd.config_parse converts a TOML table into one of them from its type hints, and
memd.config_checks checks the ranges of a built tree; sitting below all three lets each of them name these types.
A field's annotation is its schema: a `Literal` is a choice, a tuple a TOML list, a `Path` expands `~` and `$VARS`.
Imports nothing from memd.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

LogLevel = Literal["debug", "info", "warning", "error"]
EventLoop = Literal["auto", "uvloop", "asyncio"]  # auto: uvloop when it is installed, else asyncio's own


@dataclass(frozen=True)
class DaemonConfig:
    state_dir: Path = Path("~/.local/state/memd")
    log_level: LogLevel = "info"
    shutdown_timeout_seconds: float = 10.0
    loop: EventLoop = "auto"  # the event loop (restart to change); $MEMD_LOOP overrides it
    sweep_concurrency: int = 8  # workspaces a retention sweep works on at once


@dataclass(frozen=True)
class ServerConfig:
    socket: Path = Path("memd.sock")
    socket_mode: int = 0o600
    socket_group: str = ""
    allowed_uids: tuple[int, ...] = ()
    allowed_gids: tuple[int, ...] = ()
    max_request_bytes: int = 1 << 20
    max_connections: int = 1024
    idle_timeout_seconds: float = 300.0
    request_timeout_seconds: float = 10.0
    max_pending_writes: int = 10_000


@dataclass(frozen=True)
class BudgetConfig:
    encoding: str = "cl100k_base"
    model_window: int = 200_000
    hot: int = 10_000
    warm: int = 20_000
    cold: int = 10_000
    checkpoint_threshold: float = 0.8
    checkpoint_target: float = 0.5


@dataclass(frozen=True)
class WarmConfig:
    retention_days: int = 7
    recent_days: int = 3
    timezone: str = "UTC"  # memd.config's default is the machine's zone (local_timezone), as agents stamp local time
    sweep_cron: str = "30 3 * * *"
    mode: Literal["delete", "archive"] = "delete"
    archive_max_bytes: int = 64 * 1024 * 1024  # the most one archive file may decompress to (read or written)
    # A workspace that had day files before memd first served it: its sweeps only report until one is confirmed
    # ("report"), or run as any other's ("run").
    adopted_sweep: Literal["report", "run"] = "report"
    # Candidate learnings a sweep proposes (cold/PROPOSED.md) from each day it removes, at most; 0: none.
    promote_max_per_day: int = 3


@dataclass(frozen=True)
class SnapshotConfig:
    enabled: bool = True
    paths: tuple[str, ...] = ("hot", "warm", "cold")
    settle_seconds: float = 2.0
    max_wait_seconds: float = 30.0
    interval_seconds: float = 60.0
    remote: str = ""
    branch: str = "main"
    push_interval_seconds: float = 300.0
    push_timeout_seconds: float = 60.0
    adopt_existing: bool = False
    # How often the repositories memd made are checked for loose objects to pack (memd.git_maintenance); 0: never.
    gc_interval_seconds: float = 600.0
    # Two-way sync with `remote` (memd.sync): fetch and merge its history every push interval and before pushing.
    sync: bool = False


@dataclass(frozen=True)
class LlmConfig:
    backend: Literal["extractive", "openai"] = "extractive"
    base_url: str = ""
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: float = 30.0
    max_retries: int = 2
    deadline_seconds: float = 120.0
    redact_secrets: bool = True
    max_tokens_per_day: int = 200_000


@dataclass(frozen=True)
class PromoteConfig:
    """How a sweep finds the candidate learnings of the days it removes (memd.promote)."""

    backend: Literal["extractive", "openai"] = "extractive"  # openai: [llm]'s endpoint, spend cap and deadline
    max_prompt_tokens: int = 8_000  # of one day's entries sent to the LLM (estimated); the rest is not sent


@dataclass(frozen=True)
class CheckpointConfig:
    keep_decisions: int = 3
    recent_share: float = 0.2
    backoff_seconds: float = 60.0
    backoff_max_seconds: float = 21600.0
    min_fact_coverage: float = 0.6
    flush_to_warm: bool = True


@dataclass(frozen=True)
class DiscoveryConfig:
    roots: tuple[Path, ...] = ()


@dataclass(frozen=True)
class WatchConfig:
    enabled: bool = True
    settle_seconds: float = 0.05
    max_wait_seconds: float = 1.0
    reconcile_interval_seconds: float = 60.0
    polling_interval_seconds: float = 5.0


@dataclass(frozen=True)
class JobsConfig:
    budget_scan_interval_seconds: float = 300.0
    misfire_grace_seconds: float = 3600.0
    job_timeout_seconds: float = 600.0


@dataclass(frozen=True)
class LimitsConfig:
    """The largest tier files memd reads (bytes); a bigger file is a storage error, never read whole."""

    hot_max_bytes: int = 4 << 20
    cold_max_bytes: int = 16 << 20
    warm_day_max_bytes: int = 64 << 20


@dataclass(frozen=True)
class SearchConfig:
    """Full-text search (memd.search): an index in the state dir, derived from the files, kept current off the
    write path."""

    enabled: bool = True
    recency_half_life_days: float = 30.0  # a warm entry this old weighs halfway between 1 and recency_floor
    recency_floor: float = 0.3  # the weight a warm entry keeps however old (hot and cold never decay)
    index_delay_seconds: float = 0.5  # the index takes changes in once writes pause this long...
    index_max_wait_seconds: float = 30.0  # ...or this long after the first one at the latest (queries catch up first)


@dataclass(frozen=True)
class MetricsConfig:
    """Prometheus metrics (memd.metrics): always answered by the `metrics` method; optionally also written to a
    file for node_exporter's textfile collector. memd never listens on a port for them."""

    textfile: Path | None = None  # e.g. /var/lib/node_exporter/textfile_collector/memd.prom; None: no file
    textfile_interval_seconds: float = 15.0


@dataclass(frozen=True)
class WorkspaceConfig:
    """One workspace: its directory plus its effective budget and warm policy (global, then overrides)."""

    name: str
    path: Path
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    warm: WarmConfig = field(default_factory=WarmConfig)
    readers: tuple[int, ...] = ()
    writers: tuple[int, ...] = ()
    project: Path | None = None  # the project directory whose agents use this workspace (memd.frontends.project)


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    warm: WarmConfig = field(default_factory=WarmConfig)
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    promote: PromoteConfig = field(default_factory=PromoteConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    workspaces: Mapping[str, WorkspaceConfig] = field(default_factory=dict)
    source: Path | None = None  # the file this came from; None for the embedded default

    def workspace_for_discovered(self, name: str, path: Path) -> WorkspaceConfig:
        return WorkspaceConfig(name=name, path=path, budget=self.budget, warm=self.warm)
