"""Outside edits, discovery and retention as users see them: a real daemon, real inotify, real files.

Contract 2 (nothing is overwritten blind): a hand edit, an editor's save, another tool's append or a
`git reset --hard` is adopted, and memd's next write lands on top of it; an invalid file is never overwritten.
Events are hints: after an inotify overflow the reconcile scan still finds every change. Contract 5: retention
deletes exactly what its dry run lists. Every wait is a bounded poll; no test asserts how long anything took.
To see that the *watcher* adopted a change (reads adopt by themselves), tests poll `status`, which never reads
files, before they read through `hot.get` / `cold.get`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from harness import RunningDaemon, base_config
from harness import wait_for as _wait_for
from hot_files import hot_from_git, read_hot

from memd.errors import CorruptFile, MemdError
from memd.tiers.warm_format import parse_day

T = TypeVar("T")
MakeDaemon = Callable[..., RunningDaemon]
DEADLINE = 10.0  # generous: only ever reached when something is wrong


def wait_for(probe: Any, what: str, timeout: float = DEADLINE) -> Any:
    return _wait_for(probe, what, timeout)


WATCH = {"settle_seconds": 0.05, "max_wait_seconds": 0.5}
SWEEP_JOB = "sweep UTC 30 3 * * *"
QUICK_SNAPSHOTS = {"settle_seconds": 0.1, "max_wait_seconds": 0.5}
NO_SNAPSHOTS = {"enabled": False}


def config_for(root: Path, watch: dict[str, Any] | None = None, **sections: Any) -> dict[str, Any]:
    """One workspace, alpha, watched with a short settle time."""
    config: dict[str, Any] = base_config(
        root, workspaces={"alpha": root / "ws" / "alpha"}, watch={**WATCH, **(watch or {})}, **sections
    )
    return config


def start(make_daemon: MakeDaemon, short_root: Path, **kwargs: Any) -> RunningDaemon:
    return make_daemon("d", config=config_for(short_root / "d", **kwargs))


def sync(d: RunningDaemon) -> dict[str, Any]:
    result: dict[str, Any] = d.call("status")["sync"]
    return result


def ws_status(d: RunningDaemon, name: str = "alpha") -> dict[str, Any]:
    result: dict[str, Any] = d.call("status")["workspaces"][name]
    return result


def adopted(d: RunningDaemon) -> int:
    return int(sync(d)["adopted_changes"])


def wait_adopted(d: RunningDaemon, before: int, what: str, timeout: float = DEADLINE) -> None:
    wait_for(lambda: adopted(d) > before, f"the watcher to adopt {what}", timeout=timeout)


def replace_like_an_editor(path: Path, data: str) -> None:
    tmp = path.with_name(f".{path.name}.editor-save")
    tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, path)


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out.stdout.strip()


def day_name(day: date) -> str:
    return f"{day.isoformat()}.md"


def entry_text(day: date, action: str) -> str:
    return f"# Activity Log {day.isoformat()}\n\n### 09:15:00 - {action}\n```\nfile: a.py\n```\nResult: ok\n\n"


# --- outside edits ---------------------------------------------------------------------------------------------


def test_a_hand_edit_of_memory_md_is_adopted(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = start(make_daemon, short_root)
    d.call("cold.learn", workspace="alpha", category="Testing", learning="made through memd")
    before = adopted(d)

    with open(d.workspace("alpha") / "cold" / "MEMORY.md", "a", encoding="utf-8") as f:
        f.write("- [2026-01-02] written by hand in an editor\n")

    wait_adopted(d, before, "the MEMORY.md edit")
    learnings = d.call("cold.get", workspace="alpha")["learnings"]
    assert {(lr["category"], lr["text"]) for lr in learnings} == {
        ("Testing", "made through memd"),
        ("Testing", "written by hand in an editor"),
    }
    watcher = sync(d)["watcher"]  # its health is in status
    assert (watcher["alive"], watcher["degraded"], watcher["handler_errors"]) == (True, None, 0)
    assert watcher["events"] > 0 and watcher["watched"] >= 1


def test_an_editor_style_save_of_context_json_is_adopted_and_never_clobbered(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    d = start(make_daemon, short_root)
    d.call("hot.note", workspace="alpha", text="before the editor")
    path = d.workspace("alpha") / "hot" / "context.json"
    doc = json.loads(path.read_text())
    doc["task"] = "task typed into an editor"
    doc["x_editor_field"] = {"kept": [1, 2, 3]}
    before = adopted(d)

    replace_like_an_editor(path, json.dumps(doc, indent=4))

    wait_adopted(d, before, "the editor's save of context.json")
    hot = d.call("hot.get", workspace="alpha")["hot"]
    assert hot["task"] == "task typed into an editor"
    assert hot["x_editor_field"] == {"kept": [1, 2, 3]}
    d.call("hot.note", workspace="alpha", text="after the editor")
    on_disk = json.loads(path.read_text())
    assert on_disk["task"] == "task typed into an editor"
    assert on_disk["x_editor_field"] == {"kept": [1, 2, 3]}
    assert [n["text"] for n in read_hot(d.workspace("alpha"))["notes"]] == ["before the editor", "after the editor"]


def test_another_tools_append_to_todays_warm_file_is_adopted_and_kept(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    d = start(make_daemon, short_root)
    day = d.call("warm.log", workspace="alpha", action="logged by memd")["entry"]["date"]
    path = d.workspace("alpha") / "warm" / f"{day}.md"
    tokens_before = ws_status(d)["usage"]["warm"]["tokens"]
    before = adopted(d)

    with open(path, "a", encoding="utf-8") as f:
        f.write("### 12:34:56 - deployed by another tool\n```\ntarget: staging\n```\nResult: deployed\n\n")

    wait_adopted(d, before, "the outside append")
    assert ws_status(d)["usage"]["warm"]["tokens"] > tokens_before
    entries = d.call("warm.recent", workspace="alpha")["days"][0]["entries"]
    assert entries[-1] == {
        "date": day,
        "time": "12:34:56",
        "action": "deployed by another tool",
        "details": {"target": "staging"},
        "result": "deployed",
    }
    d.call("warm.log", workspace="alpha", action="logged after the tool")
    actions = ["logged by memd", "deployed by another tool", "logged after the tool"]
    assert [e.action for e in parse_day(path.read_text())] == actions
    recent = d.call("warm.recent", workspace="alpha")["days"][0]
    assert recent["date"] == day
    assert [e["action"] for e in recent["entries"]] == actions


def test_git_reset_hard_is_adopted_and_the_next_write_builds_on_it(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = start(make_daemon, short_root, snapshot=NO_SNAPSHOTS)  # the repository is ours alone: no racing memd's git
    ws = d.workspace("alpha")
    d.call("progress.update", workspace="alpha", step="step 1")
    d.call("hot.note", workspace="alpha", text="committed note")
    d.call("cold.learn", workspace="alpha", category="Git", learning="committed learning")
    git(ws, "init", "-q")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "base")
    base = git(ws, "rev-parse", "HEAD")
    d.call("progress.update", workspace="alpha", step="step 2")
    d.call("hot.note", workspace="alpha", text="note the reset throws away")
    d.call("cold.learn", workspace="alpha", category="Git", learning="learning the reset throws away")
    before = adopted(d)

    git(ws, "reset", "-q", "--hard", base)

    wait_adopted(d, before, "the files git reset")
    hot = d.call("hot.get", workspace="alpha")["hot"]
    assert hot["current_step"] == "step 1"
    assert [n["text"] for n in hot["notes"]] == ["committed note"]
    assert [lr["text"] for lr in d.call("cold.get", workspace="alpha")["learnings"]] == ["committed learning"]
    d.call("hot.note", workspace="alpha", text="after the reset")
    d.call("cold.learn", workspace="alpha", category="Git", learning="after the reset")
    on_disk = read_hot(ws)
    assert on_disk["current_step"] == "step 1"
    assert [n["text"] for n in on_disk["notes"]] == ["committed note", "after the reset"]
    memory = (ws / "cold" / "MEMORY.md").read_text()
    assert "committed learning" in memory and "after the reset" in memory
    assert "throws away" not in memory


def test_git_reset_hard_in_memds_own_snapshot_repository_is_adopted(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = start(make_daemon, short_root, snapshot=QUICK_SNAPSHOTS)
    ws = d.workspace("alpha")

    def snapshots() -> dict[str, Any]:
        return ws_status(d).get("snapshot") or {}

    def committed(count: int) -> Callable[[], dict[str, Any] | None]:
        def probe() -> dict[str, Any] | None:
            s = snapshots()
            return s if s.get("commits", 0) >= count and not s.get("pending") else None

        return probe

    d.call("progress.update", workspace="alpha", step="step 1")
    d.call("cold.learn", workspace="alpha", category="Git", learning="kept learning")
    assert wait_for(committed(1), "memd's first snapshot")["git_dir"] == str(ws / ".git")
    base = git(ws, "rev-parse", "HEAD")
    d.call("progress.update", workspace="alpha", step="step 2")
    d.call("cold.learn", workspace="alpha", category="Git", learning="learning the reset throws away")
    wait_for(committed(2), "memd's second snapshot")
    before = adopted(d)

    git(ws, "reset", "-q", "--hard", base)

    wait_adopted(d, before, "the files git reset")
    assert d.call("hot.get", workspace="alpha")["hot"]["current_step"] == "step 1"
    assert [lr["text"] for lr in d.call("cold.get", workspace="alpha")["learnings"]] == ["kept learning"]
    d.call("hot.note", workspace="alpha", text="after the reset")
    on_disk = read_hot(ws)
    assert (on_disk["current_step"], [n["text"] for n in on_disk["notes"]]) == ("step 1", ["after the reset"])
    wait_for(committed(3), "memd to snapshot the state after the reset")
    in_history = hot_from_git({p: git(ws, "show", f"HEAD:{p}").encode() for p in ("hot/context.json", "hot/memd.json")})
    assert (in_history["current_step"], [n["text"] for n in in_history["notes"]]) == ("step 1", ["after the reset"])


def test_an_invalid_context_json_is_never_overwritten_and_a_fixed_one_recovers(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    d = start(make_daemon, short_root)
    d.call("progress.update", workspace="alpha", step="last good step")
    path = d.workspace("alpha") / "hot" / "context.json"
    broken = b'{"task": "half typed", "current_step": \n'

    path.write_bytes(broken)

    wait_for(lambda: "hot" in ws_status(d)["file_errors"], "status to show the hot file error")
    with pytest.raises(CorruptFile) as failure:
        d.call("hot.note", workspace="alpha", text="must not land")
    assert failure.value.code == -32006
    assert str(path) in failure.value.message
    assert path.read_bytes() == broken
    served = d.call("hot.get", workspace="alpha")
    assert served["hot"]["current_step"] == "last good step"
    assert str(path) in served["error"]
    d.call("warm.log", workspace="alpha", action="other tiers keep working")
    assert path.read_bytes() == broken

    path.write_text(json.dumps({"task": "fixed by hand", "current_step": "repaired", "x_custom": 7}))

    wait_for(lambda: not ws_status(d)["file_errors"], "the hot file error to clear")
    d.call("hot.note", workspace="alpha", text="after the repair")
    on_disk = json.loads(path.read_text())
    assert (on_disk["task"], on_disk["current_step"], on_disk["x_custom"]) == ("fixed by hand", "repaired", 7)
    assert [n["text"] for n in read_hot(d.workspace("alpha"))["notes"]] == ["after the repair"]


def test_a_tier_directory_replaced_from_outside_is_watched_again(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = start(make_daemon, short_root, snapshot=NO_SNAPSHOTS)  # reconcile: every 60 s
    ws = d.workspace("alpha")
    d.call("cold.learn", workspace="alpha", category="Ops", learning="before the restore")
    shutil.rmtree(ws / "cold")
    (ws / "cold").mkdir()  # say, about to be restored from a backup
    wait_for(lambda: ws_status(d)["usage"]["cold"]["tokens"] == 0, "the removal to be adopted")
    reconciles = sync(d)["reconciles"]

    (ws / "cold" / "MEMORY.md").write_text("# Agent Memory\n\n## Ops\n- [2026-01-01] restored from a backup\n")

    wait_for(lambda: ws_status(d)["usage"]["cold"]["tokens"] > 0, "the restored MEMORY.md to be adopted")
    assert sync(d)["reconciles"] == reconciles, "adopted by the periodic reconcile: the new directory is not watched"


def test_a_tier_directory_removed_from_outside_is_recreated_by_the_next_write(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    d = start(make_daemon, short_root, snapshot=NO_SNAPSHOTS)
    ws = d.workspace("alpha")
    d.call("warm.log", workspace="alpha", action="before the directory was removed")

    shutil.rmtree(ws / "warm")

    entry = d.call("warm.log", workspace="alpha", action="after the directory was removed")["entry"]
    actions = [e.action for e in parse_day((ws / "warm" / f"{entry['date']}.md").read_text())]
    assert actions == ["after the directory was removed"]


def test_memds_own_writes_cause_no_adoption_and_no_work_after_idle(make_daemon: MakeDaemon, short_root: Path) -> None:
    # Every second a reconcile stats every file: one of memd's own writes that looked foreign would be adopted.
    d = start(make_daemon, short_root, snapshot=QUICK_SNAPSHOTS, watch={"reconcile_interval_seconds": 1})
    adopted_before = adopted(d)

    def writer(n: int) -> None:
        with d.client() as c:
            for i in range(10):
                c.call("warm.log", workspace="alpha", action=f"writer {n} entry {i}")
                if i % 3 == 0:
                    c.call("hot.note", workspace="alpha", text=f"writer {n} note {i}")
                if i == 5:
                    c.call("cold.learn", workspace="alpha", category="Burst", learning=f"writer {n}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=DEADLINE)

    def snapshot() -> tuple[Any, ...]:
        status = d.call("status")
        ws, sy = status["workspaces"]["alpha"], status["sync"]
        commits = (ws.get("snapshot") or {}).get("commits")
        counters = (sy["adopted_changes"], sy["hints"], sy["watcher"]["events"], ws["writes"], ws["batches"])
        return (*counters, commits, ws["usage"])

    ws = d.workspace("alpha")
    files = [ws / "hot" / "context.json", ws / "cold" / "MEMORY.md", *sorted((ws / "warm").glob("*.md"))]

    def burst_committed() -> bool:  # the last snapshot holds every file as the burst left it, and none is pending
        snap = ws_status(d).get("snapshot") or {}
        if snap.get("pending") or not snap.get("commits"):
            return False
        for path in files:  # `git show` only reads objects: it never takes the index lock memd's git needs
            rel = path.relative_to(ws).as_posix()
            shown = subprocess.run(
                ["git", "-C", str(ws), "show", f"HEAD:{rel}"], capture_output=True, timeout=30, check=False
            )
            if shown.stdout != path.read_bytes():
                return False
        return True

    wait_for(burst_committed, "the snapshot of the burst", timeout=30)
    after_reconciles(d, 2)  # two full passes over the files after the burst: any late work has happened by now
    first = snapshot()
    after_reconciles(d, 2)

    assert snapshot() == first
    assert first[3] == 4 * (10 + 4 + 1)
    assert first[0] == adopted_before


def after_reconciles(d: RunningDaemon, passes: int) -> None:
    """Wait until the periodic reconcile has run `passes` more times (an event of the daemon, not a sleep)."""
    start = sync(d)["reconciles"]
    wait_for(lambda: sync(d)["reconciles"] >= start + passes, f"{passes} reconcile passes", timeout=30)


def test_changes_lost_to_an_inotify_overflow_are_reconciled(make_daemon: MakeDaemon, short_root: Path) -> None:
    d = start(make_daemon, short_root, watch={"reconcile_interval_seconds": 1})
    ws = d.workspace("alpha")
    d.call("cold.learn", workspace="alpha", category="Ops", learning="before the overflow")
    d.call("progress.update", workspace="alpha", step="before the overflow")
    usage = ws_status(d)["usage"]
    adopted_before = adopted(d)
    max_queued = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    appends = min(max_queued + 1000, 20_000)  # each open+write+close queues two events: enough to overflow
    scratch = ws / "warm" / "scratch.txt"

    d.signal(signal.SIGSTOP)
    try:
        for _ in range(appends):
            with open(scratch, "a") as f:
                f.write("x\n")
        with open(ws / "cold" / "MEMORY.md", "a", encoding="utf-8") as f:
            f.write("- [2026-01-03] written while memd was stopped\n")
        doc = json.loads((ws / "hot" / "context.json").read_text())
        doc["current_step"] = "edited while memd was stopped, after the overflow"
        replace_like_an_editor(ws / "hot" / "context.json", json.dumps(doc))
    finally:
        d.signal(signal.SIGCONT)

    def reconciled() -> bool:
        # Adopted through a counted path (the overflow's re-check or the reconcile), and both tiers grown: the
        # token figures alone can also move for memd's own last writes, counted a moment later.
        now = ws_status(d)["usage"]
        grown = now["cold"]["tokens"] > usage["cold"]["tokens"] and now["hot"]["tokens"] > usage["hot"]["tokens"]
        return bool(grown and adopted(d) > adopted_before)

    wait_for(reconciled, "the final edits to be adopted without a read")
    assert scratch.stat().st_size == 2 * appends
    hot = d.call("hot.get", workspace="alpha")["hot"]
    assert hot["current_step"] == "edited while memd was stopped, after the overflow"
    texts = [lr["text"] for lr in d.call("cold.get", workspace="alpha")["learnings"]]
    assert texts == ["before the overflow", "written while memd was stopped"]
    assert sync(d)["watcher"]["alive"] is True
    wait_for(lambda: sync(d)["reconciles"] >= 1, "the reconcile job to run")


def test_an_outside_edit_the_budget_scan_finds_first_is_adopted_like_any_other(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    # No watcher and no reconcile in time: the budget scan is the job that meets the edit.
    d = start(
        make_daemon,
        short_root,
        watch={"enabled": False, "reconcile_interval_seconds": 3600},
        jobs={"budget_scan_interval_seconds": 0.2},
    )
    ws = d.workspace("alpha")
    d.call("progress.update", workspace="alpha", step="before the edit")
    before = adopted(d)
    doc = json.loads((ws / "hot" / "context.json").read_text())
    doc["current_step"] = "edited by hand"
    replace_like_an_editor(ws / "hot" / "context.json", json.dumps(doc))

    wait_for(lambda: adopted(d) > before, "the budget scan's adoption to be counted")

    # ... and told to the change sink: the snapshot job commits the person's edit.
    def snapshotted() -> bool:
        try:
            shown = d.call("history.show", workspace="alpha", rev="HEAD", path="hot/context.json")["content"]
        except MemdError:  # no snapshot yet
            return False
        return "edited by hand" in shown

    wait_for(snapshotted, "the edit to be snapshotted")


# --- discovery -------------------------------------------------------------------------------------------------


def discovery_daemon(make_daemon: MakeDaemon, short_root: Path, **sections: Any) -> tuple[RunningDaemon, Path]:
    root = short_root / "d"
    agents = root / "agents"
    agents.mkdir(parents=True)
    return make_daemon("d", config=config_for(root, discovery={"roots": [str(agents)]}, **sections)), agents


def names(d: RunningDaemon) -> list[str]:
    return [w["name"] for w in d.call("workspace.list")["workspaces"]]


def test_a_directory_created_under_a_discovery_root_becomes_a_workspace(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    d, agents = discovery_daemon(make_daemon, short_root)

    (agents / "newbot" / "hot").mkdir(parents=True)

    wait_for(lambda: "newbot" in names(d), "newbot to be discovered")
    entry = d.call("warm.log", workspace="newbot", action="hello from newbot")["entry"]
    assert parse_day((agents / "newbot" / "warm" / f"{entry['date']}.md").read_text())[0].action == "hello from newbot"
    assert sync(d)["discovered"] == ["newbot"]
    assert sync(d)["watcher"]["alive"] is True


def test_a_discovered_directory_named_like_a_configured_workspace_is_reported_not_guessed(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    d, agents = discovery_daemon(make_daemon, short_root)

    (agents / "alpha" / "warm").mkdir(parents=True)

    conflicts = wait_for(lambda: sync(d)["discovery_conflicts"], "the name clash to be reported")
    assert list(conflicts) == ["alpha"]
    assert str(agents / "alpha") in conflicts["alpha"]
    listed = {w["name"]: w["path"] for w in d.call("workspace.list")["workspaces"]}
    assert listed == {"alpha": str(short_root / "d" / "ws" / "alpha")}
    assert sync(d)["discovered"] == []
    d.call("warm.log", workspace="alpha", action="still the configured one")
    assert os.listdir(agents / "alpha" / "warm") == []


def test_removing_a_discovered_workspace_directory_drops_it(make_daemon: MakeDaemon, short_root: Path) -> None:
    d, agents = discovery_daemon(make_daemon, short_root, snapshot=NO_SNAPSHOTS)  # reconcile: every 60 s
    (agents / "newbot" / "hot").mkdir(parents=True)
    wait_for(lambda: "newbot" in names(d), "newbot to be discovered")
    d.call("hot.note", workspace="newbot", text="soon gone")

    shutil.rmtree(agents / "newbot")

    wait_for(lambda: "newbot" not in names(d), "newbot to be dropped by the event, not the 60 s reconcile")
    assert sync(d)["discovered"] == []


def test_memd_never_recreates_a_removed_workspace_directory(make_daemon: MakeDaemon, short_root: Path) -> None:
    d, agents = discovery_daemon(
        make_daemon, short_root, watch={"reconcile_interval_seconds": 1}, snapshot=QUICK_SNAPSHOTS
    )
    (agents / "newbot" / "hot").mkdir(parents=True)
    wait_for(lambda: "newbot" in names(d), "newbot to be discovered")
    d.call("warm.log", workspace="newbot", action="soon gone")

    shutil.rmtree(agents / "newbot")

    wait_for(lambda: "newbot" not in names(d), "newbot to be dropped (by the reconcile job at the latest)")
    after_reconciles(d, 2)  # and past the snapshot settle time: the flush would have recreated it by now
    assert not (agents / "newbot").exists(), sorted(str(p) for p in agents.rglob("*"))[:5]


# --- retention -------------------------------------------------------------------------------------------------


def populate_warm(warm: Path, outside: Path) -> tuple[dict[str, bytes], set[str]]:
    """Old day files (expired) plus what retention must never touch. Returns (expired contents, untouched)."""
    warm.mkdir(parents=True, exist_ok=True)
    today = datetime.now(UTC).date()
    expired = {}
    for day in (date(2020, 1, 1), date(2020, 1, 2), date(2020, 2, 10)):
        expired[day_name(day)] = entry_text(day, f"work of {day.isoformat()}").encode()
        (warm / day_name(day)).write_bytes(expired[day_name(day)])
    recent, future = today - timedelta(days=2), today + timedelta(days=30)
    for day in (recent, future):
        (warm / day_name(day)).write_text(entry_text(day, "keep me"))
    for name in ("notes.md", "2026-13-01.md", "2026-02-30.md", "2020-01-03.md.bak"):
        (warm / name).write_text("not a day log\n")
    (warm / "2020-01-04.md").mkdir()
    outside.write_text("not memd's\n")
    (warm / "2020-01-05.md").symlink_to(outside)
    untouched = {day_name(recent), day_name(future), "notes.md", "2026-13-01.md", "2026-02-30.md"}
    return expired, untouched | {"2020-01-03.md.bak", "2020-01-04.md", "2020-01-05.md"}


def test_a_sweep_removes_exactly_what_its_dry_run_listed_and_is_recorded(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "d"
    warm = root / "ws" / "alpha" / "warm"
    expired, untouched = populate_warm(warm, root / "outside.md")
    d = make_daemon("d", config=config_for(root))

    dry = d.call("retention.sweep", workspace="alpha", dry_run=True)["results"][0]
    assert dry["expired"] == sorted(expired)
    assert dry["removed"] == []
    assert set(expired) | untouched <= set(os.listdir(warm))
    assert ws_status(d)["last_sweep"] is None

    real = d.call("retention.sweep", workspace="alpha", dry_run=False, confirm=True)["results"][0]

    assert real["removed"] == real["expired"] == dry["expired"]
    assert set(os.listdir(warm)) == untouched | {day_name(date.fromisoformat(real["today"]))}
    assert (root / "outside.md").read_text() == "not memd's\n"
    assert (warm / "2020-01-05.md").is_symlink()
    today = d.call("warm.day", workspace="alpha", date=real["today"])
    sweep_entries = [e for e in today["entries"] if e["action"] == "retention-sweep"]
    assert len(sweep_entries) == 1
    assert sweep_entries[0]["details"]["removed"] == ", ".join(dry["expired"])
    last = ws_status(d)["last_sweep"]
    assert last["removed"] == dry["expired"] and last["dry_run"] is False
    assert d.call("retention.sweep", workspace="alpha", dry_run=True)["results"][0]["expired"] == []


def test_archive_mode_keeps_swept_days_readable(make_daemon: MakeDaemon, short_root: Path) -> None:
    root = short_root / "d"
    warm = root / "ws" / "alpha" / "warm"
    expired, untouched = populate_warm(warm, root / "outside.md")
    config = config_for(root)
    config["workspaces"]["alpha"]["warm"] = {"mode": "archive"}
    d = make_daemon("d", config=config)

    real = d.call("retention.sweep", workspace="alpha", dry_run=False, confirm=True)["results"][0]

    assert real["mode"] == "archive"
    assert real["removed"] == sorted(expired)
    assert not set(expired) & set(os.listdir(warm))
    assert untouched <= set(os.listdir(warm))
    assert sorted(os.listdir(warm / "archive")) == ["2020-01.md.gz", "2020-02.md.gz"]
    for name, data in expired.items():
        got = d.call("warm.day", workspace="alpha", date=name.removesuffix(".md"))
        assert got["source"] == "archive"
        assert [(e["time"], e["action"], e["details"], e["result"]) for e in got["entries"]] == [
            (e.time, e.action, dict(e.details), e.result) for e in parse_day(data.decode())
        ]
    assert d.call("warm.day", workspace="alpha", date="2020-01-06")["source"] == "none"


def test_a_sweep_missed_while_memd_was_down_runs_at_startup(make_daemon: MakeDaemon, short_root: Path) -> None:
    root = short_root / "d"
    warm = root / "ws" / "alpha" / "warm"
    expired, untouched = populate_warm(warm, root / "outside.md")
    state = root / "state"
    state.mkdir(parents=True, mode=0o700)
    two_days_ago = (datetime.now(UTC) - timedelta(days=2)).isoformat(timespec="seconds")
    (state / "jobs.json").write_text(json.dumps({"last_run": {SWEEP_JOB: two_days_ago}}))

    # The days were there before memd first served alpha (an adoption, whose sweeps only report until confirmed):
    # this test is about the missed run, so it lets adopted sweeps run.
    d = make_daemon("d", config=config_for(root, warm={"adopted_sweep": "run"}))

    wait_for(lambda: not set(expired) & set(os.listdir(warm)), "the missed sweep to run at startup")
    assert untouched <= set(os.listdir(warm))
    job = wait_for(lambda: (j := d.call("status")["jobs"][SWEEP_JOB])["runs"] >= 1 and j, "the sweep job's record")
    assert job["last_run"] > two_days_ago
    assert job["errors"] == 0
    assert ws_status(d)["last_sweep"]["removed"] == sorted(expired)
    persisted = json.loads((state / "jobs.json").read_text())["last_run"][SWEEP_JOB]
    assert persisted > two_days_ago
