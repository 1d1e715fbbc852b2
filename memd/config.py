"""Configuration: one TOML file parsed by one function into a frozen dataclass tree.

Only the composition root (daemon, cli) calls `load_config`; everything else receives the pieces it needs.
Unknown keys are errors naming the full key path; every problem is collected, not just the first. Paths expand
`~` and `$VARS` from the environment passed in (never read implicitly). This module holds the schema (the
dataclasses, their defaults, the sections and workspace keys) and `load_config`; the type-hint driven conversion of
a table into a dataclass, with its error messages, lives in memd.config_parse; range checks in memd.config_checks.
Imports memd.config_checks, memd.config_parse, memd.locate and memd.errors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tomli_w

from memd.config_checks import SUN_PATH_MAX as SUN_PATH_MAX  # re-exported: part of the config's contract
from memd.config_checks import validate
from memd.config_parse import as_table, build, convert, to_plain
from memd.errors import ConfigError
from memd.locate import default_socket, default_state_dir, read_config_file

WORKSPACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
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
    timezone: str = "UTC"  # parse_config's default is the machine's zone (local_timezone), as agents stamp local time
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


_SECTIONS: dict[str, type] = {
    "daemon": DaemonConfig,
    "server": ServerConfig,
    "budget": BudgetConfig,
    "warm": WarmConfig,
    "snapshot": SnapshotConfig,
    "llm": LlmConfig,
    "promote": PromoteConfig,
    "checkpoint": CheckpointConfig,
    "discovery": DiscoveryConfig,
    "watch": WatchConfig,
    "jobs": JobsConfig,
    "limits": LimitsConfig,
    "search": SearchConfig,
    "metrics": MetricsConfig,
}
_WORKSPACE_KEYS = {"path", "project", "budget", "warm", "readers", "writers"}


def load_config(path: Path | None, env: Mapping[str, str]) -> Config:
    """Parse `path` (or the embedded default when None). Raises ConfigError listing every problem."""
    if path is None:
        return parse_config({}, env, source=None)
    return parse_config(read_config_file(path), env, source=path)


def parse_config(raw: Mapping[str, Any], env: Mapping[str, str], source: Path | None = None) -> Config:
    errors: list[str] = []
    sections: dict[str, Any] = {}
    for key in raw:
        if key not in _SECTIONS and key != "workspaces":
            errors.append(f"{key}: unknown section (known: {', '.join([*_SECTIONS, 'workspaces'])})")
    defaults = _environment_defaults(env)
    for name, cls in _SECTIONS.items():
        merged = {**defaults.get(name, {}), **as_table(raw.get(name, {}), name, errors)}
        sections[name] = build(cls, merged, name, env, errors)
    workspaces = _parse_workspaces(raw, env, sections, errors)
    config = Config(**sections, workspaces=workspaces, source=source)
    validate(config, errors)
    if errors:
        raise ConfigError(list(dict.fromkeys(errors)))
    return config


def config_to_toml(config: Config) -> str:
    """The effective configuration as TOML (what `memd config show` prints)."""
    out: dict[str, Any] = {}
    for name in _SECTIONS:
        out[name] = to_plain(getattr(config, name))
    out["server"]["socket_mode"] = f"{config.server.socket_mode:04o}"
    out["workspaces"] = {}
    for name, ws in config.workspaces.items():
        entry: dict[str, Any] = {"path": str(ws.path)}
        for sub, base in (("budget", config.budget), ("warm", config.warm)):
            overrides = {
                f.name: to_plain(getattr(getattr(ws, sub), f.name))
                for f in fields(base)
                if getattr(getattr(ws, sub), f.name) != getattr(base, f.name)
            }
            if overrides:
                entry[sub] = overrides
        if ws.project is not None:
            entry["project"] = str(ws.project)
        if ws.readers:
            entry["readers"] = list(ws.readers)
        if ws.writers:
            entry["writers"] = list(ws.writers)
        out["workspaces"][name] = entry
    return tomli_w.dumps(out)


# --- defaults from the environment, workspaces -----------------------------------------------------------------


def _environment_defaults(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Defaults that depend on where memd runs (systemd's directories, XDG, or the home directory): memd.locate's,
    so that the clients look for the socket where the daemon binds it; and the machine's time zone."""
    return {
        "daemon": {"state_dir": default_state_dir(env)},
        "server": {"socket": default_socket(env)},
        "warm": {"timezone": local_timezone(env)},
    }


_ZONEINFO_DIRS = ("/zoneinfo/posix/", "/zoneinfo/right/", "/zoneinfo/")


def local_timezone(env: Mapping[str, str], localtime: Path = Path("/etc/localtime")) -> str:
    """The machine's time zone as an IANA name (warm.timezone's default, so that memd stamps the local time agents
    written after the article do): `$TZ` when it names a zone (`Europe/Paris`, `:Europe/Paris`, or a path into a
    zoneinfo directory; set but empty means UTC, as for the C library), else the zone `/etc/localtime` links to,
    else the name in `/etc/timezone` (Debian), else UTC. A POSIX rule string (`CET-1CEST`) is not a zone memd can
    name, so it falls through to the next source."""
    tz = env.get("TZ")
    if tz is not None:
        if not tz.strip(":"):
            return "UTC"
        named = _zone_name(tz.removeprefix(":"))
        if named is not None:
            return named
    try:
        named = _zone_name(os.readlink(localtime))
    except OSError:  # not a symlink (a copied file), or missing
        named = None
    if named is None:
        try:
            named = _zone_name(localtime.with_name("timezone").read_text(encoding="utf-8").strip())
        except (OSError, UnicodeDecodeError):
            named = None
    return named or "UTC"


def _zone_name(text: str) -> str | None:
    """`text` as an IANA zone name: itself, or what follows `zoneinfo/` in a path; None if no such zone."""
    for marker in _ZONEINFO_DIRS:
        if marker in text:
            text = text.rsplit(marker, 1)[1]
            break
    if not text or text.startswith("/") or ".." in text.split("/"):
        return None
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None
    return text


def _default_workspace_path(env: Mapping[str, str]) -> str:
    data = env.get("XDG_DATA_HOME") or "~/.local/share"
    return str(Path(data) / "memd" / "workspaces" / "default")


def _parse_workspaces(
    raw: Mapping[str, Any],
    env: Mapping[str, str],
    sections: dict[str, Any],
    errors: list[str],
) -> dict[str, WorkspaceConfig]:
    table = as_table(raw.get("workspaces", {}), "workspaces", errors)
    if not table and not sections["discovery"].roots:
        # A file that sets only, say, [warm] retention_days must not silently serve nothing: with no workspace
        # named and none to discover, memd serves the default one, as with no config file at all.
        table = {"default": {"path": _default_workspace_path(env)}}
    result: dict[str, WorkspaceConfig] = {}
    for name, body in table.items():
        where = f"workspaces.{name}"
        if not WORKSPACE_NAME.match(name):
            errors.append(f"{where}: invalid name (letters, digits, '.', '_', '-'; at most 64; no leading dot)")
            continue
        body = as_table(body, where, errors)
        for key in body:
            if key not in _WORKSPACE_KEYS:
                errors.append(f"{where}.{key}: unknown key (known: {', '.join(sorted(_WORKSPACE_KEYS))})")
        if "path" not in body:
            errors.append(f"{where}.path: missing (the workspace directory)")
            continue
        path = convert(Path, body["path"], f"{where}.path", env, errors)
        budget_raw = {**to_plain(sections["budget"]), **as_table(body.get("budget", {}), f"{where}.budget", errors)}
        warm_raw = {**to_plain(sections["warm"]), **as_table(body.get("warm", {}), f"{where}.warm", errors)}
        result[name] = WorkspaceConfig(
            name=name,
            path=path,
            budget=build(BudgetConfig, budget_raw, f"{where}.budget", env, errors),
            warm=build(WarmConfig, warm_raw, f"{where}.warm", env, errors),
            readers=convert(tuple[int, ...], body.get("readers", []), f"{where}.readers", env, errors),
            writers=convert(tuple[int, ...], body.get("writers", []), f"{where}.writers", env, errors),
            project=convert(Path, body["project"], f"{where}.project", env, errors) if "project" in body else None,
        )
    _check_projects(result, errors)
    return result


def _check_projects(workspaces: Mapping[str, WorkspaceConfig], errors: list[str]) -> None:
    """A project directory names one workspace: agents started in it must find exactly one."""
    owners: dict[str, str] = {}
    for name, ws in workspaces.items():
        if ws.project is None:
            continue
        if not ws.project.is_absolute():
            errors.append(f"workspaces.{name}.project: expected an absolute directory (or ~/...), not {ws.project}")
            continue
        owner = owners.setdefault(os.path.normpath(ws.project), name)
        if owner != name:
            errors.append(
                f"workspaces.{owner}.project and workspaces.{name}.project: both name {ws.project}; "
                "a project directory belongs to one workspace"
            )
