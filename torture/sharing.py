"""Scenario: one writer per workspace whatever the configuration, and a workspace pinned to its directory
(contracts 2, 6 and 8; issue 12).

  two-daemons  Daemon A serves workspace `shared`; daemon B, with its own state dir and socket, is configured with
               the same path and with a workspace of its own. Agents write through both (and to B's own). B must
               refuse `shared` with an error naming A's pid (in the answer or in status) and keep serving `own`;
               no acknowledged write may be lost on either. Then daemon C, configured with A's socket path, is
               started: it must not delete or take over the socket A is serving.
  two-names    The same directory under two names in one config (`alpha` and `beta`, a symlink to it; and
               `alpha` and `gamma`, a path through `..`): `memd config check` must refuse both, naming both names,
               and so must the daemon at start (when it starts anyway, agents write through both names and nothing
               acknowledged may be lost). A daemon serving `alpha` must reject a `config.reload` that adds `beta`,
               and must not serve `alpha`'s directory a second time as a workspace discovered under a discovery root.
  swap         While agents write to `alice`, `bob` and `carol`, alice's directory is replaced by a symlink to bob's
               directory, and carol's and dave's (dave never wrote, so it has no snapshot repository yet) by a
               symlink to an empty directory. Then writes, a retention sweep and a snapshot are asked of each.
               alice, carol and dave must fail with a storage error that status shows; nothing may be written into
               bob's files or the empty directory (no `git init` there either), no sweep of alice may delete bob's
               expired day file (expired by alice's retention, not bob's), bob must keep being served, and every
               write acknowledged before the swap must be in alice's and carol's own directories.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from torture import verify
from torture.lib import PYTHON, Context, Daemon, Report, RpcError, Writers, base_config, listing, wait_until

BIG_BUDGET = {  # no checkpoint: the accounting is exact
    "model_window": 4_000_000,
    "hot": 1_000_000,
    "warm": 1_000_000,
    "cold": 1_000_000,
    "checkpoint_threshold": 1.0,
    "checkpoint_target": 0.5,
}
MIX = "w=3,h=3,c=2,d=2"
RATE = 40


def run(ctx: Context) -> Report:
    report = Report("sharing")
    parts: dict[str, Callable[[Context, Report], None]] = {
        "two-daemons": two_daemons,
        "two-names": two_names,
        "swap": swap,
    }
    for part, fn in parts.items():
        if ctx.wants("sharing", part):
            t0 = time.monotonic()
            try:
                fn(ctx, report)
            except (RuntimeError, RpcError, OSError, TimeoutError) as exc:
                report.fail(f"{part}: {type(exc).__name__}: {exc}")
            ctx.log(f"sharing:{part} took {time.monotonic() - t0:.1f} s")
    report.summary = "one writer per workspace, pinned" if not report.failures else ""
    return report


# --- helpers ----------------------------------------------------------------------------------------------------


def _tiers(*dirs: Path) -> None:
    for d in dirs:
        for tier in ("hot", "warm", "cold"):
            (d / tier).mkdir(parents=True, exist_ok=True)


def _stream(ctx: Context, d: Daemon, name: str, out: Path, clients: list[str], duration: float) -> Writers:
    writers = Writers(
        ctx, d.socket_path, name, out, clients, [2] * len(clients), mix=MIX, wait_go=False,
        extra=["--duration", f"{duration:.1f}", "--rate", str(RATE)],
    )  # fmt: skip
    return writers


def _ledger(*outs: Path) -> verify.Ledger:
    ledger = verify.Ledger()
    for out in outs:
        if out.is_dir():
            ledger.load(out)
    return ledger


def _start_or_exit(d: Daemon, timeout: float = 30.0) -> bool:
    """Start the daemon; True when it serves, False when it exited (refused its config)."""
    d.spawn()
    wait_until(lambda: not d.alive() or d.ping(1.0), timeout, 0.05)
    if d.alive() and not d.ping(2.0):
        raise RuntimeError(f"daemon neither serves nor exits after {timeout:.0f} s:\n{d.log_tail(10)}")
    return d.alive()


def _answer(d: Daemon, method: str, **params: Any) -> tuple[int, Any]:
    """(0, result) or (error code, error object)."""
    response = d.request(method, timeout=30, **params)
    if "error" in response:
        return int(response["error"].get("code", 0)), response["error"]
    return 0, response.get("result")


def _errors_in(entry: Any, where: str = "") -> list[str]:
    """Non-empty values under keys that speak of an error, a fault or a refusal, anywhere in a status entry."""
    found: list[str] = []
    items = entry.items() if isinstance(entry, dict) else enumerate(entry) if isinstance(entry, list) else []
    for key, value in items:
        if re.search(r"error|fault|refus", str(key)) and value not in (None, "", False, 0, {}, []):
            found.append(f"{where}{key}: {json.dumps(value)[:200]}")
        elif isinstance(value, dict | list):
            found += _errors_in(value, f"{where}{key}.")
    return found


def _did_something(method: str, result: Any) -> bool:
    """A write answered with success; a snapshot that committed; a sweep that removed something."""
    if method == "snapshot.run":
        return bool((result or {}).get("created") or (result or {}).get("rev"))
    if method == "retention.sweep":
        return any(r.get("removed") for r in (result or {}).get("results") or [result or {}])
    return True


def _names_pid(text: str, pid: int) -> bool:
    return re.search(rf"(?<![0-9]){pid}(?![0-9])", text) is not None


def _lost_summary(acc: verify.Accounting, limit: int = 12) -> str:
    return ", ".join(acc.lost[:limit]) + (f" and {len(acc.lost) - limit} more" if len(acc.lost) > limit else "")


# --- two daemons, one workspace ---------------------------------------------------------------------------------


def two_daemons(ctx: Context, report: Report) -> None:
    root = ctx.dir("share")
    shared, own = root / "ws" / "shared", root / "ws" / "own"
    _tiers(shared, own)
    duration = ctx.seconds(6.0, 1.5)
    a = Daemon(ctx, root / "a", base_config(root / "a", {"shared": shared}, budget=BIG_BUDGET))
    b = Daemon(ctx, root / "b", base_config(root / "b", {"shared": shared, "own": own}, budget=BIG_BUDGET))
    outs = {k: root / f"acks-{k}" for k in ("a", "b", "own")}
    writers: list[Writers] = []
    c: Daemon | None = None
    try:
        a.start()
        if not _start_or_exit(b):
            report.fail(
                f"two-daemons: the second daemon exited (rc {b.returncode()}) instead of refusing only the held "
                f"workspace and serving its other one:\n{b.log_tail(8)}"
            )
            return
        code, probe = _answer(b, "hot.get", workspace="shared")
        status = b.call("status")
        entry = status.get("workspaces", {}).get("shared")
        status_text = json.dumps({k: v for k, v in status.items() if k != "pid"})
        writers = [
            _stream(ctx, a, "shared", outs["a"], ["sa0", "sa1"], duration),
            _stream(ctx, b, "shared", outs["b"], ["sb0", "sb1"], duration),
            _stream(ctx, b, "own", outs["own"], ["so0"], duration),
        ]
        c, before = newcomer(ctx, a, root)  # while the writers run: they hold connections to A and B
        killed = sum(w.wait(duration + 60) for w in writers)
        report.check(killed == 0, f"two-daemons: {killed} writers did not end in time")
        check_takeover(report, a, c, before)
        c.close()
        for d in (b, a):
            rc = d.stop()
            report.check(rc == 0, f"two-daemons: daemon pid {d.pid} stopped with {rc}:\n{d.log_tail(8)}")
    finally:
        for w in writers:
            w.close()
        for daemon in (c, b, a):
            if daemon is not None:
                daemon.close()

    through_a, through_b = _ledger(outs["a"]), _ledger(outs["b"])
    acc = verify.account(verify.inspect(shared), _ledger(outs["a"], outs["b"]))
    own_acc = verify.account(verify.inspect(own), _ledger(outs["own"]))
    refused = code != 0 and not through_b.acked
    named = _names_pid(json.dumps(probe), a.pid) or _names_pid(status_text, a.pid)
    report.check(
        not through_b.acked,
        f"two-daemons: the second daemon (pid {b.pid}) served workspace 'shared', which daemon pid {a.pid} holds: "
        f"{len(through_b.acked)} writes acknowledged through it (hot.get answered {code or 'ok'})",
    )
    if code != 0:
        report.check(
            named,
            f"two-daemons: the second daemon refuses 'shared' without naming the holder pid {a.pid}: "
            f"{json.dumps(probe)[:300]}; status entry {json.dumps(entry)[:300]}",
        )
    report.check(
        not acc.lost,
        f"two-daemons: {_labels(acc)} of {acc.checked} acknowledged writes lost on the workspace both daemons "
        f"wrote ({len(through_a.acked)} acked through pid {a.pid}, {len(through_b.acked)} through pid {b.pid}): "
        + _lost_summary(acc),
    )
    report.check(bool(own_acc.checked), "two-daemons: the second daemon acknowledged nothing on its own workspace")
    report.check(not own_acc.lost, f"two-daemons: lost on the second daemon's own workspace: {_lost_summary(own_acc)}")
    for problem in verify.inspect(shared).problems + verify.inspect(own).problems:
        report.fail(f"two-daemons: {problem}")
    verdict = (
        f"refused ({code}{', names holder pid' if named else ', holder pid NOT named'})" if refused else "SERVED it"
    )
    report.figure(
        "two daemons, one path",
        f"first {len(through_a.acked):,} acked; second {verdict}: {len(through_b.acked):,} acked there, "
        f"{len(through_b.errors):,} refused; {_labels(acc):,} of {acc.checked:,} acked lost; second's own "
        f"workspace {own_acc.checked:,} acked, {len(own_acc.lost)} lost",
    )


def newcomer(ctx: Context, a: Daemon, root: Path) -> tuple[Daemon, int]:
    """Start a third daemon (own state dir) configured with the socket path daemon A is serving."""
    config = base_config(root / "c", {"cw": root / "ws" / "cw"})
    config["server"]["socket"] = str(a.socket_path)
    before = os.stat(a.socket_path).st_ino
    c = Daemon(ctx, root / "c", config)
    c.spawn()
    return c, before


def check_takeover(report: Report, a: Daemon, c: Daemon, before: int) -> None:
    def settled() -> bool:
        if not c.alive():
            return True
        try:
            return bool(a.call("status", timeout=2)["pid"] != a.pid)
        except (OSError, RpcError, ValueError, ConnectionError, TimeoutError):
            return True

    wait_until(settled, 15.0, 0.1)
    time.sleep(0.3)
    try:
        serving: Any = a.call("status", timeout=5)["pid"]
    except (OSError, RpcError, ValueError, ConnectionError, TimeoutError) as exc:
        serving = f"nobody ({type(exc).__name__})"
    inode = os.stat(a.socket_path).st_ino if os.path.exists(a.socket_path) else None
    state = f"exited rc {c.returncode()}" if not c.alive() else "still running"
    held = serving == a.pid and inode == before
    report.check(
        held,
        f"two-daemons: a daemon configured with the socket path pid {a.pid} serves took it over: the socket now "
        f"answers as {serving}, inode {before} -> {inode} (the newcomer {state}):\n{c.log_tail(5)}",
    )
    report.figure("same socket path", f"newcomer {state}; the socket still answers as the first daemon: {held}")


# --- the same directory under two names -------------------------------------------------------------------------


def two_names(ctx: Context, report: Report) -> None:
    root = ctx.dir("names")
    w = root / "ws" / "wdir"
    _tiers(w)
    (root / "ws" / "sub").mkdir()
    alias = root / "alias"
    os.symlink(w, alias, target_is_directory=True)
    dotdot = Path(f"{root}/ws/sub/../wdir")  # Path keeps the ".."
    rows: list[str] = []
    duration = ctx.seconds(4.0, 1.5)

    # config check, both spellings (the two checks run side by side)
    checks = {}
    for other, path in (("beta", alias), ("gamma", dotdot)):
        d = Daemon(ctx, root / f"check-{other}", base_config(root / f"check-{other}", {"alpha": w, other: path}))
        args = [PYTHON, "-m", "memd", "--config", str(d.config_path), "config", "check"]
        checks[other] = (path, ctx.procs.spawn(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=d.env))
    for other, (path, proc) in checks.items():
        out, _ = proc.communicate(timeout=60)
        text = out.decode(errors="replace")
        verdict = _refusal(proc.returncode != 0, text, other, symlinked=other == "beta")
        report.check(
            not verdict.isupper(),
            f"two-names: `memd config check` with 'alpha' = {w} and {other!r} = {path} (the same directory) exited "
            f"{proc.returncode}: {verdict}: {text.strip()[-300:]!r}",
        )
        rows.append(f"config check ({'symlink' if other == 'beta' else '..'}): {verdict}")

    # start with both names (the `..` spelling: no symlink for a daemon to object to)
    d = Daemon(ctx, root / "d1", base_config(root / "d1", {"alpha": w, "gamma": dotdot}, budget=BIG_BUDGET))
    outs = {k: root / f"acks-{k}" for k in ("alpha", "gamma", "disc-alpha", "disc-wdir")}
    try:
        if _start_or_exit(d):
            writers = [
                _stream(ctx, d, "alpha", outs["alpha"], ["na0", "na1"], duration),
                _stream(ctx, d, "gamma", outs["gamma"], ["ng0", "ng1"], duration),
            ]
            for wr in writers:
                wr.wait(duration + 60)
            d.stop()
            served = {k: len(_ledger(outs[k]).acked) for k in ("alpha", "gamma")}
            acc = verify.account(verify.inspect(w), _ledger(outs["alpha"], outs["gamma"]))
            report.check(
                not (served["alpha"] and served["gamma"]),
                f"two-names: the daemon started with the same directory as 'alpha' and 'gamma' ({dotdot}) and served "
                f"both: {served['alpha']} writes acked through alpha, {served['gamma']} through gamma",
            )
            report.check(
                not acc.lost,
                f"two-names: {_labels(acc)} of {acc.checked} acked writes lost through two names: "
                + _lost_summary(acc),
            )
            rows.append(f"start: SERVED both ({served['alpha']} + {served['gamma']} acked, {_labels(acc)} lost)")
        else:
            verdict = _refusal(True, d.log_text(), "gamma", symlinked=False)
            report.check(not verdict.isupper(), f"two-names: the daemon {verdict} at start:\n{d.log_tail(5)}")
            rows.append(f"start: {verdict} (rc {d.returncode()})")
    finally:
        d.close()

    # a running daemon: the directory discovered under a root, and a reload that adds a second name
    config = base_config(root / "d2", {"alpha": w}, budget=BIG_BUDGET, discovery={"roots": [str(root / "ws")]})
    d = Daemon(ctx, root / "d2", config)
    try:
        d.start()
        names = sorted(d.call("status")["workspaces"])
        if "wdir" in names:
            writers = [
                _stream(ctx, d, "alpha", outs["disc-alpha"], ["da0"], duration),
                _stream(ctx, d, "wdir", outs["disc-wdir"], ["dw0"], duration),
            ]
            for wr in writers:
                wr.wait(duration + 60)
        acc = verify.account(verify.inspect(w), _ledger(outs["disc-alpha"], outs["disc-wdir"]))
        report.check(
            "wdir" not in names,
            f"two-names: configured 'alpha' = {w} is also served as discovered workspace 'wdir' (discovery root "
            f"{root / 'ws'}); after writes through both, {_labels(acc)} acked writes lost: " + _lost_summary(acc),
        )
        rows.append(f"discovery overlap: {'SERVED twice' if 'wdir' in names else 'not served twice'}")
        for other, path in (("beta", alias), ("gamma", dotdot)):
            new = json.loads(json.dumps(config))
            new["workspaces"][other] = {"path": str(path)}
            d.write_config(new)
            code, answer = _answer(d, "config.reload")
            text = json.dumps(answer)
            rejected = code == 0 and isinstance(answer, dict) and answer.get("reloaded") is False
            verdict = _refusal(rejected, text, other, symlinked=other == "beta")
            report.check(
                not verdict.isupper(),
                f"two-names: config.reload adding {other!r} = {path} (alpha's directory): {verdict}: {text[:300]}",
            )
            rows.append(f"reload adding {'a symlinked' if other == 'beta' else 'a ..'} name: {verdict}")
        d.write_config(config)
        d.stop()
    finally:
        d.close()
    report.figure("same directory, two names", "; ".join(rows))


def _refusal(refused: bool, text: str, other: str, symlinked: bool) -> str:
    """How a configuration naming alpha's directory a second time (as `other`) was treated; upper case: a failure.
    Both names must be in the error; where the second path is a symlink, refusing the symlink as such also does."""
    if not refused:
        return "ACCEPTED"
    if "alpha" in text and other in text:
        return "refused, both names given"
    if symlinked and other in text and "symlink" in text:
        return "refused as a symlink"
    return "REFUSED WITHOUT NAMING BOTH"


def _labels_in(state: verify.WsState) -> set[str]:
    """Every writer label in a workspace's files (warm actions, notes, decisions, learnings)."""
    found = {e.action.removeprefix("decision: ") for e in state.entries}
    found |= {str(n.get("text")) for n in state.notes} | {str(d.get("action")) for d in state.decisions}
    found |= {lr.text for lr in state.learnings}
    return {x for x in found if verify.LABEL_RE.fullmatch(x)}


def _labels(acc: verify.Accounting) -> int:
    """Distinct labels lost (a decision counts once, though it is missing from hot and from warm)."""
    return len({x.split()[0] for x in acc.lost})


# --- a workspace directory swapped for a symlink ----------------------------------------------------------------


def swap(ctx: Context, report: Report) -> None:
    root = ctx.dir("swap")
    alice, bob, carol, dave, empty = (root / "ws" / n for n in ("alice", "bob", "carol", "dave", "empty"))
    _tiers(alice, bob, carol, dave)
    empty.mkdir(parents=True)
    expired = (datetime.now(UTC).date() - timedelta(days=30)).isoformat()
    planted = bob / "warm" / f"{expired}.md"
    planted_bytes = f"# Activity Log {expired}\n\n### 12:00:00 - bob-old-day\nResult: kept\n\n".encode()
    planted.write_bytes(planted_bytes)
    config = base_config(root, {"alice": alice, "bob": bob, "carol": carol, "dave": dave}, budget=BIG_BUDGET)
    for name in ("alice", "carol", "dave"):
        config["workspaces"][name]["warm"] = {"retention_days": 1}
    config["workspaces"]["bob"]["warm"] = {"retention_days": 3650}
    duration = ctx.seconds(6.0, 1.5)
    d = Daemon(ctx, root / "d", config)
    outs = {k: root / f"acks-{k}" for k in ("alice", "bob", "carol")}
    clients = {"alice": ["al0", "al1"], "bob": ["bo0", "bo1"], "carol": ["ca0"]}
    probes: dict[str, dict[str, tuple[int, Any]]] = {}
    writers: list[Writers] = []
    try:
        d.start()
        for name in ("alice", "bob", "carol"):
            d.call("snapshot.run", workspace=name)  # each has its own .git before the swap
        writers = [_stream(ctx, d, n, outs[n], clients[n], duration) for n in clients]
        time.sleep(duration / 3)
        os.rename(alice, alice.with_name("alice.orig"))
        os.symlink(bob, alice, target_is_directory=True)
        for name in ("carol", "dave"):  # dave: no write and no snapshot before the swap (no repository yet)
            os.rename(root / "ws" / name, root / "ws" / f"{name}.orig")
            os.symlink(empty, root / "ws" / name, target_is_directory=True)
        swapped_at = time.monotonic()
        for wr in writers:
            wr.wait(duration + 60)
        ctx.log(f"swap: writers ran {time.monotonic() - swapped_at:.1f} s after the swap")
        for name in ("alice", "carol", "dave"):
            probes[name] = {
                "warm.log": _answer(d, "warm.log", workspace=name, action=f"w-probe{name}-1"),
                "hot.note": _answer(d, "hot.note", workspace=name, text=f"h-probe{name}-2"),
                "cold.learn": _answer(
                    d, "cold.learn", workspace=name, category=f"Cprobe{name}", learning=f"c-probe{name}-3"
                ),
                "retention.sweep": _answer(d, "retention.sweep", workspace=name),
                "snapshot.run": _answer(d, "snapshot.run", workspace=name),
            }
        status = d.call("status")
        bob_after = _answer(d, "warm.log", workspace="bob", action="w-bobafter-1")
        d.stop()
    finally:
        for wr in writers:
            wr.close()
        d.close()

    rows = []
    targets = {"alice": "bob's directory", "carol": "an empty directory", "dave": "the same empty directory"}
    for name, target in targets.items():
        answered = {m: code for m, (code, _) in probes[name].items()}
        served = [m for m, (code, result) in probes[name].items() if code == 0 and _did_something(m, result)]
        report.check(
            not served,
            f"swap: with {name}'s directory replaced by a symlink to {target}, {', '.join(served)} on {name} "
            f"succeeded: {json.dumps({m: probes[name][m][1] for m in served})[:400]}",
        )
        shown = _errors_in(status["workspaces"].get(name)) or [
            x for x in _errors_in({k: v for k, v in status.items() if k != "workspaces"}) if name in x
        ]
        report.check(
            bool(shown),
            f"swap: status shows no storage error for {name}: {json.dumps(status['workspaces'].get(name))[:300]}",
        )
        rows.append(
            f"{name} -> {target}: {len(answered) - len(served)}/{len(answered)} probes refused "
            f"({', '.join(sorted({str(c) for c in answered.values()}))}), status "
            + (f"shows {shown[0][:60]}" if shown else "shows NO error")
        )

    # bob: untouched by alice, still served, its expired day kept
    bob_state = verify.inspect(bob)
    bob_acc = verify.account(bob_state, _ledger(outs["bob"]))
    in_bob = _labels_in(bob_state)
    foreign = sorted(x for x in in_bob if re.match(r"[whcd]-(al|probealice)", x))
    report.check(
        not foreign,
        f"swap: {len(foreign)} of alice's writes landed in bob's files: {', '.join(foreign[:12])}",
    )
    report.check(not bob_acc.lost, f"swap: bob lost acknowledged writes: {_lost_summary(bob_acc)}")
    for problem in bob_state.problems:
        report.fail(f"swap: bob: {problem}")
    day_kept = planted.exists() and planted.read_bytes() == planted_bytes
    report.check(
        day_kept,
        f"swap: bob's day file warm/{planted.name} (expired by alice's 1-day retention, not by bob's 3,650) was "
        f"{'changed' if planted.exists() else 'deleted'}: sweep of alice answered {probes['alice']['retention.sweep']}",
    )
    report.check(bob_after[0] == 0, f"swap: bob was not served after the swap: {bob_after}")

    # the empty directory: nothing written, no git init
    left = listing(empty)
    report.check(
        not left,
        f"swap: memd wrote into the empty directory carol and dave were swapped for: {left}"
        + (" (including a `git init`: .git)" if ".git" in left else ""),
    )

    # what was acknowledged before the swap is in the workspaces' own (moved) directories
    for name in ("alice", "carol"):
        acc = verify.account(verify.inspect(root / "ws" / f"{name}.orig"), _ledger(outs[name]))
        elsewhere = {x.split()[0] for x in acc.lost} & in_bob
        report.check(
            not acc.lost,
            f"swap: {_labels(acc)} writes acknowledged for {name} are not in {name}'s own directory"
            + (f" ({len(elsewhere)} of them in bob's files)" if elsewhere else "")
            + f": {_lost_summary(acc)}",
        )
        rows.append(f"{name}: {acc.checked:,} acked, {_labels(acc)} not in its own directory")
    rows.append(
        f"bob: {bob_acc.checked:,} acked, {_labels(bob_acc)} lost, {len(foreign)} of alice's writes in its files, "
        f"expired day {'kept' if day_kept else 'DELETED'}; empty dir {left or 'untouched'}"
    )
    report.figure("directory swap", "; ".join(rows))
