"""Configuration: one TOML file parsed by one function into a frozen dataclass tree.

Only the composition root (daemon, cli) calls `load_config`; everything else receives the pieces it needs.
Unknown keys are errors naming the full key path; every problem is collected, not just the first. Paths expand
`~` and `$VARS` from the environment passed in (never read implicitly). This module holds the loading: the
sections and workspace keys, the defaults that depend on the environment, `load_config` and `config show`'s TOML.
The dataclasses and their defaults live in memd.config_types and are re-exported from here; the type-hint driven
conversion of a table into a dataclass, with its error messages, lives in memd.config_parse; range checks in
memd.config_checks.
Imports memd.config_checks, memd.config_parse, memd.config_types, memd.locate and memd.errors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tomli_w

from memd.config_checks import SUN_PATH_MAX as SUN_PATH_MAX  # re-exported: part of the config's contract
from memd.config_checks import validate
from memd.config_parse import as_table, build, convert, to_plain

# The types live in memd.config_types (below memd.config_parse and memd.config_checks, which build and check them)
# and are re-exported here: memd.config is the name every other module imports them by.
from memd.config_types import BudgetConfig as BudgetConfig
from memd.config_types import CheckpointConfig as CheckpointConfig
from memd.config_types import Config as Config
from memd.config_types import DaemonConfig as DaemonConfig
from memd.config_types import DiscoveryConfig as DiscoveryConfig
from memd.config_types import EventLoop as EventLoop
from memd.config_types import JobsConfig as JobsConfig
from memd.config_types import LimitsConfig as LimitsConfig
from memd.config_types import LlmConfig as LlmConfig
from memd.config_types import LogLevel as LogLevel
from memd.config_types import MetricsConfig as MetricsConfig
from memd.config_types import PromoteConfig as PromoteConfig
from memd.config_types import SearchConfig as SearchConfig
from memd.config_types import ServerConfig as ServerConfig
from memd.config_types import SnapshotConfig as SnapshotConfig
from memd.config_types import WarmConfig as WarmConfig
from memd.config_types import WatchConfig as WatchConfig
from memd.config_types import WorkspaceConfig as WorkspaceConfig
from memd.errors import ConfigError
from memd.locate import default_socket, default_state_dir, read_config_file

WORKSPACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

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
