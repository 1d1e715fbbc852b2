"""A newcomer's first hour, against a real daemon: README's Python snippet run exactly as printed, a config file
without workspaces, `progress --done` of something not pending, a hot file of the wrong shape, a manual
checkpoint with nothing to compress, and documentation that points only inside the repository."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import DEADLINE, RunningDaemon, base_config, running_for_module, wait_for

from memd.errors import CheckpointFailed, CorruptFile

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MakeDaemon = Callable[..., RunningDaemon]


@pytest.fixture(scope="module")
def memd() -> Iterator[RunningDaemon]:
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        root = Path(d) / "f"
        names = ("default", "progress", "shape", "ckpt")
        with running_for_module(root, base_config(root, {n: root / "ws" / n for n in names})) as daemon:
            yield daemon


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's shell: their home, none of the variables that point memd somewhere, plus `extra`."""
    memd_vars = ("MEMD_SOCKET", "MEMD_CONFIG", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "XDG_STATE_HOME")
    env = {k: v for k, v in os.environ.items() if k not in memd_vars}
    return {**env, "HOME": str(home), **extra}


def memd_cli(daemon: RunningDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memd", "--config", str(daemon.config_path), *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env=dict(os.environ),
    )


# --- README's "From Python" ------------------------------------------------------------------------------------


def readme_python_snippet() -> str:
    section = README.read_text(encoding="utf-8").split("\n## From Python\n", 1)[1]
    return section.split("```python\n", 1)[1].split("\n```", 1)[0] + "\n"


def test_the_readme_python_snippet_works_as_printed_wherever_the_config_is(memd: RunningDaemon, tmp_path: Path) -> None:
    snippet = readme_python_snippet()
    config_text = memd.config_path.read_text()
    home = tmp_path / "user"
    user_config = home / ".config" / "memd" / "config.toml"
    xdg = tmp_path / "xdg"
    for where in ("$MEMD_CONFIG", "~/.config/memd/config.toml", "$XDG_CONFIG_HOME/memd/config.toml"):
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(xdg, ignore_errors=True)
        home.mkdir()
        if where == "$MEMD_CONFIG":
            env = clean_env(home, MEMD_CONFIG=str(memd.config_path))
        elif where.startswith("~"):
            user_config.parent.mkdir(parents=True)
            user_config.write_text(config_text)
            env = clean_env(home)
        else:
            (xdg / "memd").mkdir(parents=True)
            (xdg / "memd" / "config.toml").write_text(config_text)
            env = clean_env(home, XDG_CONFIG_HOME=str(xdg))

        ran = subprocess.run(
            [sys.executable, "-c", snippet], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=DEADLINE
        )

        assert ran.returncode == 0, f"README's snippet with the config at {where}:\n{ran.stderr}"
        assert "# Current Session" in ran.stdout and "ran tests" in ran.stdout and "Result: 41 passed" in ran.stdout


# --- a config file that names no workspace ---------------------------------------------------------------------


def test_a_config_without_workspaces_serves_the_default_workspace(make_daemon: MakeDaemon, short_root: Path) -> None:
    config = base_config(short_root / "d", warm={"retention_days": 3})
    del config["workspaces"]
    data = short_root / "data"
    daemon = make_daemon(config=config, env={"XDG_DATA_HOME": str(data)})

    listed = daemon.call("workspace.list")["workspaces"]
    daemon.call("warm.log", workspace="default", action="first entry")

    assert [(w["name"], w["path"]) for w in listed] == [("default", str(data / "memd" / "workspaces" / "default"))]
    assert list((data / "memd" / "workspaces" / "default" / "warm").glob("*.md"))


# --- progress --done of an action that was not pending -----------------------------------------------------------


def test_progress_done_of_an_action_that_was_not_pending_says_so_and_exits_1(memd: RunningDaemon) -> None:
    memd.call("progress.update", workspace="progress", pending_add=["write the tests"])

    ran = memd_cli(memd, "progress", "progress", "--step", "testing", "--done", "deploy")

    assert ran.returncode == 1, ran
    assert not ran.stdout.startswith("ok")
    assert "not pending, so not marked done: 'deploy' (pending actions: 'write the tests')" in ran.stderr
    assert memd.call("hot.get", workspace="progress")["hot"]["current_step"] == "testing"  # the rest was applied
    done = memd_cli(memd, "progress", "progress", "--done", "write the tests")
    assert done.returncode == 0 and done.stdout.startswith("ok  ("), done


# --- a hot file of the wrong shape ------------------------------------------------------------------------------


@pytest.mark.parametrize(("content", "why"), [(b"[]\n", "not an array"), (b'{"task": 5}\n', "'task' must be a string")])
def test_a_hot_file_of_the_wrong_shape_is_refused_showing_the_shape_and_the_log_says_why(
    memd: RunningDaemon, content: bytes, why: str
) -> None:
    hot = memd.workspace("shape") / "hot" / "context.json"
    memd.call("hot.note", workspace="shape", text="before the edit")
    good = hot.read_bytes()
    logged = len(memd.log())
    hot.write_bytes(content)

    refused = wait_for(lambda: re.search(r"writes to the hot tier are refused.*", memd.log()[logged:]), "the log")
    with pytest.raises(CorruptFile) as error:
        memd.call("hot.note", workspace="shape", text="after the edit")

    for message in (error.value.message, refused.group(0)):
        assert why in message
        assert 'expected {"session_id": "text", "task": "text"' in message
        assert '"pending_actions": ["text", ...]' in message and '"decisions": [{...}, ...]' in message
    hot.write_bytes(good)
    wait_for(lambda: "the hot file is valid again" in memd.log()[logged:], "the log to say writes are accepted")
    memd.call("hot.note", workspace="shape", text="fixed")


# --- a manual checkpoint with nothing to compress ----------------------------------------------------------------


def test_a_manual_checkpoint_with_nothing_to_compress_does_not_start_the_backoff(memd: RunningDaemon) -> None:
    memd.call("session.start", workspace="ckpt", task="a short session")
    memd.call("hot.note", workspace="ckpt", text="one recent note: pinned, not compressed")

    for _ in range(2):
        with pytest.raises(CheckpointFailed) as error:
            memd.call("checkpoint.run", workspace="ckpt", force=True)
        assert "old enough to compress" in error.value.message
        assert error.value.data == {"reason": "nothing_to_compress"}

    health = memd.call("status")["workspaces"]["ckpt"]["checkpoint"]
    assert health["consecutive_failures"] == 0 and health["backoff_seconds_left"] == 0, health
    assert health["last_error"] is None


# --- documentation --------------------------------------------------------------------------------------------


def test_the_docs_point_only_inside_the_repository() -> None:
    pages = [README, *sorted((REPO / "docs").glob("*.md"))]
    outside = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:|#", target):
                continue
            resolved = (page.parent / target.split("#")[0]).resolve()
            if not resolved.is_relative_to(REPO) or not resolved.exists():
                outside.append(f"{page.name}: link {target}")
        for name in ("LIMITS.md", "DESIGN.md", "STYLE.md", "/work/", "../shared"):
            if name in text:
                outside.append(f"{page.name}: mentions {name}")

    assert outside == []


def test_the_readme_tour_says_snapshots_settle_before_history_shows_a_write() -> None:
    tour = README.read_text(encoding="utf-8").split("## A quick tour", 1)[1].split("\n## Workspaces", 1)[0]

    assert "snapshot.settle_seconds" in tour


def test_the_readme_says_what_a_config_without_workspaces_serves() -> None:
    configuration = README.read_text(encoding="utf-8").split("## Configuration", 1)[1].split("\n## ", 1)[0]

    assert "names no workspace" in configuration and "`default` workspace" in configuration


def test_the_readme_snippet_needs_only_the_client_library() -> None:
    # What people copy must not need the daemon's configuration code to find the socket.
    imports = re.findall(r"^(?:from|import) (\S+)", readme_python_snippet(), re.M)

    assert set(imports) <= {"os", "memd.client"}, imports
