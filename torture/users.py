"""Scenario 6, other users: processes running as another uid (subprocess with user=65534, i.e. fork + setgroups +
setgid + setuid) against the socket, and the socket's permissions across restarts and reloads.

  * Defaults: memd creates the socket directory 0700 and the socket 0600, owned by its uid; `nobody` cannot even
    connect (EACCES). The modes hold after a kill -9 and restart, after SIGHUP and after config.reload.
  * Peer credentials (the socket opened to everyone, 0666, in a 0711 directory): `nobody` gets one -32002 line
    and the connection closes; once its uid is in server.allowed_uids (SIGHUP reload) it may ping and use a workspace
    without access lists, is refused (-32002) on a workspace whose writers/readers do not list it, may read one
    whose readers list it but not write, and may not call admin methods (config.reload) or sweep every workspace;
    status hides the workspaces it may not read. server.allowed_gids admits by the peer's primary gid.
The child clients run the system interpreter (/usr/bin/python3, stdlib only), which any uid can execute.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from torture.lib import Context, Daemon, Report, RpcError, base_config, wait_until

NOBODY = 65534
OTHER_GID = 12345
SYSTEM_PYTHON = "/usr/bin/python3"

CHILD = r"""
import json, os, socket, sys
path, requests = sys.argv[1], json.loads(sys.argv[2])
result = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "answers": []}
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
try:
    s.connect(path)
except OSError as exc:
    result["connect"] = f"{type(exc).__name__} errno {exc.errno}"
    print(json.dumps(result))
    sys.exit(0)
f = s.makefile("rb")
for n, (method, params) in enumerate(requests, 1):
    try:
        s.sendall((json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n").encode())
    except OSError as exc:
        pass
    line = f.readline()
    if not line:
        result["answers"].append({"closed": True})
        break
    result["answers"].append(json.loads(line))
print(json.dumps(result))
"""


def run(ctx: Context) -> Report:
    report = Report("users")
    if os.getuid() != 0:
        report.skipped = "needs root to start clients as another uid"
        return report
    try:
        pwd.getpwuid(NOBODY)
    except KeyError:
        report.skipped = f"no user {NOBODY} on this machine"
        return report
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        report.skipped = f"{SYSTEM_PYTHON} is missing: nothing for another uid to run"
        return report
    base = Path(tempfile.mkdtemp(prefix="memd-users-", dir="/tmp"))
    try:
        os.chmod(base, 0o711)  # others may traverse (not list) to reach a socket whose own modes allow it
        defaults(ctx, report, base / "a")
        peers(ctx, report, base / "b")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report.summary = "denied as configured" if not report.failures else ""
    return report


def child(ctx: Context, socket_path: Path, requests: list[tuple[str, dict[str, Any]]], **ids: Any) -> dict[str, Any]:
    kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": [], **ids}
    proc = ctx.procs.spawn(
        [SYSTEM_PYTHON, "-I", "-c", CHILD, str(socket_path), json.dumps(requests)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        **kwargs,
    )
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": "child timed out"}
    try:
        return dict(json.loads(out))
    except ValueError:
        return {"error": f"child failed: {err.decode(errors='replace')[-400:]}"}


def _mode(path: Path) -> str:
    st = os.stat(path)
    return f"{stat.S_IMODE(st.st_mode):04o} uid {st.st_uid}"


def defaults(ctx: Context, report: Report, root: Path) -> None:
    root.mkdir()
    os.chmod(root, 0o711)
    config = base_config(root, {"pub": root / "ws" / "pub"})
    d = Daemon(ctx, root / "d", config)
    observed = []
    try:
        d.start()
        for when in ("start", "kill -9 + restart", "SIGHUP", "config.reload"):
            if when == "kill -9 + restart":
                d.kill9()
                d.start()
            elif when == "SIGHUP":
                _sighup(d)
            elif when == "config.reload":
                d.call("config.reload")
            dir_mode, sock_mode = _mode(d.socket_path.parent), _mode(d.socket_path)
            observed.append(f"{when}: dir {dir_mode}, socket {sock_mode}")
            report.check(dir_mode == "0700 uid 0", f"after {when}: socket directory is {dir_mode}, not 0700")
            report.check(sock_mode == "0600 uid 0", f"after {when}: socket is {sock_mode}, not 0600")
            res = child(ctx, d.socket_path, [("ping", {})])
            report.check(
                res.get("uid") == NOBODY and "PermissionError" in str(res.get("connect")),
                f"after {when}: uid {NOBODY} was not refused at connect(): {res}",
            )
        d.stop()
    except (RuntimeError, RpcError, OSError) as exc:
        report.fail(f"default modes: {type(exc).__name__}: {exc}\n{d.log_tail(10)}")
    finally:
        d.close()
    report.figure("default modes", "; ".join(observed) + f"; uid {NOBODY} refused at connect() each time")


def peers(ctx: Context, report: Report, root: Path) -> None:
    root.mkdir()
    os.chmod(root, 0o711)
    run_dir = root / "run"
    run_dir.mkdir(mode=0o711)
    os.chmod(run_dir, 0o711)
    workspaces = {"pub": root / "ws" / "pub", "priv": root / "ws" / "priv", "ro": root / "ws" / "ro"}
    config = base_config(root, workspaces, server={"socket_mode": "0666"})
    config["workspaces"]["priv"]["writers"] = [OTHER_GID]
    config["workspaces"]["ro"]["readers"] = [NOBODY]
    d = Daemon(ctx, root / "d", config)
    rows = []
    try:
        d.start()
        res = child(ctx, d.socket_path, [("ping", {})])
        first = (res.get("answers") or [{}])[0]
        refused = (first.get("error") or {}).get("code") == -32002 and first.get("id", 0) is None
        closed = len(res.get("answers") or []) == 1 or (res.get("answers") or [{}, {}])[1].get("closed")
        report.check(refused and bool(closed), f"uid {NOBODY} not in allowed_uids was not refused with -32002: {res}")
        rows.append(f"not allowed: {'refused -32002, closed' if refused else res}")

        _reload(d, config, allowed_uids=[NOBODY])
        expect = [
            ("ping", {}, 0),
            ("status", {}, 0),
            ("warm.log", {"workspace": "pub", "action": "from nobody"}, 0),
            ("warm.log", {"workspace": "priv", "action": "from nobody"}, -32002),
            ("hot.get", {"workspace": "priv"}, -32002),
            ("hot.get", {"workspace": "ro"}, 0),
            ("warm.log", {"workspace": "ro", "action": "from nobody"}, -32002),
            ("config.reload", {}, -32002),
            ("retention.sweep", {}, -32002),
            ("retention.sweep", {"workspace": "pub", "dry_run": True}, 0),
        ]
        res = child(ctx, d.socket_path, [(m, p) for m, p, _ in expect])
        answers = res.get("answers") or []
        got = []
        for (method, params, want), answer in zip(expect, answers, strict=False):
            code = (answer.get("error") or {}).get("code", 0) if "closed" not in answer else "closed"
            got.append(code)
            report.check(code == want, f"allowed uid {NOBODY}: {method} {params} answered {code}, expected {want}")
        report.check(len(answers) == len(expect), f"allowed uid: {len(answers)} answers to {len(expect)} requests")
        if len(answers) > 1 and "result" in answers[1]:
            visible = sorted(answers[1]["result"].get("workspaces", {}))
            report.check(visible == ["pub", "ro"], f"status shows uid {NOBODY} the workspaces {visible}")
        matched = sum(1 for g, (_, _, w) in zip(got, expect, strict=False) if g == w)
        rows.append(f"allowed uid: {matched}/{len(expect)} as configured")

        _reload(d, config, allowed_uids=[], allowed_gids=[NOBODY])
        res = child(ctx, d.socket_path, [("ping", {})])
        ok = "result" in ((res.get("answers") or [{}])[0])
        report.check(ok, f"uid {NOBODY} with primary gid {NOBODY} in allowed_gids was refused: {res}")
        res = child(ctx, d.socket_path, [("ping", {})], group=OTHER_GID)
        denied = ((res.get("answers") or [{}])[0].get("error") or {}).get("code") == -32002
        report.check(denied, f"uid {NOBODY} with gid {OTHER_GID} (not allowed) was let in: {res}")
        res = child(ctx, d.socket_path, [("ping", {})], group=OTHER_GID, extra_groups=[NOBODY])
        supplementary = "result" in ((res.get("answers") or [{}])[0])
        rows.append(
            f"allowed gid: primary gid admitted, other gid refused, supplementary group "
            f"{'admitted' if supplementary else 'REFUSED'}"
        )
        report.check(  # docs/protocol.md section 1: a supplementary group counts (SO_PEERGROUPS)
            supplementary,
            f"uid {NOBODY} with gid {NOBODY} only as a supplementary group was refused, although "
            f"docs/protocol.md section 1 and config.example.toml say supplementary groups count: {res}",
        )
        # the modes after a crash and a reload, as configured
        d.kill9()
        d.start()
        _sighup(d)
        dir_mode, sock_mode = _mode(run_dir), _mode(d.socket_path)
        report.check(sock_mode == "0666 uid 0", f"socket mode after restart + SIGHUP is {sock_mode}, configured 0666")
        report.check(dir_mode == "0711 uid 0", f"existing socket directory changed to {dir_mode}")
        rows.append(f"after kill -9, restart and SIGHUP: dir {dir_mode}, socket {sock_mode}")
        d.stop()
    except (RuntimeError, RpcError, OSError) as exc:
        report.fail(f"peer credentials: {type(exc).__name__}: {exc}\n{d.log_tail(10)}")
    finally:
        d.close()
    report.figure("peer credentials", "; ".join(rows))


def _reload(d: Daemon, config: dict[str, Any], **server: Any) -> None:
    new = json.loads(json.dumps(config))
    new["server"].update(server)
    new["server"].setdefault("allowed_gids", [])
    d.write_config(new)
    _sighup(d)
    last = d.call("status")["last_reload"]
    if not last.get("reloaded"):
        raise RuntimeError(f"reload rejected: {last}")


def _sighup(d: Daemon) -> None:
    """SIGHUP, then wait (bounded) for the daemon to log that it reloaded."""
    marker = "configuration reloaded"
    before = d.log_text().count(marker) + d.log_text().count("reload rejected")
    os.kill(d.pid, signal.SIGHUP)
    done = wait_until(lambda: d.log_text().count(marker) + d.log_text().count("reload rejected") > before, 10.0, 0.05)
    if not done:
        raise RuntimeError("SIGHUP reload did not happen within 10 s")
