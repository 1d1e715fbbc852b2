"""Scenario 5, traversal and injection: nothing a client sends, and nothing planted in a workspace, lets memd write
outside it; no field can add markdown structure.

  * Workspace names that are paths or lookalikes (`../x`, absolute paths, NUL, zero-width and Cyrillic letters,
    full-width forms, case and whitespace variants) get -32001/-32602 on every method, never a result.
  * Paths and revisions in the history/snapshot methods (`..`, absolute, `--output=...`) are refused or stay
    inside the repository.
  * Symlinks planted in a workspace pointing outside: warm/<today>.md -> a file, cold/MEMORY.md -> a file,
    hot/ -> a directory, warm/ -> a directory (then a retention sweep and a restore of warm/ over it), an old day
    file -> a file (then a sweep), warm/<today>.md -> a FIFO and a FIFO in its place. memd must not write through
    them: the files outside keep their exact bytes (sha256 of the whole outside tree), the write is refused, and the
    daemon keeps answering (bounded waits; a hung daemon is reported and restarted).
  * Markdown structure in actions, details keys and values, results, categories and learnings: the number of
    entries, sections and learnings grows by exactly what was written, every field reads back exactly, and the
    files stay byte-exact.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from torture import verify
from torture.lib import Context, Daemon, Report, RpcError, base_config, listing, tree_checksum

OK = 0


def run(ctx: Context) -> Report:
    report = Report("traversal")
    root = ctx.dir("tv")
    ws_root = root / "ws"
    alpha, beta, gamma = ws_root / "alpha", ws_root / "beta", ws_root / "gamma"
    outside = root / "outside"
    _plant_outside(outside)
    config = base_config(root, {"alpha": alpha, "beta": beta, "gamma": gamma}, warm={"retention_days": 7})
    d = Daemon(ctx, root / "d", config)
    t = Tally(report, outside, d)
    try:
        d.start()
        d.call("warm.log", workspace="alpha", action="first")
        d.call("warm.log", workspace="beta", action="first")
        t.baseline(ws_root)
        names(t)
        paths(t, outside)
        t.check_outside("names and paths")
        for plant in (plant_warm_file, plant_cold_file, plant_hot_dir, plant_warm_dir, plant_old_day, plant_fifo):
            plant(t, alpha, outside)
            t.check_outside(plant.__name__)
            if not t.responsive(plant.__name__):
                d.close()
                d.start()
        injection(t)
        state = verify.inspect(alpha)
        for problem in state.problems:
            report.fail(f"after the traversal checks: {problem}")
        report.check(listing(ws_root) == t.ws_listing, f"workspace parent changed: {listing(ws_root)}")
        d.stop()
    except (RuntimeError, RpcError, OSError) as exc:
        report.fail(f"traversal scenario: {type(exc).__name__}: {exc}\n{d.log_tail(20)}")
    finally:
        d.close()
        with contextlib.suppress(OSError):
            os.unlink(outside / "fifo")
    report.figure("hostile names", f"{t.names} requests, {t.name_escapes} answered with a result")
    report.figure("paths and revisions", f"{t.paths} requests, outside tree unchanged: {t.outside_ok}")
    report.figure("planted symlinks/FIFOs", "; ".join(t.plants))
    report.figure("markdown injection", t.injection)
    report.summary = f"{len(report.failures)} escapes or defects" if report.failures else "0 escapes"
    report.count("corrupt", t.structure_errors)
    return report


def _plant_outside(outside: Path) -> None:
    (outside / "hotdir").mkdir(parents=True)
    (outside / "warmdir").mkdir()
    (outside / "target.md").write_text("# outside target: must never change\n")
    (outside / "MEM.md").write_text("# Agent Memory\n\n## Outside\n- [2000-01-01] keep me\n")
    (outside / "hotdir" / "context.json").write_text('{"task": "outside task"}\n')
    (outside / "warmdir" / "2000-01-01.md").write_text("# Activity Log 2000-01-01\n\n### 10:00:00 - precious\n\n")
    (outside / "warmdir" / "keep.txt").write_text("keep\n")
    (outside / "old.md").write_text("# an old file outside\n")
    os.mkfifo(outside / "fifo")


class Tally:
    def __init__(self, report: Report, outside: Path, d: Daemon) -> None:
        self.report = report
        self.outside = outside
        self.d = d
        self.sum = tree_checksum(outside)
        self.ws_listing: list[str] = []
        self.names = self.name_escapes = self.paths = 0
        self.outside_ok = True
        self.plants: list[str] = []
        self.injection = ""
        self.structure_errors = 0

    def baseline(self, ws_root: Path) -> None:
        self.ws_listing = listing(ws_root)

    def check_outside(self, step: str) -> None:
        now = tree_checksum(self.outside)
        if now != self.sum:
            self.outside_ok = False
            self.report.fail(f"{step}: files outside the workspaces changed: {sorted(_walk(self.outside))}")
            self.sum = now

    def call(self, method: str, timeout: float = 10, **params: Any) -> tuple[int, Any]:
        """(0, result) or (error code, message); (-1, reason) when there was no answer."""
        try:
            response = self.d.request(method, timeout=timeout, **params)
        except (TimeoutError, OSError, ConnectionError) as exc:
            return -1, f"{type(exc).__name__}: {exc}"
        if "error" in response:
            return int(response["error"]["code"]), response["error"].get("message", "")
        return OK, response.get("result")

    def responsive(self, step: str) -> bool:
        if self.d.alive() and self.d.ping(3):
            return True
        self.report.fail(f"{step}: the daemon stopped answering ping (restarted to go on)\n{self.d.log_tail(8)}")
        return False


def _walk(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*")]


# --- names and paths -------------------------------------------------------------------------------------------

HOSTILE_NAMES = [
    "../alpha", "../../etc", "/etc/passwd", "alpha/../beta", "alpha\x00", "\x00", "alpha\u200b", "\u0430lpha",
    "ALPHA", "alpha ", " alpha", "alpha/", "./alpha", "..", ".", "", "~", "~/alpha", "%2e%2e%2falpha",
    "alpha\\..\\beta", "\uff41\uff4c\uff50\uff48\uff41", "alpha\n", "a" * 5000, "alpha\u0301", "\uff41lpha",
]  # fmt: skip
NAME_METHODS = {
    "hot.get": {},
    "warm.log": {"action": "x"},
    "cold.learn": {"category": "C", "learning": "x"},
    "hot.note": {"text": "x"},
    "snapshot.run": {},
    "history.list": {},
    "retention.sweep": {"dry_run": False},
    "context.get": {},
    "session.start": {"task": "t"},
}


def names(t: Tally) -> None:
    for name in [*HOSTILE_NAMES, str(t.outside), str(t.outside / "warmdir")]:
        for method, params in NAME_METHODS.items():
            code, answer = t.call(method, workspace=name, **params)
            t.names += 1
            if code == OK:
                t.name_escapes += 1
                t.report.fail(f"{method} with workspace {name!r:.60} succeeded: {str(answer)[:120]}")
            elif code not in (-32001, -32602):
                t.report.fail(f"{method} with workspace {name!r:.60} answered {code}: {str(answer)[:160]}")


def paths(t: Tally, outside: Path) -> None:
    out = str(outside)
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("history.show", {"rev": "HEAD", "path": "../../outside/target.md"}),
        ("history.show", {"rev": "HEAD", "path": f"{out}/target.md"}),
        ("history.show", {"rev": "HEAD", "path": "hot/../../../outside/target.md"}),
        ("history.show", {"rev": f"--output={out}/pwned1", "path": "hot/context.json"}),
        ("history.diff", {"rev": f"--output={out}/pwned2"}),
        ("history.diff", {"rev": "HEAD", "rev2": f"--output={out}/pwned3"}),
        ("history.diff", {"rev": "HEAD", "paths": [f"--output={out}/pwned4", "../outside"]}),
        ("history.list", {"path": f"--output={out}/pwned5"}),
        ("history.list", {"path": "../../outside"}),
        ("snapshot.restore", {"rev": "HEAD", "paths": ["../outside"]}),
        ("snapshot.restore", {"rev": "HEAD", "paths": ["hot/../../outside"]}),
        ("snapshot.restore", {"rev": "HEAD", "paths": [out]}),
        ("snapshot.restore", {"rev": f"--output={out}/pwned6", "paths": ["hot"]}),
        ("snapshot.run", {"reason": f"--output={out}/pwned7"}),
        ("checkpoint.show", {"id": "../../outside/target.md"}),
        ("warm.day", {"date": "../../outside/target"}),
    ]
    t.call("snapshot.run", workspace="alpha")
    for method, params in attempts:
        code, answer = t.call(method, workspace="alpha", **params)
        t.paths += 1
        if code == -32603 or code == -1:
            t.report.fail(f"{method} {params}: answered {code}: {str(answer)[:160]}")
        if code == OK and "outside target" in str(answer):
            t.report.fail(f"{method} {params} returned the outside file's content")


# --- planted symlinks and FIFOs ---------------------------------------------------------------------------------


def _today_file(ws: Path) -> Path:
    return ws / "warm" / f"{verify.today_utc().isoformat()}.md"


@contextlib.contextmanager
def _swapped(path: Path, make: Any) -> Any:
    """Move `path` aside, put `make(path)` in its place, and put the original back afterwards."""
    saved = path.with_name(path.name + ".torture-saved")
    if os.path.lexists(path):
        os.replace(path, saved)
    try:
        make(path)
        yield
    finally:
        if os.path.lexists(path) or path.is_symlink():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        if os.path.lexists(saved):
            os.replace(saved, path)


def _writes_refused(t: Tally, what: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    codes = []
    for method, params in calls:
        code, answer = t.call(method, workspace="alpha", **params)
        codes.append(code)
        if code == -32603:
            t.report.fail(f"{what}: {method} answered an internal error (-32603): {str(answer)[:200]}")
        if code == -1:
            t.report.fail(f"{what}: {method} got no answer within 10 s ({answer})")
    return "/".join(str(c) for c in codes)


def plant_warm_file(t: Tally, ws: Path, outside: Path) -> None:
    today = _today_file(ws)
    with _swapped(today, lambda p: os.symlink(outside / "target.md", p)):
        calls = [("warm.log", {"action": "x"}), ("decision.record", {"action": "d", "reason": ""})]
        codes = _writes_refused(t, "warm/<today>.md -> outside file", calls)
        t.report.check(today.is_symlink(), "warm/<today>.md symlink was replaced or removed")
    t.plants.append(f"warm/<today>.md -> file: answers {codes}")


def plant_cold_file(t: Tally, ws: Path, outside: Path) -> None:
    memory = ws / "cold" / "MEMORY.md"
    with _swapped(memory, lambda p: os.symlink(outside / "MEM.md", p)):
        codes = _writes_refused(
            t,
            "cold/MEMORY.md -> outside file",
            [
                ("cold.learn", {"category": "C", "learning": "one"}),
                ("cold.learn", {"category": "C", "learning": "two"}),
            ],
        )
        kind = "still a symlink" if memory.is_symlink() else "replaced by a regular file (not followed)"
    t.plants.append(f"cold/MEMORY.md -> file: answers {codes}, {kind}")


def plant_hot_dir(t: Tally, ws: Path, outside: Path) -> None:
    hot = ws / "hot"
    with _swapped(hot, lambda p: os.symlink(outside / "hotdir", p, target_is_directory=True)):
        calls = [("hot.note", {"text": "x"}), ("progress.update", {"step": "s"})]
        codes = _writes_refused(t, "hot/ -> outside dir", calls)
        code, answer = t.call("hot.get", workspace="alpha")
        leaked = code == OK and "outside task" in str(answer)
    t.plants.append(f"hot/ -> dir: answers {codes}" + ("; hot.get read the outside context.json" if leaked else ""))
    if leaked:
        t.report.notes.append(
            "with hot/ replaced by a symlink to another directory, hot.get serves that directory's context.json "
            "(reads follow a symlinked tier directory; writes are refused)"
        )


def plant_warm_dir(t: Tally, ws: Path, outside: Path) -> None:
    warm = ws / "warm"
    with _swapped(warm, lambda p: os.symlink(outside / "warmdir", p, target_is_directory=True)):
        codes = _writes_refused(t, "warm/ -> outside dir", [("warm.log", {"action": "x"})])
        before = tree_checksum(outside)
        code, answer = t.call("retention.sweep", workspace="alpha", timeout=30)
        swept = tree_checksum(outside) == before
        t.report.check(
            swept,
            "retention.sweep with warm/ a symlink to another directory deleted files there "
            f"(answer {code}: {str(answer)[:160]}); memd/retention.py plan_sweep/delete_expired follow warm/ itself",
        )
        if not swept:
            _replant_warmdir(outside)
    t.sum = tree_checksum(outside)
    restored = restore_through_symlink(t, outside)
    t.plants.append(
        f"warm/ -> dir: write {codes}, sweep {'left it alone' if swept else 'DELETED outside files'}, "
        f"restore {'left it alone' if restored else 'DELETED outside files'}"
    )


def restore_through_symlink(t: Tally, outside: Path) -> bool:
    """snapshot.restore of warm/ at a snapshot that had no warm file, with warm/ now a symlink to a directory."""
    ws = Path(t.d.config["workspaces"]["gamma"]["path"])
    t.call("hot.note", workspace="gamma", text="before any warm entry")
    code, first = t.call("snapshot.run", workspace="gamma", reason="hot only")
    rev = first.get("rev") if code == OK and isinstance(first, dict) else None
    if not rev:
        t.report.fail(f"could not take the first snapshot of gamma: {first}")
        return True
    t.call("warm.log", workspace="gamma", action="now warm has a file")
    t.call("snapshot.run", workspace="gamma", reason="with warm")
    before = tree_checksum(outside)
    with _swapped(ws / "warm", lambda p: os.symlink(outside / "warmdir", p, target_is_directory=True)):
        code, answer = t.call("snapshot.restore", workspace="gamma", rev=rev, paths=["warm"], timeout=30)
        left = sorted(os.listdir(outside / "warmdir"))
    restored = tree_checksum(outside) == before
    t.report.check(
        restored,
        f"snapshot.restore of warm/ at {rev[:12]} (no warm files then) with warm/ a symlink to another directory "
        f"deleted the files there: {left} left (answer {code}: {str(answer)[:100]}); memd/batch.py "
        "restore_tree walks base.rglob() through the symlinked tier directory and unlinks what it finds",
    )
    if not restored:
        _replant_warmdir(outside)
        t.sum = tree_checksum(outside)
    return restored


def _replant_warmdir(outside: Path) -> None:
    (outside / "warmdir").mkdir(exist_ok=True)
    (outside / "warmdir" / "2000-01-01.md").write_text("# Activity Log 2000-01-01\n\n### 10:00:00 - precious\n\n")
    (outside / "warmdir" / "keep.txt").write_text("keep\n")


def plant_old_day(t: Tally, ws: Path, outside: Path) -> None:
    link = ws / "warm" / "2000-01-02.md"
    os.symlink(outside / "old.md", link)
    try:
        code, answer = t.call("retention.sweep", workspace="alpha", timeout=30)
        removed = (answer or {}).get("results", [{}])[0].get("removed", []) if code == OK else []
        t.report.check("2000-01-02.md" not in removed and link.is_symlink(), f"sweep removed a symlinked day: {answer}")
    finally:
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
    t.plants.append(f"old day file -> file: sweep {'ok' if code == OK else code}, symlink kept")


def plant_fifo(t: Tally, ws: Path, outside: Path) -> None:
    today = _today_file(ws)
    fifo = outside / "fifo"
    results = []
    for how in ("symlink to a FIFO", "a FIFO"):
        if how == "a FIFO":
            make = os.mkfifo
        else:

            def make(p: Path) -> None:
                os.symlink(fifo, p)

        with _swapped(today, make):
            done: dict[str, Any] = {}

            def write(done: dict[str, Any] = done) -> None:
                done["r"] = t.call("warm.log", timeout=4, workspace="alpha", action="f")

            th = threading.Thread(target=write, daemon=True)
            th.start()
            th.join(5)
            ping = t.d.ping(2)
            other = t.call("warm.log", timeout=2, workspace="beta", action="beta still served")[0]
            answered = done.get("r", (-1, ""))[0]
            results.append(f"{how}: write {answered}, ping {'ok' if ping else 'NO ANSWER'}, other workspace {other}")
            if not ping:
                t.report.fail(
                    f"warm/<today>.md as {how}: the whole daemon stops answering (ping times out): "
                    "memd/tiers/warm_store.py _ends_with_newline opens the day file with the builtin open(), which "
                    "follows the symlink and blocks on the FIFO on the event loop thread"
                )
            elif answered == -1:
                t.report.fail(
                    f"warm/<today>.md as {how}: the write never gets an answer (memd/fsio.py durable_append opens it "
                    "without O_NONBLOCK and a FIFO without reader blocks; the workspace's writer is stuck)"
                )
            _unblock(today if how == "a FIFO" else fifo)
            th.join(5)
        if t.responsive(f"after {how}"):
            code, answer = t.call("warm.log", workspace="alpha", action="after the FIFO", timeout=10)
            t.report.check(code == OK, f"after {how} was removed, alpha's writes still fail: {code} {answer}")
    t.plants.append("; ".join(results))


def _unblock(fifo: Path) -> None:
    """Open the other end of a FIFO memd may be blocked on, for either direction, and drain/close it."""
    for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
        with contextlib.suppress(OSError):
            fd = os.open(fifo, flags)
            time.sleep(0.2)
            with contextlib.suppress(OSError):
                if flags & os.O_WRONLY == 0:
                    os.read(fd, 1 << 16)
            os.close(fd)


# --- markdown injection ---------------------------------------------------------------------------------------

ACTIONS = [
    "x\n## X", "### 12:00:00 - fake", "```", "Result: x", "x\r\n### 13:00:00 - fake2", "\\", "a\\nb", "# Activity Log",
    "- [2020-01-01] fake", "``` python", "\u2028### 12:00:00 - sep", "\x0b\x0c", "trailing \\", "   ",
]  # fmt: skip
DETAILS = [
    {"#k": "v", "`k": "v", "Result": "x", "k: v": "a: b", "k\nk2": "v\n### 12:00:00 - fake"},
    {"```": "```", "\\": "\\\\", "Result:": "Result: y", "": "empty key"},
]
CATEGORIES = ["C\n## Injected", "## C", "C ```", "C\n- [2020-01-01] fake", "```", "# Agent Memory", "C\\"]
LEARNINGS = ["x\n## Y\n- [2020-01-01] fake", "```", "- [2020-01-01] fake", "## Z", "a\r\nb", "\\n"]


def injection(t: Tally) -> None:
    ws = "beta"
    root = Path(t.d.config["workspaces"][ws]["path"])
    before = verify.inspect(root)
    n_entries, n_learnings = len(before.entries), len(before.learnings)
    headings = {lr.category for lr in before.learnings}
    sent_entries: list[tuple[str, tuple[tuple[str, str], ...], str | None]] = []
    for i, action in enumerate(ACTIONS):
        details = DETAILS[i % len(DETAILS)] if i % 3 == 0 else {}
        result = "\n### 14:00:00 - fake3" if i % 2 else None
        params: dict[str, Any] = {"action": action, "details": details}
        if result is not None:
            params["result"] = result
        code, answer = t.call("warm.log", workspace=ws, **params)
        if code == OK:
            sent_entries.append((action, tuple((k, str(v)) for k, v in details.items()), result))
        elif code != -32602:
            t.report.fail(f"warm.log {action!r}: answered {code}: {answer}")
    sent_learnings = []
    for category in CATEGORIES:
        for learning in LEARNINGS:
            code, answer = t.call("cold.learn", workspace=ws, category=category, learning=learning)
            if code == OK:
                sent_learnings.append((category.strip(), learning))
            elif code != -32602:
                t.report.fail(f"cold.learn {category!r}/{learning!r}: answered {code}: {answer}")
    after = verify.inspect(root)
    errors = list(after.problems)
    new_entries = after.entries[n_entries:]
    if len(after.entries) - n_entries != len(sent_entries):
        errors.append(f"{len(sent_entries)} entries written, {len(after.entries) - n_entries} appeared")
    for (action, details, result), entry in zip(sent_entries, new_entries, strict=False):
        if (entry.action, entry.details, entry.result) != (action, details, result) or entry.extra:
            errors.append(f"entry {action!r} read back as {entry!r:.200}")
    wanted = set(sent_learnings)
    got = [(lr.category, lr.text) for lr in after.learnings if (lr.category, lr.text) in wanted]
    if len(after.learnings) - n_learnings != len(sent_learnings):
        errors.append(f"{len(sent_learnings)} learnings written, {len(after.learnings) - n_learnings} appeared")
    if len(got) != len(sent_learnings):
        errors.append(f"learnings read back: {len(got)} of {len(sent_learnings)} exact")
    expected_headings = headings | {c for c, _ in sent_learnings}
    found_headings = {lr.category for lr in after.learnings}
    if found_headings != expected_headings:
        errors.append(f"sections {sorted(found_headings - expected_headings)} appeared from nowhere")
    for e in errors[:10]:
        t.report.fail(f"markdown injection: {e}")
    t.structure_errors = len(errors)
    t.injection = (
        f"{len(sent_entries)} hostile warm entries, {len(sent_learnings)} hostile learnings in "
        f"{len({c for c, _ in sent_learnings})} categories: {len(errors)} structural changes"
    )
