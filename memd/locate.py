"""Where memd's config file and socket are: one lookup for the daemon's config, the `memd` command and clients.

`find_socket` is what the CLI and the Python clients call, so a program connects exactly where `memd` does. It
reads only `[server] socket` from the config file, so a client library neither loads nor validates the daemon's
whole configuration to connect. memd.config takes its environment defaults and its path expansion from here,
so the daemon binds where the clients look. Imports memd.errors.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd.errors import ConfigError

SOCKET_NAME = "memd.sock"


def config_file(env: Mapping[str, str], explicit: str | Path | None = None) -> Path | None:
    """`--config`, else $MEMD_CONFIG, else $XDG_CONFIG_HOME/memd/config.toml (~/.config by default) when it exists;
    None means the embedded default."""
    if explicit:
        return Path(explicit)
    if env.get("MEMD_CONFIG"):
        return Path(env["MEMD_CONFIG"])
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else _home(env) / ".config"
    candidate = base / "memd" / "config.toml"
    return candidate if candidate.exists() else None


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's TOML tables. Raises ConfigError saying why it cannot be read."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file (copy config.example.toml there, or omit --config)"]) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{path}: not valid TOML: {exc}"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None


def default_state_dir(env: Mapping[str, str]) -> str:
    """`daemon.state_dir` when the config does not set it: systemd's StateDirectory, XDG, or the home directory."""
    if env.get("STATE_DIRECTORY"):
        return env["STATE_DIRECTORY"]
    return str(Path(env["XDG_STATE_HOME"]) / "memd") if env.get("XDG_STATE_HOME") else "~/.local/state/memd"


def default_socket(env: Mapping[str, str]) -> str:
    """`server.socket` when the config does not set it (before `~` and `$VARS` are expanded)."""
    runtime = env.get("RUNTIME_DIRECTORY") or (
        str(Path(env["XDG_RUNTIME_DIR"]) / "memd") if env.get("XDG_RUNTIME_DIR") else default_state_dir(env)
    )
    return str(Path(runtime) / SOCKET_NAME)


def expand_path(value: str, env: Mapping[str, str], unset: list[str] | None = None) -> Path:
    """`~`, `$VAR` and `${VAR}` from `env` (never the process environment). A variable not in `env` is left as
    written and its name appended to `unset`."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in env:
            if unset is not None:
                unset.append(name)
            return match.group(0)
        return env[name]

    expanded = re.sub(r"\$\{(\w+)\}|\$(\w+)", substitute, value)
    if expanded == "~" or expanded.startswith("~/"):
        expanded = str(_home(env)) + expanded[1:]
    return Path(expanded)


def find_socket(env: Mapping[str, str], socket: str | Path | None = None, config: str | Path | None = None) -> Path:
    """The socket the `memd` command uses: `socket` (its --socket), then $MEMD_SOCKET, then `server.socket` of the
    config file (`config`, its --config, else as `config_file` finds it), then the default. Raises ConfigError
    when the config file cannot be read or its `server.socket` is not a path."""
    if socket:
        return Path(socket)
    if env.get("MEMD_SOCKET"):
        return Path(env["MEMD_SOCKET"])
    path = config_file(env, config)
    setting = default_socket(env)
    if path is not None:
        server = read_config_file(path).get("server", {})
        if not isinstance(server, dict):
            raise ConfigError([f"{path}: server: expected a table"])
        value = server.get("socket", setting)
        if not isinstance(value, str) or not value:
            raise ConfigError([f"{path}: server.socket: expected a non-empty path string"])
        setting = value
    unset: list[str] = []
    found = expand_path(setting, env, unset)
    if unset:
        raise ConfigError([f"{path}: server.socket: ${name} is not set in the environment" for name in unset])
    return found


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))
