"""The `memd` command without a daemon: its help, its usage errors and exit codes (against README's table), and
how it and the Python client find the config file and the socket (one function, memd.locate.find_socket)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memd import cli
from memd.cli_format import human
from memd.client import find_socket
from memd.config import load_config
from memd.errors import ConfigError
from memd.locate import config_file

README = Path(__file__).resolve().parents[2] / "README.md"


def subparsers(parser: argparse.ArgumentParser, prefix: str = "memd") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from subparsers(sub, f"{prefix} {name}")


# --- help ----------------------------------------------------------------------------------------------------


def test_every_option_and_positional_of_every_command_has_a_help_text() -> None:
    missing = [
        f"{command}: {action.dest}"
        for command, parser in subparsers(cli.build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        and (not action.help or action.help == argparse.SUPPRESS)
    ]

    assert missing == []


def test_a_subcommands_help_explains_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["log", "--help"])

    shown = capsys.readouterr().out
    assert exited.value.code == 0
    assert "append an entry to today's warm log" in shown
    assert "workspace name" in shown and "the outcome (the entry's Result: line)" in shown


# --- exit codes, as README.md's table says ---------------------------------------------------------------------


def readme_exit_codes() -> dict[int, str]:
    table = README.read_text(encoding="utf-8").split("Exit codes:", 1)[1].split("\n\n", 2)[1]
    rows = (re.match(r"\| (\d) \| (.*) \|$", line) for line in table.splitlines())
    return {int(m.group(1)): m.group(2) for m in rows if m}


@pytest.mark.parametrize(
    ("argv", "readme_words"),
    [
        (["no-such-command"], "unknown command"),
        (["log", "--no-such-option", "alpha", "x"], "unknown command or option"),
        (["log", "alpha"], "missing argument"),
        (["show", "alpha", "HEAD~1"], "`REV:PATH`"),
        (["log", "alpha", "ran", "--detail", "no-equals-sign"], "`--detail KEY=VALUE`"),
        (["checkpoint", "alpha", "beta"], "`checkpoint` argument"),
    ],
)
def test_usage_errors_exit_2_as_the_readme_table_says(
    argv: list[str], readme_words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = cli.main(argv)  # no daemon is needed: each is refused before memd is asked
    except SystemExit as exited:  # argparse's own refusals
        code = int(exited.code or 0)

    codes = readme_exit_codes()
    assert code == cli.EXIT_USAGE == 2, capsys.readouterr()
    assert readme_words in codes[2]
    assert readme_words not in codes[1]


def test_the_readme_exit_code_table_lists_exactly_the_codes_the_cli_uses() -> None:
    assert sorted(readme_exit_codes()) == sorted(
        (cli.EXIT_OK, cli.EXIT_ERROR, cli.EXIT_USAGE, cli.EXIT_UNREACHABLE, cli.EXIT_CONFIG)
    )
    assert "`progress --done`" in readme_exit_codes()[1]


def test_progress_with_an_action_that_was_not_pending_does_not_print_ok() -> None:
    usage = {t: {"tokens": 1, "budget": 10, "percent": 10.0} for t in ("hot", "warm", "cold")}
    applied = {"current_step": "", "files_modified": [], "pending_actions": [], "usage": usage}

    assert human("progress", {**applied, "not_pending": []}).startswith("ok  (")
    shown = human("progress", {**applied, "not_pending": ["deploy"]})
    assert not shown.startswith("ok") and "not pending" in shown


# --- finding the config file and the socket ------------------------------------------------------------------


ENVIRONMENTS = [
    {},
    {"XDG_RUNTIME_DIR": "/run/user/1000"},
    {"XDG_STATE_HOME": "/state/ada"},
    {"STATE_DIRECTORY": "/var/lib/memd"},
    {"RUNTIME_DIRECTORY": "/run/memd", "STATE_DIRECTORY": "/var/lib/memd"},
    {"XDG_RUNTIME_DIR": "/run/user/1000", "R": "/srv"},
]
SOCKET_SETTINGS = [None, "/run/m.sock", "~/sockets/memd.sock", "$R/memd.sock", "${R}/x/../memd.sock", "rel.sock"]


@pytest.mark.parametrize("extra", ENVIRONMENTS)
@pytest.mark.parametrize("setting", SOCKET_SETTINGS)
def test_find_socket_finds_where_the_daemon_binds(extra: dict[str, str], setting: str | None, tmp_path: Path) -> None:
    env = {"HOME": "/home/ada", "R": "/r", **extra}
    path = tmp_path / "memd.toml"
    path.write_text("[warm]\nretention_days = 3\n" + (f'[server]\nsocket = "{setting}"\n' if setting else ""))

    assert find_socket(env, config=path) == load_config(path, env).server.socket
    assert find_socket(env) == load_config(None, env).server.socket  # no config file at all


def test_find_socket_looks_where_the_cli_looks_for_the_config(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"HOME": str(home)}
    default = home / ".local" / "state" / "memd" / "memd.sock"
    assert config_file(env) is None and find_socket(env) == default

    user = home / ".config" / "memd" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[server]\nsocket = "~/user.sock"\n')
    assert config_file(env) == user and find_socket(env) == home / "user.sock"

    xdg = tmp_path / "xdg" / "memd" / "config.toml"
    xdg.parent.mkdir(parents=True)
    xdg.write_text('[server]\nsocket = "/run/xdg.sock"\n')
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    assert config_file(env) == xdg and find_socket(env) == Path("/run/xdg.sock")

    named = tmp_path / "named.toml"
    named.write_text('[server]\nsocket = "/run/named.sock"\n')
    env["MEMD_CONFIG"] = str(named)
    assert find_socket(env) == Path("/run/named.sock")
    assert find_socket(env, config=user) == home / "user.sock"  # --config wins over $MEMD_CONFIG

    env["MEMD_SOCKET"] = "/run/env.sock"
    assert find_socket(env) == Path("/run/env.sock")
    assert find_socket(env, socket="/run/flag.sock") == Path("/run/flag.sock")  # --socket wins over everything


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[server\n", "not valid TOML"),
        ("server = 3\n", "server: expected a table"),
        ("[server]\nsocket = 3\n", "server.socket: expected a non-empty path string"),
        ('[server]\nsocket = "$NOPE/memd.sock"\n', "server.socket: $NOPE is not set"),
    ],
)
def test_find_socket_refuses_a_config_file_whose_socket_it_cannot_read(text: str, words: str, tmp_path: Path) -> None:
    path = tmp_path / "memd.toml"
    path.write_text(text)

    with pytest.raises(ConfigError) as error:
        find_socket({"HOME": "/home/ada"}, config=path)

    assert str(path) in error.value.message and words in error.value.message


def test_find_socket_names_a_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        find_socket({"HOME": "/home/ada", "MEMD_CONFIG": str(tmp_path / "nope.toml")})


@pytest.mark.parametrize("extra", ENVIRONMENTS)
def test_memd_sockname_prints_what_find_socket_finds(
    extra: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in extra.items():
        monkeypatch.setenv(name, value)
    config = tmp_path / "home" / ".config" / "memd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[server]\nsocket = "~/from-the-config.sock"\n')

    assert cli.main(["sockname"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'home' / 'from-the-config.sock'}\n"
    assert find_socket(os.environ) == tmp_path / "home" / "from-the-config.sock"


def test_the_client_library_does_not_load_the_config_parser() -> None:
    probe = "import sys, memd.client; print(sorted(m for m in sys.modules if m.startswith('memd.config')))"

    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)

    assert loaded.stdout.strip() == "[]"


# --- a config file without workspaces ------------------------------------------------------------------------


def test_config_check_names_the_default_workspace_of_a_file_without_workspaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "memd.toml"
    path.write_text("[warm]\nretention_days = 3\n")

    assert cli.main(["config", "check", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok, 1 workspace(s): default\n"
