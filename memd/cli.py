"""The `memd` command: parse, call the client (or run the daemon), format. `--json` for machines.

Exit codes: 0 success; 1 the daemon answered with an error; 2 usage error; 3 the daemon is not reachable;
4 invalid configuration. Only this module prints and picks exit codes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memd import __version__
from memd.cli_call import CallUsageError, add_parsers, call_params
from memd.cli_format import human
from memd.client import Client, DaemonNotRunning, find_socket
from memd.config import Config, config_to_toml, load_config
from memd.errors import UNKNOWN_WORKSPACE, ConfigError, MemdError
from memd.locate import config_file

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_CONFIG = 0, 1, 2, 3, 4


class UsageError(Exception):
    """A command line that argparse accepted but that does not make sense (exit 2)."""


WS_HELP = "workspace name (as `memd workspaces` lists them)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memd", description="memd: a memory daemon for AI agents")
    parser.add_argument("--version", action="version", version=f"memd {__version__}")
    parser.add_argument("--config", help="config file (default: $MEMD_CONFIG, ~/.config/memd/config.toml, embedded)")
    parser.add_argument("--socket", help="daemon socket (default: $MEMD_SOCKET, then the config's server.socket)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON result")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # The same options are accepted after the command too (`memd run --config FILE`, as units write it).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="config file (as before the command)")
    common.add_argument("--socket", default=argparse.SUPPRESS, help="daemon socket (as before the command)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the raw JSON result")

    def add(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if "help" in kwargs:
            kwargs.setdefault("description", kwargs["help"])
        return sub.add_parser(name, parents=[common], **kwargs)

    def add_workspace(p: argparse.ArgumentParser) -> None:
        p.add_argument("workspace", help=WS_HELP)

    add("run", help="run the daemon in the foreground (what systemd starts)")
    add("ping", help="check that the daemon answers")
    p = add("status", help="daemon and per-workspace token usage")
    p.add_argument(
        "--summary", action="store_true", help="counts, and only the workspaces with a problem (cheap at thousands)"
    )
    add("metrics", help="Prometheus metrics (text exposition format)")
    add("workspaces", help="list workspaces")
    add("reload", help="re-read the config (returns when done or failed)")
    add("sockname", help="print the socket path the CLI would use")

    p = add("start-session", help="start or resume a session; prints the resume packet")
    add_workspace(p)
    p.add_argument("task", nargs="?", help="what the agent works on; a different task starts a fresh session")
    p.add_argument("--session-id", help="the session's id (default: generated, sess-YYYYMMDD-HHMMSS-xxxx)")
    p.add_argument("--topic", help="selects the relevant learnings (default: the task)")

    p = add("progress", help="update the current step, files and pending actions")
    add_workspace(p)
    p.add_argument("--step", help="the new current step (replaces the old one)")
    p.add_argument("--file", action="append", default=[], dest="files", metavar="FILE", help="a file modified (repeat)")
    p.add_argument(
        "--add", action="append", default=[], dest="pending_add", metavar="ACTION", help="add a pending action (repeat)"
    )
    p.add_argument(
        "--done",
        action="append",
        default=[],
        dest="pending_done",
        metavar="ACTION",
        help="mark a pending action done (repeat); one that was not pending is reported and exits 1",
    )

    p = add("decide", help="record a decision")
    add_workspace(p)
    p.add_argument("action", help="what was decided")
    p.add_argument("--reason", required=True, help="why (required)")
    p.add_argument("--risk", help="the risk it carries, e.g. low")

    p = add("note", help="add a working-context note to the hot tier")
    add_workspace(p)
    p.add_argument("text", help="the note")

    p = add("log", help="append an entry to today's warm log")
    add_workspace(p)
    p.add_argument("action", help="what was done (the entry's heading)")
    p.add_argument("--detail", action="append", default=[], metavar="KEY=VALUE", help="a detail line (repeat)")
    p.add_argument("--result", help="the outcome (the entry's Result: line)")

    p = add("learn", help="add a long-term learning to cold/MEMORY.md")
    add_workspace(p)
    p.add_argument("category", help="its section in cold/MEMORY.md, e.g. Performance")
    p.add_argument("text", help="the learning")

    for name, help_text in (
        ("context", "print the assembled context"),
        ("memory", "relevant cold learnings"),
    ):
        p = add(name, help=help_text)
        add_workspace(p)
        p.add_argument("--topic", help="selects the relevant learnings (default: the session's task)")
        if name == "context":
            p.add_argument("--all", action="store_true", help="everything, not trimmed to the tiers' token budgets")
            p.add_argument("--proposals", action="store_true", help="also the proposals of cold/PROPOSED.md")

    p = add(
        "search",
        help="search every tier (and archived days) of one workspace or of every one you may read",
        epilog='Query: words (all must match; "fixed" also finds "fix"), "a phrase", prefix*, a OR b, -excluded. '
        "With two or more words, the first names a workspace when memd serves one by that name; quote the whole "
        "query to search for it instead.",
    )
    p.add_argument("words", nargs="+", metavar="[WS] QUERY", help="a workspace (optional), then the query")
    p.add_argument("--tier", action="append", default=[], dest="tiers", choices=("hot", "warm", "cold"),
                   help="only this tier (repeat)")  # fmt: skip
    p.add_argument("--since", help="only items dated on or after this day, YYYY-MM-DD")
    p.add_argument("--until", help="only items dated on or before this day, YYYY-MM-DD")
    p.add_argument("--limit", type=int, help="most hits shown (default 20)")
    p.add_argument("--offset", type=int, help="hits skipped (the next page)")

    p = add("reindex", help="build the search index again from the files (every workspace: root and memd's uid)")
    p.add_argument("workspace", nargs="?", help="workspace name (default: every workspace)")

    p = add("hot", help="print the hot tier")
    add_workspace(p)
    p = add("recent", help="recent warm activity")
    add_workspace(p)
    p.add_argument("--days", type=int, help="calendar days back from today, today included (default: warm.recent_days)")

    p = add("day", help="one day of warm activity (from warm/ or the archive)")
    add_workspace(p)
    p.add_argument("date", help="the day, YYYY-MM-DD")

    p = add("proposals", help="candidate learnings retention proposed (cold/PROPOSED.md)")
    add_workspace(p)
    for name, help_text in (
        ("accept", "move a proposal into cold/MEMORY.md under its category"),
        ("reject", "drop a proposal from cold/PROPOSED.md"),
    ):
        p = add(name, help=help_text)
        add_workspace(p)
        p.add_argument("id", help="the proposal's id (from `memd proposals`)")

    p = add("sweep", help="run warm retention now (or list what it would remove)")
    p.add_argument("workspace", nargs="?", help="workspace name (default: every workspace)")
    p.add_argument("--dry-run", action="store_true", help="only list what a real sweep would remove")
    p.add_argument("--confirm", action="store_true",
                   help="sweep a workspace adopted with day files (only reports until one is confirmed)")  # fmt: skip

    p = add("snapshot", help="commit the workspace's state to its git history now")
    add_workspace(p)
    p.add_argument("--reason", help="recorded as the commit's Memd-Reason (default: requested)")

    p = add("history", help="snapshot commits, newest first")
    add_workspace(p)
    p.add_argument("path", nargs="?", help="only commits touching this path, e.g. hot/context.json or warm")
    p.add_argument("--limit", type=int, help="most commits shown (default 50)")

    p = add("diff", help="diff between two snapshots (or one and now)")
    add_workspace(p)
    p.add_argument("rev", help="the old revision, e.g. HEAD~1 or a commit from `memd history`")
    p.add_argument("rev2", nargs="?", help="the new revision (default: the files as they are now)")

    p = add("show", help="a file as it was at a snapshot: memd show WS REV:PATH")
    add_workspace(p)
    p.add_argument("spec", metavar="REV:PATH", help="a revision and a file path, e.g. HEAD~1:hot/context.json")

    p = add("restore", help="restore paths to a snapshot, as a new commit")
    add_workspace(p)
    p.add_argument("rev", help="the revision to bring files back to")
    p.add_argument("paths", nargs="*", help="paths to restore, e.g. hot (default: snapshot.paths)")

    p = add("push", help="push the workspace's snapshots to its remote now (after a divergence is fixed)")
    add_workspace(p)

    p = add("sync", help="sync the workspace with its git remote now: fetch, merge, push (docs/sync.md)")
    add_workspace(p)

    p = add(
        "checkpoint",
        help="compact hot context now: memd checkpoint WS | memd checkpoint show WS ID | memd checkpoint undo WS ID",
    )
    p.add_argument(
        "words",
        nargs="+",
        metavar="WS | show WS ID | undo WS ID",
        help="a workspace to compact now; or show/undo, a workspace and a checkpoint id (from `memd checkpoints`)",
    )
    p.add_argument("--if-needed", action="store_true", help="only when over the threshold and not backing off")

    p = add("checkpoints", help="list a workspace's checkpoints")
    add_workspace(p)

    add_parsers(sub, common)

    p = add("mcp", help="serve memd's tools to an agent host over MCP (stdio); docs/agents.md")
    p.add_argument("--workspace", help="the workspace (default: $MEMD_WORKSPACE, else the one bound to the project)")

    p = add("hook", help="an agent host's lifecycle hook: reads its JSON on stdin, never fails the host")
    p.add_argument("event", help="session-start, pre-compact, stop, session-end, prompt-submit (or the host's name)")
    p.add_argument("--host", required=True, choices=["claude", "codex", "gemini"], help="the agent host")
    p.add_argument("--workspace", help="the workspace (default: $MEMD_WORKSPACE, else the one bound to the cwd)")
    p.add_argument("--timeout", type=float, default=2.0, help="give up after this many seconds (default 2)")
    p.add_argument("--max-chars", type=int, help="most characters of context to inject (default: the host's limit)")

    p = add("config", help="check or show the configuration")
    config_sub = p.add_subparsers(dest="config_command", required=True, metavar="check | show")
    c = config_sub.add_parser(
        "check", parents=[common], help="validate a config file", description="validate a config file"
    )
    c.add_argument("file", nargs="?", help="the file to check (default: the one memd would use)")
    config_sub.add_parser(
        "show", parents=[common], help="print the effective config as TOML", description="print the effective config"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None) and _command_of(argv) == "hook":
            print("memd hook: bad command line (see `memd hook --help`); nothing done", file=sys.stderr)
            return EXIT_OK  # a hook never fails its host (exit 2 would block its action)
        raise
    env = dict(os.environ)
    config_path = config_file(env, args.config)
    if args.command == "hook":
        from memd.frontends import hook  # nothing of the daemon, and no MCP SDK: a hook starts fast

        workspace = args.workspace or env.get("MEMD_WORKSPACE") or None
        socket = lambda: find_socket(env, args.socket, config_path)  # noqa: E731 - its errors fail open in there
        return hook.run(
            args.event, args.host, socket, workspace, sys.stdin, sys.stdout, sys.stderr, args.timeout, args.max_chars
        )
    try:
        if args.command == "mcp":
            from memd.frontends.mcp_server import serve  # the MCP SDK is loaded only here

            return serve(find_socket(env, args.socket, config_path), args.workspace, env)
        if args.command == "config":
            return _config_command(args, config_path, env)
        if args.command == "run":
            from memd.daemon import run  # the daemon's imports are not needed by client commands

            try:
                return run(config_path, os.environ)
            except ConfigError:
                raise
            except MemdError as exc:
                print(f"memd: cannot start: {exc.message}", file=sys.stderr)
                return EXIT_ERROR
        config = load_config(config_path, env)  # an invalid file is refused (exit 4), as `memd run` would
        socket_path = find_socket(env, args.socket, config_path)  # what memd.client's users call too
        if args.command == "sockname":
            print(socket_path)
            return EXIT_OK
        with Client(socket_path) as client:
            return _client_command(args, client, config)
    except (UsageError, CallUsageError) as exc:
        print(f"memd: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"memd: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    except DaemonNotRunning as exc:
        print(f"memd: {exc.message}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except MemdError as exc:
        print(f"memd: error {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # the socket broke mid-call (daemon killed, timeout)
        print(f"memd: lost the connection to memd: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130


def _config_command(args: argparse.Namespace, config_path: Path | None, env: dict[str, str]) -> int:
    path = Path(args.file) if getattr(args, "file", None) else config_path
    config = load_config(path, env)
    if args.config_command == "check":
        names = ", ".join(config.workspaces)
        print(
            f"{path or '(embedded default)'}: ok, {len(config.workspaces)} workspace(s)"
            + (f": {names}" if names else "")
        )
    else:
        print(config_to_toml(config), end="")
    return EXIT_OK


def _command_of(argv: Sequence[str]) -> str | None:
    """The command word of a command line (the first argument that is neither an option nor an option's value)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--config", "--socket"):
            skip = True
        elif not word.startswith("-"):
            return word
    return None


def _client_command(args: argparse.Namespace, client: Client, config: Config) -> int:
    cmd = args.command
    ws = getattr(args, "workspace", None)
    if cmd == "call":
        method, params = call_params(args)
        print(json.dumps(client.call(method, **params), indent=2, ensure_ascii=False))
        return EXIT_OK
    if cmd == "ping":
        result = client.call("ping")
    elif cmd == "status":
        result = client.call("status", **_drop_none(summary=args.summary or None))
    elif cmd == "metrics":
        result = client.call("metrics")
    elif cmd == "workspaces":
        result = client.call("workspace.list")
    elif cmd == "reload":
        result = client.call("config.reload")
    elif cmd == "start-session":
        result = client.call(
            "session.start",
            **_drop_none(workspace=ws, task=args.task, session_id=args.session_id, topic=args.topic),
        )
    elif cmd == "progress":
        result = client.call(
            "progress.update",
            **_drop_none(
                workspace=ws,
                step=args.step,
                files=args.files,
                pending_add=args.pending_add,
                pending_done=args.pending_done,
            ),
        )
    elif cmd == "decide":
        result = client.call(
            "decision.record",
            **_drop_none(workspace=ws, action=args.action, reason=args.reason, risk=args.risk),
        )
    elif cmd == "note":
        result = client.call("hot.note", workspace=ws, text=args.text)
    elif cmd == "log":
        details = dict(_split_detail(d) for d in args.detail)
        result = client.call(
            "warm.log",
            **_drop_none(workspace=ws, action=args.action, details=details or None, result=args.result),
        )
    elif cmd == "learn":
        result = client.call("cold.learn", workspace=ws, category=args.category, learning=args.text)
    elif cmd == "context":
        options = _drop_none(topic=args.topic, all=args.all or None, proposals=args.proposals or None)
        result = client.call("context.get", workspace=ws, **options)
    elif cmd == "memory":
        result = client.call("cold.get", **_drop_none(workspace=ws, topic=args.topic))
    elif cmd == "search":
        result = _search(client, args)
    elif cmd == "reindex":
        result = client.call("memory.reindex", **_drop_none(workspace=ws))
    elif cmd == "hot":
        result = client.call("hot.get", workspace=ws)
    elif cmd == "recent":
        result = client.call("warm.recent", **_drop_none(workspace=ws, days=args.days))
    elif cmd == "day":
        result = client.call("warm.day", workspace=ws, date=args.date)
    elif cmd == "proposals":
        result = client.call("proposals.list", workspace=ws)
    elif cmd in ("accept", "reject"):
        result = client.call(f"proposals.{cmd}", workspace=ws, id=args.id)
    elif cmd == "sweep":
        result = client.call(
            "retention.sweep", **_drop_none(workspace=ws, dry_run=args.dry_run, confirm=args.confirm or None)
        )
    elif cmd == "snapshot":
        result = client.call("snapshot.run", **_drop_none(workspace=ws, reason=args.reason))
    elif cmd == "history":
        result = client.call("history.list", **_drop_none(workspace=ws, path=args.path, limit=args.limit))
    elif cmd == "diff":
        result = client.call("history.diff", **_drop_none(workspace=ws, rev=args.rev, rev2=args.rev2))
    elif cmd == "show":
        rev, sep, path = args.spec.partition(":")
        if not sep or not path:
            raise UsageError(f"expected REV:PATH (e.g. HEAD~1:hot/context.json), not {args.spec!r}")
        result = client.call("history.show", workspace=ws, rev=rev, path=path)
    elif cmd == "restore":
        result = client.call("snapshot.restore", **_drop_none(workspace=ws, rev=args.rev, paths=args.paths))
    elif cmd == "push":
        result = client.call("snapshot.push", workspace=ws)
    elif cmd == "sync":
        result = client.call("snapshot.sync", workspace=ws)
    elif cmd == "checkpoint":
        words = args.words
        if words[0] == "show" and len(words) == 3:
            cmd = "checkpoint-show"
            result = client.call("checkpoint.show", workspace=words[1], id=words[2])
        elif words[0] == "undo" and len(words) == 3:
            cmd = "checkpoint-undo"
            result = client.call("checkpoint.undo", workspace=words[1], id=words[2])
        elif len(words) == 1:
            result = client.call("checkpoint.run", workspace=words[0], force=not args.if_needed)
        else:
            raise UsageError("usage: memd checkpoint WS  |  memd checkpoint show WS ID  |  memd checkpoint undo WS ID")
    elif cmd == "checkpoints":
        result = client.call("checkpoint.list", workspace=ws)
    else:  # argparse only admits the commands above
        raise AssertionError(cmd)
    try:
        print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else human(cmd, result))
    except BrokenPipeError:  # `memd ... | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if cmd == "reload" and not result.get("reloaded"):
        return EXIT_ERROR
    if cmd == "progress" and result.get("not_pending"):
        # The rest of the update was applied; saying `ok` would hide that these were not marked done.
        pending = ", ".join(repr(a) for a in result.get("pending_actions", [])) or "none"
        missing = ", ".join(repr(a) for a in result["not_pending"])
        print(f"memd: not pending, so not marked done: {missing} (pending actions: {pending})", file=sys.stderr)
        return EXIT_ERROR
    if cmd == "push" and result.get("result") not in ("ok", "nothing to push"):
        return EXIT_ERROR
    if cmd == "sync" and (result.get("sync") or {}).get("state") != "ok":
        return EXIT_ERROR
    return EXIT_OK


def _search(client: Client, args: argparse.Namespace) -> Any:
    """`memd search [WS] QUERY`: with two or more words, the first is a workspace if memd serves one by that name
    (it says so: UnknownWorkspace), else every word is the query."""
    options = _drop_none(tiers=args.tiers, since=args.since, until=args.until, limit=args.limit, offset=args.offset)
    words: list[str] = args.words
    if len(words) > 1:
        try:
            return client.call("memory.search", workspace=words[0], query=" ".join(words[1:]), **options)
        except MemdError as exc:
            if exc.code != UNKNOWN_WORKSPACE:
                raise
    return client.call("memory.search", query=" ".join(words), **options)


def _drop_none(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None and v != []}


def _split_detail(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise UsageError(f"--detail {text!r}: expected KEY=VALUE")
    return key, value


if __name__ == "__main__":
    sys.exit(main())
