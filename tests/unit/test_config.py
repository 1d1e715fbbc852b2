"""Specification of the configuration (memd.config): one TOML file, one parse, every problem reported at once."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from memd.config import (
    SUN_PATH_MAX,
    BudgetConfig,
    Config,
    WarmConfig,
    config_to_toml,
    load_config,
    local_timezone,
    parse_config,
)
from memd.errors import ConfigError

HOME = "/home/ada"
ENV = {"HOME": HOME}


def config_errors(raw: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as error:
        parse_config(raw, ENV if env is None else env)
    return error.value.errors


def has_error(errors: list[str], key_path: str, *words: str) -> bool:
    """An error that starts with the full key path and mentions every word."""
    return any(e.startswith(f"{key_path}:") and all(w in e for w in words) for e in errors)


# --- the embedded default ------------------------------------------------------------------------------------


def test_the_embedded_default_has_one_workspace_named_default_under_the_home_data_directory() -> None:
    config = load_config(None, ENV)

    assert list(config.workspaces) == ["default"]
    assert config.workspaces["default"].path == Path(HOME, ".local/share/memd/workspaces/default")
    assert config.source is None


def test_the_embedded_default_workspace_follows_xdg_data_home() -> None:
    config = load_config(None, {**ENV, "XDG_DATA_HOME": "/data/ada"})

    assert config.workspaces["default"].path == Path("/data/ada/memd/workspaces/default")


def test_without_a_runtime_directory_the_socket_lives_in_the_state_directory() -> None:
    config = load_config(None, ENV)

    assert config.daemon.state_dir == Path(HOME, ".local/state/memd")
    assert config.server.socket == Path(HOME, ".local/state/memd/memd.sock")


def test_xdg_state_home_moves_the_state_directory() -> None:
    config = load_config(None, {**ENV, "XDG_STATE_HOME": "/state/ada"})

    assert config.daemon.state_dir == Path("/state/ada/memd")
    assert config.server.socket == Path("/state/ada/memd/memd.sock")


def test_the_socket_lives_under_xdg_runtime_dir_when_it_is_set() -> None:
    config = load_config(None, {**ENV, "XDG_RUNTIME_DIR": "/run/user/1000"})

    assert config.server.socket == Path("/run/user/1000/memd/memd.sock")


def test_systemd_state_and_runtime_directories_are_honoured() -> None:
    env = {
        **ENV,
        "XDG_RUNTIME_DIR": "/run/user/1000",
        "XDG_STATE_HOME": "/state/ada",
        "STATE_DIRECTORY": "/var/lib/memd",
        "RUNTIME_DIRECTORY": "/run/memd",
    }

    config = load_config(None, env)

    assert config.daemon.state_dir == Path("/var/lib/memd")
    assert config.server.socket == Path("/run/memd/memd.sock")


# --- warm.timezone: the machine's zone by default ------------------------------------------------------------


@pytest.mark.parametrize(
    ("tz", "zone"),
    [
        ("Europe/Paris", "Europe/Paris"),
        (":Asia/Tokyo", "Asia/Tokyo"),  # the C library's spelling
        ("/usr/share/zoneinfo/America/New_York", "America/New_York"),
        (":/usr/share/zoneinfo/posix/Australia/Sydney", "Australia/Sydney"),
        ("", "UTC"),  # set but empty: UTC, as for the C library
    ],
)
def test_warm_timezone_defaults_to_the_zone_tz_names(tz: str, zone: str) -> None:
    config = parse_config({}, {**ENV, "TZ": tz})

    assert config.warm.timezone == zone
    assert config.workspaces["default"].warm.timezone == zone


def test_without_tz_the_zone_is_the_one_etc_localtime_links_to(tmp_path: Path) -> None:
    localtime = tmp_path / "localtime"
    localtime.symlink_to("/usr/share/zoneinfo/Europe/Berlin")

    assert local_timezone(ENV, localtime) == "Europe/Berlin"
    assert local_timezone({**ENV, "TZ": "CET-1CEST"}, localtime) == "Europe/Berlin"  # a POSIX rule names no zone
    assert local_timezone({**ENV, "TZ": "Not/A_Zone"}, localtime) == "Europe/Berlin"


def test_a_copied_localtime_falls_back_to_etc_timezone_then_to_utc(tmp_path: Path) -> None:
    localtime = tmp_path / "localtime"
    localtime.write_bytes(b"TZif2 a copy, not a link")
    assert local_timezone(ENV, localtime) == "UTC"

    (tmp_path / "timezone").write_text("America/Sao_Paulo\n", encoding="utf-8")
    assert local_timezone(ENV, localtime) == "America/Sao_Paulo"


def test_an_explicit_timezone_wins_over_the_machines() -> None:
    config = parse_config({"warm": {"timezone": "Asia/Kolkata"}}, {**ENV, "TZ": "Europe/Paris"})

    assert config.workspaces["default"].warm.timezone == "Asia/Kolkata"


def test_an_explicit_setting_wins_over_the_environment_default() -> None:
    raw = {"daemon": {"state_dir": "/srv/memd"}, "server": {"socket": "/run/m.sock"}, "workspaces": {}}

    config = parse_config(raw, {**ENV, "STATE_DIRECTORY": "/var/lib/memd", "RUNTIME_DIRECTORY": "/run/memd"})

    assert config.daemon.state_dir == Path("/srv/memd")
    assert config.server.socket == Path("/run/m.sock")


def test_a_config_file_without_workspaces_or_discovery_roots_serves_the_default_workspace() -> None:
    config = parse_config({"warm": {"retention_days": 3}}, {**ENV, "XDG_DATA_HOME": "/data/ada"})

    assert list(config.workspaces) == ["default"]
    assert config.workspaces["default"].path == Path("/data/ada/memd/workspaces/default")
    assert config.workspaces["default"].warm.retention_days == config.warm.retention_days == 3


def test_a_config_file_with_discovery_roots_and_no_workspaces_serves_only_what_is_discovered() -> None:
    assert dict(parse_config({"discovery": {"roots": ["/agents"]}}, ENV).workspaces) == {}
    assert list(parse_config({"workspaces": {"a": {"path": "/w/a"}}}, ENV).workspaces) == ["a"]


# --- loading a file ------------------------------------------------------------------------------------------


def test_load_config_reads_a_toml_file_and_remembers_where_it_came_from(tmp_path: Path) -> None:
    path = tmp_path / "memd.toml"
    path.write_text('[workspaces.alpha]\npath = "~/agent-memory"\n', encoding="utf-8")

    config = load_config(path, ENV)

    assert config.source == path
    assert config.workspaces["alpha"].path == Path(HOME, "agent-memory")


def test_a_missing_config_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "nope.toml", ENV)

    assert str(tmp_path / "nope.toml") in error.value.errors[0]


def test_invalid_toml_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "memd.toml"
    path.write_text("[warm\nretention_days = 3\n", encoding="utf-8")

    with pytest.raises(ConfigError) as error:
        load_config(path, ENV)

    assert error.value.errors[0].startswith(f"{path}: not valid TOML")


# --- every error at once, with its full key path -------------------------------------------------------------

SHAPE_ERRORS: dict[str, Any] = {
    "bogus": {"x": 1},
    "warm": {"retention_dayz": 3, "mode": "shred"},
    "budget": {"hot": "lots"},
    "daemon": {"state_dir": "$MEMD_NOT_SET/state", "log_level": "loud"},
    "server": {"max_connections": 1.5},
    "snapshot": {"enabled": "yes"},
    "workspaces": {"alpha": {"path": "/w/alpha", "colour": "red", "warm": {"mode": "burn"}}},
}


def test_every_shape_error_is_listed_at_once_with_its_full_key_path() -> None:
    errors = config_errors(SHAPE_ERRORS)

    assert has_error(errors, "bogus", "unknown section")
    assert has_error(errors, "warm.retention_dayz", "unknown key", "retention_days")
    assert has_error(errors, "warm.mode", "'shred'", "'delete'", "'archive'")
    assert has_error(errors, "budget.hot", "integer")
    assert has_error(errors, "daemon.state_dir", "$MEMD_NOT_SET", "not set")
    assert has_error(errors, "daemon.log_level", "'loud'")
    assert has_error(errors, "server.max_connections", "integer")
    assert has_error(errors, "snapshot.enabled", "true or false")
    assert has_error(errors, "workspaces.alpha.colour", "unknown key")
    assert has_error(errors, "workspaces.alpha.warm.mode", "'burn'")
    # The only other error: the workspace inherits the mistyped global budget.hot.
    assert len(errors) == 11 and has_error(errors, "workspaces.alpha.budget.hot", "integer"), errors


VALUE_ERRORS: dict[str, Any] = {
    "warm": {"timezone": "Mars/Olympus_Mons"},
    "budget": {"checkpoint_threshold": 0.6, "checkpoint_target": 0.6},
    "server": {"socket": "/tmp/" + "s" * 120 + ".sock"},
    "workspaces": {"alpha": {"path": "/w/alpha", "budget": {"checkpoint_target": 0.95}}},
}


def test_every_value_error_is_listed_at_once_with_its_full_key_path() -> None:
    errors = config_errors(VALUE_ERRORS)

    assert has_error(errors, "warm.timezone", "Mars/Olympus_Mons")
    assert has_error(errors, "budget.checkpoint_target", "below checkpoint_threshold")
    assert has_error(errors, "server.socket", str(SUN_PATH_MAX))
    assert has_error(errors, "workspaces.alpha.budget.checkpoint_target", "below checkpoint_threshold")
    assert has_error(errors, "workspaces.alpha.warm.timezone", "Mars/Olympus_Mons")  # inherited from [warm]


def test_shape_and_value_errors_are_listed_together() -> None:
    raw = {section: {**SHAPE_ERRORS.get(section, {}), **VALUE_ERRORS.get(section, {})} for section in SHAPE_ERRORS}
    raw["workspaces"] = SHAPE_ERRORS["workspaces"]

    errors = config_errors(raw)

    assert has_error(errors, "warm.retention_dayz", "unknown key")
    assert has_error(errors, "warm.timezone", "Mars/Olympus_Mons")
    assert has_error(errors, "server.socket", str(SUN_PATH_MAX))


def test_a_socket_path_of_exactly_107_bytes_is_accepted() -> None:
    socket = "/tmp/" + "s" * (SUN_PATH_MAX - len("/tmp/"))

    config = parse_config({"server": {"socket": socket}}, ENV)

    assert len(str(config.server.socket).encode()) == SUN_PATH_MAX


def test_a_socket_path_of_108_bytes_is_refused() -> None:
    errors = config_errors({"server": {"socket": "/tmp/" + "s" * (SUN_PATH_MAX + 1 - len("/tmp/"))}})

    assert has_error(errors, "server.socket", "108 bytes")


def test_a_non_table_workspace_override_is_an_error() -> None:
    errors = config_errors({"workspaces": {"alpha": {"path": "/w/alpha", "budget": 5}}})

    assert any(e.startswith("workspaces.alpha") and "table" in e for e in errors), errors


def test_a_non_table_workspace_override_names_its_full_key_path() -> None:
    errors = config_errors({"workspaces": {"alpha": {"path": "/w/alpha", "budget": 5, "warm": "x"}}})

    assert has_error(errors, "workspaces.alpha.budget", "table")
    assert has_error(errors, "workspaces.alpha.warm", "table")


def test_a_workspace_without_a_path_and_a_bad_name_are_errors() -> None:
    errors = config_errors({"workspaces": {"alpha": {}, ".hidden": {"path": "/w/h"}}})

    assert has_error(errors, "workspaces.alpha.path", "missing")
    assert has_error(errors, "workspaces..hidden", "invalid name")


# --- paths ---------------------------------------------------------------------------------------------------


def test_paths_expand_a_leading_tilde_from_the_given_home() -> None:
    config = parse_config({"workspaces": {"a": {"path": "~/mem"}, "b": {"path": "~"}}}, ENV)

    assert config.workspaces["a"].path == Path(HOME, "mem")
    assert config.workspaces["b"].path == Path(HOME)


def test_a_tilde_for_another_user_is_left_alone() -> None:
    config = parse_config({"workspaces": {"a": {"path": "~bob/mem"}}}, ENV)

    assert config.workspaces["a"].path == Path("~bob/mem")


def test_paths_expand_dollar_variables_in_both_spellings() -> None:
    env = {**ENV, "PROJECTS": "/srv/projects", "AGENT": "coder"}

    config = parse_config({"workspaces": {"a": {"path": "$PROJECTS/${AGENT}_memory/$AGENT"}}}, env)

    assert config.workspaces["a"].path == Path("/srv/projects/coder_memory/coder")


def test_expansion_reads_only_the_environment_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMD_ONLY_IN_OS_ENVIRON", "/leak")

    errors = config_errors({"workspaces": {"a": {"path": "$MEMD_ONLY_IN_OS_ENVIRON/x"}}})

    assert has_error(errors, "workspaces.a.path", "$MEMD_ONLY_IN_OS_ENVIRON")


def test_discovery_roots_expand_each_path() -> None:
    config = parse_config({"discovery": {"roots": ["~/a", "$R/b"]}}, {**ENV, "R": "/r"})

    assert config.discovery.roots == (Path(HOME, "a"), Path("/r/b"))


def test_an_unset_variable_in_a_list_item_names_its_index() -> None:
    errors = config_errors({"discovery": {"roots": ["/ok", "${MEMD_NOT_SET}/x"]}})

    assert has_error(errors, "discovery.roots[1]", "$MEMD_NOT_SET")


# --- per-workspace overrides ---------------------------------------------------------------------------------


def test_workspace_budget_and_warm_overrides_merge_over_the_global_sections() -> None:
    raw = {
        "budget": {"hot": 4000, "warm": 8000},
        "warm": {"retention_days": 14, "timezone": "Europe/Paris"},
        "workspaces": {
            "alpha": {"path": "/w/alpha", "budget": {"hot": 2000}, "warm": {"recent_days": 1}},
            "beta": {"path": "/w/beta"},
        },
    }

    config = parse_config(raw, ENV)

    alpha, beta = config.workspaces["alpha"], config.workspaces["beta"]
    assert alpha.budget == BudgetConfig(hot=2000, warm=8000)
    assert alpha.warm == WarmConfig(retention_days=14, recent_days=1, timezone="Europe/Paris")
    assert beta.budget == config.budget == BudgetConfig(hot=4000, warm=8000)
    assert beta.warm == config.warm


def test_workspace_access_lists_are_tuples_of_uids() -> None:
    config = parse_config({"workspaces": {"a": {"path": "/w/a", "readers": [1001], "writers": [1002, 1003]}}}, ENV)

    assert config.workspaces["a"].readers == (1001,)
    assert config.workspaces["a"].writers == (1002, 1003)


def test_discovered_workspaces_take_the_global_budget_and_warm_policy() -> None:
    config = parse_config({"budget": {"cold": 1234}, "warm": {"recent_days": 2}}, ENV)

    ws = config.workspace_for_discovered("found", Path("/roots/found"))

    assert (ws.name, ws.path, ws.budget.cold, ws.warm.recent_days) == ("found", Path("/roots/found"), 1234, 2)


# --- socket mode ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("written", "mode"), [("0660", 0o660), ("600", 0o600), ("0o640", 0o640), (0o600, 0o600)])
def test_socket_mode_accepts_octal_strings_and_integers(written: Any, mode: int) -> None:
    config = parse_config({"server": {"socket_mode": written}}, ENV)

    assert config.server.socket_mode == mode


@pytest.mark.parametrize("written", ["rw-rw----", "0999", 0o1777, -1])
def test_socket_mode_refuses_what_is_not_a_permission_mode(written: Any) -> None:
    errors = config_errors({"server": {"socket_mode": written}})

    assert has_error(errors, "server.socket_mode")


# --- config_to_toml ------------------------------------------------------------------------------------------


def round_trip(config: Config, env: dict[str, str]) -> Config:
    return parse_config(tomllib.loads(config_to_toml(config)), env, source=config.source)


def test_the_embedded_default_round_trips_through_config_to_toml() -> None:
    env = {**ENV, "XDG_RUNTIME_DIR": "/run/user/1000"}
    config = load_config(None, env)

    assert round_trip(config, env) == config


def test_a_full_config_round_trips_through_config_to_toml() -> None:
    env = {**ENV, "ROOT": "/srv"}
    raw = {
        "daemon": {"state_dir": "$ROOT/memd-state", "log_level": "debug"},
        "server": {"socket": "/run/memd/m.sock", "socket_mode": "0660", "allowed_uids": [1000, 1001]},
        "budget": {"hot": 3000, "checkpoint_threshold": 0.9},
        "warm": {"timezone": "America/New_York", "mode": "archive"},
        "snapshot": {"paths": ["hot", "cold"], "remote": "git@example.org:mem.git"},
        "llm": {"backend": "openai", "base_url": "http://127.0.0.1:8080/v1", "max_retries": 0},
        "discovery": {"roots": ["~/agents"]},
        "workspaces": {
            "alpha": {"path": "${ROOT}/alpha", "budget": {"hot": 500}, "warm": {"retention_days": 30}},
            "beta": {"path": "/w/beta", "readers": [1002], "writers": [1003], "budget": {"hot": 3000}},
        },
    }
    config = parse_config(raw, env)

    again = round_trip(config, env)

    assert again == config
    assert again.server.socket_mode == 0o660
    assert again.workspaces["alpha"].budget.hot == 500
    assert again.workspaces["alpha"].budget.checkpoint_threshold == 0.9


def test_config_to_toml_writes_only_workspace_overrides_that_differ_from_the_globals() -> None:
    config = parse_config({"workspaces": {"a": {"path": "/w/a", "budget": {"hot": 777, "warm": 20_000}}}}, ENV)

    workspace = tomllib.loads(config_to_toml(config))["workspaces"]["a"]

    assert workspace == {"path": "/w/a", "budget": {"hot": 777}}


def test_socket_mode_printed_by_config_to_toml_reads_back_as_the_same_mode() -> None:
    config = parse_config({"server": {"socket_mode": "0660"}}, ENV)

    printed = tomllib.loads(config_to_toml(config))["server"]["socket_mode"]

    assert parse_config({"server": {"socket_mode": printed}}, ENV).server.socket_mode == 0o660


# --- [limits] ------------------------------------------------------------------------------------------------


def test_tier_file_caps_default_to_4_16_and_64_mib_and_can_be_set() -> None:
    assert parse_config({}, ENV).limits == parse_config({"limits": {}}, ENV).limits
    limits = parse_config({}, ENV).limits
    assert (limits.hot_max_bytes, limits.cold_max_bytes, limits.warm_day_max_bytes) == (4 << 20, 16 << 20, 64 << 20)

    set_ = parse_config({"limits": {"hot_max_bytes": 1 << 20, "warm_day_max_bytes": 1 << 30}}, ENV).limits

    assert (set_.hot_max_bytes, set_.warm_day_max_bytes) == (1 << 20, 1 << 30)


def test_tier_file_caps_outside_1_mib_to_1_gib_or_unknown_are_refused_by_full_key() -> None:
    errors = config_errors(
        {"limits": {"hot_max_bytes": 1000, "cold_max_bytes": (1 << 30) + 1, "warm_day_max_bytes": "big", "x": 1}}
    )

    assert has_error(errors, "limits.hot_max_bytes", "between", "1 MiB", "1 GiB")
    assert has_error(errors, "limits.cold_max_bytes", "between")
    assert has_error(errors, "limits.warm_day_max_bytes", "integer")
    assert has_error(errors, "limits.x", "unknown key")


def test_the_example_file_states_the_defaults_of_every_limit() -> None:
    example = tomllib.loads((Path(__file__).parents[2] / "config.example.toml").read_text(encoding="utf-8"))

    assert parse_config({"limits": example["limits"]}, ENV).limits == parse_config({}, ENV).limits
    assert set(example["limits"]) == {"hot_max_bytes", "cold_max_bytes", "warm_day_max_bytes"}


# --- a workspace's project directory (memd.frontends.project) ---------------------------------------------------


def test_a_workspaces_project_directory_is_parsed_expanded_and_shown() -> None:
    raw = {"workspaces": {"alpha": {"path": "/srv/alpha", "project": "~/src/alpha"}, "beta": {"path": "/srv/beta"}}}

    config = parse_config(raw, ENV)

    assert config.workspaces["alpha"].project == Path(HOME) / "src" / "alpha"
    assert config.workspaces["beta"].project is None
    assert tomllib.loads(config_to_toml(config))["workspaces"]["alpha"]["project"] == f"{HOME}/src/alpha"


@pytest.mark.parametrize(
    ("projects", "words"),
    [
        ({"a": "/p", "b": "/p/"}, "workspaces.a.project and workspaces.b.project: both name /p"),
        ({"a": "relative/p"}, "workspaces.a.project: expected an absolute directory"),
    ],
)
def test_a_project_directory_belongs_to_one_workspace_and_is_absolute(projects: dict[str, str], words: str) -> None:
    raw = {"workspaces": {n: {"path": f"/srv/{n}", "project": p} for n, p in projects.items()}}

    with pytest.raises(ConfigError) as refused:
        parse_config(raw, ENV)

    assert any(words in e for e in refused.value.errors)


# --- promotion ---------------------------------------------------------------------------------------------------


def test_promotion_defaults_to_three_a_day_by_the_offline_rules() -> None:
    config = load_config(None, ENV)

    assert config.warm.promote_max_per_day == 3
    assert config.promote.backend == "extractive"


def test_promotion_settings_are_checked_with_their_full_key_paths() -> None:
    errors = config_errors(
        {
            "warm": {"promote_max_per_day": 101},
            "promote": {"backend": "gpt", "max_prompt_tokens": 0},
            "workspaces": {"w": {"path": "/tmp/w", "warm": {"promote_max_per_day": -1}}},
        }
    )

    assert has_error(errors, "warm.promote_max_per_day", "between 0")
    assert has_error(errors, "workspaces.w.warm.promote_max_per_day", "between 0")
    assert any(e.startswith("promote.backend") for e in errors)


def test_zero_turns_promotion_off_and_is_valid() -> None:
    config = parse_config({"warm": {"promote_max_per_day": 0}}, ENV)

    assert config.warm.promote_max_per_day == 0
