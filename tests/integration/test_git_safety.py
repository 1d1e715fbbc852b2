"""Nothing leaves a workspace that git does not hold, and snapshots never reach outside the workspace.

What memd promises (DESIGN.md contracts 5 and 8, issue 12): snapshots commit the tier files whatever the user's
global excludes or the workspace's `.gitignore` say, and never memd's own lock or temporary files; retention
deletes or archives a day only when the blob committed at HEAD is the file byte for byte, and keeps and reports
any other; appending to a monthly archive never loses an intact member, a damaged archive is kept as it is and
the new day goes to a new file; reading an archive is capped, so a gzip bomb is a clear error, not a frozen
daemon; a deleted `.git` is re-created without a restart; a workspace directory swapped for a symlink is never
`git init`-ed or committed through.

Real daemons (tests/harness.py), the real git CLI, real files; bounded polling, no timing assertions except the
bomb's (which must answer well within the harness deadline).
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import RunningDaemon, base_config, person_env, wait_for

from memd.errors import MemdError

MakeDaemon = Callable[..., RunningDaemon]
GIT = shutil.which("git") or "git"
FAST = {"settle_seconds": 0.2, "max_wait_seconds": 1.0}
SLOW = {"settle_seconds": 30.0, "max_wait_seconds": 60.0, "interval_seconds": 600.0}
EXPIRED_DAY = "2020-01-01.md"
EXPIRED_TEXT = "# Activity Log 2020-01-01\n\n### 09:00:00 - Old work\n```\nfile: a.py\n```\nResult: done\n"


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """git as a person runs it in a directory (their identity, their HOME, nothing inherited from memd)."""
    out = subprocess.run([GIT, *args], cwd=cwd, env=person_env(), capture_output=True, text=True, check=False)
    if check:
        assert out.returncode == 0, f"git {' '.join(args)} in {cwd} failed: {out.stderr}"
    return out.stdout


def snap_status(daemon: RunningDaemon, name: str) -> dict[str, Any]:
    return dict(daemon.call("status")["workspaces"][name]["snapshot"])


def held_in_history(ws: Path, path: str, data: bytes, *git_args: str) -> bool:
    """Does some commit hold `path` with exactly `data`?"""
    revs = git(ws, *git_args, "log", "--all", "--format=%H", "--", path).split()
    for rev in revs:
        out = subprocess.run(
            [GIT, *git_args, "show", f"{rev}:{path}"], cwd=ws, env=person_env(), capture_output=True, check=False
        )
        if out.returncode == 0 and out.stdout == data:
            return True
    return False


def seed_day(ws: Path, name: str, data: bytes) -> None:
    (ws / "warm").mkdir(parents=True, exist_ok=True)
    (ws / "warm" / name).write_bytes(data)


def day_text(name: str, action: str) -> bytes:
    day = name.removesuffix(".md")
    return f"# Activity Log {day}\n\n### 09:00:00 - {action}\n```\nfile: a.py\n```\nResult: done\n".encode()


# --- ignore rules never keep a tier file out of git ---------------------------------------------------------------


def test_global_excludes_and_a_workspace_gitignore_never_keep_tier_files_out_of_git(
    make_daemon: MakeDaemon, short_root: Path, temporary_home: Path
) -> None:
    # The user's global excludes (git's default location under the test's HOME) hide every markdown file.
    ignore = temporary_home / ".config" / "git" / "ignore"
    ignore.parent.mkdir(parents=True)
    ignore.write_text("*.md\n")
    root = short_root / "ign"
    workspaces = {"global": root / "ws" / "global", "local": root / "ws" / "local"}
    for ws in workspaces.values():
        seed_day(ws, EXPIRED_DAY, EXPIRED_TEXT.encode())
    (workspaces["local"] / ".gitignore").write_text("warm/\ncold/\n")
    d = make_daemon("ign", config=base_config(root, workspaces=workspaces, snapshot=FAST))

    for name, ws in workspaces.items():
        d.call("hot.note", workspace=name, text=f"note of {name}")
        d.call("cold.learn", workspace=name, category="Notes", learning=f"learning of {name}")
        result = d.call("retention.sweep", workspace=name, dry_run=False, confirm=True)["results"][0]

        assert result["removed"] == [EXPIRED_DAY], result
        assert not (ws / "warm" / EXPIRED_DAY).exists()
        assert held_in_history(ws, f"warm/{EXPIRED_DAY}", EXPIRED_TEXT.encode()), f"{name}: the day left no history"
        tracked = git(ws, "ls-tree", "-r", "--name-only", "HEAD").split()
        assert {"hot/context.json", "hot/memd.json", "cold/MEMORY.md"} <= set(tracked), tracked
        assert f"note of {name}" in git(ws, "show", "HEAD:hot/memd.json")  # memd's notes: its own hot file


def test_a_day_git_does_not_hold_byte_for_byte_is_kept_and_reported(make_daemon: MakeDaemon, short_root: Path) -> None:
    # An adopted repository whose .gitattributes normalises line endings: git stores the CRLF day with LF, so
    # deleting the file would lose its exact bytes. The other expired day is held exactly and goes.
    root = short_root / "attr"
    ws = root / "ws" / "mine"
    ws.mkdir(parents=True)
    git(ws, "init", "--quiet", "--initial-branch=main")
    (ws / ".gitattributes").write_text("warm/2020-01-02.md text\n")
    git(ws, "add", ".gitattributes")
    git(ws, "commit", "--quiet", "-m", "attributes")
    crlf = EXPIRED_TEXT.replace("\n", "\r\n").replace("2020-01-01", "2020-01-02").encode()
    seed_day(ws, "2020-01-02.md", crlf)
    seed_day(ws, EXPIRED_DAY, EXPIRED_TEXT.encode())
    config = base_config(root, workspaces={"mine": ws}, snapshot={**FAST, "adopt_existing": True})
    d = make_daemon("attr", config=config)

    result = d.call("retention.sweep", workspace="mine", dry_run=False, confirm=True)["results"][0]

    assert result["removed"] == [EXPIRED_DAY]
    assert (ws / "warm" / "2020-01-02.md").read_bytes() == crlf
    assert [k["day"] for k in result["kept"]] == ["2020-01-02.md"]
    assert "differs" in result["kept"][0]["reason"]
    last = d.call("status")["workspaces"]["mine"]["last_sweep"]
    assert last["kept"] == result["kept"]


def test_with_snapshots_disabled_retention_deletes_as_configured_without_a_git_check(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "off"
    ws = root / "ws" / "w"
    seed_day(ws, EXPIRED_DAY, EXPIRED_TEXT.encode())
    d = make_daemon("off", config=base_config(root, workspaces={"w": ws}, snapshot={"enabled": False}))

    result = d.call("retention.sweep", workspace="w", dry_run=False, confirm=True)["results"][0]

    assert result["removed"] == [EXPIRED_DAY] and result["kept"] == []
    assert not (ws / "warm" / EXPIRED_DAY).exists()
    assert not (ws / ".git").exists()


# --- memd's own files are never committed ------------------------------------------------------------------------


def test_the_workspace_lock_and_memd_temp_files_are_never_committed(make_daemon: MakeDaemon, short_root: Path) -> None:
    root = short_root / "own"
    ws = root / "ws" / "w"
    d = make_daemon("own", config=base_config(root, workspaces={"w": ws}, snapshot=SLOW))
    lock = ws / ".memd.lock"
    if not lock.exists():  # the daemon makes it once the workspace lock lands; never touch a live one
        lock.write_text("12345\n")
    (ws / "hot" / ".context.json.memd-tmp-1-abcd").write_text("half written")
    (ws / "warm" / ".2026-01-01.md.memd-tmp-2-ef01").write_text("half written")
    (ws / "warm" / ".gitignore").write_text("!*\n")  # someone's rules cannot pull them in either

    d.call("hot.note", workspace="w", text="committed")
    assert d.call("snapshot.run", workspace="w")["rev"]

    tracked = git(ws, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert "hot/context.json" in tracked
    assert not [p for p in tracked if ".memd-tmp-" in p or p.endswith(".memd.lock")], tracked
    # A person working in memd's repository by hand does not pick them up either.
    assert ".memd.lock" not in git(ws, "status", "--porcelain", "--ignored=no", "--untracked-files=all")


def test_editor_temporaries_stay_out_and_tier_files_go_in_whatever_the_ignore_rules(
    make_daemon: MakeDaemon, short_root: Path, temporary_home: Path
) -> None:
    ignore = temporary_home / ".config" / "git" / "ignore"
    ignore.parent.mkdir(parents=True)
    ignore.write_text("*.md\n*.json\n")
    root = short_root / "edit"
    ws = root / "ws" / "w"
    seed_day(ws, EXPIRED_DAY, EXPIRED_TEXT.encode())
    (ws / ".gitignore").write_text("*\n")
    d = make_daemon("edit", config=base_config(root, workspaces={"w": ws}, snapshot=SLOW))
    temps = ["hot/.context.json.swp", "hot/4913", "cold/MEMORY.md~", "cold/#MEMORY.md#", "warm/notes.tmp"]
    for name in temps:
        (ws / name).write_text("editor scratch\n")
    os.symlink("person@host.4242:1700000000", ws / "cold" / ".#MEMORY.md")

    d.call("hot.note", workspace="w", text="a note")
    d.call("cold.learn", workspace="w", category="Notes", learning="a learning")
    result = d.call("retention.sweep", workspace="w", dry_run=False, confirm=True)["results"][0]

    assert result["removed"] == [EXPIRED_DAY], result
    assert held_in_history(ws, f"warm/{EXPIRED_DAY}", EXPIRED_TEXT.encode())
    assert d.call("snapshot.run", workspace="w")["rev"]
    tracked = git(ws, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert {"hot/context.json", "cold/MEMORY.md"} <= set(tracked), tracked
    assert not [p for p in tracked if p in temps or p.endswith(".#MEMORY.md")], tracked
    assert f"warm/{EXPIRED_DAY}" not in tracked  # the day's deletion is committed, ignored or not


def test_an_editor_file_that_vanishes_while_git_stages_does_not_skip_the_snapshot(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "vanish"
    ws = root / "ws" / "w"
    d = make_daemon("vanish", config=base_config(root, workspaces={"w": ws}, snapshot=SLOW))
    d.call("hot.note", workspace="w", text="first")
    assert d.call("snapshot.run", workspace="w")["rev"]
    # Deterministically, git's own clean filter for the (tracked, modified) notes file deletes the person's save
    # temporary after git listed hot/ and before it looks at that file, as an editor saving at that moment does.
    victim = ws / "hot" / ".memd.json.person-3"
    git(ws, "config", "filter.vanish.clean", f"rm -f '{victim}'; cat")
    with (ws / ".git" / "info" / "attributes").open("a") as f:
        f.write("hot/memd.json filter=vanish\n")
    d.call("hot.note", workspace="w", text="second")
    victim.write_text("a person's half-saved context\n")

    result = d.call("snapshot.run", workspace="w")

    assert result["rev"], snap_status(d, "w")
    assert snap_status(d, "w")["state"] == "ok"
    assert "second" in git(ws, "show", "HEAD:hot/memd.json")
    assert "unable to stat" not in d.log()


# --- a deleted .git -----------------------------------------------------------------------------------------------


def test_a_deleted_dot_git_is_recreated_without_a_restart_and_sweeps_go_on(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "gone"
    ws = root / "ws" / "w"
    d = make_daemon("gone", config=base_config(root, workspaces={"w": ws}, snapshot=SLOW))
    d.call("hot.note", workspace="w", text="before the deletion")
    assert d.call("snapshot.run", workspace="w")["rev"]

    shutil.rmtree(ws / ".git")
    d.call("hot.note", workspace="w", text="after the deletion")
    first = d.call("snapshot.run", workspace="w")
    d.call("hot.note", workspace="w", text="later still")
    second = d.call("snapshot.run", workspace="w")

    assert first["rev"] and second["rev"], snap_status(d, "w")
    assert snap_status(d, "w")["state"] == "ok"
    assert git(ws, "config", "--get", "memd.managed").strip() == "true"
    head_hot = git(ws, "show", "HEAD:hot/memd.json")
    assert "before the deletion" in head_hot and "later still" in head_hot
    assert len(git(ws, "log", "--format=%H").split()) == 2  # the new history starts from the files
    assert d.log().count("history is gone") == 1, d.log()

    seed_day(ws, EXPIRED_DAY, EXPIRED_TEXT.encode())
    result = d.call("retention.sweep", workspace="w", dry_run=False, confirm=True)["results"][0]
    assert result["removed"] == [EXPIRED_DAY]
    assert held_in_history(ws, f"warm/{EXPIRED_DAY}", EXPIRED_TEXT.encode())


# --- a workspace swapped for a symlink ----------------------------------------------------------------------------


@pytest.mark.parametrize("had_repository", [False, True], ids=["before-first-snapshot", "after-first-snapshot"])
def test_a_workspace_swapped_for_a_symlink_is_never_git_inited_or_committed_through(
    make_daemon: MakeDaemon, short_root: Path, had_repository: bool
) -> None:
    root = short_root / "swap"
    ws = root / "ws" / "alice"
    d = make_daemon("swap", config=base_config(root, workspaces={"alice": ws}, snapshot=SLOW))
    d.call("hot.note", workspace="alice", text="alice's note")
    if had_repository:
        assert d.call("snapshot.run", workspace="alice")["rev"]
    empty = root / "elsewhere"
    empty.mkdir()
    ws.rename(root / "ws" / "alice-moved")
    ws.symlink_to(empty)

    try:
        result = d.call("snapshot.run", workspace="alice")
    except MemdError:
        result = {"rev": None}

    assert not result["rev"]
    assert os.listdir(empty) == [], "memd wrote into the directory the symlink points at"
    assert snap_status(d, "alice")["state"] == "error"


# --- archives -----------------------------------------------------------------------------------------------------


def member_spans(raw: bytes) -> list[tuple[int, int]]:
    """(start, end) of each gzip member of a well-formed archive."""
    spans, offset = [], 0
    while offset < len(raw):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        d.decompress(raw[offset:])
        end = len(raw) - len(d.unused_data)
        spans.append((offset, end))
        offset = end
    return spans


def test_a_damaged_archive_is_kept_and_the_next_day_goes_to_a_new_file(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "arc"
    ws = root / "ws" / "w"
    days = ["2020-01-01.md", "2020-01-02.md", "2020-01-03.md"]
    for name in days:
        seed_day(ws, name, day_text(name, f"work of {name}"))
    config = base_config(root, workspaces={"w": ws}, snapshot=FAST, warm={"mode": "archive"})
    d = make_daemon("arc", config=config)
    assert d.call("retention.sweep", workspace="w", dry_run=False, confirm=True)["results"][0]["removed"] == days
    archive = ws / "warm" / "archive" / "2020-01.md.gz"
    raw = bytearray(archive.read_bytes())
    start, end = member_spans(bytes(raw))[1]
    raw[(start + end) // 2] ^= 0xFF  # one damaged byte in the second day's member
    archive.write_bytes(bytes(raw))
    seed_day(ws, "2020-01-04.md", day_text("2020-01-04.md", "work after the damage"))

    result = d.call("retention.sweep", workspace="w", dry_run=False, confirm=True)["results"][0]

    assert result["removed"] == ["2020-01-04.md"]
    assert archive.read_bytes() == bytes(raw), "the damaged archive was changed"
    assert (ws / "warm" / "archive" / "2020-01.1.md.gz").exists()
    assert any("2020-01.md.gz" in w and "damaged" in w for w in result["warnings"]), result
    for name in ("2020-01-01.md", "2020-01-03.md", "2020-01-04.md"):
        day = d.call("warm.day", workspace="w", date=name.removesuffix(".md"))
        assert day["source"] == "archive" and day["entries"], (name, day)
    new_file = gzip.decompress((ws / "warm" / "archive" / "2020-01.1.md.gz").read_bytes())
    assert b"work after the damage" in new_file


def gzip_bomb(path: Path, megabytes_out: int) -> None:
    """About `megabytes_out` MiB of zeros in 1 MiB gzip members (each compresses to about 1 KiB)."""
    member = gzip.compress(b"\0" * (1 << 20), compresslevel=9, mtime=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(member * megabytes_out)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


def test_a_gzip_bomb_read_through_warm_day_is_a_clear_error_not_a_frozen_daemon(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "bomb"
    workspaces = {"w": root / "ws" / "w", "other": root / "ws" / "other"}
    bomb = workspaces["w"] / "warm" / "archive" / "2020-01.md.gz"
    gzip_bomb(bomb, 2048)  # ~2 MiB on disk, 2 GiB decompressed
    assert bomb.stat().st_size < 3 << 20
    d = make_daemon("bomb", config=base_config(root, workspaces=workspaces, snapshot=SLOW, warm={"mode": "archive"}))
    assert d.proc is not None

    started = time.monotonic()
    with pytest.raises(MemdError, match="archive_max_bytes") as raised:
        d.call("warm.day", workspace="w", date="2020-01-05")
    elapsed = time.monotonic() - started

    assert raised.value.code == -32005
    assert elapsed < 10, f"the read took {elapsed:.1f}s"
    d.call("hot.note", workspace="other", text="still served")
    assert peak_rss_mib(d.proc.pid) < 512
    wait_for(lambda: d.call("ping"), "the daemon to answer after the bomb")
